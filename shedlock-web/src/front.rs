//! What every request meets first, whatever its route: the `Host` check (no answer to a name
//! that is not the dashboard's: DNS rebinding), what is known of where the request comes from
//! ([`Seen`]), and the security headers on every answer.

use std::net::IpAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::identity::Auth;
use crate::serve::LocalAddr;
use crate::{Options, Shared};

/// The names a dashboard always answers for, with any port.
pub(crate) const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The pages' Content-Security-Policy: their own script and stylesheet only, no frame around
/// them, forms sent only to the dashboard.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Where a request comes from, as far as the dashboard can tell.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The `Host` it was sent to (lower case), allowed.
    pub(crate) host: String,
    /// Whether the browser reached the dashboard over HTTPS ([`Options::https`], or the proxy's
    /// `X-Forwarded-Proto` when [`Options::trust_proxy_headers`]).
    pub(crate) https: bool,
    /// The client's address: the connection's peer ([`ConnectInfo`], which [`crate::serve`]
    /// gives), or the proxy's `X-Forwarded-For` when trusted; `None` when unknown.
    pub(crate) client: Option<IpAddr>,
}

impl Seen {
    /// The client's address as the record says it.
    pub(crate) fn client_address(&self) -> String {
        match self.client {
            Some(ip) => ip.to_string(),
            None => "an unknown address".to_owned(),
        }
    }

    /// The dashboard's origin as the browser names it: `http://localhost:8080`.
    pub(crate) fn origin(&self) -> String {
        format!(
            "{}://{}",
            if self.https { "https" } else { "http" },
            self.host
        )
    }
}

/// The `Host` check and the security headers, around every route.
pub(crate) async fn front(State(app): Shared, mut request: Request, next: Next) -> Response {
    let options = &app.options;
    let api = request.uri().path().starts_with("/api/");
    let local = request.extensions().get::<LocalAddr>().copied();
    let host = match allowed_host(options, request.headers(), request.uri(), local) {
        Ok(host) => host,
        Err(refusal) => {
            tracing::warn!(target: "shedlock_web::audit", "{refusal}");
            let mut response = refuse(StatusCode::MISDIRECTED_REQUEST, api, refusal);
            secure(&mut response);
            return response;
        }
    };
    let headers = request.headers();
    let proxied = |name: &str| {
        options
            .trust_proxy_headers
            .then(|| last_value(headers, name))
            .flatten()
    };
    let https = options.https || proxied("x-forwarded-proto").is_some_and(|p| p == "https");
    let client = proxied("x-forwarded-for")
        .and_then(|ip| ip.parse().ok())
        .or_else(|| {
            request
                .extensions()
                .get::<ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip())
        });
    request.extensions_mut().insert(Seen {
        host,
        https,
        client,
    });
    let mut response = next.run(request).await;
    secure(&mut response);
    response
}

/// The last value of a header a proxy appends to (`X-Forwarded-For: client, proxy1`): the one
/// the proxy next to the dashboard wrote, trimmed and lower case.
fn last_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let all: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    all.last()?
        .rsplit(',')
        .next()
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
}

/// A refusal: JSON under `/api/`, text elsewhere.
pub(crate) fn refuse(status: StatusCode, api: bool, message: String) -> Response {
    if api {
        (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
    } else {
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{message}\n"),
        )
            .into_response()
    }
}

/// The security headers every answer carries; `Cache-Control: no-store` unless the route set
/// its own (the script and stylesheet).
fn secure(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

/// A `Host` split into its name (lower case, an IPv6 address in brackets) and port.
pub(crate) fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let host = host.trim().to_ascii_lowercase();
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let (name, rest) = host.split_at(end + 1);
        match rest {
            "" => (name.to_owned(), None),
            _ => (name.to_owned(), Some(rest.strip_prefix(':')?)),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.clone(), None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'));
    valid.then_some((name, port))
}

/// The request's `Host` if the dashboard answers for it; else why not, naming it and how to
/// allow it.
fn allowed_host(
    options: &Options,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    local: Option<LocalAddr>,
) -> Result<String, String> {
    let given = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()));
    let Some(given) = given else {
        return Err(
            "refused: the request names no host (no Host header); the dashboard answers only \
             for the names it is reached by"
                .to_owned(),
        );
    };
    let Some((name, port)) = split_host(&given) else {
        return Err(format!(
            "refused: the Host header {given:?} is not a host name"
        ));
    };
    let host = match port {
        Some(port) => format!("{name}:{port}"),
        None => name.clone(),
    };
    if LOOPBACK_NAMES.contains(&name.as_str()) {
        return Ok(host);
    }
    if matches!(options.auth, Auth::None) {
        return Err(format!(
            "refused: this dashboard has no authentication, so it answers only for localhost, \
             127.0.0.1 and [::1], not for host {host:?} (a web page whose DNS name was pointed \
             at this machine sends that); open it as http://localhost{}/, or serve it with a \
             token and allow the name (shedlock serve --token ... --allowed-host {name})",
            port.map(|p| format!(":{p}")).unwrap_or_default()
        ));
    }
    // An IP literal naming the very address the connection reached: no DNS name involved.
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    if local.is_some_and(|l| literal.parse::<IpAddr>().ok() == Some(l.0.ip())) {
        return Ok(host);
    }
    let allowed = options
        .allowed_hosts
        .iter()
        .any(|entry| match split_host(entry) {
            Some((allowed, None)) => allowed == name,
            Some((allowed, Some(allowed_port))) => allowed == name && Some(allowed_port) == port,
            None => false,
        });
    if allowed {
        return Ok(host);
    }
    let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|n| (*n).to_owned()).collect();
    names.extend(options.allowed_hosts.iter().cloned());
    Err(format!(
        "refused: this dashboard does not answer for host {host:?} (it answers for {}, and the \
         address a connection reached); allow the name with --allowed-host {name} (shedlock \
         serve) or Options::allowed_hosts (a service that mounts the dashboard)",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::split_host;

    #[test]
    fn hosts_split_into_name_and_port() {
        assert_eq!(
            split_host("LocalHost:8080"),
            Some(("localhost".into(), Some(8080)))
        );
        assert_eq!(split_host("[::1]:80"), Some(("[::1]".into(), Some(80))));
        assert_eq!(split_host("[::1]"), Some(("[::1]".into(), None)));
        assert_eq!(split_host("a.example"), Some(("a.example".into(), None)));
        assert_eq!(split_host("a.example:x"), None);
        assert_eq!(split_host("a@b"), None);
        assert_eq!(split_host("a/b"), None);
        assert_eq!(split_host(""), None);
        assert_eq!(split_host("[::1]x"), None);
    }
}
