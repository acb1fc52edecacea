//! `shedlock unlock NAME`: the emergency release, guarded by the fencing token that was shown.

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};

use shedlock::RunStore;
use shedlock::operator::Release;

use crate::db::{Steered, place};
use crate::failure::Failure;
use crate::jobs::{actor, desk, report};
use crate::output::{escape, print, remaining, time};

pub(crate) async fn unlock(
    provider: &dyn Steered,
    runs: Option<&dyn RunStore>,
    name: &str,
    yes: bool,
    note: Option<&str>,
) -> Result<(), Failure> {
    let place = place(provider);
    let Some(state) = provider.lock_state(name).await? else {
        return Err(Failure::NoSuchLock {
            name: name.to_owned(),
            place,
        });
    };
    let token = state.fencing_token;
    let mut shown = format!("lock {name:?} {place}:\n");
    for (label, value) in [
        ("locked_by", state.locked_by.clone()),
        ("locked_at", time(state.locked_at)),
        ("locked_until", time(state.locked_until)),
        ("remaining", remaining(&state)),
        ("fencing_token", token.to_string()),
        (
            "last_tick",
            state.last_tick.map_or_else(|| "-".to_owned(), time),
        ),
    ] {
        let _ = writeln!(shown, "  {label:<14}{value}");
    }
    print(&shown);
    if !state.is_held() {
        print(&format!(
            "lock {name:?} is already free (it expired at {}); nothing to do\n",
            time(state.locked_until)
        ));
        return Ok(());
    }
    if !yes && !confirm(name, &state.locked_by, token).await {
        return Err(Failure::NotDone(format!(
            "not released: lock {name:?} is still held by {} (token {token})",
            state.locked_by
        )));
    }
    let released = desk(provider, runs)
        .release(name, token, &actor(), note)
        .await?;
    report(&released, runs);
    if !matches!(released.value, Release::Released { .. }) {
        return Err(Failure::NotDone(format!(
            "not released: lock {name:?} changed hands or expired since it was read (token {token} no longer holds it); \
             run `shedlock unlock {name}` again to see who holds it now"
        )));
    }
    let tick = match state.last_tick {
        Some(tick) => format!(
            "the last tick stays {}: that tick does not run again",
            time(tick)
        ),
        None => "no tick was claimed through it".to_owned(),
    };
    print(&format!(
        "released lock {name:?} (held by {holder}, token {token}).\n\
         - the fencing token stays {token}: the next holder gets a higher one\n\
         - {tick}\n\
         - a job still running under token {token} stops at its next keep-alive renewal; \
         without keep-alive it runs on unguarded, and its fencing token {token} is now stale\n",
        holder = state.locked_by
    ));
    Ok(())
}

/// Asks on stderr, reads a line from stdin: only `y` or `yes` is a yes; end of input is a no.
async fn confirm(name: &str, holder: &str, token: i64) -> bool {
    use tokio::io::AsyncBufReadExt;
    {
        let mut stderr = std::io::stderr().lock();
        let prompt = format!("Release lock {name:?} held by {holder} (token {token})? [y/N] ");
        let _ = write!(stderr, "{}", escape(&prompt, false));
        let _ = stderr.flush();
    }
    let mut answer = String::new();
    let read = tokio::io::BufReader::new(tokio::io::stdin())
        .read_line(&mut answer)
        .await;
    // A terminal echoes the operator's Enter; piped input and end of input end the line here.
    if !matches!(read, Ok(n) if n > 0 && std::io::stdin().is_terminal()) {
        let _ = writeln!(std::io::stderr());
    }
    match read {
        Ok(0) | Err(_) => false,
        Ok(_) => matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
    }
}
