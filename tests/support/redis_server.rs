//! A private `redis-server` process for one test, for what must not touch the shared server:
//! stopping, restarting, pausing or reconfiguring Redis. It listens on a free loopback port,
//! keeps its files (if any) in a temporary directory of its own, and is killed when dropped,
//! also when the test panics. [`command`] speaks just enough RESP to send a command to any
//! server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `redis-server` binary: `SHEDLOCK_REDIS_SERVER`, else `redis-server` on the `PATH`.
pub fn redis_server_binary() -> String {
    std::env::var("SHEDLOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A loopback port nothing listens on at the moment: bound, then released.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A `redis-server` of one test's own.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// Its working directory (`--dir`): the AOF or RDB files, its log.
    dir: tempfile::TempDir,
    /// Arguments beyond port, bind, dir and log file, as given to [`RedisServer::start`].
    args: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk (`--save "" --appendonly no`), with `args`
    /// added after those (so `--appendonly yes` or `--requirepass …` override them), on a
    /// free port; returns once it answers.
    pub fn start(args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        // The port was free when picked, but another process may take it before the server
        // binds it: a few tries, each on a fresh port.
        Self::start_in(tempfile::tempdir().unwrap(), &args, 5, String::new())
    }

    fn start_in(dir: tempfile::TempDir, args: &[String], tries: usize, log: String) -> Self {
        if tries == 0 {
            panic!("redis-server did not start: {log}");
        }
        let mut server = Self {
            port: free_port(),
            dir,
            args: args.to_vec(),
            child: None,
        };
        match server.launch() {
            Ok(()) => server,
            Err(log) => {
                let dir = std::mem::replace(&mut server.dir, tempfile::tempdir().unwrap());
                drop(server);
                Self::start_in(dir, args, tries - 1, log)
            }
        }
    }

    /// Starts the process on `self.port` with `self.dir` and waits until it answers; `Err`
    /// with its log when it exits or does not answer within 10 s.
    fn launch(&mut self) -> Result<(), String> {
        let log = self.log_path();
        let child = Command::new(redis_server_binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", redis_server_binary()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Any answer (PONG, or NOAUTH when a password is required) means it is serving.
            if command(&self.address(), &["PING"]).is_ok() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if exited || Instant::now() > deadline {
                let mut stderr = String::new();
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                    if let Some(mut err) = child.stderr.take() {
                        let _ = err.read_to_string(&mut stderr);
                    }
                }
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                return Err(format!("{stderr}{log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_path(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.log")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.address())
    }

    /// Its working directory (where an AOF lives).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Kills the process with SIGKILL, a crash (nothing flushed that was not already), and
    /// waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same directory and arguments: what
    /// it kept on disk (its AOF, with `--appendonly yes`) is loaded, else it starts empty.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.launch() {
                Ok(()) => return,
                // The port may linger for a moment after the kill.
                Err(log) if Instant::now() < deadline => {
                    let _ = log;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(log) => panic!("redis-server did not restart on {}: {log}", self.port),
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A reply, as RESP2 gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Reply>),
}

impl Reply {
    /// The elements of an array reply (empty for anything else).
    pub fn items(&self) -> Vec<Reply> {
        match self {
            Reply::Array(items) => items.clone(),
            _ => Vec::new(),
        }
    }

    /// A bulk or status reply as text.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }
}

/// Sends one command to the server at `address` (`host:port`) on a connection of its own and
/// reads its reply (an error reply is `Ok(Reply::Error)`); `Err` when the server cannot be
/// reached or does not answer within 5 s.
pub fn command(address: &str, args: &[&str]) -> Result<Reply, String> {
    let mut stream = TcpStream::connect(address).map_err(|e| format!("{address}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut packet = format!("*{}\r\n", args.len());
    for arg in args {
        packet.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .write_all(packet.as_bytes())
        .map_err(|e| format!("{address}: {e}"))?;
    read_reply(&mut BufReader::new(stream)).map_err(|e| format!("{address}: {e}"))
}

fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(1.min(line.len()));
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| std::io::Error::other(format!("bad RESP line {line:?}")))
    };
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(number()?),
        "$" => match number()? {
            n if n < 0 => Reply::Bulk(None),
            n => {
                let mut buf = vec![0; n as usize + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        },
        "*" => match number()? {
            n if n < 0 => Reply::Array(Vec::new()),
            n => Reply::Array(
                (0..n)
                    .map(|_| read_reply(reader))
                    .collect::<std::io::Result<_>>()?,
            ),
        },
        _ => return Err(std::io::Error::other(format!("bad RESP line {line:?}"))),
    })
}

/// Deletes every key of a key prefix (`{<prefix>}:*`) on the server at `address`.
pub fn delete_prefix(address: &str, prefix: &str) {
    delete_keys(address, &format!("{{{prefix}}}:*"));
}

/// Deletes every key matching the `KEYS` pattern `pattern` (a test's own keys).
pub fn delete_keys(address: &str, pattern: &str) {
    let keys = command(address, &["KEYS", pattern]).unwrap();
    let keys: Vec<String> = keys
        .items()
        .iter()
        .filter_map(|k| k.text().map(str::to_owned))
        .collect();
    if !keys.is_empty() {
        let mut del = vec!["DEL"];
        del.extend(keys.iter().map(String::as_str));
        command(address, &del).unwrap();
    }
}
