//! Callbacks: notifications that call an HTTP endpoint when they fall due.
//!
//! This module is the pure foundation of that feature: every part takes its
//! inputs (the answer, the time, the jitter) as arguments and does no I/O,
//! so each is tested on values. The sender that makes the requests, the
//! store of attempts and the `/v1/topics` settings build on it.
//!
//! # Layout
//! - [`condition`]: the `retry_if` language of a topic
//!   (`{res.code}!=200 && {res.data.status}!=2`): parsed once, bounded,
//!   evaluated against a status and a JSON body.
//! - [`signature`]: Standard Webhooks signing (`webhook-id`,
//!   `webhook-timestamp`, `webhook-signature`), several secrets at once for
//!   rotation, and verification for receivers and tests.
//! - [`retry`]: retry policies (explicit delays, 2n+1 minutes, exponential
//!   with full jitter), `Retry-After`, and their validation at registration.
//! - [`answer`]: what an answer means: a recheck proceeds, declines or is
//!   retried; a callback succeeded or failed; the excerpt of a body kept in
//!   an attempt record.
//! - [`attempt`]: the record of one recheck or call, and its stored form.
//! - [`step`]: what happens after an answer: call, delivered, declined,
//!   retry at a time, or dead.
//! - [`client`]: the HTTP client callbacks go out through: destinations
//!   checked after DNS on every connection, no redirects, bounded bodies,
//!   per-host concurrency and a [`breaker`] per host.
//! - [`exchange`]: one attempt: the signed recheck, then the signed call,
//!   recorded, and what follows.
//! - [`topic`]: a topic's callback settings as `PUT /v1/topics` takes
//!   them, each field checked with an error that names it.
//! - [`destination`]: where a callback may go: URL validation at
//!   registration and the SSRF classification of an address.
//! - [`target`]: a publication's own `callback_url`, `recheck_url` and
//!   `browsers`, checked at acceptance (HTTP and AMQP alike).
//! - [`alert`]: what a dead letter or a failing store raises: a log line,
//!   a metric, and, as `[callbacks.alerts]` says, a Slack-compatible
//!   webhook and mail, at most one message per kind per interval.
//! - [`config`]: `[callbacks]`, with `[callbacks.alerts]`.
//!
//! # Flow (as the sender will use it)
//! ```text
//! due --> destination::check(resolved address) --refused--> dead (recorded)
//!           | recheck_url?  answer::recheck --Decline--> declined
//!           |                               --Retry----> retry::Policy::next_delay
//!           v Proceed
//!         signature::sign --> POST callback_url --> answer::callback(condition)
//!           Delivered --> done          Failed --> next_delay (Retry-After clamped)
//!                                                  None --> dead, alert
//! ```

pub mod alert;
pub mod answer;
pub mod attempt;
pub mod breaker;
pub mod client;
pub mod condition;
pub mod config;
pub mod destination;
pub mod exchange;
pub mod guard;
pub mod host;
pub mod metrics;
pub mod retry;
pub mod signature;
pub mod step;
pub mod target;
pub mod topic;
