use std::collections::VecDeque;

use futures_util::io::AsyncReadExt;

use super::*;

/// A broker whose bytes arrive in the given pieces.
struct Pieces(VecDeque<Vec<u8>>);

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let Some(mut piece) = self.0.pop_front() else {
            return Poll::Ready(Ok(0));
        };
        let n = buf.len().min(piece.len());
        buf[..n].copy_from_slice(&piece[..n]);
        if n < piece.len() {
            self.0.push_front(piece.split_off(n));
        }
        Poll::Ready(Ok(n))
    }
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind, 0, 1];
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f.push(0xCE);
    f
}

/// A content header of `basic` with only `headers` set, to `table`.
fn header_with(table: &[u8]) -> Vec<u8> {
    let mut p = vec![0, 60, 0, 0];
    p.extend_from_slice(&3u64.to_be_bytes());
    p.extend_from_slice(&(1u16 << 13).to_be_bytes());
    p.extend_from_slice(table);
    frame(HEADER, &p)
}

fn nested(levels: usize) -> Vec<u8> {
    nesting::hostile_table(levels)
}

async fn read_all(pieces: Vec<Vec<u8>>) -> io::Result<Vec<u8>> {
    // An empty read is the end of the stream: no empty pieces.
    let pieces = pieces.into_iter().filter(|p| !p.is_empty()).collect();
    let mut s = GuardedStream::new(Pieces(pieces));
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(out)
}

/// Every split of `bytes` into two pieces reads back as `expect`.
async fn every_split(bytes: &[u8], expect: &[u8]) {
    for at in 0..=bytes.len() {
        let out = read_all(vec![bytes[..at].to_vec(), bytes[at..].to_vec()])
            .await
            .unwrap();
        assert_eq!(out, expect, "split at {at}");
    }
}

#[tokio::test]
async fn frames_within_the_bounds_pass_as_they_are_however_they_arrive() {
    let mut bytes = frame(METHOD, &[0, 60, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    bytes.extend(header_with(&nested(3)));
    bytes.extend(frame(3, b"abc"));
    bytes.extend([8, 0, 0, 0, 0, 0, 0, 0xCE]);
    every_split(&bytes, &bytes).await;
    // One byte at a time, too.
    let out = read_all(bytes.iter().map(|b| vec![*b]).collect())
        .await
        .unwrap();
    assert_eq!(out, bytes);
}

#[tokio::test]
async fn a_header_nested_too_deep_reaches_lapin_as_the_reason() {
    let body = frame(3, b"abc");
    let mut bytes = header_with(&nested(3_000));
    bytes.extend_from_slice(&body);
    let out = read_all(vec![bytes]).await.unwrap();
    let size = u32::from_be_bytes([out[3], out[4], out[5], out[6]]) as usize;
    let payload = &out[HEAD..HEAD + size];
    assert_eq!(out[HEAD + size], 0xCE);
    let (_, properties) = amq_protocol::protocol::basic::parse_properties(&payload[12..]).unwrap();
    let headers = properties.headers().as_ref().unwrap();
    assert!(headers.inner().contains_key(nesting::REJECTED_HEADER));
    assert_eq!(
        &out[HEAD + size + 1..],
        &body[..],
        "the body follows unchanged"
    );
}

#[tokio::test]
async fn a_hostile_handshake_fails_the_connection_with_the_reason() {
    let mut start = vec![0, 10, 0, 10, 0, 9];
    start.extend(nested(3_000));
    start.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    let err = read_all(vec![frame(METHOD, &start)]).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("nested deeper than 32"), "{err}");
    // A method no client receives (queue.declare, with its table).
    let err = read_all(vec![frame(METHOD, &[0, 50, 0, 10, 0, 0])])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("50.10"), "{err}");
}

#[tokio::test]
async fn a_protocol_header_and_a_cut_frame_are_handed_on_for_lapin_to_refuse() {
    let header = b"AMQP\x00\x00\x09\x01".to_vec();
    every_split(&header, &header).await;
    let cut = frame(METHOD, &[0, 60, 0, 60, 0, 0])[..9].to_vec();
    every_split(&cut, &cut).await;
}
