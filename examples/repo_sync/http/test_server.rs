//! A hand-rolled HTTP/1.1 server on `127.0.0.1`, for the unit tests of the HTTP clients: it
//! records every request ([`Seen`]) and answers what the test's closure says ([`Reply`]),
//! including the misbehaviours a client must survive (a server that never answers, a body
//! that stalls or never ends).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::percent_decode;

/// A request as the test server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The request target as sent (still percent-encoded): `/path?query`.
    pub(crate) target: String,
    /// Request line and headers, header names lower-cased.
    pub(crate) head: String,
    /// The body (as long as its `Content-Length`; empty without one).
    pub(crate) body: Vec<u8>,
}

impl Seen {
    /// The value of header `name` (lower-case), trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            (n == name).then(|| v.trim().to_owned())
        })
    }

    /// The target without its query string.
    pub(crate) fn path(&self) -> &str {
        self.target.split_once('?').map_or(&self.target, |(p, _)| p)
    }

    /// The decoded value of query parameter `key`.
    pub(crate) fn query(&self, key: &str) -> Option<String> {
        let (_, query) = self.target.split_once('?')?;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == key).then(|| percent_decode(v).unwrap())
        })
    }

    /// The body as JSON (`null` when it is not JSON).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What the server answers.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A status, extra headers and a JSON body.
    Json(u16, Vec<(&'static str, String)>, serde_json::Value),
    /// A status and a `text/plain` body.
    Bytes(u16, Vec<u8>),
    /// Announces `Content-Length: len`, sends `sent` bytes, then holds the connection open.
    Stall {
        /// The announced length.
        len: u64,
        /// The bytes actually sent.
        sent: usize,
    },
    /// A chunked body of 1 KiB chunks that never ends (until the client goes away).
    Endless,
    /// Never answers.
    Hang,
}

impl Reply {
    /// A status and a `text/plain` body.
    pub(crate) fn text(status: u16, text: &str) -> Reply {
        Reply::Bytes(status, text.as_bytes().to_vec())
    }
}

/// A running test server; it stops with the test's runtime.
#[derive(Debug)]
pub(crate) struct TestServer {
    /// `http://127.0.0.1:<port>`.
    pub(crate) base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Body bytes written by [`Reply::Endless`].
    streamed: Arc<AtomicU64>,
}

impl TestServer {
    /// Every request so far, in the order they arrived.
    pub(crate) fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Body bytes written so far by [`Reply::Endless`].
    pub(crate) fn streamed(&self) -> u64 {
        self.streamed.load(Ordering::Relaxed)
    }
}

/// Starts a server on `127.0.0.1:0`; `reply` gets the 0-based number of the request (counted
/// over all connections) and the request.
pub(crate) async fn serve<F>(reply: F) -> TestServer
where
    F: Fn(usize, &Seen) -> Reply + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let streamed = Arc::new(AtomicU64::new(0));
    let reply = Arc::new(reply);
    let (seen2, streamed2) = (seen.clone(), streamed.clone());
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let (seen, streamed, reply) = (seen2.clone(), streamed2.clone(), reply.clone());
            tokio::spawn(async move {
                let Some((request, socket)) = read_request(socket).await else {
                    return;
                };
                let number = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(request.clone());
                    seen.len() - 1
                };
                answer(socket, reply(number, &request), &streamed).await;
            });
        }
    });
    TestServer {
        base_url,
        seen,
        streamed,
    }
}

/// Port on `127.0.0.1` that nothing listens on (bound, then released).
pub(crate) async fn unused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// Reads one request: its head, then as many body bytes as `Content-Length` says. `None` when
/// the client goes away first.
async fn read_request(mut socket: TcpStream) -> Option<(Seen, TcpStream)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let text = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let target = text.split(' ').nth(1).unwrap_or_default().to_owned();
    let head: String = text
        .lines()
        .map(|l| match l.split_once(':') {
            Some((n, v)) => format!("{}:{v}\n", n.to_ascii_lowercase()),
            None => format!("{l}\n"),
        })
        .collect();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < header_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf[header_end..header_end + length].to_vec();
    Some((Seen { target, head, body }, socket))
}

/// Writes `reply` and closes the connection (or holds it open, for [`Reply::Stall`] and
/// [`Reply::Hang`]).
async fn answer(mut socket: TcpStream, reply: Reply, streamed: &AtomicU64) {
    let (status, content_type, headers, body) = match reply {
        Reply::Json(s, h, v) => (s, "application/json", h, v.to_string().into_bytes()),
        Reply::Bytes(s, b) => (s, "text/plain", vec![], b),
        Reply::Stall { len, sent } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\n\r\n"
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&vec![b'x'; sent]).await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        Reply::Endless => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\
                        Transfer-Encoding: chunked\r\n\r\n";
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut frame = b"400\r\n".to_vec();
            frame.extend_from_slice(&[b'y'; 1024]);
            frame.extend_from_slice(b"\r\n");
            while socket.write_all(&frame).await.is_ok() {
                streamed.fetch_add(1024, Ordering::Relaxed);
            }
            return;
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
    };
    let mut response = format!(
        "HTTP/1.1 {status} Test\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    let mut bytes = response.into_bytes();
    bytes.extend_from_slice(&body);
    let _ = socket.write_all(&bytes).await;
    let _ = socket.shutdown().await;
}
