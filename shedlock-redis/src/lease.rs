//! How a Redis lock is extended and released: the provider's [`Lease`], each operation the
//! `extend` or `unlock` script; the unlocks of a group go in one `unlock` script.

use std::time::Duration;

use futures_util::future::BoxFuture;
use shedlock::Result;
use shedlock::lease::{Lease, Releases, Unlock};

use crate::{Inner, micros};

impl Lease for Inner {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut invocation = self.scripts.extend.prepare_invoke();
            invocation
                .key(self.key("lock:", name))
                .key(self.key("meta:", name))
                .arg(token)
                .arg(micros(at_most))
                .arg(self.app_now());
            let extended: i64 = self
                .run(&invocation, || format!("extend lock {name:?}"))
                .await?;
            Ok(extended == 1)
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
            let unlock = Unlock::new(name, token, at_least, slack);
            let released = self
                .unlock_script(std::slice::from_ref(&unlock), || {
                    format!("unlock lock {name:?}")
                })
                .await?;
            Ok(released == 1)
        })
    }

    fn unlock_many<'a>(&'a self, unlocks: &'a [Unlock]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.unlock_script(unlocks, || {
            format!("release {} locks in one script", unlocks.len())
        }))
    }

    fn releases(&self) -> Option<&Releases> {
        Some(&self.releases)
    }
}

impl Inner {
    /// The unlock script for `unlocks`: how many it released.
    async fn unlock_script(
        &self,
        unlocks: &[Unlock],
        operation: impl Fn() -> String,
    ) -> Result<u64> {
        let mut invocation = self.scripts.unlock.prepare_invoke();
        invocation.arg(self.app_now());
        for u in unlocks {
            invocation
                .key(self.key("lock:", &u.name))
                .key(self.key("meta:", &u.name))
                .arg(u.token)
                .arg(micros(u.at_least))
                .arg(micros(u.slack));
        }
        self.run(&invocation, operation).await
    }
}
