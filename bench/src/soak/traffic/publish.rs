//! The soak's publications (immediate, delayed, callbacks, over HTTP through HAProxy and over
//! AMQP to the roots) and presence queries, each at its own fixed rate.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use rand::Rng as _;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::{CALLBACK_DELAY_MS, CHURN_POOL, DELAY_MS, PRESENCE_SETTLED, Shared};
use crate::client::api::ApiConnection;
use crate::harness::amqp::{self, Outgoing, Publisher};
use crate::soak::ledger::Kind;

/// A publication's recipients.
enum Scope {
    Users(Vec<String>),
    Client(String),
    Global,
}

fn http_body(id: &str, scope: &Scope, event: &str, delay_ms: Option<u64>) -> String {
    let mut body = serde_json::json!({
        "id": id,
        "event": event,
        "payload": {"id": id, "pad": "soak"},
    });
    match scope {
        Scope::Users(users) => body["users"] = serde_json::json!(users),
        Scope::Client(c) => {
            body["scope"] = "client".into();
            body["clients"] = serde_json::json!([c]);
        }
        Scope::Global => body["scope"] = "global".into(),
    }
    if let Some(d) = delay_ms {
        body["delay_ms"] = d.into();
    }
    body.to_string()
}

fn amqp_properties(id: &str, scope: &Scope, event: &str, delay_ms: Option<u64>) -> BasicProperties {
    let mut h = FieldTable::default();
    let list = |xs: &[String]| {
        AMQPValue::FieldArray(FieldArray::from(
            xs.iter()
                .map(|x| AMQPValue::LongString(LongString::from(x.as_str())))
                .collect::<Vec<_>>(),
        ))
    };
    h.insert(
        "event".into(),
        AMQPValue::LongString(LongString::from(event)),
    );
    match scope {
        Scope::Users(users) => {
            h.insert("users".into(), list(users));
        }
        Scope::Client(c) => {
            h.insert(
                "scope".into(),
                AMQPValue::LongString(LongString::from("client")),
            );
            h.insert("clients".into(), list(std::slice::from_ref(c)));
        }
        Scope::Global => {
            h.insert(
                "scope".into(),
                AMQPValue::LongString(LongString::from("global")),
            );
        }
    }
    if let Some(d) = delay_ms {
        h.insert("delay-ms".into(), AMQPValue::LongLongInt(d as i64));
    }
    BasicProperties::default()
        .with_message_id(ShortString::from(id))
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(h)
}

/// Publishes over HTTP through HAProxy; whether it was accepted (202).
async fn publish_http(shared: &Shared, api: &mut ApiConnection, body: &str) -> bool {
    match api.post_json("/v1/notifications", body.as_bytes()).await {
        Ok(r) if r.status == 202 => {
            shared
                .counters
                .http_published
                .fetch_add(1, Ordering::Relaxed);
            true
        }
        Ok(r) => {
            shared.counters.http_refused.fetch_add(1, Ordering::Relaxed);
            shared.note(format!(
                "POST /v1/notifications: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ));
            false
        }
        Err(e) => {
            shared.counters.http_refused.fetch_add(1, Ordering::Relaxed);
            shared.note(format!("POST /v1/notifications: {e}"));
            false
        }
    }
}

/// Publishes to a root and waits for its confirm; whether it was acked.
async fn publish_amqp(
    shared: &Shared,
    publisher: &Publisher,
    properties: BasicProperties,
    id: &str,
) -> bool {
    let body = format!("{{\"id\":\"{id}\",\"pad\":\"soak\"}}").into_bytes();
    let batch = vec![Outgoing {
        routing_key: "soak".into(),
        properties,
        body,
    }];
    let confirmed = match publisher.publish_batch(batch).await {
        Ok(confirms) => amqp::settle(confirms).await,
        Err(e) => {
            shared.counters.amqp_refused.fetch_add(1, Ordering::Relaxed);
            shared.note(format!("AMQP publish {id}: {e}"));
            return false;
        }
    };
    if confirmed.acked == 1 {
        shared
            .counters
            .amqp_published
            .fetch_add(1, Ordering::Relaxed);
        true
    } else {
        shared.counters.amqp_refused.fetch_add(1, Ordering::Relaxed);
        shared.note(format!("AMQP publish {id}: not confirmed ({confirmed:?})"));
        false
    }
}

fn interval(rate: f64) -> tokio::time::Interval {
    let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
    t
}

pub(super) type Publishers = Arc<Vec<(lapin::Connection, Publisher)>>;

pub(super) async fn immediate(
    shared: Arc<Shared>,
    publishers: Publishers,
    stop: CancellationToken,
) {
    if shared.plan.rate <= 0.0 {
        return;
    }
    let mut api = ApiConnection::new(shared.proxy, &shared.api_key);
    let mut tick = interval(shared.plan.rate);
    let steady = shared.plan.steady;
    let companies = shared.plan.companies;
    for n in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let over_http = n % 2 == 0;
        // Of every 20: 12 per-user, 5 client-scoped, 3 global.
        let (scope, recipients, kind) = {
            let mut rng = rand::rng();
            match n % 20 {
                0..12 => {
                    let k = rng.random_range(1..=3usize.min(steady));
                    let picked: Vec<usize> =
                        rand::seq::index::sample(&mut rng, steady, k).into_vec();
                    let mut users: Vec<String> =
                        picked.iter().map(|u| format!("soak-s-{u}")).collect();
                    if rng.random_bool(0.5) {
                        users.push(format!("soak-c-{}", rng.random_range(0..CHURN_POOL)));
                    }
                    let kind = if over_http {
                        Kind::UserHttp
                    } else {
                        Kind::UserAmqp
                    };
                    (
                        Scope::Users(users),
                        shared.sessions_of(picked.into_iter()),
                        kind,
                    )
                }
                12..17 => {
                    let c = rng.random_range(0..companies);
                    let kind = if over_http {
                        Kind::ClientHttp
                    } else {
                        Kind::ClientAmqp
                    };
                    let members = (0..steady).filter(|u| u % companies == c);
                    (
                        Scope::Client(shared.company(c)),
                        shared.sessions_of(members),
                        kind,
                    )
                }
                _ => {
                    let kind = if over_http {
                        Kind::GlobalHttp
                    } else {
                        Kind::GlobalAmqp
                    };
                    (Scope::Global, shared.sessions_of(0..steady), kind)
                }
            }
        };
        let id = shared.id("n");
        shared.ledger().expect(&id, kind, shared.now(), &recipients);
        let ok = if over_http {
            publish_http(&shared, &mut api, &http_body(&id, &scope, "soak.now", None)).await
        } else {
            let (_, publisher) = &publishers[(n / 2) as usize % publishers.len()];
            publish_amqp(
                &shared,
                publisher,
                amqp_properties(&id, &scope, "soak.now", None),
                &id,
            )
            .await
        };
        if !ok {
            shared.ledger().withdraw(&id);
        }
    }
}

pub(super) async fn delayed(shared: Arc<Shared>, publishers: Publishers, stop: CancellationToken) {
    if shared.plan.delayed_rate <= 0.0 {
        return;
    }
    let mut api = ApiConnection::new(shared.proxy, &shared.api_key);
    let mut tick = interval(shared.plan.delayed_rate);
    for n in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (user, delay) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..shared.plan.steady),
                rng.random_range(DELAY_MS),
            )
        };
        let over_http = n % 2 == 0;
        let scope = Scope::Users(vec![format!("soak-s-{user}")]);
        let id = shared.id("d");
        let kind = if over_http {
            Kind::DelayedHttp
        } else {
            Kind::DelayedAmqp
        };
        let recipients = shared.sessions_of(std::iter::once(user));
        shared
            .ledger()
            .expect(&id, kind, shared.now() + delay as f64 / 1000.0, &recipients);
        let ok = if over_http {
            publish_http(
                &shared,
                &mut api,
                &http_body(&id, &scope, "soak.later", Some(delay)),
            )
            .await
        } else {
            let (_, publisher) = &publishers[(n / 2) as usize % publishers.len()];
            publish_amqp(
                &shared,
                publisher,
                amqp_properties(&id, &scope, "soak.later", Some(delay)),
                &id,
            )
            .await
        };
        if !ok {
            shared.ledger().withdraw(&id);
        }
    }
}

pub(super) async fn callbacks(shared: Arc<Shared>, stop: CancellationToken) {
    if shared.plan.callback_rate <= 0.0 {
        return;
    }
    let mut api = ApiConnection::new(shared.proxy, &shared.api_key);
    let mut tick = interval(shared.plan.callback_rate);
    for seq in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let delay = rand::rng().random_range(CALLBACK_DELAY_MS);
        // The receiver reads the sequence number from the start of the payload.
        let body = format!(
            "{{\"id\":\"soak-cb-{seq}\",\"users\":[\"soak-cb-user-{}\"],\"event\":\"soak.callback\",\
             \"browsers\":false,\"callback_url\":\"{}\",\"delay_ms\":{delay},\
             \"payload\":{{\"seq\":{seq},\"pad\":\"soak\"}}}}",
            seq % 50,
            shared.callback_url
        );
        if publish_http(&shared, &mut api, &body).await {
            shared
                .counters
                .callbacks_published
                .fetch_add(1, Ordering::Relaxed);
            shared
                .callbacks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(seq);
        }
    }
}

pub(super) async fn presence(shared: Arc<Shared>, stop: CancellationToken) {
    if shared.plan.presence_rate <= 0.0 {
        return;
    }
    let mut api = ApiConnection::new(shared.proxy, &shared.api_key);
    let mut tick = interval(shared.plan.presence_rate);
    for n in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if n % 4 == 3 {
            let c = rand::rng().random_range(0..shared.plan.companies);
            let path = format!("/v1/presence/clients/{}", shared.company(c));
            shared
                .counters
                .presence_queries
                .fetch_add(1, Ordering::Relaxed);
            match api.get(&path).await {
                Ok(r) if r.status == 200 => {}
                Ok(r) => {
                    shared
                        .counters
                        .presence_wrong
                        .fetch_add(1, Ordering::Relaxed);
                    shared.note(format!("GET {path}: {}", r.status));
                }
                Err(e) => {
                    shared
                        .counters
                        .presence_wrong
                        .fetch_add(1, Ordering::Relaxed);
                    shared.note(format!("GET {path}: {e}"));
                }
            }
            continue;
        }
        let user = rand::rng().random_range(0..shared.plan.steady);
        let since = shared.steady_since[user].load(Ordering::Relaxed);
        let now_ms = shared.start.elapsed().as_millis() as u64;
        let settled = since != u64::MAX
            && now_ms.saturating_sub(since) >= PRESENCE_SETTLED.as_millis() as u64;
        let path = format!("/v1/presence/users/soak-s-{user}");
        shared
            .counters
            .presence_queries
            .fetch_add(1, Ordering::Relaxed);
        let answer = api.get(&path).await;
        // Still settled after the answer: the session did not end meanwhile.
        let still = shared.steady_since[user].load(Ordering::Relaxed) == since;
        match answer {
            Ok(r) if r.status == 200 => {
                let online = serde_json::from_slice::<serde_json::Value>(&r.body)
                    .ok()
                    .and_then(|v| v["online"].as_bool());
                if settled && still && online != Some(true) {
                    shared
                        .counters
                        .presence_wrong
                        .fetch_add(1, Ordering::Relaxed);
                    shared.note(format!(
                        "GET {path}: online {online:?} for a session live {} s",
                        (now_ms - since) / 1000
                    ));
                }
            }
            Ok(r) => {
                shared
                    .counters
                    .presence_wrong
                    .fetch_add(1, Ordering::Relaxed);
                shared.note(format!("GET {path}: {}", r.status));
            }
            Err(e) => {
                shared
                    .counters
                    .presence_wrong
                    .fetch_add(1, Ordering::Relaxed);
                shared.note(format!("GET {path}: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_bodies_name_their_scope() {
        let users = http_body("soak-n-1", &Scope::Users(vec!["a".into()]), "e", None);
        let v: serde_json::Value = serde_json::from_str(&users).expect("json");
        assert_eq!(v["users"][0], "a");
        assert_eq!(v["id"], "soak-n-1");
        assert!(v.get("scope").is_none());
        let client = http_body("x", &Scope::Client("co".into()), "e", Some(5));
        let v: serde_json::Value = serde_json::from_str(&client).expect("json");
        assert_eq!(v["scope"], "client");
        assert_eq!(v["clients"][0], "co");
        assert_eq!(v["delay_ms"], 5);
        let global = http_body("x", &Scope::Global, "e", None);
        let v: serde_json::Value = serde_json::from_str(&global).expect("json");
        assert_eq!(v["scope"], "global");
    }

    #[test]
    fn amqp_headers_follow_the_contract() {
        let p = amqp_properties(
            "soak-n-2",
            &Scope::Client("co".into()),
            "soak.now",
            Some(1500),
        );
        assert_eq!(
            p.message_id().as_ref().map(|s| s.as_str()),
            Some("soak-n-2")
        );
        let h = format!("{:?}", p.headers().as_ref().expect("headers"));
        for part in [
            "\"scope\"",
            "client",
            "\"clients\"",
            "co",
            "\"delay-ms\"",
            "LongLongInt(1500)",
        ] {
            assert!(h.contains(part), "{part} in {h}");
        }
    }
}
