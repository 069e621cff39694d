//! What `delayed` and `callbacks` share: delayed notifications published over the HTTP API of a
//! Herald the bench started, and their arrivals measured against their due times.
//!
//! # Layout
//! - [`system`]: starting and cleaning up the Herald under test (a standalone gateway, or a
//!   router with Redis and an edge gateway); [`store`]: its store (Redis, or the embedded
//!   store's directory).
//! - [`plan`]: which notifications, due when, to whom (pure); [`crate::harness::delayed_ids`]:
//!   their ids (pure).
//! - [`body`]: the publish API's batch bodies and `202` answers (pure).
//! - [`ingest`]: publishing a plan over C keep-alive connections ([`crate::client::api`]).
//! - [`delivery`]: arrivals against due times (pure).
//! - [`usage`]: CPU per process; [`clock`]: epoch ms now.
//!
//! Imports go one way: `system -> store`, `ingest -> body -> plan`, `delivery -> plan`; none
//! goes to a command.

pub(crate) mod body;
pub(crate) mod clock;
pub(crate) mod delivery;
pub(crate) mod ingest;
pub(crate) mod plan;
pub(crate) mod store;
pub(crate) mod system;
pub(crate) mod usage;
