//! Property tests: masked client frames decode to the messages they carry,
//! fragmented or not, with control frames interleaved, however the byte
//! stream is split.

use bytes::{Bytes, BytesMut};
use herald_protocol::utf8::Utf8Bytes;
use herald_protocol::websocket::{Decoder, Message, OpCode, encode_masked_frame};
use proptest::prelude::*;
use proptest::sample::Index;

const MAX_MESSAGE: usize = 1 << 16;

/// A control message as sent and as expected back.
fn control() -> impl Strategy<Value = (OpCode, Vec<u8>, Message)> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..=125).prop_map(|p| (
            OpCode::Ping,
            p.clone(),
            Message::Ping(Bytes::from(p))
        )),
        prop::collection::vec(any::<u8>(), 0..=125).prop_map(|p| (
            OpCode::Pong,
            p.clone(),
            Message::Pong(Bytes::from(p))
        )),
        Just((OpCode::Close, Vec::new(), Message::Close(None))),
        (
            prop_oneof![1000u16..=1003, 1007u16..=1011, 3000u16..=4999],
            "[a-zé€😀 ]{0,30}",
        )
            .prop_map(|(code, reason)| {
                let mut p = code.to_be_bytes().to_vec();
                p.extend_from_slice(reason.as_bytes());
                (OpCode::Close, p, Message::Close(Some((code, reason))))
            }),
    ]
}

/// A data message: opcode, payload, and the expected message.
fn data() -> impl Strategy<Value = (OpCode, Vec<u8>, Message)> {
    prop_oneof![
        ".{0,200}".prop_map(|s: String| {
            let bytes = s.clone().into_bytes();
            (OpCode::Text, bytes, Message::Text(Utf8Bytes::from(s)))
        }),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(|b| (
            OpCode::Binary,
            b.clone(),
            Message::Binary(Bytes::from(b))
        )),
    ]
}

/// One data message in fragments (cut anywhere, even inside a UTF-8
/// character), with optional control frames after each non-final fragment.
#[derive(Debug, Clone)]
struct Fragmented {
    opcode: OpCode,
    payload: Vec<u8>,
    cuts: Vec<Index>,
    controls: Vec<Option<(OpCode, Vec<u8>, Message)>>,
    expected: Message,
}

fn fragmented() -> impl Strategy<Value = Fragmented> {
    (
        data(),
        prop::collection::vec(any::<Index>(), 0..5),
        prop::collection::vec(prop::option::weighted(0.4, control()), 5),
    )
        .prop_map(|((opcode, payload, expected), cuts, controls)| Fragmented {
            opcode,
            payload,
            cuts,
            controls,
            expected,
        })
}

/// Encodes the messages; returns the stream and the expected messages.
fn encode_all(messages: &[Fragmented], masks: &[[u8; 4]]) -> (BytesMut, Vec<Message>) {
    let mut out = BytesMut::new();
    let mut expected = Vec::new();
    let mut masks = masks.iter().cycle();
    let mut mask = || *masks.next().unwrap_or(&[0; 4]);
    for m in messages {
        let mut points: Vec<usize> = m
            .cuts
            .iter()
            .map(|i| i.index(m.payload.len() + 1))
            .collect();
        points.push(0);
        points.push(m.payload.len());
        points.sort_unstable();
        let fragments: Vec<&[u8]> = points.windows(2).map(|w| &m.payload[w[0]..w[1]]).collect();
        let last = fragments.len() - 1;
        for (i, fragment) in fragments.iter().enumerate() {
            let opcode = if i == 0 {
                m.opcode
            } else {
                OpCode::Continuation
            };
            encode_masked_frame(i == last, opcode, fragment, mask(), &mut out);
            if i < last
                && let Some(Some((op, payload, message))) = m.controls.get(i)
            {
                encode_masked_frame(true, *op, payload, mask(), &mut out);
                expected.push(message.clone());
            }
        }
        expected.push(m.expected.clone());
    }
    (out, expected)
}

fn decode_chunks(chunks: &[&[u8]]) -> Vec<Message> {
    let mut decoder = Decoder::new(MAX_MESSAGE);
    let mut buf = BytesMut::new();
    let mut messages = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            let before = (buf.len(), decoder.buffered());
            match decoder.decode(&mut buf) {
                Ok(Some(m)) => messages.push(m),
                Ok(None) => {
                    // Nothing consumed, or only whole fragments absorbed.
                    let absorbed = before.0 - buf.len();
                    assert!(absorbed == 0 || decoder.buffered() >= before.1);
                    break;
                }
                Err(e) => panic!("decode failed: {e}"),
            }
        }
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    assert_eq!(decoder.buffered(), 0);
    messages
}

fn split_at<'a>(stream: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
    points.push(0);
    points.push(stream.len());
    points.sort_unstable();
    points.windows(2).map(|w| &stream[w[0]..w[1]]).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn masked_frames_round_trip(
        messages in prop::collection::vec(fragmented(), 1..6),
        masks in prop::collection::vec(any::<[u8; 4]>(), 1..4),
    ) {
        let (stream, expected) = encode_all(&messages, &masks);
        prop_assert_eq!(decode_chunks(&[&stream]), expected);
    }

    #[test]
    fn any_split_decodes_the_same(
        messages in prop::collection::vec(fragmented(), 1..6),
        masks in prop::collection::vec(any::<[u8; 4]>(), 1..4),
        cuts in prop::collection::vec(any::<Index>(), 0..24),
    ) {
        let (stream, expected) = encode_all(&messages, &masks);
        prop_assert_eq!(decode_chunks(&split_at(&stream, &cuts)), expected);
    }

    #[test]
    fn large_lengths_round_trip(len in prop_oneof![Just(125usize), Just(126), 127usize..70_000]) {
        let payload = vec![0x5a; len];
        let mut stream = BytesMut::new();
        encode_masked_frame(true, OpCode::Binary, &payload, [9, 8, 7, 6], &mut stream);
        let mut decoder = Decoder::new(1 << 17);
        prop_assert_eq!(
            decoder.decode(&mut stream),
            Ok(Some(Message::Binary(Bytes::from(payload))))
        );
    }
}
