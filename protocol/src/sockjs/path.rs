//! The `/<server>/<session>/<transport>` URL path segments.

/// Longest server or session id Herald accepts, in bytes. sockjs-client
/// sends a 3-digit server id and a short random session id; the bound keeps
/// session keys small whatever a client sends.
pub const MAX_ID_BYTES: usize = 64;

/// Whether `segment` is a valid server or session id: non-empty, no `.`,
/// at most [`MAX_ID_BYTES`] bytes. sockjs-protocol 0.3.3 answers 404 to
/// empty ids and ids containing dots (`SessionURLs.test_invalidPaths`) and
/// accepts anything else (`test_anyValue`, e.g. `abcdefgh_i-j%20`).
///
/// A `/` is refused too: a segment never holds one, so seeing one means the
/// caller passed an unsplit path.
pub fn is_valid_id(segment: &str) -> bool {
    !segment.is_empty()
        && segment.len() <= MAX_ID_BYTES
        && !segment.bytes().any(|b| b == b'.' || b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockjs_protocol_examples() {
        for id in ["a", "_", "1", "000", "abcdefgh_i-j%20", "abcdefg_i-j%20123"] {
            assert!(is_valid_id(id), "{id:?}");
        }
        for id in ["", ".", "a.", "a.b", ".a", "a/b"] {
            assert!(!is_valid_id(id), "{id:?}");
        }
    }

    #[test]
    fn length_limit() {
        assert!(is_valid_id(&"x".repeat(MAX_ID_BYTES)));
        assert!(!is_valid_id(&"x".repeat(MAX_ID_BYTES + 1)));
        // Bytes, not characters.
        assert!(!is_valid_id(&"é".repeat(MAX_ID_BYTES / 2 + 1)));
    }
}
