//! What the two HTTP clients (`embed.rs`, `gitlab.rs`) share: how an error is described.

/// Error messages from a server are cut to this many characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 500;

/// An error and its causes, `outer: inner: innermost` (reqwest's own message omits the cause).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

/// `text`, cut to [`MAX_MESSAGE_CHARS`] characters.
pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
