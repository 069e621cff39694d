//! The ids of the delayed benchmark's notifications (pure): `dl-` and 16 hex digits of the
//! sequence number scrambled by an invertible multiplication. Herald passes a notification's
//! id on as the STOMP `message-id`, so a recording session learns which one arrived; the
//! parent knows each one's due time by its sequence number.
//!
//! Why scrambled: backends name notifications with UUIDs or random ids (and so does Herald
//! when they don't), so consecutive notifications land far apart in any index keyed by id.
//! Sequential ids would measure the store's best case, not its usual one.

/// What every bench id starts with.
const PREFIX: &str = "dl-";
/// An odd multiplier (so invertible modulo 2^64) that spreads consecutive numbers.
const SCRAMBLE: u64 = 0x9E37_79B9_7F4A_7C15;
/// Its inverse modulo 2^64.
const UNSCRAMBLE: u64 = 0xF1DE_83E1_9937_733D;

/// The id of notification `seq`.
pub(crate) fn message_id(seq: u64) -> String {
    format!("{PREFIX}{:016x}", seq.wrapping_mul(SCRAMBLE))
}

/// The sequence number in an id made by [`message_id`].
pub(crate) fn parse(id: &str) -> Option<u64> {
    let digits = id.strip_prefix(PREFIX)?;
    if digits.len() != 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let scrambled = u64::from_str_radix(digits, 16).ok()?;
    Some(scrambled.wrapping_mul(UNSCRAMBLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scramble_is_inverted() {
        assert_eq!(SCRAMBLE.wrapping_mul(UNSCRAMBLE), 1);
    }

    #[test]
    fn ids_round_trip_and_others_are_refused() {
        for seq in [0, 1, 2, 42, 1_000_000, u64::MAX] {
            assert_eq!(parse(&message_id(seq)), Some(seq), "{seq}");
        }
        assert_ne!(
            message_id(1)[..6],
            message_id(2)[..6],
            "neighbours are far apart"
        );
        for other in [
            "",
            "dl-",
            "dl-x",
            "dl-42",
            "dl-+000000000000001",
            "lat-1-2",
            "tp-3",
            "dl-0000000000000001 ",
            "dl-00000000000000001",
            "dl-000000000000000g",
        ] {
            assert_eq!(parse(other), None, "{other:?}");
        }
        // A valid Herald id: 1-200 of A-Z a-z 0-9 . _ ~ @ / + = -
        assert!(
            herald_protocol::envelope::is_valid_name(&message_id(u64::MAX)),
            "Herald accepts the ids"
        );
    }
}
