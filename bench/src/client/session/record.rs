//! Record mode (`worker --record`): an open STOMP-over-WebSocket session that parses what it
//! receives and stamps every `MESSAGE` of the delayed benchmark with the wall clock.
//!
//! The stamp is `SystemTime` (the clock Herald fixes due times with, on the same machine), read
//! once per WebSocket message, before parsing, so it is the arrival time of the frames in it.
//! The message's `message-id` names the bench's sequence number ([`crate::harness::delayed_ids`]);
//! other messages are counted as foreign. Arrivals of all the sessions of a worker go into one
//! [`Recorder`] (a mutex around a vector: a push per message, at most a few hundred thousand
//! per run).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::Counters;
use super::websocket::{CLOSE_GRACE, Ws};
use crate::client::stomp_client::{self, Decoded};
use crate::harness::delayed_ids as ids;
use crate::harness::events::unix_nanos;

/// What a worker's sessions received, in record mode.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    arrivals: Mutex<Vec<(u64, u64)>>,
    /// Arrivals recorded so far.
    pub(crate) messages: AtomicU64,
    /// `MESSAGE` frames whose id is not one of the bench's.
    pub(crate) foreign: AtomicU64,
}

impl Recorder {
    fn record(&self, seq: u64, at_ns: u64) {
        self.arrivals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((seq, at_ns));
        self.messages.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything recorded so far, leaving the recorder empty.
    pub(crate) fn take(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.arrivals.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Reads a session until `cancel`, recording every bench `MESSAGE`; then closes it politely.
/// A session the server ends (close, error, STOMP `ERROR`) counts as dropped.
pub(crate) async fn hold(
    mut ws: Ws,
    cancel: CancellationToken,
    counters: Arc<Counters>,
    recorder: Arc<Recorder>,
) {
    // The handshake task's waker, see `websocket::hold`.
    let _ = ws.flush().await;
    let mut buffer: Vec<u8> = Vec::new();
    let dropped = 'session: loop {
        let msg = tokio::select! {
            biased;
            () = cancel.cancelled() => break false,
            m = ws.next() => m,
        };
        let now = unix_nanos();
        match msg {
            Some(Ok(Message::Text(t))) => buffer.extend_from_slice(t.as_bytes()),
            Some(Ok(Message::Binary(b))) => buffer.extend_from_slice(&b),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break true,
            Some(Ok(_)) => continue,
        }
        loop {
            match stomp_client::decode(&buffer) {
                Ok(Some((decoded, used))) => {
                    buffer.drain(..used);
                    counters.frames_received.fetch_add(1, Ordering::Relaxed);
                    let Decoded::Frame(frame) = decoded else {
                        continue;
                    };
                    match frame.command.as_str() {
                        "MESSAGE" => match frame.header("message-id").and_then(ids::parse) {
                            Some(seq) => recorder.record(seq, now),
                            None => {
                                recorder.foreign.fetch_add(1, Ordering::Relaxed);
                            }
                        },
                        "ERROR" => break 'session true,
                        _ => {}
                    }
                }
                Ok(None) => break,
                Err(_) => break 'session true,
            }
        }
        // A large message may have grown the buffer; idle sessions should not keep it.
        if buffer.is_empty() && buffer.capacity() > 64 * 1024 {
            buffer = Vec::new();
        }
    };
    if dropped {
        counters.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if ws.close(None).await.is_ok() {
            while let Some(Ok(_)) = ws.next().await {}
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorder_hands_over_what_it_holds() {
        let r = Recorder::default();
        r.record(3, 10);
        r.record(1, 11);
        assert_eq!(r.messages.load(Ordering::Relaxed), 2);
        assert_eq!(r.take(), [(3, 10), (1, 11)]);
        assert!(r.take().is_empty());
        assert_eq!(
            r.messages.load(Ordering::Relaxed),
            2,
            "a count, not the length"
        );
    }

    /// A stand-in gateway sends two bench messages and a foreign one in one WebSocket message
    /// after the handshake; the session records both with the same stamp.
    #[tokio::test]
    async fn records_bench_messages_from_a_stand_in() {
        use crate::client::session::Target;
        use crate::client::session::websocket::{Framing, open};
        use std::time::Duration;
        use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            #[allow(clippy::result_large_err)]
            let choose_stomp = |_: &Request, mut resp: Response| {
                resp.headers_mut()
                    .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
                Ok(resp)
            };
            let mut ws = tokio_tungstenite::accept_hdr_async(s, choose_stomp)
                .await
                .unwrap();
            let _connect = ws.next().await.unwrap().unwrap();
            ws.send(Message::text("CONNECTED\nversion:1.2\n\n\0"))
                .await
                .unwrap();
            let _subscribe = ws.next().await.unwrap().unwrap();
            ws.send(Message::text("RECEIPT\nreceipt-id:r-0\n\n\0"))
                .await
                .unwrap();
            let frames = format!(
                "MESSAGE\nmessage-id:{}\n\n{{}}\0MESSAGE\nmessage-id:other\n\n{{}}\0MESSAGE\nmessage-id:{}\n\n{{}}\0",
                ids::message_id(7),
                ids::message_id(8)
            );
            ws.send(Message::text(frames)).await.unwrap();
            // Wait for the client's close.
            while let Some(Ok(m)) = ws.next().await {
                if m.is_close() {
                    break;
                }
            }
        });
        let target = Target {
            transport: crate::client::transport::Transport::WebSocket,
            host_header: addr.to_string(),
            path: "/ws".into(),
            addr,
            source: None,
            handshake_timeout: Duration::from_secs(10),
            pipelined: false,
            xhr_sends: crate::client::session::xhr_streaming::SendPool::new(1),
        };
        let ws = open(&target, "tok", Framing::Stomp).await.unwrap();
        let before = unix_nanos();
        let recorder = Arc::new(Recorder::default());
        let counters = Arc::new(Counters::default());
        let cancel = CancellationToken::new();
        let session = tokio::spawn(hold(ws, cancel.clone(), counters.clone(), recorder.clone()));
        while recorder.messages.load(Ordering::Relaxed) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.cancel();
        session.await.unwrap();
        server.await.unwrap();
        let arrivals = recorder.take();
        assert_eq!(arrivals.iter().map(|a| a.0).collect::<Vec<_>>(), [7, 8]);
        assert_eq!(arrivals[0].1, arrivals[1].1);
        assert!(arrivals[0].1 >= before);
        assert_eq!(recorder.foreign.load(Ordering::Relaxed), 1);
        assert_eq!(counters.dropped.load(Ordering::Relaxed), 0);
    }
}
