//! The error every store method can answer: a leaf module, so that the
//! store and the presence traits can both name it.

/// The store failed; the operation may or may not have happened, except
/// where a method says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend is unreachable or failed (I/O, connection, server error).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be read.
    #[error("corrupt record for {id}: {reason}")]
    Corrupt {
        /// The entry's id.
        id: String,
        /// What is wrong.
        reason: String,
    },
}
