//! `[callbacks.alerts]` parsed and checked: every problem named.

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
        p[1].starts_with("callbacks.alerts.mail_to[1]: \"ops at example\" is not a mail address"),
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
