//! Secrets in connection strings: [`mask_url`], the one function every error, `Debug` value and
//! log line of the workspace masks a URL with, and [`SecretUrl`], a URL whose `Debug` and
//! `Display` print it masked.
//!
//! A URL is masked by parsing it (the [`url`] crate), never by searching it for `/` or `@`:
//! its password becomes `***` wherever it stands (a password may hold `/`, `?` or `#`), and so
//! does the value of every query parameter whose name contains `pass` (`password`, `passwd`), `pwd`,
//! `secret`, `token` or `key` (any case). A string that begins like a URL but does not parse (an unescaped `/` in
//! the password makes the port unreadable; `postgres:user:pw@host` lacks its `//`) is masked
//! more widely: everything up to its last `@` becomes `***`, user name included.
//!
//! A string with no scheme is masked too, unless it is a file path by the rule of
//! [`settings::backend_of_url`](crate::settings::backend_of_url) (it starts with `/`, `./` or
//! `../`, or ends with `.db`, `.sqlite` or `.sqlite3`), which is returned as it is: in a libpq
//! `key=value` connection string (`host=db user=app password=hunter2`) the value of every
//! secret-named key becomes `***` (quoted or not), and in anything else with an `@`
//! (`postgresql//app:hunter2@db`, its `:` missing) everything between its `//` (or its start)
//! and its last `@` does.
//!
//! ```
//! use shedlock::secret::mask_url;
//!
//! assert_eq!(
//!     mask_url("postgres://app:hunter2@db:5432/app"),
//!     "postgres://app:***@db:5432/app"
//! );
//! assert_eq!(
//!     mask_url("postgres://app:pa/ss@db:5432/app"),
//!     "postgres://***@db:5432/app"
//! );
//! assert_eq!(
//!     mask_url("mysql://db/app?user=app&password=hunter2"),
//!     "mysql://db/app?user=app&password=***"
//! );
//! assert_eq!(mask_url("/srv/locks.db"), "/srv/locks.db");
//! assert_eq!(
//!     mask_url("host=db user=app password='hunter 2' dbname=app"),
//!     "host=db user=app password=*** dbname=app"
//! );
//! assert_eq!(mask_url("postgresql//app:hunter2@db/app"), "postgresql//***@db/app");
//! ```

use std::fmt;

use url::Url;

/// What replaces a secret.
pub const MASK: &str = "***";

/// The words that make a query parameter secret when its name contains one (any case): `pass`
/// covers `password`, `passwd` and redis-rs's `pass`.
pub const SECRET_PARAMETER_WORDS: [&str; 5] = ["pass", "pwd", "secret", "token", "key"];

/// `text` with every secret it holds as a URL replaced by [`MASK`]: the password of its
/// user-info, the values of query parameters named like secrets ([`SECRET_PARAMETER_WORDS`]),
/// and, for a Redis URL whose user-info has no `:` (`redis://hunter2@host`, where the user name
/// slot is often given the password), the user name too. See the [module](self) for strings
/// that do not parse.
pub fn mask_url(text: &str) -> String {
    let Some(scheme) = scheme(text) else {
        return mask_schemeless(text);
    };
    match Url::parse(text) {
        Ok(mut url) if !url.cannot_be_a_base() => {
            if url.password().is_some() {
                let _ = url.set_password(Some(MASK));
            } else if !url.username().is_empty() && scheme.to_ascii_lowercase().starts_with("redis")
            {
                let _ = url.set_username(MASK);
            }
            if let Some(query) = url.query().map(mask_query) {
                url.set_query(Some(&query));
            }
            if let Some(fragment) = url.fragment().map(mask_query) {
                url.set_fragment(Some(&fragment));
            }
            url.to_string()
        }
        _ => mask_unparsed(text, scheme.len()),
    }
}

/// The secrets `url` holds, as [`mask_url`] finds them: its password (as written and
/// percent-decoded), the values of its secret-named query parameters, a Redis URL's bare user
/// name, or, for a string that begins like a URL but does not parse, everything before its last
/// `@` and the part of that after the first `:`. Empty for a string without a scheme.
pub fn secrets_of(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut add = |secret: &str| {
        if !secret.is_empty() && !found.iter().any(|f| f == secret) {
            found.push(secret.to_owned());
        }
        let decoded = url::form_urlencoded::parse(secret.as_bytes())
            .map(|(key, _)| key.into_owned())
            .collect::<String>();
        if !decoded.is_empty() && !found.contains(&decoded) {
            found.push(decoded);
        }
    };
    let Some(scheme) = scheme(url) else {
        if !is_sqlite_path(url) {
            let secrets = libpq_secrets(url);
            let userinfo = schemeless_userinfo(url).filter(|_| secrets.is_empty());
            for (_, value) in secrets {
                add(value);
            }
            if let Some((userinfo, _)) = userinfo {
                add(userinfo);
                if let Some((_, password)) = userinfo.split_once(':') {
                    add(password);
                }
            }
        }
        return found;
    };
    let query = match Url::parse(url) {
        Ok(parsed) if !parsed.cannot_be_a_base() => {
            if let Some(password) = parsed.password() {
                add(password);
            } else if !parsed.username().is_empty()
                && scheme.to_ascii_lowercase().starts_with("redis")
            {
                add(parsed.username());
            }
            parsed.query().map(str::to_owned)
        }
        _ => {
            let rest = &url[scheme.len() + 1..];
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            if let Some((userinfo, _)) = rest.rsplit_once('@') {
                add(userinfo);
                if let Some((_, password)) = userinfo.split_once(':') {
                    add(password);
                }
            }
            rest.split_once('?').map(|(_, query)| query.to_owned())
        }
    };
    for pair in query.iter().flat_map(|q| q.split('&')) {
        if let Some((name, value)) = pair.split_once('=')
            && is_secret_name(name)
        {
            add(value);
        }
    }
    found
}

/// `text` (an error message, a log line) with every secret of `url` ([`secrets_of`]) that it
/// holds replaced by [`MASK`], the longest first. What a client library's message repeats of a
/// URL is masked even where it was not printed through [`mask_url`]. Secrets shorter than four
/// characters are left: masking them would mask every word that holds them.
pub fn scrub(text: &str, url: &str) -> String {
    let mut secrets = secrets_of(url);
    secrets.retain(|s| s.chars().count() >= 4);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.replace(url, &mask_url(url));
    for secret in secrets {
        out = out.replace(&secret, MASK);
    }
    out
}

/// A URL that may hold a password: its `Debug` and `Display` print it through [`mask_url`];
/// [`expose`](Self::expose) gives the URL itself, for the client library that connects.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Keeps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL as given, secrets included: only for the code that connects.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL masked ([`mask_url`]).
    pub fn masked(&self) -> String {
        mask_url(&self.0)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.masked(), f)
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

/// The endings that make a string without a scheme an SQLite file path.
const SQLITE_ENDINGS: [&str; 3] = [".db", ".sqlite", ".sqlite3"];

/// Whether `text`, which has no scheme of a backend, says that it is an SQLite file: it starts
/// with `/`, `./` or `../` (on Windows also `.\`, `..\`, `\\` or a drive, `C:\`), or ends with
/// `.db`, `.sqlite` or `.sqlite3` (any case); or it is `:memory:`, SQLite's own name for a
/// database in memory.
pub(crate) fn is_sqlite_path(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let drive = bytes.len() > 2
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && matches!(bytes[2], b'\\' | b'/');
    text == ":memory:"
        || drive
        || ["/", "./", "../", ".\\", "..\\", "\\\\"]
            .iter()
            .any(|start| text.starts_with(start))
        || SQLITE_ENDINGS.iter().any(|end| lower.ends_with(end))
}

/// The scheme of `text` (`postgres` of `postgres://…` or of `postgres:…`), if it starts with
/// one: a letter, then letters, digits, `+`, `-` or `.`, then `:`. A Windows drive letter
/// (`C:\…`) is a path, not a scheme.
pub(crate) fn scheme(text: &str) -> Option<&str> {
    let end = text.find(':')?;
    let candidate = &text[..end];
    let mut chars = candidate.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && candidate.len() > 1;
    valid.then_some(candidate)
}

/// A string without a scheme, masked as the [module](self) says: a file path as it is, a
/// libpq `key=value` string's secret values, anything else's user-info before its last `@`.
fn mask_schemeless(text: &str) -> String {
    if is_sqlite_path(text) {
        return text.to_owned();
    }
    let secrets = libpq_secrets(text);
    let mut out = text.to_owned();
    if secrets.is_empty()
        && let Some((userinfo, at)) = schemeless_userinfo(text)
    {
        out.replace_range(at - userinfo.len()..at, MASK);
    }
    // From the last value back, so the earlier ranges stay where they are.
    for (range, _) in secrets.into_iter().rev() {
        out.replace_range(range, MASK);
    }
    out
}

/// The user-info of a string without a scheme that has an `@`: what stands between its first
/// `//` (or its start) and its last `@`, and where that `@` is.
fn schemeless_userinfo(text: &str) -> Option<(&str, usize)> {
    let at = text.rfind('@')?;
    let start = text[..at].find("//").map_or(0, |i| i + 2);
    let userinfo = &text[start..at];
    (!userinfo.is_empty()).then_some((userinfo, at))
}

/// Whether `text` begins as a libpq `key=value` connection string does: a word of letters,
/// digits and `_`, then `=` (spaces around it allowed).
pub(crate) fn libpq_pair(text: &str) -> bool {
    let text = text.trim_start();
    let key_len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    key_len > 0 && text[key_len..].trim_start().starts_with('=')
}

/// The values of the secret-named keys of a libpq `key=value` connection string
/// (`host=db password='a b' dbname=x`; spaces around `=` allowed, a value quoted with `'` and
/// `\` escaping as libpq reads it), each with its byte range in `text`, the quotes included.
/// A quoted value left open runs to the end.
pub(crate) fn libpq_secrets(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    let skip_spaces = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    while i < bytes.len() {
        i = skip_spaces(i);
        let key_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'=' {
            i += 1;
        }
        let key = &text[key_start..i];
        let after_key = skip_spaces(i);
        if after_key >= bytes.len() || bytes[after_key] != b'=' {
            // A word without `=`: no key=value pair here.
            i = after_key.max(i + 1);
            continue;
        }
        let value_start = skip_spaces(after_key + 1);
        let mut end = value_start;
        let (inner_start, inner_end);
        if bytes.get(value_start) == Some(&b'\'') {
            end += 1;
            while end < bytes.len() && bytes[end] != b'\'' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            end = end.min(bytes.len());
            inner_start = value_start + 1;
            inner_end = end;
            if end < bytes.len() {
                end += 1;
            }
        } else {
            while end < bytes.len() && !bytes[end].is_ascii_whitespace() {
                end += 1;
            }
            (inner_start, inner_end) = (value_start, end);
        }
        if !key.is_empty() && is_secret_name(key) && inner_end > inner_start {
            found.push((value_start..end, &text[inner_start..inner_end]));
        }
        i = end.max(i + 1);
    }
    found
}

/// A query (or fragment) with the values of secret-named parameters masked; the other
/// parameters exactly as they were.
fn mask_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_name(name) => format!("{name}={MASK}"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Whether a parameter named `name` (percent-encoded as it stands in a URL) holds a secret.
fn is_secret_name(name: &str) -> bool {
    let decoded: String = url::form_urlencoded::parse(name.as_bytes())
        .map(|(key, _)| key.into_owned())
        .collect();
    let decoded = decoded.to_ascii_lowercase();
    SECRET_PARAMETER_WORDS
        .iter()
        .any(|word| decoded.contains(word))
}

/// A string that starts with a scheme (`scheme_len` bytes) but is no URL with an authority:
/// everything between the scheme and the last `@` is masked, and the query after it.
fn mask_unparsed(text: &str, scheme_len: usize) -> String {
    let (head, rest) = text.split_at(scheme_len + 1);
    let slashes = if rest.starts_with("//") { "//" } else { "" };
    let rest = &rest[slashes.len()..];
    let rest = match rest.rfind('@') {
        Some(at) => format!("{MASK}{}", &rest[at..]),
        None => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((before, query)) => format!("{before}?{}", mask_query(query)),
        None => rest,
    };
    format!("{head}{slashes}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "hunter2";

    /// Every form of URL the backends take, with the secret somewhere in it: the masked text
    /// never holds it, and keeps what locates the server.
    #[test]
    fn no_form_of_url_keeps_its_secret() {
        let cases = [
            (
                "postgres://app:hunter2@db:5432/app",
                "postgres://app:***@db:5432/app",
            ),
            (
                "postgresql://app:hunter2@db/app",
                "postgresql://app:***@db/app",
            ),
            (
                "postgres://app:hun/ter2@db:5432/app",
                "postgres://***@db:5432/app",
            ),
            ("postgres://app:hunter2/@db/app", "postgres://***@db/app"),
            (
                "postgres://app:hun%2Fter2@db/app",
                "postgres://app:***@db/app",
            ),
            (
                "postgres://app:hunter2@db/app?sslmode=require",
                "postgres://app:***@db/app?sslmode=require",
            ),
            (
                "postgres://db/app?user=app&password=hunter2",
                "postgres://db/app?user=app&password=***",
            ),
            (
                "postgres://db/app?PassWord=hunter2&x=1",
                "postgres://db/app?PassWord=***&x=1",
            ),
            (
                "postgres://db/app?sslkey=hunter2",
                "postgres://db/app?sslkey=***",
            ),
            (
                "postgres://db/app?auth_token=hunter2#x",
                "postgres://db/app?auth_token=***#x",
            ),
            ("postgres:app:hunter2@db", "postgres:***@db"),
            (
                "postgres:app:hunter2@db/x?password=hunter2",
                "postgres:***@db/x?password=***",
            ),
            (
                "mysql://root:hunter2@127.0.0.1:3306/test",
                "mysql://root:***@127.0.0.1:3306/test",
            ),
            (
                "mariadb://root:hun/ter2@127.0.0.1:3306/test",
                "mariadb://***@127.0.0.1:3306/test",
            ),
            (
                "mysql://root:hunter2@h:notaport/test",
                "mysql://***@h:notaport/test",
            ),
            ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
            ("rediss://app:hunter2@h/1", "rediss://app:***@h/1"),
            ("redis://hunter2@h", "redis://***@h"),
            ("redis://:hun/ter2@h:6379", "redis://***@h:6379"),
            (
                "redis://h:6379/0?password=hunter2",
                "redis://h:6379/0?password=***",
            ),
            (
                "sqlite:///srv/x.db?mode=rwc&key=hunter2",
                "sqlite:///srv/x.db?mode=rwc&key=***",
            ),
            ("sqlite:x.db?secret=hunter2", "sqlite:x.db?secret=***"),
            (
                "redis+unix:///run/redis.sock?pass=hunter2",
                "redis+unix:///run/redis.sock?pass=***",
            ),
            ("postgres://db/app?pwd=hunter2", "postgres://db/app?pwd=***"),
            (
                "host=127.0.0.1 user=app password=hunter2 dbname=db",
                "host=127.0.0.1 user=app password=*** dbname=db",
            ),
            (
                "host=db password = 'hun ter2' sslpassword=hunter2",
                "host=db password = *** sslpassword=***",
            ),
            ("password='it\\'s hunter2' host=db", "password=*** host=db"),
            ("password='hunter2", "password=***"),
            ("postgresql//app:hunter2@db/app", "postgresql//***@db/app"),
            ("postgresql//app:hun/ter2@db/app", "postgresql//***@db/app"),
            ("app:hunter2@db", "app:***@db"),
        ];
        for (url, masked) in cases {
            let got = mask_url(url);
            assert!(
                !got.contains(SECRET) && !got.contains("ter2"),
                "{url} -> {got}"
            );
            assert_eq!(got, masked, "{url}");
            let secret = SecretUrl::new(url);
            assert_eq!(secret.to_string(), masked);
            assert_eq!(format!("{secret:?}"), format!("{masked:?}"));
            assert_eq!(secret.expose(), url);
        }
    }

    #[test]
    fn scrub_removes_what_a_message_repeats_of_a_url() {
        for (url, secret) in [
            ("postgres://app:hunter2@db/app", "hunter2"),
            ("postgres://app:hun/ter2@db/app", "hun/ter2"),
            ("postgres:app:hunter2@db", "hunter2"),
            ("mysql://db/app?password=hunter2", "hunter2"),
            ("redis://hunter2@h", "hunter2"),
            ("postgres://app:hunter%32@db/app", "hunter2"),
            ("host=db password=hunter2", "hunter2"),
            ("host=db password='hunter2 x'", "hunter2 x"),
            ("postgresql//app:hunter2@db", "hunter2"),
        ] {
            let message =
                format!("cannot connect to {url}: the server said {secret} is wrong ({url})");
            let got = scrub(&message, url);
            assert!(!got.contains(secret), "{url}: {got}");
            assert!(got.contains("cannot connect to"), "{got}");
        }
        assert_eq!(scrub("user abc", "postgres://u:abc@h/d"), "user abc");
        assert_eq!(scrub("no url here", "/srv/x.db"), "no url here");
    }

    #[test]
    fn what_holds_no_secret_stays_as_it_is() {
        for text in [
            "postgres://postgres@127.0.0.1:5432/test",
            "redis://127.0.0.1:6379",
            "/srv/locks.db",
            "locks.db",
            "./a@b/locks.db",
            "C:\\data\\locks.db",
            "sqlite:locks.db?mode=rwc",
            "/srv/u:p@x/locks",
            "host=db user=app dbname=app",
        ] {
            assert_eq!(mask_url(text), text);
        }
    }

    #[test]
    fn schemes_are_read_as_rfc_3986_writes_them() {
        assert_eq!(scheme("postgres://x"), Some("postgres"));
        assert_eq!(scheme("postgres:x"), Some("postgres"));
        assert_eq!(scheme("C:\\x"), None);
        assert_eq!(scheme("/a:b"), None);
        assert_eq!(scheme("x.db"), None);
    }
}
