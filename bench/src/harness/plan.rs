//! Splitting N sessions over P worker processes and over source addresses.
//!
//! Two kernel limits shape a connection benchmark on one machine:
//! - file descriptors: each session is one socket, and a process may hold at most 20,000 fds
//!   here, so a worker opens at most [`MAX_SESSIONS_PER_PROCESS`] sessions (room is left for
//!   the runtime's own fds) and by default [`DEFAULT_SESSIONS_PER_PROCESS`];
//! - ephemeral ports: one source address has about 28,000 of them toward one destination, so
//!   each worker binds its sockets to its own source address (`127.0.0.2`, `127.0.0.3`, ... on
//!   loopback, where every address of 127/8 is local on Linux without configuration; or
//!   round-robin over `--source-addrs`).

use std::net::{IpAddr, Ipv4Addr};

/// Hard cap of sessions one worker process may hold.
pub(crate) const MAX_SESSIONS_PER_PROCESS: usize = 19_000;
/// Sessions per process when `--processes` is not given.
pub(crate) const DEFAULT_SESSIONS_PER_PROCESS: usize = 9_000;
/// First default source address on loopback; worker `i` uses this plus `i`.
pub(crate) const FIRST_LOOPBACK_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// What one worker process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerPlan {
    pub(crate) index: usize,
    pub(crate) sessions: usize,
    /// Local address its sockets bind to; `None` lets the kernel choose.
    pub(crate) source: Option<IpAddr>,
}

/// Why a split is impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("--sessions must be at least 1")]
    NoSessions,
    #[error("--processes must be at least 1")]
    NoProcesses,
    #[error("--processes {processes} is more than --sessions {sessions}")]
    MoreProcessesThanSessions { processes: usize, sessions: usize },
    #[error(
        "{per_process} sessions per process is over the limit of {MAX_SESSIONS_PER_PROCESS} \
         (each process may hold at most 20,000 file descriptors); use --processes {needed} or more"
    )]
    TooManyPerProcess { per_process: usize, needed: usize },
    #[error("source address {source_addr} is not of the same family as the target {target}")]
    FamilyMismatch { source_addr: IpAddr, target: IpAddr },
    #[error("no default source address for worker {index} on loopback")]
    OutOfLoopbackAddresses { index: usize },
}

/// Splits `sessions` over `processes` workers (default: `ceil(sessions / 9000)`), giving the
/// remainder one session each to the first workers, and assigns source addresses: round-robin
/// over `source_addrs` if given, else `127.0.0.(2+i)` when the target is IPv4 loopback, else
/// none.
pub(crate) fn plan(
    sessions: usize,
    processes: Option<usize>,
    source_addrs: &[IpAddr],
    target: IpAddr,
) -> Result<Vec<WorkerPlan>, PlanError> {
    if sessions == 0 {
        return Err(PlanError::NoSessions);
    }
    let processes = processes.unwrap_or_else(|| sessions.div_ceil(DEFAULT_SESSIONS_PER_PROCESS));
    if processes == 0 {
        return Err(PlanError::NoProcesses);
    }
    if processes > sessions {
        return Err(PlanError::MoreProcessesThanSessions {
            processes,
            sessions,
        });
    }
    let per_process = sessions.div_ceil(processes);
    if per_process > MAX_SESSIONS_PER_PROCESS {
        return Err(PlanError::TooManyPerProcess {
            per_process,
            needed: sessions.div_ceil(MAX_SESSIONS_PER_PROCESS),
        });
    }
    for &source_addr in source_addrs {
        if source_addr.is_ipv4() != target.is_ipv4() {
            return Err(PlanError::FamilyMismatch {
                source_addr,
                target,
            });
        }
    }

    let base = sessions / processes;
    let extra = sessions % processes;
    (0..processes)
        .map(|index| {
            let source = if source_addrs.is_empty() {
                default_source(index, target)?
            } else {
                Some(source_addrs[index % source_addrs.len()])
            };
            Ok(WorkerPlan {
                index,
                sessions: base + usize::from(index < extra),
                source,
            })
        })
        .collect()
}

fn default_source(index: usize, target: IpAddr) -> Result<Option<IpAddr>, PlanError> {
    match target {
        IpAddr::V4(v4) if v4.is_loopback() => {
            let first = u32::from(FIRST_LOOPBACK_SOURCE);
            let addr = u32::try_from(index)
                .ok()
                .and_then(|i| first.checked_add(i))
                .map(Ipv4Addr::from)
                .filter(|a| a.is_loopback() && *a != Ipv4Addr::new(127, 255, 255, 255))
                .ok_or(PlanError::OutOfLoopbackAddresses { index })?;
            Ok(Some(IpAddr::V4(addr)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn default_process_count_is_ceil_over_9000() {
        assert_eq!(plan(1, None, &[], LOOPBACK).unwrap().len(), 1);
        assert_eq!(plan(9_000, None, &[], LOOPBACK).unwrap().len(), 1);
        assert_eq!(plan(9_001, None, &[], LOOPBACK).unwrap().len(), 2);
        assert_eq!(plan(100_000, None, &[], LOOPBACK).unwrap().len(), 12);
    }

    #[test]
    fn remainder_goes_to_the_first_workers() {
        let p = plan(10, Some(3), &[], LOOPBACK).unwrap();
        let sizes: Vec<usize> = p.iter().map(|w| w.sessions).collect();
        assert_eq!(sizes, [4, 3, 3]);
        assert_eq!(sizes.iter().sum::<usize>(), 10);
        let indexes: Vec<usize> = p.iter().map(|w| w.index).collect();
        assert_eq!(indexes, [0, 1, 2]);
    }

    #[test]
    fn default_sources_on_loopback() {
        let p = plan(3, Some(3), &[], LOOPBACK).unwrap();
        let sources: Vec<Option<IpAddr>> = p.iter().map(|w| w.source).collect();
        assert_eq!(
            sources,
            [
                Some(ip("127.0.0.2")),
                Some(ip("127.0.0.3")),
                Some(ip("127.0.0.4"))
            ]
        );
        // All of 127/8 is loopback on Linux, so it simply counts on into the next octet, up
        // to (not including) the /8 broadcast address.
        assert_eq!(
            default_source(254, LOOPBACK).unwrap(),
            Some(ip("127.0.1.0"))
        );
        assert!(default_source((1 << 24) - 3, LOOPBACK).is_err());
    }

    #[test]
    fn no_default_source_off_loopback() {
        let p = plan(2, Some(2), &[], ip("10.0.0.5")).unwrap();
        assert!(p.iter().all(|w| w.source.is_none()));
        let p = plan(1, None, &[], ip("::1")).unwrap();
        assert_eq!(p[0].source, None);
    }

    #[test]
    fn explicit_sources_round_robin() {
        let sources = [ip("127.0.0.10"), ip("127.0.0.11")];
        let p = plan(5, Some(5), &sources, LOOPBACK).unwrap();
        let got: Vec<IpAddr> = p.iter().map(|w| w.source.unwrap()).collect();
        assert_eq!(
            got,
            [sources[0], sources[1], sources[0], sources[1], sources[0]]
        );
    }

    #[test]
    fn refuses_too_many_per_process() {
        assert_eq!(
            plan(40_000, Some(2), &[], LOOPBACK),
            Err(PlanError::TooManyPerProcess {
                per_process: 20_000,
                needed: 3
            })
        );
        assert!(plan(38_000, Some(2), &[], LOOPBACK).is_ok());
        assert!(plan(19_001, Some(1), &[], LOOPBACK).is_err());
    }

    #[test]
    fn refuses_nonsense() {
        assert_eq!(plan(0, None, &[], LOOPBACK), Err(PlanError::NoSessions));
        assert_eq!(plan(5, Some(0), &[], LOOPBACK), Err(PlanError::NoProcesses));
        assert_eq!(
            plan(2, Some(3), &[], LOOPBACK),
            Err(PlanError::MoreProcessesThanSessions {
                processes: 3,
                sessions: 2
            })
        );
        assert!(matches!(
            plan(2, Some(1), &[ip("::1")], LOOPBACK),
            Err(PlanError::FamilyMismatch { .. })
        ));
    }
}
