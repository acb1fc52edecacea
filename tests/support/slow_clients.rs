//! Slow clients of an HTTP server, for the tests of its bounds: connections that send part of
//! a request head and wait, and whether the server closes them.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `count` connections to `address`, each having sent `head` (an unfinished request head).
pub async fn open(address: &str, count: usize, head: &[u8]) -> Vec<TcpStream> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = TcpStream::connect(address).await.expect("connecting");
        stream
            .write_all(head)
            .await
            .expect("sending part of a request head");
        streams.push(stream);
    }
    streams
}

/// Whether the server closes `stream` (end of stream or a reset) within `within`.
pub async fn closed(mut stream: TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap_or(false)
}

/// How many of `streams` the server closes within `within` each.
pub async fn count_closed(streams: Vec<TcpStream>, within: Duration) -> usize {
    let mut closed_ones = 0;
    for stream in streams {
        closed_ones += usize::from(closed(stream, within).await);
    }
    closed_ones
}
