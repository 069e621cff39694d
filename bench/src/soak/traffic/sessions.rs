//! The soak's sessions: the steady users' (checked by the ledger, opened again if the server
//! ends one) and the churn (opened, held 2 to 20 s, closed politely or dropped).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use rand::Rng as _;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::{CHURN_HOLD_MS, CHURN_POOL, RETRY_PAUSE, Shared};
use crate::client::session::Failure;
use crate::client::session::websocket::{self, Framing, Ws};
use crate::client::stomp_client::{self, Decoded};

async fn open(shared: &Shared, user: &str, company: &str) -> Result<Ws, String> {
    let token = shared.token(user, company)?;
    let target = shared.target(user);
    websocket::open(&target, &token, Framing::Stomp)
        .await
        .map_err(|f: Failure| f.reason())
}

/// How a session's reading ended.
enum Ended {
    /// The bench asked it to stop.
    Told,
    /// The server (or the network) ended it.
    Server(String),
}

/// Reads `ws` until `until` fires, handing every bench message id to `on_message`.
async fn read(
    ws: &mut Ws,
    until: impl Future<Output = ()>,
    mut on_message: impl FnMut(&str),
) -> Ended {
    let mut buffer: Vec<u8> = Vec::new();
    tokio::pin!(until);
    loop {
        let msg = tokio::select! {
            biased;
            () = &mut until => return Ended::Told,
            m = ws.next() => m,
        };
        match msg {
            Some(Ok(Message::Text(t))) => buffer.extend_from_slice(t.as_bytes()),
            Some(Ok(Message::Binary(b))) => buffer.extend_from_slice(&b),
            Some(Ok(Message::Close(c))) => {
                return Ended::Server(format!("closed by the server: {c:?}"));
            }
            None => return Ended::Server("the connection ended".into()),
            Some(Err(e)) => return Ended::Server(format!("WebSocket: {e}")),
            Some(Ok(_)) => continue,
        }
        loop {
            match stomp_client::decode(&buffer) {
                Ok(Some((decoded, used))) => {
                    let frame = match decoded {
                        Decoded::Frame(frame) => Some(frame),
                        _ => None,
                    };
                    buffer.drain(..used);
                    let Some(frame) = frame else { continue };
                    match frame.command.as_str() {
                        "MESSAGE" => {
                            if let Some(id) = frame.header("message-id")
                                && id.starts_with("soak-")
                            {
                                on_message(id);
                            }
                        }
                        "ERROR" => {
                            let why = frame.header("message").unwrap_or("").to_owned();
                            return Ended::Server(format!("STOMP ERROR {why}"));
                        }
                        _ => {}
                    }
                }
                Ok(None) => break,
                Err(e) => return Ended::Server(format!("STOMP: {e}")),
            }
        }
        if buffer.is_empty() && buffer.capacity() > 64 * 1024 {
            buffer = Vec::new();
        }
    }
}

async fn close_politely(mut ws: Ws) {
    let _ = tokio::time::timeout(websocket::CLOSE_GRACE, async {
        let disconnect = stomp_client::encode_text("DISCONNECT", &[], "");
        let _ = ws.send(Message::text(disconnect)).await;
        if ws.close(None).await.is_ok() {
            while let Some(Ok(_)) = ws.next().await {}
        }
    })
    .await;
}

pub(super) async fn steady(shared: Arc<Shared>, user: usize, close: CancellationToken) {
    let uid = format!("soak-s-{user}");
    let company = shared.company(user);
    while !close.is_cancelled() {
        let mut ws = tokio::select! {
            () = close.cancelled() => return,
            r = open(&shared, &uid, &company) => match r {
                Ok(ws) => ws,
                Err(why) => {
                    shared.counters.open_failures.fetch_add(1, Ordering::Relaxed);
                    shared.note(format!("{uid}: could not open a session: {why}"));
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let sid = shared.next_sid.fetch_add(1, Ordering::Relaxed);
        shared.ledger().session_up(sid);
        shared.steady_sid[user].store(sid, Ordering::Relaxed);
        shared.steady_since[user]
            .store(shared.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        shared
            .counters
            .steady_opened
            .fetch_add(1, Ordering::Relaxed);
        let ended = read(&mut ws, close.cancelled(), |id| {
            shared.ledger().received(sid, id)
        })
        .await;
        shared.steady_sid[user].store(0, Ordering::Relaxed);
        shared.steady_since[user].store(u64::MAX, Ordering::Relaxed);
        match ended {
            Ended::Told => {
                close_politely(ws).await;
                return;
            }
            Ended::Server(why) => {
                shared.ledger().session_down(sid);
                shared
                    .counters
                    .steady_dropped
                    .fetch_add(1, Ordering::Relaxed);
                shared.note(format!(
                    "{uid}: its session ended at {:.0} s: {why}",
                    shared.now()
                ));
            }
        }
    }
}

pub(super) async fn churn(shared: Arc<Shared>, slot: usize, close: CancellationToken) {
    while !close.is_cancelled() {
        let (n, hold_ms, polite) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..CHURN_POOL),
                rng.random_range(CHURN_HOLD_MS),
                rng.random_bool(0.5),
            )
        };
        let uid = format!("soak-c-{n}");
        let company = shared.company(n);
        let mut ws = tokio::select! {
            () = close.cancelled() => return,
            r = open(&shared, &uid, &company) => match r {
                Ok(ws) => ws,
                Err(why) => {
                    shared.counters.open_failures.fetch_add(1, Ordering::Relaxed);
                    shared.note(format!("churn slot {slot} ({uid}): could not open a session: {why}"));
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        shared.counters.churn_opened.fetch_add(1, Ordering::Relaxed);
        let hold = tokio::time::sleep(Duration::from_millis(hold_ms));
        let until = async {
            tokio::select! {
                () = hold => {}
                () = close.cancelled() => {}
            }
        };
        let ended = read(&mut ws, until, |_| {
            shared
                .counters
                .churn_messages
                .fetch_add(1, Ordering::Relaxed);
        })
        .await;
        match ended {
            Ended::Told if polite || close.is_cancelled() => {
                close_politely(ws).await;
                shared
                    .counters
                    .churn_closed_politely
                    .fetch_add(1, Ordering::Relaxed);
            }
            Ended::Told => {
                drop(ws);
                shared
                    .counters
                    .churn_dropped_socket
                    .fetch_add(1, Ordering::Relaxed);
            }
            Ended::Server(why) => {
                shared
                    .counters
                    .churn_ended_by_server
                    .fetch_add(1, Ordering::Relaxed);
                shared.note(format!("churn {uid}: the server ended its session: {why}"));
            }
        }
    }
}
