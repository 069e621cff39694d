//! herald-engines: redb against fjall on the workload of Herald's delayed
//! store (see docs/delayed-store.md).
//!
//! ```text
//! herald-engines [--entries N] [--batch N] [--small N] [--claim N]
//!                [--engines redb,fjall] [--dir PATH] [--fjall-sync data|all]
//! ```
//!
//! Each engine runs in a child process of its own (this binary again, with
//! `--engine`), in a fresh directory under `--dir`, so that its memory is
//! measured alone; a third process then reopens the database the child
//! left without closing, as after a crash.

mod engines;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use engines::{Fjall, Redb};
use workload::{Engine, Plan, Result};

const ENGINES: [&str; 2] = ["redb", "fjall"];

struct Args {
    plan: Plan,
    engines: Vec<String>,
    dir: PathBuf,
    fjall_sync: String,
    /// Child mode: run this engine in `data`.
    engine: Option<String>,
    data: Option<PathBuf>,
    reopen: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        plan: Plan {
            entries: 1_000_000,
            batch: 1000,
            small: 2000,
            claim: 200_000,
            claim_batch: 1000,
            range: 1000,
            range_reads: 200,
        },
        engines: ENGINES.map(String::from).to_vec(),
        dir: std::env::temp_dir(),
        fjall_sync: "data".into(),
        engine: None,
        data: None,
        reopen: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--entries" => a.plan.entries = value()?.parse()?,
            "--batch" => a.plan.batch = value()?.parse()?,
            "--small" => a.plan.small = value()?.parse()?,
            "--claim" => a.plan.claim = value()?.parse()?,
            "--engines" => a.engines = value()?.split(',').map(String::from).collect(),
            "--dir" => a.dir = value()?.into(),
            "--fjall-sync" => a.fjall_sync = value()?,
            "--engine" => a.engine = Some(value()?),
            "--data" => a.data = Some(value()?.into()),
            "--reopen" => a.reopen = true,
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{}", usage()).into()),
        }
    }
    if let Some(e) = a.engines.iter().find(|e| !ENGINES.contains(&e.as_str())) {
        return Err(format!("unknown engine {e} (redb, fjall)").into());
    }
    if !["data", "all"].contains(&a.fjall_sync.as_str()) {
        return Err("--fjall-sync is data (fdatasync, as redb) or all (fsync)".into());
    }
    if a.plan.batch == 0 || a.plan.claim + a.plan.range as u64 > a.plan.entries {
        return Err("need --batch > 0 and --entries >= --claim + 1000".into());
    }
    Ok(a)
}

fn usage() -> &'static str {
    "usage: herald-engines [--entries N (1000000)] [--batch N (1000)] [--small N (2000)]
                      [--claim N (200000)] [--engines redb,fjall] [--dir PATH (/tmp)]
                      [--fjall-sync data|all (data)]"
}

fn main() -> Result<()> {
    let args = parse_args()?;
    match (&args.engine, &args.data) {
        (Some(engine), Some(data)) => child(engine, data, &args),
        _ => parent(&args),
    }
}

/// Child mode: one engine, `key=value` lines on stdout.
fn child(engine: &str, data: &Path, args: &Args) -> Result<()> {
    fn go<E: Engine>(data: &Path, args: &Args) -> Result<()> {
        if args.reopen {
            return workload::reopen_after_crash::<E>(data);
        }
        let db = workload::run::<E>(data, &args.plan)?;
        // Leave without closing: the next process finds it as after a crash.
        std::mem::forget(db);
        Ok(())
    }
    match engine {
        "redb" => go::<Redb>(data, args),
        "fjall" => go::<Fjall>(data, args),
        other => Err(format!("unknown engine {other}").into()),
    }
}

fn parent(args: &Args) -> Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    let fs = filesystem_of(&args.dir);
    eprintln!("dir: {} ({fs})", args.dir.display());
    if fs.starts_with("tmpfs") || fs.starts_with("ramfs") {
        eprintln!("WARNING: {fs} is memory, not a disk: fsync costs nothing; use --dir");
    }
    let me = std::env::current_exe()?;
    let mut results: Vec<(String, BTreeMap<String, f64>)> = Vec::new();
    for engine in &args.engines {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("herald-engines-{engine}-"))
            .tempdir_in(&args.dir)?;
        let data = tmp.path().join("db");
        eprintln!("{engine}: running in {}", data.display());
        let child_args = |extra: &[&str]| {
            let mut c = Command::new(&me);
            c.env("HERALD_ENGINES_FJALL_SYNC", &args.fjall_sync)
                .args(["--engine", engine])
                .arg("--data")
                .arg(&data)
                .args(["--entries", &args.plan.entries.to_string()])
                .args(["--batch", &args.plan.batch.to_string()])
                .args(["--small", &args.plan.small.to_string()])
                .args(["--claim", &args.plan.claim.to_string()])
                .args(extra)
                .stderr(Stdio::inherit());
            c
        };
        let mut figures = run_child(child_args(&[]))?;
        figures.extend(run_child(child_args(&["--reopen"]))?);
        for (k, v) in &figures {
            eprintln!("  {k}={v}");
        }
        results.push((engine.clone(), figures));
    }
    print_table(args, &results);
    Ok(())
}

fn run_child(mut cmd: Command) -> Result<BTreeMap<String, f64>> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", out.status).into());
    }
    let mut figures = BTreeMap::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        if let Some((k, v)) = line.split_once('=') {
            figures.insert(k.to_owned(), v.parse()?);
        }
    }
    Ok(figures)
}

fn print_table(args: &Args, results: &[(String, BTreeMap<String, f64>)]) {
    let p = &args.plan;
    const MIB: f64 = 1.0 / 1048576.0;
    // (label, figure, scale, decimals)
    #[rustfmt::skip]
    let rows: Vec<(String, &str, f64, usize)> = vec![
        (format!("insert {} entries, entries/s", p.entries), "insert_entries_per_s", 1.0, 0),
        (format!("insert, commits/s ({}/commit)", p.batch), "insert_commits_per_s", 1.0, 1),
        ("  written to disk, bytes/entry".into(), "insert_written_bytes_per_entry", 1.0, 0),
        ("disk after insert, MiB".into(), "disk_bytes", MIB, 1),
        ("disk after insert, bytes/entry".into(), "disk_bytes_per_entry", 1.0, 0),
        ("  allocated (du), bytes/entry".into(), "disk_allocated_bytes_per_entry", 1.0, 0),
        ("close, ms".into(), "close_ms", 1.0, 1),
        ("reopen (closed) + first read, ms".into(), "reopen_ms", 1.0, 1),
        ("reopen (crashed) + first read, ms".into(), "reopen_crash_ms", 1.0, 1),
        (format!("read {} earliest due, p50 ms", p.range), "range_pending_p50_ms", 1.0, 2),
        (format!("{} lone commits of 1, p50 ms", p.small), "small_p50_ms", 1.0, 2),
        ("lone commits of 1, p99 ms".into(), "small_p99_ms", 1.0, 2),
        (format!("claim {} (1000/commit), entries/s", p.claim), "claim_entries_per_s", 1.0, 0),
        ("  one claim commit, first 10, p50 ms".into(), "claim_first10_p50_ms", 1.0, 1),
        ("  one claim commit, last 10, p50 ms".into(), "claim_last10_p50_ms", 1.0, 1),
        ("  written to disk, bytes/claimed entry".into(), "claim_written_bytes_per_entry", 1.0, 0),
        ("read earliest due after claims, p50 ms".into(), "range_claimed_p50_ms", 1.0, 2),
        ("written to disk, whole run, MiB".into(), "written_total_bytes", MIB, 0),
        ("RSS growth (end - start), bytes/entry".into(), "rss_growth_bytes_per_entry", 1.0, 0),
        ("peak RSS, MiB".into(), "rss_peak_kib", 1.0 / 1024.0, 0),
    ];
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    print!("{:width$}", "");
    for (engine, _) in results {
        print!(" | {engine:>10}");
    }
    println!();
    for (label, key, scale, prec) in &rows {
        print!("{label:width$}");
        for (_, figures) in results {
            match figures.get(*key) {
                Some(v) => print!(" | {:>10.prec$}", v * scale),
                None => print!(" | {:>10}", "-"),
            }
        }
        println!();
    }
    println!(
        "(fjall sync: {}; cache {} MiB each; dir {})",
        args.fjall_sync,
        engines::CACHE_BYTES >> 20,
        args.dir.display()
    );
}

/// The file system holding `dir`, from /proc/self/mountinfo: the mount
/// with the longest mount point that is a prefix of `dir`.
fn filesystem_of(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best = (0, String::from("unknown file system"));
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(sep + 1), fields.get(sep + 2))
        else {
            continue;
        };
        if dir.starts_with(mount) && mount.len() >= best.0 {
            best = (
                mount.len(),
                format!("{fstype} on {source}, mounted at {mount}"),
            );
        }
    }
    best.1
}
