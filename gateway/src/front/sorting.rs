//! Which path a new connection takes, from the first bytes of its request
//! head.

use std::sync::Arc;

use super::MAX_HEAD;
use crate::sockjs::native::{Native, Receiver};

/// What [`decide`] found.
pub(super) enum Sniffed<'a> {
    /// Not ours: hand the connection to hyper.
    Hyper,
    /// A streaming receiver of `sockjs`: which, and the head's length.
    Stream(&'a Arc<Native>, Receiver, usize),
    /// `GET /ws`, for [`crate::ws::native`]: the head's length.
    Upgrade(usize),
    /// `POST /v1/notifications`, for [`crate::publish_direct`].
    Publish,
}

/// Whose the connection is, from its first `bytes`, if they tell.
/// `publish`: whether a publish may be served directly; `sockjs`: the
/// SockJS service whose streaming receivers are served on the socket.
pub(super) fn decide<'a>(
    bytes: &[u8],
    publish: bool,
    sockjs: Option<&'a Arc<Native>>,
) -> Option<Sniffed<'a>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => {
            let method = req.method.unwrap_or("");
            let path = req.path.unwrap_or("");
            if publish && crate::publish_direct::is_publish_line(method, path, req.version) {
                return Some(Sniffed::Publish);
            }
            Some(classify(method, path, len, sockjs))
        }
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => {
            // Decide early when the request line already says no.
            let line_end = bytes.iter().position(|&b| b == b'\n')?;
            let line = String::from_utf8_lossy(&bytes[..line_end]);
            let mut parts = line.split(' ');
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if publish && crate::publish_direct::is_publish_line(method, path, Some(1)) {
                // Its version and headers are still to come.
                return None;
            }
            matches!(classify(method, path, 0, sockjs), Sniffed::Hyper).then_some(Sniffed::Hyper)
        }
        // Too long or malformed: hyper answers as usual.
        _ => Some(Sniffed::Hyper),
    }
}

fn classify<'a>(
    method: &str,
    path: &str,
    head_len: usize,
    sockjs: Option<&'a Arc<Native>>,
) -> Sniffed<'a> {
    if crate::ws::native::is_upgrade_line(method, path) {
        return Sniffed::Upgrade(head_len);
    }
    match sockjs.and_then(|s| Some((s, s.receiver(method, path)?))) {
        Some((sockjs, receiver)) => Sniffed::Stream(sockjs, receiver, head_len),
        None => Sniffed::Hyper,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPGRADE: &[u8] = b"GET /ws?token=t HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n";
    const PUBLISH: &[u8] =
        b"POST /v1/notifications HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}";
    const STREAM: &[u8] = b"POST /sockjs/000/abc/xhr_streaming HTTP/1.1\r\nHost: h\r\n\r\n";

    /// With no SockJS service, `/ws` upgrades and publishes still take
    /// their paths, and a streaming receiver's request is hyper's.
    #[test]
    fn the_fast_paths_need_no_sockjs_service() {
        assert!(matches!(
            decide(UPGRADE, true, None),
            Some(Sniffed::Upgrade(n)) if n == UPGRADE.len()
        ));
        assert!(matches!(
            decide(PUBLISH, true, None),
            Some(Sniffed::Publish)
        ));
        assert!(matches!(decide(STREAM, true, None), Some(Sniffed::Hyper)));
    }

    #[test]
    fn a_publish_is_hyper_s_when_not_served_directly() {
        assert!(matches!(decide(PUBLISH, false, None), Some(Sniffed::Hyper)));
    }

    #[test]
    fn a_request_line_decides_early_only_when_it_says_no() {
        // Another route: hyper's, before the head is whole.
        assert!(matches!(
            decide(b"GET /healthz HTTP/1.1\r\nHost:", true, None),
            Some(Sniffed::Hyper)
        ));
        // A `/ws` upgrade or a publish waits for its whole head.
        assert!(decide(b"GET /ws HTTP/1.1\r\nHost:", true, None).is_none());
        assert!(decide(b"POST /v1/notifications HTTP/1.1\r\nHost:", true, None).is_none());
        // No request line yet: wait.
        assert!(decide(b"GET /w", true, None).is_none());
    }

    #[test]
    fn a_head_too_long_or_malformed_is_hyper_s() {
        let long = vec![b'a'; MAX_HEAD];
        assert!(matches!(decide(&long, true, None), Some(Sniffed::Hyper)));
        assert!(matches!(
            decide(b"\x00\x01 nonsense\r\n\r\n", true, None),
            Some(Sniffed::Hyper)
        ));
    }
}
