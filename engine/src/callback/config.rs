//! `[callbacks]`: deployment-wide settings of callbacks, shared by
//! `herald-router` and standalone `herald-gateway`.

use serde::Deserialize;

use super::destination::Class;

/// Settings of callbacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallbackConfig {
    /// Let callbacks reach loopback, private (RFC 1918, ULA), link-local and
    /// shared (CGNAT) addresses. Off by default: whoever can register a
    /// topic could otherwise make Herald call internal services. The cloud
    /// metadata addresses stay refused either way.
    pub allow_private_networks: bool,
}

impl CallbackConfig {
    /// The address classes callbacks may reach beyond public addresses.
    pub fn allowed(&self) -> Vec<Class> {
        if self.allow_private_networks {
            vec![
                Class::Loopback,
                Class::Private,
                Class::LinkLocal,
                Class::Shared,
            ]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_networks_are_opt_in_and_metadata_never() {
        assert!(CallbackConfig::default().allowed().is_empty());
        let open: CallbackConfig = toml::from_str("allow_private_networks = true").unwrap();
        assert!(open.allowed().contains(&Class::Loopback));
        assert!(!open.allowed().contains(&Class::Metadata));
        assert!(toml::from_str::<CallbackConfig>("allow_private = true").is_err());
    }
}
