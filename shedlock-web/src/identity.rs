//! Who is asking: who may see the dashboard ([`Auth`]), who did an action ([`Operator`]), how
//! a request was let in and who it is ([`Visitor`]), and the secrets' two helpers (a random
//! token, a comparison in constant time). What the layers (`auth.rs`, `csrf.rs`, `front.rs`),
//! the sessions and the pages share, below all of them.

use std::fmt;
use std::sync::Arc;

/// The shortest bearer token [`Auth::try_bearer`] takes, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;

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
    /// A bearer token (see [`Auth::Bearer`]), taken as it is: prefer [`Auth::try_bearer`], which
    /// refuses a token too short to withstand guessing.
    pub fn bearer(token: impl Into<String>) -> Self {
        Auth::Bearer(Arc::from(token.into()))
    }

    /// A bearer token of at least [`MIN_TOKEN_CHARS`] characters (surrounding whitespace
    /// trimmed), or why not (the error never shows the token).
    pub fn try_bearer(token: impl Into<String>) -> Result<Self, TokenTooShort> {
        let token = token.into();
        let token = token.trim();
        let chars = token.chars().count();
        if chars < MIN_TOKEN_CHARS {
            return Err(TokenTooShort { chars });
        }
        Ok(Auth::bearer(token))
    }
}

/// A bearer token shorter than [`MIN_TOKEN_CHARS`]: what [`Auth::try_bearer`] refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenTooShort {
    /// How many characters the token has.
    pub chars: usize,
}

impl fmt::Display for TokenTooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chars = self.chars;
        let unit = if chars == 1 {
            "character"
        } else {
            "characters"
        };
        write!(
            f,
            "the dashboard's token is {chars} {unit} long: give at least {MIN_TOKEN_CHARS} (a \
             long random secret, such as the output of `openssl rand -hex 32`)"
        )
    }
}

impl std::error::Error for TokenTooShort {}

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

/// How a request was let in: by a header a browser never sends on its own (no CSRF token
/// needed), or ambiently (a cookie, or no authentication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    Header,
    Ambient,
}

/// Who a request is, as the [`check`](crate::auth::check) layer let it in.
#[derive(Debug, Clone)]
pub(crate) struct Visitor {
    /// Who acts, as recorded.
    pub(crate) who: String,
    pub(crate) credential: Credential,
    /// The CSRF token this browser's forms carry.
    pub(crate) csrf: String,
    /// The signed-in session's id (under a bearer token), which a sign-out ends.
    pub(crate) session: Option<String>,
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
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
