//! `shedlock migrate`: creates or upgrades the lock table and the run history table.

use shedlock::LockAdmin;

use crate::failure::Failure;
use crate::output::print;

pub(crate) async fn migrate(provider: &dyn LockAdmin) -> Result<(), Failure> {
    provider.migrate().await?;
    let table = provider.table_name();
    print(&format!(
        "tables {table} and {table}_runs are up to date ({})\n",
        provider.backend()
    ));
    Ok(())
}
