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
/// are log lines and metrics only. Each field is the key of its name under
/// `[callbacks.alerts]`, described once in its row of
/// [`crate::config::table::SECTIONS`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// Key `callbacks.alerts.webhook_url`.
    pub webhook_url: Option<String>,
    /// Key `callbacks.alerts.smtp_host`.
    pub smtp_host: Option<String>,
    /// Key `callbacks.alerts.smtp_port`.
    pub smtp_port: u16,
    /// Key `callbacks.alerts.smtp_tls`.
    pub smtp_tls: SmtpTls,
    /// Key `callbacks.alerts.smtp_username`.
    pub smtp_username: Option<String>,
    /// Key `callbacks.alerts.smtp_password_env`.
    pub smtp_password_env: Option<String>,
    /// Key `callbacks.alerts.mail_from`.
    pub mail_from: Option<String>,
    /// Key `callbacks.alerts.mail_to`.
    pub mail_to: Vec<String>,
    /// Key `callbacks.alerts.min_interval_ms`.
    pub min_interval_ms: u64,
    /// Key `callbacks.alerts.store_unavailable_after_ms`.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
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
mod tests;
