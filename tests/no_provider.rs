//! Provider resolution: no provider is a clear error, a scope overrides the process-wide
//! default, and the default can be set once. Its own test binary, because the default is
//! process-wide.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::context::current_provider;
use shedlock::{
    Error, LockConfiguration, LockProvider, TaskResult, run_locked, set_default_provider,
    with_provider,
};
use shedlock_suite::{Sqlite, TestDb};

fn cfg() -> LockConfiguration {
    LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap()
}

#[tokio::test]
async fn no_provider_is_an_error_then_scope_then_default() {
    // Nothing configured: a clear error, and the body never runs.
    let err = run_locked(cfg(), async { panic!("must not run without a lock") })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoProvider), "{err:?}");
    assert!(err.to_string().contains("set_default_provider"), "{err}");

    let scoped = Sqlite::setup().await.unwrap();
    let default = Sqlite::setup().await.unwrap();

    // A scope supplies the provider for everything inside it.
    let outcome = with_provider(scoped.provider(), run_locked(cfg(), async { 7 }))
        .await
        .unwrap();
    assert_eq!(outcome, TaskResult::Executed(7));
    assert!(scoped.row("job").await.is_some() && default.row("job").await.is_none());

    // The default serves calls outside any scope; a scope still overrides it.
    set_default_provider(default.provider()).unwrap();
    assert_eq!(current_provider().unwrap().table_name(), default.table());
    assert_eq!(
        run_locked(cfg(), async { 8 }).await.unwrap(),
        TaskResult::Executed(8)
    );
    assert!(default.row("job").await.is_some());
    let inner = with_provider(scoped.provider(), async {
        current_provider().unwrap().table_name().to_owned()
    })
    .await;
    assert_eq!(inner, scoped.table());

    // Set once.
    let err = set_default_provider(scoped.provider()).unwrap_err();
    assert!(matches!(err, Error::DefaultProviderAlreadySet), "{err:?}");
    assert_eq!(
        current_provider().unwrap().table_name(),
        default.table(),
        "the first default stays"
    );
}
