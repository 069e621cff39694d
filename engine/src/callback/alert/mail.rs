//! Alert mail over SMTP (lettre on tokio; TLS by rustls with the system's
//! roots): `starttls` (required, not opportunistic), implicit `tls`, or
//! `none` for a local relay. [`SEND_TIMEOUT`] per SMTP command,
//! [`MAIL_TIMEOUT`] for the whole mail.

use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::SEND_TIMEOUT;
use super::config::{MailSettings, SmtpTls};

/// Longest one mail may take, connection, TLS and login included.
pub(crate) const MAIL_TIMEOUT: Duration = Duration::from_secs(30);

/// The mail channel.
pub(crate) struct Mail {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Vec<Mailbox>,
}

impl std::fmt::Debug for Mail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mail")
            .field("from", &self.from)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

impl Mail {
    /// A channel through the server of `settings`.
    pub(crate) fn new(settings: MailSettings) -> Result<Mail, String> {
        let builder = match settings.tls {
            SmtpTls::Starttls => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&settings.host)
            }
            SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&settings.host),
            SmtpTls::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
                &settings.host,
            )),
        }
        .map_err(|e| format!("cannot set up TLS to {}: {e}", settings.host))?;
        let mut builder = builder.port(settings.port).timeout(Some(SEND_TIMEOUT));
        if let Some((user, password)) = settings.login {
            builder = builder.credentials(Credentials::new(user, password));
        }
        Ok(Mail {
            transport: builder.build(),
            from: settings.from,
            to: settings.to,
        })
    }

    /// Send one plain-text mail to every recipient.
    pub(crate) async fn send(&self, subject: &str, text: &str) -> Result<(), String> {
        let mut message = Message::builder()
            .from(self.from.clone())
            .subject(subject)
            .header(ContentType::TEXT_PLAIN);
        for to in &self.to {
            message = message.to(to.clone());
        }
        let message = message
            .body(text.to_owned())
            .map_err(|e| format!("cannot build the mail: {e}"))?;
        match tokio::time::timeout(MAIL_TIMEOUT, self.transport.send(message)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("timed out after {} s", MAIL_TIMEOUT.as_secs())),
        }
    }
}
