//! `[callbacks.alerts]`: where alerts go (a Slack-compatible webhook, SMTP
//! mail), how often, and when a failing store counts as down. Checked at
//! load: every problem is named `callbacks.alerts.<key>`.

use lettre::message::Mailbox;
use serde::Deserialize;
use url::Url;

/// Shortest `min_interval_ms`: a flood of dead letters must not become a
/// flood of messages.
pub const MIN_INTERVAL_FLOOR_MS: u64 = 1_000;

/// Settings of alerts. With neither `webhook_url` nor `smtp_host`, alerts
/// are log lines and metrics only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// A Slack-compatible incoming webhook: alerts are POSTed to it as JSON
    /// `{"text": "..."}`. Set by the operator, so any address is allowed.
    pub webhook_url: Option<String>,
    /// The SMTP server mail goes through; unset, no mail.
    pub smtp_host: Option<String>,
    /// Its port (587, the submission port, by default).
    pub smtp_port: u16,
    /// How the connection is protected: `starttls` (the default), `tls`
    /// (implicit TLS, usually port 465) or `none` (a local relay).
    pub smtp_tls: SmtpTls,
    /// The user to log in as; with it, `smtp_password_env`.
    pub smtp_username: Option<String>,
    /// The name of the environment variable that holds the password (the
    /// password itself never goes in the file).
    pub smtp_password_env: Option<String>,
    /// The sender, `alerts@example.com` or `Herald <alerts@example.com>`.
    pub mail_from: Option<String>,
    /// The recipients; at least one with `smtp_host`.
    pub mail_to: Vec<String>,
    /// At most one message per kind of alert per channel in this long;
    /// what comes in between goes out as one summary when it is over.
    pub min_interval_ms: u64,
    /// The delayed store counts as unavailable once its maintenance rounds
    /// have been failing for this long (0: at the first failed round).
    pub store_unavailable_after_ms: u64,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            webhook_url: None,
            smtp_host: None,
            smtp_port: 587,
            smtp_tls: SmtpTls::Starttls,
            smtp_username: None,
            smtp_password_env: None,
            mail_from: None,
            mail_to: Vec::new(),
            min_interval_ms: 60_000,
            store_unavailable_after_ms: 10_000,
        }
    }
}

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    /// Plain connection upgraded with `STARTTLS`, which is required.
    #[default]
    Starttls,
    /// TLS from the first byte (SMTPS).
    Tls,
    /// No TLS (a relay on the same host or network); no login allowed.
    None,
}

/// The channels of a valid configuration, ready to use.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Channels {
    /// The webhook.
    pub(crate) webhook: Option<Url>,
    /// Mail.
    pub(crate) mail: Option<MailSettings>,
}

/// Mail settings, parsed; the password read from its variable.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct MailSettings {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) tls: SmtpTls,
    /// User name and password.
    pub(crate) login: Option<(String, String)>,
    pub(crate) from: Mailbox,
    pub(crate) to: Vec<Mailbox>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("webhook", &self.webhook.as_ref().map(|u| u.host_str()))
            .field("mail", &self.mail.as_ref().map(|m| (&m.host, m.port)))
            .finish()
    }
}

impl AlertsConfig {
    /// Every rule, as problems named `callbacks.alerts.*` (the password's
    /// variable is read from the environment now).
    pub fn problems(&self) -> Vec<String> {
        self.channels_with(|name| std::env::var(name).ok())
            .err()
            .unwrap_or_default()
    }

    /// The channels, the password's variable read from the environment.
    pub(crate) fn channels(&self) -> Result<Channels, Vec<String>> {
        self.channels_with(|name| std::env::var(name).ok())
    }

    /// The channels, with `env` answering environment variables; or every
    /// problem.
    pub(crate) fn channels_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Channels, Vec<String>> {
        let mut p = Vec::new();
        if self.min_interval_ms < MIN_INTERVAL_FLOOR_MS {
            p.push(format!(
                "callbacks.alerts.min_interval_ms must be at least {MIN_INTERVAL_FLOOR_MS}, so that a flood of dead letters cannot become a flood of messages"
            ));
        }
        let webhook = self
            .webhook_url
            .as_deref()
            .and_then(|text| match webhook_url(text) {
                Ok(url) => Some(url),
                Err(e) => {
                    p.push(format!("callbacks.alerts.webhook_url: {e}"));
                    None
                }
            });
        let mail = match self.smtp_host.as_deref() {
            Some(host) => self.mail(host, &env, &mut p),
            None => {
                for (key, set) in [
                    ("mail_to", !self.mail_to.is_empty()),
                    ("mail_from", self.mail_from.is_some()),
                    ("smtp_username", self.smtp_username.is_some()),
                    ("smtp_password_env", self.smtp_password_env.is_some()),
                ] {
                    if set {
                        p.push(format!(
                            "callbacks.alerts.{key} is set but smtp_host is not: mail needs a server"
                        ));
                    }
                }
                None
            }
        };
        if p.is_empty() {
            Ok(Channels { webhook, mail })
        } else {
            Err(p)
        }
    }

    fn mail(
        &self,
        host: &str,
        env: &impl Fn(&str) -> Option<String>,
        p: &mut Vec<String>,
    ) -> Option<MailSettings> {
        let before = p.len();
        if let Err(e) = url::Host::parse(host) {
            p.push(format!(
                "callbacks.alerts.smtp_host {host:?} is not a host name or address: {e}"
            ));
        }
        if self.smtp_port == 0 {
            p.push("callbacks.alerts.smtp_port must be greater than 0".to_owned());
        }
        let from = match self.mail_from.as_deref() {
            None => {
                p.push("callbacks.alerts.mail_from is required with smtp_host".to_owned());
                None
            }
            Some(text) => mailbox("mail_from", text, p),
        };
        if self.mail_to.is_empty() {
            p.push(
                "callbacks.alerts.mail_to is empty: with smtp_host, name at least one recipient"
                    .to_owned(),
            );
        }
        let to: Vec<Mailbox> = self
            .mail_to
            .iter()
            .enumerate()
            .filter_map(|(i, text)| mailbox(&format!("mail_to[{i}]"), text, p))
            .collect();
        let login = match (&self.smtp_username, &self.smtp_password_env) {
            (None, None) => None,
            (Some(_), None) => {
                p.push(
                    "callbacks.alerts.smtp_username needs smtp_password_env (the name of the environment variable holding the password)"
                        .to_owned(),
                );
                None
            }
            (None, Some(_)) => {
                p.push("callbacks.alerts.smtp_password_env needs smtp_username".to_owned());
                None
            }
            (Some(user), Some(var)) => match env(var) {
                Some(password) if !password.is_empty() => Some((user.clone(), password)),
                _ => {
                    p.push(format!(
                        "callbacks.alerts.smtp_password_env: the environment variable {var} is not set (or empty)"
                    ));
                    None
                }
            },
        };
        if self.smtp_username.is_some() && self.smtp_tls == SmtpTls::None {
            p.push(
                "callbacks.alerts.smtp_username needs smtp_tls = \"starttls\" or \"tls\": the password would cross the network in clear"
                    .to_owned(),
            );
        }
        if p.len() > before {
            return None;
        }
        Some(MailSettings {
            host: host.to_owned(),
            port: self.smtp_port,
            tls: self.smtp_tls,
            login,
            from: from?,
            to,
        })
    }
}

/// A webhook URL: http or https, with a host.
fn webhook_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {:?} is not http or https", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{text:?} has no host"));
    }
    Ok(url)
}

/// A mail address (`a@example.com` or `Name <a@example.com>`), or a
/// problem named `callbacks.alerts.<key>`.
fn mailbox(key: &str, text: &str, p: &mut Vec<String>) -> Option<Mailbox> {
    match text.parse::<Mailbox>() {
        Ok(m) => Some(m),
        Err(e) => {
            p.push(format!(
                "callbacks.alerts.{key}: {text:?} is not a mail address ({e})"
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> AlertsConfig {
        toml::from_str(text).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_are_valid_and_send_nothing() {
        let c = AlertsConfig::default();
        assert_eq!(c.smtp_port, 587);
        assert_eq!(c.smtp_tls, SmtpTls::Starttls);
        assert_eq!(c.min_interval_ms, 60_000);
        let channels = c.channels_with(no_env).unwrap();
        assert!(channels.webhook.is_none() && channels.mail.is_none());
        assert_eq!(parse(""), c);
    }

    #[test]
    fn a_full_configuration_resolves() {
        let c = parse(
            r#"
            webhook_url = "https://hooks.slack.com/services/T0/B0/x"
            smtp_host = "smtp.example.com"
            smtp_port = 465
            smtp_tls = "tls"
            smtp_username = "herald"
            smtp_password_env = "HERALD_TEST_SMTP_PASSWORD"
            mail_from = "Herald <alerts@example.com>"
            mail_to = ["ops@example.com", "On call <oncall@example.com>"]
            min_interval_ms = 5000
            "#,
        );
        let channels = c
            .channels_with(|name| (name == "HERALD_TEST_SMTP_PASSWORD").then(|| "pw".to_owned()))
            .unwrap();
        assert_eq!(
            channels.webhook.unwrap().host_str(),
            Some("hooks.slack.com")
        );
        let mail = channels.mail.unwrap();
        assert_eq!((mail.host.as_str(), mail.port), ("smtp.example.com", 465));
        assert_eq!(mail.tls, SmtpTls::Tls);
        assert_eq!(mail.login, Some(("herald".into(), "pw".into())));
        assert_eq!(mail.from.email.to_string(), "alerts@example.com");
        assert_eq!(mail.to.len(), 2);
    }

    #[test]
    fn unknown_keys_and_tls_modes_are_refused_by_the_parser() {
        assert!(toml::from_str::<AlertsConfig>("smtp_password = \"x\"").is_err());
        assert!(toml::from_str::<AlertsConfig>("smtp_tls = \"ssl\"").is_err());
        assert_eq!(parse("smtp_tls = \"none\"").smtp_tls, SmtpTls::None);
    }

    #[test]
    fn bad_webhook_urls_are_named() {
        for (url, says) in [
            ("not a url", "is not a URL"),
            ("ftp://example.com/x", "scheme \"ftp\" is not http or https"),
            ("file:///etc/passwd", "scheme \"file\""),
        ] {
            let c = AlertsConfig {
                webhook_url: Some(url.into()),
                ..AlertsConfig::default()
            };
            let p = c.channels_with(no_env).unwrap_err();
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(p[0].starts_with("callbacks.alerts.webhook_url: "), "{p:?}");
            assert!(p[0].contains(says), "{url}: {p:?}");
        }
        // Private addresses are fine: the operator chose them.
        let local = AlertsConfig {
            webhook_url: Some("http://127.0.0.1:9000/hook".into()),
            ..AlertsConfig::default()
        };
        assert!(local.channels_with(no_env).is_ok());
    }

    #[test]
    fn mail_needs_a_sender_and_recipients_with_valid_addresses() {
        let c = parse("smtp_host = \"smtp.example.com\"");
        let p = c.channels_with(no_env).unwrap_err();
        assert_eq!(
            p,
            vec![
                "callbacks.alerts.mail_from is required with smtp_host",
                "callbacks.alerts.mail_to is empty: with smtp_host, name at least one recipient",
            ]
        );
        let c = parse(
            r#"
            smtp_host = "smtp.example.com"
            mail_from = "herald"
            mail_to = ["ops@example.com", "ops at example"]
            "#,
        );
        let p = c.channels_with(no_env).unwrap_err();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with("callbacks.alerts.mail_from: \"herald\" is not a mail address"),
            "{p:?}"
        );
        assert!(
            p[1].starts_with(
                "callbacks.alerts.mail_to[1]: \"ops at example\" is not a mail address"
            ),
            "{p:?}"
        );
    }

    #[test]
    fn mail_settings_without_a_server_are_named() {
        let c = parse("mail_to = [\"ops@example.com\"]\nmail_from = \"a@example.com\"");
        let p = c.channels_with(no_env).unwrap_err();
        assert_eq!(
            p,
            vec![
                "callbacks.alerts.mail_to is set but smtp_host is not: mail needs a server",
                "callbacks.alerts.mail_from is set but smtp_host is not: mail needs a server",
            ]
        );
    }

    #[test]
    fn the_password_comes_from_a_set_variable_over_tls_only() {
        let base = r#"
            smtp_host = "smtp.example.com"
            mail_from = "a@example.com"
            mail_to = ["b@example.com"]
        "#;
        let unset = parse(&format!(
            "{base}smtp_username = \"u\"\nsmtp_password_env = \"NOPE\""
        ));
        assert_eq!(
            unset.channels_with(no_env).unwrap_err(),
            vec![
                "callbacks.alerts.smtp_password_env: the environment variable NOPE is not set (or empty)"
            ]
        );
        let half = parse(&format!("{base}smtp_username = \"u\""));
        assert!(half.channels_with(no_env).unwrap_err()[0].contains("needs smtp_password_env"));
        let clear = parse(&format!(
            "{base}smtp_username = \"u\"\nsmtp_password_env = \"PW\"\nsmtp_tls = \"none\""
        ));
        let p = clear.channels_with(|_| Some("secret".into())).unwrap_err();
        assert!(p[0].contains("in clear"), "{p:?}");
        // The password never shows in a debug print.
        let ok = parse(&format!(
            "{base}smtp_username = \"u\"\nsmtp_password_env = \"PW\""
        ))
        .channels_with(|_| Some("secret".into()))
        .unwrap();
        assert!(!format!("{ok:?}").contains("secret"));
    }

    #[test]
    fn too_short_an_interval_and_a_bad_host_or_port_are_named() {
        let c = parse(
            r#"
            smtp_host = "smtp example"
            smtp_port = 0
            mail_from = "a@example.com"
            mail_to = ["b@example.com"]
            min_interval_ms = 10
            "#,
        );
        let p = c.channels_with(no_env).unwrap_err();
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].starts_with("callbacks.alerts.min_interval_ms must be at least 1000"));
        assert!(p[1].starts_with("callbacks.alerts.smtp_host \"smtp example\""));
        assert_eq!(p[2], "callbacks.alerts.smtp_port must be greater than 0");
    }
}
