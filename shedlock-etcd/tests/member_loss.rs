//! Issue 38, point 3: the fleet keeps its ticks when the etcd cluster loses a member.
//!
//! The test starts a three-member etcd cluster on loopback (three `etcd` processes, ports and a
//! data folder of their own) and three scheduler processes (copies of this test binary running
//! [`one_scheduler_process`]), each with the same five per-second jobs written as the README
//! tells a user to (`#[scheduled]` and `#[scheduler_lock]`), `MisfirePolicy::All`, and a client
//! that knows all three members. It kills a follower with `kill -9`, starts it again, then kills
//! the leader and starts it again, and asserts, from every run the processes recorded:
//!
//! - no tick ran twice (0 duplicated ticks);
//! - each job's fencing tokens strictly increase with its ticks;
//! - no tick was lost, around either loss (`MisfirePolicy::All`).
//!
//! What keeps the ticks around the leader's loss: a claim that a follower forwarded to the
//! leader just killed gets no answer until etcd's own timeout (7 s). Meanwhile no instance
//! claims a later tick of the job first (which would make the older one be refused for good):
//! the scheduler queues a job's later ticks behind a claim in flight, behind a tick it is to
//! help another instance with, and behind a tick whose claim the store failed, which it asks
//! for again; and the provider reads back what a claim that got no answer took.
//!
//! It prints the longest gap between two runs of a job (what an operator sees as the pause).
//! `SHEDLOCK_SOAK=1` repeats the two kills five times.
#![allow(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shedlock_etcd::EtcdLockProvider;

/// The environment variable that makes [`one_scheduler_process`] run a scheduler: its
/// settings, `endpoints|prefix|instance|file`. Without it that test does nothing.
const FLEET: &str = "SHEDLOCK_ETCD_FLEET_PROCESS";

/// The five jobs every process schedules.
const JOBS: [&str; 5] = ["job_0", "job_1", "job_2", "job_3", "job_4"];

/// A member of the test's cluster.
struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    child: Option<Child>,
}

/// Three `etcd` processes on loopback ports of their own, in a data folder of their own.
struct Cluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
}

/// A free loopback port (bound, then given back).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                client_url: format!("http://127.0.0.1:{}", free_port()),
                peer_url: format!("http://127.0.0.1:{}", free_port()),
                child: None,
            })
            .collect();
        let token = format!("shedlock-{}", std::process::id());
        let mut cluster = Self {
            dir,
            members,
            token,
        };
        for i in 0..3 {
            cluster.spawn(i, "new");
        }
        cluster
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize, state: &str) {
        let initial = self.initial_cluster();
        let dir = self.dir.path();
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{}.log", m.name)))
            .unwrap();
        let child = Command::new(etcd_binary())
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(dir.join(&m.name))
            .args(["--listen-peer-urls", &m.peer_url])
            .args(["--initial-advertise-peer-urls", &m.peer_url])
            .args(["--listen-client-urls", &m.client_url])
            .args(["--advertise-client-urls", &m.client_url])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", &self.token])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("etcd does not start ({e}): {}", etcd_help()));
        m.child = Some(child);
    }

    /// `kill -9` member `i`.
    fn kill(&mut self, i: usize) {
        let mut child = self.members[i].child.take().expect("the member runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Starts member `i` again on its data folder.
    fn restart(&mut self, i: usize) {
        self.spawn(i, "existing");
    }

    fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// The index of the member that leads, as every running member reports it (waits up to
    /// 30 s for them to agree on one).
    async fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut seen = BTreeSet::new();
            let mut ids = BTreeMap::new();
            for (i, m) in self.members.iter().enumerate() {
                if m.child.is_none() {
                    continue;
                }
                if let Some((id, leader)) = status(&m.client_url).await {
                    ids.insert(id, i);
                    seen.insert(leader);
                }
            }
            if seen.len() == 1
                && let Some(i) = seen.first().and_then(|leader| ids.get(leader))
            {
                return *i;
            }
            assert!(
                Instant::now() < deadline,
                "the members did not agree on a leader within 30 s: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (up to 30 s) until every running member answers.
    async fn healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for m in self.members.iter().filter(|m| m.child.is_some()) {
            while status(&m.client_url).await.is_none() {
                assert!(
                    Instant::now() < deadline,
                    "member {} did not answer within 30 s; its log ends:\n{}",
                    m.name,
                    log_tail(&self.dir.path().join(format!("{}.log", m.name)))
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A member's own id and the leader it knows, or `None` when it does not answer.
async fn status(url: &str) -> Option<(u64, u64)> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(1));
    let mut client = etcd_client::Client::connect([url], Some(options))
        .await
        .ok()?;
    let status = client.status().await.ok()?;
    let id = status.header()?.member_id();
    Some((id, status.leader()))
}

/// The last 30 lines of a log.
fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn etcd_binary() -> String {
    std::env::var("SHEDLOCK_ETCD_BINARY").unwrap_or_else(|_| "etcd".to_owned())
}

fn etcd_help() -> &'static str {
    "install it with `apt-get install etcd-server` (scripts/test does on a fresh machine)"
}

/// One run, as a scheduler process recorded it.
#[derive(Debug, Clone)]
struct Run {
    job: String,
    tick_ms: i64,
    token: i64,
    instance: String,
    started_ms: i64,
}

fn read_runs(files: &[PathBuf]) -> Vec<Run> {
    let mut runs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 5 {
                continue; // a line the process was killed while writing
            }
            runs.push(Run {
                job: f[0].to_owned(),
                tick_ms: f[1].parse().unwrap(),
                token: f[2].parse().unwrap(),
                instance: f[3].to_owned(),
                started_ms: f[4].parse().unwrap(),
            });
        }
    }
    runs
}

// ---------------------------------------------------------------------------------------------
// One scheduler process: five per-second jobs, as the README writes a job.

/// Where this process records its runs, and its name.
static RECORD: std::sync::OnceLock<(PathBuf, String)> = std::sync::OnceLock::new();

/// Appends the run of the lock this body runs under: `job tick_ms token instance started_ms`.
async fn record() -> Result<(), String> {
    let lock = shedlock::LockContext::current().ok_or("not under the lock")?;
    let (file, instance) = RECORD.get().ok_or("no record file")?;
    let tick = lock.tick().ok_or("no tick")?.timestamp_millis();
    let line = format!(
        "{} {tick} {} {instance} {}\n",
        lock.name(),
        lock.fencing_token(),
        chrono::Utc::now().timestamp_millis()
    );
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| e.to_string())?;
    out.write_all(line.as_bytes()).map_err(|e| e.to_string())
}

#[shedlock::scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[shedlock::scheduler_lock(name = "job_0", lock_at_most_for = "5s", lock_at_least_for = "0s")]
async fn job_0() -> Result<(), String> {
    record().await
}

#[shedlock::scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[shedlock::scheduler_lock(name = "job_1", lock_at_most_for = "5s", lock_at_least_for = "0s")]
async fn job_1() -> Result<(), String> {
    record().await
}

#[shedlock::scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[shedlock::scheduler_lock(name = "job_2", lock_at_most_for = "5s", lock_at_least_for = "0s")]
async fn job_2() -> Result<(), String> {
    record().await
}

#[shedlock::scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[shedlock::scheduler_lock(name = "job_3", lock_at_most_for = "5s", lock_at_least_for = "0s")]
async fn job_3() -> Result<(), String> {
    record().await
}

#[shedlock::scheduled(cron = "* * * * * *", time_zone = "UTC")]
#[shedlock::scheduler_lock(name = "job_4", lock_at_most_for = "5s", lock_at_least_for = "0s")]
async fn job_4() -> Result<(), String> {
    record().await
}

/// One scheduler process of the test, when [`FLEET`] is set: the five jobs on the cluster,
/// `MisfirePolicy::All` with a minute's grace, until SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_scheduler_process() {
    let Ok(spec) = std::env::var(FLEET) else {
        return;
    };
    let [endpoints, prefix, instance, file] = spec.split('|').collect::<Vec<_>>()[..] else {
        panic!("{FLEET}: endpoints|prefix|instance|file, not {spec:?}");
    };
    RECORD
        .set((PathBuf::from(file), instance.to_owned()))
        .unwrap();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let endpoints: Vec<&str> = endpoints.split(',').collect();
    let provider = provider(&endpoints, prefix, instance).await;
    let scheduler = shedlock::Scheduler::builder(provider)
        .misfire_policy(shedlock::scheduler::MisfirePolicy::All)
        .misfire_grace(Duration::from_secs(60))
        .build();
    for job in [
        job_0::job(),
        job_1::job(),
        job_2::job(),
        job_3::job(),
        job_4::job(),
    ] {
        scheduler.add(job).unwrap();
    }
    scheduler.start();
    scheduler.ready().await.unwrap();
    eprintln!("{instance} ready");
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    term.recv().await;
    scheduler.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The test.

/// Three scheduler processes, each a copy of this binary running [`one_scheduler_process`].
fn spawn_fleet(cluster: &Cluster, prefix: &str, dir: &Path) -> Vec<(Child, PathBuf)> {
    let binary = std::env::current_exe().unwrap();
    (0..3)
        .map(|i| {
            let file = dir.join(format!("p{i}.runs"));
            let spec = format!(
                "{}|{prefix}|p{i}|{}",
                cluster.endpoints().join(","),
                file.display()
            );
            let log = std::fs::File::create(dir.join(format!("p{i}.log"))).unwrap();
            let child = Command::new(&binary)
                .args(["--exact", "one_scheduler_process", "--nocapture"])
                .env(FLEET, spec)
                .env("RUST_LOG", "shedlock=info")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            (child, file)
        })
        .collect()
}

/// Waits (up to `deadline`) until every job has a run of a tick at or after `tick_ms`.
async fn wait_for_ticks(files: &[PathBuf], tick_ms: i64, deadline: Duration, dir: &Path) {
    let until = Instant::now() + deadline;
    loop {
        let runs = read_runs(files);
        let done = JOBS
            .iter()
            .all(|job| runs.iter().any(|r| r.job == *job && r.tick_ms >= tick_ms));
        if done {
            return;
        }
        if Instant::now() > until {
            let logs: String = (0..3)
                .map(|i| std::fs::read_to_string(dir.join(format!("p{i}.log"))).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n---\n");
            panic!("not every job ran a tick at or after {tick_ms} within {deadline:?}:\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The warnings and errors the scheduler processes logged.
fn warnings(dir: &Path) -> String {
    (0..3)
        .flat_map(|i| {
            let log = std::fs::read_to_string(dir.join(format!("p{i}.log"))).unwrap_or_default();
            log.lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .map(|l| format!("p{i}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_keeps_its_ticks_when_the_cluster_loses_a_member() {
    if std::env::var_os(FLEET).is_some() {
        return;
    }
    let rounds = if std::env::var("SHEDLOCK_SOAK").as_deref() == Ok("1") {
        5
    } else {
        1
    };
    let mut cluster = Cluster::start();
    cluster.healthy().await;
    cluster.leader().await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("member_loss_{}_{}", std::process::id(), now_ms());
    let fleet = spawn_fleet(&cluster, &prefix, dir.path());
    let files: Vec<PathBuf> = fleet.iter().map(|(_, f)| f.clone()).collect();
    // Every process up and every job running.
    wait_for_ticks(&files, now_ms() + 2000, Duration::from_secs(60), dir.path()).await;
    let from_ms = now_ms() + 1000;
    let mut kills = Vec::new();
    for _ in 0..rounds {
        // A follower first: a third of the clients' requests go to it.
        let leader = cluster.leader().await;
        let follower = (leader + 1) % 3;
        cluster.kill(follower);
        kills.push(("follower", now_ms()));
        wait_for_ticks(&files, now_ms() + 3000, Duration::from_secs(60), dir.path()).await;
        cluster.restart(follower);
        cluster.healthy().await;
        // Then the leader: the cluster elects another before it answers writes again.
        let leader = cluster.leader().await;
        cluster.kill(leader);
        kills.push(("leader", now_ms()));
        let next = cluster.leader().await;
        assert_ne!(next, leader);
        wait_for_ticks(&files, now_ms() + 3000, Duration::from_secs(60), dir.path()).await;
        cluster.restart(leader);
        cluster.healthy().await;
    }
    let to_ms = now_ms();
    wait_for_ticks(&files, to_ms + 2000, Duration::from_secs(60), dir.path()).await;
    for (child, _) in &fleet {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
    }
    for (mut child, _) in fleet {
        let status = child.wait().unwrap();
        assert!(status.success(), "a scheduler process exited with {status}");
    }
    let runs = read_runs(&files);
    // 0 duplicated ticks.
    let mut seen: BTreeMap<(&str, i64), Vec<&Run>> = BTreeMap::new();
    for r in &runs {
        seen.entry((&r.job, r.tick_ms)).or_default().push(r);
    }
    let doubled: Vec<_> = seen.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(doubled.is_empty(), "ticks run twice: {doubled:?}");
    let mut longest_gap = (0, "", 0);
    for job in JOBS {
        let mut mine: Vec<&Run> = runs.iter().filter(|r| r.job == job).collect();
        mine.sort_by_key(|r| r.tick_ms);
        // Tokens strictly increase with the ticks.
        for pair in mine.windows(2) {
            assert!(
                pair[1].token > pair[0].token,
                "{job}: tick {} got token {} after tick {}'s {}",
                pair[1].tick_ms,
                pair[1].token,
                pair[0].tick_ms,
                pair[0].token
            );
        }
        // Ticks lost: none.
        let ticks: BTreeSet<i64> = mine.iter().map(|r| r.tick_ms).collect();
        let first = from_ms - from_ms.rem_euclid(1000);
        let lost: Vec<i64> = (0..)
            .map(|s| first + s * 1000)
            .take_while(|t| *t <= to_ms)
            .filter(|t| !ticks.contains(t))
            .collect();
        assert!(
            lost.is_empty(),
            "{job}: ticks lost under MisfirePolicy::All: {lost:?}; kills {kills:?}; the \
             processes' warnings:\n{}",
            warnings(dir.path())
        );
        let mut by_start: Vec<i64> = mine.iter().map(|r| r.started_ms).collect();
        by_start.sort_unstable();
        for pair in by_start.windows(2) {
            if pair[1] - pair[0] > longest_gap.0 {
                longest_gap = (pair[1] - pair[0], job, pair[0]);
            }
        }
    }
    let per_process: BTreeMap<&str, usize> = runs.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.instance.as_str()).or_default() += 1;
        m
    });
    eprintln!(
        "member loss: {rounds} round(s) of kills {kills:?}; {} runs, 0 doubled, 0 ticks lost, \
         tokens strictly increasing; \
         runs per process {per_process:?}; longest gap between two runs of a job {} ms ({}, after {})",
        runs.len(),
        longest_gap.0,
        longest_gap.1,
        longest_gap.2
    );
}

/// The provider of one scheduler process: the cluster's three members, the test's key prefix,
/// the process's name as `locked_by`.
async fn provider(endpoints: &[&str], prefix: &str, instance: &str) -> EtcdLockProvider {
    EtcdLockProvider::builder(&endpoints.join(","))
        .table_name(prefix)
        .locked_by(instance)
        .build()
        .await
        .unwrap_or_else(|e| panic!("the cluster at {endpoints:?}: {e}"))
}
