//! A publication's own callback settings: `callback_url`, `recheck_url`
//! and `browsers` (HTTP fields; AMQP headers `callback-url`, `recheck-url`,
//! `browsers`), checked at acceptance as a topic's URLs are at
//! registration ([`destination::parse_url`]). Pure: the caller says
//! whether the notification's topic calls back and which address classes
//! the deployment lets callbacks reach.
//!
//! The rules, each refusal naming its field:
//! - `callback_url`, `recheck_url`: `http`/`https`, at most
//!   [`MAX_URL_BYTES`](destination::MAX_URL_BYTES), a host; an IP literal
//!   or `localhost` of a refused class is refused
//!   (`[callbacks] allow_private_networks` opens the private ones);
//! - `recheck_url` guards a call: without a callback of its own or of its
//!   topic it is refused;
//! - `browsers: false` (callback only) without any callback would leave
//!   nothing to do: refused.
//!
//! A notification that calls back (its own URL, or its topic's) goes
//! through the delayed store even when it is immediate, so that the call is
//! durable and retried: [`Checked::calls_back`].

use herald_protocol::envelope::FieldError;

use super::destination::{self, Class};

/// A notification's own callback settings: the publication's
/// `callback_url`, `recheck_url` and `browsers` (AMQP headers
/// `callback-url`, `recheck-url`, `browsers`). Unset URLs fall back to
/// its topic's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Where to `POST` it when due, over its topic's `callback_url`.
    pub callback_url: Option<String>,
    /// What to ask first, over its topic's `recheck_url`.
    pub recheck_url: Option<String>,
    /// Whether it goes to its browser recipients (`false`: callback only).
    pub browsers: bool,
}

impl Default for Target {
    fn default() -> Self {
        Target {
            callback_url: None,
            recheck_url: None,
            browsers: true,
        }
    }
}

/// The field of the callback's URL.
pub const CALLBACK_URL: &str = "callback_url";
/// The field of the recheck's URL.
pub const RECHECK_URL: &str = "recheck_url";
/// The field saying whether the browser recipients get it.
pub const BROWSERS: &str = "browsers";

/// A publication's callback settings as given, not checked yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetRequest {
    /// `callback_url`, as given.
    pub callback_url: Option<String>,
    /// `recheck_url`, as given.
    pub recheck_url: Option<String>,
    /// `browsers` (unset: `true`).
    pub browsers: Option<bool>,
}

/// A checked target, and whether the notification calls back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// What the entry stores: the URLs normalized (as the `url` crate
    /// writes them), `browsers` resolved.
    pub target: Target,
    /// It has a callback (its own, or its topic's): it goes through the
    /// delayed store, immediate or not.
    pub calls_back: bool,
}

/// Check `request` for a notification whose topic has a `callback_url`
/// (`topic_calls_back`) or not; `allowed` lists the address classes this
/// deployment lets callbacks reach. The error names the field
/// ([`CALLBACK_URL`], [`RECHECK_URL`], [`BROWSERS`]).
pub fn check(
    request: TargetRequest,
    topic_calls_back: bool,
    allowed: &[Class],
) -> Result<Checked, FieldError> {
    let callback_url = url(CALLBACK_URL, request.callback_url, allowed)?;
    let recheck_url = url(RECHECK_URL, request.recheck_url, allowed)?;
    let calls_back = callback_url.is_some() || topic_calls_back;
    if recheck_url.is_some() && !calls_back {
        return Err(FieldError::new(
            RECHECK_URL,
            "a recheck guards a callback: set callback_url as well, or publish under a topic that has one",
        ));
    }
    let browsers = request.browsers.unwrap_or(true);
    if !browsers && !calls_back {
        return Err(FieldError::new(
            BROWSERS,
            "false sends to no browser, and there is no callback to make instead: set callback_url, or publish under a topic that has one",
        ));
    }
    Ok(Checked {
        target: Target {
            callback_url,
            recheck_url,
            browsers,
        },
        calls_back,
    })
}

fn url(
    field: &'static str,
    text: Option<String>,
    allowed: &[Class],
) -> Result<Option<String>, FieldError> {
    let Some(text) = text else {
        return Ok(None);
    };
    destination::parse_url(field, &text, allowed)
        .map(|u| Some(String::from(u)))
        .map_err(|e| FieldError::new(field, super::topic::message_of(&e.to_string(), field)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(callback: Option<&str>, recheck: Option<&str>, browsers: Option<bool>) -> TargetRequest {
        TargetRequest {
            callback_url: callback.map(str::to_owned),
            recheck_url: recheck.map(str::to_owned),
            browsers,
        }
    }

    fn field_of(r: Result<Checked, FieldError>) -> (&'static str, String) {
        let e = r.unwrap_err();
        (e.field, e.message)
    }

    #[test]
    fn nothing_asked_is_the_default_target() {
        let c = check(TargetRequest::default(), false, &[]).unwrap();
        assert_eq!(c.target, Target::default());
        assert!(!c.calls_back);
        let c = check(TargetRequest::default(), true, &[]).unwrap();
        assert!(c.calls_back, "the topic's callback");
        assert_eq!(c.target, Target::default(), "the topic's URL is not copied");
    }

    #[test]
    fn own_urls_are_kept_normalized() {
        let c = check(
            req(
                Some("HTTPS://Push.Example.com/send?x=1"),
                Some("http://billing.example.com:8080/check"),
                Some(false),
            ),
            false,
            &[],
        )
        .unwrap();
        assert!(c.calls_back);
        assert_eq!(
            c.target,
            Target {
                callback_url: Some("https://push.example.com/send?x=1".into()),
                recheck_url: Some("http://billing.example.com:8080/check".into()),
                browsers: false,
            }
        );
    }

    #[test]
    fn bad_urls_are_refused_naming_the_field() {
        let long = format!("https://example.com/{}", "a".repeat(2048));
        for (bad, words) in [
            ("ftp://example.com/x", "scheme \"ftp\""),
            ("not a url", "not a URL"),
            ("", "not a URL"),
            (long.as_str(), "the limit is 2048"),
            ("http://10.1.2.3/cb", "private"),
            ("http://127.0.0.1:9/cb", "loopback"),
            ("http://localhost/cb", "loopback"),
            ("http://169.254.169.254/latest", "metadata"),
            ("http://[::ffff:192.168.1.1]/cb", "private"),
        ] {
            let (field, message) = field_of(check(req(Some(bad), None, None), false, &[]));
            assert_eq!(field, CALLBACK_URL, "{bad}");
            assert!(message.contains(words), "{bad}: {message}");
            assert!(
                !message.starts_with("callback_url:"),
                "the field is not repeated: {message}"
            );
            let (field, _) = field_of(check(
                req(Some("https://ok.example/"), Some(bad), None),
                false,
                &[],
            ));
            assert_eq!(field, RECHECK_URL, "{bad}");
        }
    }

    #[test]
    fn private_destinations_follow_the_deployment() {
        let open = [
            Class::Loopback,
            Class::Private,
            Class::LinkLocal,
            Class::Shared,
        ];
        let c = check(req(Some("http://127.0.0.1:9/cb"), None, None), false, &open).unwrap();
        assert_eq!(
            c.target.callback_url.as_deref(),
            Some("http://127.0.0.1:9/cb")
        );
        let (field, message) = field_of(check(
            req(Some("http://169.254.169.254/"), None, None),
            false,
            &open,
        ));
        assert_eq!(field, CALLBACK_URL);
        assert!(message.contains("metadata"), "{message}");
    }

    #[test]
    fn a_recheck_needs_a_callback_of_its_own_or_of_its_topic() {
        let (field, message) = field_of(check(
            req(None, Some("https://billing.example.com/check"), None),
            false,
            &[],
        ));
        assert_eq!(field, RECHECK_URL);
        assert!(message.contains("guards a callback"), "{message}");
        let c = check(
            req(None, Some("https://billing.example.com/check"), None),
            true,
            &[],
        )
        .unwrap();
        assert!(c.calls_back);
        assert_eq!(
            c.target.recheck_url.as_deref(),
            Some("https://billing.example.com/check")
        );
    }

    #[test]
    fn callback_only_needs_a_callback() {
        let (field, _) = field_of(check(req(None, None, Some(false)), false, &[]));
        assert_eq!(field, BROWSERS);
        let c = check(req(None, None, Some(false)), true, &[]).unwrap();
        assert!(!c.target.browsers && c.calls_back);
        let c = check(req(None, None, Some(true)), false, &[]).unwrap();
        assert!(c.target.browsers && !c.calls_back);
    }
}
