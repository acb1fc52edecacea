//! `shedlock migrate`: creates or upgrades the lock table and the run history table; on Redis,
//! where there is nothing to create, checks the server and the key prefix instead.

use shedlock::LockAdmin as _;

use crate::db::Db;
use crate::failure::Failure;
use crate::output::print;

pub(crate) async fn migrate(db: &Db) -> Result<(), Failure> {
    if let Db::Redis(provider) = db {
        // Creates nothing: checks the type of the set of lock names (one script, whatever the
        // number of locks).
        provider.migrate().await?;
        let prefix = provider.key_prefix();
        print(&format!(
            "nothing to migrate: Redis needs no tables or schema; the server at {} answers, and \
             {{{prefix}}}:names is a set or absent, as shedlock keeps it (key prefix {prefix})\n",
            provider.address()
        ));
        return Ok(());
    }
    let provider = db.admin();
    provider.migrate().await?;
    let table = provider.table_name();
    print(&format!(
        "tables {table} and {table}_runs are up to date ({})\n",
        provider.backend()
    ));
    Ok(())
}
