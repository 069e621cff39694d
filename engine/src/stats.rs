//! The operator's figures: per-topic rolling counts and what
//! `GET /v1/stats` answers (docs/stats.md).
//!
//! # Layout
//! - [`window`]: rolling windows (last minute, hour, day) of per-topic
//!   counts and firing lateness; pure, every call takes `now`.
//! - [`topics`]: [`topics::TopicStats`], one process's table of windows by
//!   topic (registered topics and `other`, bounded) and the
//!   `herald_topic_*` Prometheus counters beside it. The publish paths,
//!   the firer and its outcomes, and the gateway's hub count into it.
//! - [`part`]: [`part::Part`], one process's figures (an edge's stats
//!   report, a router's summary, a standalone gateway), and their sum.
//! - [`answer`]: the query, body and cache validators of `/v1/stats`.
//! - The routers keep every part in Redis, where every router reads them:
//!   `schedule::store::redis::RedisStatsBook` (feature `redis`).

pub mod answer;
pub mod part;
pub mod topics;
pub mod window;

pub use topics::TopicStats;
pub use window::Event;
