//! [`Ordered`]: futures that finish in the order they were pushed, of which
//! only the oldest asks to be woken.
//!
//! The ingest keeps its forwards here. A forward is a publish, then the
//! broker's confirm; deliveries are acked in delivery order (one `basic.ack`
//! with `multiple` covers a delivery and every one before it), so a
//! confirm is only useful once the ones before it are in too. Waking the
//! ingest task for every forward's progress (its publish written, its
//! confirm in) costs a thread hand-off each, from lapin's I/O thread to a
//! tokio worker. So:
//!
//! - [`Ordered::push`] polls a new future once with a waker that does
//!   nothing: it starts (the publish is queued for the socket, in push
//!   order) but will not wake anyone;
//! - [`Ordered::poll_next`] polls only the oldest future, with the task's
//!   waker, and the next ones only once the oldest is done. A confirm that
//!   arrives early waits, at no cost, until the ones before it are in
//!   (the broker confirms in batches, so they mostly arrive together).
//!
//! ```text
//!  push:  f1 f2 f3 f4        (each polled once, silently)
//!  done:      f2    f4       poll_next: Pending, only f1 can wake the task
//!  done:  f1                 poll_next: f1, f2, then Pending on f3
//! ```
//!
//! A later future that fails is therefore noticed once the ones before it
//! are done: for forwards that is when the broker confirms them, or the
//! channel fails and fails them all.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Futures in push order; see the module docs. Unbounded by itself: the
/// caller bounds what it pushes (the ingest: the prefetch).
pub(crate) struct Ordered<F: Future> {
    queue: VecDeque<Slot<F>>,
}

enum Slot<F: Future> {
    Running(F),
    /// Finished when first polled, in [`Ordered::push`].
    Done(F::Output),
}

impl<F: Future + Unpin> Ordered<F> {
    /// Nothing in flight.
    pub(crate) fn new() -> Self {
        Ordered {
            queue: VecDeque::new(),
        }
    }

    /// Start `future` (poll it once, without a waker) and queue it behind
    /// the others.
    pub(crate) fn push(&mut self, mut future: F) {
        let mut cx = Context::from_waker(Waker::noop());
        let slot = match Pin::new(&mut future).poll(&mut cx) {
            Poll::Ready(output) => Slot::Done(output),
            Poll::Pending => Slot::Running(future),
        };
        self.queue.push_back(slot);
    }

    /// The oldest future's output once it is done; `Ready(None)` when
    /// nothing is queued. Only the oldest future registers `cx`'s waker.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        let output = match self.queue.front_mut() {
            None => return Poll::Ready(None),
            Some(Slot::Running(future)) => match Pin::new(future).poll(cx) {
                Poll::Ready(output) => output,
                Poll::Pending => return Poll::Pending,
            },
            Some(Slot::Done(_)) => match self.queue.pop_front() {
                Some(Slot::Done(output)) => return Poll::Ready(Some(output)),
                _ => unreachable!("the front slot was just matched as done"),
            },
        };
        self.queue.pop_front();
        Poll::Ready(Some(output))
    }

    /// Wait for the oldest future's output (`None` at once when empty).
    pub(crate) async fn next(&mut self) -> Option<F::Output> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// The oldest future's output if it is done now, without waiting.
    pub(crate) async fn next_ready(&mut self) -> Option<F::Output> {
        std::future::poll_fn(|cx| match self.poll_next(cx) {
            Poll::Ready(output) => Poll::Ready(output),
            Poll::Pending => Poll::Ready(None),
        })
        .await
    }

    /// Futures queued.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use tokio::sync::oneshot;

    use super::*;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    type Rx = oneshot::Receiver<u32>;

    fn queue(n: usize) -> (Ordered<Rx>, Vec<oneshot::Sender<u32>>) {
        let mut ordered = Ordered::new();
        let mut senders = Vec::new();
        for _ in 0..n {
            let (tx, rx) = oneshot::channel();
            ordered.push(rx);
            senders.push(tx);
        }
        (ordered, senders)
    }

    fn ok(poll: Poll<Option<Result<u32, oneshot::error::RecvError>>>) -> Poll<Option<u32>> {
        poll.map(|o| o.map(|r| r.expect("sender kept")))
    }

    #[test]
    fn outputs_come_in_push_order_and_only_the_oldest_wakes() {
        let (mut ordered, mut senders) = queue(3);
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Pending);

        // The second finishes first: nobody is woken, nothing comes out.
        senders.remove(1).send(2).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Pending);

        // The oldest finishes: one wake-up, then both come out in order.
        senders.remove(0).send(1).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Ready(Some(1)));
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Ready(Some(2)));
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Pending);
        assert_eq!(ordered.len(), 1);

        senders.remove(0).send(3).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Ready(Some(3)));
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Ready(None));
        assert!(ordered.is_empty());
    }

    #[test]
    fn a_future_done_when_pushed_keeps_its_place() {
        let mut ordered = Ordered::new();
        let (tx, rx) = oneshot::channel::<u32>();
        ordered.push(rx);
        let (done_tx, done_rx) = oneshot::channel();
        done_tx.send(2).unwrap();
        ordered.push(done_rx);
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Pending);
        tx.send(1).unwrap();
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Ready(Some(1)));
        assert_eq!(ok(ordered.poll_next(&mut cx)), Poll::Ready(Some(2)));
    }

    #[tokio::test]
    async fn next_ready_does_not_wait() {
        let (mut ordered, mut senders) = queue(2);
        assert!(ordered.next_ready().await.is_none());
        senders.remove(0).send(7).unwrap();
        assert_eq!(ordered.next_ready().await.map(Result::unwrap), Some(7));
        assert!(ordered.next_ready().await.is_none());
        senders.remove(0).send(8).unwrap();
        assert_eq!(ordered.next().await.map(Result::unwrap), Some(8));
        assert!(ordered.next().await.is_none());
    }
}
