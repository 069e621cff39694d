//! One configuration key: where it sits in the TOML file, its type,
//! whether it is a secret, what it does, and its environment variable for
//! each binary. Which binary reads it is the table it is a row of
//! ([`super::table`]).

/// A Herald binary, for the keys it reads and the prefix of its variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `herald-gateway`: variables `HERALD_…`.
    Gateway,
    /// `herald-router`: variables `HERALD_ROUTER_…`.
    Router,
}

impl Binary {
    /// The program name.
    pub fn name(self) -> &'static str {
        match self {
            Binary::Gateway => "herald-gateway",
            Binary::Router => "herald-router",
        }
    }

    /// The file of the workspace that holds this binary's own keys.
    pub fn keys_file(self) -> &'static str {
        match self {
            Binary::Gateway => "gateway/src/config/keys.rs",
            Binary::Router => "router/src/config/keys.rs",
        }
    }

    /// What every variable of this binary starts with.
    pub fn prefix(self) -> &'static str {
        match self {
            Binary::Gateway => "HERALD_",
            Binary::Router => "HERALD_ROUTER_",
        }
    }
}

/// The type of a key's value, which says how its variable is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text, taken as it is (addresses, paths, names, URLs).
    Str,
    /// A whole number.
    Int,
    /// A number, fractions allowed.
    Float,
    /// `true` or `false` (the variable also takes `1`/`0`, `yes`/`no`,
    /// `on`/`off`).
    Bool,
    /// One of these words.
    Enum(&'static [&'static str]),
    /// A list of strings: the variable is comma-separated (`a,b`), or a
    /// TOML array (`["a", "b"]`).
    List,
    /// An array of tables or a table of tables: the variable holds a TOML
    /// inline value (`[{ name = "a", key_env = "A_KEY" }]`).
    Toml,
}

impl Kind {
    /// How the documentation names the type.
    pub fn describe(self) -> String {
        match self {
            Kind::Str => "string".to_owned(),
            Kind::Int => "integer".to_owned(),
            Kind::Float => "number".to_owned(),
            Kind::Bool => "boolean".to_owned(),
            Kind::Enum(words) => words.join(" \\| "),
            Kind::List => "list".to_owned(),
            Kind::Toml => "TOML inline".to_owned(),
        }
    }
}

/// Whether a key holds a secret, and which part: `print-config` shows
/// `"<redacted>"` there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secret {
    /// Not a secret.
    No,
    /// The value (each element of a list).
    Yes,
    /// A URL (or each URL of a list) whose password is secret; the rest
    /// (scheme, user, host) is shown.
    UrlPassword,
    /// These fields of each table of an array of tables.
    Fields(&'static [&'static str]),
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Its dotted path in the TOML file, e.g. `callbacks.max_per_host` for
    /// `max_per_host` under `[callbacks]`.
    pub path: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Whether it is a secret.
    pub secret: Secret,
    /// Older variable names that still work (the one the key's path makes
    /// wins when both are set and differ: that is an error).
    pub aliases: &'static [&'static str],
    /// What it does, one or two sentences of Markdown: the one description
    /// of the key (docs/configuration.md shows it; the configuration
    /// struct's field names the key and points here).
    pub doc: &'static str,
    /// A value its variable takes, for keys whose values have a form of
    /// their own (the tests set each variable to one).
    pub example: Option<&'static str>,
    /// Its variable's name after the binary's prefix, when the one its
    /// path makes is a name people set for something else (the path
    /// `api_key` would make `HERALD_API_KEY`, which a backend sets to the
    /// key it calls Herald with: docs/examples.md).
    pub env_name: Option<&'static str>,
}

/// A key that is no secret and has no older variable names; see
/// [`Key::secret`] and [`Key::aliases`] for the others.
pub const fn key(path: &'static str, kind: Kind, doc: &'static str) -> Key {
    Key {
        path,
        kind,
        secret: Secret::No,
        aliases: &[],
        doc,
        example: None,
        env_name: None,
    }
}

impl Key {
    /// This key, holding a secret.
    pub const fn secret(mut self, secret: Secret) -> Key {
        self.secret = secret;
        self
    }

    /// This key, with older variable names that still work.
    pub const fn aliases(mut self, aliases: &'static [&'static str]) -> Key {
        self.aliases = aliases;
        self
    }

    /// This key, with a value of the form it takes (e.g. CIDRs).
    pub const fn example(mut self, example: &'static str) -> Key {
        self.example = Some(example);
        self
    }

    /// This key, its variable named `name` after the binary's prefix
    /// instead of by its path.
    pub const fn env_name(mut self, name: &'static str) -> Key {
        self.env_name = Some(name);
        self
    }

    /// The key's variable for `binary`: the prefix, then the path in upper
    /// case with `__` between sections (`HERALD_CALLBACKS__MAX_PER_HOST`),
    /// or its own name ([`Key::env_name`]).
    pub fn env_var(&self, binary: Binary) -> String {
        match self.env_name {
            Some(name) => format!("{}{name}", binary.prefix()),
            None => self.path_var(binary),
        }
    }

    /// The variable the key's path makes, whatever [`Key::env_name`] says.
    pub fn path_var(&self, binary: Binary) -> String {
        format!(
            "{}{}",
            binary.prefix(),
            self.path.replace('.', "__").to_ascii_uppercase()
        )
    }

    /// The older names of this key's variable that belong to `binary`.
    pub fn aliases_for(&self, binary: Binary) -> impl Iterator<Item = &'static str> {
        self.aliases.iter().copied().filter(move |alias| {
            let router = alias.starts_with(Binary::Router.prefix());
            router == (binary == Binary::Router)
        })
    }
}

/// The value at the dotted `path` of `value` (a configuration serialized
/// to JSON), if there is one.
pub fn value_at<'v>(value: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    path.split('.').try_fold(value, |v, part| v.get(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_the_path_in_upper_case_with_the_binary_prefix() {
        let key = key("callbacks.alerts.smtp_host", Kind::Str, "")
            .aliases(&["HERALD_SMTP", "HERALD_ROUTER_SMTP"]);
        assert_eq!(
            key.env_var(Binary::Gateway),
            "HERALD_CALLBACKS__ALERTS__SMTP_HOST"
        );
        assert_eq!(
            key.env_var(Binary::Router),
            "HERALD_ROUTER_CALLBACKS__ALERTS__SMTP_HOST"
        );
        assert_eq!(
            key.aliases_for(Binary::Gateway).collect::<Vec<_>>(),
            ["HERALD_SMTP"]
        );
        assert_eq!(
            key.aliases_for(Binary::Router).collect::<Vec<_>>(),
            ["HERALD_ROUTER_SMTP"]
        );
        let named = super::key("api_key", Kind::Toml, "").env_name("NAMED_API_KEYS");
        assert_eq!(named.env_var(Binary::Gateway), "HERALD_NAMED_API_KEYS");
        assert_eq!(
            named.env_var(Binary::Router),
            "HERALD_ROUTER_NAMED_API_KEYS"
        );
        assert_eq!(named.path_var(Binary::Gateway), "HERALD_API_KEY");
    }
}
