//! Who may see the dashboard ([`Auth`]), who did an action ([`Operator`]), the sign-in page,
//! sessions and the CSRF check.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use crate::{App, Base, Shared, pages};

/// The cookie of a signed-in browser.
pub(crate) const SESSION_COOKIE: &str = "shedlock_session";
/// The cookie whose value a `POST` must repeat.
pub(crate) const CSRF_COOKIE: &str = "shedlock_csrf";
/// The header an API client repeats the CSRF cookie in.
pub(crate) const CSRF_HEADER: &str = "x-shedlock-csrf";
/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 10_000;

/// Who may see the dashboard.
#[derive(Clone)]
#[non_exhaustive]
pub enum Auth {
    /// A request carries `Authorization: Bearer <token>`, or comes from a browser that signed
    /// in with the token. The token is never shown, logged or put in a `Debug` value.
    Bearer(Arc<str>),
    /// The service's own tower layer guards the router and says who the operator is by an
    /// [`Operator`] in the request's extensions (`unknown` without one).
    External,
    /// No check: for a listener on loopback only.
    None,
}

impl Auth {
    /// A bearer token (see [`Auth::Bearer`]).
    pub fn bearer(token: impl Into<String>) -> Self {
        Auth::Bearer(Arc::from(token.into()))
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::External => f.write_str("External"),
            Auth::None => f.write_str("None"),
        }
    }
}

/// Who is acting, as recorded with each action: put into the request's extensions by the
/// service's layer under [`Auth::External`]; `web:token` or `web:session` under a bearer token,
/// `web:anonymous` without authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(pub String);

/// How a request was let in: by a header a browser never sends on its own (no CSRF check
/// needed), or ambiently (a cookie, or no authentication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    Header,
    Ambient,
}

/// The signed-in browsers' session ids.
#[derive(Default)]
pub(crate) struct Sessions(Mutex<VecDeque<String>>);

impl Sessions {
    fn open(&self) -> String {
        let id = random_token();
        let mut sessions = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= MAX_SESSIONS {
            sessions.pop_front();
        }
        sessions.push_back(id.clone());
        id
    }

    fn contains(&self, id: &str) -> bool {
        let sessions = self.0.lock().unwrap_or_else(|e| e.into_inner());
        sessions.iter().any(|s| same(s, id))
    }
}

/// 128 random bits as hex.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No generator: a token nobody can guess cannot be made, so none will ever match.
        return String::new();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of cookie `name`.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Lets a request in, or answers it: a page sends a browser to sign in, the API answers
/// `401`. Puts the request's [`Operator`] and [`Credential`] into its extensions, and gives a
/// browser its CSRF cookie.
pub(crate) async fn check(State(app): Shared, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    let (operator, credential) = match &app.options.auth {
        Auth::None => (Operator("web:anonymous".to_owned()), Credential::Ambient),
        Auth::External => (
            request
                .extensions()
                .get::<Operator>()
                .cloned()
                .unwrap_or_else(|| Operator("unknown".to_owned())),
            Credential::Ambient,
        ),
        Auth::Bearer(token) => {
            if bearer(headers).is_some_and(|given| same(token, given)) {
                (Operator("web:token".to_owned()), Credential::Header)
            } else if cookie(headers, SESSION_COOKIE).is_some_and(|s| app.sessions.contains(s)) {
                (Operator("web:session".to_owned()), Credential::Ambient)
            } else {
                return refuse(&request);
            }
        }
    };
    let needs_csrf_cookie = cookie(headers, CSRF_COOKIE).is_none();
    let csrf = cookie(headers, CSRF_COOKIE)
        .map(str::to_owned)
        .unwrap_or_else(random_token);
    request.extensions_mut().insert(operator);
    request.extensions_mut().insert(credential);
    request.extensions_mut().insert(pages::Csrf(csrf.clone()));
    let mut response = next.run(request).await;
    if needs_csrf_cookie
        && let Ok(value) =
            HeaderValue::from_str(&format!("{CSRF_COOKIE}={csrf}; Path=/; SameSite=Strict"))
    {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

fn refuse(request: &Request) -> Response {
    let path = request.uri().path();
    if path.starts_with("/api/") {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            axum::Json(serde_json::json!({
                "error": "not signed in: send `Authorization: Bearer <token>` (the dashboard's token)"
            })),
        )
            .into_response();
    }
    let base = request
        .extensions()
        .get::<Base>()
        .map(|b| b.0.clone())
        .unwrap_or_default();
    Redirect::to(&format!("{base}/login")).into_response()
}

/// Refuses a `POST` that may come from another site: let in by a cookie (or without
/// authentication), and not repeating the CSRF cookie in `given`, or marked cross-site by the
/// browser.
pub(crate) fn check_csrf(
    headers: &HeaderMap,
    credential: Credential,
    given: Option<&str>,
) -> Result<(), String> {
    if credential == Credential::Header {
        return Ok(());
    }
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| site == "cross-site")
    {
        return Err(
            "refused: the request comes from another site (Sec-Fetch-Site: cross-site)".into(),
        );
    }
    let given = given.or_else(|| headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()));
    match (cookie(headers, CSRF_COOKIE), given) {
        (Some(expected), Some(given)) if same(expected, given) => Ok(()),
        (None, _) => Err(format!(
            "refused: no CSRF cookie ({CSRF_COOKIE}); load a page of the dashboard first"
        )),
        _ => Err(format!(
            "refused: the CSRF token is missing or wrong (send the {CSRF_COOKIE} cookie's value in the form field `csrf` or the header X-Shedlock-Csrf); reload the page and try again"
        )),
    }
}

/// The sign-in page (only under [`Auth::Bearer`]).
pub(crate) async fn login_page(State(app): Shared, base: axum::Extension<Base>) -> Response {
    Html(login_form(&app, &base.0.0, None).into_string()).into_response()
}

fn login_form(app: &App, base: &str, error: Option<&str>) -> maud::Markup {
    pages::layout(
        app,
        base,
        "Sign in",
        "",
        html! {
            h1 { "Sign in" }
            @if let Some(error) = error { p.flash.error { (error) } }
            @match app.options.auth {
                Auth::Bearer(_) => {
                    form method="post" action={(base) "/login"} {
                        label for="token" { "The dashboard's token" }
                        input #token type="password" name="token" autocomplete="off" autofocus;
                        button #sign-in type="submit" { "Sign in" }
                    }
                }
                _ => { p { "This dashboard needs no sign-in here." a href=(if base.is_empty() { "/" } else { base }) { "Open it" } } }
            }
        },
    )
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

/// Signs a browser in with the token: a session cookie, then the overview.
pub(crate) async fn login(
    State(app): Shared,
    base: axum::Extension<Base>,
    Form(form): Form<LoginForm>,
) -> Response {
    let Auth::Bearer(token) = &app.options.auth else {
        return Redirect::to(base.0.home()).into_response();
    };
    if !same(token, form.token.trim()) {
        return (
            StatusCode::UNAUTHORIZED,
            Html(
                login_form(&app, &base.0.0, Some("That is not the dashboard's token."))
                    .into_string(),
            ),
        )
            .into_response();
    }
    let session = app.sessions.open();
    let mut response = Redirect::to(base.0.home()).into_response();
    if let Ok(value) = HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict"
    )) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}
