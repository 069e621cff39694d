//! Herald's own AMQP 0-9-1 client for a consumer: one connection, one
//! channel, driven by the task that owns it.
//!
//! lapin runs each connection's socket on a thread of its own and hands
//! every delivery to the consuming task through a channel, and every ack
//! back: at a few hundred deliveries a second that is two thread wake-ups
//! per delivery, most of an edge's CPU (bench/reports/targeted.md). Here
//! the consuming task reads the socket itself: a burst of deliveries is
//! parsed from one read and acknowledged with one write, with no other
//! thread involved. The frame codec is pure ([`frame`], [`delivery`]);
//! [`conn`] does the I/O; `declare` holds the declarations.

pub mod conn;
mod declare;
pub mod delivery;
pub mod frame;
pub mod nesting;

pub use conn::{Wire, WireConfig, WireError};
pub use delivery::{Assembled, Delivery};
