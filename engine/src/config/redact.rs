//! Secrets out of a configuration before it is shown (`--print-config`):
//! every value a binary's [`Table`] marks secret becomes `"<redacted>"`,
//! a URL's password only its password.

use super::key::Secret;
use super::table::Table;

/// What a secret is shown as.
pub const REDACTED: &str = "<redacted>";

/// Replace every secret of the keys of `keys` in `table` (a configuration
/// serialized to TOML).
pub fn redact(table: &mut toml::Table, keys: Table) {
    for key in keys.keys() {
        if key.secret == Secret::No {
            continue;
        }
        if let Some(value) = get_mut(table, key.path) {
            redact_value(value, key.secret);
        }
    }
}

fn get_mut<'t>(table: &'t mut toml::Table, path: &str) -> Option<&'t mut toml::Value> {
    let mut parts = path.split('.');
    let mut value = table.get_mut(parts.next()?)?;
    for part in parts {
        value = value.as_table_mut()?.get_mut(part)?;
    }
    Some(value)
}

fn redact_value(value: &mut toml::Value, secret: Secret) {
    match (value, secret) {
        (toml::Value::Array(items), Secret::Yes | Secret::UrlPassword) => {
            for item in items {
                redact_value(item, secret);
            }
        }
        (toml::Value::Array(items), Secret::Fields(fields)) => {
            for item in items {
                if let Some(table) = item.as_table_mut() {
                    for field in fields {
                        if let Some(v) = table.get_mut(*field) {
                            *v = toml::Value::String(REDACTED.to_owned());
                        }
                    }
                }
            }
        }
        (toml::Value::String(url), Secret::UrlPassword) => *url = url_without_password(url),
        (value, Secret::Yes) => *value = toml::Value::String(REDACTED.to_owned()),
        // A shape the table does not expect: hide it whole.
        (value, _) => *value = toml::Value::String(REDACTED.to_owned()),
    }
}

/// `url` with its password (`scheme://user:PASSWORD@host`) replaced; a URL
/// without one unchanged.
pub fn url_without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:{REDACTED}{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::key::{Binary, Key, Kind, key};

    const KEYS: &[Key] = &[
        key("plain", Kind::Str, ""),
        key("secret", Kind::Str, "").secret(Secret::Yes),
        key("list", Kind::List, "").secret(Secret::Yes),
        key("s.urls", Kind::List, "").secret(Secret::UrlPassword),
        key("s.url", Kind::Str, "").secret(Secret::UrlPassword),
        key("keys", Kind::Toml, "").secret(Secret::Fields(&["key"])),
    ];

    #[test]
    fn every_secret_is_redacted_and_nothing_else() {
        let mut t: toml::Table = r#"
plain = "shown"
secret = "s3cret"
list = ["k1", "k2"]
keys = [{ name = "billing", key = "k3" }, { name = "ops", key_file = "/etc/k" }]
[s]
urls = ["amqp://u:p4ss@h:5672/%2f", "amqp://h2"]
url = "redis://:p5ss@h:6379/0"
"#
        .parse()
        .unwrap();
        redact(&mut t, Table::only(Binary::Gateway, KEYS));
        let text = toml::to_string(&t).unwrap();
        for secret in ["s3cret", "k1", "k2", "k3", "p4ss", "p5ss"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        for shown in [
            "shown",
            "billing",
            "/etc/k",
            "amqp://u:<redacted>@h:5672/%2f",
            "amqp://h2",
            "redis://:<redacted>@h:6379/0",
        ] {
            assert!(text.contains(shown), "{shown} not in {text}");
        }
    }

    #[test]
    fn urls_lose_only_their_password() {
        assert_eq!(
            url_without_password("amqps://u:p@ss@host/v?x=a@b"),
            "amqps://u:<redacted>@host/v?x=a@b"
        );
        assert_eq!(url_without_password("amqp://u@host"), "amqp://u@host");
        assert_eq!(url_without_password("not a url"), "not a url");
    }
}
