//! Who a publication reaches, and what that means for the rates of a ramp (pure).

use serde::{Deserialize, Serialize};

/// Who a publication reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Audience {
    /// Every session.
    Broadcast,
    /// One user, in turn.
    PerUser,
}

impl Audience {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Audience::Broadcast => "broadcast",
            Audience::PerUser => "per-user",
        }
    }

    /// The user a session of index `i` is (the same id on every system).
    pub(crate) fn user(i: usize) -> String {
        crate::harness::token::user_id(0, i)
    }

    /// Publications per second for `rate` deliveries per second to `sessions`.
    pub(crate) fn publications_per_second(self, rate: u64, sessions: usize) -> f64 {
        match self {
            Audience::Broadcast => rate as f64 / sessions as f64,
            Audience::PerUser => rate as f64,
        }
    }

    /// Deliveries one publication makes.
    pub(crate) fn deliveries_per_publication(self, sessions: usize) -> u64 {
        match self {
            Audience::Broadcast => sessions as u64,
            Audience::PerUser => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audiences_count_their_deliveries() {
        assert_eq!(
            Audience::Broadcast.publications_per_second(10_000, 5_000),
            2.0
        );
        assert_eq!(Audience::Broadcast.deliveries_per_publication(5_000), 5_000);
        assert_eq!(
            Audience::PerUser.publications_per_second(10_000, 5_000),
            10_000.0
        );
        assert_eq!(Audience::PerUser.deliveries_per_publication(5_000), 1);
        assert_eq!(Audience::user(7), "bench-0-7");
    }
}
