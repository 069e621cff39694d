//! `[callbacks]`: deployment-wide settings of callbacks, shared by
//! `herald-router` and standalone `herald-gateway`.

use serde::Deserialize;

use super::alert::config::AlertsConfig;
use super::destination::Class;

/// The default of `callbacks.max_per_host`.
pub const MAX_PER_HOST: usize = 64;
/// The default of `callbacks.max_in_flight`.
pub const MAX_IN_FLIGHT: usize = 1024;

/// Settings of callbacks, `[callbacks]`. Each field is the key of its name,
/// described once in its row of [`crate::config::table::SECTIONS`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallbackConfig {
    /// Key `callbacks.allow_private_networks`.
    pub allow_private_networks: bool,
    /// Key `callbacks.max_per_host`.
    pub max_per_host: usize,
    /// Key `callbacks.max_in_flight`.
    pub max_in_flight: usize,
    /// Alerts (`[callbacks.alerts]`): dead letters and the delayed store
    /// failing, to a webhook and by mail.
    pub alerts: AlertsConfig,
}

impl Default for CallbackConfig {
    fn default() -> Self {
        CallbackConfig {
            allow_private_networks: false,
            max_per_host: MAX_PER_HOST,
            max_in_flight: MAX_IN_FLIGHT,
            alerts: AlertsConfig::default(),
        }
    }
}

impl CallbackConfig {
    /// Every rule, as problems named `callbacks.*`.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !(1..=10_000).contains(&self.max_per_host) {
            out.push(format!(
                "callbacks.max_per_host: must be 1 to 10000, got {}",
                self.max_per_host
            ));
        }
        if !(1..=100_000).contains(&self.max_in_flight) {
            out.push(format!(
                "callbacks.max_in_flight: must be 1 to 100000, got {}",
                self.max_in_flight
            ));
        }
        out.extend(self.alerts.problems());
        out
    }

    /// The address classes callbacks may reach beyond public addresses.
    pub fn allowed(&self) -> Vec<Class> {
        if self.allow_private_networks {
            vec![
                Class::Loopback,
                Class::Private,
                Class::LinkLocal,
                Class::Shared,
                Class::ThisHost,
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
    fn limits_have_defaults_and_bounds() {
        let c = CallbackConfig::default();
        assert_eq!(
            (c.max_per_host, c.max_in_flight),
            (MAX_PER_HOST, MAX_IN_FLIGHT)
        );
        let bad: CallbackConfig =
            toml::from_str("max_per_host = 0\nmax_in_flight = 1000000").unwrap();
        let p = bad.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("callbacks.max_per_host: "), "{p:?}");
        assert!(p[1].starts_with("callbacks.max_in_flight: "), "{p:?}");
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
