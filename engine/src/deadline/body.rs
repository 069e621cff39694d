//! The deadline of a request body: a rate it must keep on average once a
//! grace has passed since its head ([`BodyRate`]), however its bytes are
//! spaced. A read timeout alone bounds each wait, not the whole: a body
//! sent a byte at a time, each just within the timeout, would never end.

use std::error::Error;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Buf;
use http::{HeaderValue, StatusCode, header};
use http_body::{Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use tokio::time::{Instant, Sleep};

/// How fast a body must come: by `grace + n / per_sec` after its head, more
/// than `n` bytes of it have arrived (or it is whole). A body of `len`
/// bytes so has [`BodyRate::allowance`] in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyRate {
    grace: Duration,
    per_sec: u64,
}

impl BodyRate {
    /// `per_sec` bytes a second after `grace` (`per_sec` 0 is taken as 1).
    pub fn new(grace: Duration, per_sec: u64) -> Self {
        BodyRate {
            grace,
            per_sec: per_sec.max(1),
        }
    }

    /// The longest a body of `len` bytes may take from its head.
    pub fn allowance(&self, len: u64) -> Duration {
        let micros = u128::from(len) * 1_000_000 / u128::from(self.per_sec);
        self.grace.saturating_add(Duration::from_micros(
            u64::try_from(micros).unwrap_or(u64::MAX),
        ))
    }

    /// When a body whose head came at `start` must have more than
    /// `received` bytes.
    pub fn deadline(&self, start: Instant, received: u64) -> Instant {
        // Past what an Instant holds: a century is as good as never.
        start
            .checked_add(self.allowance(received))
            .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400))
    }

    /// The error of a body that fell behind with `received` bytes.
    pub fn timed_out(&self, received: u64) -> BodyTimedOut {
        BodyTimedOut {
            grace_ms: self.grace.as_millis() as u64,
            per_sec: self.per_sec,
            received,
        }
    }
}

/// A request body that fell behind its [`BodyRate`]: it is not read any
/// further, and the request is answered 408.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the request body came slower than {per_sec} bytes/s after a {grace_ms} ms grace ({received} bytes had come; http.body_min_bytes_per_sec, http.body_grace_ms)"
)]
pub struct BodyTimedOut {
    /// `http.body_grace_ms`.
    pub grace_ms: u64,
    /// `http.body_min_bytes_per_sec`.
    pub per_sec: u64,
    /// Bytes of the body that had come.
    pub received: u64,
}

impl BodyTimedOut {
    /// The `BodyTimedOut` behind `error`, if one is (looking through the
    /// errors that wrap it: axum's, `Limited`'s).
    pub fn find<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a BodyTimedOut> {
        let mut at = Some(error);
        while let Some(e) = at {
            if let Some(found) = e.downcast_ref::<BodyTimedOut>() {
                return Some(found);
            }
            at = e.source();
        }
        None
    }
}

/// A body bounded by a [`BodyRate`] from `start`: while it waits for bytes
/// past their deadline it fails with [`BodyTimedOut`] (counted once).
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    rate: BodyRate,
    start: Instant,
    received: u64,
    /// Made at the first wait; reset as bytes come.
    sleep: Option<Pin<Box<Sleep>>>,
    timed_out: Arc<AtomicBool>,
    counter: Counter,
}

impl<B> DeadlineBody<B> {
    /// `inner`, whose head came at `start`, bounded by `rate`; a timeout
    /// is counted in `counter` and raised in `timed_out`.
    pub fn new(
        inner: B,
        rate: BodyRate,
        start: Instant,
        counter: Counter,
        timed_out: Arc<AtomicBool>,
    ) -> Self {
        DeadlineBody {
            inner,
            rate,
            start,
            received: 0,
            sleep: None,
            timed_out,
            counter,
        }
    }
}

impl<B> HttpBody for DeadlineBody<B>
where
    B: HttpBody + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.timed_out.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(this.rate.timed_out(this.received).into())));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.remaining() as u64;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let deadline = this.rate.deadline(this.start, this.received);
                let sleep = match &mut this.sleep {
                    Some(sleep) => {
                        if sleep.deadline() != deadline {
                            sleep.as_mut().reset(deadline);
                        }
                        sleep
                    }
                    None => this
                        .sleep
                        .insert(Box::pin(tokio::time::sleep_until(deadline))),
                };
                ready!(sleep.as_mut().poll(cx));
                this.timed_out.store(true, Ordering::Relaxed);
                this.counter.inc();
                let error = this.rate.timed_out(this.received);
                tracing::debug!(error = %error, "request body too slow; answered 408");
                Poll::Ready(Some(Err(error.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The middleware of [`super::Deadlines::bound_bodies`]: the request's
/// body bounded (unless it is empty); when it fell behind, the answer is
/// 408 with `Connection: close`, the handler's own if it made one.
pub(super) async fn bound(
    State((rate, counter)): State<(BodyRate, Counter)>,
    req: Request,
    next: Next,
) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let timed_out = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&timed_out);
    let start = Instant::now();
    let req = req.map(|body| Body::new(DeadlineBody::new(body, rate, start, counter, flag)));
    let mut response = next.run(req).await;
    if !timed_out.load(Ordering::Relaxed) {
        return response;
    }
    if response.status() != StatusCode::REQUEST_TIMEOUT {
        response = too_slow(&rate.timed_out(0));
    }
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// 408 `body_timeout`, in the publish API's error form.
fn too_slow(error: &BodyTimedOut) -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        axum::Json(serde_json::json!({"error": {
            "code": "body_timeout",
            "message": format!("the request body came slower than {} bytes/s after a {} ms grace", error.per_sec, error.grace_ms),
        }})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[test]
    fn a_body_has_the_grace_and_its_size_at_the_rate() {
        let rate = BodyRate::new(Duration::from_secs(5), 240);
        assert_eq!(rate.allowance(0), Duration::from_secs(5));
        assert_eq!(rate.allowance(2400), Duration::from_secs(15));
        // 8 MiB, the default largest publish body: about 9.7 hours.
        assert_eq!(rate.allowance(8 << 20).as_secs(), 5 + (8 << 20) / 240);
        let start = Instant::now();
        assert_eq!(rate.deadline(start, 240), start + Duration::from_secs(6));
        // No overflow, however large.
        assert!(rate.deadline(start, u64::MAX) > start);
    }

    /// A body fed by hand: a channel of chunks.
    fn channel() -> (
        tokio::sync::mpsc::Sender<bytes::Bytes>,
        DeadlineBody<Body>,
        Counter,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(16);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
        });
        let counter = Counter::default();
        let body = DeadlineBody::new(
            Body::new(http_body_util::StreamBody::new(stream)),
            BodyRate::new(Duration::from_secs(1), 100),
            Instant::now(),
            counter.clone(),
            Arc::default(),
        );
        (tx, body, counter)
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_a_byte_at_a_time_is_cut_when_it_falls_behind_though_each_wait_is_short() {
        let (tx, body, counter) = channel();
        let started = Instant::now();
        // A byte every 900 ms: each wait is under a second, the rate is
        // 1.1 B/s against 100.
        let feeder = tokio::spawn(async move {
            loop {
                if tx.send(bytes::Bytes::from_static(b"x")).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(900)).await;
            }
        });
        let error = body.collect().await.unwrap_err();
        let found = BodyTimedOut::find(&*error).expect("a BodyTimedOut");
        // Bytes came at 0 and 900 ms; the third was due by the grace and
        // two bytes at the rate, 1 s + 20 ms, and would have come at 1.8 s.
        assert_eq!(found.received, 2);
        assert_eq!(started.elapsed(), Duration::from_millis(1020));
        assert_eq!(counter.get(), 1);
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_the_rate_is_whole() {
        let (tx, body, counter) = channel();
        // 10 bytes every 50 ms: 200 B/s, twice the rate, 10 s in all.
        let feeder = tokio::spawn(async move {
            for _ in 0..200 {
                tx.send(bytes::Bytes::from_static(b"0123456789"))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let whole = body.collect().await.unwrap().to_bytes();
        assert_eq!(whole.len(), 2000);
        assert_eq!(counter.get(), 0);
        feeder.await.unwrap();
    }
}
