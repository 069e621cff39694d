//! The requests of `herald-bench retained` (pure), and publishing them one per request over
//! a few keep-alive connections.

use std::net::SocketAddr;

use super::args::PublishPath;
use crate::client::api::ApiConnection;
use crate::harness::delayed_ids;

/// The event every bench notification carries.
pub(crate) const EVENT: &str = "bench.retained";

/// One `POST`: its path (with the query string), content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) path: String,
    pub(crate) content_type: &'static str,
    pub(crate) body: Vec<u8>,
}

/// The request for notification `seq` to `user`, whose payload is `payload` bytes as delivered.
/// Its id is the bench's id for `seq` ([`delayed_ids`]), which the recording sessions count.
pub(crate) fn request(path: PublishPath, user: &str, seq: u64, payload: usize) -> Request {
    let id = delayed_ids::message_id(seq);
    match path {
        PublishPath::Raw => Request {
            path: format!("/v1/notifications?users={user}&event={EVENT}&id={id}"),
            content_type: "text/plain",
            body: vec![b'x'; payload],
        },
        PublishPath::Json => {
            let text = "x".repeat(payload.saturating_sub(2));
            let body =
                serde_json::json!({"id": id, "users": [user], "event": EVENT, "payload": text});
            Request {
                path: "/v1/notifications".into(),
                content_type: "application/json",
                body: body.to_string().into_bytes(),
            }
        }
    }
}

/// The user of notification `seq` when each round gives every user one, in order.
pub(crate) fn user_of(users: &[String], seq: u64) -> &str {
    &users[(seq % users.len() as u64) as usize]
}

/// What publishing a range of notifications came to.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Published {
    pub(crate) accepted: u64,
    pub(crate) refused: u64,
}

/// Where and how to publish.
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    pub(crate) addr: SocketAddr,
    pub(crate) api_key: String,
    pub(crate) path: PublishPath,
    /// Bytes of each payload as delivered.
    pub(crate) payload: usize,
    /// Keep-alive connections, one request in flight each.
    pub(crate) connections: usize,
}

/// Publishes notifications `first..first + count` (notification `seq` to
/// [`user_of`]`(users, seq)`), one per request, over `p.connections` keep-alive connections
/// (connection `i` takes every `connections`-th one, in order). A request that fails or is not
/// answered `202` counts as refused, and the first such answer is returned for the report.
pub(crate) async fn publish(
    p: &Publisher,
    users: &[String],
    first: u64,
    count: u64,
) -> (Published, Option<String>) {
    let (path, payload, connections) = (p.path, p.payload, p.connections);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..connections as u64 {
        let mut conn = ApiConnection::new(p.addr, &p.api_key);
        let mine: Vec<Request> = (first + i..first + count)
            .step_by(connections)
            .map(|seq| request(path, user_of(users, seq), seq, payload))
            .collect();
        tasks.spawn(async move {
            let mut out = Published::default();
            let mut problem = None;
            for r in mine {
                match conn.post(&r.path, r.content_type, &r.body).await {
                    Ok(resp) if resp.status == 202 => out.accepted += 1,
                    Ok(resp) => {
                        out.refused += 1;
                        problem.get_or_insert_with(|| {
                            format!(
                                "HTTP {}: {}",
                                resp.status,
                                String::from_utf8_lossy(&resp.body)
                            )
                        });
                    }
                    Err(e) => {
                        out.refused += 1;
                        problem.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (out, problem)
        });
    }
    let mut total = Published::default();
    let mut first_problem = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((p, problem)) => {
                total.accepted += p.accepted;
                total.refused += p.refused;
                if first_problem.is_none() {
                    first_problem = problem;
                }
            }
            Err(e) => {
                first_problem.get_or_insert_with(|| format!("a publishing task failed: {e}"));
            }
        }
    }
    (total, first_problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_requests_carry_the_envelope_in_the_query() {
        let r = request(PublishPath::Raw, "bench-0-7", 3, 100);
        assert_eq!(
            r.path,
            format!(
                "/v1/notifications?users=bench-0-7&event=bench.retained&id={}",
                delayed_ids::message_id(3)
            )
        );
        assert_eq!(r.content_type, "text/plain");
        assert_eq!(r.body.len(), 100);
    }

    #[test]
    fn json_payloads_are_strings_of_the_payload_size_as_delivered() {
        let r = request(PublishPath::Json, "bench-1-2", 9, 100);
        assert_eq!(r.path, "/v1/notifications");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["users"][0], "bench-1-2");
        assert_eq!(v["id"], delayed_ids::message_id(9));
        // The payload Herald delivers is the JSON text of the string, quotes included.
        assert_eq!(v["payload"].to_string().len(), 100);
    }

    #[test]
    fn rounds_give_every_user_one_in_turn() {
        let users: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let seen: Vec<&str> = (0..6).map(|s| user_of(&users, s)).collect();
        assert_eq!(seen, ["a", "b", "c", "a", "b", "c"]);
    }
}
