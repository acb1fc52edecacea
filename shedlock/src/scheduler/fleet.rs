//! The fleet: how many instances fire the same jobs, learned from seats in the lock table, and
//! how the jobs due at one tick are shared among them (ADR 0010).
//!
//! Each scheduler holds one seat, an ordinary lock named `shedlock.fleet/<fleet>/<n>` taken at
//! the lowest free `n` and renewed every [`SEAT_RENEW`], and reads which seats are held (its
//! provider's [`LockAdmin::lock_states`](crate::LockAdmin::lock_states), one statement for a
//! fleet of up to 32, through
//! [`LockProvider::as_admin`](crate::LockProvider::as_admin)). With `K` seats held and its own
//! at rank `r` among them, it fires at once the jobs of a tick whose owner, a hash of the job's
//! name and the tick modulo `K`, is `r`, and the others after the help delay, when their owners
//! have claimed them: a job whose owner is gone, or whose owner could not take it (its run
//! limit), is claimed by whoever helps first. The lock still decides every tick, so a fleet
//! that disagrees about its size (an instance joining, one dying) costs only time, never a
//! duplicate or a lost tick.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::registry::JobState;
use crate::config::LockConfiguration;
use crate::guard::LockGuard;
use crate::provider::LockProvider;

/// How long a seat lasts without renewal: an instance gone for this long stops counting.
const SEAT_LEASE: Duration = Duration::from_secs(10);
/// How often an instance renews its seat and reads the others'.
const SEAT_RENEW: Duration = Duration::from_secs(3);
/// Seats read past this instance's own: free seats in a row after which none higher is read
/// (seats are taken lowest first, so a fleet's seats have few holes).
const SEAT_GAP: usize = 3;
/// Seats read in one statement.
const SEAT_PAGE: usize = 32;
/// The most seats a fleet has.
const MAX_SEATS: usize = 1024;
/// Lock names read in one statement when looking which of the others' jobs were claimed.
const CLAIMED_PAGE: usize = 1000;
/// The lease of a share's marker ([`Fleet::share_marker`]): only its claimed tick matters, so
/// it is free again at once for the next tick's claim.
const SHARE_MARKER_LEASE: Duration = Duration::from_millis(1);

/// Which instances fire this scheduler's ticks, as this instance last read its fleet's seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetView {
    /// Instances holding a seat (this one included).
    pub instances: usize,
    /// This instance's place among them, from 0: the share of each tick it fires at once.
    pub position: usize,
}

/// The fleet as this scheduler sees it, and how it shares a tick.
pub(super) struct Fleet {
    /// The fleet's name.
    name: String,
    /// Seat lock names: the prefix and the seat's number.
    prefix: String,
    /// How long after a tick this instance helps with the jobs of the others' shares (zero:
    /// no spread, every job at once).
    help_after: Duration,
    view: Mutex<Option<FleetView>>,
}

impl Fleet {
    pub(super) fn new(name: &str, help_after: Duration) -> Self {
        Self {
            name: name.to_owned(),
            prefix: format!("shedlock.fleet/{name}/"),
            help_after,
            view: Mutex::new(None),
        }
    }

    /// The fleet's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Whether ticks are shared at all.
    pub(super) fn spreads(&self) -> bool {
        !self.help_after.is_zero()
    }

    pub(super) fn help_after(&self) -> Duration {
        self.help_after
    }

    /// The fleet as last read; `None` before the first reading, or without a seat.
    pub(super) fn view(&self) -> Option<FleetView> {
        *self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_view(&self, view: Option<FleetView>) {
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = view;
    }

    /// The jobs of `tick` this instance fires at once (its share), those it helps with after
    /// [`help_after`](Self::help_after) (empty when it is alone or does not know), and the
    /// view the split was made by (`None`: no split).
    pub(super) fn split(
        &self,
        tick: DateTime<Utc>,
        group: Vec<Arc<JobState>>,
    ) -> (Vec<Arc<JobState>>, Vec<Arc<JobState>>, Option<FleetView>) {
        match self.view() {
            Some(view) if self.spreads() && view.instances > 1 => {
                let (mine, others) = group
                    .into_iter()
                    .partition(|job| owner(job.job.name(), tick, view.instances) == view.position);
                (mine, others, Some(view))
            }
            _ => (group, Vec::new(), None),
        }
    }

    /// The lock whose claim of a tick says "the share `position` of a fleet of `view.instances`
    /// is claimed, every job of it": its owner claims it with its share, in the same statement,
    /// when it claims the whole share; the others read it instead of each job's lock
    /// ([`claimed_elsewhere`]). `None` when the name would be too long for a lock.
    ///
    /// The marker's name carries `jobs`, the digest of the instance's jobs
    /// ([`Jobs::digest`](super::registry::Jobs::digest)): an instance that carries other jobs
    /// (a deploy under way, a schedule changed on one instance before another) reads another
    /// name, finds no marker, and reads each job's lock. Its owner claimed every job of the
    /// share that it carries, which says nothing of a job only the reader carries.
    pub(super) fn share_marker(
        &self,
        view: FleetView,
        position: usize,
        jobs: u64,
    ) -> Option<LockConfiguration> {
        let name = format!(
            "{}share/{}/{position}/{jobs:016x}",
            self.prefix, view.instances
        );
        LockConfiguration::new(name, SHARE_MARKER_LEASE, Duration::ZERO).ok()
    }

    /// Where a job waiting for a slot stands among the waiting jobs of its tick: its owner's
    /// distance after this instance (its own share first, then the next instance's, …), then
    /// its hash, so two instances with free slots take different waiting jobs first.
    pub(super) fn order(&self, name: &str, tick: DateTime<Utc>) -> (usize, u64) {
        let hash = share_hash(name, tick);
        match self.view() {
            Some(view) if self.spreads() && view.instances > 1 => {
                let owner = (hash % view.instances as u64) as usize;
                let distance = (owner + view.instances - view.position) % view.instances;
                (distance, hash)
            }
            _ => (0, hash),
        }
    }

    fn seat_name(&self, seat: usize) -> String {
        format!("{}{seat}", self.prefix)
    }

    fn seat_config(&self, seat: usize) -> Option<LockConfiguration> {
        LockConfiguration::new(self.seat_name(seat), SEAT_LEASE, Duration::ZERO).ok()
    }
}

/// The instance that owns `name`'s run of `tick` among `instances`.
fn owner(name: &str, tick: DateTime<Utc>, instances: usize) -> usize {
    (share_hash(name, tick) % instances as u64) as usize
}

/// Which instance of a fleet of `instances` owns job `name`'s run of `tick`: its rank among the
/// fleet's held seats, lowest seat first (see [Sharing a tick](crate::Scheduler#sharing-a-tick)).
/// Every scheduler of the fleet computes the same; a tool showing the fleet (the dashboard)
/// computes it too. `0` for a fleet of one or none.
pub fn share_owner(name: &str, tick: DateTime<Utc>, instances: usize) -> usize {
    if instances <= 1 {
        0
    } else {
        owner(name, tick, instances)
    }
}

/// FNV-1a over the job's name and the tick: the same on every instance and every build (the
/// standard library's hashers promise neither), and a different owner for a job each tick.
fn share_hash(name: &str, tick: DateTime<Utc>) -> u64 {
    let micros = tick.timestamp_micros().to_le_bytes();
    let hash = super::registry::fnv1a(name.bytes().chain(micros));
    // FNV's low bits mix poorly for short inputs: fold the high half in.
    hash ^ (hash >> 32)
}

/// Of the jobs of the other instances' shares of `tick`, those whose tick was claimed already
/// (by their owner, or by an instance that helped), and the others: those not yet claimed, and
/// every job whose lock is not known, or all of them when the provider cannot show its locks
/// or the read fails.
///
/// A share whose owner claimed all of it says so in its marker ([`Fleet::share_marker`]), read
/// for every share in one statement: its jobs are claimed, and not one of their locks is read.
/// The jobs of the other shares are read from their locks, a statement per [`CLAIMED_PAGE`]
/// jobs. With `view`, the fleet the shares were split by; without, no markers are read.
/// `digest`: this instance's jobs' ([`Fleet::share_marker`]).
pub(super) async fn claimed_elsewhere(
    fleet: &Fleet,
    provider: &dyn LockProvider,
    tick: DateTime<Utc>,
    jobs: Vec<Arc<JobState>>,
    view: Option<FleetView>,
    digest: u64,
) -> (Vec<Arc<JobState>>, Vec<Arc<JobState>>) {
    let Some(admin) = provider.as_admin() else {
        return (Vec::new(), jobs);
    };
    // The shares claimed whole, by their markers.
    let mut whole = std::collections::HashSet::new();
    if let Some(view) = view {
        let markers: Vec<(usize, String)> = (0..view.instances)
            .filter(|&position| position != view.position)
            .filter_map(|position| {
                fleet
                    .share_marker(view, position, digest)
                    .map(|marker| (position, marker.name().to_owned()))
            })
            .collect();
        let names: Vec<String> = markers.iter().map(|(_, name)| name.clone()).collect();
        if let Ok(states) = admin.lock_states(&names).await {
            for state in states {
                if state.last_tick.is_some_and(|last| last >= tick)
                    && let Some((position, _)) = markers.iter().find(|(_, n)| *n == state.name)
                {
                    whole.insert(*position);
                }
            }
        }
    }
    let (mut claimed, rest): (Vec<Arc<JobState>>, Vec<Arc<JobState>>) = match view {
        Some(view) if !whole.is_empty() => jobs.into_iter().partition(|job| {
            job.lock().is_some() && whole.contains(&owner(job.job.name(), tick, view.instances))
        }),
        _ => (Vec::new(), jobs),
    };
    let names: Vec<String> = rest
        .iter()
        .filter_map(|job| job.lock().map(|lock| lock.name().to_owned()))
        .collect();
    let mut read = std::collections::HashSet::new();
    for page in names.chunks(CLAIMED_PAGE) {
        match admin.lock_states(page).await {
            Ok(states) => read.extend(
                states
                    .into_iter()
                    .filter(|state| state.last_tick.is_some_and(|last| last >= tick))
                    .map(|state| state.name),
            ),
            Err(error) => {
                tracing::debug!(%tick, %error, "fleet: could not read which of the others' jobs were claimed: helping with all");
                return (claimed, rest);
            }
        }
    }
    let (also, later): (Vec<Arc<JobState>>, Vec<Arc<JobState>>) = rest
        .into_iter()
        .partition(|job| job.lock().is_some_and(|lock| read.contains(lock.name())));
    claimed.extend(also);
    (claimed, later)
}

/// Holds this instance's seat and reads the fleet's every [`SEAT_RENEW`], until shutdown,
/// when it gives the seat back (the others count one fewer at their next reading). `stop`
/// turns true at shutdown.
pub(super) async fn fleet_loop(
    fleet: &Fleet,
    provider: &dyn LockProvider,
    mut stop: watch::Receiver<bool>,
) {
    if provider.as_admin().is_none() {
        tracing::info!(
            "the provider cannot show other instances' seats: every instance claims every tick at once"
        );
        return;
    }
    let mut seat: Option<(usize, LockGuard)> = None;
    loop {
        seat = renew_seat(fleet, provider, seat).await;
        let view = match &seat {
            Some((mine, _)) => read_fleet(fleet, provider, *mine).await,
            None => None,
        };
        if view != fleet.view() {
            if let Some(view) = view {
                tracing::info!(
                    instances = view.instances,
                    position = view.position,
                    "fleet: sharing each tick's jobs"
                );
            }
            fleet.set_view(view);
        }
        tokio::select! {
            () = tokio::time::sleep(SEAT_RENEW) => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    fleet.set_view(None);
    if let Some((_, guard)) = seat {
        let _ = guard.unlock().await;
    }
}

/// Renews the seat held, or takes the lowest free one.
async fn renew_seat(
    fleet: &Fleet,
    provider: &dyn LockProvider,
    seat: Option<(usize, LockGuard)>,
) -> Option<(usize, LockGuard)> {
    if let Some((n, mut guard)) = seat {
        match guard.extend(SEAT_LEASE, Duration::ZERO).await {
            Ok(true) => return Some((n, guard)),
            Ok(false) => tracing::warn!(seat = n, "fleet: seat lost; taking a free one"),
            Err(error) => {
                // Not renewed this time; the lease outlasts a few failed renewals.
                tracing::warn!(seat = n, %error, "fleet: could not renew the seat");
                return Some((n, guard));
            }
        }
    }
    for n in 0..MAX_SEATS {
        let config = fleet.seat_config(n)?;
        match provider.lock(&config).await {
            Ok(Some(guard)) => return Some((n, guard)),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "fleet: could not take a seat; claiming every tick at once");
                return None;
            }
        }
    }
    tracing::warn!(
        seats = MAX_SEATS,
        "fleet: every seat is held; claiming every tick at once"
    );
    None
}

/// The fleet's seats held now, and this instance's place among them, read [`SEAT_PAGE`] seats
/// to a statement ([`LockAdmin::lock_states`](crate::LockAdmin::lock_states)): one statement
/// for a fleet of up to about that many instances.
async fn read_fleet(fleet: &Fleet, provider: &dyn LockProvider, mine: usize) -> Option<FleetView> {
    let admin = provider.as_admin()?;
    let (mut instances, mut position, mut free_in_a_row) = (0, None, 0);
    let mut page_start = 0;
    while page_start < MAX_SEATS {
        let page_end = (page_start + SEAT_PAGE)
            .max(mine + SEAT_GAP + 1)
            .min(MAX_SEATS);
        let names: Vec<String> = (page_start..page_end)
            .filter(|&n| n != mine)
            .map(|n| fleet.seat_name(n))
            .collect();
        let held: std::collections::HashSet<String> = match admin.lock_states(&names).await {
            Ok(states) => states
                .into_iter()
                .filter(|state| state.is_held())
                .map(|state| state.name)
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "fleet: could not read the seats");
                return fleet.view();
            }
        };
        for n in page_start..page_end {
            if n == mine {
                position = Some(instances);
            }
            if n == mine || held.contains(&fleet.seat_name(n)) {
                instances += 1;
                free_in_a_row = 0;
            } else {
                free_in_a_row += 1;
                if n > mine && free_in_a_row >= SEAT_GAP {
                    return position.map(|position| FleetView {
                        instances,
                        position,
                    });
                }
            }
        }
        page_start = page_end;
    }
    position.map(|position| FleetView {
        instances,
        position,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_share_owner_is_the_schedulers() {
        let tick = Utc::now();
        for name in ["a", "sync-17", "nightly"] {
            assert_eq!(share_owner(name, tick, 3), owner(name, tick, 3));
            assert_eq!(share_owner(name, tick, 1), 0);
            assert_eq!(share_owner(name, tick, 0), 0);
        }
    }

    #[test]
    fn shares_are_near_fair_and_move_between_ticks() {
        let tick = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let mut shares = [0usize; 4];
        for job in 0..200 {
            shares[owner(&format!("job-{job}"), tick, 4)] += 1;
        }
        assert!(
            shares.iter().all(|&share| (35..=65).contains(&share)),
            "{shares:?}"
        );
        let next = tick + chrono::TimeDelta::seconds(10);
        let moved = (0..200)
            .filter(|job| {
                let name = format!("job-{job}");
                owner(&name, tick, 4) != owner(&name, next, 4)
            })
            .count();
        assert!(moved > 100, "only {moved} of 200 jobs changed owner");
    }
}
