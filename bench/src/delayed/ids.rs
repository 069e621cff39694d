//! The ids of the delayed benchmark's notifications (pure): `dl-{seq}`. Herald passes a
//! notification's id on as the STOMP `message-id`, so a recording session learns which one
//! arrived; the parent knows each one's due time by its sequence number.

/// What every bench id starts with.
const PREFIX: &str = "dl-";

/// The id of notification `seq`.
pub(crate) fn message_id(seq: u64) -> String {
    format!("{PREFIX}{seq}")
}

/// The sequence number in an id made by [`message_id`].
pub(crate) fn parse(id: &str) -> Option<u64> {
    let digits = id.strip_prefix(PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_others_are_refused() {
        assert_eq!(message_id(42), "dl-42");
        assert_eq!(parse(&message_id(u64::MAX)), Some(u64::MAX));
        for other in [
            "",
            "dl-",
            "dl-x",
            "dl-+1",
            "lat-1-2",
            "tp-3",
            "dl-1 ",
            "dl-99999999999999999999",
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
