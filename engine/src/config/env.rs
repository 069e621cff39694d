//! The environment laid over the configuration file, before validation:
//! every key of a binary's [`Table`] has a variable (see
//! [`super::key::Key::env_var`]), read according to the key's
//! [`super::key::Kind`]. An empty variable counts as unset (an env file's
//! `KEY=` line changes nothing). A value the key cannot take is a problem
//! naming the variable and the key; a secret's value is never repeated in
//! it.

use serde::de::DeserializeOwned;

use super::key::{Binary, Key, Kind, Secret};
use super::table::Table;

/// Where variables are read from: the process environment, or a map in
/// tests.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment (a variable that is not Unicode counts as
/// unset).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Lay the variables of the keys of `keys` over `table` (the parsed
/// file). Each value is checked alone against the configuration type `T`
/// first, so a bad one is named by its variable. Returns how many
/// variables were applied, or every problem.
pub fn overlay<T: DeserializeOwned>(
    table: &mut toml::Table,
    keys: Table,
    env: Env<'_>,
) -> Result<usize, Vec<String>> {
    let binary = keys.binary;
    let mut problems = Vec::new();
    let mut applied = 0;
    for key in keys.keys() {
        let Some((name, raw)) = lookup(key, binary, env, &mut problems) else {
            continue;
        };
        let value = match parse(key.kind, &raw) {
            Ok(v) => v,
            Err(why) => {
                problems.push(problem(key, &name, &raw, &why));
                continue;
            }
        };
        let mut alone = toml::Table::new();
        set(&mut alone, key.path, value.clone());
        if let Err(e) = toml::Value::Table(alone).try_into::<T>() {
            let why = e.to_string().replace('\n', " ").trim().to_owned();
            problems.push(problem(key, &name, &raw, &why));
            continue;
        }
        set(table, key.path, value);
        applied += 1;
    }
    if problems.is_empty() {
        Ok(applied)
    } else {
        Err(problems)
    }
}

/// One warning for each of `names` (the environment's variable names) that
/// looks like a configuration variable of the binary of `keys` (its
/// prefix, and `__` between sections) but names no key: a typo would
/// otherwise be ignored. The gateway leaves the router's variables
/// (`HERALD_ROUTER_…`) alone.
pub fn unknown_variables(names: impl IntoIterator<Item = String>, keys: Table) -> Vec<String> {
    let binary = keys.binary;
    let known: Vec<String> = keys
        .keys()
        .flat_map(|k| {
            std::iter::once(k.env_var(binary)).chain(k.aliases_for(binary).map(str::to_owned))
        })
        .collect();
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| n.starts_with(binary.prefix()) && n.contains("__"))
        .filter(|n| binary == Binary::Router || !n.starts_with(Binary::Router.prefix()))
        .filter(|n| !known.contains(n))
        .map(|n| {
            format!(
                "the environment variable {n} names no configuration key of {} (docs/configuration.md lists them): ignored",
                binary.name()
            )
        })
        .collect();
    out.sort();
    out
}

/// The variable that sets `key`, and its value: the key's own name, or an
/// older one. Both set to different values is a problem.
fn lookup(
    key: &Key,
    binary: Binary,
    env: Env<'_>,
    problems: &mut Vec<String>,
) -> Option<(String, String)> {
    let read = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let name = key.env_var(binary);
    let own = read(&name).map(|v| (name.clone(), v));
    let mut older = key
        .aliases_for(binary)
        .filter_map(|alias| read(alias).map(|v| (alias.to_owned(), v)));
    match (own, older.next()) {
        (Some(own), Some(old)) if own.1 != old.1 => {
            problems.push(format!(
                "{} and {} (its older name) are both set, to different values: keep one ({})",
                own.0, old.0, key.path
            ));
            None
        }
        (Some(own), _) => Some(own),
        (None, old) => old,
    }
}

fn problem(key: &Key, name: &str, raw: &str, why: &str) -> String {
    if key.secret == Secret::No {
        format!("{name} ({}): {raw:?}: {why}", key.path)
    } else {
        let why = why.replace(raw.trim(), "<redacted>");
        format!("{name} ({}): {why}", key.path)
    }
}

/// The TOML value a variable's text stands for, by the key's kind.
pub fn parse(kind: Kind, raw: &str) -> Result<toml::Value, String> {
    let text = raw.trim();
    Ok(match kind {
        Kind::Str => toml::Value::String(raw.to_owned()),
        Kind::Int => {
            toml::Value::Integer(text.parse().map_err(|_| "not a whole number".to_owned())?)
        }
        Kind::Float => toml::Value::Float(text.parse().map_err(|_| "not a number".to_owned())?),
        Kind::Bool => toml::Value::Boolean(match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => return Err("not a boolean (true or false)".to_owned()),
        }),
        Kind::Enum(words) => {
            if !words.contains(&text) {
                return Err(format!("must be one of {}", words.join(", ")));
            }
            toml::Value::String(text.to_owned())
        }
        Kind::List if text.starts_with('[') => inline(text)?,
        Kind::List => toml::Value::Array(
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        ),
        Kind::Toml => inline(text)?,
    })
}

/// A TOML inline value (`[…]`, `{…}`).
fn inline(text: &str) -> Result<toml::Value, String> {
    let doc = format!("value = {text}");
    let mut table: toml::Table = doc
        .parse()
        .map_err(|e: toml::de::Error| format!("not a TOML inline value: {}", e.message()))?;
    table
        .remove("value")
        .ok_or_else(|| "not a TOML inline value".to_owned())
}

/// Put `value` at the dotted `path` of `table`, making the tables on the
/// way.
pub fn set(table: &mut toml::Table, path: &str, value: toml::Value) {
    let mut at = table;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            at.insert(part.to_owned(), value);
            return;
        }
        let next = at
            .entry(part.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !next.is_table() {
            *next = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = next else {
            return;
        };
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::key::key;
    use std::collections::HashMap;

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Demo {
        listen: String,
        token: Option<String>,
        tags: Vec<String>,
        section: Section,
    }

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Section {
        limit: u16,
        on: bool,
        mode: Option<String>,
    }

    const DEMO: &[Key] = &[
        key("listen", Kind::Str, ""),
        key("token", Kind::Str, "").secret(Secret::Yes),
        key("tags", Kind::List, "").aliases(&["HERALD_TAG_LIST"]),
        key("section.limit", Kind::Int, ""),
        key("section.on", Kind::Bool, ""),
        key("section.mode", Kind::Enum(&["a", "b"]), ""),
    ];

    fn run(file: &str, vars: &[(&str, &str)]) -> Result<(Demo, usize), Vec<String>> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.get(name).cloned();
        let mut table: toml::Table = file.parse().unwrap();
        let n = overlay::<Demo>(&mut table, Table::only(Binary::Gateway, DEMO), &env)?;
        Ok((toml::Value::Table(table).try_into().unwrap(), n))
    }

    #[test]
    fn variables_override_the_file_by_kind() {
        let (demo, n) = run(
            "listen = \"file\"\n[section]\nlimit = 5\n",
            &[
                ("HERALD_LISTEN", "env"),
                ("HERALD_TAGS", " a, b ,,c"),
                ("HERALD_SECTION__ON", "yes"),
                ("HERALD_SECTION__MODE", "b"),
                ("HERALD_TOKEN", ""),
                ("HERALD_ROUTER_LISTEN", "not this binary's"),
            ],
        )
        .unwrap();
        assert_eq!(n, 4);
        assert_eq!(demo.listen, "env");
        assert_eq!(demo.tags, ["a", "b", "c"]);
        assert_eq!(demo.section.limit, 5, "the file's value stays");
        assert!(demo.section.on);
        assert_eq!(demo.section.mode.as_deref(), Some("b"));
        assert_eq!(demo.token, None, "an empty variable is unset");
        let (demo, _) = run("", &[("HERALD_TAGS", "[\"x,y\", \"z\"]")]).unwrap();
        assert_eq!(demo.tags, ["x,y", "z"], "a TOML array keeps commas");
    }

    #[test]
    fn an_older_name_works_unless_it_disagrees() {
        let (demo, _) = run("", &[("HERALD_TAG_LIST", "a")]).unwrap();
        assert_eq!(demo.tags, ["a"]);
        let (demo, _) = run("", &[("HERALD_TAG_LIST", "a"), ("HERALD_TAGS", "a")]).unwrap();
        assert_eq!(demo.tags, ["a"]);
        let err = run("", &[("HERALD_TAG_LIST", "a"), ("HERALD_TAGS", "b")]).unwrap_err();
        assert!(
            err[0].contains("HERALD_TAGS and HERALD_TAG_LIST"),
            "{err:?}"
        );
    }

    #[test]
    fn bad_values_name_the_variable_and_the_key() {
        let err = run(
            "",
            &[
                ("HERALD_SECTION__LIMIT", "many"),
                ("HERALD_SECTION__ON", "maybe"),
                ("HERALD_SECTION__MODE", "c"),
            ],
        )
        .unwrap_err();
        assert_eq!(err.len(), 3, "{err:?}");
        assert!(
            err[0]
                .starts_with("HERALD_SECTION__LIMIT (section.limit): \"many\": not a whole number"),
            "{err:?}"
        );
        assert!(
            err[1].contains("HERALD_SECTION__ON (section.on)"),
            "{err:?}"
        );
        assert!(err[2].contains("must be one of a, b"), "{err:?}");
        // In range for TOML, not for the field: serde's message, named.
        let err = run("", &[("HERALD_SECTION__LIMIT", "70000")]).unwrap_err();
        assert!(
            err[0].starts_with("HERALD_SECTION__LIMIT (section.limit): \"70000\": "),
            "{err:?}"
        );
    }

    #[test]
    fn unknown_variables_that_look_like_keys_are_named() {
        let names = [
            "HERALD_SECTION__LIMIT",
            "HERALD_SECTON__LIMIT",
            "HERALD_TAG_LIST",
            "HERALD_ROUTER_AMQP__URL",
            "HERALD_COMMIT",
            "PATH",
        ]
        .map(String::from);
        let w = unknown_variables(names.clone(), Table::only(Binary::Gateway, DEMO));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("HERALD_SECTON__LIMIT names no configuration key"));
        let w = unknown_variables(names, Table::only(Binary::Router, DEMO));
        assert_eq!(w.len(), 1, "the router's own prefix: {w:?}");
        assert!(w[0].contains("HERALD_ROUTER_AMQP__URL"));
    }

    #[test]
    fn a_secret_is_not_repeated_in_a_problem() {
        let mut table = toml::Table::new();
        let env = |name: &str| (name == "HERALD_TOKEN").then(|| "[not-a-string]".to_owned());
        const BAD: &[Key] = &[key("token", Kind::Toml, "").secret(Secret::Yes)];
        let err = overlay::<Demo>(&mut table, Table::only(Binary::Gateway, BAD), &env).unwrap_err();
        assert!(err[0].starts_with("HERALD_TOKEN (token): "), "{err:?}");
        assert!(!err[0].contains("not-a-string"), "{err:?}");
    }
}
