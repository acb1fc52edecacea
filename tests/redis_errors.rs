//! Bad input and unhelpful servers for [`RedisLockProvider`]: each gives an error of its own
//! kind that names the server (or the URL, or the prefix), within the response timeout, never
//! a panic or a hang, and never shows the password. The servers that must be paused or given
//! a password are private ([`RedisServer`]); nothing here touches the shared test Redis.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use shedlock::Backend;
use shedlock::{Error, LockAdmin, LockConfiguration, LockProvider};
use shedlock_redis::{RedisLockProvider, RedisTarget};
use shedlock_suite::redis_server::{RedisServer, command, free_port};

const PASSWORD: &str = "s3cret-pw";

fn cfg(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

async fn build(url: &str, timeout: Duration) -> shedlock::Result<RedisLockProvider> {
    RedisLockProvider::builder(RedisTarget::new(url).response_timeout(timeout))
        .table_name("errors")
        .locked_by("redis-errors-test")
        .build()
        .await
}

/// The error's message and its debug form, which must both keep the password out.
fn shown(e: &Error) -> String {
    format!("{e} / {e:?}")
}

#[tokio::test]
async fn unreachable_redis_is_refused_naming_the_address() {
    let port = free_port();
    let started = Instant::now();
    let e = build(&format!("redis://127.0.0.1:{port}"), Duration::from_secs(3))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&e, Error::Unreachable { backend: Backend::Redis, address, .. } if *address == format!("127.0.0.1:{port}")),
        "{e:?}"
    );
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(
        took < Duration::from_secs(5),
        "bounded by the response timeout: {took:?}"
    );
}

#[tokio::test]
async fn redis_wrong_or_missing_password_is_refused_naming_the_server_not_the_password() {
    let server = RedisServer::start(&["--requirepass", PASSWORD]);
    let address = server.address();
    for url in [
        format!("redis://:wrong-pass@{address}"),
        format!("redis://default:wrong-pass@{address}/0"),
        // No password at all: the server accepts the connection and refuses its first
        // command, which the build sends.
        format!("redis://{address}"),
    ] {
        let e = build(&url, Duration::from_secs(3)).await.unwrap_err();
        assert!(
            matches!(&e, Error::Auth { backend: Backend::Redis, address: a, .. } if *a == address),
            "{url}: {e:?}"
        );
        let text = shown(&e);
        assert!(text.contains(&address), "{text}");
        assert!(
            !text.contains("wrong-pass") && !text.contains(PASSWORD),
            "{text}"
        );
    }
    // The right password works.
    for url in [
        format!("redis://:{PASSWORD}@{address}"),
        format!("redis://default:{PASSWORD}@{address}/0"),
    ] {
        let provider = build(&url, Duration::from_secs(3)).await.unwrap();
        provider.migrate().await.unwrap();
        let guard = provider.lock(&cfg("auth")).await.unwrap().expect("free");
        assert!(format!("{provider:?}").contains(&address));
        assert!(!format!("{provider:?}").contains(PASSWORD));
        guard.unlock().await.unwrap();
    }
}

/// A server that starts wanting a password after the provider connected (its connections were
/// closed, and a password set): the next script is refused as credentials, not as a protocol
/// error. Redis 7 answers an unauthenticated client's long command (a script with its keys and
/// arguments) with `Protocol error: unauthenticated multibulk length`, not `NOAUTH`.
#[tokio::test]
async fn redis_password_demanded_after_connecting_is_an_auth_error() {
    let server = RedisServer::start(&[]);
    let address = server.address();
    let provider = build(&server.url(), Duration::from_secs(3)).await.unwrap();
    provider.lock(&cfg("before")).await.unwrap().expect("free");
    let killed = command(&address, &["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    assert!(
        matches!(killed, shedlock_suite::redis_server::Reply::Int(n) if n >= 1),
        "{killed:?}"
    );
    command(&address, &["CONFIG", "SET", "requirepass", PASSWORD]).unwrap();
    for name in ["single", "batch"] {
        let e = if name == "single" {
            provider.lock(&cfg(name)).await.unwrap_err()
        } else {
            provider
                .lock_many(&[cfg("a"), cfg("b"), cfg("c")])
                .await
                .unwrap_err()
        };
        assert!(
            matches!(&e, Error::Auth { backend: Backend::Redis, address: a, .. } if *a == address),
            "{name}: {e:?}"
        );
        assert!(!shown(&e).contains(PASSWORD));
    }
}

#[tokio::test]
async fn rediss_url_to_a_plain_redis_port_fails_within_the_response_timeout() {
    let server = RedisServer::start(&[]);
    let address = server.address();
    let timeout = Duration::from_secs(2);
    let started = Instant::now();
    let e = build(&format!("rediss://:{PASSWORD}@{address}"), timeout)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&e, Error::Unreachable { backend: Backend::Redis, address: a, .. } if *a == address),
        "{e:?}"
    );
    let text = shown(&e);
    assert!(text.contains(&address) && text.contains("TLS"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    assert!(
        took < timeout + Duration::from_millis(1500),
        "not a hang: {took:?}"
    );
    eprintln!("rediss:// to a plain port: {e} after {took:?}");
}

#[tokio::test]
async fn malformed_redis_urls_are_refused_without_the_password() {
    for (url, shows) in [
        ("redis://host:notaport", "redis://host:notaport"),
        // A URL that does not parse is masked up to its last `@` (shedlock::secret).
        ("redis://:secret@host:notaport", "redis://***@host:notaport"),
        ("redis://user:secret@host:99999", "redis://***@host:99999"),
        ("http://x", "http://x/"),
        ("http://:secret@x", "http://:***@x/"),
        ("redis://", "redis://"),
        ("127.0.0.1:6379", "127.0.0.1:6379"),
    ] {
        let started = Instant::now();
        let e = build(url, Duration::from_secs(3)).await.unwrap_err();
        assert!(
            matches!(
                &e,
                Error::InvalidUrl {
                    backend: Backend::Redis,
                    ..
                }
            ),
            "{url}: {e:?}"
        );
        let text = shown(&e);
        assert!(text.contains(&format!("{shows:?}")), "{url}: {text}");
        assert!(!text.contains("secret"), "{url}: {text}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "refused before connecting"
        );
    }
}

#[tokio::test]
async fn a_zero_response_timeout_is_refused_as_a_setting_not_a_url() {
    // A port nothing listens on: the setting is refused before any connection is tried.
    let url = format!("redis://:secret@127.0.0.1:{}", free_port());
    let started = Instant::now();
    let e = build(&url, Duration::ZERO).await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::InvalidSetting {
                backend: Backend::Redis,
                setting: "response_timeout",
                ..
            }
        ),
        "{e:?}"
    );
    let text = shown(&e);
    assert!(
        text.contains("response_timeout") && !text.contains("secret"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused before connecting"
    );
}

#[tokio::test]
async fn bad_redis_key_prefixes_are_refused_naming_the_prefix() {
    // A port nothing listens on: the prefix is refused before any connection is tried.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let long = "x".repeat(49);
    for prefix in ["a{b", "a}b", "", long.as_str(), "a b", "é"] {
        let e = RedisLockProvider::builder(&url)
            .table_name(prefix)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidTableName { backend: Backend::Redis, name: p, .. } if p == prefix),
            "{prefix:?}: {e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("{prefix:?}")) && text.contains("key prefix"),
            "{text}"
        );
    }
    // The longest and the odd characters accepted.
    let server = RedisServer::start(&[]);
    for prefix in ["x".repeat(48), "app:locks/v1.2_a-b".to_owned()] {
        let provider = RedisLockProvider::builder(server.url())
            .table_name(&prefix)
            .build()
            .await
            .unwrap();
        provider.lock(&cfg("job")).await.unwrap().expect("free");
        assert_eq!(provider.lock_key("job"), format!("{{{prefix}}}:lock:job"));
    }
}

/// A server that stops answering (`CLIENT PAUSE … ALL` on a private server): the script fails
/// as a timeout after the response timeout, naming the server. The script was sent, though:
/// the server runs it when the pause ends, so the lock is taken by a call that was told it
/// failed, and stays held until its lease ends. Other locks work again at once.
#[tokio::test]
async fn a_redis_server_that_stops_answering_times_out_naming_the_server() {
    let server = RedisServer::start(&[]);
    let address = server.address();
    let timeout = Duration::from_secs(1);
    let provider = build(&server.url(), timeout).await.unwrap();
    provider.migrate().await.unwrap();
    // The acquire script is loaded (a first EVALSHA meets NOSCRIPT and loads it).
    let warm = provider.lock(&cfg("warm")).await.unwrap().expect("free");
    warm.unlock().await.unwrap();
    let pause = Duration::from_secs(3);
    let reply = command(&address, &["CLIENT", "PAUSE", "3000", "ALL"]).unwrap();
    let paused_at = Instant::now();
    assert_eq!(reply.text(), Some("OK"));
    let e = provider.lock(&cfg("job")).await.unwrap_err();
    let took = paused_at.elapsed();
    assert!(
        matches!(&e, Error::Timeout { after, .. } if *after == timeout),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains(&address) && text.contains("acquire lock \"job\""),
        "{text}"
    );
    assert!(
        took >= timeout && took < pause,
        "failed after the timeout, before the pause ended: {took:?}"
    );
    // Once the pause ends, the same provider works again; the timed-out acquire has landed.
    tokio::time::sleep(pause.saturating_sub(paused_at.elapsed()) + Duration::from_millis(200))
        .await;
    let other = provider.lock(&cfg("other")).await.unwrap().expect("free");
    other.unlock().await.unwrap();
    let state = provider
        .lock_state("job")
        .await
        .unwrap()
        .expect("the late acquire landed");
    assert!(
        state.is_held() && state.locked_by == "redis-errors-test",
        "{state:?}"
    );
    assert!(
        provider.lock(&cfg("job")).await.unwrap().is_none(),
        "held by the lost call"
    );
    eprintln!("paused server: {e} after {took:?}");
}

/// A loopback proxy to `upstream` that, once `drop_reply` is set, lets the next request
/// through to the server but closes the client's connection instead of passing the server's
/// answer back: the script ran, its answer is lost.
async fn answer_dropping_proxy(
    upstream: String,
    drop_reply: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u16 {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let drop_reply = std::sync::Arc::clone(&drop_reply);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::io::copy(&mut cr, &mut sw);
                let down = async {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if drop_reply.swap(false, Ordering::SeqCst) {
                            return; // the answer is dropped and the connection closed
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    _ = up => {}
                    () = down => {}
                }
            });
        }
    });
    port
}

/// The connection breaks after an acquire script ran but before its answer came back: the
/// provider sends it once more on a new connection, and that retry gets the lease its first
/// attempt took (same token), rather than finding the lock held by itself and its tick
/// claimed, and giving up a lock nobody then uses until its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_acquire_whose_answer_was_lost_gets_its_lease_back_on_retry() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = RedisServer::start(&[]);
    let drop_reply = Arc::new(AtomicBool::new(false));
    let port = answer_dropping_proxy(server.address(), Arc::clone(&drop_reply)).await;
    let provider = build(&format!("redis://127.0.0.1:{port}"), Duration::from_secs(3))
        .await
        .unwrap();
    let other = RedisLockProvider::builder(server.url())
        .table_name("errors")
        .locked_by("someone-else")
        .build()
        .await
        .unwrap();
    // The script is loaded once (a first EVALSHA meets NOSCRIPT) before answers are dropped.
    let warm = provider.lock(&cfg("warm")).await.unwrap().expect("free");
    warm.unlock().await.unwrap();
    let tick = chrono::Utc::now() - chrono::Duration::milliseconds(10);
    for (name, tick) in [("single", None), ("ticked", Some(tick))] {
        let mut config = cfg(name);
        if let Some(tick) = tick {
            config = config.for_tick(tick);
        }
        let sent_before = provider.statements_sent();
        drop_reply.store(true, Ordering::SeqCst);
        let guard =
            provider.lock(&config).await.unwrap().unwrap_or_else(|| {
                panic!("{name}: the retry got the lease its first attempt took")
            });
        assert!(!drop_reply.load(Ordering::SeqCst), "an answer was dropped");
        assert_eq!(
            provider.statements_sent() - sent_before,
            2,
            "{name}: sent twice"
        );
        let state = other.lock_state(name).await.unwrap().unwrap();
        assert_eq!(state.fencing_token, guard.fencing_token(), "{name}");
        assert_eq!(state.locked_by, "redis-errors-test");
        assert!(other.lock(&config).await.unwrap().is_none(), "{name}: held");
        guard.unlock().await.unwrap();
        // The retry took nothing more: the tick stays claimed once, the lock is free.
        if tick.is_some() {
            assert!(other.lock(&config).await.unwrap().is_none(), "tick claimed");
        } else {
            other
                .lock(&config)
                .await
                .unwrap()
                .expect("free after the unlock");
        }
    }
}

/// No secret of a Redis URL shows, whatever its form (a password holding `/` or `@`, a
/// `password=` in the query, a bare token in the user slot, a percent-escaped password, URLs
/// that do not parse), wherever the URL could be printed: the `Debug` of a [`RedisTarget`], of
/// a builder made from one, of the provider, and the error `build()` returns (`Display` and
/// `Debug`). The server wants another password, so every connection is refused.
#[tokio::test]
async fn no_form_of_a_redis_url_shows_its_secret() {
    let server = RedisServer::start(&["--requirepass", PASSWORD]);
    let address = server.address();
    let port = server.port();
    let closed = free_port();
    // (URL, the secret it holds)
    let cases: Vec<(String, &str)> = vec![
        (format!("redis://:Zq9/Xw@{address}"), "Zq9"),
        (format!("redis://:Zq9/Xw@127.0.0.1:{closed}/0"), "Zq9"),
        (format!("redis://user:Zq9@Xw@{address}"), "Zq9"),
        (format!("redis://:Zq9%2FXw@{address}"), "Zq9"),
        (format!("redis://user:Zq9secret@{address}/0"), "Zq9secret"),
        (format!("redis://{address}/0?password=Zq9query"), "Zq9query"),
        (
            format!("redis://{address}/?protocol=resp2&password=Zq9query"),
            "Zq9query",
        ),
        (format!("redis://Zq9token@{address}"), "Zq9token"),
        (format!("redis://Zq9token@127.0.0.1:{closed}"), "Zq9token"),
        ("redis://:Zq9pw@h:notaport".to_owned(), "Zq9pw"),
        ("redis://:Zq9/pw@h:notaport/0".to_owned(), "Zq9"),
        (format!("redis://:Zq9pw@127.0.0.1:{port}/notadb"), "Zq9pw"),
        (format!("rediss://:Zq9tls@{address}"), "Zq9tls"),
        (
            format!("redis+unix:///tmp/none-{port}.sock?password=Zq9sock"),
            "Zq9sock",
        ),
    ];
    for (url, secret) in &cases {
        let target = RedisTarget::new(url.as_str()).response_timeout(Duration::from_secs(2));
        let shown_target = format!("{target:?}");
        let builder = RedisLockProvider::builder(target.clone()).table_name("errors");
        let shown_builder = format!("{builder:?}");
        let outcome = builder.build().await;
        let shown_outcome = match &outcome {
            Ok(provider) => format!("{provider:?}"),
            Err(e) => shown(e),
        };
        for (path, text) in [
            ("Debug of RedisTarget", &shown_target),
            ("Debug of the builder", &shown_builder),
            ("what build() returned", &shown_outcome),
        ] {
            assert!(
                !text.contains(secret),
                "{url}: the {path} shows the secret: {text}"
            );
        }
        assert!(outcome.is_err(), "{url}: every connection is refused");
        eprintln!("{shown_target}\n  {shown_outcome}");
    }
}

/// ACL users on a private server. One with exactly the rules the crate documents
/// (`~{<prefix>}:*` and [`shedlock_redis::REQUIRED_COMMANDS`]) can do everything the provider
/// does; one without `PING`, `EVALSHA`, `SCRIPT LOAD`, `SSCAN`, a command a script runs, or the
/// prefix's keys gets an error that says the user lacks a permission, names the command where
/// the server does, and lists what the provider needs, never "cannot reach the server".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_acl_permissions_are_documented_and_a_missing_one_is_named() {
    use shedlock_redis::REQUIRED_COMMANDS;
    let server = RedisServer::start(&[]);
    let address = server.address();
    let keys = "~{errors}:*"; // build() uses the key prefix `errors`
    let setuser = |user: &str, rules: &[&str]| {
        let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
        args.extend_from_slice(rules);
        let reply = command(&address, &args).unwrap();
        assert_eq!(reply.text(), Some("OK"), "{args:?}: {reply:?}");
    };
    let required: Vec<&str> = REQUIRED_COMMANDS.split(' ').collect();
    let url = |user: &str, db: u8| format!("redis://{user}:pw@{address}/{db}");
    let timeout = Duration::from_secs(3);

    setuser("app", &[&[keys][..], &required].concat());
    setuser("app_db", &[&[keys, "+select"][..], &required].concat());
    for (user, db) in [("app", 0), ("app_db", 1)] {
        let p = build(&url(user, db), timeout).await.unwrap();
        p.migrate().await.unwrap();
        let tick = chrono::Utc::now() - chrono::Duration::seconds(1);
        let mut guard = p
            .lock(&cfg("job").for_tick(tick))
            .await
            .unwrap()
            .expect("free");
        let batch = p.lock_many(&[cfg("a"), cfg("b")]).await.unwrap();
        assert!(
            guard
                .extend(Duration::from_secs(60), Duration::ZERO)
                .await
                .unwrap()
        );
        assert!(p.is_held("job", guard.fencing_token()).await.unwrap());
        assert!(p.lock_state("job").await.unwrap().unwrap().is_held());
        assert_eq!(
            p.lock_states(&["a".into(), "b".into()])
                .await
                .unwrap()
                .len(),
            2
        );
        assert_eq!(p.locks().await.unwrap().len(), 3);
        assert_eq!(p.lock_rows().await.unwrap().locks.len(), 3);
        p.now().await.unwrap();
        for answer in batch {
            answer.unwrap().unwrap().unlock().await.unwrap();
        }
        assert!(p.force_release("job", guard.fencing_token()).await.unwrap());
        guard.unlock().await.unwrap();
    }

    // (user, rules, the command the error names, what fails)
    let without = |missing: &str| -> Vec<&str> {
        let mut rules = vec![keys];
        rules.extend(required.iter().filter(|r| **r != missing));
        rules
    };
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("no_ping", without("+ping"), "'ping'"),
        ("no_select", [&[keys][..], &required].concat(), "'select'"),
        ("no_evalsha", without("+evalsha"), "'evalsha'"),
        ("no_hmget", without("+hmget"), "a command of the script"),
        ("no_sscan", without("+sscan"), "'sscan'"),
        ("no_keys", [&["~{other}:*"][..], &required].concat(), "keys"),
    ];
    // A server that never ran the scripts: a first EVALSHA meets NOSCRIPT, then SCRIPT LOAD.
    let fresh = RedisServer::start(&[]);
    for (user, rules, _) in &cases {
        let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
        args.extend_from_slice(rules);
        command(&fresh.address(), &args).unwrap();
    }
    command(
        &fresh.address(),
        &[
            &["ACL", "SETUSER", "no_load", "reset", "on", ">pw", keys][..],
            &required,
        ]
        .concat()
        .into_iter()
        .filter(|r| *r != "+script|load")
        .collect::<Vec<_>>(),
    )
    .unwrap();
    let fresh_url = |user: &str, db: u8| format!("redis://{user}:pw@{}/{db}", fresh.address());
    let mut all = vec![("no_load", Vec::new(), "'script|load'")];
    all.extend(cases.iter().cloned());
    for (user, _, named) in &all {
        let db = if *user == "no_select" { 1 } else { 0 };
        let outcome = async {
            let p = build(&fresh_url(user, db), timeout).await?;
            p.migrate().await?;
            p.lock(&cfg("job")).await?;
            p.locks().await
        };
        let e = outcome.await.expect_err(user);
        let text = e.to_string();
        assert!(
            matches!(&e, Error::Database { backend: Backend::Redis, location, .. } if *location == fresh.address()),
            "{user}: {e:?}"
        );
        for part in ["permission denied", named, REQUIRED_COMMANDS, "~{errors}:*"] {
            assert!(text.contains(part), "{user}: {part:?} in {text}");
        }
        assert!(!text.contains("cannot reach"), "{user}: {text}");
        eprintln!("{user}: {text}");
    }
}
