//! Herald's root layer: where publications come in.
//!
//! # Layout
//! - [`publish`]: the HTTP publish API (`POST /v1/notifications`): parsing,
//!   API-key authentication, validation, JSON errors.
//! - [`link`]: the [`link::Link`] trait through which accepted notifications
//!   leave the router. Standalone Herald implements it in-process (straight
//!   into the gateway's mailboxes); the distributed router implements it
//!   over AMQP. One routing core, two links.
//! - [`api_key`]: API keys, compared in constant time.
//! - [`metrics`]: counters for accepted and rejected publications.
//!
//! # Contract
//! A publication is parsed into a [`herald_protocol::envelope::Notification`],
//! validated once against [`herald_protocol::envelope::Limits`], wrapped in an
//! `Arc` and handed to the link. Nothing is acknowledged (HTTP 202) before the
//! link has taken it.

pub mod api_key;
pub mod link;
pub mod metrics;
pub mod publish;
