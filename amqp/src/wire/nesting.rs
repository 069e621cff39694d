//! A bound on AMQP field tables before anything recursive reads them.
//!
//! The codec lapin uses (`amq_protocol_types::parsing`) reads a field
//! table by recursion: a table in an array in a table ... A few thousand
//! levels (5 bytes each: a type octet and a length) fit in one frame, and
//! overflow the reading thread's stack: the process aborts, and aborts
//! again on every restart while the message is still queued. Any backend
//! allowed to publish could stop every edge or router that way, and a
//! hostile broker could do the same with its `connection.start`.
//!
//! So every frame a client receives passes here first, pure and without
//! recursion:
//! - [`scan_table`] walks a table with an explicit stack, bounded by
//!   [`Bounds`] (depth and fields) and by the bytes it has.
//! - [`defuse_header`]: a content header whose `headers` table is over the
//!   bounds (or unreadable) gets that table replaced by one field,
//!   [`REJECTED_HEADER`], naming why. The consumer sees the delivery, reads
//!   the marker, and dead-letters it with that reason instead of parsing
//!   what the publisher sent.
//! - [`check_method`]: a method a client may receive is one of
//!   [`client_receives`]; of those only `connection.start` holds a table,
//!   which must be within the bounds. Anything else is refused before it
//!   is parsed: the connection fails with the reason.

use std::fmt;

/// The header a defused content header holds instead of the publisher's:
/// why they were not read.
pub const REJECTED_HEADER: &str = "x-herald-rejected";

/// How deep and how large a field table may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Nested tables and arrays, the outermost table being 1.
    pub max_depth: u32,
    /// Values in all, at every level.
    pub max_fields: u32,
}

impl Default for Bounds {
    /// 32 levels (Herald's own headers use 2: a table of arrays) and 10,000
    /// values (a recipient list of 1,000 is 1,000).
    fn default() -> Self {
        Bounds {
            max_depth: 32,
            max_fields: 10_000,
        }
    }
}

/// Why a table or a frame was not let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Nested deeper than the bound.
    TooDeep {
        /// The bound.
        max: u32,
    },
    /// More values than the bound.
    TooManyFields {
        /// The bound.
        max: u32,
    },
    /// Not a field table, or not the frame it claims to be.
    Malformed(&'static str),
    /// A method no client receives.
    Unexpected {
        /// Its class id.
        class: u16,
        /// Its method id.
        method: u16,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooDeep { max } => write!(f, "field table nested deeper than {max} levels"),
            Refusal::TooManyFields { max } => write!(f, "field table with more than {max} values"),
            Refusal::Malformed(what) => write!(f, "unreadable field table: {what}"),
            Refusal::Unexpected { class, method } => {
                write!(f, "method {class}.{method} is not one a client receives")
            }
        }
    }
}

/// A table or an array being walked: where it ends.
#[derive(Clone, Copy)]
enum Open {
    Table(usize),
    Array(usize),
}

impl Open {
    fn end(self) -> usize {
        match self {
            Open::Table(e) | Open::Array(e) => e,
        }
    }
}

/// The length in bytes of the field table at the start of `bytes` (its
/// 4-byte length included), once every value in it is within `bounds`.
/// Never recurses: the walk keeps its own stack of at most
/// `bounds.max_depth` entries.
pub fn scan_table(bytes: &[u8], bounds: Bounds) -> Result<usize, Refusal> {
    let outer = 4 + read_u32(bytes, 0, bytes.len())? as usize;
    if outer > bytes.len() {
        return Err(Refusal::Malformed("the table is longer than its frame"));
    }
    let mut stack: Vec<Open> = Vec::with_capacity(8);
    stack.push(Open::Table(outer));
    let mut pos = 4;
    let mut fields = 0u32;
    while let Some(&open) = stack.last() {
        let end = open.end();
        if pos == end {
            stack.pop();
            continue;
        }
        if let Open::Table(_) = open {
            let name = usize::from(*bytes.get(pos).ok_or(Refusal::Malformed("cut short"))?);
            pos += 1 + name;
            if pos >= end {
                return Err(Refusal::Malformed("a field name runs past its table"));
            }
        }
        fields += 1;
        if fields > bounds.max_fields {
            return Err(Refusal::TooManyFields {
                max: bounds.max_fields,
            });
        }
        let kind = bytes[pos];
        pos += 1;
        let fixed = match kind {
            b't' | b'b' | b'B' => 1,
            b's' | b'U' | b'u' => 2,
            b'I' | b'i' | b'f' => 4,
            b'l' | b'L' | b'd' | b'T' => 8,
            b'D' => 5,
            b'V' => 0,
            b'S' | b'x' => 4 + read_u32(bytes, pos, end)? as usize,
            b'A' | b'F' => {
                let len = read_u32(bytes, pos, end)? as usize;
                let inner_end = pos + 4 + len;
                if inner_end > end {
                    return Err(Refusal::Malformed("a nested value runs past its parent"));
                }
                if stack.len() as u32 >= bounds.max_depth {
                    return Err(Refusal::TooDeep {
                        max: bounds.max_depth,
                    });
                }
                stack.push(if kind == b'F' {
                    Open::Table(inner_end)
                } else {
                    Open::Array(inner_end)
                });
                pos += 4;
                continue;
            }
            _ => return Err(Refusal::Malformed("unknown field type")),
        };
        pos += fixed;
        if pos > end {
            return Err(Refusal::Malformed("a value runs past its table"));
        }
    }
    Ok(outer)
}

fn read_u32(bytes: &[u8], at: usize, end: usize) -> Result<u32, Refusal> {
    match bytes.get(at..at + 4) {
        Some(b) if at + 4 <= end => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        _ => Err(Refusal::Malformed("a length runs past its table")),
    }
}

/// The `basic` class, the only one with content.
const BASIC: u16 = 60;
/// Property flags of `basic` (AMQP 0-9-1), from the high bit down.
const CONTENT_TYPE: u16 = 1 << 15;
const CONTENT_ENCODING: u16 = 1 << 14;
const HEADERS: u16 = 1 << 13;
/// More property flags follow (no `basic` property needs them).
const CONTINUATION: u16 = 1;

/// A content header's payload (class, weight, body size, property flags,
/// properties) with its `headers` table checked: `None` when it is within
/// `bounds` (or absent), else the payload rewritten with the table
/// replaced by `{x-herald-rejected: <why>}`. `Err` when the payload is not
/// a `basic` content header at all: the codec refuses it on its own,
/// without recursion, as it cannot reach the table either.
pub fn defuse_header(payload: &[u8], bounds: Bounds) -> Result<Option<Vec<u8>>, Refusal> {
    let bad = Refusal::Malformed("not a basic content header");
    let head = payload.get(..14).ok_or(bad.clone())?;
    if u16::from_be_bytes([head[0], head[1]]) != BASIC {
        return Err(bad);
    }
    let flags = u16::from_be_bytes([head[12], head[13]]);
    if flags & HEADERS == 0 {
        return Ok(None);
    }
    if flags & CONTINUATION != 0 {
        return Err(bad);
    }
    let mut pos = 14;
    for flag in [CONTENT_TYPE, CONTENT_ENCODING] {
        if flags & flag != 0 {
            pos += 1 + usize::from(*payload.get(pos).ok_or(bad.clone())?);
        }
    }
    let table = payload.get(pos..).ok_or(bad.clone())?;
    let why = match scan_table(table, bounds) {
        Ok(_) => return Ok(None),
        Err(why) => why,
    };
    // The table's extent: its own length when that fits the frame (the rest
    // of the properties follow it); else it takes everything to the end.
    let len = match read_u32(table, 0, table.len()) {
        Ok(n) if 4 + n as usize <= table.len() => 4 + n as usize,
        _ => table.len(),
    };
    let mut out = Vec::with_capacity(payload.len().min(pos + 128) + 64);
    out.extend_from_slice(&payload[..pos]);
    put_marker(&mut out, &why.to_string());
    out.extend_from_slice(&table[len..]);
    Ok(Some(out))
}

/// A field table of one long-string field, [`REJECTED_HEADER`] = `why`.
fn put_marker(out: &mut Vec<u8>, why: &str) {
    let name = REJECTED_HEADER.as_bytes();
    let inner = 1 + name.len() + 1 + 4 + why.len();
    out.extend_from_slice(&(inner as u32).to_be_bytes());
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.push(b'S');
    out.extend_from_slice(&(why.len() as u32).to_be_bytes());
    out.extend_from_slice(why.as_bytes());
}

/// Whether a client may receive method `class`.`method` (AMQP 0-9-1 and
/// RabbitMQ's extensions): the server-to-client methods of every class.
pub fn client_receives(class: u16, method: u16) -> bool {
    matches!(
        (class, method),
        // connection: start, secure, tune, open-ok, close, close-ok,
        // blocked, unblocked, update-secret-ok.
        (10, 10 | 20 | 30 | 41 | 50 | 51 | 60 | 61 | 71)
        // channel: open-ok, flow, flow-ok, close, close-ok.
        | (20, 11 | 20 | 21 | 40 | 41)
        // exchange: declare-ok, delete-ok, bind-ok, unbind-ok.
        | (40, 11 | 21 | 31 | 51)
        // queue: declare-ok, bind-ok, purge-ok, delete-ok, unbind-ok.
        | (50, 11 | 21 | 31 | 41 | 51)
        // basic: qos-ok, consume-ok, cancel, cancel-ok, return, deliver,
        // get-ok, get-empty, ack, recover-ok, nack.
        | (60, 11 | 21 | 30 | 31 | 50 | 60 | 71 | 72 | 80 | 111 | 120)
        // confirm: select-ok; tx: select-ok, commit-ok, rollback-ok.
        | (85, 11)
        | (90, 11 | 21 | 31)
    )
}

/// A method frame's payload checked before it is parsed: one a client
/// receives, and for `connection.start` its server properties within
/// `bounds`.
pub fn check_method(payload: &[u8], bounds: Bounds) -> Result<(), Refusal> {
    let head = payload
        .get(..4)
        .ok_or(Refusal::Malformed("a method frame shorter than its ids"))?;
    let class = u16::from_be_bytes([head[0], head[1]]);
    let method = u16::from_be_bytes([head[2], head[3]]);
    if !client_receives(class, method) {
        return Err(Refusal::Unexpected { class, method });
    }
    if (class, method) == (10, 10) {
        // version-major, version-minor, then server-properties.
        let table = payload
            .get(6..)
            .ok_or(Refusal::Malformed("connection.start cut short"))?;
        scan_table(table, bounds)?;
    }
    Ok(())
}

/// A field table of one field, `n`, holding arrays nested in each other
/// to `levels` levels in all (5 bytes a level), as a hostile publisher
/// writes it: what the tests, here and in the crates that consume, send.
/// Neither lapin's codec nor this crate's could write it (they recurse).
pub fn hostile_table(levels: usize) -> Vec<u8> {
    // The arrays, outermost first: the one j levels from the innermost
    // holds j - 1 arrays of 5 bytes (a type octet and a length) each.
    let arrays = levels.saturating_sub(1);
    let mut inner = Vec::with_capacity(5 * arrays);
    for j in (1..=arrays).rev() {
        inner.push(b'A');
        inner.extend_from_slice(&(5 * (j as u32 - 1)).to_be_bytes());
    }
    let mut table = Vec::with_capacity(6 + inner.len());
    if levels > 1 {
        table.extend_from_slice(&((2 + inner.len()) as u32).to_be_bytes());
        table.extend_from_slice(&[1, b'n']);
        table.extend_from_slice(&inner);
    } else {
        table.extend_from_slice(&[0, 0, 0, 0]);
    }
    table
}

#[cfg(test)]
mod tests;
