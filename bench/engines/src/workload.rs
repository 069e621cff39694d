//! The workload, the same for every engine: the data, the phases and what
//! each phase measures.

use std::path::Path;
use std::time::Instant;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Size of Herald's stored value of a live entry (29 B header ++ record).
pub const VALUE_LEN: usize = 286;
/// A fixed epoch (ms) for the due times, so every run writes the same data.
const BASE_MS: u64 = 1_800_000_000_000;
const DAY_MS: u64 = 86_400_000;

/// One delayed notification as the store sees it.
pub struct Entry {
    pub id: String,
    pub due: u64,
    pub value: Vec<u8>,
}

impl Entry {
    /// Entry number `i`: a deterministic function of `i` alone, so both
    /// engines get the same data without holding it in memory.
    pub fn new(i: u64) -> Entry {
        let mut rng = Rng(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed);
        let (a, b) = (rng.next(), rng.next());
        let id = format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48 & 0x3fff),
            b & 0xffff_ffff_ffff
        );
        let due = BASE_MS + rng.next() % DAY_MS;
        // Header as Herald writes it (state, attempts, updated, deadline,
        // fire), then printable random bytes for the record: like a JSON
        // payload with ids and base64, which lz4 barely shrinks.
        let mut value = Vec::with_capacity(VALUE_LEN);
        value.push(1);
        value.extend_from_slice(&0u32.to_be_bytes());
        value.extend_from_slice(&BASE_MS.to_be_bytes());
        value.extend_from_slice(&0u64.to_be_bytes());
        value.extend_from_slice(&due.to_be_bytes());
        while value.len() < VALUE_LEN {
            let r = rng.next();
            for byte in r.to_le_bytes() {
                if value.len() < VALUE_LEN {
                    value.push(b'0' + (byte & 63));
                }
            }
        }
        Entry { id, due, value }
    }

    /// The due index key: due time (8 bytes, big-endian) ++ id.
    pub fn due_key(&self) -> Vec<u8> {
        due_key(self.due, &self.id)
    }
}

pub fn due_key(due: u64, id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + id.len());
    k.extend_from_slice(&due.to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// The value of an entry once claimed: state firing, one more attempt.
pub fn claimed(value: &[u8]) -> Vec<u8> {
    let mut v = value.to_vec();
    v[0] = 2;
    let attempts = u32::from_be_bytes([v[1], v[2], v[3], v[4]]) + 1;
    v[1..5].copy_from_slice(&attempts.to_be_bytes());
    v
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// What the workload needs of an engine. Every write is one durable
/// commit: fsynced before the call returns.
pub trait Engine: Sized {
    fn open(dir: &Path) -> Result<Self>;
    /// Each entry into the primary table (id -> value) and the due index
    /// (due key -> empty), in one durable commit.
    fn insert(&mut self, entries: &[Entry]) -> Result<()>;
    /// Read the first `n` keys of the due index from a read snapshot;
    /// returns how many there were.
    fn earliest(&self, n: usize) -> Result<usize>;
    /// In one durable commit: take the first `n` keys of the due index,
    /// remove them, and rewrite their entries as claimed. Returns how many.
    fn claim(&mut self, n: usize) -> Result<usize>;
}

/// The sizes of the run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub entries: u64,
    pub batch: u64,
    pub small: u64,
    pub claim: u64,
    pub claim_batch: usize,
    pub range: usize,
    pub range_reads: usize,
}

/// Run every phase against engine `E` in `dir`; print `key=value` lines.
/// Leaves the database open (not closed) when it returns, for the
/// reopen-after-crash measure: the caller exits without dropping it.
pub fn run<E: Engine>(dir: &Path, plan: &Plan) -> Result<E> {
    let out = |k: &str, v: f64| println!("{k}={v}");
    let rss_start = proc_status_kib("VmRSS")?;
    let written_start = written_bytes()?;

    // Insert N entries in durable commits of `batch`.
    let mut db = E::open(dir)?;
    let t = Instant::now();
    let mut commits = 0u64;
    let mut next = 0u64;
    while next < plan.entries {
        let end = (next + plan.batch).min(plan.entries);
        let batch: Vec<Entry> = (next..end).map(Entry::new).collect();
        db.insert(&batch)?;
        commits += 1;
        next = end;
        if commits.is_multiple_of(100) {
            eprintln!("  inserted {next} ({:.0} s)", t.elapsed().as_secs_f64());
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let written = written_bytes()? - written_start;
    out(
        "insert_written_bytes_per_entry",
        written as f64 / plan.entries as f64,
    );
    out("insert_s", secs);
    out("insert_entries_per_s", plan.entries as f64 / secs);
    out("insert_commits_per_s", commits as f64 / secs);
    out("rss_after_insert_kib", proc_status_kib("VmRSS")? as f64);

    // Footprint, closed; and the time to reopen and answer a read.
    let t = Instant::now();
    drop(db);
    out("close_ms", ms(t));
    let (bytes, allocated) = dir_bytes(dir)?;
    out("disk_bytes", bytes as f64);
    out("disk_bytes_per_entry", bytes as f64 / plan.entries as f64);
    out("disk_allocated_bytes", allocated as f64);
    out(
        "disk_allocated_bytes_per_entry",
        allocated as f64 / plan.entries as f64,
    );
    let t = Instant::now();
    let mut db = E::open(dir)?;
    db.earliest(1)?;
    out("reopen_ms", ms(t));

    // Range read of the earliest entries, everything pending.
    out("range_pending_p50_ms", range_p50(&db, plan)?);

    // Lone durable commits of one entry.
    let mut lat = Vec::with_capacity(plan.small as usize);
    for i in 0..plan.small {
        let one = [Entry::new(plan.entries + i)];
        let t = Instant::now();
        db.insert(&one)?;
        lat.push(ms(t));
    }
    out("small_p50_ms", percentile(&mut lat, 0.50));
    out("small_p99_ms", percentile(&mut lat, 0.99));

    // Claim the earliest entries, a durable commit per `claim_batch`.
    let written_before = written_bytes()?;
    let t = Instant::now();
    let mut claimed = 0u64;
    let mut lat = Vec::new();
    while claimed < plan.claim {
        let n = plan.claim_batch.min((plan.claim - claimed) as usize);
        let one = Instant::now();
        let got = db.claim(n)?;
        lat.push(ms(one));
        if got == 0 {
            break;
        }
        claimed += got as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    // Does a claim get slower as claimed entries pile up behind the head?
    let k = lat.len().min(10);
    out(
        "claim_first10_p50_ms",
        percentile(&mut lat[..k].to_vec(), 0.5),
    );
    let last = lat.len() - k;
    out("claim_last10_p50_ms", percentile(&mut lat[last..], 0.5));
    let written = written_bytes()? - written_before;
    out("claim_entries", claimed as f64);
    out(
        "claim_written_bytes_per_entry",
        written as f64 / claimed as f64,
    );
    out("claim_entries_per_s", claimed as f64 / secs);
    out("range_claimed_p50_ms", range_p50(&db, plan)?);

    let rss_end = proc_status_kib("VmRSS")?;
    out(
        "written_total_bytes",
        (written_bytes()? - written_start) as f64,
    );
    out("rss_start_kib", rss_start as f64);
    out("rss_end_kib", rss_end as f64);
    out("rss_peak_kib", proc_status_kib("VmHWM")? as f64);
    out(
        "rss_growth_bytes_per_entry",
        (rss_end.saturating_sub(rss_start) * 1024) as f64 / plan.entries as f64,
    );
    // One more commit, then the caller exits without closing.
    db.insert(&[Entry::new(plan.entries + plan.small)])?;
    Ok(db)
}

/// Open a database left without closing (a crashed process) and answer a
/// read.
pub fn reopen_after_crash<E: Engine>(dir: &Path) -> Result<()> {
    let t = Instant::now();
    let db = E::open(dir)?;
    db.earliest(1)?;
    println!("reopen_crash_ms={}", ms(t));
    Ok(())
}

fn range_p50<E: Engine>(db: &E, plan: &Plan) -> Result<f64> {
    let mut lat = Vec::with_capacity(plan.range_reads);
    for _ in 0..plan.range_reads {
        let t = Instant::now();
        let n = db.earliest(plan.range)?;
        lat.push(ms(t));
        assert_eq!(n, plan.range, "fewer pending entries than a range read");
    }
    Ok(percentile(&mut lat, 0.50))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Bytes this process (every thread, the engine's background ones too) has
/// caused to be written to the disk: `write_bytes` of /proc/self/io.
fn written_bytes() -> Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    let line = io
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .ok_or("no write_bytes in /proc/self/io")?;
    Ok(line.trim().parse()?)
}

/// A field of /proc/self/status, in KiB.
fn proc_status_kib(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .ok_or_else(|| format!("no {field} in /proc/self/status"))?;
    Ok(line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?)
}

/// Sum of the sizes of the files under `dir`, and of the space allocated
/// to them (less when a file is sparse, as fjall's preallocated journal).
pub fn dir_bytes(dir: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut len, mut allocated) = (0, 0);
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        let (l, a) = if meta.is_dir() {
            dir_bytes(&e.path())?
        } else {
            (meta.len(), meta.blocks() * 512)
        };
        len += l;
        allocated += a;
    }
    Ok((len, allocated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_deterministic_and_shaped_like_herald_ones() {
        let (a, b) = (Entry::new(7), Entry::new(7));
        assert_eq!(
            (a.id.as_str(), a.due, &a.value),
            (b.id.as_str(), b.due, &b.value)
        );
        assert_eq!(a.id.len(), 36);
        assert_eq!(a.value.len(), VALUE_LEN);
        assert!((BASE_MS..BASE_MS + DAY_MS).contains(&a.due));
        assert_ne!(Entry::new(8).id, a.id);
        let c = claimed(&a.value);
        assert_eq!((c[0], c[4], c.len()), (2, 1, VALUE_LEN));
    }

    #[test]
    fn percentiles() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 0.5), 50.0);
        assert_eq!(percentile(&mut v, 0.99), 99.0);
    }
}
