//! Property tests: STOMP encode -> decode round trips, and decoding is
//! independent of how the byte stream is split.

use bytes::{Bytes, BytesMut};
use herald_protocol::stomp::{
    Command, Decoded, Frame, Limits, Version, decode, encode, encode_head,
};
use proptest::prelude::*;
use proptest::sample::Index;

/// Roomy limits: these tests are about framing, not limits.
const LIMITS: Limits = Limits {
    max_frame_bytes: 1 << 20,
    max_headers: 1000,
    max_header_bytes: 1 << 16,
};

/// Strings mixing characters that stress escaping with arbitrary ones,
/// minus the `forbidden` ones.
fn text(specials: &'static [char], forbidden: &'static [char]) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        3 => prop::sample::select(specials),
        1 => any::<char>(),
        3 => prop::char::range('a', 'e'),
    ];
    prop::collection::vec(ch, 0..12)
        .prop_map(move |cs| cs.into_iter().filter(|c| !forbidden.contains(c)).collect())
}

/// Header names and values that survive `version` for `command`: anything
/// when escaped (1.1 cannot escape `\r`), no EOLs when not (and no colon
/// in names).
fn headers(version: Version, command: Command) -> BoxedStrategy<Vec<(String, String)>> {
    let escaped = version != Version::V1_0 && command.escapes_headers();
    let (specials, name_forbidden, value_forbidden): (_, &[char], &[char]) = match version {
        _ if !escaped => (&[':', '\\', ' '][..], &[':', '\n', '\r'], &['\n', '\r']),
        Version::V1_1 => (&[':', '\n', '\\'][..], &['\r'], &['\r']),
        _ => (&[':', '\n', '\\', '\r'][..], &[], &[]),
    };
    let name = text(specials, name_forbidden)
        .prop_filter("names are non-empty and not content-length", |n| {
            !n.is_empty() && n != "content-length"
        });
    prop::collection::vec((name, text(specials, value_forbidden)), 0..8).boxed()
}

fn command() -> impl Strategy<Value = Command> {
    prop::sample::select(&Command::ALL[..])
}

fn version() -> impl Strategy<Value = Version> {
    prop::sample::select(&[Version::V1_0, Version::V1_1, Version::V1_2][..])
}

/// A case: the frame, and whether to send its body NUL-terminated instead
/// of with a content-length (bodies then hold no NUL).
fn frame_case(version: Version) -> impl Strategy<Value = (Frame, bool)> {
    (command(), any::<bool>()).prop_flat_map(move |(command, nul_terminated)| {
        // Only SEND, MESSAGE and ERROR may have a body (STOMP 1.2).
        let most = if command.allows_body() { 64 } else { 1 };
        let body = prop::collection::vec(any::<u8>(), 0..most).prop_map(move |mut b| {
            if nul_terminated {
                b.retain(|&x| x != 0);
            }
            Bytes::from(b)
        });
        (headers(version, command), body).prop_map(move |(headers, body)| {
            (
                Frame {
                    command,
                    headers,
                    body,
                },
                nul_terminated,
            )
        })
    })
}

/// Writes `frame` and returns the frame the decoder should produce.
fn write(frame: &Frame, nul_terminated: bool, version: Version, out: &mut BytesMut) -> Frame {
    if nul_terminated {
        let headers: Vec<(&str, &str)> = frame
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        encode_head(frame.command, &headers, version, out);
        out.extend_from_slice(&frame.body);
        out.extend_from_slice(b"\0");
        frame.clone()
    } else {
        encode(frame, version, out);
        let mut expected = frame.clone();
        if !frame.body.is_empty() {
            expected
                .headers
                .push(("content-length".into(), frame.body.len().to_string()));
        }
        expected
    }
}

fn decode_stream(chunks: &[&[u8]], version: Version) -> Vec<Decoded> {
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match decode(&mut buf, version, &LIMITS) {
                Ok(Some(item)) => {
                    assert!(buf.len() < before);
                    items.push(item);
                }
                Ok(None) => {
                    assert_eq!(buf.len(), before, "Ok(None) must consume nothing");
                    break;
                }
                Err(e) => panic!("decode failed: {e}"),
            }
        }
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    items
}

fn split_at<'a>(stream: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
    points.push(0);
    points.push(stream.len());
    points.sort_unstable();
    points.windows(2).map(|w| &stream[w[0]..w[1]]).collect()
}

/// A frame, whether its body is NUL-terminated, and how many heart-beats
/// follow it.
type Case = ((Frame, bool), u8);

fn case_stream() -> impl Strategy<Value = (Version, Vec<Case>)> {
    version().prop_flat_map(|v| {
        (
            Just(v),
            prop::collection::vec((frame_case(v), 0u8..3), 1..6),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encode_then_decode_round_trips((version, cases) in case_stream()) {
        for ((frame, nul_terminated), _) in cases {
            let mut out = BytesMut::new();
            let expected = write(&frame, nul_terminated, version, &mut out);
            let items = decode_stream(&[&out], version);
            prop_assert_eq!(items, vec![Decoded::Frame(expected)]);
        }
    }

    #[test]
    fn any_split_decodes_the_same(
        (version, cases) in case_stream(),
        cuts in prop::collection::vec(any::<Index>(), 0..24),
    ) {
        let mut stream = BytesMut::new();
        let mut expected = Vec::new();
        for ((frame, nul_terminated), heartbeats) in &cases {
            expected.push(Decoded::Frame(write(frame, *nul_terminated, version, &mut stream)));
            // EOLs after a frame are heart-beats.
            for i in 0..*heartbeats {
                stream.extend_from_slice(if i % 2 == 0 { b"\r\n" } else { b"\n" });
                expected.push(Decoded::Heartbeat);
            }
        }
        let whole = decode_stream(&[&stream], version);
        prop_assert_eq!(&whole, &expected);
        let split = decode_stream(&split_at(&stream, &cuts), version);
        prop_assert_eq!(split, expected);
    }
}
