//! `shedlock list` and `list --json`, on every backend.

use std::time::Duration;

use serde_json::Value;
use shedlock::LockProvider;

use crate::common::{
    CliDb, HOLDER, TEN_MINUTES, cfg, cli, column, millis, parse_table, provider, secs, state, tick,
    time,
};

pub(crate) async fn list_shows_held_and_free_locks<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let held = provider
        .lock(&cfg("held_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let free = provider
        .lock(&cfg("free_job", TEN_MINUTES).for_tick(tick(1)))
        .await
        .unwrap()
        .unwrap();
    let free_token = free.fencing_token();
    assert!(free.unlock().await.unwrap());
    let free_state = state(&provider, "free_job").await;

    let out = cli(db, &["list"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(
        column(&rows, "NAME"),
        ["free_job", "held_job"],
        "{}",
        out.stdout
    );
    let (f, h) = (&rows[0], &rows[1]);
    assert_eq!(h["STATE"], "held");
    assert_eq!(h["LOCKED_BY"], HOLDER);
    assert_eq!(h["TOKEN"], held.fencing_token().to_string());
    assert_eq!(h["LAST_TICK"], "-");
    let remaining = humantime::parse_duration(&h["REMAINING"]).unwrap();
    assert!(
        (Duration::from_secs(540)..=TEN_MINUTES).contains(&remaining),
        "{}",
        out.stdout
    );
    assert!(h["LOCKED_UNTIL"] > h["LOCKED_AT"], "{}", out.stdout);
    assert_eq!(f["STATE"], "free");
    assert_eq!(f["REMAINING"], "-");
    assert_eq!(f["TOKEN"], free_token.to_string());
    assert_eq!(f["LAST_TICK"], secs(tick(1)));
    assert_eq!(f["LOCKED_UNTIL"], secs(free_state.locked_until));

    let out = cli(db, &["list", "--json"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let locks = out.json();
    assert_eq!(locks.len(), 2, "{}", out.stdout);
    let (f, h) = (&locks[0], &locks[1]);
    assert_eq!(h["name"], "held_job");
    assert_eq!(h["held"], true);
    assert_eq!(h["locked_by"], HOLDER);
    assert_eq!(h["fencing_token"], held.fencing_token());
    assert_eq!(h["last_tick"], Value::Null);
    let remaining_ms = h["remaining_ms"].as_u64().unwrap();
    assert!((540_000..=600_000).contains(&remaining_ms), "{h}");
    let until = time(&h["locked_until"]) - time(&h["locked_at"]);
    assert!(
        (599_000..=600_000).contains(&until.num_milliseconds()),
        "{h}"
    );
    assert_eq!(f["name"], "free_job");
    assert_eq!(f["held"], false);
    assert_eq!(f["remaining_ms"], 0);
    assert_eq!(f["fencing_token"], free_token);
    assert_eq!(time(&f["last_tick"]), tick(1));
    assert_eq!(f["locked_until"], millis(free_state.locked_until));
    assert_eq!(f["locked_at"], millis(free_state.locked_at));
    assert!(held.unlock().await.unwrap());
}
