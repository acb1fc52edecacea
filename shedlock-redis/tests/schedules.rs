//! The schedules kept in Redis (`ScheduleStore for RedisLockProvider`), against the server of
//! `SHEDLOCK_REDIS_URL`, each test on a key prefix of its own whose keys it deletes afterwards
//! (found with `SCAN`). Tests are named `redis::…`, so a run can leave the backend out by name.
//! The cases follow the conformance kit's schedule topic, so they can be swapped for it.
#![allow(missing_docs)]

mod redis {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use futures_util::{StreamExt, TryStreamExt, stream};
    use redis::AsyncCommands;
    use redis::aio::MultiplexedConnection;
    use shedlock::schedules::{
        NewSchedule, RetryPolicy, ScheduleChange, ScheduleStore, TriggerAnswer,
    };
    use shedlock::{Error, LockAdmin};
    use shedlock_redis::RedisLockProvider;
    use tokio::sync::Mutex;

    fn url() -> String {
        std::env::var("SHEDLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    }

    /// A provider on a prefix of its own, and a connection for the test's own commands.
    struct Keys {
        prefix: String,
        provider: RedisLockProvider,
        conn: MultiplexedConnection,
    }

    impl Keys {
        async fn new() -> Self {
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

        fn key(&self, rest: &str) -> String {
            format!("{{{}}}:{rest}", self.prefix)
        }

        /// Every key of the prefix, sorted.
        async fn keys(&self) -> Vec<String> {
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

        async fn cleanup(self) {
            let mut conn = self.conn.clone();
            for chunk in self.keys().await.chunks(1000) {
                let _: i64 = conn.del(chunk).await.unwrap();
            }
        }
    }

    fn job(name: &str, cron: &str) -> NewSchedule {
        NewSchedule::job(name, "sync", r#"{"repository_id": 42}"#, cron, None)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_crud_with_versions_strictly_increasing() {
        let k = Keys::new().await;
        let p = &k.provider;
        p.migrate().await.unwrap();
        assert_eq!(p.schedules_version().await.unwrap(), 0);
        assert_eq!(p.schedule("a").await.unwrap(), None);
        let mut versions = Vec::new();

        let a = p
            .create_schedule(&job("a", "0 */5 * * * *"), "ops")
            .await
            .unwrap();
        assert_eq!(a.handler.as_deref(), Some("sync"));
        assert_eq!(a.payload.as_deref(), Some(r#"{"repository_id": 42}"#));
        assert_eq!(a.cron.as_deref(), Some("0 */5 * * * *"));
        assert_eq!(
            (a.paused, a.deleted, a.updated_by.as_str()),
            (false, false, "ops")
        );
        assert_eq!(p.schedule("a").await.unwrap().as_ref(), Some(&a));
        versions.push(a.version);

        let change = ScheduleChange::new()
            .cron("0 0 3 * * *", Some("Europe/Berlin".into()))
            .paused(true)
            .jitter(Some(Duration::from_millis(1500)))
            .retry(Some(RetryPolicy::new(
                3,
                Duration::from_secs(1),
                Duration::from_secs(30),
            )));
        let a2 = p.update_schedule("a", &change, "alice").await.unwrap();
        assert_eq!(a2.cron.as_deref(), Some("0 0 3 * * *"));
        assert_eq!(a2.time_zone.as_deref(), Some("Europe/Berlin"));
        assert!(a2.paused);
        assert_eq!(a2.jitter, Some(Duration::from_millis(1500)));
        let retry = a2.retry.unwrap();
        assert_eq!(
            (retry.max_attempts, retry.cap),
            (3, Duration::from_secs(30))
        );
        assert_eq!(a2.handler.as_deref(), Some("sync"), "kept");
        assert_eq!(a2.updated_by, "alice");
        versions.push(a2.version);

        let a3 = p
            .update_schedule(
                "a",
                &ScheduleChange::new().paused(false).jitter(None).retry(None),
                "bob",
            )
            .await
            .unwrap();
        assert_eq!((a3.paused, a3.jitter, a3.retry), (false, None, None));
        assert_eq!(a3.cron.as_deref(), Some("0 0 3 * * *"), "kept");
        versions.push(a3.version);

        // An update of a name without a schedule creates an override.
        let o = p
            .update_schedule("code_job", &ScheduleChange::new().paused(true), "ops")
            .await
            .unwrap();
        assert_eq!(
            (o.handler.as_deref(), o.cron.as_deref(), o.paused),
            (None, None, true)
        );
        versions.push(o.version);

        assert!(p.delete_schedule("a", "ops").await.unwrap());
        assert!(
            !p.delete_schedule("a", "ops").await.unwrap(),
            "already a tombstone"
        );
        assert!(!p.delete_schedule("never", "ops").await.unwrap());
        let gone = p.schedule("a").await.unwrap().unwrap();
        assert!(gone.deleted);
        versions.push(gone.version);

        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        assert_eq!(
            p.schedules_version().await.unwrap(),
            *versions.last().unwrap()
        );
        let all = p.schedules_since(0).await.unwrap();
        let names: Vec<_> = all.iter().map(|s| (s.name.as_str(), s.version)).collect();
        assert_eq!(names, [("code_job", versions[3]), ("a", versions[4])]);
        k.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_tombstones_are_read_and_reused() {
        let k = Keys::new().await;
        let p = &k.provider;
        p.create_schedule(&job("a", "0 * * * * *"), "ops")
            .await
            .unwrap();
        p.create_schedule(&job("b", "0 * * * * *"), "ops")
            .await
            .unwrap();
        let seen = p.schedules_version().await.unwrap();
        assert!(p.delete_schedule("a", "ops").await.unwrap());
        let changes = p.schedules_since(seen).await.unwrap();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].deleted && changes[0].name == "a");
        assert!(changes[0].version > seen);

        let e = p
            .create_schedule(&job("b", "0 * * * * *"), "ops")
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::ScheduleExists { name } if name == "b"),
            "{e:?}"
        );

        let again = p
            .create_schedule(
                &NewSchedule::job("a", "other", "[1, 2]", "0 0 * * * *", Some("UTC".into())),
                "carol",
            )
            .await
            .unwrap();
        assert!(!again.deleted);
        assert!(again.version > changes[0].version);
        assert_eq!(again.handler.as_deref(), Some("other"));
        assert_eq!(again.payload.as_deref(), Some("[1, 2]"));
        let hashes = k
            .keys()
            .await
            .into_iter()
            .filter(|key| key.contains(":schedule:"))
            .count();
        assert_eq!(hashes, 2, "the tombstone's hash was reused");

        // An update of a tombstone makes an override: nothing of the run-time job is kept.
        assert!(p.delete_schedule("b", "ops").await.unwrap());
        let b = p
            .update_schedule("b", &ScheduleChange::new().paused(true), "ops")
            .await
            .unwrap();
        assert_eq!(
            (b.handler, b.payload, b.cron, b.deleted),
            (None, None, None, false)
        );
        k.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_bad_input_is_refused_and_nothing_written() {
        let k = Keys::new().await;
        let p = &k.provider;
        p.create_schedule(&job("a", "0 * * * * *"), "ops")
            .await
            .unwrap();
        let version = p.schedules_version().await.unwrap();
        let before = p.schedule("a").await.unwrap();
        let keys = k.keys().await;

        let e = p
            .create_schedule(&job("x", "0 */61 * * * *"), "ops")
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidCron { .. }), "{e:?}");
        let e = p
            .create_schedule(
                &NewSchedule::job(
                    "x",
                    "sync",
                    "{}",
                    "0 * * * * *",
                    Some("Europe/Berln".into()),
                ),
                "ops",
            )
            .await
            .unwrap_err();
        assert!(matches!(e, Error::UnknownTimeZone { .. }), "{e:?}");
        assert!(
            e.to_string().contains("Europe/Berlin"),
            "the closest name: {e}"
        );
        let e = p
            .create_schedule(
                &NewSchedule::job("x", "sync", "{oops", "0 * * * * *", None),
                "ops",
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidSchedule { reason, .. } if reason.contains("JSON")),
            "{e:?}"
        );
        let mut no_cron = job("x", "0 * * * * *");
        no_cron.fields.cron = None;
        let e = p.create_schedule(&no_cron, "ops").await.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidSchedule { reason, .. } if reason.contains("cron")),
            "{e:?}"
        );
        let mut clear_cron = ScheduleChange::new();
        clear_cron.cron = Some(None);
        let e = p
            .update_schedule("a", &clear_cron, "ops")
            .await
            .unwrap_err();
        assert!(matches!(&e, Error::InvalidSchedule { .. }), "{e:?}");
        let e = p
            .update_schedule(
                "y",
                &ScheduleChange::new().payload(Some("{}".into())),
                "ops",
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidSchedule { reason, .. } if reason.contains("payload")),
            "{e:?}"
        );
        let e = p
            .update_schedule("a", &ScheduleChange::new().cron("every day", None), "ops")
            .await
            .unwrap_err();
        assert!(matches!(e, Error::InvalidCron { .. }), "{e:?}");
        for bad in ["", " a", "a\n"] {
            assert!(
                p.create_schedule(&job(bad, "0 * * * * *"), "ops")
                    .await
                    .is_err(),
                "{bad:?}"
            );
        }

        assert_eq!(p.schedules_version().await.unwrap(), version);
        assert_eq!(p.schedule("a").await.unwrap(), before);
        assert_eq!(k.keys().await, keys);
        k.cleanup().await;
    }

    /// Eight writers make twenty updates each while a poller reads what changed since the
    /// version it last saw: every update with a version in a poll's range is in that poll's
    /// answer (at that version or a later one), and each answer is ordered by version.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_a_poller_never_misses_a_change_of_concurrent_writers() {
        let k = Keys::new().await;
        let p = Arc::new(k.provider.clone());
        let writers = 8;
        let updates = 20;
        for w in 0..writers {
            p.create_schedule(&job(&format!("w{w}"), "0 * * * * *"), "setup")
                .await
                .unwrap();
        }
        let start = p.schedules_version().await.unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        type Poll = (i64, Vec<(String, i64)>);
        let polls: Arc<Mutex<Vec<Poll>>> = Arc::default();
        let poller = {
            let (p, done, polls) = (Arc::clone(&p), Arc::clone(&done), Arc::clone(&polls));
            tokio::spawn(async move {
                let mut seen = start;
                loop {
                    let last = done.load(Ordering::SeqCst);
                    if p.schedules_version().await.unwrap() > seen {
                        let rows = p.schedules_since(seen).await.unwrap();
                        assert!(rows.windows(2).all(|w| w[0].version < w[1].version));
                        assert!(rows.iter().all(|r| r.version > seen));
                        let max = rows.iter().map(|r| r.version).max().unwrap();
                        polls.lock().await.push((
                            seen,
                            rows.iter().map(|r| (r.name.clone(), r.version)).collect(),
                        ));
                        seen = max;
                    }
                    if last {
                        return seen;
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        let mut tasks = Vec::new();
        for w in 0..writers {
            let p = Arc::clone(&p);
            tasks.push(tokio::spawn(async move {
                let name = format!("w{w}");
                let mut versions = Vec::new();
                for i in 0..updates {
                    let change = ScheduleChange::new().paused(i % 2 == 0);
                    versions.push(
                        p.update_schedule(&name, &change, "writer")
                            .await
                            .unwrap()
                            .version,
                    );
                }
                (name, versions)
            }));
        }
        let mut made = Vec::new();
        for t in tasks {
            let (name, versions) = t.await.unwrap();
            assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
            made.extend(versions.into_iter().map(|v| (name.clone(), v)));
        }
        done.store(true, Ordering::SeqCst);
        let seen = poller.await.unwrap();
        let mut all: Vec<i64> = made.iter().map(|(_, v)| *v).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), writers * updates, "every version is unique");
        assert_eq!(seen, p.schedules_version().await.unwrap());
        assert_eq!(seen, start + (writers * updates) as i64);
        let polls = polls.lock().await;
        for (name, v) in &made {
            let (_, rows) = polls
                .iter()
                .find(|(from, rows)| *from < *v && rows.iter().any(|(_, r)| r >= v))
                .unwrap_or_else(|| panic!("no poll covers {name} at {v}"));
            assert!(
                rows.iter().any(|(n, r)| n == name && r >= v),
                "{name} at version {v} missed by the poll {rows:?}"
            );
        }
        eprintln!("{} polls saw {} updates", polls.len(), made.len());
        drop(polls);
        k.cleanup().await;
    }

    /// Waits up to 20 s for `check` to answer true.
    async fn eventually<F: AsyncFnMut() -> bool>(mut check: F, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check().await {
            assert!(Instant::now() < deadline, "{what} within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_triggers_are_requested_claimed_leased_started_and_finished() {
        let k = Keys::new().await;
        let p = &k.provider;
        let long = Duration::from_secs(60);
        let short = Duration::from_millis(300);
        // A code-defined job without a row: the request creates an override.
        let TriggerAnswer::Requested { id } = p.request_trigger("nightly", "alice").await.unwrap()
        else {
            panic!("requested")
        };
        let row = p.schedule("nightly").await.unwrap().unwrap();
        assert_eq!((row.handler.as_deref(), row.version), (None, id));
        let t = row.trigger.unwrap();
        assert_eq!(
            (t.id, t.requested_by.as_str(), t.started),
            (id, "alice", false)
        );
        match p.request_trigger("nightly", "bob").await.unwrap() {
            TriggerAnswer::AlreadyPending(t) => {
                assert_eq!((t.id, t.requested_by.as_str()), (id, "alice"))
            }
            other => panic!("{other:?}"),
        }
        assert!(
            !p.claim_trigger("nightly", id + 1, "a", long).await.unwrap(),
            "another id"
        );
        assert!(p.claim_trigger("nightly", id, "a", short).await.unwrap());
        assert!(
            !p.claim_trigger("nightly", id, "b", long).await.unwrap(),
            "a live claim"
        );
        assert!(matches!(
            p.request_trigger("nightly", "bob").await.unwrap(),
            TriggerAnswer::AlreadyPending(_)
        ));
        // a's claim runs out: b takes it over, and a can no longer start it.
        eventually(
            async || p.claim_trigger("nightly", id, "b", long).await.unwrap(),
            "b's claim",
        )
        .await;
        assert!(
            !p.start_trigger("nightly", id, "a", long).await.unwrap(),
            "a's claim was lost"
        );
        assert!(p.start_trigger("nightly", id, "b", long).await.unwrap());
        assert!(
            !p.start_trigger("nightly", id, "b", long).await.unwrap(),
            "started once"
        );
        assert!(
            !p.claim_trigger("nightly", id, "c", long).await.unwrap(),
            "started: no claim"
        );
        match p.request_trigger("nightly", "bob").await.unwrap() {
            TriggerAnswer::AlreadyPending(t) => {
                assert!(t.started);
                assert_eq!(t.claimed_by.as_deref(), Some("b"));
            }
            other => panic!("{other:?}"),
        }
        let before = p.schedules_version().await.unwrap();
        assert!(!p.finish_trigger("nightly", id + 1).await.unwrap());
        assert!(p.finish_trigger("nightly", id).await.unwrap());
        assert!(!p.finish_trigger("nightly", id).await.unwrap());
        let row = p.schedule("nightly").await.unwrap().unwrap();
        assert_eq!(row.trigger, None);
        assert!(row.version > before, "readers learn the request is gone");

        // A run that started and whose lease ran out (its instance died) counts as ended.
        let TriggerAnswer::Requested { id: id2 } = p.request_trigger("nightly", "c").await.unwrap()
        else {
            panic!("requested")
        };
        assert!(id2 > id);
        assert!(p.claim_trigger("nightly", id2, "a", long).await.unwrap());
        assert!(p.start_trigger("nightly", id2, "a", short).await.unwrap());
        eventually(
            async || {
                matches!(
                    p.request_trigger("nightly", "d").await.unwrap(),
                    TriggerAnswer::Requested { .. }
                )
            },
            "a request after the started run's lease ran out",
        )
        .await;
        k.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_a_corrupted_value_is_an_error_naming_key_and_field() {
        let k = Keys::new().await;
        let p = &k.provider;
        let mut conn = k.conn.clone();
        p.create_schedule(&job("a", "0 * * * * *"), "ops")
            .await
            .unwrap();
        let key = k.key("schedule:a");
        let _: () = conn.hset(&key, "paused", "yes").await.unwrap();
        let version = p.schedules_version().await.unwrap();
        for e in [
            p.schedule("a").await.unwrap_err(),
            p.schedules_since(0).await.unwrap_err(),
            p.delete_schedule("a", "ops").await.unwrap_err(),
            p.update_schedule("a", &ScheduleChange::new().jitter(None), "ops")
                .await
                .unwrap_err(),
        ] {
            let text = e.to_string();
            assert!(
                matches!(&e, Error::UnreadableRow { location, .. } if *location == key),
                "{e:?}"
            );
            assert!(
                text.contains("`paused`") && text.contains("\"yes\""),
                "{text}"
            );
        }
        assert_eq!(
            p.schedules_version().await.unwrap(),
            version,
            "nothing written"
        );
        // An update that sets the field repairs it.
        let fixed = p
            .update_schedule("a", &ScheduleChange::new().paused(false), "ops")
            .await
            .unwrap();
        assert!(!fixed.paused);

        let _: () = conn.hset(&key, "version", "1e9").await.unwrap();
        let e = p.schedule("a").await.unwrap_err();
        assert!(e.to_string().contains("`version`"), "{e}");
        let _: () = conn.hset(&key, "version", "1").await.unwrap();

        // A key of another type: named, and migrate() finds it.
        let _: () = conn
            .set(k.key("schedules"), "not a sorted set")
            .await
            .unwrap();
        for e in [
            p.schedules_version().await.unwrap_err(),
            p.schedules_since(0).await.unwrap_err(),
            p.migrate().await.unwrap_err(),
        ] {
            assert!(
                matches!(&e, Error::WrongType { key, found, .. } if *key == k.key("schedules") && found == "string"),
                "{e:?}"
            );
        }
        let _: () = conn.del(k.key("schedules")).await.unwrap();
        let _: () = conn
            .set(k.key("schedules:version"), "twelve")
            .await
            .unwrap();
        let e = p.schedules_version().await.unwrap_err();
        assert!(e.to_string().contains("twelve"), "{e}");
        k.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_versions_never_go_back_when_the_counter_is_deleted() {
        let k = Keys::new().await;
        let p = &k.provider;
        let mut conn = k.conn.clone();
        let mut last = 0;
        for i in 0..5 {
            last = p
                .create_schedule(&job(&format!("j{i}"), "0 * * * * *"), "ops")
                .await
                .unwrap()
                .version;
        }
        let _: () = conn.del(k.key("schedules:version")).await.unwrap();
        assert_eq!(p.schedules_version().await.unwrap(), last);
        let next = p
            .update_schedule("j0", &ScheduleChange::new().paused(true), "ops")
            .await
            .unwrap();
        assert_eq!(next.version, last + 1);
        k.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_change_feed_yields_after_a_change() {
        let k = Keys::new().await;
        let p = &k.provider;
        let mut feed = p.change_feed().await.unwrap().expect("Redis has a feed");
        p.create_schedule(&job("a", "0 * * * * *"), "ops")
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), feed.next())
            .await
            .expect("a notice within 20 s")
            .expect("the feed is open");
        k.cleanup().await;
    }

    /// A Redis server of the test's own (killed when dropped), for what must not touch the
    /// shared one: its death, its users.
    struct Private {
        child: std::process::Child,
        port: u16,
        dir: std::path::PathBuf,
    }

    impl Private {
        async fn start() -> Self {
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
        fn url(&self, user: &str) -> String {
            match user {
                "" => format!("redis://127.0.0.1:{}", self.port),
                user => format!("redis://{user}:pw@127.0.0.1:{}", self.port),
            }
        }

        async fn command(&self, args: &[&str]) {
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

        fn stop(&mut self) {
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

    /// The feed's connection lost (its private server stopped): the stream ends, so a watcher
    /// knows to read the changes and ask for a new feed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_change_feed_ends_when_its_connection_is_lost() {
        let mut server = Private::start().await;
        let p = RedisLockProvider::connect(&server.url("")).await.unwrap();
        let mut feed = p.change_feed().await.unwrap().unwrap();
        p.create_schedule(&job("a", "0 * * * * *"), "ops")
            .await
            .unwrap();
        let first = tokio::time::timeout(Duration::from_secs(20), feed.next()).await;
        server.stop();
        assert_eq!(first.expect("a notice within 20 s"), Some(()));
        let end = tokio::time::timeout(Duration::from_secs(20), feed.next())
            .await
            .expect("the feed ends within 20 s of the server's death");
        assert_eq!(end, None);
    }

    /// A user with the documented rules (`~{<prefix>}:*`, `REQUIRED_COMMANDS`,
    /// `SCHEDULE_COMMANDS`, `&{<prefix>}:schedules`) can do every schedule operation and
    /// follow the feed; one without the channel still makes changes (the feed is refused); one
    /// with the lock rules only is told what the schedules need.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_acl_rules_are_documented() {
        use shedlock_redis::{REQUIRED_COMMANDS, SCHEDULE_COMMANDS};
        let server = Private::start().await;
        let rules = |extra: &[&'static str]| -> Vec<&'static str> {
            let mut rules = vec!["~{acl}:*"];
            rules.extend(REQUIRED_COMMANDS.split(' '));
            rules.extend(extra);
            rules
        };
        let schedules: Vec<&str> = SCHEDULE_COMMANDS.split(' ').collect();
        for (user, extra) in [
            ("app", [&schedules[..], &["&{acl}:schedules"]].concat()),
            ("no_channel", schedules.clone()),
            ("locks_only", Vec::new()),
        ] {
            let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
            args.extend(rules(&extra));
            server.command(&args).await;
        }
        let provider = async |user: &str| {
            RedisLockProvider::builder(server.url(user).as_str())
                .table_name("acl")
                .build()
                .await
                .unwrap()
        };
        let p = provider("app").await;
        p.migrate().await.unwrap();
        let mut feed = p.change_feed().await.unwrap().unwrap();
        p.create_schedule(&job("a", "0 * * * * *"), "ops")
            .await
            .unwrap();
        p.update_schedule("a", &ScheduleChange::new().paused(true), "ops")
            .await
            .unwrap();
        let TriggerAnswer::Requested { id } = p.request_trigger("a", "ops").await.unwrap() else {
            panic!("requested")
        };
        let lease = Duration::from_secs(60);
        assert!(p.claim_trigger("a", id, "me", lease).await.unwrap());
        assert!(p.start_trigger("a", id, "me", lease).await.unwrap());
        assert!(p.finish_trigger("a", id).await.unwrap());
        assert!(p.delete_schedule("a", "ops").await.unwrap());
        assert_eq!(p.schedules_since(0).await.unwrap().len(), 1);
        assert!(p.schedule("a").await.unwrap().unwrap().deleted);
        assert!(p.schedules_version().await.unwrap() > 0);
        tokio::time::timeout(Duration::from_secs(20), feed.next())
            .await
            .expect("a notice within 20 s")
            .expect("open");

        let p = provider("no_channel").await;
        p.create_schedule(&job("b", "0 * * * * *"), "ops")
            .await
            .unwrap();
        let e = p.change_feed().await.err().expect("no channel, no feed");
        assert!(e.to_string().contains("permission denied"), "{e}");

        let p = provider("locks_only").await;
        let e = p
            .create_schedule(&job("c", "0 * * * * *"), "ops")
            .await
            .unwrap_err();
        let text = e.to_string();
        for part in ["permission denied", SCHEDULE_COMMANDS, "&{acl}:schedules"] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    /// 100,000 schedules created (64 creates in flight), then read back by one
    /// `schedules_since(0)`: prints both durations.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_schedules_100k_are_all_read_back() {
        let k = Keys::new().await;
        let p = &k.provider;
        let n = 100_000;
        let started = Instant::now();
        stream::iter(0..n)
            .map(|i| async move {
                p.create_schedule(&job(&format!("repo_sync_{i}"), "0 */15 * * * *"), "bulk")
                    .await
            })
            .buffer_unordered(64)
            .try_for_each(|_| async { Ok(()) })
            .await
            .unwrap();
        let created = started.elapsed();
        let started = Instant::now();
        let all = p.schedules_since(0).await.unwrap();
        let read = started.elapsed();
        assert_eq!(all.len(), n);
        assert!(all.windows(2).all(|w| w[0].version < w[1].version));
        let names: HashMap<&str, ()> = all.iter().map(|s| (s.name.as_str(), ())).collect();
        assert_eq!(names.len(), n);
        let tail = p.schedules_since(all[n - 10].version).await.unwrap();
        assert_eq!(tail.len(), 9);
        eprintln!(
            "created {n} schedules in {:.2} s; schedules_since(0) read them in {:.3} s",
            created.as_secs_f64(),
            read.as_secs_f64()
        );
        k.cleanup().await;
    }
}
