//! Server-side event filters on a subscription: `events:chat.*,order.created`.
//!
//! A pattern is an event name in which `*` matches any run of characters
//! (dots included): `chat.*` matches `chat.message` and `chat.room.join`.
//! A filter with no patterns matches every event.

use std::sync::Arc;

use herald_protocol::envelope::MAX_NAME_BYTES;

/// Most patterns in one filter.
pub const MAX_PATTERNS: usize = 16;

/// A parsed event filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    patterns: Arc<[Box<str>]>,
}

/// Why an `events` header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// More than [`MAX_PATTERNS`].
    #[error("events has more than {MAX_PATTERNS} patterns")]
    TooMany,
    /// A pattern with characters outside the event-name set plus `*`.
    #[error(
        "events pattern {0:?} is not valid: use event-name characters (A-Z a-z 0-9 . _ ~ @ / + = -) and *"
    )]
    BadPattern(String),
}

impl EventFilter {
    /// Parse a comma-separated pattern list.
    pub fn parse(header: &str) -> Result<EventFilter, FilterError> {
        let mut patterns = Vec::new();
        for raw in header.split(',') {
            let p = raw.trim();
            if p.is_empty() {
                continue;
            }
            let valid = p.len() <= MAX_NAME_BYTES
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._~@/+=-*".contains(&b));
            if !valid {
                return Err(FilterError::BadPattern(p.chars().take(64).collect()));
            }
            if patterns.len() == MAX_PATTERNS {
                return Err(FilterError::TooMany);
            }
            patterns.push(p.into());
        }
        Ok(EventFilter {
            patterns: patterns.into(),
        })
    }

    /// Whether `event` passes.
    pub fn matches(&self, event: &str) -> bool {
        self.patterns.is_empty()
            || self
                .patterns
                .iter()
                .any(|p| glob(p.as_bytes(), event.as_bytes()))
    }
}

/// `*`-only glob, iterative with single backtrack point (linear in practice).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_filter_matches_everything() {
        let f = EventFilter::parse("").unwrap();
        assert!(f.matches("anything"));
    }

    #[test]
    fn star_matches_runs_including_dots() {
        let f = EventFilter::parse("chat.*, order.created").unwrap();
        assert!(f.matches("chat.message"));
        assert!(f.matches("chat.room.join"));
        assert!(f.matches("order.created"));
        assert!(!f.matches("order.updated"));
        assert!(!f.matches("chat"));
        let f = EventFilter::parse("*.deleted,a*b*c").unwrap();
        assert!(f.matches("user.deleted"));
        assert!(f.matches("axxbyyc"));
        assert!(!f.matches("axxbyy"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(matches!(
            EventFilter::parse("chat:*"),
            Err(FilterError::BadPattern(_))
        ));
        let many = vec!["a"; 17].join(",");
        assert_eq!(EventFilter::parse(&many), Err(FilterError::TooMany));
    }
}
