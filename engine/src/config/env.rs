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
        let value = match fits::<T>(key.path, value) {
            Ok(v) => v,
            Err(why) => {
                problems.push(problem(key, &name, &raw, &why));
                continue;
            }
        };
        set(table, key.path, value);
        applied += 1;
    }
    if problems.is_empty() {
        Ok(applied)
    } else {
        Err(problems)
    }
}

/// `value` at `path` alone, checked against the configuration type `T`:
/// the value, or why `T` refuses it. An array of tables may be given as
/// one table (`{ name = "a" }` for `[{ name = "a" }]`): when `T` refuses
/// the table and takes it wrapped in an array, that is the value.
fn fits<T: DeserializeOwned>(path: &str, value: toml::Value) -> Result<toml::Value, String> {
    let check = |value: &toml::Value| {
        let mut alone = toml::Table::new();
        set(&mut alone, path, value.clone());
        toml::Value::Table(alone)
            .try_into::<T>()
            .map(|_| ())
            .map_err(|e| e.to_string().replace('\n', " ").trim().to_owned())
    };
    match check(&value) {
        Ok(()) => Ok(value),
        Err(why) if value.is_table() => {
            let wrapped = toml::Value::Array(vec![value]);
            check(&wrapped).map(|()| wrapped).map_err(|_| why)
        }
        Err(why) => Err(why),
    }
}

/// One warning for each of `names` (the environment's variable names) that
/// has the prefix of the binary of `keys` but is none of its settings'
/// variables, nor one of `also_read` (what the binary reads otherwise: its
/// `--config` variable, the variables named by `key_env`): a typo, or a
/// variable set for something else (`HERALD_API_KEY` for a backend), would
/// otherwise go unnoticed. When the name is the one a key's path would
/// make but the key's variable is named otherwise ([`Key::env_name`]), the
/// warning names that variable. The gateway leaves the router's variables
/// (`HERALD_ROUTER_…`) alone.
pub fn unknown_variables(
    names: impl IntoIterator<Item = String>,
    keys: Table,
    also_read: &[&str],
) -> Vec<String> {
    let binary = keys.binary;
    let known: Vec<String> = keys
        .keys()
        .flat_map(|k| {
            std::iter::once(k.env_var(binary)).chain(k.aliases_for(binary).map(str::to_owned))
        })
        .collect();
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| n.starts_with(binary.prefix()))
        .filter(|n| binary == Binary::Router || !n.starts_with(Binary::Router.prefix()))
        .filter(|n| !known.contains(n) && !also_read.contains(&n.as_str()))
        .map(|n| {
            let hint = keys
                .keys()
                .find(|k| k.env_name.is_some() && k.path_var(binary) == n)
                .map(|k| {
                    format!(
                        "; the key {} is set by {}",
                        k.path,
                        k.env_var(binary)
                    )
                })
                .unwrap_or_default();
            format!(
                "the environment variable {n} is not a setting of {} (docs/configuration.md lists them): ignored{hint}",
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

    /// Every HERALD_* variable that is not a setting is named: a typo, or
    /// one set for something else (a backend's HERALD_API_KEY); those the
    /// binary reads otherwise, and the router's in the gateway, are not.
    #[test]
    fn variables_with_the_prefix_that_are_no_setting_are_named() {
        let names = [
            "HERALD_SECTION__LIMIT",
            "HERALD_SECTON__LIMIT",
            "HERALD_TAG_LIST",
            "HERALD_ROUTER_AMQP__URL",
            "HERALD_URL",
            "HERALD_CONFIG",
            "HERALD_BILLING_KEY",
            "PATH",
        ]
        .map(String::from);
        let also = ["HERALD_CONFIG", "HERALD_BILLING_KEY"];
        let w = unknown_variables(names.clone(), Table::only(Binary::Gateway, DEMO), &also);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with(
                "the environment variable HERALD_SECTON__LIMIT is not a setting of herald-gateway"
            ),
            "{w:?}"
        );
        assert!(w[1].contains("HERALD_URL is not a setting"), "{w:?}");
        let w = unknown_variables(names, Table::only(Binary::Router, DEMO), &[]);
        assert_eq!(w.len(), 1, "the router's own prefix: {w:?}");
        assert!(w[0].contains("HERALD_ROUTER_AMQP__URL"));
    }

    /// A key whose variable is named otherwise than by its path: the
    /// path's name is not read, and its warning says which one is.
    #[test]
    fn a_key_named_otherwise_is_not_set_by_its_path_s_name() {
        const NAMED: &[Key] = &[key("api_key", Kind::Toml, "").env_name("NAMED_API_KEYS")];
        let table = Table::only(Binary::Gateway, NAMED);
        let w = unknown_variables(["HERALD_API_KEY".to_owned()], table, &[]);
        assert_eq!(
            w,
            [
                "the environment variable HERALD_API_KEY is not a setting of herald-gateway \
              (docs/configuration.md lists them): ignored; the key api_key is set by \
              HERALD_NAMED_API_KEYS"
            ]
        );
        #[derive(Debug, serde::Deserialize)]
        struct Keys {
            #[serde(default)]
            api_key: Vec<Named>,
        }
        #[derive(Debug, serde::Deserialize)]
        struct Named {
            name: String,
        }
        // HERALD_API_KEY is a backend's: left alone, whatever its value.
        let env = |n: &str| (n == "HERALD_API_KEY").then(|| "0123abcd".to_owned());
        let mut doc = toml::Table::new();
        assert_eq!(overlay::<Keys>(&mut doc, table, &env), Ok(0));
        // The key's own variable, as an array of tables or as one table.
        for value in ["[{ name = \"a\" }]", "{ name = \"a\" }"] {
            let env = |n: &str| (n == "HERALD_NAMED_API_KEYS").then(|| value.to_owned());
            let mut doc = toml::Table::new();
            assert_eq!(overlay::<Keys>(&mut doc, table, &env), Ok(1), "{value}");
            let keys: Keys = toml::Value::Table(doc).try_into().unwrap();
            assert_eq!(keys.api_key.len(), 1, "{value}");
            assert_eq!(keys.api_key[0].name, "a");
        }
        // Neither form of something else.
        let env = |n: &str| (n == "HERALD_NAMED_API_KEYS").then(|| "{ nom = 1 }".to_owned());
        let err = overlay::<Keys>(&mut toml::Table::new(), table, &env).unwrap_err();
        assert!(
            err[0].starts_with("HERALD_NAMED_API_KEYS (api_key): "),
            "{err:?}"
        );
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
