//! The alert webhook: a Slack-compatible incoming webhook, POSTed JSON
//! `{"text": "..."}`. A plain client (the operator chose the address, so
//! private ones are fine), TLS by rustls, [`SEND_TIMEOUT`] per message.

use super::SEND_TIMEOUT;

/// The webhook channel.
#[derive(Debug)]
pub(crate) struct Webhook {
    client: reqwest::Client,
    url: url::Url,
}

impl Webhook {
    /// A channel to `url`.
    pub(crate) fn new(url: url::Url) -> Result<Webhook, String> {
        let client = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the webhook's HTTP client: {e}"))?;
        Ok(Webhook { client, url })
    }

    /// POST `text`; any 2xx is success.
    pub(crate) async fn send(&self, text: &str) -> Result<(), String> {
        let body = serde_json::json!({ "text": text }).to_string();
        let answer = self
            .client
            .post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{}", e.without_url()))?;
        let status = answer.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("answered {status}"))
        }
    }
}
