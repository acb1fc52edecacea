//! Overlap policies through a `kill -9`, with processes written the README's way
//! (`shedlock-beats --overlap POLICY`: a `#[scheduled]` job `slow`, every 2 s (every 3 s on
//! etcd, see below), each run 5 s, lock `slow` held 6 s, `slow::job().overlap(policy)`), each
//! logging every run it starts to a file of its own (issue 48, point 2).
//!
//! Two processes; once a run of `slow` starts, the process running it is killed with `-9`
//! mid-run. Its run place is held until its lease runs out, and then the survivor goes on:
//!
//! - every policy: no tick ran twice, and the survivor went on running ticks;
//! - `buffer_one`, `buffer_all:2`, `cancel_other`: the survivor's first run after the kill
//!   starts only once the dead run's lease is over (its tick + 6 s), and it is a tick that
//!   waited (started more than 1.5 s after its tick); under `cancel_other` it may instead be a
//!   newer tick that found the place free as the lease ended and replaced the waiting one,
//!   which the survivor then logged as it started it;
//! - `allow_all:2`: never more than two runs at once, the dead one counted until its lease
//!   is over.
//!
//! Every run has one policy per backend (`buffer_one` on PostgreSQL, `buffer_all:2` on MariaDB,
//! `cancel_other` on SQLite and on etcd, `allow_all:2` on Redis); `SHEDLOCK_SOAK=1` runs all 20.
//!
//! **etcd** (`shedlock-beats --backend etcd`, `shedlock-etcd`'s provider, on the cluster of
//! `SHEDLOCK_ETCD_URL`, default `http://127.0.0.1:2379`): the same cases, each on a key prefix
//! of its own (`overlap_etcd_<policy>_<pid>_…`, deleted after), with a spawner of its own
//! ([`EtcdPlace`]: the fleet helpers' [`Place`] knows only the stores `shedlock::Backend`
//! names). There `slow` fires every 3 s, not 2: a policy claims each tick with a 1 ms mark on
//! lock `slow`, and etcd holds any lease for at least its minimum TTL (2 s with its defaults),
//! so a tick 2 s after the last would find the mark still held and be lost. A tick that waited
//! still waits at least 2.7 s there (see [`WAITED_MS`]). When etcd does not answer, its cases
//! fail naming it and the command that starts it (`scripts/etcd start 127.0.0.1:2379`), as the
//! etcd kit's do; `scripts/test` starts a member, or leaves them out by name when it cannot.
//!
//! On a failure the processes' logs and runs files are kept, and the failure says where.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use shedlock::Backend;
use shedlock_suite::fleet::{Instance, soak};
use shedlock_suite::place::Place;
use shedlock_suite::{etcd_url, host_port, skipped, unique_name};

const BEATS: &str = env!("CARGO_BIN_EXE_shedlock-beats");

/// etcd's provider's backend, `Backend::Other("etcd")`: `shedlock::Backend` has no variant of
/// its own for it.
const ETCD: Backend = shedlock_etcd::BACKEND;

/// `slow`'s lease and run length, in ms.
const LEASE_MS: i64 = 6000;
const BODY_MS: i64 = 5000;

/// `slow`'s period, in ms: every 2 s on every store but etcd, every 3 s on etcd (beats'
/// `slow_etcd`: a tick's 1 ms mark is held 2 s there).
const PERIOD_MS: i64 = 2000;
const ETCD_PERIOD_MS: i64 = 3000;

/// How long after its tick the survivor's first run after the kill starts, at least, to count
/// as a tick that waited for the dead run's place rather than one that found it free (which
/// starts within a few hundred ms of its tick).
///
/// The tick that waits is the first after the killed run started, or an older one: at most a
/// period after that start. It waits until the dead run's lease is over, at least
/// `LEASE_MS - 300` after that start: so it waited at least `LEASE_MS - 300 - period`, 3.7 s at
/// 2 s and 2.7 s at 3 s (etcd), both well over this (checked below, at compile time).
const WAITED_MS: i64 = 1500;
const _: () = assert!(LEASE_MS - 300 - PERIOD_MS > WAITED_MS + 1000);
const _: () = assert!(LEASE_MS - 300 - ETCD_PERIOD_MS > WAITED_MS + 1000);

/// One run a process logged.
#[derive(Debug, Clone)]
struct Run {
    tick_ms: i64,
    instance: String,
    started_ms: i64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Every run of `slow` logged in the runs files in `logs`, in start order.
fn runs(logs: &Path) -> Vec<Run> {
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "runs") {
            continue;
        }
        let instance = path.file_stem().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let ["RUN", "slow", tick, _pid, started] = fields[..] else {
                continue;
            };
            let Ok(tick_ms) = tick.parse() else { continue };
            runs.push(Run {
                tick_ms,
                instance: instance.clone(),
                started_ms: started.parse().unwrap(),
            });
        }
    }
    runs.sort_by_key(|run| run.started_ms);
    runs
}

/// A running `shedlock-beats` process, as a case drives it.
trait Beats {
    fn name(&self) -> &str;
    /// Sends a signal by name (`KILL`, `TERM`).
    fn signal(&self, signal: &str);
    /// Waits for it to exit: its exit code (`None` when killed by a signal) and its log.
    async fn exit(self) -> (Option<i32>, String);
}

impl Beats for Instance {
    fn name(&self) -> &str {
        &self.name
    }

    fn signal(&self, signal: &str) {
        Instance::signal(self, signal);
    }

    async fn exit(self) -> (Option<i32>, String) {
        let exited = self.wait().await;
        (exited.code, exited.log)
    }
}

/// Where a case's processes meet: a store of their own, and a folder for their logs and runs
/// files. A [`Place`] on the stores `shedlock::Backend` names, an [`EtcdPlace`] on etcd.
trait Site {
    type Process: Beats;
    /// The store, as the failures name it.
    fn store(&self) -> String;
    /// `slow`'s period there, in ms.
    fn period_ms(&self) -> i64;
    /// The folder of the processes' logs (`<name>.log`) and runs (`<name>.runs`).
    fn logs(&self) -> &Path;
    /// Starts a `shedlock-beats` process named `name` with extra arguments; waits until it is
    /// ready.
    async fn spawn(&self, name: &str, extra: &[&str]) -> Self::Process;
    /// Keeps the folder (the case failed): where it is.
    fn keep(self) -> PathBuf;
    /// Deletes what the processes left in the store.
    async fn cleanup(&self);
}

impl Site for Place {
    type Process = Instance;

    fn store(&self) -> String {
        self.target.backend.to_string()
    }

    fn period_ms(&self) -> i64 {
        PERIOD_MS
    }

    fn logs(&self) -> &Path {
        self.logs.path()
    }

    async fn spawn(&self, name: &str, extra: &[&str]) -> Instance {
        Place::spawn(self, name, extra).await
    }

    fn keep(self) -> PathBuf {
        self.logs.keep()
    }

    async fn cleanup(&self) {
        Place::cleanup(self).await;
    }
}

/// An etcd key prefix of a case's own on the cluster of `SHEDLOCK_ETCD_URL`, and a temporary
/// folder for its processes' logs and runs: what a [`Place`] is to the other stores.
struct EtcdPlace {
    /// The cluster's endpoints.
    url: String,
    /// The key prefix: `overlap_etcd_<policy>_<pid>_<n>_<time>`.
    prefix: String,
    logs: tempfile::TempDir,
    /// For the cleanup.
    client: etcd_client::Client,
}

/// A `shedlock-beats --backend etcd` process (an [`Instance`] is made only by the fleet
/// helpers, which start the stores `shedlock::Backend` names).
#[derive(Debug)]
struct EtcdProcess {
    name: String,
    child: tokio::process::Child,
    log: PathBuf,
}

impl EtcdPlace {
    /// A place for a case of `policy`; `None`, said on stderr, when `scripts/test` reported
    /// etcd unreachable (`SHEDLOCK_SKIP_BACKENDS`). Panics, naming etcd and the command that
    /// starts it, when the cluster does not answer, as the etcd kit's cases do (in CI, where
    /// `scripts/test` is strict, that fails the run).
    async fn new(policy: &str) -> Option<Self> {
        if skipped(ETCD) {
            eprintln!("skipped: etcd was reported unreachable by scripts/test");
            return None;
        }
        let url = etcd_url();
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(5));
        let connect = async {
            let mut client = etcd_client::Client::connect([url.as_str()], Some(options)).await?;
            client.status().await?;
            Ok::<_, etcd_client::Error>(client)
        };
        let client = connect.await.unwrap_or_else(|error| {
            panic!(
                "etcd at {url} (SHEDLOCK_ETCD_URL) is not reachable ({error}).\n  start it with: \
                 scripts/etcd start {}  (scripts/etcd install first if etcd is missing)\n  \
                 or run scripts/test, which installs etcd and starts a member for the tests",
                host_port(&url, 2379)
            )
        });
        Some(Self {
            prefix: unique_name(&format!("overlap_etcd_{}", policy.replace(':', "_"))),
            url,
            logs: tempfile::tempdir().unwrap(),
            client,
        })
    }
}

impl Site for EtcdPlace {
    type Process = EtcdProcess;

    fn store(&self) -> String {
        ETCD.to_string()
    }

    fn period_ms(&self) -> i64 {
        ETCD_PERIOD_MS
    }

    fn logs(&self) -> &Path {
        self.logs.path()
    }

    /// As the fleet helpers start a process ([`Place::spawn`]): its stderr to `<name>.log`,
    /// ready once it says so.
    async fn spawn(&self, name: &str, extra: &[&str]) -> EtcdProcess {
        let log = self.logs.path().join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new(BEATS)
            .args(["--backend", "etcd", "--url", &self.url])
            .args(["--table", &self.prefix, "--instance", name])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("shedlock-beats starts");
        let mut process = EtcdProcess {
            name: name.to_owned(),
            child,
            log,
        };
        for _ in 0..300 {
            let said = std::fs::read_to_string(&process.log).unwrap_or_default();
            if said.contains(" ready") {
                return process;
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("{name} exited ({status}) before it was ready:\n{said}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{name} did not get ready: {}",
            std::fs::read_to_string(&process.log).unwrap_or_default()
        );
    }

    fn keep(self) -> PathBuf {
        self.logs.keep()
    }

    /// Deletes every key under the prefix.
    async fn cleanup(&self) {
        let _ = self
            .client
            .kv_client()
            .delete(
                format!("{}/", self.prefix),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await;
    }
}

impl Beats for EtcdProcess {
    fn name(&self) -> &str {
        &self.name
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().map_or(-1, i64::from);
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {pid}");
    }

    async fn exit(mut self) -> (Option<i32>, String) {
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("shedlock-beats exits within 60 s")
            .unwrap();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        (status.code(), log)
    }
}

/// Keeps the site's files (the test failed) and says where.
fn keep(site: impl Site, why: &str) -> ! {
    let path = site.keep();
    panic!(
        "{why}\nthe processes' logs (<name>.log) and runs (<name>.runs) are kept in {}",
        path.display()
    );
}

async fn stop(fleet: Vec<impl Beats>) {
    for i in &fleet {
        i.signal("TERM");
    }
    for i in fleet {
        let name = i.name().to_owned();
        let (_, log) = i.exit().await;
        assert!(!log.contains("panicked at"), "{name} panicked:\n{log}");
    }
}

/// What a process logs when, under `cancel_other`, a newer tick that won a free place replaces
/// a tick still waiting (`shedlock/src/scheduler/overlap/mod.rs`, `won_place`).
const REPLACED: &str = "overlap cancel_other: a newer tick came before it started";

/// When (unix ms, by the log's time stamps) the processes whose logs are in `logs` replaced a
/// waiting tick with a newer one ([`REPLACED`]).
fn replacements(logs: &Path) -> Vec<i64> {
    let mut at = Vec::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        for line in log.lines().filter(|line| line.contains(REPLACED)) {
            let stamp = line.split(' ').next().unwrap_or_default();
            if let Ok(when) = chrono::DateTime::parse_from_rfc3339(stamp) {
                at.push(when.timestamp_millis());
            }
        }
    }
    at
}

/// What is wrong with `runs` under `policy`, the run `killed` (whose process was killed
/// with `-9` at `killed_at`) counted as running until its lease ran out, `replaced` the times
/// a waiting tick was replaced by a newer one ([`replacements`]); empty when nothing.
/// Nothing here depends on `slow`'s period but [`WAITED_MS`], which holds for both.
fn faults(
    policy: &str,
    runs: &[Run],
    killed: &Run,
    killed_at: i64,
    replaced: &[i64],
) -> Vec<String> {
    let mut faults = Vec::new();
    let mut by_tick: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for run in runs {
        by_tick.entry(run.tick_ms).or_default().push(&run.instance);
    }
    for (tick, who) in &by_tick {
        if who.len() > 1 {
            faults.push(format!("tick {tick} ran {} times: {who:?}", who.len()));
        }
    }
    let after: Vec<&Run> = runs.iter().filter(|r| r.started_ms > killed_at).collect();
    if after.len() < 2 {
        faults.push(format!(
            "the survivor ran {} ticks after the kill",
            after.len()
        ));
    }
    // The dead run held its place until its lease ran out: from when it took the place, just
    // before it started (300 ms for the claim's way back and the clocks' disagreement).
    let lease_end = killed.started_ms - 300 + LEASE_MS;
    if policy.starts_with("allow_all") {
        for run in runs {
            let at = run.started_ms;
            let going = runs
                .iter()
                .filter(|other| {
                    let end = if other.started_ms == killed.started_ms
                        && other.instance == killed.instance
                    {
                        lease_end
                    } else {
                        other.started_ms + BODY_MS
                    };
                    other.started_ms <= at && at < end
                })
                .count();
            if going > 2 {
                faults.push(format!("{going} runs at once at {at}"));
            }
        }
    } else if let Some(first) = after.first() {
        if first.started_ms < lease_end {
            faults.push(format!(
                "the survivor's first run after the kill started at {}, before the dead run's lease ran out ({lease_end})",
                first.started_ms
            ));
        }
        // Under `cancel_other` a newer tick that finds the place free replaces the tick that
        // waits, and starts at once. That happens when the dead run's lease ends between a
        // tick and its claim (a tick of the dead instance's share, which the survivor claims
        // `help_after`, 250 ms, late) before the survivor's look (every 500 ms) started the
        // waiting tick: the lease, 6 s, a multiple of both periods, ends a few ms after a tick
        // when the killed run started right after one, as under `cancel_other` it does. The
        // survivor logs the replacement at that start ([`REPLACED`]). Before this was allowed,
        // 3 of 14 runs of etcd's case and 1 of 4 of SQLite's failed here this way.
        let replacement = policy == "cancel_other"
            && replaced
                .iter()
                .any(|at| (first.started_ms - at).abs() <= 1000);
        if first.started_ms - first.tick_ms < WAITED_MS && !replacement {
            faults.push(format!(
                "the survivor's first run after the kill (tick {}) did not wait: started {} ms after its tick",
                first.tick_ms,
                first.started_ms - first.tick_ms
            ));
        }
    }
    faults
}

/// The policy each backend runs in every run; with `SHEDLOCK_SOAK=1`, every policy on every
/// backend (20 cases, about 120 s more of the suite's time). etcd runs `cancel_other`: it
/// keeps every kind of row a policy keeps (the tick's 1 ms mark, a run place, a waiting tick,
/// and the 1 ms cancel request, which etcd holds 2 s too), so it shows most of what etcd's
/// longer leases change.
fn in_every_run(backend: Backend, policy: &str) -> bool {
    matches!(
        (backend, policy),
        (Backend::Postgres, "buffer_one")
            | (Backend::MySql, "buffer_all:2")
            | (Backend::Sqlite, "cancel_other")
            | (Backend::Redis, "allow_all:2")
            | (ETCD, "cancel_other")
    )
}

/// The case of `policy` on `backend`: two processes on a site of its own ([`EtcdPlace`] on
/// etcd, a [`Place`] elsewhere), one killed mid-run ([`hold_and_kill`]).
async fn kill_a_holder(backend: Backend, policy: &str) {
    if !soak() && !in_every_run(backend, policy) {
        eprintln!(
            "left out: {backend} {policy} runs with SHEDLOCK_SOAK=1 (every run has one policy per backend)"
        );
        return;
    }
    if backend == ETCD {
        if let Some(place) = EtcdPlace::new(policy).await {
            hold_and_kill(place, policy).await;
        }
    } else if let Some(place) = Place::new(backend, "overlap", BEATS) {
        hold_and_kill(place, policy).await;
    }
}

/// Two processes at `site` running `slow` under `policy`; once a run starts, its process is
/// killed with `-9`; the runs are checked ([`faults`]) once the survivor ran three more.
async fn hold_and_kill(site: impl Site, policy: &str) {
    let began = std::time::Instant::now();
    let backend = site.store();
    eprintln!("{backend} {policy}: slow every {} ms", site.period_ms());
    let dir = site.logs().display().to_string();
    let args = [
        "--runs-dir",
        dir.as_str(),
        "--jobs",
        "0",
        "--overlap",
        policy,
    ];
    let mut fleet = Vec::new();
    for i in 0..2 {
        fleet.push(site.spawn(&format!("p{i}"), &args).await);
    }
    // The second run (the first may be a catch-up at start): its process is killed mid-run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let killed = loop {
        let runs = runs(site.logs());
        if let Some(run) = runs.get(1)
            && now_ms() - run.started_ms < 1000
        {
            break run.clone();
        }
        if tokio::time::Instant::now() > deadline {
            stop(fleet).await;
            keep(
                site,
                &format!("{backend} {policy}: no run of slow within 30 s"),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let at = fleet
        .iter()
        .position(|i| i.name() == killed.instance)
        .unwrap();
    let victim = fleet.remove(at);
    victim.signal("KILL");
    let killed_at = now_ms();
    assert_eq!(victim.exit().await.0, None, "killed by a signal");
    // Long enough for the lease to run out and two more runs to start.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while tokio::time::Instant::now() < deadline {
        let after = runs(site.logs())
            .iter()
            .filter(|r| r.started_ms > killed_at)
            .count();
        if after >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop(fleet).await;
    let runs = runs(site.logs());
    let faults = faults(
        policy,
        &runs,
        &killed,
        killed_at,
        &replacements(site.logs()),
    );
    if !faults.is_empty() {
        keep(
            site,
            &format!(
                "{backend} {policy}: {faults:#?}\nkilled {killed:?} at {killed_at}\nruns: {runs:#?}"
            ),
        );
    }
    let after: Vec<String> = runs
        .iter()
        .filter(|r| r.started_ms > killed_at)
        .map(|r| {
            format!(
                "tick +{} ms started {} ms after it",
                r.tick_ms - killed.tick_ms,
                r.started_ms - r.tick_ms
            )
        })
        .collect();
    eprintln!(
        "{backend} {policy}: ok in {:.1} s, {} runs; killed {}'s run of tick {} ({} ms after it started); after the kill: {after:?}",
        began.elapsed().as_secs_f64(),
        runs.len(),
        killed.instance,
        killed.tick_ms,
        killed_at - killed.started_ms
    );
    site.cleanup().await;
}

async fn buffer_one_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "buffer_one").await;
}

async fn buffer_all_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "buffer_all:2").await;
}

async fn cancel_other_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "cancel_other").await;
}

async fn allow_all_through_a_kill(backend: Backend) {
    kill_a_holder(backend, "allow_all:2").await;
}

mod postgres {
    shedlock_suite::backend_tests!(in postgres: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

mod mysql {
    shedlock_suite::backend_tests!(in mysql: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

mod sqlite {
    shedlock_suite::backend_tests!(in sqlite: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

mod redis {
    shedlock_suite::backend_tests!(in redis: by backend super => [
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    ]);
}

/// etcd's cases (no `backend_tests!` backend for it: written out here), named `etcd::…`.
mod etcd {
    macro_rules! etcd_cases {
        ($($case:ident),* $(,)?) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::ETCD).await;
                }
            )*
        };
    }

    etcd_cases!(
        buffer_one_through_a_kill,
        buffer_all_through_a_kill,
        cancel_other_through_a_kill,
        allow_all_through_a_kill,
    );
}
