//! The traffic of a latency run: the publisher on its schedule, and each session's reader. Both
//! read one [`Clock`]; a publication's message id carries its publish time on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::client::session::websocket::{CLOSE_GRACE, Ws};
use crate::client::stomp_client::{self, Decoded};
use crate::harness::amqp::{self, Outgoing, Publisher};
pub(crate) use crate::harness::clock::Clock;
use crate::harness::pacing::Pacer;

/// Routing key and `event` header of the publications.
const EVENT: &str = "bench.latency";
/// Most publications handed to the broker in one burst (a publisher far behind its schedule
/// catches up in bursts of this size, so confirms keep flowing).
pub(super) const MAX_BURST: u64 = 1000;

/// The message id of publication `seq`, published at `ns` on the [`Clock`].
fn message_id(seq: u64, ns: u64) -> String {
    format!("lat-{seq}-{ns}")
}

/// `(seq, ns)` from a message id made by [`message_id`].
fn parse_message_id(id: &str) -> Option<(u64, u64)> {
    let (seq, ns) = id.strip_prefix("lat-")?.split_once('-')?;
    Some((seq.parse().ok()?, ns.parse().ok()?))
}

/// What the publisher should publish, and when.
pub(super) struct Schedule {
    pub(super) pacer: Pacer,
    /// Publication k goes to `users[k % users.len()]`.
    pub(super) users: Vec<String>,
    pub(super) payload_bytes: usize,
    /// When publication 0 is due.
    pub(super) start: Instant,
    pub(super) clock: Clock,
}

/// What the publisher did.
pub(super) struct Published {
    pub(super) sent: u64,
    /// From the start of the schedule to the last publication (or the error).
    pub(super) elapsed: Duration,
    /// How far behind its schedule it was at worst.
    pub(super) max_lag: Duration,
    /// Why it stopped before the end.
    pub(super) error: Option<String>,
}

/// Publishes on `schedule` until every publication is out (or publishing fails), handing each
/// burst's confirms to `confirms` and counting what went out in `published`.
pub(super) async fn publish_on_schedule(
    publisher: Publisher,
    schedule: Schedule,
    confirms: mpsc::Sender<Vec<lapin::PublisherConfirm>>,
    published: Arc<AtomicU64>,
) -> Published {
    let Schedule {
        pacer,
        users,
        payload_bytes,
        start,
        clock,
    } = schedule;
    let routing_key: lapin::types::ShortString = EVENT.into();
    let mut sent = 0u64;
    let mut max_lag = Duration::ZERO;
    while sent < pacer.total() {
        let elapsed = start.elapsed();
        let due = pacer.due(elapsed);
        if due <= sent {
            let at = tokio::time::Instant::from_std(start + pacer.due_at(sent));
            tokio::time::sleep_until(at).await;
            continue;
        }
        max_lag = max_lag.max(elapsed.saturating_sub(pacer.due_at(sent)));
        let upto = due.min(sent + MAX_BURST);
        let batch: Vec<Outgoing> = (sent..upto)
            .map(|k| {
                let user = &users[(k % users.len() as u64) as usize];
                let id = message_id(k, clock.now_ns());
                Outgoing {
                    routing_key: routing_key.clone(),
                    properties: amqp::publication(&id, EVENT, user, true),
                    body: amqp::payload(k, payload_bytes),
                }
            })
            .collect();
        match publisher.publish_batch(batch).await {
            Ok(batch_confirms) => {
                // The settling task outlives the publisher: a send fails only if it panicked,
                // and then the run counts no confirm at all (`Confirmed::default`).
                let _ = confirms.send(batch_confirms).await;
            }
            Err(e) => {
                return Published {
                    sent,
                    elapsed: start.elapsed(),
                    max_lag,
                    error: Some(e.to_string()),
                };
            }
        }
        sent = upto;
        published.store(sent, Ordering::Relaxed);
    }
    Published {
        sent,
        elapsed: start.elapsed(),
        max_lag,
        error: None,
    }
}

/// What one session received.
#[derive(Debug, Default)]
pub(super) struct Received {
    /// `(seq, published, received)` per `MESSAGE`, in ns on the [`Clock`].
    pub(super) samples: Vec<(u64, u64, u64)>,
    /// `MESSAGE` frames whose id is not one of this run's.
    pub(super) foreign: u64,
    /// Why the session ended before the bench closed it.
    pub(super) ended: Option<String>,
}

/// Reads one session until `cancel`: every `MESSAGE` of this run becomes a sample, stamped
/// when its WebSocket message arrived.
pub(super) async fn receive(
    mut ws: Ws,
    clock: Clock,
    cancel: CancellationToken,
    received: Arc<AtomicU64>,
) -> Received {
    let mut out = Received::default();
    let mut buffer: Vec<u8> = Vec::new();
    'session: loop {
        let msg = tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            m = ws.next() => m,
        };
        let now = clock.now_ns();
        match msg {
            Some(Ok(Message::Text(t))) => buffer.extend_from_slice(t.as_bytes()),
            Some(Ok(Message::Binary(b))) => buffer.extend_from_slice(&b),
            Some(Ok(Message::Close(_))) | None => {
                out.ended = Some("closed by the gateway".into());
                return out;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                out.ended = Some(format!("websocket: {e}"));
                return out;
            }
        }
        loop {
            match stomp_client::decode(&buffer) {
                Ok(Some((decoded, used))) => {
                    buffer.drain(..used);
                    let Decoded::Frame(frame) = decoded else {
                        continue;
                    };
                    match frame.command.as_str() {
                        "MESSAGE" => match frame.header("message-id").and_then(parse_message_id) {
                            Some((seq, sent)) => {
                                out.samples.push((seq, sent, now));
                                received.fetch_add(1, Ordering::Relaxed);
                            }
                            None => out.foreign += 1,
                        },
                        "ERROR" => {
                            out.ended = Some(format!(
                                "stomp error: {}",
                                frame.header("message").unwrap_or("(no message)")
                            ));
                            break 'session;
                        }
                        _ => {}
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    out.ended = Some(format!("stomp: {e}"));
                    break 'session;
                }
            }
        }
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if ws.close(None).await.is_ok() {
            while let Some(Ok(_)) = ws.next().await {}
        }
    })
    .await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_carry_seq_and_time() {
        let id = message_id(17, 1_234_567_890);
        assert_eq!(id, "lat-17-1234567890");
        assert_eq!(parse_message_id(&id), Some((17, 1_234_567_890)));
        assert_eq!(parse_message_id("tp-17"), None);
        assert_eq!(parse_message_id("lat-17"), None);
        assert_eq!(parse_message_id("lat-x-1"), None);
        // Valid Herald ids: 1-200 of A-Z a-z 0-9 . _ ~ @ / + = -
        let longest = message_id(u64::MAX, u64::MAX);
        assert!(longest.len() <= 200);
        assert!(
            longest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        );
    }
}
