//! How a command ended: the exit code's inputs, shared by every command.

/// Why the run could not go on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// Bad arguments: exit with the usage code.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

/// How a run ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    AllOpened,
    SomeFailed,
}
