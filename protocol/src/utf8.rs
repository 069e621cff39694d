//! [`Utf8Bytes`]: bytes proven to be UTF-8 once, then trusted.
//!
//! Text WebSocket messages and text payloads are checked with simdutf8 when
//! they arrive; the proof travels in the type so nothing downstream checks
//! again for correctness. (Borrowing a `&str` repeats a fast SIMD check,
//! because `unsafe` is denied in this workspace; see [`Utf8Bytes::as_str`].)

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

    #[test]
    fn constructors_agree() {
        const S: Utf8Bytes = Utf8Bytes::from_static("abc");
        assert_eq!(S, Utf8Bytes::from(String::from("abc")));
        assert_eq!(S, Utf8Bytes::from("abc"));
        assert!(Utf8Bytes::default().is_empty());
        assert_eq!(&*S, "abc");
    }
}
