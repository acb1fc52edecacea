//! The CSRF check of every state-changing request, in one layer: where it comes from (the
//! browser's `Sec-Fetch-Site`, `Origin` or `Referer` against the `Host`), and for a request let
//! in by a cookie (or without authentication) the token of its browser: an HMAC-SHA256 of the
//! browser's session id (or, without sign-in, of its random id cookie) under a key made when
//! the router is, which never leaves the process. A cookie planted by another page on the same
//! host (cookies ignore ports) is worthless without the key.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use hmac::{KeyInit, Mac};

use crate::front::{Seen, refuse};
use crate::identity::{Credential, Visitor, same};
use crate::{Base, Shared, pages};

/// The header an API client repeats the CSRF token in (and in which the dashboard gives it).
pub(crate) const CSRF_HEADER: &str = "x-shedlock-csrf";
/// The form field a page's form carries the token in.
const CSRF_FIELD: &str = "csrf";
/// The largest body a state-changing request may carry (its forms and JSON are a few fields).
const MAX_BODY: usize = 64 * 1024;
/// The largest body of a calendar's import (an iCalendar file's text, form-encoded: a few
/// years of an office's calendar), as axum's extractors take at most.
const MAX_IMPORT_BODY: usize = 2 * 1024 * 1024;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The process's key for the CSRF tokens: 256 random bits made with the router.
pub(crate) struct Keys(Option<[u8; 32]>);

impl Keys {
    pub(crate) fn new() -> Self {
        let mut key = [0u8; 32];
        match getrandom::fill(&mut key) {
            Ok(()) => Keys(Some(key)),
            Err(error) => {
                // No generator: no token can be made, so every state-changing request from a
                // browser is refused (saying so) rather than guarded by a guessable key.
                tracing::error!(%error, "no random generator: the dashboard refuses every action from a browser");
                Keys(None)
            }
        }
    }

    /// The CSRF token of the browser whose session (or id cookie) is `id`: hex of
    /// HMAC-SHA256(key, "shedlock-web csrf\0" + id); empty (matching nothing) without a key.
    pub(crate) fn csrf(&self, id: &str) -> String {
        let Some(key) = &self.0 else {
            return String::new();
        };
        let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
            return String::new();
        };
        mac.update(b"shedlock-web csrf\0");
        mac.update(id.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Refuses a request whose browser says it comes from another site or origin: a
/// `Sec-Fetch-Site` other than `same-origin` (or `none`, typed by the user), an `Origin` (or,
/// without one, a `Referer`) that is not the dashboard's own; with neither when `required`.
pub(crate) fn same_origin(headers: &HeaderMap, seen: &Seen, required: bool) -> Result<(), String> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        let from = text("origin")
            .map(|o| format!(", Origin: {o}"))
            .unwrap_or_default();
        return Err(format!(
            "refused: the browser says this request comes from another origin (Sec-Fetch-Site: \
             {site}{from}); an action is taken only from the dashboard's own pages"
        ));
    }
    let own = seen.origin();
    let (said, by) = match (text("origin"), text("referer")) {
        (Some(origin), _) => (origin, "Origin"),
        (None, Some(referer)) => (referer, "Referer"),
        (None, None) if required => {
            return Err(format!(
                "refused: the request carries neither Origin nor Referer, so it cannot be told \
                 from one another page sent; a browser sends them, a script sends `Origin: \
                 {own}` (or the bearer token in Authorization)"
            ));
        }
        (None, None) => return Ok(()),
    };
    if origin_of(said).is_some_and(|o| Some(o) == origin_of(&own)) {
        return Ok(());
    }
    Err(format!(
        "refused: the request comes from {said:?} ({by}), not from this dashboard ({own}); an \
         action is taken only from the dashboard's own pages{}",
        if seen.https {
            ""
        } else {
            " (served behind an HTTPS proxy? say so: Options::https or trust_proxy_headers, \
             shedlock serve --trust-proxy-headers)"
        }
    ))
}

/// The origin of a URL as a tuple (scheme, host, port with its default); `None` for `null` or
/// what is not a URL.
fn origin_of(url: &str) -> Option<(String, String, u16)> {
    let url = url::Url::parse(url).ok()?;
    Some((
        url.scheme().to_owned(),
        url.host_str()?.to_ascii_lowercase(),
        url.port_or_known_default()?,
    ))
}

/// The CSRF check of a state-changing request (every method but `GET`, `HEAD` and `OPTIONS`):
/// from the dashboard's own origin, and, when let in by a cookie or without authentication,
/// carrying its browser's token in the header `X-Shedlock-Csrf` or the form field `csrf`. A
/// refusal is `403 Forbidden` (JSON under `/api/`, a page elsewhere) and changes nothing.
pub(crate) async fn guard(State(app): Shared, request: Request, next: Next) -> Response {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return next.run(request).await;
    }
    let (Some(seen), Some(visitor)) = (
        request.extensions().get::<Seen>().cloned(),
        request.extensions().get::<Visitor>().cloned(),
    ) else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            true,
            "the dashboard's layers are missing".into(),
        );
    };
    let api = request.uri().path().starts_with("/api/");
    let base = request
        .extensions()
        .get::<Base>()
        .cloned()
        .unwrap_or(Base(String::new()));
    let refused = |message: String| {
        tracing::warn!(target: "shedlock_web::audit", operator = %visitor.who,
            client = %seen.client_address(), "{message}");
        if api {
            refuse(StatusCode::FORBIDDEN, true, message)
        } else {
            pages::refused(&app, &base, StatusCode::FORBIDDEN, &message)
        }
    };
    let ambient = visitor.credential == Credential::Ambient;
    if let Err(message) = same_origin(request.headers(), &seen, ambient) {
        return refused(message);
    }
    if !ambient {
        return next.run(request).await;
    }
    let most = if request.uri().path().ends_with("/import") {
        MAX_IMPORT_BODY
    } else {
        MAX_BODY
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, most).await else {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            api,
            format!("refused: the request's body is larger than {most} bytes"),
        );
    };
    let from_header = parts
        .headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let is_form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let from_form = || {
        url::form_urlencoded::parse(&bytes)
            .find(|(name, _)| name == CSRF_FIELD)
            .map(|(_, value)| value.into_owned())
    };
    let given = from_header.or_else(|| if is_form { from_form() } else { None });
    match given {
        Some(given) if same(&visitor.csrf, &given) => {}
        Some(_) => {
            return refused(
                "refused: the CSRF token is not this browser's (the page is older than the \
                 dashboard's restart or your sign-in, or another page made the request): reload \
                 the page and try again"
                    .into(),
            );
        }
        None => {
            return refused(format!(
                "refused: no CSRF token: a page's form carries it in the field `{CSRF_FIELD}`; \
                 a script repeats the X-Shedlock-Csrf header of a page it read (with that \
                 page's cookies), or uses the bearer token"
            ));
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
