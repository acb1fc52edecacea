//! `shedlock list`: every lock of the table (or the Redis key prefix), held or free.

use std::io::Write as _;

use serde_json::Value;
use shedlock::LockAdmin;
use shedlock::history::LockRows;

use crate::db::place;
use crate::failure::Failure;
use crate::output::{escape, pretty, print, remaining, render_table, time};
use shedlock_web::json::lock as lock_json;

/// Every lock; a row that cannot be read is left out of the list and named on stderr with what
/// is wrong in it.
pub(crate) async fn list(provider: &dyn LockAdmin, json: bool) -> Result<(), Failure> {
    let LockRows {
        locks, unreadable, ..
    } = provider.lock_rows().await?;
    if !unreadable.is_empty() {
        let mut stderr = std::io::stderr().lock();
        for row in &unreadable {
            let line = format!(
                "shedlock: lock {:?} {} cannot be read and is left out of the list: {}; fix or \
                 delete its row",
                row.name,
                place(provider),
                row.problem
            );
            let _ = writeln!(stderr, "{}", escape(&line, false));
        }
    }
    if json {
        let array: Vec<Value> = locks.iter().map(lock_json).collect();
        print(&format!("{}\n", pretty(&Value::Array(array))));
        return Ok(());
    }
    if locks.is_empty() {
        print(&format!(
            "no locks {} ({})\n",
            place(provider),
            provider.backend()
        ));
        return Ok(());
    }
    let rows = locks
        .iter()
        .map(|lock| {
            vec![
                lock.name.clone(),
                if lock.is_held() { "held" } else { "free" }.to_owned(),
                lock.locked_by.clone(),
                time(lock.locked_at),
                time(lock.locked_until),
                remaining(lock),
                lock.fencing_token.to_string(),
                lock.last_tick.map_or_else(|| "-".to_owned(), time),
            ]
        })
        .collect::<Vec<_>>();
    print(&render_table(
        &[
            "NAME",
            "STATE",
            "LOCKED_BY",
            "LOCKED_AT",
            "LOCKED_UNTIL",
            "REMAINING",
            "TOKEN",
            "LAST_TICK",
        ],
        &rows,
    ));
    Ok(())
}
