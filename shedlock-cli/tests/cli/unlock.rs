//! `shedlock unlock`: missing names, the prompt, `--yes`, free locks, a lock that changed hands;
//! on every backend.

use std::time::Duration;

use shedlock::{LockAdmin, LockProvider};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{CliDb, HOLDER, TEN_MINUTES, cfg, cli, command, provider, secs, state, tick};

pub(crate) async fn unlock_of_a_missing_name_exits_3<D: CliDb>(db: &D) {
    for args in [
        &["unlock", "no_such_job"][..],
        &["unlock", "no_such_job", "--yes"],
    ] {
        let out = cli(db, args, "y\n").await;
        assert_eq!(out.code, 3, "{out:#?}");
        assert_eq!(out.stdout, "");
        assert_eq!(
            out.error_line(),
            format!(
                "shedlock: no lock named \"no_such_job\" in table {}; `shedlock list` shows the locks there",
                db.table()
            )
        );
    }
    let provider = db.provider();
    assert_eq!(provider.lock_state("no_such_job").await.unwrap(), None);
}

pub(crate) async fn unlock_declined_exits_4_and_keeps_the_lock<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let guard = provider
        .lock(&cfg("stuck_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    let before = state(&provider, "stuck_job").await;
    let prompt = format!("Release lock \"stuck_job\" held by {HOLDER} (token {token})? [y/N] ");
    for answer in ["n\n", "", "\n", "maybe\n"] {
        let out = cli(db, &["unlock", "stuck_job"], answer).await;
        assert_eq!(out.code, 4, "answer {answer:?}: {out:#?}");
        assert!(out.stderr.starts_with(&prompt), "{out:#?}");
        let last = out.stderr.lines().last().unwrap();
        assert_eq!(
            last,
            format!(
                "shedlock: not released: lock \"stuck_job\" is still held by {HOLDER} (token {token})"
            )
        );
        assert!(
            out.stdout.contains(&format!("locked_by     {HOLDER}\n")),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains(&format!("fencing_token {token}\n")),
            "{}",
            out.stdout
        );
        let after = state(&provider, "stuck_job").await;
        assert!(after.is_held(), "{after:?}");
        assert_eq!(
            (after.fencing_token, after.locked_until, after.locked_at),
            (token, before.locked_until, before.locked_at)
        );
    }
    assert!(guard.unlock().await.unwrap(), "the holder still holds it");
}

pub(crate) async fn unlock_confirmed_releases_the_lock<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let mut guard = provider
        .lock(&cfg("stuck_job", TEN_MINUTES).for_tick(tick(2)))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    let out = cli(db, &["unlock", "stuck_job"], "y\n").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stderr,
        format!("Release lock \"stuck_job\" held by {HOLDER} (token {token})? [y/N] \n")
    );
    for text in [
        format!("released lock \"stuck_job\" (held by {HOLDER}, token {token})"),
        format!("the fencing token stays {token}: the next holder gets a higher one"),
        format!(
            "the last tick stays {}: that tick does not run again",
            secs(tick(2))
        ),
        "stops at its next keep-alive renewal".to_owned(),
        format!("its fencing token {token} is now stale"),
    ] {
        assert!(out.stdout.contains(&text), "{text:?} in {}", out.stdout);
    }
    let after = state(&provider, "stuck_job").await;
    assert!(!after.is_held(), "released: {after:?}");
    assert!(after.locked_until <= after.read_at);
    assert_eq!(after.fencing_token, token, "the token stays");
    assert_eq!(after.last_tick, Some(tick(2)), "the claimed tick stays");
    assert!(
        !guard.extend(TEN_MINUTES, Duration::ZERO).await.unwrap(),
        "the released holder's keep-alive renewal is refused"
    );
    assert!(
        provider
            .lock(&cfg("stuck_job", TEN_MINUTES).for_tick(tick(2)))
            .await
            .unwrap()
            .is_none(),
        "the claimed tick does not run again"
    );
    let next = provider
        .lock(&cfg("stuck_job", TEN_MINUTES))
        .await
        .unwrap()
        .expect("free for the next holder");
    assert!(next.fencing_token() > token);
    assert!(
        !guard.unlock().await.unwrap(),
        "the stale holder cannot free it"
    );
    assert!(state(&provider, "stuck_job").await.is_held());

    assert!(next.unlock().await.unwrap());

    // --yes does not ask.
    let mut other = provider
        .lock(&cfg("other_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let other_token = other.fencing_token();
    let out = cli(db, &["unlock", "other_job", "--yes"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    assert!(
        out.stdout.contains(&format!(
            "released lock \"other_job\" (held by {HOLDER}, token {other_token})"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("no tick was claimed through it"),
        "{}",
        out.stdout
    );
    let after = state(&provider, "other_job").await;
    assert!(!after.is_held(), "{after:?}");
    assert_eq!((after.fencing_token, after.last_tick), (other_token, None));
    assert!(!other.extend(TEN_MINUTES, Duration::ZERO).await.unwrap());
}

pub(crate) async fn unlock_of_a_free_lock_changes_nothing<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let guard = provider
        .lock(&cfg("done_job", TEN_MINUTES).for_tick(tick(3)))
        .await
        .unwrap()
        .unwrap();
    assert!(guard.unlock().await.unwrap());
    let before = state(&provider, "done_job").await;
    for args in [
        &["unlock", "done_job", "--yes"][..],
        &["unlock", "done_job"],
    ] {
        let out = cli(db, args, "").await;
        assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
        assert!(
            out.stdout.ends_with(&format!(
                "lock \"done_job\" is already free (it expired at {}); nothing to do\n",
                secs(before.locked_until)
            )),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("remaining     -\n"), "{}", out.stdout);
        let after = state(&provider, "done_job").await;
        assert_eq!(
            (
                &after.locked_by,
                after.fencing_token,
                after.locked_at,
                after.locked_until,
                after.last_tick
            ),
            (
                &before.locked_by,
                before.fencing_token,
                before.locked_at,
                before.locked_until,
                before.last_tick
            )
        );
    }
}

/// The holder that was shown is the only one released: if the lock changes hands while the
/// operator reads the prompt, the answer "y" releases nothing.
pub(crate) async fn unlock_refuses_a_lock_that_changed_hands<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let short = Duration::from_secs(5);
    let first = provider
        .lock(&cfg("flaky_job", short))
        .await
        .unwrap()
        .unwrap();
    let url = db.url();
    let mut child = command(&[
        "--database-url",
        &url,
        "--table",
        &db.table(),
        "unlock",
        "flaky_job",
    ])
    .spawn()
    .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("[y/N] ") {
        let n = tokio::time::timeout(Duration::from_secs(30), stderr.read(&mut buf))
            .await
            .expect("the prompt within 30 s")
            .unwrap();
        assert!(
            n > 0,
            "stderr closed before the prompt: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    // Meanwhile the lock expires and someone else takes it.
    while state(&provider, "flaky_job").await.is_held() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let second = provider
        .lock(&cfg("flaky_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"y\n").await.unwrap();
    drop(input);
    let mut rest = Vec::new();
    stderr.read_to_end(&mut rest).await.unwrap();
    seen.extend_from_slice(&rest);
    let status = child.wait().await.unwrap();
    let stderr = String::from_utf8(seen).unwrap();
    assert_eq!(status.code(), Some(4), "{stderr}");
    let old = first.fencing_token();
    assert!(
        stderr.lines().last().unwrap().starts_with(&format!(
            "shedlock: not released: lock \"flaky_job\" changed hands or expired since it was read (token {old} no longer holds it)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("(token {old})? [y/N] ")),
        "{stderr}"
    );
    let after = state(&provider, "flaky_job").await;
    assert!(after.is_held(), "the new holder keeps it: {after:?}");
    assert_eq!(after.fencing_token, second.fencing_token());
    assert!(second.fencing_token() > old);
    assert!(second.unlock().await.unwrap());
    assert!(
        !first.unlock().await.unwrap(),
        "the first holder's token is stale"
    );
}
