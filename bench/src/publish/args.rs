//! The arguments of `herald-bench publish`, checked (pure).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Most notifications in one request: the gateway's `publish.max_batch` by default.
pub(crate) const MAX_BATCH: usize = 1000;

#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    /// The herald-gateway binary to start standalone (its own data directory, ports, keys).
    #[arg(long, value_name = "PATH")]
    pub(crate) gateway_bin: PathBuf,

    /// A second herald-gateway binary (the build before a change), started and measured the
    /// same way in every round, alternating with --gateway-bin (A B A B): the report gives
    /// --gateway-bin's figures over this one's, round by round.
    #[arg(long, value_name = "PATH")]
    pub(crate) baseline_gateway_bin: Option<PathBuf>,

    /// The body of a request: `raw` (`Content-Type: text/plain`, the payload; the envelope in
    /// the query string: one notification per request) or `json` (`application/json`, one
    /// object, or an array of --batch objects).
    #[arg(long, value_enum, default_value_t = Body::Raw)]
    pub(crate) body: Body,

    /// Notifications per request (more than 1: a JSON array, so --body json).
    #[arg(long, default_value_t = 1)]
    pub(crate) batch: usize,

    /// Notifications measured in each round, per binary.
    #[arg(long, default_value_t = 50_000)]
    pub(crate) notifications: usize,

    /// Notifications published before the measured ones, not counted: the code paths,
    /// connections and buffers exist by then.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) warmup: usize,

    /// Keep-alive HTTP connections publishing in parallel.
    #[arg(long, default_value_t = 4)]
    pub(crate) connections: usize,

    /// Requests each connection keeps in flight (HTTP/1.1 pipelining: written one after the
    /// other without waiting; 1: each waits for the answer to the one before).
    #[arg(long, default_value_t = 1)]
    pub(crate) depth: usize,

    /// Bytes of each payload.
    #[arg(long, default_value_t = 100)]
    pub(crate) payload: usize,

    /// Distinct users the notifications go to, round-robin. Nobody holds a session: what is
    /// measured is the publish path (request, checks, routing to no mailbox, answer).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) users: usize,

    /// Rounds; each starts every binary afresh.
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: usize,

    /// Seconds to wait for the gateway's /readyz (a gateway under valgrind needs more).
    #[arg(long, default_value_t = 30)]
    pub(crate) startup_timeout: u64,

    /// Where the gateways' stdout and stderr go (`<dir>/<label>-<round>.log`) [default:
    /// discarded].
    #[arg(long, value_name = "DIR")]
    pub(crate) log_dir: Option<PathBuf>,

    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What a request's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Body {
    /// The payload itself (`text/plain`), the envelope in the query string.
    Raw,
    /// A JSON object (or an array of them) whose `payload` is a JSON string.
    Json,
}

impl PublishArgs {
    /// Every problem with the arguments, in one message.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.batch == 0 || self.batch > MAX_BATCH {
            problems.push(format!("--batch must be 1 to {MAX_BATCH}"));
        }
        if self.batch > 1 && self.body == Body::Raw {
            problems
                .push("--batch over 1 needs --body json (a raw body is one notification)".into());
        }
        if self.notifications == 0 {
            problems.push("--notifications must be at least 1".into());
        }
        if self.batch > 0 && !self.notifications.is_multiple_of(self.batch) {
            problems.push("--notifications must be a multiple of --batch".into());
        }
        if self.batch > 0 && !self.warmup.is_multiple_of(self.batch) {
            problems.push("--warmup must be a multiple of --batch".into());
        }
        if self.connections == 0 {
            problems.push("--connections must be at least 1".into());
        }
        if self.depth == 0 || self.depth > 256 {
            problems.push("--depth must be 1 to 256".into());
        }
        if self.users == 0 {
            problems.push("--users must be at least 1".into());
        }
        if self.rounds == 0 {
            problems.push("--rounds must be at least 1".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::{Cli, Command};

    fn parse(extra: &[&str]) -> super::PublishArgs {
        let mut argv = vec!["herald-bench", "publish", "--gateway-bin", "gw"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Publish(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_single_raw_requests_and_pass() {
        let args = parse(&[]);
        assert_eq!(
            (args.body, args.batch, args.depth),
            (super::Body::Raw, 1, 1)
        );
        assert_eq!(args.check(), Ok(()));
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let err = parse(&["--batch", "100", "--notifications", "150", "--depth", "0"])
            .check()
            .unwrap_err();
        assert!(err.contains("--body json"), "{err}");
        assert!(err.contains("multiple of --batch"), "{err}");
        assert!(err.contains("--depth"), "{err}");
        assert_eq!(
            parse(&[
                "--body",
                "json",
                "--batch",
                "100",
                "--notifications",
                "1000",
                "--warmup",
                "200"
            ])
            .check(),
            Ok(())
        );
    }
}
