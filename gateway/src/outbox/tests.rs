use std::collections::BTreeMap;

use bytes::Bytes;
use herald_protocol::envelope::Scope;

use super::*;

fn note(event: &str, size: usize) -> Arc<Notification> {
    Arc::new(Notification {
        id: "n".into(),
        scope: Scope::Global,
        users: vec![],
        clients: vec![],
        sites: vec![],
        event: event.into(),
        topic: None,
        content_type: "text/plain".into(),
        payload: Bytes::from(vec![b'x'; size]),
        payload_is_utf8: true,
        ttl: None,
        encodings: Default::default(),
        accepted: Default::default(),
    })
}

/// A mailbox on plain values: numbered messages, the oldest evicted
/// beyond `keep`, every eviction reported to the outbox as the hub does.
struct Mailbox {
    head: u64,
    keep: usize,
    buffer: BTreeMap<u64, Arc<Notification>>,
}

impl Mailbox {
    fn new(keep: usize) -> Self {
        Mailbox {
            head: 0,
            keep,
            buffer: BTreeMap::new(),
        }
    }

    /// Append and push, as `Hub::deliver` does; the eviction's loss.
    fn deliver(&mut self, o: &Outbox, n: &Arc<Notification>) -> (Pushed, Loss) {
        self.head += 1;
        self.buffer.insert(self.head, Arc::clone(n));
        let mut loss = Loss::None;
        while self.buffer.len() > self.keep {
            let (seq, old) = self.buffer.pop_first().unwrap();
            if o.needs(seq) {
                loss = o.evicted(seq, &old.event, false);
            }
        }
        (o.push(self.head, n), loss)
    }
}

impl Backlog for Mailbox {
    fn head(&self) -> u64 {
        self.head
    }

    fn get(&self, seq: u64) -> Option<Buffered<'_>> {
        self.buffer.get(&seq).map(|n| Buffered {
            event: &n.event,
            payload_len: n.payload.len(),
            expired: false,
        })
    }

    fn notification(&self, seq: u64) -> Option<Arc<Notification>> {
        self.buffer.get(&seq).cloned()
    }
}

fn sub(key: u32, id: &str, filter: &str) -> Subscription {
    Subscription {
        key,
        id: id.into(),
        filter: EventFilter::parse(filter).unwrap(),
    }
}

fn outbox(messages: usize, bytes: usize, when_full: WhenFull) -> Outbox {
    let o = Outbox::new(QueueLimits {
        messages,
        bytes,
        when_full,
    });
    o.subscribe(sub(0, "s", ""), None, None);
    o
}

/// What a session reads: every item, refilling from `m` whenever the
/// window runs dry, as `StompCore::pull` does.
fn drain(o: &Outbox, m: &Mailbox) -> Vec<(u64, Vec<Arc<str>>)> {
    let mut out = Vec::new();
    loop {
        let popped = match o.pop() {
            Some(p) => p,
            None if o.is_behind() => {
                o.refill(m);
                match o.pop() {
                    Some(p) => p,
                    None => break,
                }
            }
            None => break,
        };
        let seq = match popped.item {
            Item::Deliver { seq, .. } => seq,
            Item::Gap { seq, .. } => 1_000_000 + seq,
        };
        out.push((seq, popped.subscriptions.into_vec()));
    }
    out
}

fn seqs(read: &[(u64, Vec<Arc<str>>)]) -> Vec<u64> {
    read.iter().map(|(s, _)| *s).collect()
}

#[test]
fn nothing_is_queued_without_a_matching_subscription() {
    let o = Outbox::new(QueueLimits {
        messages: 4,
        bytes: 100,
        when_full: WhenFull::Disconnect,
    });
    assert_eq!(o.push(1, &note("a", 1)), Pushed::Filtered);
    o.subscribe(sub(0, "s", "chat.*"), None, None);
    assert_eq!(o.push(2, &note("order.x", 1)), Pushed::Filtered);
    assert_eq!(o.push(3, &note("chat.x", 1)), Pushed::Queued);
    assert_eq!(o.len(), 1);
}

#[test]
fn a_full_window_falls_behind_and_the_mailbox_refills_it_in_order() {
    let mut m = Mailbox::new(100);
    let o = outbox(4, 1000, WhenFull::Disconnect);
    let mut pushed = Vec::new();
    for _ in 0..50 {
        pushed.push(m.deliver(&o, &note("a", 1)).0);
    }
    assert_eq!(&pushed[..4], &[Pushed::Queued; 4]);
    assert_eq!(pushed[4], Pushed::Behind, "the fifth falls behind");
    assert!(pushed[5..].iter().all(|p| *p == Pushed::Deferred));
    assert_eq!(o.len(), 4, "the window holds its bound, not the burst");
    assert!(!o.is_cut());
    assert!(o.is_behind() && o.has_work());
    assert_eq!(seqs(&drain(&o, &m)), (1..=50).collect::<Vec<_>>());
    assert!(!o.is_behind(), "caught up");
    // Caught up: live pushes queue again.
    assert_eq!(m.deliver(&o, &note("a", 1)).0, Pushed::Queued);
    assert_eq!(seqs(&drain(&o, &m)), vec![51]);
}

#[test]
fn the_byte_bound_holds_but_one_big_message_still_fits() {
    let mut m = Mailbox::new(100);
    let o = outbox(100, 10, WhenFull::Disconnect);
    assert_eq!(m.deliver(&o, &note("a", 50)).0, Pushed::Queued);
    assert_eq!(m.deliver(&o, &note("a", 1)).0, Pushed::Behind);
    assert_eq!(o.len(), 1);
    assert_eq!(seqs(&drain(&o, &m)), vec![1, 2]);
}

#[test]
fn a_refill_applies_filters_and_skips_what_nobody_wants() {
    let mut m = Mailbox::new(100);
    let o = Outbox::new(QueueLimits {
        messages: 2,
        bytes: 1000,
        when_full: WhenFull::Disconnect,
    });
    o.subscribe(sub(0, "chat", "chat.*"), None, None);
    for i in 0..20 {
        let event = if i % 2 == 0 { "chat.x" } else { "order.x" };
        m.deliver(&o, &note(event, 1));
    }
    let read = drain(&o, &m);
    assert_eq!(seqs(&read), (1..=20).step_by(2).collect::<Vec<_>>());
    assert!(
        read.iter()
            .all(|(_, subs)| subs == &[Arc::<str>::from("chat")])
    );
}

#[test]
fn disconnect_cuts_only_when_the_mailbox_evicts_what_was_not_sent() {
    let mut m = Mailbox::new(10);
    let o = outbox(4, 1000, WhenFull::Disconnect);
    // Window 4 + mailbox 10 hold 14: the window takes 1-4, the mailbox
    // still has 5-14.
    for _ in 0..14 {
        assert_eq!(m.deliver(&o, &note("a", 1)).1, Loss::None);
    }
    assert!(!o.is_cut());
    // The 15th evicts 5, which the session still needs.
    assert_eq!(m.deliver(&o, &note("a", 1)).1, Loss::Cut);
    assert!(o.is_cut());
    assert!(o.pop().is_none());
    assert_eq!(o.len(), 0, "a cut session holds nothing");
    assert_eq!(m.deliver(&o, &note("a", 1)).0, Pushed::Closed);
}

#[test]
fn evicting_what_the_session_does_not_want_is_no_loss() {
    let mut m = Mailbox::new(3);
    let o = Outbox::new(QueueLimits {
        messages: 1,
        bytes: 1000,
        when_full: WhenFull::Disconnect,
    });
    o.start(0);
    m.deliver(&o, &note("order.x", 1));
    m.deliver(&o, &note("order.y", 1));
    m.deliver(&o, &note("chat.a", 1));
    // Resume from the start with a filter: 1-3 are its replay range.
    o.subscribe(sub(0, "s", "chat.*"), Some(0), None);
    assert!(o.needs(1));
    // Evicting 1 and 2, which the filter refuses, loses nothing.
    assert_eq!(m.deliver(&o, &note("order.z", 1)).1, Loss::None);
    assert_eq!(m.deliver(&o, &note("order.z", 1)).1, Loss::None);
    assert!(!o.is_cut());
    assert_eq!(seqs(&drain(&o, &m)), vec![3]);
    // Evicting what it wanted, had it not been read, would have cut it.
    let mut m = Mailbox::new(1);
    let o = outbox(1, 1000, WhenFull::Disconnect);
    m.deliver(&o, &note("chat.a", 1));
    m.deliver(&o, &note("chat.b", 1)); // behind at 1
    assert_eq!(m.deliver(&o, &note("order.x", 1)).1, Loss::Cut);
}

#[test]
fn drop_oldest_skips_the_lost_messages_behind_one_gap_marker() {
    let mut m = Mailbox::new(5);
    let o = outbox(2, 1000, WhenFull::DropOldest);
    let mut dropped = 0;
    for _ in 0..20 {
        if let Loss::Dropped(k) = m.deliver(&o, &note("a", 1)).1 {
            dropped += k;
        }
    }
    // The window kept 1-2; the mailbox keeps 16-20; 3-15 were lost.
    assert_eq!(dropped, 13);
    assert!(!o.is_cut());
    let read = drain(&o, &m);
    assert_eq!(
        seqs(&read),
        vec![1, 2, 1_000_015, 16, 17, 18, 19, 20],
        "one gap marker at the last lost sequence, then the rest in order"
    );
    assert_eq!(o.len(), 0);
}

#[test]
fn a_replay_reads_through_the_window_and_targets_its_subscription() {
    let mut m = Mailbox::new(100);
    let o = Outbox::new(QueueLimits {
        messages: 3,
        bytes: 1000,
        when_full: WhenFull::Disconnect,
    });
    o.start(0);
    for _ in 0..10 {
        m.deliver(&o, &note("a", 1)); // no subscription yet: filtered
    }
    assert_eq!(o.len(), 0);
    // Resume after 2: 3-10 are replayed, three at a time.
    o.subscribe(sub(0, "s", ""), Some(2), None);
    assert!(o.is_behind());
    assert_eq!(o.refill(&m).replayed, 3);
    m.deliver(&o, &note("a", 1)); // 11 arrives mid-replay
    let read = drain(&o, &m);
    assert_eq!(seqs(&read), (3..=11).collect::<Vec<_>>());
    assert!(!o.is_behind());
}

#[test]
fn a_second_subscription_replays_alone_and_the_first_gets_no_duplicate() {
    let mut m = Mailbox::new(100);
    let o = outbox(100, 1000, WhenFull::Disconnect);
    for _ in 0..3 {
        m.deliver(&o, &note("a", 1));
    }
    assert_eq!(o.len(), 3);
    o.subscribe(sub(1, "t", ""), Some(1), None);
    o.refill(&m);
    m.deliver(&o, &note("a", 1));
    let read = drain(&o, &m);
    let s: Arc<str> = "s".into();
    let t: Arc<str> = "t".into();
    assert_eq!(
        read,
        vec![
            (1, vec![s.clone()]),
            (2, vec![s.clone()]),
            (3, vec![s.clone()]),
            (2, vec![t.clone()]),
            (3, vec![t.clone()]),
            (4, vec![s, t]),
        ]
    );
}

#[test]
fn a_subscription_without_resume_starts_at_the_head_even_behind() {
    let mut m = Mailbox::new(100);
    let o = outbox(1, 1000, WhenFull::Disconnect);
    for _ in 0..5 {
        m.deliver(&o, &note("a", 1));
    }
    assert!(o.is_behind());
    // Subscribed at head 5 while the session is at 1.
    o.subscribe(sub(1, "t", ""), Some(m.head), None);
    m.deliver(&o, &note("a", 1));
    let read = drain(&o, &m);
    let s: Arc<str> = "s".into();
    let t: Arc<str> = "t".into();
    let expected: Vec<(u64, Vec<Arc<str>>)> = (1..=5)
        .map(|seq| (seq, vec![s.clone()]))
        .chain([(6, vec![s.clone(), t.clone()])])
        .collect();
    assert_eq!(read, expected);
}

#[test]
fn unsubscribing_drops_a_pending_replay() {
    let mut m = Mailbox::new(100);
    let o = Outbox::new(QueueLimits {
        messages: 1,
        bytes: 1000,
        when_full: WhenFull::Disconnect,
    });
    o.start(0);
    for _ in 0..5 {
        m.deliver(&o, &note("a", 1));
    }
    o.subscribe(sub(0, "s", ""), Some(0), None);
    assert!(o.is_behind());
    assert!(o.unsubscribe("s"));
    assert!(!o.needs(1), "nothing of the mailbox is needed any more");
    assert!(drain(&o, &m).is_empty());
}
