//! What the dashboard keeps of its browsers, in memory: the signed-in sessions with their
//! lifetime ([`Sessions`]), the wrong tokens per client address and in all ([`Throttle`]), and
//! the messages an action leaves for the page it returns to ([`Flashes`]).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::identity::random_token;

/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 10_000;

/// The signed-in browsers' sessions: each lives at most its lifetime from its sign-in, and
/// ends sooner when unused for its idle time.
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Session>>,
    lifetime: Duration,
    idle: Duration,
}

struct Session {
    opened: Instant,
    used: Instant,
}

impl Sessions {
    pub(crate) fn new(lifetime: Duration, idle: Duration) -> Self {
        Sessions {
            open: Mutex::new(HashMap::new()),
            lifetime,
            idle,
        }
    }

    /// How long a session lives at most (its cookie's `Max-Age`).
    pub(crate) fn lifetime(&self) -> Duration {
        self.lifetime
    }

    fn alive(&self, session: &Session, now: Instant) -> bool {
        now.duration_since(session.opened) < self.lifetime
            && now.duration_since(session.used) < self.idle
    }

    /// A new session; its id (128 random bits).
    pub(crate) fn open(&self) -> String {
        let id = random_token();
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, s| self.alive(s, now));
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, s)| s.opened)
                .map(|(id, _)| id.clone())
        {
            open.remove(&oldest);
        }
        open.insert(
            id.clone(),
            Session {
                opened: now,
                used: now,
            },
        );
        id
    }

    /// Whether `id` is a live session; if so, it was used now.
    pub(crate) fn touch(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        match open.get_mut(id) {
            Some(session) if self.alive(session, now) => {
                session.used = now;
                true
            }
            Some(_) => {
                open.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends session `id` (a sign-out).
    pub(crate) fn close(&self, id: &str) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.remove(id);
    }
}

/// Wrong tokens from one client address before it must wait.
pub(crate) const WRONG_PER_CLIENT: u32 = 10;
/// Wrong tokens from all addresses together before every sign-in must wait.
pub(crate) const WRONG_IN_ALL: u32 = 100;
/// The first wait; each wrong token after it doubles the next, up to [`LONGEST_WAIT`].
pub(crate) const FIRST_WAIT: Duration = Duration::from_secs(30);
/// The longest wait.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(15 * 60);
/// Wrong tokens are forgotten after this long without one.
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Client addresses remembered at most.
const MAX_CLIENTS: usize = 10_000;

/// The wrong tokens of a client address, or of all.
#[derive(Clone, Copy)]
struct Strikes {
    wrong: u32,
    last: Instant,
    until: Option<Instant>,
}

impl Strikes {
    fn new(now: Instant) -> Self {
        Strikes {
            wrong: 0,
            last: now,
            until: None,
        }
    }

    fn wait(&self, now: Instant) -> Option<Duration> {
        self.until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    fn fail(&mut self, now: Instant, limit: u32) {
        if now.duration_since(self.last) >= FORGET_AFTER {
            *self = Strikes::new(now);
        }
        self.wrong += 1;
        self.last = now;
        if self.wrong >= limit {
            let doublings = (self.wrong - limit).min(16);
            let wait = FIRST_WAIT.saturating_mul(1 << doublings).min(LONGEST_WAIT);
            self.until = Some(now + wait);
        }
    }
}

/// Sign-in attempts slowed down: after [`WRONG_PER_CLIENT`] wrong tokens from an address (or
/// [`WRONG_IN_ALL`] from all), every attempt from it (from all) is refused, the right token
/// too, for [`FIRST_WAIT`], doubling with each wrong token after, up to [`LONGEST_WAIT`].
pub(crate) struct Throttle(Mutex<Strikeouts>);

/// The wrong tokens per client address (`None`: unknown), and in all.
#[derive(Default)]
struct Strikeouts {
    clients: HashMap<Option<IpAddr>, Strikes>,
    all: Option<Strikes>,
}

impl Throttle {
    pub(crate) fn new() -> Self {
        Throttle(Mutex::new(Strikeouts::default()))
    }

    /// How long `client` must wait before its next attempt, if it must.
    pub(crate) fn wait(&self, client: Option<IpAddr>) -> Option<Duration> {
        let now = Instant::now();
        let state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let own = state.clients.get(&client).and_then(|s| s.wait(now));
        let all = state.all.and_then(|s| s.wait(now));
        own.max(all)
    }

    /// A wrong token from `client`.
    pub(crate) fn failed(&self, client: Option<IpAddr>) {
        let now = Instant::now();
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Strikeouts { clients, all } = &mut *state;
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            clients.retain(|_, s| now.duration_since(s.last) < FORGET_AFTER);
            if clients.len() >= MAX_CLIENTS
                && let Some(oldest) = clients.iter().min_by_key(|(_, s)| s.last).map(|(k, _)| *k)
            {
                clients.remove(&oldest);
            }
        }
        clients
            .entry(client)
            .or_insert_with(|| Strikes::new(now))
            .fail(now, WRONG_PER_CLIENT);
        all.get_or_insert_with(|| Strikes::new(now))
            .fail(now, WRONG_IN_ALL);
    }

    /// The right token from `client`: its own wrong ones are forgotten.
    pub(crate) fn succeeded(&self, client: Option<IpAddr>) {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        state.clients.remove(&client);
    }
}

/// How long an action's message waits for its page.
const FLASH_TTL: Duration = Duration::from_secs(600);
/// Messages kept at most; the oldest goes first.
const MAX_FLASHES: usize = 1_000;

/// A message an action left for the page it returns to.
#[derive(Debug, Clone)]
pub(crate) struct Flash {
    pub(crate) failed: bool,
    pub(crate) message: String,
}

/// The messages of the server's own redirects, each under a random id (`?flash=<id>`): a link
/// cannot carry a message of its own.
pub(crate) struct Flashes(Mutex<VecDeque<(String, Instant, Flash)>>);

impl Flashes {
    pub(crate) fn new() -> Self {
        Flashes(Mutex::new(VecDeque::new()))
    }

    /// Keeps `flash`; its id.
    pub(crate) fn put(&self, flash: Flash) -> String {
        let id = random_token();
        let now = Instant::now();
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        while kept
            .front()
            .is_some_and(|(_, at, _)| now.duration_since(*at) >= FLASH_TTL)
            || kept.len() >= MAX_FLASHES
        {
            kept.pop_front();
        }
        kept.push_back((id.clone(), now, flash));
        id
    }

    /// The message under `id`, if the server left one there lately.
    pub(crate) fn get(&self, id: &str) -> Option<Flash> {
        let now = Instant::now();
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter()
            .find(|(kept_id, at, _)| {
                !id.is_empty() && kept_id == id && now.duration_since(*at) < FLASH_TTL
            })
            .map(|(_, _, flash)| flash.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_tokens_make_an_address_wait_longer_each_time() {
        let now = Instant::now();
        let mut strikes = Strikes::new(now);
        for _ in 0..WRONG_PER_CLIENT - 1 {
            strikes.fail(now, WRONG_PER_CLIENT);
        }
        assert_eq!(strikes.wait(now), None);
        strikes.fail(now, WRONG_PER_CLIENT);
        assert_eq!(strikes.wait(now), Some(FIRST_WAIT));
        strikes.fail(now, WRONG_PER_CLIENT);
        assert_eq!(strikes.wait(now), Some(FIRST_WAIT * 2));
        for _ in 0..40 {
            strikes.fail(now, WRONG_PER_CLIENT);
        }
        assert_eq!(strikes.wait(now), Some(LONGEST_WAIT));
    }

    #[test]
    fn sessions_end_when_idle_and_when_closed() {
        let sessions = Sessions::new(Duration::from_secs(60), Duration::ZERO);
        let id = sessions.open();
        assert!(!sessions.touch(&id), "idle for zero: ended at once");
        let sessions = Sessions::new(Duration::from_secs(60), Duration::from_secs(60));
        let id = sessions.open();
        assert!(sessions.touch(&id));
        sessions.close(&id);
        assert!(!sessions.touch(&id));
        assert!(!sessions.touch("not-a-session"));
    }

    #[test]
    fn flashes_are_found_by_their_id_only() {
        let flashes = Flashes::new();
        let id = flashes.put(Flash {
            failed: true,
            message: "refused".into(),
        });
        assert_eq!(id.len(), 32);
        assert!(flashes.get(&id).is_some_and(|f| f.failed));
        assert!(flashes.get("forged").is_none());
        assert!(flashes.get("").is_none());
    }
}
