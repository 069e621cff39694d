//! Helpers for the crate's unit tests.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// A loopback connection: the client's end, the server's (accepted) end,
/// and the client's address as the server saw it.
pub(crate) async fn loopback_pair() -> (TcpStream, TcpStream, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, peer) = listener.accept().await.unwrap();
    (client, server, peer)
}
