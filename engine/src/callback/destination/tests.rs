use super::*;

fn class(ip: &str) -> Option<Class> {
    classify(ip.parse().unwrap())
}

#[test]
fn classifies_ipv4() {
    let cases = [
        ("0.0.0.0", Some(Class::Unspecified)),
        ("0.1.2.3", Some(Class::Unspecified)),
        ("127.0.0.1", Some(Class::Loopback)),
        ("127.255.255.254", Some(Class::Loopback)),
        ("10.0.0.1", Some(Class::Private)),
        ("172.16.0.1", Some(Class::Private)),
        ("172.31.255.255", Some(Class::Private)),
        ("192.168.1.1", Some(Class::Private)),
        ("169.254.169.254", Some(Class::Metadata)),
        ("169.254.0.1", Some(Class::LinkLocal)),
        ("100.64.0.1", Some(Class::Shared)),
        ("100.127.255.255", Some(Class::Shared)),
        ("224.0.0.1", Some(Class::Multicast)),
        ("239.255.255.255", Some(Class::Multicast)),
        ("255.255.255.255", Some(Class::Broadcast)),
        ("240.0.0.1", Some(Class::Reserved)),
        ("255.255.255.254", Some(Class::Reserved)),
        // Public, including the neighbours of each refused range.
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("11.0.0.1", None),
        ("172.15.255.255", None),
        ("172.32.0.0", None),
        ("192.167.1.1", None),
        ("169.253.1.1", None),
        ("100.63.255.255", None),
        ("100.128.0.0", None),
        ("223.255.255.255", None),
        ("126.255.255.255", None),
        ("128.0.0.1", None),
    ];
    for (ip, want) in cases {
        assert_eq!(class(ip), want, "{ip}");
    }
}

#[test]
fn classifies_ipv6() {
    let cases = [
        ("::", Some(Class::Unspecified)),
        ("::1", Some(Class::Loopback)),
        ("fc00::1", Some(Class::Private)),
        ("fdff:ffff::1", Some(Class::Private)),
        ("fec0::1", Some(Class::Private)),
        ("fd00:ec2::254", Some(Class::Metadata)),
        ("fd00:ec2::253", Some(Class::Private)),
        ("fe80::1", Some(Class::LinkLocal)),
        ("febf::1", Some(Class::LinkLocal)),
        ("ff02::1", Some(Class::Multicast)),
        ("2001:4860:4860::8888", None),
        ("2606:4700::1111", None),
        ("fbff::1", None),
        ("fe00::1", None),
    ];
    for (ip, want) in cases {
        assert_eq!(class(ip), want, "{ip}");
    }
}

#[test]
fn ipv6_forms_embedding_ipv4_are_classified_by_it() {
    let cases = [
        ("::ffff:127.0.0.1", Some(Class::Loopback)),
        ("::ffff:10.1.2.3", Some(Class::Private)),
        ("::ffff:169.254.169.254", Some(Class::Metadata)),
        ("::ffff:169.254.1.1", Some(Class::LinkLocal)),
        ("::ffff:100.64.0.1", Some(Class::Shared)),
        ("::ffff:0.0.0.0", Some(Class::Unspecified)),
        ("::ffff:255.255.255.255", Some(Class::Broadcast)),
        ("::ffff:224.0.0.1", Some(Class::Multicast)),
        ("::ffff:8.8.8.8", None),
        ("::127.0.0.1", Some(Class::Loopback)),
        ("::10.0.0.1", Some(Class::Private)),
        ("64:ff9b::10.0.0.1", Some(Class::Private)),
        ("64:ff9b::169.254.169.254", Some(Class::Metadata)),
        ("64:ff9b::8.8.8.8", None),
    ];
    for (ip, want) in cases {
        assert_eq!(class(ip), want, "{ip}");
    }
}

/// The IANA special-purpose registries' ranges that are not globally
/// reachable are refused; the globally reachable ones inside them and
/// their neighbours pass.
#[test]
fn special_purpose_ranges_that_are_not_global_are_refused() {
    let cases = [
        ("192.0.0.1", Some(Class::Reserved)),
        ("192.0.0.255", Some(Class::Reserved)),
        ("192.0.0.9", None),
        ("192.0.0.10", None),
        ("192.0.2.1", Some(Class::Reserved)),
        ("198.51.100.7", Some(Class::Reserved)),
        ("203.0.113.200", Some(Class::Reserved)),
        ("198.18.0.1", Some(Class::Reserved)),
        ("198.19.255.255", Some(Class::Reserved)),
        ("192.88.99.1", Some(Class::Reserved)),
        ("192.0.1.1", None),
        ("192.0.3.1", None),
        ("198.17.255.255", None),
        ("198.20.0.0", None),
        ("198.51.101.1", None),
        ("203.0.114.1", None),
        ("100::1", Some(Class::Reserved)),
        ("100::ffff:ffff:ffff:ffff", Some(Class::Reserved)),
        ("100:0:0:1::1", None),
        ("2001:db8::1", Some(Class::Reserved)),
        ("3fff::1", Some(Class::Reserved)),
        ("2001:2::1", Some(Class::Reserved)),
        ("2001:10::1", Some(Class::Reserved)),
        ("2001:4:112::1", None),
        ("2001:20::1", None),
        ("2001:1::1", None),
        ("2001:1::3", Some(Class::Reserved)),
        ("5f00::1", Some(Class::Reserved)),
        ("64:ff9b:1::1", Some(Class::Private)),
        ("64:ff9b:1:ffff::1", Some(Class::Private)),
        ("64:ff9b:2::1", None),
    ];
    for (ip, want) in cases {
        assert_eq!(class(ip), want, "{ip}");
    }
}

/// 6to4 and Teredo carry an IPv4 address: they are classified by it (for
/// Teredo, the client's, stored inverted, and its server's: refused when
/// either is).
#[test]
fn six_to_four_and_teredo_are_classified_by_the_ipv4_inside() {
    let cases = [
        ("2002:7f00:1::", Some(Class::Loopback)),
        ("2002:a00:1::1", Some(Class::Private)),
        ("2002:a9fe:a9fe::1", Some(Class::Metadata)),
        ("2002:808:808::1", None),
        // Teredo: server 65.54.227.120, client 127.0.0.1 (80ff:fffe).
        (
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            Some(Class::Loopback),
        ),
        // Server 65.54.227.120, client 10.0.0.1 (f5ff:fffe).
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", Some(Class::Private)),
        // Server 10.0.0.1, client 8.8.8.8 (f7f7:f7f7).
        ("2001:0:a00:1:8000:63bf:f7f7:f7f7", Some(Class::Private)),
        // Server 65.54.227.120, client 8.8.8.8: public.
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),
    ];
    for (ip, want) in cases {
        assert_eq!(class(ip), want, "{ip}");
    }
}

#[test]
fn check_refuses_unless_the_class_is_allowed() {
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let refused = check(ip, &[]).unwrap_err();
    assert_eq!(
        refused,
        Refused {
            ip,
            class: Class::Loopback
        }
    );
    assert_eq!(
        refused.to_string(),
        "destination 127.0.0.1 is loopback, which callbacks may not reach unless allowed"
    );
    assert_eq!(check(ip, &[Class::Loopback]), Ok(()));
    assert_eq!(check(ip, &[Class::Private]), Err(refused));
    // Allowing link-local or private does not open the metadata endpoints.
    let metadata: IpAddr = "169.254.169.254".parse().unwrap();
    assert!(check(metadata, &[Class::LinkLocal, Class::Private]).is_err());
    assert_eq!(check(metadata, &[Class::Metadata]), Ok(()));
    assert_eq!(check("8.8.8.8".parse().unwrap(), &[]), Ok(()));
}

#[test]
fn urls_must_be_http_with_a_host() {
    let ok = parse_url("callback_url", "https://hooks.example.com/herald?x=1", &[]).unwrap();
    assert_eq!(ok.host_str(), Some("hooks.example.com"));
    assert!(parse_url("callback_url", "http://example.com:8080/", &[]).is_ok());
    assert!(parse_url("callback_url", "http://8.8.8.8/", &[]).is_ok());
    assert!(parse_url("callback_url", "http://[2606:4700::1111]/", &[]).is_ok());

    let err = parse_url("callback_url", "ftp://example.com/", &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "callback_url: scheme \"ftp\" is not http or https"
    );
    assert_eq!(err.field(), "callback_url");
    for text in [
        "file:///etc/passwd",
        "gopher://x/",
        "javascript:alert(1)",
        "data:text/plain,hi",
    ] {
        assert!(
            matches!(
                parse_url("callback_url", text, &[]),
                Err(UrlError::Scheme { .. })
            ),
            "{text}"
        );
    }
    let err = parse_url("recheck_url", "not a url", &[]).unwrap_err();
    assert_eq!(err.field(), "recheck_url");
    assert_eq!(
        err.to_string(),
        "recheck_url: not a URL: relative URL without a base"
    );
    assert!(matches!(
        parse_url("callback_url", "http://", &[]),
        Err(UrlError::Invalid { .. })
    ));
}

#[test]
fn urls_have_a_length_limit() {
    let base = "https://example.com/";
    let at_limit = format!("{base}{}", "a".repeat(MAX_URL_BYTES - base.len()));
    assert!(parse_url("callback_url", &at_limit, &[]).is_ok());
    let over = format!("{at_limit}a");
    assert_eq!(
        parse_url("callback_url", &over, &[])
            .unwrap_err()
            .to_string(),
        "callback_url: 2049 bytes; the limit is 2048"
    );
}

#[test]
fn url_hosts_that_are_refused_addresses_are_refused_at_registration() {
    let cases = [
        ("http://127.0.0.1/", Class::Loopback),
        ("http://localhost:8080/", Class::Loopback),
        ("http://LOCALHOST./", Class::Loopback),
        ("http://api.localhost/", Class::Loopback),
        ("http://[::1]/", Class::Loopback),
        ("http://[::ffff:127.0.0.1]/", Class::Loopback),
        // WHATWG parsing reads these as 127.0.0.1, as the client will.
        ("http://2130706433/", Class::Loopback),
        ("http://0x7f.1/", Class::Loopback),
        ("http://10.0.0.5/hook", Class::Private),
        ("http://169.254.169.254/latest/meta-data/", Class::Metadata),
        ("http://[fd00:ec2::254]/", Class::Metadata),
        ("http://0.0.0.0/", Class::Unspecified),
        ("http://100.64.1.1/", Class::Shared),
    ];
    for (text, want) in cases {
        match parse_url("callback_url", text, &[]) {
            Err(UrlError::Refused { class, .. }) => assert_eq!(class, want, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
        assert!(parse_url("callback_url", text, &[want]).is_ok(), "{text}");
    }
    assert_eq!(
        parse_url("callback_url", "http://10.0.0.5/", &[])
            .unwrap_err()
            .to_string(),
        "callback_url: 10.0.0.5 is private, which callbacks may not reach unless allowed"
    );
    // Names are checked once resolved, not here.
    assert!(parse_url("callback_url", "http://internal.corp/", &[]).is_ok());
    assert!(parse_url("callback_url", "http://notlocalhost/", &[]).is_ok());
}
