//! One attempt of a callback: the recheck (if the topic has one), then the
//! call, each signed, each recorded, and what follows
//! ([`super::step::Next`]). No state of its own: the caller records the
//! attempts and the outcome through the store.
//!
//! # The requests
//! - Recheck: `GET recheck_url` with `id`, `topic` and `user` (when there
//!   is one) added to its query, signed over an empty body.
//! - Call: `POST callback_url` with the payload and its content type.
//!
//! Both carry the Standard Webhooks headers (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`, when the topic has secrets)
//! and `herald-topic`, `herald-attempt`, `herald-notification-id`, and
//! `herald-user` when there is one. `webhook-id` is the same for every
//! attempt of a notification, so a receiver can drop a repeat:
//! `msg_` followed by the notification id in unpadded base64url (a
//! notification id may hold a `.`, which a webhook id may not).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::answer::{self, Answer as Meaning, RECORD_BYTES};
use super::attempt::{Attempt, Kind, Verdict};
use super::client::{Answer, Client, Failure, Request};
use super::signature;
use super::step::{self, Context, Next};
use super::topic::Topic;
use url::Url;

/// What to call for one notification.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// The notification id.
    pub id: &'a str,
    /// Its topic's name, if it has one.
    pub topic_name: Option<&'a str>,
    /// The settings its callback follows: its topic's, or the defaults
    /// when it has none registered.
    pub topic: &'a Topic,
    /// Where the call goes: the notification's own `callback_url`, else
    /// its topic's.
    pub callback_url: &'a Url,
    /// What is asked first, if anything: its own `recheck_url`, else its
    /// topic's.
    pub recheck_url: Option<&'a Url>,
    /// Its one user, if it has one.
    pub user: Option<&'a str>,
    /// The payload's content type.
    pub content_type: &'a str,
    /// The payload.
    pub payload: &'a Bytes,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
}

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What follows.
    pub next: Next,
    /// The requests made, in order (none when the host was paused).
    pub attempts: Vec<Attempt>,
    /// Whether this used up an attempt of the policy (not when the host
    /// was paused by its breaker: nothing was tried).
    pub counted: bool,
}

/// The `webhook-id` of notification `id`.
pub fn webhook_id(id: &str) -> String {
    format!("msg_{}", URL_SAFE_NO_PAD.encode(id))
}

/// Run one attempt of `job` at `now_ms`; `jitter` in `[0, 1)` for a
/// jittered retry policy.
pub async fn run(client: &Client, job: &Job<'_>, now_ms: u64, jitter: f64) -> Outcome {
    let mut attempts = Vec::new();
    if let Some(recheck_url) = job.recheck_url {
        let mut url = recheck_url.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("id", job.id);
            if let Some(topic) = job.topic_name {
                q.append_pair("topic", topic);
            }
            if let Some(user) = job.user {
                q.append_pair("user", user);
            }
        }
        let request = match request(job, Method::GET, url, Bytes::new(), None, now_ms) {
            Ok(r) => r,
            Err(reason) => return dead(reason, attempts),
        };
        let (result, record) = exchange(client, request, Kind::Recheck, job.attempt, now_ms).await;
        let result = match result {
            Exchanged::Paused { until_ms, reason } => return paused(until_ms, reason, attempts),
            Exchanged::Refused(reason) => return dead_with(reason, attempts, record),
            Exchanged::Answer(a) => a,
        };
        let meaning = answer::recheck(&meaning_of(&result));
        let verdict = match &meaning {
            answer::Recheck::Proceed => Verdict::Proceed,
            answer::Recheck::Decline { .. } => Verdict::Declined,
            answer::Recheck::Retry { .. } => Verdict::Failed,
        };
        attempts.push(record.finish(verdict, reason_of_recheck(&meaning)));
        let cx = context(job, &result, now_ms, jitter);
        match step::after_recheck(meaning, &cx) {
            Next::Call => {}
            other => {
                return Outcome {
                    next: other,
                    attempts,
                    counted: true,
                };
            }
        }
    }
    let request = match request(
        job,
        Method::POST,
        job.callback_url.clone(),
        job.payload.clone(),
        Some(job.content_type),
        now_ms,
    ) {
        Ok(r) => r,
        Err(reason) => return dead(reason, attempts),
    };
    let (result, record) = exchange(client, request, Kind::Call, job.attempt, now_ms).await;
    let result = match result {
        Exchanged::Paused { until_ms, reason } => return paused(until_ms, reason, attempts),
        Exchanged::Refused(reason) => return dead_with(reason, attempts, record),
        Exchanged::Answer(a) => a,
    };
    let condition = job.topic.retry_if.as_ref().map(|r| &r.condition);
    let meaning = answer::callback(&meaning_of(&result), condition);
    let (verdict, error) = match &meaning {
        answer::Outcome::Delivered => (Verdict::Delivered, None),
        answer::Outcome::Failed { reason } => (Verdict::Failed, Some(reason.clone())),
    };
    attempts.push(record.finish(verdict, error));
    let cx = context(job, &result, now_ms, jitter);
    Outcome {
        next: step::after_call(meaning, &cx),
        attempts,
        counted: true,
    }
}

/// What came of one request, as the attempt logic needs it.
enum Exchanged {
    Answer(Result<Answer, Failure>),
    Paused { until_ms: u64, reason: String },
    Refused(String),
}

/// An attempt record being filled in.
struct Record {
    at_ms: u64,
    started: std::time::Instant,
    attempt: u32,
    kind: Kind,
    status: Option<u16>,
    excerpt: String,
    failure: Option<String>,
}

impl Record {
    fn finish(self, verdict: Verdict, error: Option<String>) -> Attempt {
        Attempt {
            at_ms: self.at_ms,
            duration_ms: u32::try_from(self.started.elapsed().as_millis()).unwrap_or(u32::MAX),
            attempt: self.attempt,
            kind: self.kind,
            status: self.status,
            verdict,
            error: error.or(self.failure),
            excerpt: self.excerpt,
        }
    }
}

async fn exchange(
    client: &Client,
    request: Request,
    kind: Kind,
    attempt: u32,
    now_ms: u64,
) -> (Exchanged, Record) {
    let mut record = Record {
        at_ms: now_ms,
        started: std::time::Instant::now(),
        attempt,
        kind,
        status: None,
        excerpt: String::new(),
        failure: None,
    };
    let result = client.send(request, now_ms).await;
    let exchanged = match result {
        Ok(a) => {
            record.status = Some(a.status);
            record.excerpt = kept_excerpt(&a);
            Exchanged::Answer(Ok(a))
        }
        Err(Failure::Paused { host, until_ms }) => Exchanged::Paused {
            until_ms,
            reason: format!("{host} is paused after repeated failures"),
        },
        Err(Failure::Refused(why)) => {
            record.failure = Some(format!("refused destination: {why}"));
            Exchanged::Refused(format!("refused destination: {why}"))
        }
        Err(f) => {
            record.failure = Some(f.to_string());
            Exchanged::Answer(Err(f))
        }
    };
    (exchanged, record)
}

/// What an attempt record keeps of an answer's body: its start, unless it
/// came from a destination that is not plainly public, whose answer stays
/// inside ([`Answer::public`]).
fn kept_excerpt(a: &Answer) -> String {
    match a.public {
        true => answer::excerpt(&a.body, RECORD_BYTES),
        false => String::new(),
    }
}

fn meaning_of(result: &Result<Answer, Failure>) -> Meaning<'_> {
    match result {
        Ok(a) => Meaning::Response {
            status: a.status,
            body: &a.body,
            quote: a.public,
        },
        Err(Failure::Timeout(_)) => Meaning::Timeout,
        Err(f) => Meaning::Network {
            error: match f {
                Failure::Network(e) => e,
                _ => "no answer",
            },
        },
    }
}

fn reason_of_recheck(meaning: &answer::Recheck) -> Option<String> {
    match meaning {
        answer::Recheck::Proceed => None,
        answer::Recheck::Decline { reason } | answer::Recheck::Retry { reason } => {
            Some(reason.clone())
        }
    }
}

fn context<'a>(
    job: &'a Job<'_>,
    result: &'a Result<Answer, Failure>,
    now_ms: u64,
    jitter: f64,
) -> Context<'a> {
    let (status, retry_after) = match result {
        Ok(a) => (Some(a.status), a.retry_after.as_deref()),
        Err(_) => (None, None),
    };
    Context {
        policy: &job.topic.retry,
        attempts_done: job.attempt,
        now_ms,
        jitter,
        status,
        retry_after,
    }
}

fn paused(until_ms: u64, reason: String, attempts: Vec<Attempt>) -> Outcome {
    Outcome {
        next: Next::RetryAt {
            at_ms: until_ms,
            reason,
        },
        attempts,
        counted: false,
    }
}

fn dead(reason: String, attempts: Vec<Attempt>) -> Outcome {
    Outcome {
        next: Next::Dead { reason },
        attempts,
        counted: true,
    }
}

fn dead_with(reason: String, mut attempts: Vec<Attempt>, record: Record) -> Outcome {
    attempts.push(record.finish(Verdict::Failed, Some(reason.clone())));
    dead(reason, attempts)
}

/// A signed request.
fn request(
    job: &Job<'_>,
    method: Method,
    url: url::Url,
    body: Bytes,
    content_type: Option<&str>,
    now_ms: u64,
) -> Result<Request, String> {
    // Room for every header below without growing.
    let mut headers = HeaderMap::with_capacity(12);
    let mut put = |name: &'static str, value: &str| -> Result<(), String> {
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("{name} {value:?} cannot be sent as a header"))?;
        headers.insert(HeaderName::from_static(name), value);
        Ok(())
    };
    if let Some(topic) = job.topic_name {
        put("herald-topic", topic)?;
    }
    put("herald-attempt", &job.attempt.to_string())?;
    // The id as published; the webhook-id below is made of the id kept,
    // with its tenant, so that two tenants' notifications never share one.
    put(
        "herald-notification-id",
        herald_protocol::tenant::public_id(job.id),
    )?;
    if let Some(user) = job.user {
        put("herald-user", user)?;
    }
    if let Some(ct) = content_type {
        put("content-type", ct)?;
    }
    let webhook_id = webhook_id(job.id);
    put("webhook-id", &webhook_id)?;
    let timestamp = now_ms / 1000;
    put("webhook-timestamp", &timestamp.to_string())?;
    if !job.topic.signing_secrets.is_empty() {
        let signed = signature::sign(&webhook_id, timestamp, &body, &job.topic.signing_secrets)
            .map_err(|e| e.to_string())?;
        put("webhook-signature", &signed.signature)?;
    }
    Ok(Request {
        method,
        url,
        headers,
        body,
        timeout: std::time::Duration::from_millis(job.topic.timeout_ms),
    })
}

#[cfg(test)]
mod tests;
