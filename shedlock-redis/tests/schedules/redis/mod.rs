//! What every case uses: a prefix of its own on the shared server, a private server, a
//! new job, a wait with a generous deadline.

mod backfills;
mod crud;
mod feed;
mod history;
mod scale;
mod triggers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use shedlock::schedules::NewSchedule;
use shedlock_redis::RedisLockProvider;

pub(super) fn url() -> String {
    std::env::var("SHEDLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A provider on a prefix of its own, and a connection for the test's own commands.
pub(super) struct Keys {
    pub(super) prefix: String,
    pub(super) provider: RedisLockProvider,
    pub(super) conn: MultiplexedConnection,
}

impl Keys {
    pub(super) async fn new() -> Self {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let prefix = format!(
            "sched_{:x}_{:x}_{}",
            std::process::id(),
            nanos % (1 << 40),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let conn = redis::Client::open(url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the Redis server at {} does not answer ({e}); start it with: redis-server \
                     --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no",
                    url()
                )
            });
        let provider = RedisLockProvider::builder(url().as_str())
            .table_name(prefix.as_str())
            .build()
            .await
            .unwrap();
        Self {
            prefix,
            provider,
            conn,
        }
    }

    pub(super) fn key(&self, rest: &str) -> String {
        format!("{{{}}}:{rest}", self.prefix)
    }

    /// Every key of the prefix, sorted.
    pub(super) async fn keys(&self) -> Vec<String> {
        let mut conn = self.conn.clone();
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{{{}}}*", self.prefix))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        keys
    }

    pub(super) async fn cleanup(self) {
        let mut conn = self.conn.clone();
        for chunk in self.keys().await.chunks(1000) {
            let _: i64 = conn.del(chunk).await.unwrap();
        }
    }
}

pub(super) fn job(name: &str, cron: &str) -> NewSchedule {
    NewSchedule::job(name, "sync", r#"{"repository_id": 42}"#, cron, None)
}

/// Waits up to 20 s for `check` to answer true.
pub(super) async fn eventually<F: AsyncFnMut() -> bool>(mut check: F, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Redis server of the test's own (killed when dropped), for what must not touch the
/// shared one: its death, its users.
pub(super) struct Private {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Private {
    pub(super) async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("shedlock_sched_{}_{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir", dir.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on the PATH");
        let server = Self { child, port, dir };
        let url = server.url("");
        eventually(
            async || {
                let Ok(client) = redis::Client::open(url.as_str()) else {
                    return false;
                };
                client.get_multiplexed_async_connection().await.is_ok()
            },
            "the private server answers",
        )
        .await;
        server
    }

    /// Its URL, as `user` (password `pw`) when one is given.
    pub(super) fn url(&self, user: &str) -> String {
        match user {
            "" => format!("redis://127.0.0.1:{}", self.port),
            user => format!("redis://{user}:pw@127.0.0.1:{}", self.port),
        }
    }

    pub(super) async fn command(&self, args: &[&str]) {
        let mut conn = redis::Client::open(self.url(""))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let () = cmd.query_async(&mut conn).await.unwrap();
    }

    pub(super) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
