//! The statements on a held lock, as a guard sends them ([`Lease`]): extend, unlock, and the
//! grouped unlock ([`Statements::unlock_many`](super::dialect::Statements::unlock_many)).

use std::time::Duration;

use futures_util::future::BoxFuture;

use super::core::{Core, run};
use super::dialect::Param;
use super::driver::Driver;
use super::quirks::Quirks;
use crate::error::Result;
use crate::lease::{Lease, Releases, Unlock};

impl<D: Quirks> Lease for Core<D> {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let done = run!(self, self.sql.extend, execute, |p| match p {
                Param::Name => Some(name.into()),
                Param::Token => Some(token.into()),
                Param::AtMost => Some(at_most.into()),
                _ => None,
            });
            match done {
                Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
                Err(e) => Err(self.fail(format!("extend lock {name:?}"), e).await),
            }
        })
    }

    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let done = run!(self, self.sql.unlock, execute, |p| match p {
                Param::Name => Some(name.into()),
                Param::Token => Some(token.into()),
                Param::AtLeast => Some(at_least.into()),
                Param::Slack => Some(slack.into()),
                _ => None,
            });
            match done {
                Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
                Err(e) => Err(self.fail(format!("unlock lock {name:?}"), e).await),
            }
        })
    }

    fn unlock_many<'a>(&'a self, unlocks: &'a [Unlock]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let items: Vec<_> = unlocks
                .iter()
                .map(|u| {
                    (
                        u.name.as_str(),
                        u.token,
                        D::batch_duration(u.at_least),
                        D::batch_duration(u.slack),
                    )
                })
                .collect();
            let what = || format!("release {} locks in one statement", unlocks.len());
            let json = match serde_json::to_string(&items) {
                Ok(json) => json,
                Err(e) => return Err(self.fail(what(), sqlx::Error::Encode(Box::new(e))).await),
            };
            let done = run!(self, self.sql.unlock_many, execute, |p| match p {
                Param::Batch => Some(json.as_str().into()),
                _ => None,
            });
            match done {
                Ok(done) => Ok(D::Db::rows_affected(&done)),
                Err(e) => Err(self.fail(what(), e).await),
            }
        })
    }

    fn releases(&self) -> Option<&Releases> {
        Some(&self.releases)
    }
}
