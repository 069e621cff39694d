//! What the idempotency ledger costs a publication (docs/publishing.md#idempotency):
//! CPU per claim of an immediate id, kept in memory, with 10,000 to
//! 1,000,000 ids held, and the process's RSS per id held.
//!
//!     cargo run --release -p herald-engine --example ledger_measure
//!
//! Claims go in batches of `--batch` (default 1, as one HTTP publication
//! per request) on one thread; the clock starts after the fill.

use std::time::{Duration, Instant};

use herald_engine::publish::{IdLedger, LedgerConfig, LedgerMetrics};

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let batch: usize = std::env::args()
        .skip_while(|a| a != "--batch")
        .nth(1)
        .map_or(1, |v| v.parse().expect("--batch N"));
    println!("held       ns/claim  (cpu)   B/id held (rss)");
    for held in [10_000u64, 100_000, 1_000_000] {
        let ledger = IdLedger::local(
            LedgerConfig {
                window: Duration::from_secs(3600),
                max: 2_000_000,
            },
            LedgerMetrics::default(),
        );
        let now = 1_800_000_000_000;
        let before = rss_bytes();
        for chunk in 0..held / 1000 {
            let claims = (0..1000)
                .map(|i| ledger.immediate(&format!("fill-{chunk}-{i}"), now))
                .collect();
            ledger.claim(claims, now).await.unwrap();
        }
        let per_id = (rss_bytes() - before) as f64 / held as f64;
        let n = 200_000usize;
        let ids: Vec<String> = (0..n).map(|i| format!("order-{i:08}-retry")).collect();
        let (cpu, wall) = (cpu_seconds(), Instant::now());
        for chunk in ids.chunks(batch) {
            let claims = chunk.iter().map(|id| ledger.immediate(id, now)).collect();
            ledger.claim(claims, now).await.unwrap();
        }
        let cpu_ns = (cpu_seconds() - cpu) * 1e9 / n as f64;
        let wall_ns = wall.elapsed().as_nanos() as f64 / n as f64;
        println!("{held:>9}  {wall_ns:>8.0}  ({cpu_ns:>5.0})  {per_id:>6.0}");
    }
}
