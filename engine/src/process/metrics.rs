//! The standard process metrics, under the names Prometheus' own clients
//! use (`process_resident_memory_bytes`, `process_open_fds`, …), read from
//! `/proc/self` at scrape time: nothing is counted between scrapes.
//!
//! | metric | from |
//! |---|---|
//! | `process_cpu_seconds_total` | `/proc/self/stat` utime + stime |
//! | `process_start_time_seconds` | `/proc/self/stat` starttime + `/proc/stat` btime |
//! | `process_resident_memory_bytes` | `/proc/self/status` VmRSS |
//! | `process_virtual_memory_bytes` | `/proc/self/status` VmSize |
//! | `process_threads` | `/proc/self/status` Threads |
//! | `process_open_fds` | entries of `/proc/self/fd` |
//! | `process_max_fds` | `/proc/self/limits` "Max open files" (soft) |
//!
//! A file that cannot be read or parsed leaves its metrics out of that
//! scrape (a series that disappears is what Prometheus expects of a
//! failed read), logged at debug. The parsers are pure and tested on
//! sample text.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Clock ticks per second of the times in `/proc/<pid>/stat` (`USER_HZ`),
/// which Linux fixes at 100 for user space on every architecture it
/// supports, whatever the kernel's own tick rate.
const USER_HZ: f64 = 100.0;

/// Register the process metrics on `registry`.
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// Reads `/proc/self` on every scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCollector;

/// What `/proc/self/stat` says, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// User plus system CPU time.
    pub cpu_seconds: f64,
    /// Start after boot.
    pub started_after_boot: f64,
}

/// Parse `/proc/<pid>/stat`. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted after its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_seconds: (field(14)? + field(15)?) / USER_HZ,
        started_after_boot: field(22)? / USER_HZ,
    })
}

/// What `/proc/self/status` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Resident set size in bytes.
    pub rss_bytes: Option<u64>,
    /// Virtual memory size in bytes.
    pub virtual_bytes: Option<u64>,
    /// Threads.
    pub threads: Option<u64>,
}

/// Parse `/proc/<pid>/status` (sizes are in kB there).
pub fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let number = value.split_whitespace().next().and_then(|v| v.parse().ok());
        match key {
            "VmRSS" => s.rss_bytes = number.map(|kb: u64| kb * 1024),
            "VmSize" => s.virtual_bytes = number.map(|kb: u64| kb * 1024),
            "Threads" => s.threads = number,
            _ => {}
        }
    }
    s
}

/// The soft limit on open files from `/proc/<pid>/limits`; `None` when
/// absent or "unlimited".
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The boot time (seconds after the Unix epoch) from `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn read(path: &str) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) => {
            tracing::debug!(path, error = %e, "process metric source unreadable");
            None
        }
    }
}

fn open_fds() -> Option<u64> {
    match std::fs::read_dir("/proc/self/fd") {
        // The directory handle itself is one of the entries; it is open
        // only while counting, so it is left out.
        Ok(dir) => Some((dir.count() as u64).saturating_sub(1)),
        Err(e) => {
            tracing::debug!(error = %e, "/proc/self/fd unreadable");
            None
        }
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    if let Some(v) = value {
        let g = ConstGauge::new(v);
        g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
    }
    Ok(())
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = read("/proc/self/stat").and_then(|t| parse_stat(&t));
        let status = read("/proc/self/status")
            .map(|t| parse_status(&t))
            .unwrap_or_default();
        if let Some(stat) = stat {
            let c = ConstCounter::new(stat.cpu_seconds);
            c.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
            let boot = read("/proc/stat").and_then(|t| parse_boot_time(&t));
            gauge(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                boot.map(|b| b + stat.started_after_boot),
            )?;
        }
        let as_f64 = |v: Option<u64>| v.map(|v| v as f64);
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            as_f64(status.rss_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            as_f64(status.virtual_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_threads",
            "Number of OS threads in the process",
            as_f64(status.threads),
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            as_f64(open_fds()),
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors (the soft limit)",
            as_f64(read("/proc/self/limits").and_then(|t| parse_max_fds(&t))),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let text = "4242 (herald (gw) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 123456 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                cpu_seconds: 3.0,
                started_after_boot: 1234.56,
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn status_sizes_are_bytes() {
        let text =
            "Name:\therald-gateway\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\nThreads:\t9\n";
        assert_eq!(
            parse_status(text),
            Status {
                rss_bytes: Some(2048 * 1024),
                virtual_bytes: Some(123456 * 1024),
                threads: Some(9),
            }
        );
    }

    #[test]
    fn limits_and_boot_time() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\n"),
            Some(1.7e9)
        );
    }

    #[test]
    fn a_scrape_of_this_process_is_plausible() {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .parse()
                .unwrap()
        };
        assert!(value("process_resident_memory_bytes") > 0.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0, "stdin, stdout, stderr");
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_threads") >= 1.0);
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
    }
}
