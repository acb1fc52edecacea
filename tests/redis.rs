//! The provider suite against Redis (the cases that apply to it), and what only Redis has: a
//! lease key that expires beside a record that does not, keys an operator can delete or
//! overwrite with something else, one script per operation, one cluster slot per prefix.
#![allow(missing_docs)]

/// Every test here is named `redis::…`, so a run can leave the backend out by name
/// (`scripts/test` does, with `--skip redis`, when its server does not answer).
mod redis {
    use std::time::Duration;

    use chrono::{DateTime, TimeZone, Utc};
    use redis::AsyncCommands;
    use shedlock::{Error, LockAdmin, LockConfiguration, LockGuard, LockProvider};
    use shedlock_redis::RedisLockProvider;
    use shedlock_suite::{Opts, Redis, TestDb, run_case};

    // The provider suite on Redis runs in shedlock-redis (`shedlock-redis/tests/kit.rs`).

    const LONG: Duration = Duration::from_secs(60);
    const MS: Duration = Duration::from_millis(1);

    fn cfg(name: &str, at_most: Duration) -> LockConfiguration {
        LockConfiguration::new(name, at_most, Duration::ZERO).unwrap()
    }

    fn tick(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    async fn exists(db: &Redis, key: &str) -> bool {
        let mut conn = db.connection();
        conn.exists(key).await.unwrap()
    }

    /// Polls (every 50 ms, up to 30 s) until Redis has removed `key`; whether it has.
    async fn until_gone(db: &Redis, key: &str) -> bool {
        for _ in 0..600 {
            if !exists(db, key).await {
                return true;
            }
            tokio::time::sleep(50 * MS).await;
        }
        false
    }

    /// A lease of 300 ms that Redis expires: the record keeps the token and the claimed tick,
    /// and never expires itself; the claimed tick, and any older one, stays refused once the
    /// lease key is gone; the next tick is taken with a higher token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_token_and_last_tick_survive_the_lease_expiry() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let a = db.provider();
            let b = db.provider_with(Opts::default().locked_by("b")).await;
            let c = cfg("job", 300 * MS);
            let guard = a.lock(&c.clone().for_tick(tick(5))).await.unwrap().unwrap();
            let token = guard.fencing_token();
            let (lease, meta) = (a.lock_key("job"), a.meta_key("job"));
            assert!(exists(db, &lease).await, "the lease is a key of its own");
            let mut conn = db.connection();
            let ttl: i64 = conn.pttl(&lease).await.unwrap();
            assert!((1..=300).contains(&ttl), "the lease expires: {ttl} ms");
            let ttl: i64 = conn.pttl(&meta).await.unwrap();
            assert_eq!(ttl, -1, "the record never expires");
            std::mem::forget(guard); // no unlock, no background release: the lease runs out
            assert!(until_gone(db, &lease).await, "Redis expired the lease");

            let row = db.row("job").await.expect("the record outlives the lease");
            assert_eq!(row.fencing_token, token);
            assert_eq!(row.last_tick_ms, Some(tick(5).timestamp_millis()));
            assert!(row.remaining_ms < 0, "{row:?}");
            let state = b.lock_state("job").await.unwrap().expect("listed");
            assert!(!state.is_held(), "{state:?}");
            assert_eq!(
                (state.fencing_token, state.last_tick),
                (token, Some(tick(5)))
            );
            for old in [5, 4] {
                assert!(
                    b.lock(&c.clone().for_tick(tick(old)))
                        .await
                        .unwrap()
                        .is_none(),
                    "tick {old} was claimed before the lease expired"
                );
            }
            assert!(!exists(db, &lease).await, "a refused claim writes no lease");
            let next = b
                .lock(&c.clone().for_tick(tick(6)))
                .await
                .unwrap()
                .expect("the next tick is free");
            assert!(next.fencing_token() > token);
            assert_eq!(
                db.row("job").await.unwrap().last_tick_ms,
                Some(tick(6).timestamp_millis())
            );
            next.unlock().await.unwrap();
        })
        .await;
    }

    /// Takes `name` with `p` and unlocks it; the token.
    async fn take(p: &RedisLockProvider, name: &str) -> i64 {
        let guard = p.lock(&cfg(name, LONG)).await.unwrap().expect("free");
        let token = guard.fencing_token();
        guard.unlock().await.unwrap();
        token
    }

    /// The lease key, the record, both, or the set of names deleted by hand, after a release
    /// and while the lock is held, many times in a row: every new token is higher than every
    /// earlier one; a holder whose lease key was deleted can no longer touch the lock; a
    /// holder whose record was deleted still holds it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_tokens_never_go_back_after_keys_are_deleted() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            let other = db.provider_with(Opts::default().locked_by("other")).await;
            let mut conn = db.connection();
            let (lease, meta, names) = (p.lock_key("job"), p.meta_key("job"), p.names_key());
            let mut last = take(&p, "job").await;
            let mut higher = |token: i64, what: &str| {
                assert!(token > last, "{what}: token {token} after {last}");
                last = token;
            };
            for round in 0..50 {
                // After a release.
                let _: i64 = conn.del(&meta).await.unwrap();
                higher(take(&p, "job").await, &format!("round {round}, record"));
                let _: i64 = conn.del(&[&lease, &meta]).await.unwrap();
                higher(take(&p, "job").await, &format!("round {round}, both"));
                let _: i64 = conn.del(&names).await.unwrap();
                higher(take(&p, "job").await, &format!("round {round}, names"));
            }
            assert_eq!(p.locks().await.unwrap().len(), 1, "listed again");

            // While held: the lease key deleted, another instance takes the lock over.
            let held = p.lock(&cfg("job", LONG)).await.unwrap().unwrap();
            higher(held.fencing_token(), "held");
            let _: i64 = conn.del(&lease).await.unwrap();
            let mut taken = other.lock(&cfg("job", LONG)).await.unwrap().expect("free");
            higher(taken.fencing_token(), "taken over");
            assert!(!p.is_held("job", held.fencing_token()).await.unwrap());
            assert!(
                !held.unlock().await.unwrap(),
                "the old holder touches nothing"
            );
            assert!(taken.extend(LONG, Duration::ZERO).await.unwrap());

            // While held: the record deleted; the lease still decides.
            let _: i64 = conn.del(&meta).await.unwrap();
            assert!(
                p.lock(&cfg("job", LONG)).await.unwrap().is_none(),
                "still held"
            );
            assert!(other.is_held("job", taken.fencing_token()).await.unwrap());
            assert!(taken.extend(LONG, Duration::ZERO).await.unwrap());
            assert!(
                taken.unlock().await.unwrap(),
                "the holder still releases it"
            );
            higher(
                take(&p, "job").await,
                "after the record was deleted while held",
            );

            // While held: both keys deleted.
            let held = p.lock(&cfg("job", LONG)).await.unwrap().unwrap();
            higher(held.fencing_token(), "held again");
            let _: i64 = conn.del(&[&lease, &meta]).await.unwrap();
            higher(take(&other, "job").await, "both deleted while held");
            assert!(!held.unlock().await.unwrap());
        })
        .await;
    }

    /// What an operation on `name` answers, as an error.
    async fn refused(p: &RedisLockProvider, name: &str) -> Error {
        p.lock(&cfg(name, LONG))
            .await
            .expect_err("a key of the wrong type")
    }

    fn assert_wrong_type(err: &Error, key: &str, type_found: &str) {
        match err {
            Error::WrongType { key: k, found, .. } => {
                assert_eq!((k.as_str(), found.as_str()), (key, type_found), "{err}")
            }
            other => panic!("expected RedisWrongType for {key}, got {other:?}"),
        }
        assert!(
            err.to_string().contains(key),
            "the message names the key: {err}"
        );
    }

    /// A string where a lease key should be, a list where a record should be, a string where
    /// the set of names should be: every operation that meets one fails with
    /// `Error::RedisWrongType` naming the key and its type, writes nothing (not even the other
    /// locks of a batch), and leaves the user's value as it was.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_a_key_of_the_wrong_type_is_named_and_left_alone() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            let mut conn = db.connection();

            // A string at a lease key.
            let lease = p.lock_key("job");
            let () = conn.set(&lease, "user's value").await.unwrap();
            assert_wrong_type(&refused(&p, "job").await, &lease, "string");
            let batch = [cfg("free", LONG), cfg("job", LONG), cfg("later", LONG)];
            let err = p.lock_many(&batch).await.expect_err("the batch fails");
            assert_wrong_type(&err, &lease, "string");
            for name in ["free", "later"] {
                assert_eq!(
                    db.row(name).await,
                    None,
                    "{name}: nothing taken by the failed batch"
                );
            }
            let err = p.lock_state("job").await.unwrap_err();
            assert_wrong_type(&err, &lease, "string");
            let err = p.force_release("job", 1).await.unwrap_err();
            assert_wrong_type(&err, &lease, "string");
            let err = p.is_held("job", 1).await.unwrap_err();
            assert_wrong_type(&err, &lease, "string");
            let value: String = conn.get(&lease).await.unwrap();
            assert_eq!(value, "user's value", "nothing overwritten");

            // A list at a record key, found by a lock held while it was put there.
            let meta = p.meta_key("held");
            let mut held = p.lock(&cfg("held", LONG)).await.unwrap().unwrap();
            let _: i64 = conn.del(&meta).await.unwrap();
            let _: i64 = conn.rpush(&meta, &["a", "b"]).await.unwrap();
            let err = held.extend(LONG, Duration::ZERO).await.unwrap_err();
            assert_wrong_type(&err, &meta, "list");
            assert_wrong_type(&refused(&p, "held").await, &meta, "list");
            let err = p.locks().await.unwrap_err();
            assert_wrong_type(&err, &meta, "list");
            let err = held.unlock().await.unwrap_err();
            assert_wrong_type(&err, &meta, "list");
            let list: Vec<String> = conn.lrange(&meta, 0, -1).await.unwrap();
            assert_eq!(list, ["a", "b"], "nothing overwritten");
            let _: i64 = conn.del(&[&meta, &lease]).await.unwrap(); // the list, the string

            // A string at the set of names.
            let names = p.names_key();
            let _: i64 = conn.del(&names).await.unwrap();
            let () = conn.set(&names, "not a set").await.unwrap();
            assert_wrong_type(&refused(&p, "new").await, &names, "string");
            assert_eq!(
                db.row("new").await,
                None,
                "nothing written for the refused lock"
            );
            let err = p
                .lock_many(&[cfg("a", LONG), cfg("b", LONG)])
                .await
                .unwrap_err();
            assert_wrong_type(&err, &names, "string");
            assert_eq!((db.row("a").await, db.row("b").await), (None, None));
            assert_wrong_type(&p.locks().await.unwrap_err(), &names, "string");
            assert_wrong_type(&p.migrate().await.unwrap_err(), &names, "string");
            let value: String = conn.get(&names).await.unwrap();
            assert_eq!(value, "not a set", "nothing overwritten");

            // Once the user's keys are gone, everything works again.
            let _: i64 = conn.del(&names).await.unwrap();
            p.migrate().await.unwrap();
            take(&p, "job").await;
        })
        .await;
    }

    /// Each operation is one script: lock, a batch of 5 and of 50, extend, unlock, is_held,
    /// lock_state, migrate, force_release; locks is a check and, per page of the set of names,
    /// an `SSCAN` and a script (a guard's own background work is off: keep-alive runs only
    /// under `run_locked`, and every guard here is unlocked or forgotten).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_each_operation_is_one_script() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider_with(Opts::default()).await;
            let sent = || p.statements_sent();
            let one = |what: &str, before: u64| {
                assert_eq!(sent() - before, 1, "{what}: one script");
            };

            let before = sent();
            let mut guard = p.lock(&cfg("job", LONG)).await.unwrap().unwrap();
            one("lock", before);
            let before = sent();
            assert!(guard.extend(LONG, Duration::ZERO).await.unwrap());
            one("extend", before);
            let before = sent();
            assert!(p.is_held("job", guard.fencing_token()).await.unwrap());
            one("is_held", before);
            let before = sent();
            assert!(p.lock_state("job").await.unwrap().unwrap().is_held());
            one("lock_state", before);
            let before = sent();
            assert!(guard.unlock().await.unwrap());
            one("unlock", before);

            for n in [5, 50] {
                let batch: Vec<_> = (0..n)
                    .map(|i| cfg(&format!("batch_{n}_{i}"), LONG).for_tick(tick(1)))
                    .collect();
                let before = sent();
                let answers = p.lock_many(&batch).await.unwrap();
                one(&format!("lock_many of {n}"), before);
                let guards: Vec<LockGuard> = answers
                    .into_iter()
                    .map(|a| a.unwrap().expect("free"))
                    .collect();
                assert_eq!(guards.len(), n);
                for guard in guards {
                    guard.unlock().await.unwrap();
                }
            }

            // The listing: the check of the set's type, then per page of the set one SSCAN and
            // one script; 56 names make one page (two, were the set resized in between).
            let before = sent();
            assert_eq!(p.locks().await.unwrap().len(), 56);
            let listing = sent() - before;
            assert!((3..=5).contains(&listing), "locks: {listing} requests");
            let before = sent();
            p.migrate().await.unwrap();
            one("migrate", before);
            let held = p.lock(&cfg("held", LONG)).await.unwrap().unwrap();
            let before = sent();
            assert!(p.force_release("held", held.fencing_token()).await.unwrap());
            one("force_release", before);
            let before = sent();
            assert!(p.lock_many(&[]).await.unwrap().is_empty());
            assert_eq!(sent(), before, "an empty batch sends nothing");
            std::mem::forget(held);
        })
        .await;
    }

    /// CRC16 (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster hashes keys.
    fn crc16(bytes: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in bytes {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    /// The cluster slot of `key`: of its hash tag (between the first `{` and the next `}`,
    /// when not empty), else of the whole key.
    fn slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
            let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        });
        crc16(tagged.unwrap_or(bytes)) % 16384
    }

    /// Every key the provider made for a prefix (leases, records, the set of names; single and
    /// batch claims; lock names with braces of their own) hashes to the slot of the prefix,
    /// computed as Redis Cluster does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_every_key_of_a_prefix_is_in_one_cluster_slot() {
        // The hash as Redis documents it (`CLUSTER KEYSLOT`).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("somekey"), 11058);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            let mut held = Vec::new();
            for name in ["job", "{other}", "a}b{c", "🦀", "x{y}"] {
                held.push(
                    p.lock(&cfg(name, LONG).for_tick(tick(1)))
                        .await
                        .unwrap()
                        .unwrap(),
                );
            }
            let batch: Vec<_> = (0..20).map(|i| cfg(&format!("b{i}"), LONG)).collect();
            for answer in p.lock_many(&batch).await.unwrap() {
                answer.unwrap().unwrap().unlock().await.unwrap();
            }
            for guard in held {
                guard.unlock().await.unwrap();
            }
            let keys = db.keys().await;
            // 25 records and the set of names; the leases were released.
            assert_eq!(keys.len(), 26, "{keys:?}");
            let expected = slot(db.prefix());
            let other_slots: Vec<(&String, u16)> = keys
                .iter()
                .map(|key| (key, slot(key)))
                .filter(|(_, s)| *s != expected)
                .collect();
            assert!(
                other_slots.is_empty(),
                "slot {expected} expected: {other_slots:?}"
            );
            // Leases too (held ones).
            let guard = p.lock(&cfg("{other}", LONG)).await.unwrap().unwrap();
            assert_eq!(slot(&p.lock_key("{other}")), expected);
            assert!(exists(db, &p.lock_key("{other}")).await);
            guard.unlock().await.unwrap();
        })
        .await;
    }

    /// An unlock that fails (here: its record key holds a string for a moment) is retried in
    /// the background until it releases the lock, long before the 60 s lease would: the SQL
    /// backends' `a_failed_unlock_is_retried_until_it_releases`, without a row lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_a_failed_unlock_is_retried_until_it_releases() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            let mut conn = db.connection();
            let guard = p.lock(&cfg("unlock_retry", LONG)).await.unwrap().unwrap();
            let token = guard.fencing_token();
            let meta = p.meta_key("unlock_retry");
            let aside = format!("{{{}}}:aside", db.prefix());
            let () = conn.rename(&meta, &aside).await.unwrap();
            let () = conn.set(&meta, "in the way").await.unwrap();
            let failed = guard.unlock().await;
            assert!(
                matches!(failed, Err(Error::WrongType { .. })),
                "the unlock met the string: {failed:?}"
            );
            tokio::time::sleep(500 * MS).await;
            assert!(
                p.is_held("unlock_retry", token).await.unwrap(),
                "still held while the unlock cannot run"
            );
            let _: i64 = conn.del(&meta).await.unwrap();
            let () = conn.rename(&aside, &meta).await.unwrap();
            let mut released = false;
            for _ in 0..200 {
                if db.row("unlock_retry").await.unwrap().remaining_ms <= 0 {
                    released = true;
                    break;
                }
                tokio::time::sleep(100 * MS).await;
            }
            assert!(released, "a background retry released the lock");
            assert!(
                !exists(db, &p.lock_key("unlock_retry")).await,
                "the lease is gone"
            );
        })
        .await;
    }

    /// `HSET key field value` with any bytes.
    async fn hset(db: &Redis, key: &[u8], field: &str, value: &[u8]) {
        let mut conn = db.connection();
        let _: i64 = redis::cmd("HSET")
            .arg(key)
            .arg(field)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    /// What `DUMP` says of each key (`None`: no key) and its `PTTL`: equal before and after
    /// means the key is byte for byte as it was.
    async fn snapshot(db: &Redis, keys: &[String]) -> Vec<(Option<Vec<u8>>, i64)> {
        let mut conn = db.connection();
        let mut out = Vec::new();
        for key in keys {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let ttl: i64 = conn.pttl(key).await.unwrap();
            out.push((dump, ttl));
        }
        out
    }

    /// Asserts `err` is `Error::UnreadableRow` for lock `name` at `key`, naming the field and
    /// the value in its message.
    fn assert_unreadable(err: &Error, name: &str, key: &str, field: &str, value: &str) {
        match err {
            Error::UnreadableRow {
                location,
                name: n,
                problem,
                ..
            } => {
                assert_eq!((location.as_str(), n.as_str()), (key, name), "{err}");
                assert!(
                    problem.contains(&format!("`{field}`")) && problem.contains(value),
                    "the problem names the field and the value: {err}"
                );
            }
            other => panic!("expected UnreadableRow for {key} {field}={value:?}, got {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(key), "the message names the key: {text}");
    }

    /// A value in a lock's keys that is no 64-bit non-negative integer (a token) or no integer
    /// of microseconds (a time), written by someone else: `lock()` and `lock_many()` fail with
    /// `Error::UnreadableRow` naming the key, the field and the value, and write nothing (the
    /// keys stay byte for byte as they were, no other lock of the batch is taken, the set of
    /// names is unchanged). Before, `1e300`, `nan` or `inf` made the acquire answer `None`
    /// while it wrote a lease of its own and claimed the tick, and the job never ran again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_a_corrupt_token_or_time_is_an_error_naming_the_key_and_writes_nothing() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            let mut conn = db.connection();
            let names = p.names_key();
            let mut case = 0;
            for (kind, field) in [
                ("meta", "token"),
                ("lock", "token"),
                ("lock", "until"),
                ("meta", "tick"),
                ("meta", "until"),
                ("lock", "at"),
                ("meta", "at"),
            ] {
                for bad in [
                    "1e300",
                    "9223372036854775808",
                    "nan",
                    "inf",
                    "-1",
                    "0x10",
                    "1.5",
                ] {
                    if field == "token" || bad != "-1" {
                        case += 1;
                    } else {
                        continue; // a time before 1970 is a time
                    }
                    let name = format!("job{case}");
                    // A lock taken and released for tick 1: a record, no lease.
                    take(&p, &name).await;
                    let (lock, meta) = (p.lock_key(&name), p.meta_key(&name));
                    if kind == "lock" {
                        // A lease key (as if held until a minute ago) that Redis would have
                        // expired, kept by hand.
                        for (f, v) in [("token", "7"), ("by", "x"), ("at", "1"), ("until", "2")] {
                            hset(db, lock.as_bytes(), f, v.as_bytes()).await;
                        }
                    }
                    let key = if kind == "lock" { &lock } else { &meta };
                    hset(db, key.as_bytes(), field, bad.as_bytes()).await;
                    let keys = [lock.clone(), meta.clone(), names.clone()];
                    let before = snapshot(db, &keys).await;
                    let err = p
                        .lock(&cfg(&name, LONG).for_tick(tick(2)))
                        .await
                        .expect_err(&format!("{key} {field}={bad}"));
                    assert_unreadable(&err, &name, key, field, bad);
                    let batch = [cfg(&format!("free{case}"), LONG), cfg(&name, LONG)];
                    let err = p.lock_many(&batch).await.expect_err("the batch fails");
                    assert_unreadable(&err, &name, key, field, bad);
                    assert_eq!(before, snapshot(db, &keys).await, "{key} {field}={bad}");
                    assert_eq!(db.row(&format!("free{case}")).await, None, "nothing taken");
                    let _: i64 = conn.del(&[&lock, &meta]).await.unwrap();
                }
            }
        })
        .await;
    }

    /// Tokens are exact 64-bit integers, not Lua's doubles: after 9007199254740993 (2^53 + 1,
    /// which a double reads as 2^53) comes 9007199254740994, from the record and from the
    /// lease; after 2^63 - 2 comes 2^63 - 1, after which no token can follow: the acquire
    /// fails naming the key and writes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_tokens_beyond_2_pow_53_count_up_exactly() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            for (kind, stored, next) in [
                ("meta", 9_007_199_254_740_993_i64, 9_007_199_254_740_994_i64),
                ("lock", 9_007_199_254_740_993, 9_007_199_254_740_994),
                ("meta", 1_234_567_890_123_456_789, 1_234_567_890_123_456_790),
                ("meta", i64::MAX - 1, i64::MAX),
            ] {
                let name = format!("{kind}{stored}");
                take(&p, &name).await;
                let key = if kind == "lock" {
                    p.lock_key(&name)
                } else {
                    p.meta_key(&name)
                };
                for (f, v) in [("by", "x"), ("at", "1"), ("until", "2")] {
                    hset(db, key.as_bytes(), f, v.as_bytes()).await;
                }
                hset(db, key.as_bytes(), "token", stored.to_string().as_bytes()).await;
                let guard = p.lock(&cfg(&name, LONG)).await.unwrap().expect("free");
                assert_eq!(guard.fencing_token(), next, "after {stored} in {key}");
                assert_eq!(db.row(&name).await.unwrap().fencing_token, next);
                let state = p.lock_state(&name).await.unwrap().unwrap();
                assert_eq!(state.fencing_token, next);
                assert!(p.is_held(&name, next).await.unwrap());
                assert!(!p.is_held(&name, next - 1).await.unwrap());
                assert!(guard.unlock().await.unwrap());
            }
            // i64::MAX is the last token.
            let name = format!("meta{}", i64::MAX - 1);
            let (lock, meta) = (p.lock_key(&name), p.meta_key(&name));
            let before = snapshot(db, &[lock.clone(), meta.clone()]).await;
            let err = p.lock(&cfg(&name, LONG)).await.unwrap_err();
            assert_unreadable(&err, &name, &meta, "token", &i64::MAX.to_string());
            assert_eq!(before, snapshot(db, &[lock, meta]).await);
        })
        .await;
    }

    /// The reads of a lock whose keys hold a value that cannot be read: `lock_rows()` lists
    /// it among the unreadable ones, naming the key, the field and the value; `locks()` and
    /// `lock_states()` leave it out; `lock_state()` is `Error::UnreadableRow`. Before, a time
    /// that did not parse became 1970 and a token 0.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_unreadable_locks_are_named_by_the_reads() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            for name in ["a", "b", "c", "d", "e", "f", "g"] {
                take(&p, name).await;
            }
            // (lock, key, field, value): each breaks one lock
            let bad: [(&str, String, &str, &str); 5] = [
                ("b", p.meta_key("b"), "token", "1e300"),
                ("d", p.lock_key("d"), "until", "nan"),
                ("e", p.meta_key("e"), "tick", "inf"),
                ("f", p.meta_key("f"), "at", "yesterday"),
                ("g", p.meta_key("g"), "token", "9223372036854775808"),
            ];
            for (name, key, field, value) in &bad {
                if key.contains(":lock:") {
                    for (f, v) in [("token", "7"), ("by", "x"), ("at", "1")] {
                        hset(db, key.as_bytes(), f, v.as_bytes()).await;
                    }
                }
                hset(db, key.as_bytes(), field, value.as_bytes()).await;
                let err = p.lock_state(name).await.unwrap_err();
                assert_unreadable(&err, name, key, field, value);
            }
            // A name that is no UTF-8, with a record.
            let mut odd = format!("{{{}}}:meta:", db.prefix()).into_bytes();
            odd.extend_from_slice(b"x\xff");
            for (f, v) in [("token", "5"), ("by", "x"), ("at", "1"), ("until", "2")] {
                hset(db, &odd, f, v.as_bytes()).await;
            }
            let mut conn = db.connection();
            let _: i64 = redis::cmd("SADD")
                .arg(p.names_key())
                .arg(&b"x\xff"[..])
                .query_async(&mut conn)
                .await
                .unwrap();

            let rows = p.lock_rows().await.unwrap();
            let listed: Vec<&str> = rows.locks.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(listed, ["a", "c"]);
            let unreadable: Vec<&str> = rows.unreadable.iter().map(|u| u.name.as_str()).collect();
            assert_eq!(
                unreadable,
                ["b", "d", "e", "f", "g", "x\u{fffd}"],
                "{rows:?}"
            );
            for ((_, key, field, value), row) in bad.iter().zip(&rows.unreadable) {
                for part in [key.as_str(), &format!("`{field}`"), value] {
                    assert!(row.problem.contains(part), "{part} in {row}");
                }
            }
            assert!(rows.unreadable[5].problem.contains("UTF-8"), "{rows:?}");
            let names: Vec<String> = p
                .locks()
                .await
                .unwrap()
                .into_iter()
                .map(|l| l.name)
                .collect();
            assert_eq!(names, ["a", "c"]);
            let some: Vec<String> = ["d", "c", "b", "a", "zz"].map(String::from).to_vec();
            let states = p.lock_states(&some).await.unwrap();
            let names: Vec<&str> = states.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(names, ["a", "c"]);
            assert!(p.lock_state("a").await.unwrap().is_some());
            assert!(p.lock_state("zz").await.unwrap().is_none());
        })
        .await;
    }

    /// A name whose two keys are both gone (deleted by hand) is removed from the set of names
    /// by the read that finds so (the listing, or a read of that lock); a name with a key left
    /// stays, and a lock taken again is listed again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_reads_remove_the_names_whose_keys_are_gone() {
        run_case(async |db: &std::sync::Arc<Redis>| {
            let p = db.provider();
            let mut conn = db.connection();
            for name in ["a", "b", "c", "d"] {
                take(&p, name).await;
            }
            let held = p.lock(&cfg("c", LONG)).await.unwrap().unwrap();
            let _: i64 = conn.del(p.meta_key("b")).await.unwrap();
            let _: i64 = conn.del(p.meta_key("c")).await.unwrap(); // its lease is left
            let _: i64 = conn.del(p.meta_key("d")).await.unwrap();
            let members = async || {
                let mut conn = db.connection();
                let mut names: Vec<String> = conn.smembers(p.names_key()).await.unwrap();
                names.sort();
                names
            };
            assert_eq!(members().await, ["a", "b", "c", "d"]);
            assert!(p.lock_state("d").await.unwrap().is_none());
            assert_eq!(members().await, ["a", "b", "c"], "read by name");
            let names: Vec<String> = p
                .locks()
                .await
                .unwrap()
                .into_iter()
                .map(|l| l.name)
                .collect();
            assert_eq!(names, ["a", "c"]);
            assert_eq!(members().await, ["a", "c"], "read by the listing");
            take(&p, "b").await;
            assert_eq!(members().await, ["a", "b", "c"]);
            assert_eq!(p.locks().await.unwrap().len(), 3);
            held.unlock().await.unwrap();
        })
        .await;
    }

    /// A bad key prefix is refused by the builder before it connects (the port here answers
    /// nothing), naming the prefix.
    #[tokio::test]
    async fn redis_a_bad_key_prefix_is_refused_before_connecting() {
        for bad in ["", "a b", "a{b}", &"p".repeat(49)] {
            let err = RedisLockProvider::builder("redis://127.0.0.1:1")
                .table_name(bad)
                .build()
                .await
                .unwrap_err();
            assert!(
                matches!(&err, Error::InvalidTableName { .. }),
                "{bad:?}: {err:?}"
            );
            assert!(err.to_string().contains("key prefix"), "{err}");
        }
    }
}
