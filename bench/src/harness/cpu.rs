//! CPU time of a process, from `/proc/PID/stat` (`utime` + `stime`, in clock ticks), the
//! machine's load average (`/proc/loadavg`), for the load context of a report, and a fixed
//! reference workload that tells how fast this machine is.

use std::time::Instant;

use serde::Serialize;

use crate::harness::sys;

/// CPU time a process has used, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub(crate) struct CpuTime {
    pub(crate) user_seconds: f64,
    pub(crate) system_seconds: f64,
}

impl CpuTime {
    pub(crate) fn total(&self) -> f64 {
        self.user_seconds + self.system_seconds
    }

    /// The time used between `earlier` and `self`.
    pub(crate) fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user_seconds: self.user_seconds - earlier.user_seconds,
            system_seconds: self.system_seconds - earlier.system_seconds,
        }
    }
}

/// `utime` and `stime` (fields 14 and 15, in clock ticks) from the text of `/proc/PID/stat`.
/// The command name (field 2) is in parentheses and may hold spaces and parentheses itself, so
/// fields are counted from the last `)`.
pub(crate) fn parse_stat_ticks(stat: &str) -> Option<(u64, u64)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first one after the name: field n is at index n - 3.
    let mut fields = after_comm.split_whitespace().skip(14 - 3);
    let utime = fields.next()?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The CPU time process `pid` has used so far (its threads included).
pub(crate) fn read_cpu(pid: u32) -> std::io::Result<CpuTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (utime, stime) = parse_stat_ticks(&stat).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no utime/stime"),
        )
    })?;
    let hz = sys::clock_ticks_per_second()? as f64;
    Ok(CpuTime {
        user_seconds: utime as f64 / hz,
        system_seconds: stime as f64 / hz,
    })
}

/// The 1-minute load average, from `/proc/loadavg`.
pub(crate) fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// How many numbers [`reference_ms`] sorts.
const REFERENCE_LEN: usize = 1_000_000;

/// A fixed single-threaded workload, timed: sorting the same 1,000,000 pseudo-random `u64`s
/// (branches and cache misses, like the servers' index work), the best of three runs, in ms.
/// A yardstick for figures measured on different machines of the same kind: where it takes
/// twice as long, expect about half the throughput. Run it before the servers start.
pub(crate) fn reference_ms() -> f64 {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let numbers: Vec<u64> = (0..REFERENCE_LEN)
        .map(|_| {
            // xorshift64: the same sequence every run.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    (0..3)
        .map(|_| {
            let mut v = numbers.clone();
            let start = Instant::now();
            v.sort_unstable();
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            std::hint::black_box(&v);
            ms
        })
        .fold(f64::INFINITY, f64::min)
}

/// The number of CPUs this process may run on.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utime_and_stime() {
        let stat = "4242 (herald-router) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    517 203 0 0 20 0 3 0 987654 123456789 3000 18446744073709551615 1 1 0 0 0 0 0 \
                    4096 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat_ticks(stat), Some((517, 203)));
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_is_skipped() {
        let stat = "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 11 22 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_ticks(stat), Some((11, 22)));
        assert_eq!(parse_stat_ticks("7 (x) R 1 2"), None);
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn reads_own_cpu_and_the_load() {
        let before = read_cpu(std::process::id()).unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = read_cpu(std::process::id()).unwrap();
        assert!(after.total() >= before.total());
        assert!(after.since(&before).total() >= 0.0);
        assert!(load_average().is_some());
        assert!(cores() >= 1);
        let reference = reference_ms();
        assert!(reference.is_finite() && reference > 0.0, "{reference}");
    }
}
