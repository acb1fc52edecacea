//! Delays that spread runs out: a tick's jitter (the same on every instance for a job and
//! tick) and a retry's backoff (exponential, full jitter, capped).
//!
//! Both come from a 64-bit mix of the job's name and the tick (SplitMix64's finaliser over an
//! FNV-1a hash), written here rather than taken from `std`'s hasher, whose output may change
//! between Rust releases: a fleet half-way through a deploy must agree on each tick's delay.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::schedules::RetryPolicy;

/// FNV-1a over `bytes`, from `seed`.
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut hash = seed ^ 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// SplitMix64's finaliser: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A number in `[0, 2⁶⁴)` that depends only on `job`, `tick` and `salt`.
fn draw(job: &str, tick: DateTime<Utc>, salt: u64) -> u64 {
    let hash = fnv1a(salt, job.as_bytes());
    mix(hash ^ mix(tick.timestamp_micros() as u64))
}

/// A duration in `[0, bound)` picked by `draw` (zero for a zero bound).
fn below(bound: Duration, draw: u64) -> Duration {
    let micros = u64::try_from(bound.as_micros()).unwrap_or(u64::MAX);
    if micros == 0 {
        return Duration::ZERO;
    }
    Duration::from_micros(draw % micros)
}

/// How long the run of `job`'s `tick` waits before it starts with a jitter of `jitter`
/// ([`Job::jitter`](crate::Job::jitter)): in `[0, jitter)`, the same on every instance, for
/// every version of this crate.
pub fn jitter_delay(job: &str, tick: DateTime<Utc>, jitter: Duration) -> Duration {
    below(jitter, draw(job, tick, 0))
}

/// How long before retry `retry` (1 for the first) of `job`'s `tick`: in
/// `[0, min(cap, base · 2^(retry − 1)))`. `instance` (this instance's `locked_by`) is mixed in,
/// so two instances retrying different ticks of one job do not move in step.
pub(crate) fn backoff(
    policy: &RetryPolicy,
    job: &str,
    tick: DateTime<Utc>,
    retry: u32,
    instance: &str,
) -> Duration {
    let doubling = 2u32.saturating_pow(retry.saturating_sub(1).min(31));
    let bound = policy.base.saturating_mul(doubling).min(policy.cap);
    let salt = fnv1a(u64::from(retry), instance.as_bytes());
    below(bound, draw(job, tick, salt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + secs, 0).expect("a valid time")
    }

    #[test]
    fn a_jitter_is_the_same_for_a_job_and_tick_and_within_its_bound() {
        let jitter = Duration::from_secs(10);
        for s in 0..1000 {
            let a = jitter_delay("sync", tick(s), jitter);
            assert_eq!(a, jitter_delay("sync", tick(s), jitter));
            assert!(a < jitter, "{a:?} is not below {jitter:?}");
        }
        assert_eq!(
            jitter_delay("sync", tick(0), Duration::ZERO),
            Duration::ZERO
        );
    }

    #[test]
    fn jitters_spread_over_their_range() {
        // 1,000 ticks of one job, and one tick of 1,000 jobs: each tenth of the range holds
        // between 5 % and 15 % of the delays (a uniform draw holds 10 %).
        let jitter = Duration::from_secs(10);
        let spread = |delays: Vec<Duration>| {
            let mut bins = [0usize; 10];
            for d in &delays {
                bins[(d.as_secs_f64() / 1.0) as usize] += 1;
            }
            bins
        };
        let by_tick = spread(
            (0..1000)
                .map(|s| jitter_delay("sync", tick(s), jitter))
                .collect(),
        );
        let by_job = spread(
            (0..1000)
                .map(|j| jitter_delay(&format!("repo_sync_{j}"), tick(0), jitter))
                .collect(),
        );
        for bins in [by_tick, by_job] {
            assert!(bins.iter().all(|&n| (50..=150).contains(&n)), "{bins:?}");
        }
    }

    #[test]
    fn a_backoff_doubles_its_bound_up_to_the_cap() {
        let policy = RetryPolicy::new(10, Duration::from_secs(1), Duration::from_secs(30));
        for retry in 1..=10u32 {
            let bound = Duration::from_secs(1 << (retry - 1)).min(Duration::from_secs(30));
            let mut largest = Duration::ZERO;
            for s in 0..400 {
                let d = backoff(&policy, "sync", tick(s), retry, "pod-1");
                assert!(d < bound, "retry {retry}: {d:?} is not below {bound:?}");
                largest = largest.max(d);
            }
            // Full jitter: the draws reach the top half of the range.
            assert!(
                largest > bound / 2,
                "retry {retry}: largest {largest:?} of {bound:?}"
            );
        }
        // A huge retry number saturates instead of overflowing.
        assert!(backoff(&policy, "sync", tick(0), u32::MAX, "pod-1") < Duration::from_secs(30));
    }
}
