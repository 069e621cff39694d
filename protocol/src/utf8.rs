//! [`Utf8Bytes`]: bytes proven to be UTF-8 once, then trusted.
//!
//! Text WebSocket messages and text payloads are checked with simdutf8 when
//! they arrive; the proof travels in the type so nothing downstream checks
//! again for correctness. (Borrowing a `&str` repeats a fast SIMD check,
//! because `unsafe` is denied in this workspace; see [`Utf8Bytes::as_str`].)
//!
//! [`Utf8Stream`] checks text that arrives in pieces (WebSocket fragments,
//! or a frame's payload as it trickles in), so the first invalid byte is
//! found when it arrives rather than when the message completes.

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// Bytes proven to be valid UTF-8 (checked once with simdutf8).
///
/// Cloning is cheap: it shares the underlying [`Bytes`].
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Utf8Bytes(Bytes);

impl Utf8Bytes {
    /// Wraps a static string without copying it.
    pub const fn from_static(s: &'static str) -> Self {
        Utf8Bytes(Bytes::from_static(s.as_bytes()))
    }

    /// The text.
    ///
    /// The bytes were validated on construction. Because `unsafe` is denied,
    /// the `&str` is produced by a second, safe SIMD validation (simdutf8,
    /// several GB/s); the empty string it would fall back to on failure can
    /// not happen.
    pub fn as_str(&self) -> &str {
        simdutf8::basic::from_utf8(&self.0).unwrap_or("")
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The underlying [`Bytes`], without copying.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Utf8Bytes {
    /// Wraps bytes this crate has already validated (with [`Utf8Stream`]),
    /// so a text message is checked once, not again when it completes.
    /// Only the checking code may call it; a wrong call cannot cause
    /// undefined behaviour, only the empty [`Utf8Bytes::as_str`].
    pub(crate) fn from_validated(bytes: Bytes) -> Self {
        debug_assert!(simdutf8::basic::from_utf8(&bytes).is_ok());
        Utf8Bytes(bytes)
    }
}

impl TryFrom<Bytes> for Utf8Bytes {
    type Error = Utf8Error;

    /// Validates `bytes`, reporting where the first invalid sequence starts.
    fn try_from(bytes: Bytes) -> Result<Self, Self::Error> {
        validate(&bytes)?;
        Ok(Utf8Bytes(bytes))
    }
}

impl From<String> for Utf8Bytes {
    fn from(s: String) -> Self {
        Utf8Bytes(Bytes::from(s))
    }
}

impl From<&'static str> for Utf8Bytes {
    fn from(s: &'static str) -> Self {
        Utf8Bytes::from_static(s)
    }
}

impl From<Utf8Bytes> for Bytes {
    fn from(s: Utf8Bytes) -> Self {
        s.0
    }
}

impl Deref for Utf8Bytes {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Utf8Bytes {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<[u8]> for Utf8Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl PartialEq<str> for Utf8Bytes {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Utf8Bytes {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl fmt::Debug for Utf8Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Utf8Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bytes that are not valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid UTF-8 at byte {valid_up_to}")]
pub struct Utf8Error {
    /// Length of the longest valid prefix: the offset of the first bad byte.
    pub valid_up_to: usize,
}

/// Checks that `bytes` are UTF-8.
///
/// The fast `basic` validator runs first; only on failure does the `compat`
/// validator run again to find the error position.
pub fn validate(bytes: &[u8]) -> Result<(), Utf8Error> {
    if simdutf8::basic::from_utf8(bytes).is_ok() {
        return Ok(());
    }
    match simdutf8::compat::from_utf8(bytes) {
        Ok(_) => Ok(()),
        Err(e) => Err(Utf8Error {
            valid_up_to: e.valid_up_to(),
        }),
    }
}

/// Incremental UTF-8 validation of text that arrives in pieces.
///
/// Each [`Utf8Stream::feed`] checks its bytes as soon as they arrive; a
/// sequence split between two pieces (at most 3 bytes of it) is carried to
/// the next, so an invalid byte is reported in the piece that holds it, and
/// a sequence that can no longer become valid (an overlong or surrogate
/// prefix like `\xE0\x80`) as soon as its second byte is seen.
/// [`Utf8Stream::finish`] then refuses text that ends inside a sequence.
/// Feeding the same text in any split gives the same verdict as
/// [`validate`] on the whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Utf8Stream {
    /// The start of a sequence the previous piece ended in.
    carry: [u8; 4],
    /// How many bytes of `carry` are held (0 to 3).
    carried: u8,
}

impl Utf8Stream {
    /// A validator at the start of a text.
    pub const fn new() -> Self {
        Utf8Stream {
            carry: [0; 4],
            carried: 0,
        }
    }

    /// Checks the next piece. On error the text is invalid whatever
    /// follows; the validator's state is then no longer meaningful.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Utf8Error> {
        if self.carried > 0 {
            let held = usize::from(self.carried);
            let need = sequence_len(self.carry[0]) - held;
            let take = need.min(bytes.len());
            let mut seq = self.carry;
            seq[held..held + take].copy_from_slice(&bytes[..take]);
            match simdutf8::compat::from_utf8(&seq[..held + take]) {
                Ok(_) => self.carried = 0,
                // Still a valid prefix, and the piece is used up.
                Err(e) if e.error_len().is_none() => {
                    self.carry = seq;
                    self.carried = (held + take) as u8;
                    return Ok(());
                }
                Err(_) => return Err(Utf8Error { valid_up_to: 0 }),
            }
            bytes = &bytes[take..];
        }
        if simdutf8::basic::from_utf8(bytes).is_ok() {
            return Ok(());
        }
        match simdutf8::compat::from_utf8(bytes) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                // The piece ends inside a sequence: keep its start (1 to 3
                // bytes) for the next piece.
                let tail = &bytes[e.valid_up_to()..];
                self.carry[..tail.len()].copy_from_slice(tail);
                self.carried = tail.len() as u8;
                Ok(())
            }
            Err(e) => Err(Utf8Error {
                valid_up_to: e.valid_up_to(),
            }),
        }
    }

    /// Whether the text fed so far ends on a character boundary: the
    /// verdict for the whole text once its last piece was fed.
    pub fn finish(&self) -> Result<(), Utf8Error> {
        if self.carried == 0 {
            Ok(())
        } else {
            Err(Utf8Error { valid_up_to: 0 })
        }
    }
}

/// The length of the sequence a valid lead byte starts (1 for anything
/// else, which the validator then refuses on its own).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_bytes_convert_and_read_back() {
        let s = Utf8Bytes::try_from(Bytes::from_static("héllo".as_bytes())).unwrap();
        assert_eq!(s.as_str(), "héllo");
        assert_eq!(s.len(), 6);
        assert!(!s.is_empty());
        assert_eq!(s, "héllo");
        assert_eq!(format!("{s:?}"), "\"héllo\"");
        assert_eq!(s.to_string(), "héllo");
        assert_eq!(s.into_bytes(), Bytes::from_static("héllo".as_bytes()));
    }

    #[test]
    fn invalid_bytes_report_the_position() {
        let err = Utf8Bytes::try_from(Bytes::from_static(b"ab\xffcd")).unwrap_err();
        assert_eq!(err, Utf8Error { valid_up_to: 2 });
        assert_eq!(err.to_string(), "invalid UTF-8 at byte 2");
        // A truncated sequence at the end is invalid too.
        assert_eq!(validate(b"a\xc3"), Err(Utf8Error { valid_up_to: 1 }));
    }

    /// Every split of `text` into two and three pieces gives the verdict of
    /// the whole.
    fn stream_agrees_with_whole(text: &[u8]) {
        let whole = validate(text).is_ok();
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let mut s = Utf8Stream::new();
                let ok = s.feed(&text[..i]).is_ok()
                    && s.feed(&text[i..j]).is_ok()
                    && s.feed(&text[j..]).is_ok()
                    && s.finish().is_ok();
                assert_eq!(ok, whole, "{text:x?} split at {i}, {j}");
            }
        }
    }

    #[test]
    fn stream_verdict_does_not_depend_on_the_split() {
        for text in [
            &b""[..],
            "héllo €uro 𝄞 κόσμε".as_bytes(),
            b"\xf4\x8f\xbf\xbf", // U+10FFFF
            b"ab\xffcd",         // invalid byte
            b"\xc0\xaf",         // overlong
            b"\xed\xa0\x80",     // surrogate
            b"\xf4\x90\x80\x80", // above U+10FFFF
            b"x\xe2\x82",        // truncated at the end
            b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited", // Autobahn 6.4.x
        ] {
            stream_agrees_with_whole(text);
        }
    }

    #[test]
    fn stream_fails_at_the_piece_holding_the_bad_byte() {
        // Autobahn 6.4.1: the second fragment makes the text invalid, which
        // must be reported then, before the third arrives.
        let mut s = Utf8Stream::new();
        assert_eq!(s.feed("κόσμε".as_bytes()), Ok(()));
        assert!(s.feed(b"\xf4\x90\x80\x80").is_err());
        // A prefix that can never complete is refused at its second byte.
        let mut s = Utf8Stream::new();
        assert_eq!(s.feed(b"a\xe0"), Ok(()));
        assert!(s.feed(b"\x80").is_err());
        // A valid prefix waits for the rest; ending inside it is invalid.
        let mut s = Utf8Stream::new();
        assert_eq!(s.feed(b"\xf0"), Ok(()));
        assert_eq!(s.feed(b"\x9d"), Ok(()));
        assert!(s.finish().is_err());
        assert_eq!(s.feed(b"\x84\x9e"), Ok(()));
        assert_eq!(s.finish(), Ok(()));
    }

    #[test]
    fn constructors_agree() {
        const S: Utf8Bytes = Utf8Bytes::from_static("abc");
        assert_eq!(S, Utf8Bytes::from(String::from("abc")));
        assert_eq!(S, Utf8Bytes::from("abc"));
        assert!(Utf8Bytes::default().is_empty());
        assert_eq!(&*S, "abc");
    }
}
