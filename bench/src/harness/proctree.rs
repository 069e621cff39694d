//! A server as the processes it runs: a root process and its descendants (nginx's master and
//! workers; a single process for Herald), read from `/proc`. CPU time is summed; memory is the
//! sum of each process's proportional set size (`Pss` in `/proc/PID/smaps_rollup`), which
//! counts a page shared by several processes (nginx's shared memory zone, the binary) once in
//! all, where summed RSS would count it once per process.

use crate::harness::cpu::{self, CpuTime};
use crate::harness::rss;

/// The pid of process `pid`'s parent, from the text of `/proc/PID/stat` (field 4, counted from
/// the last `)` because the command name may hold anything).
pub(crate) fn parse_parent(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

/// `Pss` from the text of `/proc/PID/smaps_rollup`, in bytes.
pub(crate) fn parse_pss(smaps_rollup: &str) -> Option<u64> {
    rss::parse_status_bytes(smaps_rollup, "Pss")
}

/// `root` and every process descended from it, root first.
pub(crate) fn pids(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                && let Some(parent) = parse_parent(&stat)
            {
                parents.push((pid, parent));
            }
        }
    }
    descendants(root, &parents)
}

/// `root` and its descendants among `(pid, parent)` pairs, root first (pure).
pub(crate) fn descendants(root: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for &(pid, p) in parents {
            if p == parent && !tree.contains(&pid) {
                tree.push(pid);
            }
        }
        i += 1;
    }
    tree
}

/// The CPU time `root` and its descendants have used so far. A process that exits between the
/// listing and the read is left out.
pub(crate) fn cpu(root: u32) -> std::io::Result<CpuTime> {
    let mut total = cpu::read_cpu(root)?;
    for pid in pids(root).into_iter().skip(1) {
        if let Ok(t) = cpu::read_cpu(pid) {
            total.user_seconds += t.user_seconds;
            total.system_seconds += t.system_seconds;
        }
    }
    Ok(total)
}

/// The summed `Pss` of `root` and its descendants, in bytes.
pub(crate) fn pss(root: u32) -> std::io::Result<u64> {
    let mut total = 0;
    for (i, pid) in pids(root).into_iter().enumerate() {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
            Ok(text) => text,
            // A descendant that just exited; the root must be readable.
            Err(_) if i > 0 => continue,
            Err(e) => return Err(e),
        };
        total += parse_pss(&text).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("/proc/{pid}/smaps_rollup has no Pss line"),
            )
        })?;
    }
    Ok(total)
}

/// The summed `Pss` of `root` and its descendants once it settles ([`rss::settled`]).
pub(crate) async fn settled_pss(root: u32) -> std::io::Result<rss::Reading> {
    rss::settled(|| pss(root)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_is_read_after_the_name() {
        assert_eq!(parse_parent("42 (nginx) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_parent("42 (a) b (c) S 9 42 42 0"), Some(9));
        assert_eq!(parse_parent("garbage"), None);
    }

    #[test]
    fn pss_in_bytes() {
        let text = "55d0-7ffe ---p 00000000 00:00 0 [rollup]\nRss:  2048 kB\nPss:  1024 kB\nPss_Anon: 512 kB\n";
        assert_eq!(parse_pss(text), Some(1024 * 1024));
        assert_eq!(parse_pss("Rss: 1 kB\n"), None);
    }

    #[test]
    fn descendants_of_a_tree() {
        let parents = [(10, 1), (11, 10), (12, 10), (13, 11), (20, 1), (10, 10)];
        assert_eq!(descendants(10, &parents), vec![10, 11, 12, 13]);
        assert_eq!(descendants(99, &parents), vec![99]);
    }

    #[test]
    fn this_process_is_its_own_tree() {
        let me = std::process::id();
        assert_eq!(pids(me).first(), Some(&me));
        assert!(cpu(me).is_ok());
        assert!(pss(me).unwrap() > 0);
    }
}
