//! Putting a delivery together from its frames: `basic.deliver`, then a
//! content header, then body frames up to the header's size. Pure.
//!
//! A body larger than the bound is not held: its frames are counted and
//! dropped, and the delivery comes out as [`Assembled::TooLarge`] so the
//! consumer can acknowledge it (redelivering it would not make it fit).

use amq_protocol::protocol::BasicProperties;
use bytes::Bytes;

/// Most bytes reserved for a body before its frames arrive.
const RESERVE: u64 = 1 << 20;

/// One message delivered to the consumer.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Its tag on the channel, to acknowledge it by.
    pub delivery_tag: u64,
    /// Whether the broker delivered it before.
    pub redelivered: bool,
    /// Its properties (`type`, headers, …).
    pub properties: BasicProperties,
    /// The whole body, in an allocation of its own and of its own size
    /// (never a slice of the connection's read buffer, which a retained
    /// notification would otherwise keep alive).
    pub body: Bytes,
}

/// What a completed delivery is.
#[derive(Debug, Clone, PartialEq)]
pub enum Assembled {
    /// A whole delivery (boxed: its properties are large).
    Delivery(Box<Delivery>),
    /// Its body was larger than the bound; it was read and dropped.
    TooLarge {
        /// Its tag, to acknowledge it by.
        delivery_tag: u64,
        /// Its body's size, from its content header.
        size: u64,
    },
}

/// A frame out of order: a connection error (`unexpected-frame`, 505).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected frame: {0}")]
pub struct OutOfOrder(pub &'static str);

#[derive(Debug)]
enum State {
    Idle,
    AwaitingHeader {
        tag: u64,
        redelivered: bool,
    },
    Body {
        tag: u64,
        redelivered: bool,
        properties: Box<BasicProperties>,
        size: u64,
        /// `None` when the body is over the bound and being skipped.
        data: Option<Vec<u8>>,
        seen: u64,
    },
}

/// Assembles one delivery at a time (AMQP interleaves no content on one
/// channel).
#[derive(Debug)]
pub struct Assembler {
    state: State,
    max_body: u64,
}

impl Assembler {
    /// Bodies above `max_body` bytes are dropped.
    pub fn new(max_body: u64) -> Self {
        Assembler {
            state: State::Idle,
            max_body,
        }
    }

    /// A `basic.deliver` arrived.
    pub fn deliver(&mut self, tag: u64, redelivered: bool) -> Result<(), OutOfOrder> {
        if !matches!(self.state, State::Idle) {
            return Err(OutOfOrder(
                "basic.deliver inside another delivery's content",
            ));
        }
        self.state = State::AwaitingHeader { tag, redelivered };
        Ok(())
    }

    /// A content header arrived.
    pub fn header(
        &mut self,
        size: u64,
        properties: Box<BasicProperties>,
    ) -> Result<Option<Assembled>, OutOfOrder> {
        let State::AwaitingHeader { tag, redelivered } = self.state else {
            return Err(OutOfOrder("content header without basic.deliver"));
        };
        // Reserved up to 1 MiB on the header's word alone; a larger body
        // grows as its frames arrive (and is trimmed when complete).
        let data = (size <= self.max_body).then(|| Vec::with_capacity(size.min(RESERVE) as usize));
        self.state = State::Body {
            tag,
            redelivered,
            properties,
            size,
            data,
            seen: 0,
        };
        Ok(self.complete())
    }

    /// A body frame arrived.
    pub fn body(&mut self, piece: &[u8]) -> Result<Option<Assembled>, OutOfOrder> {
        let State::Body {
            size, data, seen, ..
        } = &mut self.state
        else {
            return Err(OutOfOrder("body frame without a content header"));
        };
        *seen += piece.len() as u64;
        if *seen > *size {
            return Err(OutOfOrder("body frames beyond the content header's size"));
        }
        if let Some(data) = data {
            data.extend_from_slice(piece);
        }
        Ok(self.complete())
    }

    /// Whether a delivery is partly read.
    pub fn in_progress(&self) -> bool {
        !matches!(self.state, State::Idle)
    }

    fn complete(&mut self) -> Option<Assembled> {
        match &self.state {
            State::Body { size, seen, .. } if seen == size => {}
            _ => return None,
        }
        let State::Body {
            tag,
            redelivered,
            properties,
            size,
            data,
            ..
        } = std::mem::replace(&mut self.state, State::Idle)
        else {
            unreachable!("matched above")
        };
        Some(match data {
            Some(mut data) => Assembled::Delivery(Box::new(Delivery {
                delivery_tag: tag,
                redelivered,
                properties: *properties,
                body: {
                    data.shrink_to_fit();
                    Bytes::from(data)
                },
            })),
            None => Assembled::TooLarge {
                delivery_tag: tag,
                size,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_in_pieces_comes_out_whole_and_exactly_sized() {
        let mut a = Assembler::new(100);
        a.deliver(7, true).unwrap();
        assert_eq!(a.header(10, Box::default()), Ok(None));
        assert_eq!(a.body(b"hello"), Ok(None));
        let Ok(Some(Assembled::Delivery(d))) = a.body(b"world") else {
            panic!("complete");
        };
        assert_eq!(
            (d.delivery_tag, d.redelivered, &d.body[..]),
            (7, true, &b"helloworld"[..])
        );
        assert!(!a.in_progress());
    }

    #[test]
    fn a_large_body_is_reserved_in_part_and_grows_as_it_arrives() {
        let mut a = Assembler::new(8 << 20);
        a.deliver(9, false).unwrap();
        assert_eq!(a.header(3 << 20, Box::default()), Ok(None));
        let piece = vec![1u8; 128 << 10];
        let mut done = None;
        for _ in 0..24 {
            done = a.body(&piece).unwrap();
        }
        let Some(Assembled::Delivery(d)) = done else {
            panic!("complete after 3 MiB");
        };
        assert_eq!(d.body.len(), 3 << 20);
    }

    #[test]
    fn an_empty_body_completes_at_its_header() {
        let mut a = Assembler::new(100);
        a.deliver(1, false).unwrap();
        let done = a.header(0, Box::default()).unwrap();
        assert!(matches!(done, Some(Assembled::Delivery(d)) if d.body.is_empty()));
    }

    #[test]
    fn a_body_over_the_bound_is_skipped_and_named() {
        let mut a = Assembler::new(4);
        a.deliver(3, false).unwrap();
        assert_eq!(a.header(6, Box::default()), Ok(None));
        assert_eq!(a.body(b"abc"), Ok(None));
        assert_eq!(
            a.body(b"def"),
            Ok(Some(Assembled::TooLarge {
                delivery_tag: 3,
                size: 6
            }))
        );
        a.deliver(4, false).unwrap();
    }

    #[test]
    fn frames_out_of_order_are_errors() {
        let mut a = Assembler::new(100);
        assert!(a.body(b"x").is_err());
        assert!(a.header(1, Box::default()).is_err());
        a.deliver(1, false).unwrap();
        assert!(a.deliver(2, false).is_err());
        a.header(1, Box::default()).unwrap();
        assert!(a.body(b"xy").is_err());
    }
}
