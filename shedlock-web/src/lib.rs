//! A dashboard for [`shedlock`]: see and steer the jobs of a fleet in a browser.
//!
//! [`router`] returns an axum [`Router`] a service mounts under a path of its choosing;
//! `shedlock serve` (the command-line tool) serves the same pages on its own, with [`serve`]
//! (hyper with a header read timeout, under a cap on connections). They work on
//! PostgreSQL, MySQL/MariaDB, SQLite and Redis (each with its run history); what a store of
//! one's own cannot show (a run history it does not keep) is said on the page.
//!
//! - **Overview** (`/`): jobs, running now, failed in the last 24 h, paused; the fleet's
//!   instances with their seats and their runs in progress.
//! - **Jobs** (`/jobs`): every job, sortable and filterable, a hundred to a page.
//! - **A job** (`/jobs/{name}`, or `/job?name=` for a name a path cannot carry: `.`, `..`): a
//!   timeline of its runs (a row per instance, a bar per run coloured by outcome), its history,
//!   its lock, and the actions. A name's bidirectional controls and zero-width characters are
//!   shown written out (`\u{202e}`) on every page.
//! - **Locks** (`/locks`) and **History** (`/history`, paged by key, never by offset).
//! - **Calendars** (`/calendars`): each calendar with its time zone, its entries and the jobs
//!   that exclude it; a calendar's page (`/calendars/{name}`) lists its entries with their
//!   labels, adds one, removes one, imports an iCalendar (`.ics`) file and deletes the
//!   calendar (not while a job excludes it). A job's page shows its time rules (the calendars
//!   it excludes, what becomes of an excluded tick, its start, end and most runs) and sets them.
//! - **Actions**: pause (with an optional note, shown beside the pause until the resume),
//!   resume, run now, reschedule, release a stuck lock (after a confirmation, guarded by its
//!   fencing token; never one of the library's own locks), pause or resume the whole fleet.
//!   Every action is a `POST` carrying a CSRF token, done through the library's operator layer
//!   (`shedlock::operator`, which the `shedlock` tool acts through too) and recorded (who, from
//!   where, when, what, the note) in the run history (outcome `operator`) and the log; its
//!   message waits for the page it returns to on the server (a link cannot carry one).
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
//! let auth = Auth::try_bearer("a long random secret").expect("16 characters at least");
//! let dashboard = shedlock_web::router(provider, Options::new(auth));
//! let app = axum::Router::new().nest("/shedlock", dashboard);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
//! // Header read timeout, 64 connections at most, request timeout, clients' addresses.
//! shedlock_web::serve(listener, app).await
//! # }
//! ```
//!
//! # Authentication
//!
//! Nothing is served without one of:
//!
//! - [`Auth::try_bearer`]: a request carries `Authorization: Bearer <token>` (the scheme in any
//!   case), or a browser signs in once at `login` with the token and gets a session cookie
//!   (`HttpOnly`, `SameSite=Strict`; `Secure` and named `__Host-shedlock_session` over HTTPS). A
//!   session lasts at most 12 h and ends after 1 h unused ([`Options::session_lifetime`],
//!   [`Options::session_idle`]); `Sign out` ends it on the server too. After 10 wrong tokens from
//!   one client address (or 100 from all), sign-in and the bearer header are refused, the right
//!   token too, with `429 Too Many Requests` and `Retry-After`: 30 s, doubling with each wrong
//!   token after, up to 15 min. A token shorter than [`MIN_TOKEN_CHARS`] is refused by
//!   [`Auth::try_bearer`] ([`Auth::bearer`] takes any).
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
//! let dashboard = shedlock_web::router(
//!     provider,
//!     Options::new(Auth::External).allowed_hosts(["ops.example.com"]),
//! )
//! .layer(middleware::from_fn(guard));
//! # }
//! ```
//!
//! - [`Auth::None`]: no check at all, for a listener on loopback only (`shedlock serve
//!   --no-auth` refuses any other address).
//!
//! [`Options::read_only`] shows everything and offers no action (the action routes are not
//! there at all).
//!
//! # The host it answers for (DNS rebinding)
//!
//! A web page whose DNS name is pointed at `127.0.0.1` reaches a dashboard on loopback as its
//! own origin. So the dashboard answers `421 Misdirected Request` (naming the host and how to
//! allow it) to a `Host` it does not know: without authentication it answers only for
//! `localhost`, `127.0.0.1` and `[::1]` (any port); with authentication for those, the IP
//! address a connection reached (served by [`serve`]), and [`Options::allowed_hosts`]
//! (`shedlock serve --allowed-host NAME`). A service that mounts the router names its hosts
//! there.
//!
//! # CSRF
//!
//! Every `POST` is refused (`403`, changing nothing) when the browser says it comes from
//! another origin: a `Sec-Fetch-Site` other than `same-origin` (or `none`), or an `Origin`
//! (without one, a `Referer`) other than the dashboard's own scheme, host and port. A request let in by a
//! cookie, or without authentication, must also carry one of the two, and its browser's CSRF
//! token, in the form field `csrf` (the pages' forms do) or the header `X-Shedlock-Csrf` (every
//! answer to a browser gives it in that header). The token is an HMAC-SHA256 of the browser's
//! session id, or without sign-in of its random id cookie (`shedlock_browser`, `HttpOnly`),
//! under a key made when the router is: a page on another port of the same host (cookies
//! ignore ports) can set cookies but cannot make the token. A request with `Authorization:
//! Bearer` needs neither Origin nor token, unless it carries one of the dashboard's cookies (a
//! proxy that adds the header to a browser's every request): then it is checked as a browser's.
//! After a restart the key is new: a page open from before is refused once, and works again
//! when reloaded.
//!
//! # Audit
//!
//! Every action is recorded with who (the [`Operator`]) and from where: the client's address,
//! from axum's `ConnectInfo<SocketAddr>`, which [`serve`] gives (so does
//! `into_make_service_with_connect_info::<SocketAddr>()`); behind a proxy its
//! `X-Forwarded-For` when [`Options::trust_proxy_headers`]. A mounted router given neither
//! records `from an unknown address`.
//!
//! # Security headers
//!
//! Every answer carries `Content-Security-Policy` (the pages' own script and stylesheet only,
//! `frame-ancestors 'none'`), `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY`,
//! `Referrer-Policy: same-origin`, and, but for the script and stylesheet, `Cache-Control:
//! no-store`.

#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod actions;
pub mod api;
mod auth;
mod calendars;
mod csrf;
mod front;
mod identity;
pub mod json;
mod model;
mod pages;
mod serve;
mod session;
mod source;
mod timeline;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{OriginalUri, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

pub use identity::{Auth, MIN_TOKEN_CHARS, Operator, TokenTooShort};
pub use serve::{Limits, Serve, serve};
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
    pub(crate) allowed_hosts: Vec<String>,
    pub(crate) https: bool,
    pub(crate) trust_proxy_headers: bool,
    pub(crate) session_lifetime: Duration,
    pub(crate) session_idle: Duration,
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
            allowed_hosts: Vec::new(),
            https: false,
            trust_proxy_headers: false,
            session_lifetime: Duration::from_secs(12 * 3600),
            session_idle: Duration::from_secs(3600),
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

    /// The host names the dashboard answers for besides `localhost`, `127.0.0.1`, `[::1]` and
    /// the IP address a connection reached: `ops.example.com` (any port) or
    /// `ops.example.com:8443` (that port). Any other `Host` is answered `421 Misdirected
    /// Request`. Not under [`Auth::None`], which answers for the loopback names only.
    #[must_use]
    pub fn allowed_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allowed_hosts = hosts
            .into_iter()
            .map(|h| h.into().trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        self
    }

    /// The browser reaches the dashboard over HTTPS (a TLS proxy in front, or the service's
    /// own TLS): its cookies are `Secure` and named with the `__Host-` prefix, and a `POST`'s
    /// `Origin` must be `https://`. `false` by default (`shedlock serve` serves plain HTTP).
    #[must_use]
    pub fn https(mut self, https: bool) -> Self {
        self.https = https;
        self
    }

    /// Believes the proxy in front: `X-Forwarded-Proto: https` says the browser used HTTPS (as
    /// [`Options::https`] for that request), and the last `X-Forwarded-For` address is the
    /// client's (recorded with an action, and counted for the sign-in throttle). Only behind a
    /// proxy that sets both on every request: a client could send them itself otherwise.
    #[must_use]
    pub fn trust_proxy_headers(mut self, trust: bool) -> Self {
        self.trust_proxy_headers = trust;
        self
    }

    /// How long a signed-in session lasts at most (12 h by default).
    #[must_use]
    pub fn session_lifetime(mut self, lifetime: Duration) -> Self {
        self.session_lifetime = lifetime;
        self
    }

    /// How long a signed-in session may sit unused before it ends (1 h by default).
    #[must_use]
    pub fn session_idle(mut self, idle: Duration) -> Self {
        self.session_idle = idle;
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
            .field("allowed_hosts", &self.allowed_hosts)
            .field("https", &self.https)
            .field("trust_proxy_headers", &self.trust_proxy_headers)
            .field("session_lifetime", &self.session_lifetime)
            .field("session_idle", &self.session_idle)
            .finish()
    }
}

/// What every handler shares.
pub(crate) struct App {
    pub(crate) source: Source,
    pub(crate) options: Options,
    pub(crate) sessions: session::Sessions,
    pub(crate) throttle: session::Throttle,
    pub(crate) flashes: session::Flashes,
    pub(crate) keys: csrf::Keys,
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
        sessions: session::Sessions::new(options.session_lifetime, options.session_idle),
        throttle: session::Throttle::new(),
        flashes: session::Flashes::new(),
        keys: csrf::Keys::new(),
        options,
        schedules: model::ScheduleCache::default(),
    });
    let mut routes = Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/{name}", get(pages::job))
        .route("/job", get(pages::job_by_query))
        .route("/logout", post(auth::logout))
        .route("/locks", get(pages::locks))
        .route("/history", get(pages::history))
        .route("/calendars", get(pages::calendars))
        .route("/attention", get(pages::attention))
        .route("/calendars/{name}", get(pages::calendar))
        .route("/calendar", get(pages::calendar_by_query))
        .route("/api/v1/overview", get(api::overview))
        .route("/api/v1/jobs", get(api::jobs))
        .route("/api/v1/jobs/{name}", get(api::job))
        .route("/api/v1/jobs/{name}/upcoming", get(api::upcoming))
        .route("/api/v1/backfills", get(api::backfills))
        .route("/api/v1/calendars", get(calendars::list_api))
        .route("/api/v1/calendars/{name}", get(calendars::show_api))
        .route("/api/v1/locks", get(api::locks))
        .route("/api/v1/runs", get(api::runs))
        .route("/api/v1/attention", get(pages::attention_api));
    if !read_only {
        routes = routes
            .route("/locks/{name}/release", get(pages::confirm_release))
            .route("/lock/release", get(pages::confirm_release_by_query))
            .route("/act/jobs/{name}/{action}", post(actions::job_form))
            .route("/act/job/{action}", post(actions::job_form_by_query))
            .route("/act/locks/{name}/release", post(actions::release_form))
            .route("/act/lock/release", post(actions::release_form_by_query))
            .route("/act/fleet/{action}", post(actions::fleet_form))
            .route("/api/v1/jobs/{name}/{action}", post(actions::job_api))
            .route("/api/v1/locks/{name}/release", post(actions::release_api))
            .route("/api/v1/fleet/{action}", post(actions::fleet_api))
            .route("/act/calendars", post(calendars::create_form))
            .route("/act/calendars/{name}/{action}", post(calendars::form))
            .route("/act/calendar/{action}", post(calendars::form_by_query))
            .route("/api/v1/calendars", post(calendars::create_api))
            .route("/api/v1/calendars/{name}/{action}", post(calendars::api));
    }
    // Outermost first: the Host check and the security headers, the mount path, then (but for
    // the sign-in) who it is, then the CSRF check of what changes anything.
    let guarded = routes
        .layer(middleware::from_fn_with_state(app.clone(), csrf::guard))
        .layer(middleware::from_fn_with_state(app.clone(), auth::check));
    Router::new()
        .route("/login", get(auth::login_page).post(auth::login))
        // The script and stylesheet are the same for everyone, the sign-in page's too.
        .route("/assets/app.js", get(pages::script))
        .route("/assets/style.css", get(pages::style))
        .merge(guarded)
        .fallback(not_found)
        .layer(middleware::from_fn(base))
        .layer(middleware::from_fn_with_state(app.clone(), front::front))
        .with_state(app)
}

/// A path the dashboard has no page for (inside the layers, so its answer carries their headers).
async fn not_found(OriginalUri(original): OriginalUri) -> Response {
    front::refuse(
        axum::http::StatusCode::NOT_FOUND,
        original.path().contains("/api/"),
        format!("the dashboard has no page at {}", original.path()),
    )
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
