//! One AMQP 0-9-1 connection with one channel, driven by the task that
//! owns it: no I/O thread, no channel between threads. Enough of the
//! protocol for a consumer that also publishes now and then: the
//! handshake (PLAIN), declarations, `basic.qos`, `basic.consume`,
//! deliveries, `basic.ack`, `basic.publish`, heartbeats and closing.
//!
//! Every read buffers at most one frame of the negotiated `frame_max` (and
//! what one read brings beyond it); every write is flushed before the call
//! returns, so the outgoing buffer holds at most one message. Reading and
//! flushing are cancel-safe: a [`Wire::next`] dropped by a `select!` loses
//! nothing, and the next call carries on where it stopped.

use std::time::Duration;

use amq_protocol::protocol::basic::{self, AMQPMethod as Basic};
use amq_protocol::protocol::channel::{self, AMQPMethod as Chan};
use amq_protocol::protocol::connection::{self, AMQPMethod as Conn};
use amq_protocol::protocol::{AMQPClass, BasicProperties};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use amq_protocol::uri::{AMQPScheme, AMQPUri, SASLMechanism};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use super::delivery::{Assembled, Assembler, OutOfOrder};
use super::frame::{self, Frame, FrameError, PROTOCOL_HEADER};

/// The largest frame this client proposes (RabbitMQ's default).
pub const FRAME_MAX: u32 = 131_072;
/// The heartbeat interval asked for when the URL names none (seconds;
/// RabbitMQ's default).
pub const HEARTBEAT_SECS: u16 = 60;
/// The one channel this client opens.
const CHANNEL: u16 = 1;
/// Bytes asked of the socket per read, at least.
const READ_CHUNK: usize = 16 * 1024;

/// How to reach the broker.
#[derive(Debug, Clone)]
pub struct WireConfig {
    /// `amqp://user:pass@host:port/vhost?heartbeat=…&frame_max=…`.
    pub url: String,
    /// Shown by the broker (`connection_name`).
    pub connection_name: String,
    /// Deliveries with a larger body are read, dropped and reported as
    /// [`Assembled::TooLarge`].
    pub max_body: u64,
}

/// Why the connection cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The URL cannot be read, or asks for what this client does not do.
    #[error("broker URL: {0}")]
    Url(String),
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The broker sent bytes that are not a frame.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The broker sent a delivery's frames out of order.
    #[error("{0}")]
    OutOfOrder(#[from] OutOfOrder),
    /// The broker closed the connection.
    #[error("the broker closed the connection: {code} {text}")]
    ConnectionClosed {
        /// The reply code (AMQP 0-9-1: 320 connection-forced, 403 access-refused, …).
        code: u16,
        /// The broker's reason.
        text: String,
    },
    /// The broker closed the channel (a declaration it refused, …).
    #[error("the broker closed the channel: {code} {text}")]
    ChannelClosed {
        /// The reply code (404 not-found, 406 precondition-failed, …).
        code: u16,
        /// The broker's reason.
        text: String,
    },
    /// The broker cancelled the consumer (its queue was deleted).
    #[error("the broker cancelled the consumer")]
    ConsumerCancelled,
    /// The broker was silent for two heartbeat intervals.
    #[error("nothing from the broker for {0:?} (two heartbeat intervals)")]
    MissedHeartbeats(Duration),
    /// A write made no progress for two heartbeat intervals (a broker
    /// gone without a word, or blocking the connection that long).
    #[error("the broker took nothing written for {0:?} (two heartbeat intervals)")]
    WriteStalled(Duration),
    /// The broker closed the socket.
    #[error("the broker closed the socket")]
    Eof,
    /// A method this client does not expect where it came.
    #[error("unexpected {0} from the broker")]
    Unexpected(String),
    /// The broker does not offer what this client needs, or did not answer.
    #[error("{0}")]
    Refused(String),
}

/// The connection and its channel.
#[derive(Debug)]
pub struct Wire {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    inbuf: BytesMut,
    out: Vec<u8>,
    frame_max: u32,
    heartbeat: Option<Duration>,
    last_read: Instant,
    last_write: Instant,
    /// The last read left room in the buffer: the socket was empty then,
    /// so [`Wire::try_next`] does not ask it again (a read that would
    /// block is a system call for nothing); the next wait polls it.
    drained: bool,
    assembler: Assembler,
}

/// Negotiate one tuning value: the lesser of the two, unless either is 0
/// (no limit / no heartbeat), then the other.
fn negotiate<T: Ord + Default + Copy>(ours: T, theirs: T) -> T {
    if ours == T::default() || theirs == T::default() {
        ours.max(theirs)
    } else {
        ours.min(theirs)
    }
}

impl Wire {
    /// Connect, shake hands and open the channel.
    pub async fn open(config: &WireConfig) -> Result<Wire, WireError> {
        let uri: AMQPUri = config.url.parse().map_err(WireError::Url)?;
        if uri.scheme != AMQPScheme::AMQP {
            return Err(WireError::Url(format!(
                "scheme {} is not plain amqp",
                uri.scheme
            )));
        }
        let mechanism = uri.query.auth_mechanism.unwrap_or_default();
        if mechanism != SASLMechanism::Plain {
            return Err(WireError::Url(format!(
                "auth_mechanism {} is not PLAIN",
                mechanism.name()
            )));
        }
        let stream = TcpStream::connect((uri.authority.host.as_str(), uri.authority.port)).await?;
        stream.set_nodelay(true)?;
        let (reader, writer) = stream.into_split();
        let now = Instant::now();
        let mut wire = Wire {
            reader,
            writer,
            inbuf: BytesMut::with_capacity(READ_CHUNK),
            out: Vec::with_capacity(1024),
            frame_max: FRAME_MAX,
            heartbeat: None,
            last_read: now,
            last_write: now,
            drained: false,
            assembler: Assembler::new(config.max_body),
        };
        wire.handshake(&uri, &config.connection_name).await?;
        Ok(wire)
    }

    async fn handshake(&mut self, uri: &AMQPUri, name: &str) -> Result<(), WireError> {
        self.out.extend_from_slice(PROTOCOL_HEADER);
        self.flush().await?;
        let start = match self.method().await? {
            AMQPClass::Connection(Conn::Start(start)) => start,
            other => return Err(unexpected(&other)),
        };
        let mechanisms = String::from_utf8_lossy(start.mechanisms.as_bytes()).into_owned();
        if !mechanisms.split(' ').any(|m| m == "PLAIN") {
            return Err(WireError::Refused(format!(
                "the broker offers {mechanisms}, not PLAIN"
            )));
        }
        let user = &uri.authority.userinfo;
        let mut response = Vec::with_capacity(user.username.len() + user.password.len() + 2);
        response.push(0);
        response.extend_from_slice(user.username.as_bytes());
        response.push(0);
        response.extend_from_slice(user.password.as_bytes());
        self.send(
            0,
            AMQPClass::Connection(Conn::StartOk(connection::StartOk {
                client_properties: client_properties(name),
                mechanism: ShortString::from("PLAIN"),
                response: LongString::from(response),
                locale: ShortString::from("en_US"),
            })),
        );
        self.flush().await?;
        let tune = match self.method().await? {
            AMQPClass::Connection(Conn::Tune(tune)) => tune,
            other => return Err(unexpected(&other)),
        };
        let frame_max = negotiate(uri.query.frame_max.unwrap_or(FRAME_MAX), tune.frame_max);
        // A frame must hold at least the spec's minimum (4096 bytes).
        self.frame_max = if frame_max == 0 {
            FRAME_MAX
        } else {
            frame_max.max(4096)
        };
        let heartbeat = negotiate(
            uri.query.heartbeat.unwrap_or(HEARTBEAT_SECS),
            tune.heartbeat,
        );
        self.heartbeat = (heartbeat > 0).then(|| Duration::from_secs(u64::from(heartbeat)));
        self.send(
            0,
            AMQPClass::Connection(Conn::TuneOk(connection::TuneOk {
                channel_max: negotiate(1, tune.channel_max),
                frame_max: self.frame_max,
                heartbeat,
            })),
        );
        self.send(
            0,
            AMQPClass::Connection(Conn::Open(connection::Open {
                virtual_host: ShortString::from(uri.vhost.clone()),
            })),
        );
        self.flush().await?;
        match self.method().await? {
            AMQPClass::Connection(Conn::OpenOk(_)) => {}
            other => return Err(unexpected(&other)),
        }
        self.call(AMQPClass::Channel(Chan::Open(channel::Open {})), |r| {
            matches!(r, AMQPClass::Channel(Chan::OpenOk(_)))
        })
        .await
    }

    /// The negotiated largest frame.
    pub fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// The negotiated heartbeat interval (`None`: off).
    pub fn heartbeat(&self) -> Option<Duration> {
        self.heartbeat
    }

    /// The next delivery, waiting for it (and keeping heartbeats going).
    /// Cancel-safe.
    pub async fn next(&mut self) -> Result<Assembled, WireError> {
        loop {
            let frame = self.frame().await.map_err(|e| self.refuse(e))?;
            if let Some(done) = self.handle(frame).map_err(|e| self.refuse(e))? {
                return Ok(done);
            }
        }
    }

    /// A delivery already read, or readable without waiting; `None` if
    /// the socket has none yet.
    pub fn try_next(&mut self) -> Result<Option<Assembled>, WireError> {
        self.try_next_inner().map_err(|e| self.refuse(e))
    }

    fn try_next_inner(&mut self) -> Result<Option<Assembled>, WireError> {
        loop {
            while let Some(frame) = frame::decode(&mut self.inbuf, self.frame_max)? {
                if let Some(done) = self.handle(frame)? {
                    return Ok(Some(done));
                }
            }
            if self.drained {
                return Ok(None);
            }
            self.inbuf.reserve(READ_CHUNK);
            let room = self.inbuf.capacity() - self.inbuf.len();
            let r = self.reader.try_read_buf(&mut self.inbuf);
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.drained = true;
                    return Ok(None);
                }
                r => self.read_done(r, room)?,
            }
        }
    }

    /// Acknowledge `delivery_tag` (and, if `multiple`, every one before it).
    pub async fn ack(&mut self, delivery_tag: u64, multiple: bool) -> Result<(), WireError> {
        self.send(
            CHANNEL,
            AMQPClass::Basic(Basic::Ack(basic::Ack {
                delivery_tag,
                multiple,
            })),
        );
        self.flush().await
    }

    /// Publish `body` to `exchange` with `routing_key` (unconfirmed).
    pub async fn publish(
        &mut self,
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
        body: &[u8],
    ) -> Result<(), WireError> {
        let encoded = frame::encode_properties(properties);
        self.publish_encoded(exchange, routing_key, &encoded, body)
            .await
    }

    /// [`Wire::publish`] with the properties already encoded (property
    /// flags, then the properties), sent as they are: what a publisher
    /// whose properties this client's codec would not write sends.
    pub async fn publish_encoded(
        &mut self,
        exchange: &str,
        routing_key: &str,
        properties: &[u8],
        body: &[u8],
    ) -> Result<(), WireError> {
        self.send(
            CHANNEL,
            AMQPClass::Basic(Basic::Publish(basic::Publish {
                exchange: ShortString::from(exchange),
                routing_key: ShortString::from(routing_key),
                mandatory: false,
                immediate: false,
            })),
        );
        frame::put_encoded_content(&mut self.out, CHANNEL, properties, body, self.frame_max);
        self.flush().await
    }

    /// Close the connection (`200 OK`) and wait for the broker's answer,
    /// at most `timeout`. Unacknowledged deliveries go back to the queue.
    pub async fn close(mut self, timeout: Duration) -> Result<(), WireError> {
        self.send(
            0,
            AMQPClass::Connection(Conn::Close(connection::Close {
                reply_code: 200,
                reply_text: ShortString::from("OK"),
                class_id: 0,
                method_id: 0,
            })),
        );
        let closed = async {
            self.flush().await?;
            loop {
                match self.frame().await? {
                    Frame::Method(0, AMQPClass::Connection(Conn::CloseOk(_))) => return Ok(()),
                    Frame::Method(0, AMQPClass::Connection(Conn::Close(c))) => {
                        return Err(WireError::ConnectionClosed {
                            code: c.reply_code,
                            text: c.reply_text.to_string(),
                        });
                    }
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(timeout, closed).await {
            Ok(r) => r,
            Err(_) => Err(WireError::Refused(format!(
                "no close-ok from the broker within {timeout:?}"
            ))),
        }
    }

    /// Send a synchronous method on the channel and read its answer,
    /// which must be one `answered` accepts.
    pub(super) async fn call(
        &mut self,
        method: AMQPClass,
        answered: fn(&AMQPClass) -> bool,
    ) -> Result<(), WireError> {
        self.send(CHANNEL, method);
        self.flush().await?;
        let reply = self.method().await?;
        if answered(&reply) {
            Ok(())
        } else {
            Err(unexpected(&reply))
        }
    }

    /// The next method frame (the handshake's and a call's answers);
    /// `channel.close` and `connection.close` are errors.
    async fn method(&mut self) -> Result<AMQPClass, WireError> {
        loop {
            match self.frame().await? {
                Frame::Heartbeat => {}
                Frame::Method(_, AMQPClass::Connection(Conn::Blocked(b))) => {
                    tracing::warn!(reason = %b.reason, "the broker blocked the connection; publishing waits");
                }
                Frame::Method(_, AMQPClass::Connection(Conn::Unblocked(_))) => {
                    tracing::info!("the broker unblocked the connection");
                }
                Frame::Method(channel, method) => {
                    self.closing(channel, &method)?;
                    return Ok(method);
                }
                other => return Err(WireError::Unexpected(format!("{other:?}"))),
            }
        }
    }

    /// Answer a broker's `close` with `close-ok` and turn it into an error.
    fn closing(&mut self, channel: u16, method: &AMQPClass) -> Result<(), WireError> {
        match method {
            AMQPClass::Connection(Conn::Close(c)) if channel == 0 => {
                self.send(
                    0,
                    AMQPClass::Connection(Conn::CloseOk(connection::CloseOk {})),
                );
                self.push_now();
                Err(WireError::ConnectionClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_string(),
                })
            }
            AMQPClass::Channel(Chan::Close(c)) => {
                self.send(
                    channel,
                    AMQPClass::Channel(Chan::CloseOk(channel::CloseOk {})),
                );
                self.push_now();
                Err(WireError::ChannelClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    /// One frame while consuming: the delivery it completes, if any.
    fn handle(&mut self, frame: Frame) -> Result<Option<Assembled>, WireError> {
        match frame {
            Frame::Heartbeat => Ok(None),
            Frame::Body(CHANNEL, piece) => Ok(self.assembler.body(&piece)?),
            Frame::Header(CHANNEL, size, properties) => {
                Ok(self.assembler.header(size, properties)?)
            }
            Frame::Method(channel, method) => {
                self.closing(channel, &method)?;
                match method {
                    AMQPClass::Basic(Basic::Deliver(d)) if channel == CHANNEL => {
                        self.assembler.deliver(d.delivery_tag, d.redelivered)?;
                        Ok(None)
                    }
                    AMQPClass::Basic(Basic::Cancel(_)) => Err(WireError::ConsumerCancelled),
                    AMQPClass::Channel(Chan::Flow(f)) => {
                        self.send(
                            channel,
                            AMQPClass::Channel(Chan::FlowOk(channel::FlowOk { active: f.active })),
                        );
                        self.push_now();
                        Ok(None)
                    }
                    AMQPClass::Connection(Conn::Blocked(b)) => {
                        tracing::warn!(reason = %b.reason, "the broker blocked the connection; publishing waits");
                        Ok(None)
                    }
                    AMQPClass::Connection(Conn::Unblocked(_)) => {
                        tracing::info!("the broker unblocked the connection");
                        Ok(None)
                    }
                    other => Err(unexpected(&other)),
                }
            }
            other => Err(WireError::Unexpected(format!("{other:?}"))),
        }
    }

    /// The next frame, reading as needed; sends heartbeats when due and
    /// fails when the broker has been silent for two intervals.
    async fn frame(&mut self) -> Result<Frame, WireError> {
        loop {
            if let Some(frame) = frame::decode(&mut self.inbuf, self.frame_max)? {
                return Ok(frame);
            }
            self.inbuf.reserve(READ_CHUNK);
            let room = self.inbuf.capacity() - self.inbuf.len();
            let Some(interval) = self.heartbeat else {
                let r = self.reader.read_buf(&mut self.inbuf).await;
                self.read_done(r, room)?;
                continue;
            };
            let send_at = self.last_write + interval / 2;
            let dead_at = self.last_read + interval * 2;
            enum Woke {
                Read(std::io::Result<usize>),
                Beat,
                Dead,
            }
            // Read first: bytes already there are not "missed heartbeats"
            // (the task may have been busy elsewhere for a while).
            let woke = tokio::select! {
                biased;
                r = self.reader.read_buf(&mut self.inbuf) => Woke::Read(r),
                _ = tokio::time::sleep_until(send_at) => Woke::Beat,
                _ = tokio::time::sleep_until(dead_at) => Woke::Dead,
            };
            match woke {
                Woke::Read(r) => self.read_done(r, room)?,
                Woke::Beat => {
                    // One queued is enough (a cancelled flush may have
                    // left one unsent).
                    if self.out.is_empty() {
                        frame::put_heartbeat(&mut self.out);
                    }
                    self.flush().await?;
                }
                Woke::Dead => return Err(WireError::MissedHeartbeats(interval * 2)),
            }
        }
    }

    /// A read into `room` bytes of buffer ended with `r`.
    fn read_done(&mut self, r: std::io::Result<usize>, room: usize) -> Result<(), WireError> {
        match r? {
            0 => Err(WireError::Eof),
            n => {
                self.last_read = Instant::now();
                self.drained = n < room;
                Ok(())
            }
        }
    }

    fn send(&mut self, channel: u16, method: AMQPClass) {
        frame::put_method(&mut self.out, channel, &method);
    }

    /// Write what is queued; cancel-safe (what was written is taken off
    /// the queue as it goes).
    async fn flush(&mut self) -> Result<(), WireError> {
        while !self.out.is_empty() {
            let n = match self.heartbeat {
                None => self.writer.write(&self.out).await?,
                Some(interval) => {
                    match tokio::time::timeout(interval * 2, self.writer.write(&self.out)).await {
                        Ok(n) => n?,
                        Err(_) => return Err(WireError::WriteStalled(interval * 2)),
                    }
                }
            };
            if n == 0 {
                return Err(WireError::Io(std::io::ErrorKind::WriteZero.into()));
            }
            self.out.drain(..n);
            self.last_write = Instant::now();
        }
        Ok(())
    }

    /// Tell the broker why this end gives up, if the error is its
    /// protocol's (`connection.close` with the AMQP reply code, written if
    /// the socket takes it now), and hand the error on.
    fn refuse(&mut self, e: WireError) -> WireError {
        let code = match &e {
            WireError::Frame(f) => f.reply_code(),
            WireError::OutOfOrder(_) => 505,
            WireError::Unexpected(_) => 503,
            _ => return e,
        };
        let mut text = e.to_string();
        // A short string holds 255 bytes.
        while text.len() > 255 {
            text.pop();
        }
        self.send(
            0,
            AMQPClass::Connection(Conn::Close(connection::Close {
                reply_code: code,
                reply_text: ShortString::from(text),
                class_id: 0,
                method_id: 0,
            })),
        );
        self.push_now();
        e
    }

    /// Write what the socket takes now; the rest goes with the next flush.
    fn push_now(&mut self) {
        if let Ok(n) = self.writer.try_write(&self.out) {
            self.out.drain(..n);
        }
        // What the socket did not take goes with the next flush; when the
        // connection is ending, it does not matter.
    }
}

fn unexpected(method: &AMQPClass) -> WireError {
    WireError::Unexpected(format!("{method:?}"))
}

/// What the client tells the broker about itself; RabbitMQ shows
/// `connection_name`, and `capabilities` ask for consumer-cancel and
/// blocked notifications.
fn client_properties(name: &str) -> FieldTable {
    let mut capabilities = FieldTable::default();
    for capability in [
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
    ] {
        capabilities.insert(ShortString::from(capability), AMQPValue::Boolean(true));
    }
    let mut properties = FieldTable::default();
    for (key, value) in [
        ("product", "herald"),
        ("version", env!("CARGO_PKG_VERSION")),
        ("platform", "Rust"),
        ("connection_name", name),
    ] {
        properties.insert(
            ShortString::from(key),
            AMQPValue::LongString(LongString::from(value)),
        );
    }
    properties.insert(
        ShortString::from("capabilities"),
        AMQPValue::FieldTable(capabilities),
    );
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_takes_the_lesser_unless_one_side_has_no_limit() {
        assert_eq!(negotiate(60u16, 30), 30);
        assert_eq!(negotiate(10u16, 60), 10);
        assert_eq!(negotiate(0u16, 60), 60);
        assert_eq!(negotiate(131_072u32, 0), 131_072);
        assert_eq!(negotiate(0u32, 0), 0);
    }

    #[test]
    fn the_client_names_its_connection() {
        let p = client_properties("herald-edge herald.edge.e1");
        let name = p.inner().get(&ShortString::from("connection_name"));
        assert_eq!(
            name,
            Some(&AMQPValue::LongString(LongString::from(
                "herald-edge herald.edge.e1"
            )))
        );
    }
}
