//! Whether what `--help` (and so the man page help2man makes from it)
//! names under `/usr/share/doc/` is a file the Debian package installs:
//! both binaries' tests check their help against their manifest with it.

/// The files a crate's `[package.metadata.deb]` assets install, read from
/// its `Cargo.toml` text: each `["source", "destination", "mode"]` line's
/// destination, one ending in `/` taking the source's file name.
pub fn installed_files(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.trim().trim_start_matches('[').split('"').collect();
            // ["src", "dest", "mode"],  ->  "", src, ", ", dest, ", ", mode, "],"
            (fields.len() == 7 && fields[2] == ", " && fields[4] == ", ").then(|| {
                let (src, dest) = (fields[1], fields[3]);
                match dest.strip_suffix('/') {
                    Some(dir) => format!("/{dir}/{}", src.rsplit('/').next().unwrap_or(src)),
                    None => format!("/{dest}"),
                }
            })
        })
        .collect()
}

/// Check `help` against `manifest` for the package whose documentation
/// lives in `doc_dir` (`/usr/share/doc/NAME/`): the assets name files
/// there, the help names at least two paths under `/usr/share/doc/` (the
/// example configuration and configuration.md), and each is installed.
/// The error says what is wrong.
pub fn check_help(manifest: &str, help: &str, doc_dir: &str) -> Result<(), String> {
    let installed = installed_files(manifest);
    if !installed.iter().any(|p| p.starts_with(doc_dir)) {
        return Err(format!(
            "no assets under {doc_dir} in the manifest: {installed:?}"
        ));
    }
    let named: Vec<&str> = help
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ';' || c == ',')
        .filter(|w| w.starts_with("/usr/share/doc/"))
        .collect();
    if named.len() < 2 {
        return Err(format!(
            "--help names neither the example configuration nor configuration.md: {help}"
        ));
    }
    match named
        .iter()
        .find(|path| !installed.iter().any(|p| p == *path))
    {
        Some(path) => Err(format!(
            "--help names {path}, which the package does not install ({installed:?})"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
assets = [
    ["target/release/x", "usr/bin/", "755"],
    ["deploy/x.example.toml", "usr/share/doc/x/examples/", "644"],
    ["docs/configuration.md", "usr/share/doc/x/configuration.md", "644"],
]
"#;

    #[test]
    fn help_paths_are_checked_against_the_assets() {
        assert_eq!(
            installed_files(MANIFEST),
            [
                "/usr/bin/x",
                "/usr/share/doc/x/examples/x.example.toml",
                "/usr/share/doc/x/configuration.md"
            ]
        );
        let good =
            "see /usr/share/doc/x/examples/x.example.toml (and /usr/share/doc/x/configuration.md)";
        assert_eq!(check_help(MANIFEST, good, "/usr/share/doc/x/"), Ok(()));
        let bad = "see /usr/share/doc/x/examples/y.toml and /usr/share/doc/x/configuration.md";
        assert!(
            check_help(MANIFEST, bad, "/usr/share/doc/x/")
                .unwrap_err()
                .contains("y.toml")
        );
        assert!(check_help(MANIFEST, "no paths", "/usr/share/doc/x/").is_err());
    }
}
