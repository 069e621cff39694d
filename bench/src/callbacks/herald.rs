//! One Herald run: a fresh Herald (standalone gateway, or router with Redis) started by
//! [`System`], a topic registered with the receiver's URL and a signing secret, the plan
//! published over the HTTP API naming that topic, and the callbacks awaited at the receiver.
//! Herald, its files and its Redis keys are gone at the end, whatever happened.

use std::sync::Arc;

use super::outcome::{self, BENCH, Published, RunOutcome};
use super::settings::{SIGNING_SECRET, Settings, Side, TOPIC};
use crate::client::api::ApiConnection;
use crate::harness::interrupt::interruptible;
use crate::harness::outcome::BenchError;
use crate::harness::receiver::Receiver;
use crate::scheduled::clock::now_ms;
use crate::scheduled::delivery::due_table;
use crate::scheduled::ingest::{self, Progress};
use crate::scheduled::plan::Users;
use crate::scheduled::system::System;
use crate::scheduled::usage::{Split, Usage};

/// Users the notifications name (nobody is connected: the browser part costs little).
const USERS: usize = 1_000;

/// One run of Herald, cleaned up after.
pub(crate) async fn run(s: &Settings, round: usize) -> Result<RunOutcome, BenchError> {
    let mut system = System::begin(&s.system).await?;
    let measured = interruptible(measure(s, round, &mut system)).await;
    let cleanup = system.finish().await;
    let mut outcome = measured?;
    for (name, how) in &cleanup.amqp.stopped {
        outcome.cleanup.push(format!("{name} {how}"));
    }
    if let Some(n) = cleanup.redis_keys_deleted {
        outcome.cleanup.push(format!("{n} Redis keys deleted"));
    }
    if let Some(p) = cleanup.redis_problem {
        outcome.problems.push(format!("cleanup: {p}"));
    }
    for p in cleanup.amqp.problems {
        outcome.problems.push(format!("cleanup: {p}"));
    }
    Ok(outcome)
}

async fn measure(
    s: &Settings,
    round: usize,
    system: &mut System,
) -> Result<RunOutcome, BenchError> {
    let receiver = Receiver::start(s.count, s.receiver_delay)
        .await
        .map_err(|e| BenchError::Failed(format!("receiver: {e}")))?;
    system.start(&s.system, false).await?;
    let addr = system
        .api_addr
        .ok_or_else(|| BenchError::Failed("no API address".into()))?;
    register_topic(
        &mut ApiConnection::new(addr, &system.api_key),
        &receiver.url(),
    )
    .await?;

    let mut usage = Usage::default();
    for (name, pid) in system.pids() {
        usage.watch(name, vec![pid]);
    }
    if let Some(pid) = system.redis.as_ref().and_then(|r| r.pid) {
        usage.watch("redis", vec![pid]);
    }
    usage.watch(BENCH, vec![std::process::id()]);

    let plan = s.plan(now_ms());
    let publishing = ingest::Settings {
        addr,
        api_key: system.api_key.clone(),
        connections: s.connections,
        batch: s.batch,
        payload_bytes: s.payload_bytes,
        keep_dues: true,
        topic: Some(TOPIC.to_owned()),
        callback_only: !s.browsers,
    };
    let before = usage.read();
    let ingested = ingest::publish(
        &publishing,
        plan,
        Arc::new(Users::offline(USERS)),
        Arc::new(Progress::default()),
    )
    .await;
    let publish_cpu = Split::between(&before, &usage.read());
    eprintln!(
        "herald-bench: herald accepted {} in {:.2} s",
        ingested.accepted, ingested.seconds
    );
    let mut problems = Vec::new();
    if now_ms() >= plan.first_due_ms() {
        problems.push("publishing ended after the first due time (raise --lead-ms)".to_owned());
    }
    let dues = due_table(&plan, &ingested.dues);
    let mut exited = || system.exited();
    let firing = outcome::await_arrivals(
        s,
        &receiver,
        &plan,
        ingested.accepted,
        &usage,
        &mut exited,
        &mut problems,
    )
    .await;
    let arrived = receiver.stop();
    let published = Published {
        accepted: ingested.accepted,
        seconds: ingested.seconds,
        refused: ingested.refused,
    };
    Ok(RunOutcome::new(
        s,
        Side::Herald,
        round,
        system.run_id.clone(),
        &plan,
        &dues,
        published,
        arrived,
        publish_cpu,
        firing,
        problems,
    ))
}

/// `PUT /v1/topics/{TOPIC}`: callbacks to `url`, signed with [`SIGNING_SECRET`], Herald's
/// defaults for everything else.
async fn register_topic(conn: &mut ApiConnection, url: &str) -> Result<(), BenchError> {
    let body = serde_json::json!({
        "callback_url": url,
        "signing_secrets": [SIGNING_SECRET],
    });
    let path = format!("/v1/topics/{TOPIC}");
    let response = conn
        .put_json(&path, body.to_string().as_bytes())
        .await
        .map_err(|e| BenchError::Failed(format!("PUT {path}: {e}")))?;
    if !matches!(response.status, 200 | 201) {
        return Err(BenchError::Failed(format!(
            "PUT {path}: {} {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        )));
    }
    Ok(())
}
