//! Each dialect's part of the schedule statements ([`ScheduleSql`]), beside the dialect
//! files so that those need not know the schedules.

use futures_util::future::BoxFuture;
use sqlx::Pool;

use super::{FEED_APPLICATION_NAME, ScheduleSql};
use crate::schedules::ChangeFeed;

/// PostgreSQL: writers serialise on the counter row's lock, at `READ COMMITTED` whatever the
/// session's level; every change `NOTIFY`s the table's channel.
#[cfg(feature = "postgres")]
impl ScheduleSql for super::super::postgres::Postgres {
    const BEGIN: &'static str = "BEGIN ISOLATION LEVEL READ COMMITTED";
    const FOR_UPDATE: &'static str = "FOR UPDATE";
    const NUMBERED: bool = true;
    const NOTIFY: Option<&'static str> = Some("SELECT pg_notify(?, ?)");
    /// The protocol's count of a statement's parameters is 16 bits.
    const MAX_BINDS: usize = 65_535;

    /// A `LISTEN` on a connection of its own (a pool of one, on the provider's connect
    /// options, named `shedlock schedule feed` in `pg_stat_activity`), that ends when the
    /// connection is lost rather than reconnecting silently: the watcher then reads what it
    /// missed and asks for a new feed.
    fn change_feed(
        pool: &Pool<sqlx::Postgres>,
        channel: String,
    ) -> BoxFuture<'static, Result<Option<ChangeFeed>, sqlx::Error>> {
        use futures_util::StreamExt as _;
        let options = (*pool.connect_options())
            .clone()
            .application_name(FEED_APPLICATION_NAME);
        Box::pin(async move {
            let own = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .max_lifetime(None)
                .idle_timeout(None)
                .connect_lazy_with(options);
            let mut listener = sqlx::postgres::PgListener::connect_with(&own).await?;
            listener.eager_reconnect(false);
            listener.listen(&channel).await?;
            let feed = futures_util::stream::unfold(listener, |mut listener| async move {
                match listener.try_recv().await {
                    Ok(Some(_)) => Some(((), listener)),
                    Ok(None) | Err(_) => None,
                }
            });
            Ok(Some(feed.boxed()))
        })
    }
}

/// MySQL and MariaDB: writers serialise on the counter row's lock.
#[cfg(feature = "mysql")]
impl ScheduleSql for super::super::mysql::MySql {
    const BEGIN: &'static str = "BEGIN";
    const FOR_UPDATE: &'static str = "FOR UPDATE";
    /// A prepared statement's placeholders are counted in 16 bits.
    const MAX_BINDS: usize = 65_535;
}

/// SQLite: one writer at a time, taken at the start of the transaction (`BEGIN IMMEDIATE`).
#[cfg(feature = "sqlite")]
impl ScheduleSql for super::super::sqlite::Sqlite {
    const BEGIN: &'static str = "BEGIN IMMEDIATE";
    const FOR_UPDATE: &'static str = "";
    /// `SQLITE_MAX_VARIABLE_NUMBER` since SQLite 3.32.
    const MAX_BINDS: usize = 32_766;
}
