//! Whether a binary's [`Table`] covers its configuration: its
//! default configuration, serialized to JSON (`null` for unset), is walked
//! key by key and compared with the rows. Each binary's tests run it, so a
//! key added to a configuration struct without a row (or a row left behind
//! by a removed key) fails them.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::key::{Kind, value_at};
use super::table::Table;

/// Every mismatch between a binary's configuration (`defaults`) and its
/// table `keys`, one line each; empty when they agree.
pub fn problems(keys: Table, defaults: &serde_json::Value) -> Vec<String> {
    let binary = keys.binary;
    let mut leaves = Vec::new();
    walk(defaults, "", keys, &mut leaves);
    let mut out = Vec::new();
    for (path, value) in &leaves {
        match keys.keys().find(|k| k.path == path) {
            None => out.push(format!(
                "{}: {path} has no row in {} (or, for both binaries, engine/src/config/table.rs)",
                binary.name(),
                binary.keys_file()
            )),
            Some(key) if !fits(key.kind, value) => out.push(format!(
                "{}: {path} is {:?} in the table, but its default is {value}",
                binary.name(),
                key.kind
            )),
            Some(_) => {}
        }
    }
    for key in keys.keys() {
        if !leaves.iter().any(|(path, _)| path == key.path) {
            out.push(format!(
                "{}: the row {} names no key of its configuration",
                binary.name(),
                key.path
            ));
        }
    }
    out
}

/// Every key of `keys` whose variable does not set it: for each key, a
/// value other than its default is put in its variable alone, the
/// configuration `T` loaded ([`super::load`], no file), and the key read
/// back; a key with an [`example`](super::key::Key::example) (a list or a string) is set to
/// it. Arrays and tables of tables ([`Kind::Toml`]) are set to an empty
/// one. One line per failure; empty when every variable works.
pub fn env_problems<T: DeserializeOwned + Default + Serialize>(keys: Table) -> Vec<String> {
    let binary = keys.binary;
    let defaults = serde_json::to_value(T::default()).unwrap_or_default();
    let mut out = Vec::new();
    for key in keys.keys() {
        let default = value_at(&defaults, key.path);
        let (text, want) = match (key.example, key.kind) {
            (Some(e), Kind::List) => (
                e.to_owned(),
                e.split(',').map(|s| serde_json::json!(s.trim())).collect(),
            ),
            (Some(e), Kind::Str) => (e.to_owned(), serde_json::json!(e)),
            _ => sample(key.kind, default),
        };
        let name = key.env_var(binary);
        let env = |n: &str| (n == name).then(|| text.clone());
        let got = match super::load::<T>(None, &[], keys, &env) {
            Ok((config, _)) => serde_json::to_value(config).unwrap_or_default(),
            Err(e) => {
                out.push(format!("{name}={text:?}: {e}"));
                continue;
            }
        };
        let got = value_at(&got, key.path).cloned();
        if got.as_ref() != Some(&want) {
            out.push(format!(
                "{name}={text:?} made {} {got:?}, not {want}",
                key.path
            ));
        }
    }
    out
}

/// A variable's text unlike `default`, and the value it must give.
fn sample(kind: Kind, default: Option<&serde_json::Value>) -> (String, serde_json::Value) {
    use serde_json::{Value, json};
    match kind {
        Kind::Int => {
            let n = default.and_then(Value::as_u64).map_or(1, |n| n + 1);
            (n.to_string(), json!(n))
        }
        Kind::Float => {
            let n = default.and_then(Value::as_f64).unwrap_or(0.0) + 0.5;
            (n.to_string(), json!(n))
        }
        Kind::Bool => {
            let b = !default.and_then(Value::as_bool).unwrap_or(false);
            (b.to_string(), json!(b))
        }
        Kind::Enum(words) => {
            let current = default.and_then(Value::as_str);
            let word = words
                .iter()
                .find(|w| Some(**w) != current)
                .unwrap_or(&words[0]);
            (word.to_string(), json!(word))
        }
        Kind::Str => {
            let text = match default.and_then(Value::as_str) {
                // Addresses must stay addresses.
                Some(d) if d.parse::<std::net::SocketAddr>().is_ok() => "127.0.0.1:9".to_owned(),
                _ => "from-the-environment".to_owned(),
            };
            (text.clone(), json!(text))
        }
        Kind::List => ("a, b".to_owned(), json!(["a", "b"])),
        Kind::Toml => match default {
            Some(Value::Object(_)) => ("{}".to_owned(), json!({})),
            _ => ("[]".to_owned(), json!([])),
        },
    }
}

/// The leaf keys under `value`: values that are not tables, empty tables,
/// and the tables the table keeps as one row ([`Kind::Toml`]).
fn walk<'v>(
    value: &'v serde_json::Value,
    prefix: &str,
    keys: Table,
    out: &mut Vec<(String, &'v serde_json::Value)>,
) {
    let whole = keys
        .keys()
        .any(|k| k.path == prefix && k.kind == Kind::Toml);
    match value {
        serde_json::Value::Object(fields) if !fields.is_empty() && !whole => {
            for (name, v) in fields {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                walk(v, &path, keys, out);
            }
        }
        _ => out.push((prefix.to_owned(), value)),
    }
}

fn fits(kind: Kind, value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (kind, value) {
        (_, Value::Null) => true,
        (Kind::Int, Value::Number(n)) => n.is_u64() || n.is_i64(),
        (Kind::Float, Value::Number(_)) => true,
        (Kind::Bool, Value::Bool(_)) => true,
        (Kind::Str | Kind::Enum(_), Value::String(_)) => true,
        (Kind::List, Value::Array(_)) => true,
        (Kind::Toml, Value::Array(_) | Value::Object(_)) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::key::{Binary, Key, key};

    const KEYS: &[Key] = &[
        key("a", Kind::Int, ""),
        key("s.b", Kind::Str, ""),
        key("s.t", Kind::Toml, ""),
        key("gone", Kind::Bool, ""),
    ];

    #[test]
    fn missing_rows_stale_rows_and_wrong_kinds_are_named() {
        let defaults = serde_json::json!({
            "a": "text", "s": {"b": null, "t": {"x": {"y": 1}}, "new": 1}
        });
        let p = problems(Table::only(Binary::Gateway, KEYS), &defaults);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].contains("a is Int in the table"), "{p:?}");
        assert!(p[1].contains("s.new has no row"), "{p:?}");
        assert!(p[2].contains("the row gone names no key"), "{p:?}");
    }
}
