//! The broadcast scenario on one system: a fresh server, `--broadcast-sessions` sessions in this
//! process (Herald: a user each, reached by a global notification; Nchan: all on one channel),
//! then for each rate of the ramp, publications over HTTP on a schedule for `--seconds`, each
//! carrying its sequence number and its publish time on the [`Clock`] the sessions read too,
//! so every delivery is a latency sample. A step ends when every delivery has arrived, or when
//! nothing has arrived for `--drain-timeout` after the last publication; what has not arrived
//! then is lost. The server's CPU is read around each step.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::args::CompareArgs;
use super::nchan::BROADCAST_CHANNEL;
use super::system::{Server, System};
use crate::client::api::ApiConnection;
use crate::client::session::websocket::{self, Framing, Ws};
use crate::client::session::{Target, xhr_streaming};
use crate::client::stomp_client::{self, Decoded};
use crate::harness::clock::Clock;
use crate::harness::cpu;
use crate::harness::outcome::BenchError;
use crate::harness::progress::Progress;
use crate::harness::stats::Summary;
use crate::harness::token::{Claims, Minter, now_epoch_secs};

/// Sessions opening at once.
const OPEN_CONCURRENCY: usize = 64;
/// Seconds one session may take to open.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a step checks whether every delivery has arrived.
const POLL: Duration = Duration::from_millis(20);

/// One step of the ramp on one system.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BroadcastStep {
    pub(crate) system: System,
    pub(crate) round: usize,
    pub(crate) sessions: usize,
    /// Deliveries per second asked for.
    pub(crate) rate: u64,
    pub(crate) publications: u64,
    /// Publications the server did not accept (or did not answer).
    pub(crate) refused: u64,
    pub(crate) expected: u64,
    pub(crate) delivered: u64,
    pub(crate) lost: u64,
    /// From the first publication to the last arrival (or the drain's end).
    pub(crate) seconds: f64,
    pub(crate) delivered_rate: f64,
    /// How far behind its schedule the publisher was at worst.
    pub(crate) max_publish_lag_ms: f64,
    pub(crate) server_cpu_seconds: f64,
    pub(crate) cpu_per_100k_deliveries: f64,
    /// Publish to receipt, over every delivery.
    pub(crate) latency: Option<Summary>,
    pub(crate) load_before: Option<f64>,
    pub(crate) server_command: String,
}

/// The payload of publication `seq` published at `ns`: both as text, then padding.
pub(crate) fn payload(seq: u64, ns: u64, bytes: usize) -> Vec<u8> {
    let mut body = format!("{seq} {ns} ").into_bytes();
    body.resize(bytes.max(body.len()), b'x');
    body
}

/// `(seq, ns)` from a [`payload`].
pub(crate) fn parse_payload(body: &[u8]) -> Option<(u64, u64)> {
    let mut parts = body.splitn(3, |&b| b == b' ');
    let seq = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let ns = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    Some((seq, ns))
}

/// The bench's `(seq, ns)` pairs in one WebSocket message: the message itself for a raw
/// session, the body of each `MESSAGE` frame for STOMP.
pub(crate) fn stamps(framing: Framing, message: &[u8]) -> Vec<(u64, u64)> {
    if framing != Framing::Stomp {
        return parse_payload(message).into_iter().collect();
    }
    let mut found = Vec::new();
    let mut rest = message;
    while let Ok(Some((decoded, used))) = stomp_client::decode(rest) {
        if let Decoded::Frame(frame) = decoded
            && frame.command == "MESSAGE"
            && let Some(stamp) = parse_payload(&frame.body)
        {
            found.push(stamp);
        }
        rest = &rest[used..];
    }
    found
}

/// Runs the ramp on a fresh `system`.
pub(crate) async fn run(
    system: System,
    args: &CompareArgs,
    round: usize,
) -> Result<Vec<BroadcastStep>, BenchError> {
    let server = Server::start(system, args, &format!("broadcast-r{round}")).await?;
    let measured = ramp(&server, args, round).await;
    let how = server.finish().await;
    if measured.is_err() {
        eprintln!("herald-bench: {} {how}", system.name());
    }
    measured
}

/// What every reader shares.
struct Arrivals {
    /// `(seq, latency ns)` of every delivery since the last [`Arrivals::take`].
    samples: Mutex<Vec<(u64, u64)>>,
    count: AtomicU64,
    /// Sessions the server ended.
    dropped: AtomicU64,
}

impl Arrivals {
    fn take(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

async fn ramp(
    server: &Server,
    args: &CompareArgs,
    round: usize,
) -> Result<Vec<BroadcastStep>, BenchError> {
    let framing = match server.system {
        System::Herald => Framing::Stomp,
        System::Nchan => Framing::Raw,
    };
    let sockets = open_sessions(server, args.broadcast_sessions, framing).await?;
    let clock = Clock::new();
    let arrivals = Arc::new(Arrivals {
        samples: Mutex::new(Vec::new()),
        count: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
    });
    let cancel = CancellationToken::new();
    let _readers: Vec<AbortOnDropHandle<()>> = sockets
        .into_iter()
        .map(|ws| {
            AbortOnDropHandle::new(tokio::spawn(read(
                ws,
                framing,
                clock,
                arrivals.clone(),
                cancel.clone(),
            )))
        })
        .collect();
    let mut publisher = ApiConnection::new(server.addr, server.api_key());
    let mut steps = Vec::new();
    let mut next_seq = 0;
    for &rate in &args.rates {
        let step = step(
            server,
            args,
            round,
            rate,
            next_seq,
            &mut publisher,
            clock,
            &arrivals,
        )
        .await?;
        next_seq += step.publications;
        eprintln!(
            "herald-bench: {} {} deliveries/s: {} of {} delivered, {:.2} s CPU per 100,000, p50 {}",
            server.system.name(),
            rate,
            step.delivered,
            step.expected,
            step.cpu_per_100k_deliveries,
            step.latency.map_or_else(
                || "-".to_owned(),
                |l| crate::harness::stats::human_ms(l.p50_ns as f64)
            ),
        );
        steps.push(step);
    }
    cancel.cancel();
    let dropped = arrivals.dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        eprintln!(
            "herald-bench: {}: the server ended {dropped} sessions",
            server.system.name()
        );
    }
    Ok(steps)
}

/// Opens `n` sessions, [`OPEN_CONCURRENCY`] at a time; any failure ends the scenario.
async fn open_sessions(server: &Server, n: usize, framing: Framing) -> Result<Vec<Ws>, BenchError> {
    let transport = server.system.transport();
    let target = Arc::new(Target {
        transport,
        host_header: server.addr.to_string(),
        path: transport.gateway_path().to_owned(),
        addr: server.addr,
        source: None,
        handshake_timeout: HANDSHAKE_TIMEOUT,
        xhr_sends: xhr_streaming::SendPool::new(1),
    });
    let minter = server.jwt_secret().map(Minter::new);
    let exp = now_epoch_secs() + 3600;
    let slots = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut opening = Vec::with_capacity(n);
    for i in 0..n {
        let credential = match &minter {
            Some(minter) => minter
                .mint(&Claims::for_session(0, i, exp))
                .map_err(|e| BenchError::Failed(format!("minting a token: {e}")))?,
            None => BROADCAST_CHANNEL.to_owned(),
        };
        let (target, slots) = (target.clone(), slots.clone());
        opening.push(tokio::spawn(async move {
            let _slot = slots.acquire_owned().await;
            websocket::open(&target, &credential, framing).await
        }));
    }
    let mut sockets = Vec::with_capacity(n);
    let mut failures = BTreeMap::<String, u64>::new();
    for job in opening {
        match job.await {
            Ok(Ok(ws)) => sockets.push(ws),
            Ok(Err(f)) => *failures.entry(f.reason()).or_default() += 1,
            Err(e) => *failures.entry(format!("task: {e}")).or_default() += 1,
        }
    }
    if !failures.is_empty() {
        return Err(BenchError::Failed(format!(
            "{}: {} of {n} broadcast sessions did not open: {failures:?}",
            server.system.name(),
            failures.values().sum::<u64>(),
        )));
    }
    Ok(sockets)
}

/// Reads one session until `cancel`, recording every delivery.
async fn read(
    mut ws: Ws,
    framing: Framing,
    clock: Clock,
    arrivals: Arc<Arrivals>,
    cancel: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            () = cancel.cancelled() => return,
            message = ws.next() => message,
        };
        let bytes = match message {
            Some(Ok(Message::Text(t))) => t.as_bytes().to_vec(),
            Some(Ok(Message::Binary(b))) => b.to_vec(),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => {
                arrivals.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let now = clock.now_ns();
        let found: Vec<(u64, u64)> = stamps(framing, &bytes)
            .into_iter()
            .map(|(seq, ns)| (seq, now.saturating_sub(ns)))
            .collect();
        if found.is_empty() {
            continue;
        }
        arrivals
            .count
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        arrivals
            .samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(found);
    }
}

/// One step: publish `rate / sessions` a second for `--seconds`, then wait for the arrivals.
#[allow(clippy::too_many_arguments)]
async fn step(
    server: &Server,
    args: &CompareArgs,
    round: usize,
    rate: u64,
    first_seq: u64,
    publisher: &mut ApiConnection,
    clock: Clock,
    arrivals: &Arrivals,
) -> Result<BroadcastStep, BenchError> {
    let sessions = args.broadcast_sessions as u64;
    let per_second = rate as f64 / sessions as f64;
    let publications = ((args.seconds as f64 * per_second).round() as u64).max(1);
    let interval = Duration::from_secs_f64(1.0 / per_second);
    let expected = publications * sessions;
    let (path, content_type) = server.broadcast_request();
    let load_before = cpu::load_average();
    arrivals.take();
    let count_before = arrivals.count.load(Ordering::Relaxed);
    let cpu_before = server.cpu()?;
    let started = Instant::now();
    let mut refused = 0;
    let mut max_lag = Duration::ZERO;
    let bar = Progress::new(publications);
    for k in 0..publications {
        let due = started + interval.mul_f64(k as f64);
        tokio::time::sleep_until(due.into()).await;
        max_lag = max_lag.max(due.elapsed());
        let seq = first_seq + k;
        let body = payload(seq, clock.now_ns(), args.payload_bytes);
        match publisher.post(&path, content_type, &body).await {
            Ok(r) if server.accepted(r.status) => {}
            Ok(r) => {
                refused += 1;
                if refused == 1 {
                    eprintln!(
                        "herald-bench: {} refused a publication: {} {}",
                        server.system.name(),
                        r.status,
                        String::from_utf8_lossy(&r.body)
                    );
                }
            }
            Err(e) => {
                refused += 1;
                if refused == 1 {
                    eprintln!("herald-bench: publishing to {}: {e}", server.system.name());
                }
            }
        }
        bar.update(k + 1, || {
            format!("{} at {rate} deliveries/s", server.system.name())
        });
    }
    drop(bar);
    // Wait for the deliveries: all of them, or none for the drain timeout.
    let drain = Duration::from_secs(args.drain_timeout);
    let mut last_count = arrivals.count.load(Ordering::Relaxed);
    let mut last_change = Instant::now();
    let mut last_arrival = started.elapsed();
    loop {
        let count = arrivals.count.load(Ordering::Relaxed);
        if count != last_count {
            (last_count, last_change) = (count, Instant::now());
            last_arrival = started.elapsed();
        }
        if count - count_before >= expected || last_change.elapsed() >= drain {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let cpu_used = server.cpu()?.since(&cpu_before).total();
    let last = first_seq + publications;
    let mut latencies: Vec<u64> = arrivals
        .take()
        .into_iter()
        .filter(|&(seq, _)| (first_seq..last).contains(&seq))
        .map(|(_, latency)| latency)
        .collect();
    let delivered = latencies.len() as u64;
    let seconds = last_arrival.as_secs_f64();
    Ok(BroadcastStep {
        system: server.system,
        round,
        sessions: args.broadcast_sessions,
        rate,
        publications,
        refused,
        expected,
        delivered,
        lost: expected.saturating_sub(delivered),
        seconds,
        delivered_rate: if seconds > 0.0 {
            delivered as f64 / seconds
        } else {
            0.0
        },
        max_publish_lag_ms: max_lag.as_secs_f64() * 1e3,
        server_cpu_seconds: cpu_used,
        cpu_per_100k_deliveries: if delivered == 0 {
            0.0
        } else {
            cpu_used * 100_000.0 / delivered as f64
        },
        latency: Summary::of(&mut latencies),
        load_before,
        server_command: server.command.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_their_seq_and_time() {
        let body = payload(42, 123_456_789, 100);
        assert_eq!(body.len(), 100);
        assert_eq!(parse_payload(&body), Some((42, 123_456_789)));
        let short = payload(1, 2, 0);
        assert_eq!(parse_payload(&short), Some((1, 2)));
        assert_eq!(parse_payload(b"not a payload"), None);
        assert_eq!(parse_payload(b""), None);
    }

    #[test]
    fn stamps_of_stomp_and_raw_messages() {
        let body = payload(7, 9, 60);
        let frame = stomp_client::encode("MESSAGE", &[("subscription", "sub-0")], &body);
        let mut two = frame.clone();
        two.extend_from_slice(b"\n");
        two.extend_from_slice(&stomp_client::encode("MESSAGE", &[], &payload(8, 10, 60)));
        assert_eq!(stamps(Framing::Stomp, &frame), vec![(7, 9)]);
        assert_eq!(stamps(Framing::Stomp, &two), vec![(7, 9), (8, 10)]);
        let receipt = stomp_client::encode("RECEIPT", &[("receipt-id", "r")], b"");
        assert!(stamps(Framing::Stomp, &receipt).is_empty());
        assert_eq!(stamps(Framing::Raw, &body), vec![(7, 9)]);
        assert!(stamps(Framing::Raw, b"hello").is_empty());
    }
}
