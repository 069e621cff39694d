//! What a client sends: the body of `xhr_send`, or one message on the
//! WebSocket transport.

/// Why a client's payload is not SockJS messages. The `Display` texts are
/// the bodies sockjs-protocol 0.3.3's suite expects from a 500 answer to
/// `xhr_send` (`XhrPolling.test_invalid_json`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The payload is empty. `xhr_send` answers 500; on the WebSocket
    /// transport an empty message is ignored (`Websocket.test_empty_frame`),
    /// not an error.
    #[error("Payload expected.")]
    Empty,
    /// Not UTF-8, not JSON, or JSON of another shape (including
    /// whitespace alone, trailing bytes, non-string array items and lone
    /// surrogates). `xhr_send` answers 500; the WebSocket transport closes
    /// the session (see [`close::BROKEN_FRAMING`](super::close::BROKEN_FRAMING)).
    #[error("Broken JSON encoding.")]
    Broken,
}

/// Messages a client sent: the body of `xhr_send`, or one WebSocket message
/// on the SockJS WebSocket transport.
///
/// Accepts a JSON array of strings (`[]` is a valid heartbeat-like empty
/// send) and, when `allow_single_string` is set (the WebSocket transport,
/// where sockjs-protocol allows both), a single JSON string. Whitespace
/// around the JSON is allowed. All JSON escapes are decoded, `\uXXXX`
/// surrogate pairs included; a lone surrogate is [`DecodeError::Broken`].
///
/// The caller bounds `body` (its HTTP body or WebSocket message limit);
/// the result holds at most `body.len() / 3` messages of at most
/// `body.len()` bytes in all.
pub fn decode_messages(body: &[u8], allow_single_string: bool) -> Result<Vec<String>, DecodeError> {
    if body.is_empty() {
        return Err(DecodeError::Empty);
    }
    // One SIMD pass; serde_json then parses a `&str` without validating again.
    let text = simdutf8::basic::from_utf8(body).map_err(|_| DecodeError::Broken)?;
    let first = text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .as_bytes()
        .first();
    let messages = match first {
        Some(b'"') if allow_single_string => serde_json::from_str::<String>(text).map(|m| vec![m]),
        _ => serde_json::from_str::<Vec<String>>(text),
    };
    messages.map_err(|_| DecodeError::Broken)
}

#[cfg(test)]
mod tests;
