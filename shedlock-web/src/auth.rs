//! The layer that lets a request in ([`check`]) as [`Auth`] says, and the sign-in and sign-out
//! pages.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Form, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use crate::csrf::{CSRF_HEADER, same_origin};
use crate::front::{Seen, refuse};
use crate::identity::{Auth, Credential, Operator, Visitor, random_token, same};
use crate::session::Flash;
use crate::{App, Base, Shared, pages};

/// The cookie of a signed-in browser (`__Host-` before it over HTTPS).
const SESSION_COOKIE: &str = "shedlock_session";
/// The cookie that names a browser without a sign-in: the id its CSRF token is made from.
const BROWSER_COOKIE: &str = "shedlock_browser";

/// A cookie's name: `__Host-` before it over HTTPS, where the browser then keeps it only if it
/// is `Secure`, for this host alone and for path `/`.
fn cookie_name(name: &str, https: bool) -> String {
    if https {
        format!("__Host-{name}")
    } else {
        name.to_owned()
    }
}

/// The value of cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// A `Set-Cookie` for `name` (named for `https`): `HttpOnly`, `SameSite=Strict`, path `/`,
/// `Secure` over HTTPS; gone after `max_age` (at the browser's close without one).
fn set_cookie(name: &str, value: &str, https: bool, max_age: Option<Duration>) -> HeaderValue {
    let mut text = format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict",
        cookie_name(name, https)
    );
    if let Some(age) = max_age {
        text.push_str(&format!("; Max-Age={}", age.as_secs()));
    }
    if https {
        text.push_str("; Secure");
    }
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// The token of `Authorization: Bearer <token>`, the scheme matched in any case (RFC 7235).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Too many wrong tokens: `429 Too Many Requests` with `Retry-After`.
fn too_many(wait: Duration, api: bool, page: Option<(&App, &str)>) -> Response {
    let secs = wait.as_secs().max(1);
    let message = format!(
        "too many wrong tokens from this address (or from all): sign-in is refused, the right \
         token too, for {secs} s more"
    );
    let mut response = match page {
        Some((app, base)) => (
            StatusCode::TOO_MANY_REQUESTS,
            Html(login_form(app, base, Some(&message), None).into_string()),
        )
            .into_response(),
        None => refuse(StatusCode::TOO_MANY_REQUESTS, api, message),
    };
    if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// Lets a request in, or answers it: a page sends a browser to sign in, the API answers `401`,
/// a client that gave too many wrong tokens `429`. Puts the request's [`Operator`] and
/// [`Visitor`] into its extensions, gives a browser without a session its id cookie, and every
/// answer to a browser its CSRF token in the header `X-Shedlock-Csrf`.
pub(crate) async fn check(State(app): Shared, mut request: Request, next: Next) -> Response {
    let Some(seen) = request.extensions().get::<Seen>().cloned() else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            true,
            "the dashboard's layers are missing".into(),
        );
    };
    let https = seen.https;
    let headers = request.headers();
    let api = request.uri().path().starts_with("/api/");
    let browser = cookie(headers, &cookie_name(BROWSER_COOKIE, https)).map(str::to_owned);
    let session_cookie = cookie(headers, &cookie_name(SESSION_COOKIE, https)).map(str::to_owned);
    let session = session_cookie.filter(|s| app.sessions.touch(s));
    let has_cookie = browser.is_some() || session.is_some();
    let (who, credential) = match &app.options.auth {
        Auth::None => ("web:anonymous".to_owned(), Credential::Ambient),
        Auth::External => (
            request
                .extensions()
                .get::<Operator>()
                .map(|o| o.0.clone())
                .unwrap_or_else(|| "unknown".to_owned()),
            Credential::Ambient,
        ),
        Auth::Bearer(token) => match bearer(headers) {
            Some(given) => {
                if let Some(wait) = app.throttle.wait(seen.client) {
                    return too_many(wait, api, None);
                }
                if !same(token, given) {
                    app.throttle.failed(seen.client);
                    tracing::warn!(target: "shedlock_web::audit", client = %seen.client_address(),
                        "a wrong bearer token");
                    return refuse_unknown(&request, api);
                }
                app.throttle.succeeded(seen.client);
                // A header a proxy adds to every request of a browser is ambient too: a request
                // that carries a cookie of ours is a browser's, and checked as one.
                let credential = if has_cookie {
                    Credential::Ambient
                } else {
                    Credential::Header
                };
                ("web:token".to_owned(), credential)
            }
            None if session.is_some() => ("web:session".to_owned(), Credential::Ambient),
            None => return refuse_unknown(&request, api),
        },
    };
    let new_browser = match (&session, &browser) {
        (None, None) => Some(random_token()),
        _ => None,
    };
    let id = session
        .as_deref()
        .or(browser.as_deref())
        .or(new_browser.as_deref())
        .unwrap_or_default();
    let csrf = app.keys.csrf(id);
    request.extensions_mut().insert(Operator(who.clone()));
    request.extensions_mut().insert(Visitor {
        who,
        credential,
        csrf: csrf.clone(),
        session,
    });
    let mut response = next.run(request).await;
    if let Some(id) = new_browser {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(BROWSER_COOKIE, &id, https, None),
        );
    }
    if credential == Credential::Ambient
        && let Ok(value) = HeaderValue::from_str(&csrf)
    {
        response.headers_mut().insert(CSRF_HEADER, value);
    }
    response
}

/// Not signed in: a page goes to the sign-in, the API answers `401`.
fn refuse_unknown(request: &Request, api: bool) -> Response {
    if api {
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

/// The sign-in page's query: the message a sign-out left.
#[derive(Deserialize, Default)]
pub(crate) struct LoginQuery {
    flash: Option<String>,
}

/// The sign-in page (only under [`Auth::Bearer`]).
pub(crate) async fn login_page(
    State(app): Shared,
    Extension(base): Extension<Base>,
    axum::extract::Query(query): axum::extract::Query<LoginQuery>,
) -> Response {
    let flash = query.flash.as_deref().and_then(|id| app.flashes.get(id));
    let page = login_form(&app, &base.0, None, flash.as_ref());
    Html(page.into_string()).into_response()
}

fn login_form(app: &App, base: &str, error: Option<&str>, flash: Option<&Flash>) -> maud::Markup {
    pages::layout(
        app,
        base,
        None,
        "Sign in",
        "",
        html! {
            h1 { "Sign in" }
            @if let Some(flash) = flash { (pages::flash_markup(flash)) }
            @if let Some(error) = error { p.flash.error #sign-in-error { (error) } }
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

/// Signs a browser in with the token: a session cookie, then the overview. Refused from another
/// origin, and while the address (or everyone) gave too many wrong tokens.
pub(crate) async fn login(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(seen): Extension<Seen>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let Auth::Bearer(token) = &app.options.auth else {
        return Redirect::to(base.home()).into_response();
    };
    if let Err(message) = same_origin(&headers, &seen, false) {
        return pages::refused(&app, &base, StatusCode::FORBIDDEN, &message);
    }
    if let Some(wait) = app.throttle.wait(seen.client) {
        tracing::warn!(target: "shedlock_web::audit", client = %seen.client_address(),
            "a sign-in refused: too many wrong tokens");
        return too_many(wait, false, Some((&app, &base.0)));
    }
    if !same(token, form.token.trim()) {
        app.throttle.failed(seen.client);
        tracing::warn!(target: "shedlock_web::audit", client = %seen.client_address(),
            "a sign-in with a wrong token");
        return (
            StatusCode::UNAUTHORIZED,
            Html(
                login_form(
                    &app,
                    &base.0,
                    Some("That is not the dashboard's token."),
                    None,
                )
                .into_string(),
            ),
        )
            .into_response();
    }
    app.throttle.succeeded(seen.client);
    let session = app.sessions.open();
    tracing::info!(target: "shedlock_web::audit", client = %seen.client_address(), "signed in");
    let mut response = Redirect::to(base.home()).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(
            SESSION_COOKIE,
            &session,
            seen.https,
            Some(app.sessions.lifetime()),
        ),
    );
    response
}

/// Signs a browser out (a `POST`, CSRF-checked by the layer): its session ends on the server,
/// its cookie is cleared, and it lands on the sign-in page.
pub(crate) async fn logout(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(seen): Extension<Seen>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    let Some(session) = visitor.session else {
        return Redirect::to(base.home()).into_response();
    };
    app.sessions.close(&session);
    tracing::info!(target: "shedlock_web::audit", client = %seen.client_address(), "signed out");
    let flash = app.flashes.put(Flash {
        failed: false,
        message: "Signed out: the session is over on the server too.".into(),
    });
    let mut response = Redirect::to(&format!("{}/login?flash={flash}", base.0)).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", seen.https, Some(Duration::ZERO)),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        let mut headers = HeaderMap::new();
        for (value, token) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER   abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearer ", None),
        ] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer(&headers), token, "{value:?}");
        }
    }

    #[test]
    fn a_short_token_is_refused_without_showing_it() {
        let error = Auth::try_bearer("  a  ").unwrap_err();
        assert_eq!(error.chars, 1);
        assert!(error.to_string().contains("at least 16"), "{error}");
        assert!(Auth::try_bearer("0123456789abcdef").is_ok());
        let error = Auth::try_bearer("secret-but-short").map(|_| ());
        assert!(error.is_ok(), "16 characters are enough");
        let error = Auth::try_bearer("hunter2").unwrap_err().to_string();
        assert!(!error.contains("hunter2"), "{error}");
    }
}
