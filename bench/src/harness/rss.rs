//! Reading a process's resident set size from `/proc/PID/status` (`VmRSS`), and waiting for it
//! to settle before a measurement.
//!
//! Settling is a measurement concern, not synchronization: right after the last session is up,
//! the gateway may still be finishing allocations (mailboxes, buffers), and the allocator may
//! still be returning memory. We poll until two reads [`SETTLE_INTERVAL`] apart differ by less
//! than [`SETTLE_TOLERANCE`], for at most [`SETTLE_MAX`], and report whether it settled.

use std::time::{Duration, Instant};

/// Time between two RSS reads while settling.
pub(crate) const SETTLE_INTERVAL: Duration = Duration::from_millis(500);
/// Relative difference under which two reads count as settled (1%).
pub(crate) const SETTLE_TOLERANCE: f64 = 0.01;
/// Longest we wait for the RSS to settle.
pub(crate) const SETTLE_MAX: Duration = Duration::from_secs(10);

/// Extracts `VmRSS` from the text of `/proc/PID/status`, in bytes.
pub(crate) fn parse_vm_rss(status: &str) -> Option<u64> {
    parse_status_bytes(status, "VmRSS")
}

/// Extracts a size field (`VmRSS`, `VmHWM`, ...) from the text of `/proc/PID/status`, in bytes.
pub(crate) fn parse_status_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| {
        l.strip_prefix(field)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let mut parts = line[field.len() + 1..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    let unit = match parts.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        Some("mB") | Some("MB") => 1024 * 1024,
        Some("B") | None => 1,
        Some(_) => return None,
    };
    value.checked_mul(unit)
}

/// The RSS of process `pid` now and at its peak (`VmHWM`), in bytes.
pub(crate) fn read_rss_and_peak(pid: u32) -> std::io::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    match (
        parse_status_bytes(&status, "VmRSS"),
        parse_status_bytes(&status, "VmHWM"),
    ) {
        (Some(rss), Some(peak)) => Ok((rss, peak)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/status has no VmRSS or VmHWM line"),
        )),
    }
}

/// Reads the RSS of process `pid`, in bytes.
pub(crate) fn read_rss(pid: u32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vm_rss(&status).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/status has no VmRSS line (is it a kernel thread or a zombie?)"),
        )
    })
}

/// Whether two successive reads are close enough to call the RSS settled.
pub(crate) fn is_settled(previous: u64, current: u64) -> bool {
    let base = previous.max(current);
    if base == 0 {
        return true;
    }
    (previous.abs_diff(current) as f64) / (base as f64) < SETTLE_TOLERANCE
}

/// A settled (or best-effort) RSS reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) bytes: u64,
    /// False if [`SETTLE_MAX`] passed before two reads agreed.
    pub(crate) settled: bool,
}

/// Reads the RSS of `pid` until it settles (see the module docs).
pub(crate) async fn settled_rss(pid: u32) -> std::io::Result<Reading> {
    settled(|| read_rss(pid)).await
}

/// Reads a memory figure with `read` until it settles (see the module docs).
pub(crate) async fn settled(read: impl Fn() -> std::io::Result<u64>) -> std::io::Result<Reading> {
    let started = Instant::now();
    let mut previous = read()?;
    loop {
        tokio::time::sleep(SETTLE_INTERVAL).await;
        let current = read()?;
        if is_settled(previous, current) {
            return Ok(Reading {
                bytes: current,
                settled: true,
            });
        }
        if started.elapsed() >= SETTLE_MAX {
            return Ok(Reading {
                bytes: current,
                settled: false,
            });
        }
        previous = current;
    }
}

/// Formats a byte count for people: `812 B`, `12.3 KiB`, `45.6 MiB`, `1.20 GiB`.
pub(crate) fn human_bytes(bytes: f64) -> String {
    let abs = bytes.abs();
    if abs < 1024.0 {
        format!("{bytes:.0} B")
    } else if abs < 1024.0 * 1024.0 {
        format!("{:.1} KiB", bytes / 1024.0)
    } else if abs < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", bytes / (1024.0 * 1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Name:\therald-gateway
Umask:\t0022
State:\tS (sleeping)
Tgid:\t4242
Pid:\t4242
VmPeak:\t  1203456 kB
VmSize:\t  1203452 kB
VmLck:\t       0 kB
VmHWM:\t    52340 kB
VmRSS:\t    48212 kB
RssAnon:\t   40000 kB
RssFile:\t    8212 kB
Threads:\t3
";

    #[test]
    fn parses_vm_rss_in_bytes() {
        assert_eq!(parse_vm_rss(SAMPLE), Some(48_212 * 1024));
    }

    #[test]
    fn parses_peak_rss() {
        assert_eq!(parse_status_bytes(SAMPLE, "VmHWM"), Some(52_340 * 1024));
        assert_eq!(parse_status_bytes(SAMPLE, "VmSwap"), None);
        let (rss, peak) = read_rss_and_peak(std::process::id()).unwrap();
        assert!(rss > 0 && peak >= rss);
    }

    #[test]
    fn missing_or_malformed_vm_rss() {
        assert_eq!(parse_vm_rss("Name:\tkthreadd\nState:\tS\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\t12 parsecs\n"), None);
        // Not fooled by a longer name that starts the same way.
        assert_eq!(parse_vm_rss("VmRSSx:\t1 kB\nVmRSS:\t2 kB\n"), Some(2048));
    }

    #[test]
    fn reads_own_rss() {
        let rss = read_rss(std::process::id()).expect("own rss");
        assert!(rss > 0);
    }

    #[test]
    fn settle_rule() {
        assert!(is_settled(100_000, 100_500));
        assert!(is_settled(100_500, 100_000));
        assert!(!is_settled(100_000, 102_000));
        assert!(is_settled(0, 0));
        assert!(!is_settled(0, 10));
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(812.0), "812 B");
        assert_eq!(human_bytes(12_595.2), "12.3 KiB");
        assert_eq!(human_bytes(-2048.0), "-2.0 KiB");
        assert_eq!(human_bytes(47_815_065.6), "45.6 MiB");
        assert_eq!(human_bytes(1_288_490_188.8), "1.20 GiB");
    }
}
