//! A loopback TCP proxy in front of a database server, for tests that need a statement "on the
//! wire": [`Proxy::stall`] holds back what clients send on the connections open at that moment
//! (the server sees nothing of it) while connections opened later pass, until
//! [`Proxy::release`] lets the held bytes through, in order; [`Proxy::partition`] holds back
//! every connection's, also those opened later; [`Proxy::sever`] closes the
//! connections open at that moment, as a server ending its sessions would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; it stops accepting when dropped.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    /// Connections accepted so far; each knows its number.
    connections: AtomicUsize,
    /// Connections numbered below this are stalled while `stalled` is true.
    stall_below: AtomicUsize,
    stalled: watch::Sender<bool>,
    /// Client bytes held back since the stall began.
    held_bytes: AtomicU64,
    closed: AtomicBool,
    /// Connections numbered below this are closed.
    severed_below: watch::Sender<usize>,
    /// Connections whose copying still runs.
    open: AtomicUsize,
}

impl Proxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            connections: AtomicUsize::new(0),
            stall_below: AtomicUsize::new(0),
            stalled: watch::Sender::new(false),
            held_bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            severed_below: watch::Sender::new(0),
            open: AtomicUsize::new(0),
        });
        let accepting = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let number = accepting.connections.fetch_add(1, Ordering::SeqCst);
                accepting.open.fetch_add(1, Ordering::SeqCst);
                let shared = Arc::clone(&accepting);
                tokio::spawn(pipe(client, server, number, shared));
            }
        });
        Self {
            port,
            shared,
            accept,
        }
    }

    /// `url` (`scheme://user@host:port/db?…`) pointed at this proxy.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let user = authority
            .rsplit_once('@')
            .map(|(user, _)| format!("{user}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}127.0.0.1:{}{path}", self.port)
    }

    /// Holds back everything clients send from now on over the connections already open;
    /// connections opened after this pass freely.
    pub fn stall(&self) {
        self.shared.held_bytes.store(0, Ordering::SeqCst);
        self.shared.stall_below.store(
            self.shared.connections.load(Ordering::SeqCst),
            Ordering::SeqCst,
        );
        self.shared.stalled.send_replace(true);
    }

    /// A network partition: holds back everything clients send from now on, over every
    /// connection, those open now and those opened later, until [`release`](Self::release).
    pub fn partition(&self) {
        self.shared.held_bytes.store(0, Ordering::SeqCst);
        self.shared.stall_below.store(usize::MAX, Ordering::SeqCst);
        self.shared.stalled.send_replace(true);
    }

    /// How many client bytes are held back by the current stall.
    pub fn held_bytes(&self) -> u64 {
        self.shared.held_bytes.load(Ordering::SeqCst)
    }

    /// Waits until a stalled connection has tried to send something, or `within` passes.
    pub async fn wait_for_held_bytes(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.held_bytes() == 0 {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Lets the held bytes through and ends the stall.
    pub fn release(&self) {
        self.shared.stalled.send_replace(false);
    }

    /// Closes every connection open at this moment, both ways, as a server ending its sessions
    /// would (the client reads the end of its stream); connections opened later pass. How many
    /// were open.
    pub fn sever(&self) -> usize {
        let open = self.shared.open.load(Ordering::SeqCst);
        self.shared
            .severed_below
            .send_replace(self.shared.connections.load(Ordering::SeqCst));
        open
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.stalled.send_replace(false);
        self.accept.abort();
    }
}

/// Copies both ways; client-to-server bytes wait while this connection is stalled; ends (closing
/// both sides) when it is severed.
async fn pipe(client: TcpStream, server: TcpStream, number: usize, shared: Arc<Shared>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        let mut stalled = shared.stalled.subscribe();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let held = *stalled.borrow() && number < shared.stall_below.load(Ordering::SeqCst);
            if held {
                shared.held_bytes.fetch_add(n as u64, Ordering::SeqCst);
                if stalled.wait_for(|stalled| !*stalled).await.is_err() {
                    break;
                }
            }
            if shared.closed.load(Ordering::SeqCst) || sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let mut severed = shared.severed_below.subscribe();
    tokio::select! {
        () = up => {}
        () = down => {}
        _ = severed.wait_for(|below| number < *below) => {}
    }
    shared.open.fetch_sub(1, Ordering::SeqCst);
}
