//! repo_sync: keeps code repositories indexed in a vector store, each on its own cron schedule,
//! on exactly one of however many instances run it, with a run history.
//!
//! ```text
//! cargo run -p repo_sync                          # first run: register this repository, sync it, summarize
//! cargo run -p repo_sync -- search "fencing token"
//! cargo run -p repo_sync -- run                   # the scheduler (start several: each tick runs once)
//! cargo run -p repo_sync -- add ../other-repo --cron "0 */15 * * * *" --time-zone Asia/Seoul
//! cargo run -p repo_sync -- status | sync-now <repo> | pause <repo> | resume <repo> | remove <repo>
//! ```
//!
//! Everything lives in one database: by default an SQLite file in the git directory of the
//! repository the command runs in (`.git/repo_sync.db`), or any SQLite path or PostgreSQL URL
//! with `--database-url`. Repository N's schedule is the library's run-time job `repo_sync_N`
//! of the handler `repo_sync`, kept in the store (`schedules.rs`); its lock, claimed per tick,
//! has the same name.
//!
//! The default build has SQLite, the lexical embedder and local git repositories; PostgreSQL,
//! worker mode, the HTTP clients and the metrics endpoint are cargo features (`features.rs`),
//! e.g. `cargo run -p repo_sync --features postgres -- --database-url postgres://…`.

mod chunk;
mod commands;
#[cfg(feature = "dashboard")]
mod dashboard;
mod db;
mod embed;
mod extract;
mod features;
mod git;
#[cfg(feature = "http")]
mod gitlab;
#[cfg(feature = "http")]
mod http;
mod job;
#[cfg(feature = "metrics")]
mod metrics;
mod refresh;
#[cfg(feature = "workers")]
mod roles;
mod schedules;
mod serve;
mod show;
mod source;
mod store;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
#[cfg(feature = "postgres")]
use shedlock::PostgresLockProvider;
use shedlock::handoff::TickQueue;
/// `--poll-interval`: worker mode's own type, checked as worker mode checks it.
#[cfg(feature = "workers")]
use shedlock::handoff::apalis::PollInterval;
use shedlock::scheduler::{RunHistory, ScheduleWatch};
use shedlock::schedules::ScheduleStore;
use shedlock::{LockAdmin, RunStore, Schedule, Scheduler, SqliteLockProvider};

use crate::chunk::ChunkConfig;
use crate::commands::{first_run, search, status, sync_now};
use crate::db::{Db, Location, lock_name};
#[cfg(feature = "http")]
use crate::embed::HttpEmbedder;
use crate::embed::{Embedder, LexicalHashEmbedder};
use crate::features::{Feature, Missing};
#[cfg(feature = "workers")]
use crate::roles::QueuePlace;
use crate::schedules::SyncNow;
use crate::show::{say, shown, tell};
use crate::store::SqlVectorStore;
use crate::sync::Ctx;

/// Without worker mode `--poll-interval` is taken as text: `--role worker` is refused then,
/// naming the feature to build in.
#[cfg(not(feature = "workers"))]
type PollInterval = String;

#[derive(Debug, Parser)]
#[command(
    name = "repo_sync",
    about = "Sync git repositories into a vector store, once per tick across instances",
    // Listed apart in every command's help, after the command's own options.
    next_help_heading = "Global options (any command)"
)]
struct Cli {
    /// Database for repositories, schedules, history, chunks and locks: an SQLite file path (created with
    /// its directory if missing), `sqlite://PATH`, or `postgres://…` (default:
    /// `repo_sync.db` in the git directory of the repository you run it in). A path starts
    /// with /, ./ or ../, or ends with .db, .sqlite or .sqlite3; anything else that is no
    /// postgres:// or sqlite: URL is refused. A value that starts with a scheme (`postgres:`,
    /// `mysql:`, `redis:`, …) is a URL, never a file name; messages show it with its password
    /// masked. A server that cannot be reached is reported
    /// at once, or after 10 s without an answer. PostgreSQL needs the `postgres` feature.
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// The embedder: `lexical` (built in: deterministic, no model, not a neural embedding) or
    /// `minilm` (all-MiniLM-L6-v2 run in this process, from the files `scripts/minilm/setup`
    /// fetches; needs the `minilm` feature). `--embedder-url` chooses a server instead.
    #[arg(long, global = true, value_enum, default_value_t = EmbedderKind::Lexical)]
    embedder: EmbedderKind,
    /// Where all-MiniLM-L6-v2's files are (model.safetensors, tokenizer.json, config.json);
    /// default: where `scripts/minilm/setup` puts them ($MINILM_CACHE/model, by default
    /// .cache/minilm/model in the repository). Nothing is downloaded at run time.
    #[arg(long, global = true)]
    #[cfg_attr(
        not(feature = "minilm"),
        allow(dead_code, reason = "the in-process model's")
    )]
    model_dir: Option<std::path::PathBuf>,
    /// An OpenAI-compatible embeddings server (`http://host:port`), instead of `--embedder`.
    /// Its responses are read up to 256 KiB per input text (8 MiB for a batch of 32): a larger
    /// one fails the request unread. A vector with a component that is not a finite number
    /// fails the sync, naming the chunk, and nothing of it is stored.
    /// Needs the `http` feature.
    #[arg(long, global = true, conflicts_with = "embedder")]
    embedder_url: Option<String>,
    #[arg(long, global = true, default_value = "text-embedding-3-small")]
    #[cfg_attr(
        not(feature = "http"),
        allow(dead_code, reason = "the HTTP embedder's")
    )]
    embedder_model: String,
    /// Texts per embeddings request, or per forward pass of `--embedder minilm` (at least 1;
    /// default: 32 for a server, 16 for minilm).
    #[arg(long, global = true, value_parser = clap::value_parser!(u32).range(1..))]
    #[cfg_attr(
        not(any(feature = "http", feature = "minilm")),
        allow(dead_code, reason = "the HTTP embedder's and the in-process model's")
    )]
    embedder_batch_size: Option<u32>,
    /// How long one embeddings request may take (a model on a CPU needs longer than a service;
    /// more than zero).
    #[arg(long, global = true, default_value = "30s", value_parser = positive_duration)]
    #[cfg_attr(
        not(feature = "http"),
        allow(dead_code, reason = "the HTTP embedder's")
    )]
    embedder_timeout: Duration,
    #[arg(long, global = true, default_value_t = 7000)]
    chunk_size: usize,
    #[arg(long, global = true, default_value_t = 1500)]
    chunk_overlap: usize,
    /// Files larger than this are skipped.
    #[arg(long, global = true, default_value_t = crate::extract::DEFAULT_MAX_FILE_BYTES)]
    max_file_bytes: u64,
    /// How long a sync's lock stays held if its instance dies (keep-alive renews it while a
    /// long sync runs; more than zero).
    #[arg(long, global = true, default_value = "30m", value_parser = positive_duration)]
    lock_at_most_for: Duration,
    /// How long a sync's lock stays held at least. Zero is right here: each scheduled run
    /// claims its tick, so a fast sync cannot run twice for one tick, and a `sync-now` right
    /// after a sync is not turned away.
    #[arg(long, global = true, default_value = "0s", value_parser = humantime::parse_duration)]
    lock_at_least_for: Duration,
    #[command(subcommand)]
    command: Option<Command>,
}

/// What a `run` process does.
/// The embedders built into the process (`--embedder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EmbedderKind {
    /// Lexical feature hashing (`embed/lexical.rs`).
    Lexical,
    /// all-MiniLM-L6-v2 in this process (`embed/minilm.rs`, the `minilm` feature).
    Minilm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Role {
    /// Fires each repository's ticks and syncs them (one kind of process; start several).
    All,
    /// Fires each repository's ticks and hands each claimed tick to the queue; syncs nothing.
    Scheduler,
    /// Takes the queue's hand-offs and syncs them; fires nothing.
    Worker,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the scheduler: every repository on its schedule in the store (changes applied
    /// within `--poll-schedules-every`; on PostgreSQL at once), and "run now" requests.
    /// With `--role scheduler` it hands the ticks to a queue, which `--role worker` processes
    /// take them from.
    Run {
        /// `all`: fire and sync (every instance the same, each tick claimed once). `scheduler`
        /// and `worker`: fire in scheduler processes, sync in worker processes, through a
        /// queue beside the database (SQLite: `repo_sync_queue.db` in the same directory;
        /// PostgreSQL: the same database, schema `apalis`); these two need the `workers`
        /// feature.
        #[arg(long, value_enum, default_value = "all")]
        role: Role,
        /// `--role worker`: syncs at once.
        #[arg(long, default_value_t = 1)]
        #[cfg_attr(not(feature = "workers"), allow(dead_code, reason = "worker mode's"))]
        concurrency: usize,
        /// `--role worker`: how often an idle worker looks for a hand-off by itself, between
        /// 10ms and 10m. On SQLite the only way it learns of one (a sync starts half of it
        /// after its tick on average); on PostgreSQL a notification wakes it at once and this
        /// only covers a lost one.
        #[arg(long, default_value = "500ms")]
        #[cfg_attr(not(feature = "workers"), allow(dead_code, reason = "worker mode's"))]
        poll_interval: PollInterval,
        /// `--role all`: at most this many syncs at once in this process (default: no limit).
        /// A repository due while every slot is taken is left for another instance, and synced
        /// here when a slot frees if none took it; 1,000 repositories due at once are spread
        /// over the pods.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        max_concurrent_syncs: Option<u32>,
        /// How often the store's schedule version is read (one statement), between 10ms and
        /// 10m: a schedule added, changed or paused is applied within it. On PostgreSQL a
        /// notification brings each change at once and this only covers a lost one.
        #[arg(long, default_value = "2s", value_parser = positive_duration)]
        poll_schedules_every: Duration,
        /// Stop after this long (default: until Ctrl-C).
        #[arg(long, value_parser = humantime::parse_duration)]
        run_for: Option<Duration>,
        /// Serve the scheduler's metrics for Prometheus at `http://ADDR/metrics`
        /// (e.g. `127.0.0.1:9464`): `GET /metrics` only (another method 405, another path
        /// 404), request bodies not read, 5 s to send the request head, 64 connections at
        /// once. Needs the `metrics` feature.
        #[arg(long)]
        metrics_addr: Option<std::net::SocketAddr>,
        /// Serve the dashboard at `http://ADDR/` (e.g. `127.0.0.1:8081`): the repositories'
        /// jobs, locks, run history and a timeline, with pause, resume, run now, reschedule
        /// and lock release. No sign-in on loopback (only the names localhost, 127.0.0.1 and
        /// `[::1]` are answered); elsewhere the token in `REPO_SYNC_DASHBOARD_TOKEN` (16
        /// characters at least), and the host names browsers use in
        /// `REPO_SYNC_DASHBOARD_HOSTS` (comma-separated). Needs the `dashboard` feature.
        #[arg(long, value_name = "ADDR")]
        dashboard: Option<std::net::SocketAddr>,
        /// How long the scheduler's run history (`shedlock_runs`) is kept (more than zero).
        #[arg(long, default_value = "30days", value_parser = positive_duration)]
        keep_history: Duration,
        /// On Ctrl-C, how long running syncs may finish before they are cancelled (a cancelled
        /// sync publishes nothing and is recorded as `cancelled`).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        shutdown_timeout: Duration,
    },
    /// Register a repository: a local git path, or a GitLab project URL (token in `GITLAB_TOKEN`;
    /// needs the `http` feature).
    /// Its schedule is created in the store: running schedulers pick it up within their poll
    /// interval. Adding one already registered changes its registration to the options given
    /// (the others keep their values).
    Add {
        path: String,
        /// Its schedule, with seconds (default for a new registration: `0 */15 * * * *`).
        #[arg(long)]
        cron: Option<String>,
        /// The time zone of the schedule (default for a new registration: `UTC`).
        #[arg(long)]
        time_zone: Option<String>,
        /// Display name (default for a new registration: the directory name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Unregister a repository: delete its schedule and its chunks.
    Remove { repo: String },
    /// Pause a repository's schedule on every instance (its ticks are recorded
    /// `skipped-paused`; a sync going on finishes).
    Pause { repo: String },
    /// Resume a repository's schedule on every instance.
    Resume { repo: String },
    /// Sync a repository now: a "run now" request of its schedule, run once by a `run`
    /// instance or by this command, whichever claims it first, under the same lock as the
    /// scheduled runs, whatever its breaker's state (a success closes the breaker).
    SyncNow {
        repo: String,
        /// Re-index every file, not only those changed since the last sync.
        #[arg(long)]
        full: bool,
    },
    /// Search the indexed code.
    Search {
        query: String,
        #[arg(short, default_value_t = 5)]
        k: usize,
    },
    /// Schedules (from the store), breakers, next ticks, pending requests, last runs, locks.
    Status,
}

#[tokio::main]
async fn main() {
    init_logging();
    let cli = Cli::parse();
    if let Err(error) = run(cli).await {
        tell!("repo_sync: {}", shown(&error.to_string()));
        std::process::exit(1);
    }
}

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// Log lines to stderr, filtered by `RUST_LOG` read as `tracing_subscriber`'s [`Targets`]
/// (`warn`, `repo_sync=info,shedlock=debug`; default `warn`). A value that is not such a filter
/// is named, and warnings are logged.
///
/// [`Targets`]: tracing_subscriber::filter::Targets
fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let warn = Targets::new().with_default(LevelFilter::WARN);
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => text.parse::<Targets>().unwrap_or_else(|e| {
            tell!(
                "repo_sync: RUST_LOG={:?} is not a log filter ({e}): logging warnings only \
                 (write it as `warn`, or `repo_sync=info,shedlock=debug`)",
                shown(&text)
            );
            warn.clone()
        }),
        _ => warn,
    };
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(filter)
        .init();
}

/// What `cli` asks for that this build leaves out (`features.rs`), the database at `location`
/// included.
fn missing_features(cli: &Cli, location: &Location) -> Vec<Missing> {
    let mut asked = Vec::new();
    if matches!(location, Location::Postgres(_)) {
        asked.push(Missing::new(
            Feature::Postgres,
            "--database-url postgres://…",
        ));
    }
    if cli.embedder_url.is_some() {
        asked.push(Missing::new(Feature::Http, "--embedder-url"));
    }
    if cli.embedder == EmbedderKind::Minilm {
        asked.push(Missing::new(Feature::Minilm, "--embedder minilm"));
    }
    match &cli.command {
        Some(Command::Run {
            role,
            metrics_addr,
            dashboard,
            ..
        }) => {
            match role {
                Role::All => {}
                Role::Scheduler => {
                    asked.push(Missing::new(Feature::Workers, "run --role scheduler"))
                }
                Role::Worker => asked.push(Missing::new(Feature::Workers, "run --role worker")),
            }
            if metrics_addr.is_some() {
                asked.push(Missing::new(Feature::Metrics, "run --metrics-addr"));
            }
            if dashboard.is_some() {
                asked.push(Missing::new(Feature::Dashboard, "run --dashboard"));
            }
        }
        Some(Command::Add { path, .. }) if source::is_remote(path) => {
            asked.push(Missing::new(Feature::Http, "add of a GitLab project URL"));
        }
        _ => {}
    }
    asked.retain(|m| !m.feature.built_in());
    asked
}

/// A duration option that must not be zero (`10s`, `5m`, `1h 30m`): zero would make a busy
/// loop (`--poll-schedules-every`), fail every request (`--embedder-timeout`), hold no lock
/// (`--lock-at-most-for`) or delete every run as it ends (`--keep-history`). Refused while
/// the arguments are read, before anything opens.
fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be more than zero (e.g. 10s, 5m)".into());
    }
    Ok(duration)
}

/// A lock provider that also keeps a run history and the schedules.
pub(crate) trait Locks: LockAdmin + RunStore + ScheduleStore {}

impl<P: LockAdmin + RunStore + ScheduleStore> Locks for P {}

async fn run(cli: Cli) -> Result<(), AnyError> {
    let location = match &cli.database_url {
        Some(url) => Location::parse(url)?,
        None => Location::default_for(&std::env::current_dir()?),
    };
    // Refused before anything opens: what this build leaves out, with the command that has it.
    let missing = missing_features(&cli, &location);
    if !missing.is_empty() {
        let args: Vec<String> = std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return Err(features::refusal(&missing, &features::built_in(), &args).into());
    }
    let db = Db::open(&location).await?;
    // A provider that keeps a run history (`RunStore`) and lists its locks (`LockAdmin`),
    // whichever the database.
    let provider: Arc<dyn Locks> = match &location {
        #[cfg(feature = "postgres")]
        Location::Postgres(url) => {
            let provider = PostgresLockProvider::connect(url.expose()).await?;
            provider.migrate().await?;
            Arc::new(provider)
        }
        #[cfg(not(feature = "postgres"))]
        Location::Postgres(_) => return Err(features::not_built(Feature::Postgres).into()),
        Location::Sqlite(_) => {
            let file = location.sqlite_file()?.unwrap_or_default();
            let file = file
                .to_str()
                .ok_or_else(|| format!("{}: not a UTF-8 path", file.display()))?;
            let provider = SqliteLockProvider::connect(file).await?;
            provider.migrate().await?;
            Arc::new(provider)
        }
    };
    // Schedules an earlier version kept in its own table: moved into the store, once.
    schedules::move_legacy(&db, provider.as_ref()).await?;
    // Runs that died or were stopped without writing their end: say so in the history.
    let abandoned = db.close_abandoned().await?;
    if abandoned > 0 {
        tell!(
            "repo_sync: {abandoned} run(s) left `running` by a stopped instance closed as abandoned (see `status`)"
        );
    }
    let embedder: Arc<dyn Embedder> = match &cli.embedder_url {
        #[cfg(not(feature = "http"))]
        Some(_) => return Err(features::not_built(Feature::Http).into()),
        #[cfg(feature = "http")]
        Some(base) => Arc::new(
            HttpEmbedder::new(base, &cli.embedder_model)?
                .api_key(std::env::var("EMBEDDER_API_KEY").ok())
                .batch_size(
                    cli.embedder_batch_size
                        .map_or(crate::embed::DEFAULT_BATCH_SIZE, |b| b as usize),
                )
                .timeout(cli.embedder_timeout),
        ),
        None => match cli.embedder {
            EmbedderKind::Lexical => Arc::new(LexicalHashEmbedder::default()),
            #[cfg(not(feature = "minilm"))]
            EmbedderKind::Minilm => return Err(features::not_built(Feature::Minilm).into()),
            #[cfg(feature = "minilm")]
            EmbedderKind::Minilm => {
                let dir = cli
                    .model_dir
                    .clone()
                    .unwrap_or_else(crate::embed::default_model_dir);
                let mut minilm = crate::embed::MiniLmEmbedder::load(&dir)?;
                if let Some(b) = cli.embedder_batch_size {
                    minilm = minilm.batch_size(b as usize);
                }
                Arc::new(minilm)
            }
        },
    };
    // Checked here, with the library's own rules, so a bad value is named before any run.
    shedlock::LockConfiguration::new("repo_sync", cli.lock_at_most_for, cli.lock_at_least_for)
        .map_err(|e| format!("--lock-at-most-for/--lock-at-least-for: {e}"))?;
    let ctx = Ctx {
        store: Arc::new(SqlVectorStore::new(db.clone())),
        db: db.clone(),
        embedder,
        chunking: ChunkConfig::new(cli.chunk_size, cli.chunk_overlap)?,
        max_file_bytes: cli.max_file_bytes,
        policy: Default::default(),
        lock_at_most_for: cli.lock_at_most_for,
        lock_at_least_for: cli.lock_at_least_for,
        locked_by: provider.locked_by().to_owned(),
        progress: true,
        gitlab_token: std::env::var("GITLAB_TOKEN").ok().filter(|t| !t.is_empty()),
        write_hook: None,
        pending: Default::default(),
    };

    let ctx = Arc::new(ctx);
    match cli.command {
        None => first_run(ctx, provider).await,
        #[cfg(feature = "workers")]
        Some(Command::Run {
            role: Role::Worker,
            concurrency,
            poll_interval,
            run_for,
            ..
        }) => {
            let queue = QueuePlace::beside(&location)?;
            let ctx = Ctx::clone(&ctx);
            roles::run_worker(ctx, provider, queue, concurrency, poll_interval, run_for).await
        }
        Some(Command::Run {
            role,
            concurrency: _,
            poll_interval: _,
            max_concurrent_syncs,
            poll_schedules_every,
            run_for,
            metrics_addr,
            dashboard,
            keep_history,
            shutdown_timeout,
        }) => {
            let watch = ScheduleWatch::new()
                .poll_every(poll_schedules_every)
                .map_err(|e| format!("--poll-schedules-every: {e}"))?;
            if let Some(addr) = metrics_addr {
                #[cfg(feature = "metrics")]
                metrics::serve_metrics(addr).await?;
                #[cfg(not(feature = "metrics"))]
                return Err(format!("{addr}: {}", features::not_built(Feature::Metrics)).into());
            }
            if let Some(addr) = dashboard {
                #[cfg(feature = "dashboard")]
                dashboard::serve_dashboard(addr, Arc::clone(&provider)).await?;
                #[cfg(not(feature = "dashboard"))]
                return Err(format!("{addr}: {}", features::not_built(Feature::Dashboard)).into());
            }
            let mut scheduler = Scheduler::builder(Arc::clone(&provider))
                .misfire_grace(Duration::from_secs(120))
                .history(RunHistory::keep_for(keep_history))
                .schedules(watch)
                .shutdown_timeout(shutdown_timeout);
            if let Some(limit) = max_concurrent_syncs {
                scheduler = scheduler.max_concurrent_runs(limit as usize);
            }
            let scheduler = scheduler.build();
            let hand_off: Option<Arc<dyn TickQueue>> = match role {
                #[cfg(feature = "workers")]
                Role::Scheduler => Some(QueuePlace::beside(&location)?.tick_queue().await?),
                #[cfg(not(feature = "workers"))]
                Role::Scheduler | Role::Worker => {
                    return Err(features::not_built(Feature::Workers).into());
                }
                _ => None,
            };
            serve::run_scheduler(ctx, provider, scheduler, hand_off, run_for).await
        }
        Some(Command::Add {
            path,
            cron,
            time_zone,
            name,
        }) => commands::add(&ctx, provider.as_ref(), &path, cron, time_zone, name).await,
        Some(Command::Remove { repo }) => {
            let s = find(&db, &repo).await?;
            provider
                .delete_schedule(&lock_name(s.id), provider.locked_by())
                .await?;
            db.remove_session(s.id).await?;
            say!(
                "removed #{} {}, its schedule and its chunks",
                s.id,
                shown(&s.display_name)
            );
            Ok(())
        }
        Some(Command::Pause { repo }) => schedules::set_paused(&db, provider, &repo, true).await,
        Some(Command::Resume { repo }) => schedules::set_paused(&db, provider, &repo, false).await,
        Some(Command::SyncNow { repo, full }) => {
            let s = find(&db, &repo).await?;
            schedules::scheduled(provider.as_ref(), &s).await?;
            if full {
                db.set_synced_commit(s.id, None).await?;
            }
            let runs = SyncNow::start(Arc::clone(&ctx), provider, &[s.id]).await?;
            let result = sync_now(&ctx, &runs, &s).await;
            runs.stop().await?;
            result.map(drop)
        }
        Some(Command::Search { query, k }) => search(&ctx, &query, k).await,
        Some(Command::Status) => status(&ctx, provider.as_ref()).await,
    }
}

fn display_name(source: &str) -> String {
    std::path::Path::new(source)
        .file_name()
        .map_or_else(|| source.to_owned(), |n| n.to_string_lossy().into_owned())
}

async fn find(db: &Db, key: &str) -> Result<db::Session, AnyError> {
    db.find_session(key)
        .await?
        .ok_or_else(|| format!("no registered repository matches {key:?}: see `status`").into())
}

/// The gap between the tick after `at` and the one after that.
fn interval_ms(schedule: &Schedule, at: chrono::DateTime<chrono::Utc>) -> i64 {
    let next = schedule.next_after(at);
    let after = next.and_then(|n| schedule.next_after(n));
    match (next, after) {
        (Some(a), Some(b)) => (b - a).num_milliseconds().max(1),
        _ => 60_000,
    }
}
