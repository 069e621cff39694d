//! The one question the firer asks about presence: is this user online on
//! one of these sites? Defined here, where it is asked, so the delayed
//! service needs nothing from [`crate::presence`], which implements it
//! (standalone: the gateway's hub; distributed: the routers' Redis) and
//! re-exports it.

use std::future::Future;
use std::pin::Pin;

/// A future returned by [`Presence::online`].
pub type PresenceFuture<'a> = Pin<Box<dyn Future<Output = Vec<bool>> + Send + 'a>>;

/// A user to ask about, and the sites that count (any when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The user id.
    pub user: String,
    /// The notification's sites.
    pub sites: Vec<String>,
}

/// Answers whether users have a live session. Standalone Herald asks its
/// own mailboxes; the distributed router asks what the edges reported.
/// Asked once per claimed batch, for every `when-online` entry in it.
pub trait Presence: Send + Sync + 'static {
    /// For each of `who`, in order: whether that user has a live session on
    /// one of the sites. A presence source that cannot answer says
    /// `false` (the entry is held, never lost: the user's next connect
    /// releases it).
    fn online<'a>(&'a self, who: &'a [Asked]) -> PresenceFuture<'a>;
}
