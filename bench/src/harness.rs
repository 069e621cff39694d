//! What the commands share: a run's names, files, processes and cleanup, the conversation with
//! worker processes, sampling CPU and RSS, tokens, statistics and reports. Nothing here knows a
//! command or the STOMP client ([`crate::client`]); the commands build on it.

pub(crate) mod amqp;
pub(crate) mod clock;
pub(crate) mod configs;
pub(crate) mod cpu;
pub(crate) mod delayed_ids;
pub(crate) mod endpoint;
pub(crate) mod events;
pub(crate) mod interrupt;
pub(crate) mod opening;
pub(crate) mod outcome;
pub(crate) mod pacing;
pub(crate) mod plan;
pub(crate) mod proctree;
pub(crate) mod progress;
pub(crate) mod receiver;
pub(crate) mod report;
pub(crate) mod rss;
pub(crate) mod run;
pub(crate) mod service;
pub(crate) mod standalone;
pub(crate) mod stats;
pub(crate) mod sys;
pub(crate) mod token;
pub(crate) mod workers;
