//! The opening handshake: computing `Sec-WebSocket-Accept`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha1::{Digest, Sha1};

/// The GUID RFC 6455 appends to the client's key.
pub const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(sha1(key + GUID)).
///
/// `client_key` is the header value as received (leading and trailing
/// whitespace already removed, as HTTP header parsing does).
pub fn accept_key(client_key: &[u8]) -> String {
    let mut sha1 = Sha1::new();
    sha1.update(client_key);
    sha1.update(GUID.as_bytes());
    STANDARD.encode(sha1.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_6455_example() {
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
