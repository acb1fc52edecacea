//! The ACL rules the run history needs.

use std::time::Duration;

use shedlock::history::{NewRun, RunEnd, RunOutcome, RunQuery};
use shedlock::{LockAdmin, RunStore};
use shedlock_redis::RedisLockProvider;

use super::Private;

/// A user with the documented rules (`~{<prefix>}:*`, `REQUIRED_COMMANDS`, `HISTORY_COMMANDS`)
/// can do every history operation; one with the lock rules only is told what the history
/// needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_history_acl_rules_are_documented() {
    use shedlock_redis::{HISTORY_COMMANDS, REQUIRED_COMMANDS};
    let server = Private::start().await;
    let history: Vec<&str> = HISTORY_COMMANDS.split(' ').collect();
    for (user, extra) in [("app", history), ("locks_only", Vec::new())] {
        let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw", "~{acl}:*"];
        args.extend(REQUIRED_COMMANDS.split(' '));
        args.extend(extra);
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
    let run = |name: &str, outcome| NewRun::new(name, name, None, outcome).fencing_token(Some(3));
    let id = p.record_run(&run("a", RunOutcome::Running)).await.unwrap();
    let ids = p
        .record_runs(&[
            run("b", RunOutcome::Running),
            run("c", RunOutcome::Executed),
        ])
        .await;
    assert!(ids.iter().all(Result::is_ok), "{ids:?}");
    p.finish_run(id, RunOutcome::Failed, Some("503"))
        .await
        .unwrap();
    let b = *ids[0].as_ref().unwrap();
    let ends = p
        .finish_runs(&[RunEnd::new(b, RunOutcome::Executed, None)])
        .await;
    assert!(ends.iter().all(Result::is_ok), "{ends:?}");
    assert_eq!(p.runs(&RunQuery::latest(10)).await.unwrap().len(), 3);
    assert_eq!(
        p.runs(&RunQuery::latest(10).name("a")).await.unwrap().len(),
        1
    );
    p.record_run(&run("d", RunOutcome::Running)).await.unwrap();
    assert_eq!(
        p.close_abandoned_runs().await.unwrap(),
        1,
        "d's lock has no keys"
    );
    let all = ["a", "b", "c", "d"].map(str::to_owned);
    assert_eq!(p.prune_runs(&all, Duration::ZERO).await.unwrap(), 4);
    assert!(p.runs(&RunQuery::latest(10)).await.unwrap().is_empty());

    let p = provider("locks_only").await;
    let e = p
        .record_run(&run("e", RunOutcome::Executed))
        .await
        .unwrap_err();
    let text = e.to_string();
    for part in ["permission denied", HISTORY_COMMANDS] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
}
