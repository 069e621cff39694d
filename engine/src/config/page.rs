//! docs/configuration.md, made from each binary's [`Table`]: for each
//! binary, one table per section of the file (key, variable, type,
//! default, meaning), between markers the binary's tests compare and, asked
//! to, rewrite. The defaults `--help` shows come from here too
//! ([`default_text`]).

use std::fmt::Write;

use super::key::{Binary, value_at};
use super::table::Table;

/// The line before a binary's generated part.
pub fn begin_marker(binary: Binary) -> String {
    format!(
        "<!-- {} keys: generated from engine/src/config/table.rs and {}, do not edit -->",
        binary.name(),
        binary.keys_file()
    )
}

/// The line after it.
pub fn end_marker(binary: Binary) -> String {
    format!("<!-- end of {} keys -->", binary.name())
}

/// The Markdown of the keys of `keys`, each default read from `defaults`
/// (the binary's default configuration serialized to JSON, `null` for
/// unset).
pub fn render(keys: Table, defaults: &serde_json::Value) -> String {
    let binary = keys.binary;
    let mut out = String::new();
    let mut section = None;
    for key in keys.keys() {
        let this = key.path.rsplit_once('.').map(|(s, _)| s);
        if section != Some(this) {
            section = Some(this);
            let title = match this {
                None => "Top level".to_owned(),
                Some(s) => format!("`[{s}]`"),
            };
            let _ = writeln!(out, "\n#### {title}\n");
            out.push_str("| key | variable | type | default | meaning |\n");
            out.push_str("|---|---|---|---|---|\n");
        }
        let name = key.path.rsplit('.').next().unwrap_or(key.path);
        let mut variable = format!("`{}`", key.env_var(binary));
        for alias in key.aliases_for(binary) {
            let _ = write!(variable, " (or `{alias}`)");
        }
        let secret = if key.secret == super::key::Secret::No {
            ""
        } else {
            " **Secret**: redacted by `--print-config`."
        };
        let _ = writeln!(
            out,
            "| `{name}` | {variable} | {} | {} | {}{secret} |",
            key.kind.describe(),
            default(value_at(defaults, key.path)),
            key.doc
        );
    }
    out
}

fn default(value: Option<&serde_json::Value>) -> String {
    use serde_json::Value;
    match value {
        None | Some(Value::Null) => "unset".to_owned(),
        Some(Value::String(s)) if s.is_empty() => "`\"\"`".to_owned(),
        Some(Value::String(s)) => format!("`{s}`"),
        Some(other) => format!("`{other}`"),
    }
}

/// The default of the key at `path` as `--help` shows it (`[default: …]`,
/// a string without its quotes), from `defaults` (the binary's default
/// configuration serialized to JSON); `None` when the key is unset by
/// default. The flags that set a key show its default from here, so a
/// default is written once, in the configuration's `Default`.
pub fn default_text(defaults: &serde_json::Value, path: &str) -> Option<String> {
    match value_at(defaults, path)? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// What `--help` says of `flag` when it sets a key of `flag_keys` (flag
/// id, key path): its `help`, then `[default: …]` with that key's default
/// in `defaults` (a binary's `Config::default()` as JSON), so a default is
/// written once. `None` for a flag that sets no listed key, or whose key
/// has no default.
pub fn help_with_default(
    defaults: &serde_json::Value,
    flag_keys: &[(&str, &str)],
    flag: &str,
    help: &str,
) -> Option<String> {
    let (_, path) = flag_keys.iter().find(|(id, _)| *id == flag)?;
    let value = default_text(defaults, path)?;
    Some(format!("{help} [default: {value}]"))
}

/// `page` with `binary`'s generated part replaced by `generated`; `None`
/// when the page lacks the markers.
pub fn splice(page: &str, binary: Binary, generated: &str) -> Option<String> {
    let begin = begin_marker(binary);
    let end = end_marker(binary);
    let start = page.find(&begin)? + begin.len();
    let stop = start + page[start..].find(&end)?;
    Some(format!(
        "{}\n{}\n{}",
        &page[..start],
        generated.trim(),
        &page[stop..]
    ))
}

/// Whether the page at `path` (docs/configuration.md) has the part of the
/// binary of `keys` as its table makes it now. With `HERALD_BLESS` set in the environment a
/// stale part is rewritten instead. The error says what is wrong and how
/// to regenerate it. For each binary's tests.
pub fn check_current(
    path: &std::path::Path,
    keys: Table,
    defaults: &serde_json::Value,
) -> Result<(), String> {
    let binary = keys.binary;
    let name = binary.name();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let generated = render(keys, defaults);
    let want = splice(&text, binary, &generated)
        .ok_or_else(|| format!("{} has no {name} markers", path.display()))?;
    if want == text {
        return Ok(());
    }
    if std::env::var_os("HERALD_BLESS").is_some() {
        return std::fs::write(path, want).map_err(|e| format!("{}: {e}", path.display()));
    }
    Err(format!(
        "{} is out of date for {name}: regenerate it with \
         HERALD_BLESS=1 cargo test -p {name} --lib docs_configuration_md_is_current",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::key::{Key, Kind, Secret, key};

    const KEYS: &[Key] = &[
        key("listen", Kind::Str, "Where."),
        key("a.b", Kind::Int, "B.").aliases(&["HERALD_B", "HERALD_ROUTER_B"]),
        key("a.c", Kind::List, "C.").secret(Secret::Yes),
    ];

    #[test]
    fn each_section_is_a_table_with_defaults() {
        let defaults = serde_json::json!({"listen": "127.0.0.1:1", "a": {"b": 5, "c": []}});
        let md = render(Table::only(Binary::Gateway, KEYS), &defaults);
        assert!(md.contains("#### Top level"), "{md}");
        assert!(md.contains("#### `[a]`"), "{md}");
        assert!(
            md.contains("| `b` | `HERALD_A__B` (or `HERALD_B`) | integer | `5` | B. |"),
            "{md}"
        );
        assert!(md.contains("| `listen` | `HERALD_LISTEN` | string | `127.0.0.1:1` |"));
        assert!(md.contains("| `c` | `HERALD_A__C` | list | `[]` | C. **Secret**"));
    }

    #[test]
    fn the_generated_part_is_replaced_between_the_markers() {
        let page = format!(
            "# T\n{}\nold\n{}\nrest\n",
            begin_marker(Binary::Router),
            end_marker(Binary::Router)
        );
        let new = splice(&page, Binary::Router, "new").unwrap();
        assert_eq!(
            new,
            format!(
                "# T\n{}\nnew\n{}\nrest\n",
                begin_marker(Binary::Router),
                end_marker(Binary::Router)
            )
        );
        assert!(splice(&page, Binary::Gateway, "x").is_none());
    }

    #[test]
    fn help_shows_a_default_without_quotes_and_no_unset_one() {
        let defaults = serde_json::json!({"listen": "127.0.0.1:1", "a": {"b": 5, "c": null}});
        assert_eq!(
            default_text(&defaults, "listen").as_deref(),
            Some("127.0.0.1:1")
        );
        assert_eq!(default_text(&defaults, "a.b").as_deref(), Some("5"));
        assert_eq!(default_text(&defaults, "a.c"), None);
        assert_eq!(default_text(&defaults, "a.d"), None);
    }
}
