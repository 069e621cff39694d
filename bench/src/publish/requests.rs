//! The requests of `herald-bench publish` (pure: bytes of request `k`), and one keep-alive
//! connection sending a range of them with up to `depth` in flight (HTTP/1.1 pipelining),
//! reading the answers with the bench's own parser ([`crate::client::http`]).

use std::net::SocketAddr;
use std::ops::Range;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::args::Body;
use crate::client::http::{self, BodyLength};

/// The event every bench notification carries.
pub(crate) const EVENT: &str = "bench.publish";
/// Largest answer body read (a `202` for 1,000 notifications is about 40 KB).
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What the requests are made of.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) addr: SocketAddr,
    pub(crate) api_key: String,
    pub(crate) body: Body,
    pub(crate) batch: usize,
    pub(crate) payload: usize,
    pub(crate) users: usize,
}

impl Shape {
    /// The user of notification `n`.
    fn user(&self, n: u64) -> String {
        format!("nobody-{}", n % self.users as u64)
    }

    /// Every distinct request, built once: request `k` is `cycle[k % cycle.len()]`, as its
    /// users repeat every `users / gcd(users, batch)` requests. The bench shares the cores with
    /// the gateway it measures, so it does not build each request anew.
    pub(crate) fn cycle(&self) -> Vec<Vec<u8>> {
        let (mut a, mut b) = (self.users, self.batch);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        (0..(self.users / a) as u64)
            .map(|k| self.request(k))
            .collect()
    }

    /// The whole of request `k` (notifications `k * batch ..`), head and body.
    pub(crate) fn request(&self, k: u64) -> Vec<u8> {
        let first = k * self.batch as u64;
        let (target, content_type, body) = match self.body {
            Body::Raw => (
                format!("/v1/notifications?users={}&event={EVENT}", self.user(first)),
                "text/plain",
                vec![b'x'; self.payload],
            ),
            Body::Json => {
                let text = "x".repeat(self.payload.saturating_sub(2));
                let one = |n: u64| serde_json::json!({"users": [self.user(n)], "event": EVENT, "payload": text});
                let value = if self.batch == 1 {
                    one(first)
                } else {
                    serde_json::Value::Array((first..first + self.batch as u64).map(one).collect())
                };
                (
                    "/v1/notifications".to_owned(),
                    "application/json",
                    value.to_string().into_bytes(),
                )
            }
        };
        let mut out = format!(
            "POST {target} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            self.api_key,
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }
}

/// What one connection's requests came to.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    /// Requests answered `202 Accepted`.
    pub(crate) accepted: u64,
    /// Requests answered otherwise.
    pub(crate) refused: u64,
    /// The first refusal: status and body.
    pub(crate) first_refusal: Option<String>,
}

impl Tally {
    pub(crate) fn add(&mut self, other: Tally) {
        self.accepted += other.accepted;
        self.refused += other.refused;
        if self.first_refusal.is_none() {
            self.first_refusal = other.first_refusal;
        }
    }
}

/// The complete answers at the start of `buffer`: (status, bytes) of each, in order; stops at
/// the first incomplete one. An answer the connection cannot carry on after is an error.
pub(crate) fn complete_answers(buffer: &[u8]) -> Result<Vec<(u16, Range<usize>)>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = http::parse_head(&buffer[at..]).map_err(|e| e.to_string())? {
        let body_len = match head.body {
            BodyLength::None => 0,
            BodyLength::Fixed(n) => usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_BODY_BYTES)
                .ok_or_else(|| format!("an answer body of {n} bytes"))?,
            other => {
                return Err(format!(
                    "an answer delimited by {other:?}, not Content-Length"
                ));
            }
        };
        if !head.keep_alive {
            return Err(format!(
                "status {}: the server closes the connection",
                head.status
            ));
        }
        let end = at + head.len + body_len;
        if buffer.len() < end {
            break;
        }
        out.push((head.status, at + head.len..end));
        at = end;
    }
    Ok(out)
}

/// Sends requests `range` (request `k` is `cycle[k % cycle.len()]`, [`Shape::cycle`]) on a new
/// connection to `addr`, up to `depth` in flight, and reads every answer.
pub(crate) async fn send(
    addr: SocketAddr,
    cycle: &[Vec<u8>],
    range: Range<u64>,
    depth: usize,
) -> Result<Tally, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut tally = Tally::default();
    let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut next = range.start;
    let mut in_flight = 0usize;
    let mut out = Vec::new();
    while next < range.end || in_flight > 0 {
        out.clear();
        while in_flight < depth && next < range.end {
            out.extend_from_slice(&cycle[(next % cycle.len() as u64) as usize]);
            next += 1;
            in_flight += 1;
        }
        if !out.is_empty() {
            stream.write_all(&out).await.map_err(|e| e.to_string())?;
        }
        loop {
            let answers = complete_answers(&buffer)?;
            if let Some((_, last)) = answers.last() {
                let used = last.end;
                for (status, body) in answers {
                    in_flight -= 1;
                    if status == 202 {
                        tally.accepted += 1;
                    } else {
                        tally.refused += 1;
                        tally.first_refusal.get_or_insert_with(|| {
                            format!("{status} {}", String::from_utf8_lossy(&buffer[body]))
                        });
                    }
                }
                buffer.drain(..used);
                break;
            }
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!(
                    "the server closed the connection with {in_flight} requests unanswered"
                ));
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(body: Body, batch: usize) -> Shape {
        Shape {
            addr: "127.0.0.1:8080".parse().unwrap(),
            api_key: "k".into(),
            body,
            batch,
            payload: 5,
            users: 3,
        }
    }

    #[test]
    fn a_raw_request_is_one_notification_in_the_query() {
        let r = String::from_utf8(shape(Body::Raw, 1).request(4)).unwrap();
        assert!(
            r.starts_with("POST /v1/notifications?users=nobody-1&event=bench.publish HTTP/1.1\r\n"),
            "{r}"
        );
        assert!(
            r.contains("Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nxxxxx"),
            "{r}"
        );
        assert!(r.ends_with("\r\n\r\nxxxxx"), "{r}");
    }

    #[test]
    fn a_json_batch_is_an_array_of_its_notifications() {
        let r = String::from_utf8(shape(Body::Json, 2).request(1)).unwrap();
        let body = &r[r.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        let users: Vec<_> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["users"][0].clone())
            .collect();
        assert_eq!(users, ["nobody-2", "nobody-0"]);
        assert_eq!(
            v[0]["payload"], "xxx",
            "a JSON string of 5 bytes with its quotes"
        );
        let single = String::from_utf8(shape(Body::Json, 1).request(0)).unwrap();
        assert!(single.ends_with('}'), "one object, not an array: {single}");
    }

    #[test]
    fn the_cycle_holds_every_distinct_request_once() {
        for (users, batch, len) in [(6, 4, 3), (3, 1, 3), (1000, 100, 10), (7, 7, 1)] {
            let mut shape = shape(Body::Json, batch);
            shape.users = users;
            let cycle = shape.cycle();
            assert_eq!(cycle.len(), len, "users {users}, batch {batch}");
            for k in 0..3 * len as u64 {
                assert_eq!(
                    cycle[(k % len as u64) as usize],
                    shape.request(k),
                    "request {k}"
                );
            }
        }
    }

    #[test]
    fn answers_are_split_and_an_incomplete_one_waits() {
        let one = b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n{}";
        let two = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 3\r\n\r\nabc";
        let mut buffer = one.to_vec();
        buffer.extend_from_slice(two);
        let got = complete_answers(&buffer).unwrap();
        assert_eq!(got.iter().map(|a| a.0).collect::<Vec<_>>(), [202, 429]);
        assert_eq!(&buffer[got[1].1.clone()], b"abc");
        assert!(complete_answers(&buffer[..buffer.len() - 1]).unwrap().len() == 1);
        assert!(
            complete_answers(b"HTTP/1.1 202 Accepted\r\n")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_answer_that_closes_the_connection_is_an_error() {
        let closing = b"HTTP/1.1 202 Accepted\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert!(complete_answers(closing).is_err());
    }
}
