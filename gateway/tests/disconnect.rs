//! `POST /v1/users/{uid}/disconnect` on a real standalone gateway: every
//! live session of the user (two sites) gets an ERROR that gives the
//! reason and is closed (1008), another user's session is untouched, the
//! answer counts the sessions, and the user's mailbox stays (a reconnect
//! resumes). Refusals: no key, a key without `admin`, no reason, a bad one.

mod common;

use common::{API_KEY, epoch_of, notify, start, token};
use herald_engine::api_key::{ApiKeyConfig, Operation};
use herald_protocol::stomp::Command;
use serde_json::{Value, json};

async fn disconnect(addr: std::net::SocketAddr, key: &str, uid: &str, body: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/users/{uid}/disconnect"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn every_session_of_the_user_is_told_why_and_closed() {
    let gw = start(|c| {
        c.api_key = vec![ApiKeyConfig {
            name: "publisher".into(),
            key: Some("publish-only".into()),
            ops: Some(vec![Operation::Publish]),
            ..ApiKeyConfig::default()
        }];
    })
    .await;
    let mut here = gw.session(&token("alice", None, None)).await;
    let mut there = gw.session(&token("alice", None, Some("eu"))).await;
    let mut bob = gw.session(&token("bob", None, None)).await;
    let first = notify(&gw, "alice", "before").await;
    for session in [&mut here, &mut there] {
        assert_eq!(
            session.message().await.header("message-id"),
            Some(first.as_str())
        );
    }
    let epoch = epoch_of(here.connected.as_ref().unwrap());

    // Refused: no admin, no reason, a reason with a control character.
    let (status, _) = disconnect(gw.addr, "publish-only", "alice", r#"{"reason":"x"}"#).await;
    assert_eq!(status, 403);
    let (status, _) = disconnect(gw.addr, "wrong", "alice", r#"{"reason":"x"}"#).await;
    assert_eq!(status, 401);
    let (status, body) = disconnect(gw.addr, API_KEY, "alice", "{}").await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("reason")),
        "{body}"
    );
    let (status, body) = disconnect(gw.addr, API_KEY, "alice", r#"{"reason":"a\nb"}"#).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (422, Some("reason")),
        "{body}"
    );
    let (status, body) = disconnect(gw.addr, API_KEY, "alice", "not json").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("malformed_json")),
        "{body}"
    );

    let (status, body) = disconnect(
        gw.addr,
        API_KEY,
        "alice",
        r#"{"reason":"account suspended"}"#,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body, json!({"user": "alice", "sessions": 2}));
    for session in [&mut here, &mut there] {
        let f = session.next_frame().await.expect("an ERROR");
        assert_eq!(f.command, Command::Error, "{f:?}");
        assert_eq!(
            f.header("message"),
            Some("disconnected by an operator: account suspended")
        );
        assert_eq!(session.closed().await, Some(1008));
    }

    // Bob was not touched; a user with no session is 202 with 0.
    let other = notify(&gw, "bob", "still.here").await;
    assert_eq!(
        bob.message().await.header("message-id"),
        Some(other.as_str())
    );
    let (status, body) = disconnect(gw.addr, API_KEY, "nobody", r#"{"reason":"x"}"#).await;
    assert_eq!((status, body["sessions"].as_u64()), (202, Some(0)));

    // The mailbox stays: a reconnect resumes it and gets what came after.
    let second = notify(&gw, "alice", "after").await;
    let (mut back, connected) = gw
        .connect_with(&[
            ("passcode", &token("alice", None, None)),
            ("last-seq", "1"),
            ("epoch", &epoch),
        ])
        .await;
    assert_eq!(connected.command, Command::Connected, "{connected:?}");
    assert_eq!(epoch_of(&connected), epoch, "the same mailbox");
    back.subscribe("0", &[]).await;
    assert_eq!(
        back.message().await.header("message-id"),
        Some(second.as_str())
    );
}
