//! The claim: one `acquire` script for one lock or for every lock due at one instant, and what
//! its answers become (guards, `None`, or a tick refused as too far ahead).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use shedlock::lease::{Acquired, Lease};
use shedlock::{LockConfiguration, LockGuard, Result};
use tokio::time::Instant;

use crate::{Inner, micros, read};

impl Inner {
    pub(crate) async fn acquire_many(
        self: &Arc<Self>,
        configs: &[LockConfiguration],
    ) -> Result<Vec<Result<Option<LockGuard>>>> {
        // One id per call, the same for its retry: a retry whose first attempt took the lock
        // (the connection broke before the answer came) gets that lease back, instead of
        // finding the lock held (by itself) and the tick claimed, and leaving both unused
        // until the lease runs out.
        let request = format!(
            "{}-{}",
            self.request_prefix,
            self.requests.fetch_add(1, Ordering::Relaxed)
        );
        let mut invocation = self.scripts.acquire.prepare_invoke();
        invocation
            .key(format!("{}names", self.tag))
            .arg(&self.settings.locked_by)
            .arg(micros(self.settings.tick_tolerance))
            .arg(self.app_now())
            .arg(request);
        for config in configs {
            invocation
                .key(self.key("lock:", config.name()))
                .key(self.key("meta:", config.name()))
                .arg(config.name())
                .arg(micros(config.lock_at_most_for()))
                .arg(
                    config
                        .tick()
                        .map(|t| t.timestamp_micros().to_string())
                        .unwrap_or_default(),
                );
        }
        let sent_at = Instant::now();
        let answers: Vec<(String, Option<i64>)> = self
            .run(&invocation, || match configs {
                [one] => format!("acquire lock {:?}", one.name()),
                many => format!("claim {} locks in one script", many.len()),
            })
            .await?;
        let operation = || format!("read the answer of a claim of {} locks", configs.len());
        if answers.len() != configs.len() {
            return Err(self.unexpected(
                &operation(),
                "a different number of answers than locks".into(),
            ));
        }
        let mut decided = Vec::with_capacity(configs.len());
        for (config, (token, ahead_us)) in configs.iter().zip(answers) {
            let Some(token) = read::parse_token(token.as_bytes()) else {
                return Err(self.unexpected(&operation(), format!("the token {token:?}")));
            };
            decided.push(self.decide(config, token, ahead_us, sent_at));
        }
        Ok(decided)
    }

    /// What an acquire answers (shedlock's [`Acquired::into_guard`], as every provider
    /// decides it): a token is a guard over this provider; no token, with how far the tick was
    /// ahead of the server's `TIME`, is `None` or a tick refused as too far ahead.
    fn decide(
        self: &Arc<Self>,
        config: &LockConfiguration,
        token: i64,
        ahead_us: Option<i64>,
        sent_at: Instant,
    ) -> Result<Option<LockGuard>> {
        let acquired = if token > 0 {
            Acquired::Token(token)
        } else {
            Acquired::NotTaken { ahead_us }
        };
        let lease = || Arc::clone(self) as Arc<dyn Lease>;
        acquired.into_guard(config, lease, sent_at, self.settings.tick_tolerance)
    }
}
