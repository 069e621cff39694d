//! Build script of `herald-gateway` and `herald-router`: the commit a
//! binary was built from, for `--version` and `herald_build_info`.
//!
//! `HERALD_COMMIT` from the environment wins (a build from a source
//! tarball has no git); otherwise `git rev-parse --short=12 HEAD`, or
//! `unknown`. Reruns when HEAD moves.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=HERALD_COMMIT");
    let commit = std::env::var("HERALD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HERALD_COMMIT={commit}");
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(name) = git(&["rev-parse", "--symbolic-full-name", "HEAD"])
        && let Some(path) = git(&["rev-parse", "--git-path", &name])
    {
        println!("cargo:rerun-if-changed={path}");
    }
}
