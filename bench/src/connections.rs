//! `herald-bench connections`: the parent process.
//!
//! The parent never opens sessions. It plans the split ([`crate::harness::plan`]), optionally
//! starts the gateway, reads a baseline RSS, re-executes its own binary as `worker` processes
//! ([`crate::harness::workers`]), follows their JSON-line events ([`crate::harness::events`])
//! until every worker is ready, reads the settled RSS, prints the report, holds, tells the
//! workers to close, waits for them (with a deadline), and stops a gateway it started.
//!
//! # Layout
//! [`args`] (the command line), [`gateway`] (a gateway the bench starts itself),
//! [`measure`](mod@measure) (one run in phases: baseline, workers, connect, RSS, report, hold,
//! close; the workers' side of it is [`crate::harness::opening`]), [`report`] (the result).

mod args;
mod gateway;
mod measure;
mod report;

pub(crate) use self::args::ConnectionsArgs;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use self::gateway::SpawnedGateway;
use self::measure::measure;
use crate::harness::endpoint::Endpoint;
use crate::harness::outcome::{BenchError, Outcome};
use crate::harness::plan;
use crate::harness::sys;
use crate::harness::token::random_token;

pub(crate) async fn run(args: ConnectionsArgs) -> Result<Outcome, BenchError> {
    if let Err(e) = sys::raise_nofile_limit() {
        eprintln!("herald-bench: cannot raise RLIMIT_NOFILE ({e}); continuing");
    }

    // Validate everything before starting anything.
    if args.jwt_secret.is_none() && args.spawn_gateway.is_none() && args.transport.presents_jwt() {
        return Err(BenchError::Usage(format!(
            "--jwt-secret (or {}) is required for --transport {} unless --spawn-gateway",
            crate::harness::token::JWT_SECRET_ENV,
            args.transport
        )));
    }
    let target_ip = match &args.spawn_gateway {
        Some(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        None => {
            let endpoint =
                Endpoint::parse(&args.url()).map_err(|e| BenchError::Usage(e.to_string()))?;
            endpoint
                .resolve()
                .await
                .map_err(|e| BenchError::Failed(e.to_string()))?
                .ip()
        }
    };
    let plans = plan::plan(args.sessions, args.processes, &args.source_addrs, target_ip)
        .map_err(|e| BenchError::Usage(e.to_string()))?;
    let jwt_secret = args.jwt_secret.clone().unwrap_or_else(|| random_token(32));

    let gateway = match &args.spawn_gateway {
        Some(path) => {
            let gw = SpawnedGateway::start(
                path,
                &jwt_secret,
                args.gateway_log.as_deref(),
                Duration::from_secs(args.startup_timeout),
            )
            .await
            .map_err(|e| BenchError::Failed(e.to_string()))?;
            eprintln!(
                "herald-bench: started gateway pid {} on {}",
                gw.pid(),
                gw.addr
            );
            Some(gw)
        }
        None => None,
    };
    let result = measure(&args, &plans, &jwt_secret, gateway.as_ref()).await;
    if let Some(gw) = gateway {
        let how = gw.stop().await;
        eprintln!("herald-bench: gateway {how}");
    }
    result
}
