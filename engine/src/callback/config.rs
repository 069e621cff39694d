//! `[callbacks]`: deployment-wide settings of callbacks, shared by
//! `herald-router` and standalone `herald-gateway`.

use serde::Deserialize;

use super::alert::config::AlertsConfig;
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
    /// Alerts (`[callbacks.alerts]`): dead letters and the delayed store
    /// failing, to a webhook and by mail.
    pub alerts: AlertsConfig,
}

impl CallbackConfig {
    /// Every rule, as problems named `callbacks.*`.
    pub fn problems(&self) -> Vec<String> {
        self.alerts.problems()
    }

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

    #[test]
    fn alerts_are_a_section_of_their_own_checked_with_the_rest() {
        let c: CallbackConfig = toml::from_str(
            "allow_private_networks = true\n[alerts]\nwebhook_url = \"gopher://x\"\n",
        )
        .unwrap();
        assert_eq!(c.problems().len(), 1);
        assert!(c.problems()[0].starts_with("callbacks.alerts.webhook_url: "));
        assert!(CallbackConfig::default().problems().is_empty());
        assert!(toml::from_str::<CallbackConfig>("[alerts]\nwebhook = \"x\"").is_err());
    }
}
