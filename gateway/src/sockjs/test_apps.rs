//! The SockJS protocol test suite's apps over WebSocket: `/echo` echoes
//! every message, `/close` closes every session with `c[3000,"Go away!"]`.
//! Mounted only with `sockjs.test_endpoints`; the routes run them instead of
//! the STOMP session: [`run_websocket`] on the WebSocket transports, [`Echo`]
//! and [`Close`] as the [`Application`] of the HTTP transports' sessions.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use herald_protocol::sockjs;
use herald_protocol::websocket::{self, Message, OpCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::App;
use super::application::Application;
use super::session::Pending;
use crate::app::Shared;
use crate::session::websocket::{Framing, Upgraded};

/// `/echo` over the HTTP transports: every message back.
#[derive(Debug)]
pub struct Echo;

impl Application for Echo {
    fn on_message(&mut self, message: &str, _now: Instant, out: &mut Pending) {
        out.push_text(message);
    }
}

/// `/close` over the HTTP transports: closed with `c[3000,"Go away!"]` as
/// soon as it opens.
#[derive(Debug)]
pub struct Close;

impl Application for Close {
    fn on_message(&mut self, _message: &str, _now: Instant, _out: &mut Pending) {}

    fn opened(&mut self) -> Option<(u16, &'static str)> {
        Some(sockjs::close::GO_AWAY)
    }
}

/// Run an echo or close app on an upgraded socket.
pub async fn run_websocket(shared: Arc<Shared>, up: Upgraded, app: App) {
    let Upgraded {
        mut stream,
        leftover,
        framing,
        ..
    } = up;
    let mut input = BytesMut::from(&leftover[..]);
    let mut decoder = websocket::Decoder::new(shared.config.session.max_frame_bytes);
    let mut out = BytesMut::new();
    let mut done = false;
    if framing == Framing::Sockjs {
        websocket::encode_frame(OpCode::Text, sockjs::OPEN, &mut out);
    }
    if app == App::Close {
        if framing == Framing::Sockjs {
            let mut c = BytesMut::new();
            let (code, reason) = sockjs::close::GO_AWAY;
            sockjs::encode_close(code, reason, &mut c);
            websocket::encode_frame(OpCode::Text, &c, &mut out);
        }
        websocket::encode_close(3000, "Go away!", &mut out);
        done = true;
    }
    loop {
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            break;
        }
        out.clear();
        if done {
            break;
        }
        loop {
            match decoder.decode(&mut input) {
                Ok(None) => break,
                Ok(Some(Message::Text(t))) => {
                    echo(framing, t.as_bytes(), true, &mut out, &mut done)
                }
                Ok(Some(Message::Binary(b))) => echo(framing, &b, false, &mut out, &mut done),
                Ok(Some(Message::Ping(p))) => websocket::encode_frame(OpCode::Pong, &p, &mut out),
                Ok(Some(Message::Pong(_))) => {}
                Ok(Some(Message::Close(_))) => {
                    websocket::encode_close(1000, "", &mut out);
                    done = true;
                }
                Err(e) => {
                    websocket::encode_close(e.close_code(), "", &mut out);
                    done = true;
                }
            }
            if done {
                break;
            }
        }
        if !out.is_empty() {
            continue;
        }
        let read = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            r = stream.read_buf(&mut input) => r,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    linger(&mut stream).await;
}

/// How long a closing test app waits for the peer to close after its own
/// close frame (the STOMP session's `CLOSE_GRACE`).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Send FIN, then read and discard until the peer closes (or
/// [`CLOSE_GRACE`] passes): closing a socket with unread input resets the
/// connection, which can destroy the close frame before the client reads
/// it (the STOMP session's `linger` does the same).
async fn linger(stream: &mut TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = Instant::now() + CLOSE_GRACE;
    let mut sink = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

fn echo(framing: Framing, data: &[u8], text: bool, out: &mut BytesMut, done: &mut bool) {
    match framing {
        Framing::Raw => {
            let op = if text { OpCode::Text } else { OpCode::Binary };
            websocket::encode_frame(op, data, out);
        }
        Framing::Sockjs => {
            if data.is_empty() {
                return;
            }
            match sockjs::decode_messages(data, true) {
                // `[]` carries no message: nothing to echo.
                Ok(messages) if messages.is_empty() => {}
                Ok(messages) => {
                    let refs: Vec<&str> = messages.iter().map(String::as_str).collect();
                    let mut frame = BytesMut::new();
                    sockjs::encode_array(&refs, &mut frame);
                    websocket::encode_frame(OpCode::Text, &frame, out);
                }
                Err(_) => {
                    websocket::encode_close(1002, "", out);
                    *done = true;
                }
            }
        }
    }
}
