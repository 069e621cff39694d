//! AMQP 0-9-1 frames: reading them from a byte buffer and writing them
//! into one. Pure: no I/O, no clock.
//!
//! A frame is a type octet, a channel (`u16`), a payload size (`u32`), the
//! payload and the end octet `0xCE`. Methods and content headers are
//! parsed with the generated codec lapin uses (`amq_protocol::protocol`, a
//! direct dependency at lapin's version); the framing around them, and
//! bodies, are read here, so a body frame is sliced from the read buffer
//! instead of copied byte by byte. Methods and content headers are
//! bounded first ([`nesting`]): the codec reads field tables by recursion.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::protocol::basic::{gen_properties, parse_properties};
use amq_protocol::protocol::{AMQPClass, gen_class, parse_class};
use bytes::{Buf, Bytes, BytesMut};

use super::nesting;

/// The protocol header a client opens with: AMQP 0-9-1.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

const METHOD: u8 = 1;
const HEADER: u8 = 2;
const BODY: u8 = 3;
const HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xCE;
/// Type, channel and size before the payload.
const HEAD: usize = 7;
/// A frame's bytes besides its payload (head and end octet).
pub const OVERHEAD: u32 = 8;
/// The content class of `basic` (the only one with content).
const BASIC_CLASS: u16 = 60;

/// One frame read.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A method on a channel.
    Method(u16, AMQPClass),
    /// A content header: the body's size and its properties.
    Header(u16, u64, Box<BasicProperties>),
    /// A piece of content, sliced from the read buffer.
    Body(u16, Bytes),
    /// A heartbeat (channel 0).
    Heartbeat,
}

/// Why bytes are not a frame. Each is a connection error: the client
/// tells the broker with `connection.close` (code
/// [`FrameError::reply_code`]) and drops the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The broker answered with a protocol header: not 0-9-1.
    #[error("the broker answered with a protocol header: it does not speak AMQP 0-9-1")]
    ProtocolMismatch,
    /// A frame larger than the negotiated `frame_max`.
    #[error("frame of {size} bytes, above the negotiated maximum of {max}")]
    TooLarge {
        /// The frame's whole size.
        size: u64,
        /// The negotiated `frame_max`.
        max: u32,
    },
    /// A frame type AMQP 0-9-1 does not have.
    #[error("frame of type {0} is not an AMQP 0-9-1 frame type")]
    UnknownType(u8),
    /// The end octet is missing.
    #[error("frame does not end with 0xCE (found {0:#04x})")]
    BadEnd(u8),
    /// A method frame the codec cannot read.
    #[error("unreadable method frame")]
    BadMethod,
    /// A content header the codec cannot read.
    #[error("unreadable content header")]
    BadHeader,
    /// A method refused before it is parsed ([`nesting::check_method`]): one
    /// no client receives, or a `connection.start` whose server properties
    /// are nested too deep.
    #[error("refused method frame: {0}")]
    Refused(nesting::Refusal),
}

impl FrameError {
    /// The `connection.close` reply code for this error (AMQP 0-9-1
    /// constants: 501 frame-error, 502 syntax-error).
    pub fn reply_code(&self) -> u16 {
        match self {
            FrameError::BadMethod | FrameError::BadHeader => 502,
            // command-invalid: a method that has no place here.
            FrameError::Refused(nesting::Refusal::Unexpected { .. }) => 503,
            FrameError::Refused(_) => 502,
            _ => 501,
        }
    }
}

/// Take the first whole frame from `buf`: `Ok(None)` until one has fully
/// arrived. A frame whose whole size exceeds `max_frame` is an error as
/// soon as its head is read, so `buf` never has to hold more than one
/// frame of at most `max_frame` bytes.
pub fn decode(buf: &mut BytesMut, max_frame: u32) -> Result<Option<Frame>, FrameError> {
    if buf.len() < HEAD {
        if buf.first() == Some(&b'A') {
            return Err(FrameError::ProtocolMismatch);
        }
        return Ok(None);
    }
    let kind = buf[0];
    if !matches!(kind, METHOD | HEADER | BODY | HEARTBEAT) {
        return Err(if kind == b'A' {
            FrameError::ProtocolMismatch
        } else {
            FrameError::UnknownType(kind)
        });
    }
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]);
    let whole = u64::from(size) + u64::from(OVERHEAD);
    if whole > u64::from(max_frame) {
        return Err(FrameError::TooLarge {
            size: whole,
            max: max_frame,
        });
    }
    let size = size as usize;
    if buf.len() < HEAD + size + 1 {
        return Ok(None);
    }
    let end = buf[HEAD + size];
    if end != FRAME_END {
        return Err(FrameError::BadEnd(end));
    }
    buf.advance(HEAD);
    let payload = buf.split_to(size);
    buf.advance(1);
    // Nothing recursive reads a field table before it is bounded (nesting).
    let bounds = nesting::Bounds::default();
    Ok(Some(match kind {
        METHOD => {
            nesting::check_method(&payload, bounds).map_err(|why| match why {
                nesting::Refusal::Malformed(_) => FrameError::BadMethod,
                other => FrameError::Refused(other),
            })?;
            match parse_class(&payload[..]) {
                Ok(([], class)) => Frame::Method(channel, class),
                _ => return Err(FrameError::BadMethod),
            }
        }
        HEADER => {
            let defused =
                nesting::defuse_header(&payload, bounds).map_err(|_| FrameError::BadHeader)?;
            let read = defused.as_deref().unwrap_or(&payload);
            let (size, properties) = parse_header(read).ok_or(FrameError::BadHeader)?;
            Frame::Header(channel, size, Box::new(properties))
        }
        BODY => Frame::Body(channel, payload.freeze()),
        _ => Frame::Heartbeat,
    }))
}

/// A content header's payload: class, weight, body size, properties.
fn parse_header(payload: &[u8]) -> Option<(u64, BasicProperties)> {
    if payload.len() < 12 {
        return None;
    }
    let class = u16::from_be_bytes([payload[0], payload[1]]);
    if class != BASIC_CLASS {
        return None;
    }
    let size = u64::from_be_bytes(payload[4..12].try_into().ok()?);
    match parse_properties(&payload[12..]) {
        Ok(([], properties)) => Some((size, properties)),
        _ => None,
    }
}

/// Append a method frame.
pub fn put_method(out: &mut Vec<u8>, channel: u16, method: &AMQPClass) {
    let start = begin(out, METHOD, channel);
    let body = std::mem::take(out);
    // Serializing into a `Vec` grows it; it cannot fail.
    *out = match gen_class(method)(body.into()) {
        Ok(ctx) => ctx.write,
        Err(e) => unreachable!("serializing into a Vec cannot fail: {e:?}"),
    };
    finish(out, start);
}

/// Append a heartbeat frame.
pub fn put_heartbeat(out: &mut Vec<u8>) {
    out.extend_from_slice(&[HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// Append a message's content: its header frame, then its body in frames
/// of at most `max_frame` bytes each.
pub fn put_content(
    out: &mut Vec<u8>,
    channel: u16,
    properties: &BasicProperties,
    body: &[u8],
    max_frame: u32,
) {
    put_encoded_content(
        out,
        channel,
        &encode_properties(properties),
        body,
        max_frame,
    );
}

/// A content header's properties as the wire has them: property flags,
/// then the properties set.
pub fn encode_properties(properties: &BasicProperties) -> Vec<u8> {
    match gen_properties(properties)(Vec::new().into()) {
        Ok(ctx) => ctx.write,
        Err(e) => unreachable!("serializing into a Vec cannot fail: {e:?}"),
    }
}

/// [`put_content`] with the properties already encoded (property flags,
/// then the properties), written as they are.
pub fn put_encoded_content(
    out: &mut Vec<u8>,
    channel: u16,
    properties: &[u8],
    body: &[u8],
    max_frame: u32,
) {
    let start = begin(out, HEADER, channel);
    out.extend_from_slice(&BASIC_CLASS.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    out.extend_from_slice(properties);
    finish(out, start);
    let chunk = max_frame.saturating_sub(OVERHEAD).max(1) as usize;
    for piece in body.chunks(chunk) {
        let start = begin(out, BODY, channel);
        out.extend_from_slice(piece);
        finish(out, start);
    }
}

/// Write a frame's head with a size to fill in; where its payload starts.
fn begin(out: &mut Vec<u8>, kind: u8, channel: u16) -> usize {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.len()
}

/// Fill in the size of the frame whose payload started at `start`, and end it.
fn finish(out: &mut Vec<u8>, start: usize) {
    let size = (out.len() - start) as u32;
    out[start - 4..start].copy_from_slice(&size.to_be_bytes());
    out.push(FRAME_END);
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::basic::{self, AMQPMethod};
    use amq_protocol::types::ShortString;

    fn ack(tag: u64) -> AMQPClass {
        AMQPClass::Basic(AMQPMethod::Ack(basic::Ack {
            delivery_tag: tag,
            multiple: true,
        }))
    }

    #[test]
    fn a_method_round_trips_and_a_partial_frame_waits() {
        let mut out = Vec::new();
        put_method(&mut out, 1, &ack(42));
        let mut buf = BytesMut::new();
        for (i, b) in out.iter().enumerate() {
            assert_eq!(decode(&mut buf, 4096), Ok(None), "after {i} bytes");
            buf.extend_from_slice(&[*b]);
        }
        assert_eq!(decode(&mut buf, 4096), Ok(Some(Frame::Method(1, ack(42)))));
        assert!(buf.is_empty());
    }

    #[test]
    fn content_is_split_at_the_frame_maximum_and_read_back() {
        let props = BasicProperties::default()
            .with_type(ShortString::from("herald.bundle"))
            .with_content_type(ShortString::from("application/json"));
        let body: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        put_content(&mut out, 1, &props, &body, 108);
        put_heartbeat(&mut out);
        let mut buf = BytesMut::from(&out[..]);
        let Some(Frame::Header(1, size, read)) = decode(&mut buf, 108).unwrap() else {
            panic!("a header first");
        };
        assert_eq!((size, *read), (1000, props));
        let mut back = Vec::new();
        let mut frames = 0;
        while let Some(frame) = decode(&mut buf, 108).unwrap() {
            match frame {
                Frame::Body(1, piece) => {
                    assert!(piece.len() <= 100);
                    back.extend_from_slice(&piece);
                    frames += 1;
                }
                Frame::Heartbeat => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((back, frames), (body, 10));
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_frame_is_refused_from_its_head() {
        let mut buf = BytesMut::from(&[BODY, 0, 1, 0, 0, 0x10, 0][..]);
        assert_eq!(
            decode(&mut buf, 4096),
            Err(FrameError::TooLarge {
                size: 4096 + 8,
                max: 4096
            })
        );
    }

    #[test]
    fn bad_bytes_are_named() {
        let cases: [(&[u8], FrameError); 4] = [
            (b"AMQP\x00\x00\x09\x01", FrameError::ProtocolMismatch),
            (
                &[9, 0, 0, 0, 0, 0, 0, FRAME_END],
                FrameError::UnknownType(9),
            ),
            (&[HEARTBEAT, 0, 0, 0, 0, 0, 0, 0], FrameError::BadEnd(0)),
            (
                &[METHOD, 0, 1, 0, 0, 0, 2, 0, 60, FRAME_END],
                FrameError::BadMethod,
            ),
        ];
        for (bytes, error) in cases {
            let mut buf = BytesMut::from(bytes);
            assert_eq!(decode(&mut buf, 4096), Err(error), "{bytes:?}");
        }
        let mut buf = BytesMut::from(&[HEADER, 0, 1, 0, 0, 0, 2, 0, 60, FRAME_END][..]);
        assert_eq!(decode(&mut buf, 4096), Err(FrameError::BadHeader));
    }

    #[test]
    fn a_heartbeat_is_read() {
        let mut out = Vec::new();
        put_heartbeat(&mut out);
        let mut buf = BytesMut::from(&out[..]);
        assert_eq!(decode(&mut buf, 4096), Ok(Some(Frame::Heartbeat)));
    }
}
