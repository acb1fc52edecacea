//! `shedlock migrate`, on every backend.

use shedlock::history::RunQuery;
use shedlock::{LockAdmin, RunStore};
use shedlock_suite::unique_name;

use crate::common::{CliDb, run};

pub(crate) async fn migrate_creates_both_tables_and_is_idempotent<D: CliDb>(db: &D) {
    let table = unique_name("cli_m");
    let fresh = db.provider_for_table(&table);
    assert!(
        fresh.locks().await.is_err(),
        "{table} does not exist before migrate"
    );
    let url = db.url();
    let base = ["--database-url", url.as_str(), "--table", table.as_str()];
    let expected = format!(
        "tables {table} and {table}_runs are up to date ({})\n",
        D::BACKEND
    );
    for _ in 0..2 {
        let out = run(&[&base[..], &["migrate"]].concat(), &[], "").await;
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (0, expected.as_str(), "")
        );
        assert_eq!(fresh.locks().await.unwrap(), vec![]);
        assert_eq!(fresh.runs(&RunQuery::latest(5)).await.unwrap(), vec![]);
    }
    let out = run(&[&base[..], &["list"]].concat(), &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stdout,
        format!("no locks in table {table} ({})\n", D::BACKEND)
    );
    let out = run(&[&base[..], &["list", "--json"]].concat(), &[], "").await;
    assert_eq!((out.code, out.json()), (0, vec![]));
    let out = run(&[&base[..], &["history"]].concat(), &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stdout,
        format!("no runs in table {table}_runs ({})\n", D::BACKEND)
    );
    for t in [
        format!("{table}_runs"),
        format!("_{table}_migrations"),
        table,
    ] {
        db.exec(&format!("DROP TABLE IF EXISTS {t}")).await;
    }
}
