//! Incremental decoding of masked client frames.

use bytes::{Buf, BytesMut};

use super::frame::{apply_mask, close_code};
use super::{Message, OpCode};
use crate::utf8::{Utf8Bytes, Utf8Stream};

/// Why the client's bytes are not acceptable WebSocket frames. Each maps to
/// the close code to send ([`WsError::close_code`]); the `Display` text fits
/// in a close reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WsError {
    /// A client frame without a mask (RFC 6455 5.1).
    #[error("client frames must be masked")]
    Unmasked,
    /// RSV1-3 set, but no extension was negotiated.
    #[error("reserved bits set without a negotiated extension")]
    ReservedBits,
    /// A reserved opcode.
    #[error("unknown opcode {opcode:#x}")]
    UnknownOpcode {
        /// The 4-bit opcode received.
        opcode: u8,
    },
    /// A control frame that is fragmented or carries more than 125 bytes.
    #[error("control frames must be unfragmented and at most 125 bytes")]
    BadControlFrame,
    /// A continuation frame with no fragmented message started.
    #[error("continuation frame without a message to continue")]
    UnexpectedContinuation,
    /// A new text or binary frame while a fragmented message is unfinished.
    #[error("new message while a fragmented message is unfinished")]
    ExpectedContinuation,
    /// The message is longer than the decoder's limit; detected from the
    /// frame header, before the payload is buffered.
    #[error("message exceeds {limit} bytes")]
    MessageTooLarge {
        /// The limit.
        limit: usize,
    },
    /// A text message that is not UTF-8.
    #[error("text message is not valid UTF-8")]
    InvalidUtf8,
    /// A close payload of one byte, with an invalid code, or with a reason
    /// that is not UTF-8.
    #[error("invalid close frame payload")]
    BadClosePayload,
}

impl WsError {
    /// The close code to answer with: 1009 for [`WsError::MessageTooLarge`],
    /// 1007 for [`WsError::InvalidUtf8`], 1002 (protocol error) otherwise.
    pub fn close_code(&self) -> u16 {
        match self {
            WsError::MessageTooLarge { .. } => close_code::MESSAGE_TOO_BIG,
            WsError::InvalidUtf8 => close_code::INVALID_PAYLOAD,
            WsError::Unmasked
            | WsError::ReservedBits
            | WsError::UnknownOpcode { .. }
            | WsError::BadControlFrame
            | WsError::UnexpectedContinuation
            | WsError::ExpectedContinuation
            | WsError::BadClosePayload => close_code::PROTOCOL_ERROR,
        }
    }
}

/// Incremental decoder for masked client frames.
///
/// Reassembles fragmented messages up to `max_message_bytes`; control frames
/// may arrive between fragments and are returned immediately. Text is
/// checked for UTF-8 as it arrives (RFC 6455 8.1 "fail fast"): each fragment
/// when it is absorbed, and the payload of a text frame still in transit
/// whenever more of it has come in, so invalid text is refused at the first
/// bad byte, not when the message completes. After an error the connection
/// must be closed; the decoder's state is no longer meaningful.
#[derive(Debug)]
pub struct Decoder {
    /// Largest text or binary message, all fragments together.
    max_message_bytes: usize,
    /// The opcode and payload so far of an unfinished fragmented message.
    partial: Option<(OpCode, BytesMut)>,
    /// UTF-8 state of the text message under way (fragments absorbed and
    /// the part of the frame in transit already checked).
    utf8: Utf8Stream,
    /// Payload bytes of the incomplete frame at the front of the buffer
    /// already fed to `utf8` (0 when no text frame is in transit).
    peeked: usize,
}

/// A parsed frame header.
struct Header {
    fin: bool,
    opcode: OpCode,
    /// Bytes before the payload, mask key included.
    len: usize,
    mask: [u8; 4],
    payload_len: usize,
}

impl Decoder {
    /// A decoder that refuses messages longer than `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Decoder {
        Decoder {
            max_message_bytes,
            partial: None,
            utf8: Utf8Stream::new(),
            peeked: 0,
        }
    }

    /// Decodes the next message from the front of `buf`.
    ///
    /// `Ok(None)` consumes nothing unless a whole non-final fragment was
    /// absorbed into the partial message (that is allowed: complete fragment
    /// frames are consumed). A partial frame is never consumed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, WsError> {
        loop {
            let Some(header) = self.parse_header(buf)? else {
                return Ok(None);
            };
            let available = buf.len() - header.len;
            let text = self.is_text(header.opcode);
            if available < header.payload_len {
                if text {
                    self.peek(&buf[header.len..], header.mask)?;
                }
                return Ok(None);
            }
            buf.advance(header.len);
            let mut payload = buf.split_to(header.payload_len);
            apply_mask(&mut payload, header.mask);
            if text {
                let unchecked = &payload[std::mem::take(&mut self.peeked)..];
                self.utf8
                    .feed(unchecked)
                    .map_err(|_| WsError::InvalidUtf8)?;
            }
            if let Some(message) = self.absorb(header.fin, header.opcode, payload)? {
                return Ok(Some(message));
            }
        }
    }

    /// Bytes held for a partially received fragmented message (0 when idle),
    /// so the gateway can check idle memory.
    pub fn buffered(&self) -> usize {
        self.partial.as_ref().map_or(0, |(_, data)| data.len())
    }

    /// Whether a data frame with `opcode` carries text: a text frame, or a
    /// continuation of a text message.
    fn is_text(&self, opcode: OpCode) -> bool {
        match opcode {
            OpCode::Text => true,
            OpCode::Continuation => matches!(self.partial, Some((OpCode::Text, _))),
            _ => false,
        }
    }

    /// Checks the UTF-8 of the part of a text frame's payload that has
    /// arrived (`arrived`, still masked) and was not checked yet. Unmasks a
    /// copy through a stack buffer; the frame stays in the buffer untouched.
    fn peek(&mut self, arrived: &[u8], mask: [u8; 4]) -> Result<(), WsError> {
        const STEP: usize = 1024;
        let mut chunk = [0u8; STEP];
        while self.peeked < arrived.len() {
            let n = (arrived.len() - self.peeked).min(STEP);
            let piece = &mut chunk[..n];
            piece.copy_from_slice(&arrived[self.peeked..self.peeked + n]);
            // The mask phase of this piece is its offset in the payload.
            let phase = self.peeked % 4;
            apply_mask(
                piece,
                [
                    mask[phase],
                    mask[(phase + 1) % 4],
                    mask[(phase + 2) % 4],
                    mask[(phase + 3) % 4],
                ],
            );
            self.utf8.feed(piece).map_err(|_| WsError::InvalidUtf8)?;
            self.peeked += n;
        }
        Ok(())
    }

    /// Parses and checks the header at the front of `buf`, consuming nothing.
    fn parse_header(&self, buf: &[u8]) -> Result<Option<Header>, WsError> {
        let [b0, b1, ..] = *buf else {
            return Ok(None);
        };
        let fin = b0 & 0x80 != 0;
        if b0 & 0x70 != 0 {
            return Err(WsError::ReservedBits);
        }
        let opcode =
            OpCode::from_u8(b0 & 0x0F).ok_or(WsError::UnknownOpcode { opcode: b0 & 0x0F })?;
        if b1 & 0x80 == 0 {
            return Err(WsError::Unmasked);
        }
        let len7 = b1 & 0x7F;
        if opcode.is_control() && (!fin || len7 > 125) {
            return Err(WsError::BadControlFrame);
        }
        match (opcode, &self.partial) {
            (OpCode::Continuation, None) => return Err(WsError::UnexpectedContinuation),
            (OpCode::Text | OpCode::Binary, Some(_)) => {
                return Err(WsError::ExpectedContinuation);
            }
            _ => {}
        }

        let (payload_len, rest) = match (len7, &buf[2..]) {
            (126, [a, b, rest @ ..]) => (u64::from(u16::from_be_bytes([*a, *b])), rest),
            (127, [a, b, c, d, e, f, g, h, rest @ ..]) => {
                (u64::from_be_bytes([*a, *b, *c, *d, *e, *f, *g, *h]), rest)
            }
            (126 | 127, _) => return Ok(None),
            (len, rest) => (u64::from(len), rest),
        };
        // Refuse an oversized message before buffering any of it.
        let too_large = WsError::MessageTooLarge {
            limit: self.max_message_bytes,
        };
        let held = self.buffered() as u64;
        if !opcode.is_control() && held.saturating_add(payload_len) > self.max_message_bytes as u64
        {
            return Err(too_large);
        }
        let payload_len = usize::try_from(payload_len).map_err(|_| too_large)?;
        let [m0, m1, m2, m3, ..] = *rest else {
            return Ok(None);
        };
        Ok(Some(Header {
            fin,
            opcode,
            len: buf.len() - rest.len() + 4,
            mask: [m0, m1, m2, m3],
            payload_len,
        }))
    }

    /// Takes one whole frame's payload; returns a message if one is complete.
    fn absorb(
        &mut self,
        fin: bool,
        opcode: OpCode,
        payload: BytesMut,
    ) -> Result<Option<Message>, WsError> {
        let message = match opcode {
            OpCode::Ping => Message::Ping(payload.freeze()),
            OpCode::Pong => Message::Pong(payload.freeze()),
            OpCode::Close => Message::Close(parse_close(&payload)?),
            OpCode::Text | OpCode::Binary if !fin => {
                self.partial = Some((opcode, payload));
                return Ok(None);
            }
            OpCode::Text | OpCode::Binary => finish(opcode, payload, &mut self.utf8)?,
            OpCode::Continuation => {
                let Some((_, data)) = &mut self.partial else {
                    return Err(WsError::UnexpectedContinuation);
                };
                data.extend_from_slice(&payload);
                if !fin {
                    return Ok(None);
                }
                match self.partial.take() {
                    Some((opcode, data)) => finish(opcode, data, &mut self.utf8)?,
                    None => return Err(WsError::UnexpectedContinuation),
                }
            }
        };
        Ok(Some(message))
    }
}

/// A complete text or binary message; `utf8` has checked every byte of a
/// text message and is reset for the next.
fn finish(opcode: OpCode, data: BytesMut, utf8: &mut Utf8Stream) -> Result<Message, WsError> {
    match opcode {
        OpCode::Text => {
            std::mem::take(utf8)
                .finish()
                .map_err(|_| WsError::InvalidUtf8)?;
            Ok(Message::Text(Utf8Bytes::from_validated(data.freeze())))
        }
        _ => Ok(Message::Binary(data.freeze())),
    }
}

/// A close payload: empty, or a valid code and a UTF-8 reason.
fn parse_close(payload: &[u8]) -> Result<Option<(u16, String)>, WsError> {
    match payload {
        [] => Ok(None),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !close_code::is_valid_received(code) {
                return Err(WsError::BadClosePayload);
            }
            let reason =
                simdutf8::basic::from_utf8(reason).map_err(|_| WsError::BadClosePayload)?;
            Ok(Some((code, reason.to_owned())))
        }
        [_] => Err(WsError::BadClosePayload),
    }
}

#[cfg(test)]
mod tests;
