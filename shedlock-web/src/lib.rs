//! A dashboard for [`shedlock`]: see and steer the jobs of a fleet in a browser.
//!
//! [`router`] returns an axum [`Router`] a service mounts under a path of its choosing;
//! `shedlock serve` (the command-line tool) serves the same pages on its own. They work on
//! PostgreSQL, MySQL/MariaDB, SQLite and Redis; what a backend cannot show (the run history
//! on Redis) is said on the page.
//!
//! - **Overview** (`/`): jobs, running now, failed in the last 24 h, paused; the fleet's
//!   instances with their seats and their runs in progress.
//! - **Jobs** (`/jobs`): every job, sortable and filterable, a hundred to a page.
//! - **A job** (`/jobs/{name}`): a timeline of its runs (a row per instance, a bar per run
//!   coloured by outcome), its history, its lock, and the actions.
//! - **Locks** (`/locks`) and **History** (`/history`, paged by key, never by offset).
//! - **Actions**: pause, resume, run now, reschedule, release a stuck lock (after a
//!   confirmation, guarded by its fencing token), pause or resume the whole fleet. Every action
//!   is a `POST` carrying a CSRF token and is recorded (who, when, what) in the run history
//!   (outcome `operator`); on Redis, which keeps none, in the log.
//! - **The JSON API** under `/api/v1`, described in [`api`].
//!
//! Pages refresh themselves every few seconds (a short poll by a small script); nothing is
//! built with Node.
//!
//! # Mounting it
//!
//! ```no_run
//! # async fn example(provider: shedlock::SqliteLockProvider) -> std::io::Result<()> {
//! use shedlock_web::{Auth, Options};
//!
//! let dashboard = shedlock_web::router(provider, Options::new(Auth::bearer("a long secret")));
//! let app = axum::Router::new().nest("/shedlock", dashboard);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! # Authentication
//!
//! Nothing is served without one of:
//!
//! - [`Auth::bearer`]: a request carries `Authorization: Bearer <token>`, or a browser signs in
//!   once at `login` with the token and gets a session cookie (`HttpOnly`, `SameSite=Strict`).
//! - [`Auth::External`]: the service's own tower layer guards the router (its login, its
//!   single sign-on) and says who the operator is by putting an [`Operator`] into the request's
//!   extensions; the dashboard records that name with each action:
//!
//! ```no_run
//! # async fn example(provider: shedlock::SqliteLockProvider) {
//! use axum::extract::Request;
//! use axum::middleware::{self, Next};
//! use axum::response::{IntoResponse, Response};
//! use shedlock_web::{Auth, Operator, Options};
//!
//! async fn guard(mut request: Request, next: Next) -> Response {
//!     // Your own check: a session, a header set by the proxy, ...
//!     let Some(user) = request.headers().get("x-user").and_then(|v| v.to_str().ok()) else {
//!         return axum::http::StatusCode::UNAUTHORIZED.into_response();
//!     };
//!     let user = user.to_owned();
//!     request.extensions_mut().insert(Operator(user));
//!     next.run(request).await
//! }
//!
//! let dashboard = shedlock_web::router(provider, Options::new(Auth::External))
//!     .layer(middleware::from_fn(guard));
//! # }
//! ```
//!
//! - [`Auth::None`]: no check at all, for a listener on loopback only (`shedlock serve
//!   --no-auth` refuses any other address).
//!
//! [`Options::read_only`] shows everything and offers no action (the action routes are not
//! there at all).
//!
//! # CSRF
//!
//! A `POST` made with a session cookie (or without authentication) must carry the value of
//! the `shedlock_csrf` cookie, in the form field `csrf` or the header `X-Shedlock-Csrf`, and is
//! refused when the browser says it comes from another site (`Sec-Fetch-Site: cross-site`). A
//! `POST` carrying `Authorization: Bearer` needs neither: a browser never sends that header on
//! its own.

#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod actions;
pub mod api;
mod auth;
pub mod json;
mod model;
mod pages;
mod source;
mod timeline;

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::extract::{OriginalUri, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

pub use auth::{Auth, Operator};
pub use source::{Source, Store};

/// A job's schedule as the code defines it, so the jobs page shows an override beside the
/// code's default and the next tick of a job the store has no schedule for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeJob {
    /// The job's lock name.
    pub name: String,
    /// Its cron expression (six fields, seconds first).
    pub cron: String,
    /// The time zone it is read in (an IANA name).
    pub time_zone: String,
}

impl CodeJob {
    /// The job `name`, firing on `cron` read in `time_zone`.
    pub fn new(
        name: impl Into<String>,
        cron: impl Into<String>,
        time_zone: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            cron: cron.into(),
            time_zone: time_zone.into(),
        }
    }
}

/// How the dashboard is served: who may see it, whether it offers actions, what it knows of the
/// code's jobs.
#[derive(Clone)]
pub struct Options {
    pub(crate) auth: Auth,
    pub(crate) read_only: bool,
    pub(crate) code_jobs: Vec<CodeJob>,
    pub(crate) refresh_secs: u32,
    pub(crate) title: String,
}

impl Options {
    /// Serves every page and action to whoever `auth` lets in.
    pub fn new(auth: Auth) -> Self {
        Self {
            auth,
            read_only: false,
            code_jobs: Vec::new(),
            refresh_secs: 5,
            title: "shedlock".to_owned(),
        }
    }

    /// Shows everything and offers no action: no button, and no action route (a `POST` is
    /// `404 Not Found`).
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// The jobs as the code defines them (see [`CodeJob`]).
    #[must_use]
    pub fn code_jobs(mut self, jobs: impl IntoIterator<Item = CodeJob>) -> Self {
        self.code_jobs = jobs.into_iter().collect();
        self
    }

    /// How often the pages refresh themselves, in seconds (5 by default; 0: never).
    #[must_use]
    pub fn refresh_every(mut self, seconds: u32) -> Self {
        self.refresh_secs = seconds;
        self
    }

    /// The name in the pages' title and header (`shedlock` by default).
    #[must_use]
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("auth", &self.auth)
            .field("read_only", &self.read_only)
            .field("code_jobs", &self.code_jobs.len())
            .field("refresh_secs", &self.refresh_secs)
            .field("title", &self.title)
            .finish()
    }
}

/// What every handler shares.
pub(crate) struct App {
    pub(crate) source: Source,
    pub(crate) options: Options,
    pub(crate) sessions: auth::Sessions,
    pub(crate) schedules: model::ScheduleCache,
}

pub(crate) type Shared = State<Arc<App>>;

/// Where the dashboard is mounted, as the browser sees it (`/shedlock`, or empty at the root),
/// for the links of the pages.
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl Base {
    /// The overview's address: the mount path itself (axum's `nest("/shedlock", ..)` answers
    /// `/shedlock`, not `/shedlock/`), or `/` at the root.
    pub(crate) fn home(&self) -> &str {
        if self.0.is_empty() { "/" } else { &self.0 }
    }
}

/// The dashboard over `source` (a provider: see [`Source`]), as a router to serve or to nest
/// under a path of the service's (`app.nest("/shedlock", router(provider, options))`).
pub fn router(source: impl Into<Source>, options: Options) -> Router {
    let read_only = options.read_only;
    let app = Arc::new(App {
        source: source.into(),
        options,
        sessions: auth::Sessions::default(),
        schedules: model::ScheduleCache::default(),
    });
    let mut routes = Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/{name}", get(pages::job))
        .route("/locks", get(pages::locks))
        .route("/history", get(pages::history))
        .route("/assets/app.js", get(pages::script))
        .route("/assets/style.css", get(pages::style))
        .route("/api/v1/overview", get(api::overview))
        .route("/api/v1/jobs", get(api::jobs))
        .route("/api/v1/jobs/{name}", get(api::job))
        .route("/api/v1/locks", get(api::locks))
        .route("/api/v1/runs", get(api::runs));
    if !read_only {
        routes = routes
            .route("/locks/{name}/release", get(pages::confirm_release))
            .route("/act/jobs/{name}/{action}", post(actions::job_form))
            .route("/act/locks/{name}/release", post(actions::release_form))
            .route("/act/fleet/{action}", post(actions::fleet_form))
            .route("/api/v1/jobs/{name}/{action}", post(actions::job_api))
            .route("/api/v1/locks/{name}/release", post(actions::release_api))
            .route("/api/v1/fleet/{action}", post(actions::fleet_api));
    }
    let guarded = routes.layer(middleware::from_fn_with_state(app.clone(), auth::check));
    Router::new()
        .route("/login", get(auth::login_page).post(auth::login))
        .merge(guarded)
        .layer(middleware::from_fn(base))
        .with_state(app)
}

/// Records where the router is mounted ([`Base`]) for the pages' links.
async fn base(OriginalUri(original): OriginalUri, mut request: Request, next: Next) -> Response {
    let inner = request.uri().path();
    let full = original.path();
    // Nested at `/shedlock`, a request for `/shedlock` reaches the router as `/`.
    let base = if inner == "/" && !full.ends_with('/') {
        full
    } else {
        full.strip_suffix(inner).unwrap_or("")
    };
    let base = base.trim_end_matches('/').to_owned();
    request.extensions_mut().insert(Base(base));
    next.run(request).await
}
