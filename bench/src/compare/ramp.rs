//! The delivery ramps on one system, for an [`Audience`]: a fresh server and sessions in this
//! process, a user each (Herald: its mailbox; Nchan: a channel per user, or one channel all
//! subscribe to for a broadcast), then for each rate of the ramp, publications over HTTP on a
//! schedule for `--seconds`, each carrying its sequence number and its publish time on the
//! [`Clock`] the sessions read too, so every delivery is a latency sample.
//!
//! - [`Audience::Broadcast`]: each publication reaches every session (Herald: one
//!   `scope=global` notification); publications per second = rate / sessions.
//! - [`Audience::PerUser`]: publication k goes to user k % sessions (Herald: `users=` that
//!   user); one delivery per publication.
//!
//! Publications go out over `--publishers` keep-alive connections, connection i taking every
//! i-th one on its schedule, one request in flight each. A step ends when every delivery has
//! arrived, or when nothing has arrived for `--drain-timeout` after the last publication; what
//! has not arrived then is lost. The server's CPU is read around each step.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::args::CompareArgs;
use super::audience::Audience;
use super::rabbitmq;
use super::stamp::{payload, stamps};
use super::system::{PublishTo, Server, System};
use crate::client::api::ApiConnection;
use crate::client::session::websocket::{self, Framing, Ws};
use crate::client::session::{Target, xhr_streaming};
use crate::client::socketio;
use crate::harness::amqp;
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
/// How often publishing progress is shown.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How often a step checks whether every delivery has arrived.
const POLL: Duration = Duration::from_millis(20);

/// How a ramp runs: its audience, sessions and rates.
#[derive(Debug, Clone)]
pub(crate) struct Ramp {
    pub(crate) audience: Audience,
    pub(crate) sessions: usize,
    pub(crate) rates: Vec<u64>,
}

/// One step of a ramp on one system.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RampStep {
    pub(crate) audience: Audience,
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
    /// The part of `server_cpu_seconds` spent in the kernel on the server's behalf (`stime`:
    /// its system calls, and on loopback the receiving socket's TCP input they run); the
    /// rest is the server's own code. None in runs from before the bench split it.
    #[serde(default)]
    pub(crate) server_kernel_cpu_seconds: Option<f64>,
    /// CPU of the bench's own process (its sessions and publishers) over the same span: with
    /// the server's, whether the two cores were the limit.
    #[serde(default)]
    pub(crate) bench_cpu_seconds: f64,
    pub(crate) cpu_per_100k_deliveries: f64,
    /// Publish to receipt, over every delivery.
    pub(crate) latency: Option<Summary>,
    pub(crate) load_before: Option<f64>,
    pub(crate) server_command: String,
}

/// Runs `ramp` on a fresh `system`.
pub(crate) async fn run(
    system: System,
    args: &CompareArgs,
    ramp: &Ramp,
    round: usize,
) -> Result<Vec<RampStep>, BenchError> {
    let label = format!("{}-r{round}", ramp.audience.name());
    Server::with_fresh(system, args, &label, async |server| {
        run_on(server, args, ramp, round).await
    })
    .await
}

/// What every reader shares.
pub(super) struct Arrivals {
    /// `(seq, latency ns)` of every intact delivery since the last [`Arrivals::take`].
    samples: Mutex<Vec<(u64, u64)>>,
    pub(super) count: AtomicU64,
    /// Sessions the server ended.
    pub(super) dropped: AtomicU64,
    /// Deliveries that did not arrive whole (`expect_len`).
    pub(super) damaged: AtomicU64,
    /// The length every delivery must have (0: any).
    expect_len: usize,
}

impl Arrivals {
    pub(super) fn new(expect_len: usize) -> Arc<Self> {
        Arc::new(Self {
            samples: Mutex::new(Vec::new()),
            count: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            damaged: AtomicU64::new(0),
            expect_len,
        })
    }

    pub(super) fn take(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

async fn run_on(
    server: &Server,
    args: &CompareArgs,
    ramp: &Ramp,
    round: usize,
) -> Result<Vec<RampStep>, BenchError> {
    let framing = framing(server.system);
    let sockets = open_sessions(server, ramp.audience, ramp.sessions).await?;
    let clock = Clock::new();
    let arrivals = Arrivals::new(0);
    let cancel = CancellationToken::new();
    let _readers = start_readers(sockets, framing, clock, &arrivals, &cancel);
    let mut lanes = Lanes::open(server, args.publishers).await?;
    let mut steps = Vec::new();
    let mut next_seq = 0;
    for &rate in &ramp.rates {
        let step = step(
            server, args, ramp, round, rate, next_seq, &mut lanes, clock, &arrivals,
        )
        .await;
        let step = match step {
            Ok(step) => step,
            Err(e) => {
                lanes.close().await;
                return Err(e);
            }
        };
        next_seq += step.publications;
        eprintln!(
            "herald-bench: {} {} {} deliveries/s: {} of {} delivered, {:.2} s CPU per 100,000, p50 {}",
            server.system.name(),
            ramp.audience.name(),
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
    lanes.close().await;
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

/// A reader per session until `cancel`, all recording into `arrivals`.
pub(super) fn start_readers(
    sockets: Vec<Ws>,
    framing: Framing,
    clock: Clock,
    arrivals: &Arc<Arrivals>,
    cancel: &CancellationToken,
) -> Vec<AbortOnDropHandle<()>> {
    sockets
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
        .collect()
}

/// How `system`'s sessions carry notifications.
pub(super) fn framing(system: System) -> Framing {
    match system {
        System::Herald | System::Baseline | System::Rabbitmq => Framing::Stomp,
        System::Nchan => Framing::Raw,
        System::SocketIo => Framing::SocketIo,
        System::Sockjs => Framing::SockJsPlain,
    }
}

/// Opens `n` sessions of `audience`, [`OPEN_CONCURRENCY`] at a time; any failure ends the
/// scenario.
pub(super) async fn open_sessions(
    server: &Server,
    audience: Audience,
    n: usize,
) -> Result<Vec<Ws>, BenchError> {
    let framing = framing(server.system);
    let transport = server.system.transport();
    let target = Arc::new(Target {
        transport,
        host_header: server.addr.to_string(),
        path: transport.gateway_path().to_owned(),
        addr: server.addr,
        source: None,
        handshake_timeout: HANDSHAKE_TIMEOUT,
        pipelined: false,
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
            None => server.channel(audience, &Audience::user(i)),
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
            "{}: {} of {n} sessions did not open: {failures:?}",
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
        let bytes: &[u8] = match &message {
            Some(Ok(Message::Text(t))) => t.as_bytes(),
            Some(Ok(Message::Binary(b))) => b,
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => {
                arrivals.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let now = clock.now_ns();
        if framing == Framing::SocketIo && bytes == socketio::PING {
            if ws.send(Message::text(socketio::PONG)).await.is_err() {
                arrivals.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            continue;
        }
        let mut found: Vec<(u64, u64)> = Vec::new();
        for stamp in stamps(framing, bytes, arrivals.expect_len) {
            if stamp.intact {
                found.push((stamp.seq, now.saturating_sub(stamp.ns)));
            } else {
                arrivals.damaged.fetch_add(1, Ordering::Relaxed);
            }
        }
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

/// What the publishing connections did in one step.
#[derive(Debug, Default)]
struct Published {
    refused: u64,
    max_lag: Duration,
}

/// One publishing lane: a keep-alive HTTP connection, or a share of an AMQP channel in
/// confirm mode. Either way one publication is in flight at a time, until the server accepted
/// it (an HTTP answer, a broker confirm).
pub(crate) enum Lane {
    Http(ApiConnection),
    Amqp(amqp::Publisher),
}

impl Lane {
    /// Publishes `body` to `to`; `Err` says why it was not accepted.
    async fn send(&mut self, server: &Server, to: PublishTo, body: Vec<u8>) -> Result<(), String> {
        match (self, to) {
            (Lane::Http(connection), PublishTo::Http(path)) => {
                match connection.post(&path, "text/plain", &body).await {
                    Ok(r) if server.accepted(r.status) => Ok(()),
                    Ok(r) => Err(format!("{} {}", r.status, String::from_utf8_lossy(&r.body))),
                    Err(e) => Err(e.to_string()),
                }
            }
            (Lane::Amqp(publisher), PublishTo::Amqp { routing_key }) => {
                let outgoing = amqp::Outgoing {
                    routing_key: routing_key.into(),
                    properties: lapin::BasicProperties::default(),
                    body,
                };
                let confirms = publisher
                    .publish_batch(vec![outgoing])
                    .await
                    .map_err(|e| e.to_string())?;
                let confirmed = amqp::settle(confirms).await;
                if confirmed.acked == 1 {
                    Ok(())
                } else {
                    Err(format!("not confirmed: {confirmed:?}"))
                }
            }
            (_, to) => Err(format!("this lane cannot publish to {to:?}")),
        }
    }
}

/// The lanes of a ramp, and the AMQP connection they share, if any.
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
    connection: Option<lapin::Connection>,
}

impl Lanes {
    /// `count` lanes to `server`: HTTP connections, or channels' shares on one AMQP connection.
    pub(super) async fn open(server: &Server, count: usize) -> Result<Self, BenchError> {
        let Some(url) = server.amqp_url() else {
            return Ok(Self {
                lanes: (0..count)
                    .map(|_| Lane::Http(ApiConnection::new(server.addr, server.api_key())))
                    .collect(),
                connection: None,
            });
        };
        let failed = |e: lapin::Error| {
            BenchError::Failed(format!("{}: AMQP publisher: {e}", server.system.name()))
        };
        let connection = amqp::connect(url, "herald-bench compare publisher")
            .await
            .map_err(failed)?;
        let publisher = amqp::Publisher::open(&connection, rabbitmq::EXCHANGE)
            .await
            .map_err(failed)?;
        Ok(Self {
            lanes: (0..count).map(|_| Lane::Amqp(publisher.clone())).collect(),
            connection: Some(connection),
        })
    }

    pub(super) async fn close(self) {
        for lane in &self.lanes {
            if let Lane::Amqp(publisher) = lane {
                publisher.close().await;
                break;
            }
        }
        if let Some(connection) = self.connection {
            let _ = connection.close(200, "bench done".into()).await;
        }
    }
}

/// Publishes one broadcast of `bytes` (sequence number 0) on the first lane.
pub(super) async fn publish_one(
    server: &Server,
    lanes: &mut Lanes,
    clock: Clock,
    bytes: usize,
) -> Result<(), String> {
    let to = server.publish_to(Audience::Broadcast, &Audience::user(0));
    let body = payload(0, clock.now_ns(), bytes);
    match lanes.lanes.first_mut() {
        Some(lane) => lane.send(server, to, body).await,
        None => Err("no lane".into()),
    }
}

/// Publishes `count` publications from `first_seq` at `per_second`, over the lanes (lane i
/// takes every i-th, one in flight each).
#[allow(clippy::too_many_arguments)]
async fn publish(
    server: &Server,
    ramp: &Ramp,
    lanes: &mut Lanes,
    first_seq: u64,
    count: u64,
    per_second: f64,
    clock: Clock,
    payload_bytes: usize,
) -> Published {
    let interval = Duration::from_secs_f64(1.0 / per_second);
    let started = Instant::now();
    let connections = lanes.lanes.len() as u64;
    let done = AtomicU64::new(0);
    let bar = Progress::new(count);
    let sending = lanes.lanes.iter_mut().enumerate().map(|(i, lane)| {
        let done = &done;
        async move {
            let mut mine = Published::default();
            for k in (i as u64..count).step_by(connections as usize) {
                let due = started + interval.mul_f64(k as f64);
                tokio::time::sleep_until(due.into()).await;
                mine.max_lag = mine.max_lag.max(due.elapsed());
                let seq = first_seq + k;
                let user = Audience::user((seq % ramp.sessions as u64) as usize);
                let to = server.publish_to(ramp.audience, &user);
                let body = payload(seq, clock.now_ns(), payload_bytes);
                if let Err(why) = lane.send(server, to, body).await {
                    mine.refused += 1;
                    if mine.refused == 1 {
                        eprintln!(
                            "herald-bench: {} refused a publication: {why}",
                            server.system.name()
                        );
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            mine
        }
    });
    let all = futures_util::future::join_all(sending);
    tokio::pin!(all);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    let results = loop {
        tokio::select! {
            results = &mut all => break results,
            _ = tick.tick() => {
                let n = done.load(Ordering::Relaxed);
                bar.update(n, || format!("{} {}: {n} of {count} published", server.system.name(), ramp.audience.name()));
            }
        }
    };
    drop(bar);
    results
        .into_iter()
        .fold(Published::default(), |a, b| Published {
            refused: a.refused + b.refused,
            max_lag: a.max_lag.max(b.max_lag),
        })
}

/// One step: publish at `rate` deliveries per second for `--seconds`, then wait for the
/// arrivals.
#[allow(clippy::too_many_arguments)]
async fn step(
    server: &Server,
    args: &CompareArgs,
    ramp: &Ramp,
    round: usize,
    rate: u64,
    first_seq: u64,
    lanes: &mut Lanes,
    clock: Clock,
    arrivals: &Arrivals,
) -> Result<RampStep, BenchError> {
    let per_second = ramp.audience.publications_per_second(rate, ramp.sessions);
    let publications = ((args.seconds as f64 * per_second).round() as u64).max(1);
    let expected = publications * ramp.audience.deliveries_per_publication(ramp.sessions);
    let load_before = cpu::load_average();
    arrivals.take();
    let count_before = arrivals.count.load(Ordering::Relaxed);
    let cpu_before = server.cpu()?;
    let bench_before = bench_cpu();
    let started = Instant::now();
    let published = publish(
        server,
        ramp,
        lanes,
        first_seq,
        publications,
        per_second,
        clock,
        args.payload_bytes,
    )
    .await;
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
    let cpu_delta = server.cpu()?.since(&cpu_before);
    let cpu_used = cpu_delta.total();
    let bench_used = bench_cpu() - bench_before;
    let last = first_seq + publications;
    let mut latencies: Vec<u64> = arrivals
        .take()
        .into_iter()
        .filter(|&(seq, _)| (first_seq..last).contains(&seq))
        .map(|(_, latency)| latency)
        .collect();
    let delivered = latencies.len() as u64;
    let seconds = last_arrival.as_secs_f64();
    Ok(RampStep {
        audience: ramp.audience,
        system: server.system,
        round,
        sessions: ramp.sessions,
        rate,
        publications,
        refused: published.refused,
        expected,
        delivered,
        lost: expected.saturating_sub(delivered),
        seconds,
        delivered_rate: if seconds > 0.0 {
            delivered as f64 / seconds
        } else {
            0.0
        },
        max_publish_lag_ms: published.max_lag.as_secs_f64() * 1e3,
        server_cpu_seconds: cpu_used,
        server_kernel_cpu_seconds: Some(cpu_delta.system_seconds),
        bench_cpu_seconds: bench_used,
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

/// CPU-seconds the bench's own process has used (0 if `/proc` cannot say).
fn bench_cpu() -> f64 {
    cpu::read_cpu(std::process::id()).map_or(0.0, |c| c.total())
}
