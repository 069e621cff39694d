//! Requests a router sends its edges beside notifications, on the same
//! exchange a broadcast notification takes (so every edge gets them, in
//! either routing mode). One so far: [`Disconnect`], an operator's
//! `POST /v1/users/{uid}/disconnect`: each edge ends the user's sessions it
//! holds. A control message has the AMQP `type` [`DISCONNECT_TYPE`] and a
//! JSON body; an edge tells it apart from a notification by the type
//! (routers never forward a publication with a `type`).

use bytes::Bytes;
use lapin::BasicProperties;
use serde::{Deserialize, Serialize};

use crate::envelope::short;

/// The `type` of a disconnect request.
pub const DISCONNECT_TYPE: &str = "herald.disconnect";

/// End every session of `user` with an ERROR that gives `reason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disconnect {
    /// The user, as tokens name it (`sub`).
    pub user: String,
    /// Why, as the operator wrote it.
    pub reason: String,
}

impl Disconnect {
    /// The message's properties and body. Not persistent: a request for
    /// the sessions live now means nothing to an edge that starts later.
    pub fn to_amqp(&self) -> (BasicProperties, Bytes) {
        let body = serde_json::to_vec(self).expect("two strings serialize");
        let properties = BasicProperties::default()
            .with_content_type(short("application/json"))
            .with_type(short(DISCONNECT_TYPE));
        (properties, Bytes::from(body))
    }

    /// The request a delivery carries: None when its type is another;
    /// `Some(Err)` when it says it is one but its body is not.
    pub fn from_amqp(
        properties: &BasicProperties,
        body: &[u8],
    ) -> Option<Result<Disconnect, serde_json::Error>> {
        let kind = properties.kind().as_ref()?;
        (kind.as_str() == DISCONNECT_TYPE).then(|| serde_json::from_slice(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disconnect_round_trips_and_nothing_else_is_one() {
        let d = Disconnect {
            user: "alice".into(),
            reason: "account closed: \"fraud\"".into(),
        };
        let (properties, body) = d.to_amqp();
        assert_eq!(
            Disconnect::from_amqp(&properties, &body).unwrap().unwrap(),
            d
        );
        assert!(Disconnect::from_amqp(&BasicProperties::default(), &body).is_none());
        let bundle = BasicProperties::default().with_type(short(crate::envelope::BUNDLE_TYPE));
        assert!(Disconnect::from_amqp(&bundle, &body).is_none());
        assert!(Disconnect::from_amqp(&properties, b"{}").unwrap().is_err());
    }
}
