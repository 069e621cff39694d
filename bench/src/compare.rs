//! `herald-bench compare`: Herald beside the servers its users would pick instead, the same
//! scenarios with the same client in one run, one system after another, round by round.
//!
//! 1. Each peer is installed if missing (by the script beside it in `bench/peers/{peer}/`) and
//!    started on a free 127.0.0.1 port with files of the run's own: never the machine's nginx,
//!    RabbitMQ or Redis.
//! 2. Scenarios ([`args::Scenario`]): idle sessions ([`idle`], worker processes as
//!    `connections` opens them), and delivery ramps over rates ([`ramp`]: a broadcast to every
//!    session, and notifications to one user at a time; sessions in this process, a timestamp
//!    in every payload), and one large message to every session ([`large`]).
//! 3. Within a scenario, a round measures Herald and then each peer, each on a fresh server; a
//!    ratio is computed between runs of the same round ([`report`]).
//! 4. The report: Markdown on stdout (JSON with `--json`), both written to `--out` as
//!    `compare.md` and `compare.json` with SVG charts ([`chart`]), with the version and exact
//!    command of each server, the load average around the run and every way the comparison is
//!    not like for like.
//!
//! # Layout
//! [`args`] (the command line, checked), [`system`] (Herald and each peer behind one face),
//! [`nchan`], [`rabbitmq`] and [`node_peer`] (the peers: configuration, start), [`install`]
//! (their scripts), [`audience`] (who a
//! publication reaches; pure), [`stamp`] (the payload's seq and time, found in any peer's
//! framing; pure), [`idle`], [`ramp`], [`large`] (the scenarios), [`chart`] (SVG, pure), [`report`] (figures, ratios, Markdown; pure).

pub(crate) mod args;
mod audience;
mod chart;
mod idle;
mod install;
mod large;
mod nchan;
mod node_peer;
mod rabbitmq;
mod ramp;
mod report;
mod stamp;
mod system;

pub(crate) use self::args::CompareArgs;

use std::path::Path;

use self::args::{Peer, Scenario};
use self::audience::Audience;
use self::ramp::Ramp;
use self::report::{CompareReport, SystemInfo};
use self::system::System;
use crate::harness::cpu;
use crate::harness::interrupt::{INTERRUPTED, interrupt};
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::token::now_epoch_secs;

pub(crate) async fn run(args: CompareArgs) -> Result<Outcome, BenchError> {
    if let Some(path) = &args.render {
        return render(path, &args);
    }
    args.check().map_err(BenchError::Usage)?;
    // Listen for Ctrl-C and SIGTERM before anything is started.
    interrupt();
    if let Err(e) = crate::harness::sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }
    if let Some(dir) = &args.log_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| BenchError::Usage(format!("--log-dir {}: {e}", dir.display())))?;
    }
    let mut peers = args.peers.clone();
    peers.sort_unstable();
    peers.dedup();
    for peer in &peers {
        match peer {
            Peer::Baseline => {}
            Peer::Nchan => nchan::install(&args.peers_dir).await?,
            Peer::Rabbitmq => rabbitmq::install(&args.peers_dir).await?,
            Peer::Socketio | Peer::Sockjs => node_peer::install(&args.peers_dir).await?,
        }
    }
    let mut systems = vec![SystemInfo {
        system: System::Herald,
        version: herald_version(args.gateway_bin()).await,
        notes: System::Herald.notes(&args),
    }];
    for &peer in &peers {
        let system = System::of(peer);
        let version = match peer {
            Peer::Baseline => herald_version(args.baseline_gateway_bin()).await,
            Peer::Nchan => nchan::version().await,
            Peer::Rabbitmq => rabbitmq::version().await,
            Peer::Socketio => node_peer::version(node_peer::Kind::SocketIo, &args.peers_dir).await,
            Peer::Sockjs => node_peer::version(node_peer::Kind::Sockjs, &args.peers_dir).await,
        };
        systems.push(SystemInfo {
            system,
            version,
            notes: system.notes(&args),
        });
    }
    let order: Vec<System> = systems.iter().map(|s| s.system).collect();
    let mut report = CompareReport {
        command: "compare".to_owned(),
        started_unix: now_epoch_secs(),
        cores: cpu::cores(),
        load_before: cpu::load_average(),
        load_after: None,
        rounds: args.rounds,
        systems,
        idle: Vec::new(),
        ramps: Vec::new(),
        large: Vec::new(),
        errors: Vec::new(),
        unfairness: unfairness(&order, &args),
    };
    // Each server is stopped its own way when the run is interrupted (Server::with_fresh);
    // the runs left are not started.
    let measured = measure(&args, &order, &mut report).await;
    report.load_after = cpu::load_average();
    if let Err(e) = measured {
        report.errors.push(e.to_string());
    }
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| BenchError::Failed(format!("encoding the report: {e}")))?;
    emit(&report, &json, &args)?;
    Ok(if report.errors.is_empty() {
        Outcome::AllOpened
    } else {
        Outcome::SomeFailed
    })
}

/// Prints the report (Markdown, or `json` with `--json`) and writes it to `--out`.
fn emit(report: &CompareReport, json: &str, args: &CompareArgs) -> Result<(), BenchError> {
    let markdown = report.markdown();
    if let Some(dir) = &args.out {
        write_out(dir, &markdown, json, &report.charts())?;
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{markdown}");
    }
    Ok(())
}

/// `--render`: the report of an earlier run's `compare.json`, written and printed again with
/// this build's tables and charts; nothing is measured.
fn render(path: &Path, args: &CompareArgs) -> Result<Outcome, BenchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::Usage(format!("--render {}: {e}", path.display())))?;
    let report: CompareReport = serde_json::from_str(&text).map_err(|e| {
        BenchError::Usage(format!(
            "--render {}: not a compare.json: {e}",
            path.display()
        ))
    })?;
    emit(&report, &text, args)?;
    Ok(Outcome::AllOpened)
}

/// Every scenario, round by round, system by system. A run that fails is recorded and the
/// others go on; only an interrupt ends it early.
async fn measure(
    args: &CompareArgs,
    order: &[System],
    report: &mut CompareReport,
) -> Result<(), BenchError> {
    for scenario in &args.scenarios {
        match scenario {
            Scenario::Idle => {
                for &sessions in &args.idle_sessions {
                    let label = format!("idle {sessions}");
                    let runs = each_run(
                        args,
                        order,
                        &label,
                        &mut report.errors,
                        async |system, round| idle::run(system, args, round, sessions).await,
                    )
                    .await;
                    report.idle.extend(runs);
                }
            }
            Scenario::Large => {
                let runs = each_run(
                    args,
                    order,
                    "large",
                    &mut report.errors,
                    async |system, round| large::run(system, args, round).await,
                )
                .await;
                report.large.extend(runs);
            }
            Scenario::Broadcast | Scenario::PerUser => {
                let ramp = if *scenario == Scenario::Broadcast {
                    Ramp {
                        audience: Audience::Broadcast,
                        sessions: args.broadcast_sessions,
                        rates: args.rates.clone(),
                    }
                } else {
                    Ramp {
                        audience: Audience::PerUser,
                        sessions: args.user_sessions,
                        rates: args.user_rates.clone(),
                    }
                };
                let name = ramp.audience.name();
                let runs = each_run(
                    args,
                    order,
                    name,
                    &mut report.errors,
                    async |system, round| ramp::run(system, args, &ramp, round).await,
                )
                .await;
                report.ramps.extend(runs.into_iter().flatten());
            }
        }
    }
    if interrupt().is_cancelled() {
        return Err(BenchError::Failed(INTERRUPTED.into()));
    }
    Ok(())
}

/// Runs `measure` for every round and, within it, every system in `order`, saying on stderr
/// which; a run that fails is recorded in `errors` (as "{label} round N system: why") and the
/// others go on.
async fn each_run<T>(
    args: &CompareArgs,
    order: &[System],
    label: &str,
    errors: &mut Vec<String>,
    mut measure: impl AsyncFnMut(System, usize) -> Result<T, BenchError>,
) -> Vec<T> {
    let mut runs = Vec::new();
    for round in 0..args.rounds {
        for &system in order {
            if interrupt().is_cancelled() {
                return runs;
            }
            let name = system.name();
            eprintln!("herald-bench: {label}, round {}: {name}", round + 1);
            match measure(system, round).await {
                Ok(run) => runs.push(run),
                // Stopped by the interrupt: the runs left are not started.
                Err(_) if interrupt().is_cancelled() => return runs,
                Err(e) => errors.push(format!("{label} round {} {name}: {e}", round + 1)),
            }
        }
    }
    runs
}

/// `herald-gateway --version`, or why not.
async fn herald_version(bin: &Path) -> String {
    match tokio::process::Command::new(bin)
        .arg("--version")
        .output()
        .await
    {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        Ok(o) => format!("--version failed ({})", o.status),
        Err(e) => format!("{}: {e}", bin.display()),
    }
}

/// What is not like for like between Herald and the peers measured.
fn unfairness(systems: &[System], args: &CompareArgs) -> Vec<String> {
    let mut notes = vec![
        "The bench's client processes share the machine's two cores with the server they \
         measure, for every system alike."
            .to_owned(),
        "Memory is the summed proportional set size (PSS) of the server's processes, so a page \
         several processes share counts once."
            .to_owned(),
    ];
    if args.pipelined && args.scenarios.contains(&Scenario::Idle) {
        notes.push(
            "Idle sessions were opened pipelined (--pipelined): the STOMP clients (Herald's, \
             RabbitMQ's) sent SUBSCRIBE in the same WebSocket message as CONNECT, one round trip \
             less than a client that waits for CONNECTED."
                .to_owned(),
        );
    }
    if systems.contains(&System::Baseline) {
        notes.push(
            "herald-baseline is another build of Herald, run exactly as Herald is, right after \
             it in every round (A B A B): their ratio is the change's."
                .to_owned(),
        );
    }
    if systems.contains(&System::Nchan) {
        notes.extend([
            "Nchan checks no token: Herald verifies a JWT (HS256) on every session.".to_owned(),
            "Nchan sends each message as it was published; Herald wraps it in a STOMP MESSAGE \
             frame with its headers (destination, subscription, message-id, sequence)."
                .to_owned(),
            "Herald keeps every notification in the user's mailbox for replay; Nchan keeps \
             the last messages of each channel (its default buffer)."
                .to_owned(),
            "Broadcast: Herald publishes one global notification that reaches every user's \
             mailbox; Nchan's sessions all subscribe to one channel. Per user: a mailbox per \
             user in Herald, a channel per user in Nchan."
                .to_owned(),
            "Nchan's worker count is stated with its version; a worker is a process, \
             Herald's runtime threads are in one process."
                .to_owned(),
        ]);
    }
    if systems.contains(&System::Rabbitmq) {
        notes.extend([
            "RabbitMQ checks a login (guest), not a token; every subscription is a queue of its \
             own bound to amq.topic, which is how Web STOMP serves /topic destinations."
                .to_owned(),
            "RabbitMQ is published to over AMQP (confirmed, one in flight per lane), Herald and \
             Nchan over HTTP (one request in flight per connection)."
                .to_owned(),
            "RabbitMQ keeps nothing for a session that reconnects (its queues go with the \
             subscription); Herald's mailboxes replay."
                .to_owned(),
        ]);
    }
    let node: Vec<&str> = systems
        .iter()
        .filter(|s| matches!(s, System::SocketIo | System::Sockjs))
        .map(|s| s.name())
        .collect();
    if !node.is_empty() {
        let which = node.join(" and ");
        notes.extend([
            format!(
                "{which}: one Node.js process, so one core; Herald's runtime has a thread per \
                 core. Socket.IO's in-memory adapter cannot span processes (a cluster needs \
                 Redis or a cluster adapter)."
            ),
            format!(
                "{which} check no token and keep nothing for a session that is away (no \
                 replay); their notifications travel bare, inside their own framing \
                 (Socket.IO's event packet, SockJS's a[...] frame), not in STOMP frames."
            ),
            format!(
                "{which}: the channel of each session (a user, or `broadcast`) is a room (Socket.IO) \
                 or a set kept by the peer's script (sockjs), named in the session's URL; \
                 published to over HTTP with Nchan's interface (bench/peers/node-pubsub)."
            ),
        ]);
    }
    notes
}

/// Writes `compare.md`, `compare.json` and the charts into `dir`.
fn write_out(
    dir: &Path,
    markdown: &str,
    json: &str,
    charts: &[(String, String)],
) -> Result<(), BenchError> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| BenchError::Failed(format!("writing {}: {e}", path.display())))
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| BenchError::Failed(format!("creating {}: {e}", dir.display())))?;
    write("compare.md", markdown)?;
    write("compare.json", json)?;
    for (name, svg) in charts {
        write(name, svg)?;
    }
    eprintln!(
        "herald-bench: wrote {}/compare.md, compare.json and {} charts",
        dir.display(),
        charts.len()
    );
    Ok(())
}
