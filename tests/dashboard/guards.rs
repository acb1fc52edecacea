//! What guards the dashboard, by crafted requests through its router (SQLite: none of it
//! depends on the store): the CSRF token bound to the browser and the origin checks, the Host
//! check against DNS rebinding, sessions (lifetime, sign-out, `Secure`), the sign-in throttle,
//! the security headers, the API's bounds (jobs paged, the library's own locks refused,
//! messages only from the server's own redirects), names a path cannot carry and names with
//! hidden characters, and where an action is recorded from. The same attacks from a real
//! browser on another origin: `tests/dashboard_browser.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::FLEET_SCHEDULE;
use shedlock::schedules::{NewSchedule, ScheduleStore};
use shedlock::{LockAdmin, LockConfiguration};
use shedlock_suite::{SqlTestDb, TestDb};
use shedlock_web::{Auth, Options};

use crate::cases::{Answer, Client, ORIGIN};

const TOKEN: &str = "a-long-random-dashboard-token";

async fn sqlite() -> shedlock_suite::Sqlite {
    shedlock_suite::Sqlite::setup()
        .await
        .expect("SQLite needs no server")
}

/// Whether the whole fleet is paused in the store.
async fn fleet_paused(provider: &shedlock::SqliteLockProvider) -> bool {
    provider
        .schedule(FLEET_SCHEDULE)
        .await
        .unwrap()
        .is_some_and(|s| s.paused)
}

/// A form's `POST` with exactly the headers given (no Origin unless given) and `body`.
async fn raw_form(client: &mut Client, path: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
    client
        .send(
            "POST",
            path,
            Some("application/x-www-form-urlencoded"),
            body.to_owned(),
            headers,
        )
        .await
}

/// The attack of issue 46 without authentication: a page on another port of the same host sets
/// a `shedlock_csrf` cookie and submits a form repeating it. And what else a forged request
/// may try: another browser's token, a cookie planted with a token of its own, no Origin, a
/// sibling origin by `Sec-Fetch-Site`. Only the browser's own token from the dashboard's own
/// origin pauses the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_csrf_is_bound_to_the_browser_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let mut victim = Client::new(provider.clone().into(), Options::new(Auth::None));
    victim.get("/shedlock").await;
    let own = victim.csrf.clone();
    let browser = victim.cookie("shedlock_browser").expect("an id cookie");
    assert_ne!(own, browser, "the token is not the cookie");

    // The planted cookie and a form repeating it, from http://127.0.0.1:18090.
    let mut attacker = victim.another();
    attacker
        .cookies
        .push(("shedlock_csrf".into(), "planted".into()));
    attacker
        .cookies
        .push(("shedlock_browser".into(), "planted".into()));
    let planted = raw_form(
        &mut attacker,
        "/shedlock/act/fleet/pause",
        "csrf=planted",
        &[
            ("origin", "http://127.0.0.1:18090"),
            ("sec-fetch-site", "same-site"),
        ],
    )
    .await;
    assert_eq!(planted.status, StatusCode::FORBIDDEN, "{}", planted.body);
    assert!(planted.body.contains("another origin"), "{}", planted.body);
    // The same from a page that claims the dashboard's own origin (a sibling that strips the
    // headers): the planted id's token is not the planted value.
    let same_origin = raw_form(
        &mut attacker,
        "/shedlock/act/fleet/pause",
        "csrf=planted",
        &[("origin", ORIGIN)],
    )
    .await;
    assert_eq!(same_origin.status, StatusCode::FORBIDDEN);
    assert!(
        same_origin
            .body
            .contains("the CSRF token is not this browser"),
        "{}",
        same_origin.body
    );
    // The victim's token with the attacker's cookie, and the other way round.
    let stolen = raw_form(
        &mut attacker,
        "/shedlock/act/fleet/pause",
        &format!("csrf={own}"),
        &[("origin", ORIGIN)],
    )
    .await;
    assert_eq!(stolen.status, StatusCode::FORBIDDEN);
    let mut other = victim.another();
    other.get("/shedlock").await;
    let crossed = raw_form(
        &mut victim,
        "/shedlock/act/fleet/pause",
        &format!("csrf={}", other.csrf),
        &[("origin", ORIGIN)],
    )
    .await;
    assert_eq!(crossed.status, StatusCode::FORBIDDEN);
    // Neither Origin nor Referer: refused although the token is right.
    let bare = raw_form(
        &mut victim,
        "/shedlock/act/fleet/pause",
        &format!("csrf={own}"),
        &[],
    )
    .await;
    assert_eq!(bare.status, StatusCode::FORBIDDEN);
    assert!(
        bare.body.contains("neither Origin nor Referer"),
        "{}",
        bare.body
    );
    // A Referer from another port, and a null Origin.
    for (name, value) in [
        ("referer", "http://localhost:18090/attack.html"),
        ("origin", "null"),
    ] {
        let refused = raw_form(
            &mut victim,
            "/shedlock/act/fleet/pause",
            &format!("csrf={own}"),
            &[(name, value)],
        )
        .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{name}: {value}");
    }
    // An API request of a script in another origin, with the token it cannot read anyway.
    let api = victim
        .send(
            "POST",
            "/shedlock/api/v1/fleet/pause",
            None,
            String::new(),
            &[
                ("x-shedlock-csrf", &own),
                ("origin", "http://localhost:18090"),
            ],
        )
        .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN, "{}", api.body);
    assert!(
        api.json()["error"]
            .as_str()
            .unwrap()
            .contains("not from this dashboard")
    );
    assert!(
        !fleet_paused(&provider).await,
        "nothing forged paused the fleet"
    );

    // The browser's own form, from its own page: by Origin, or by Referer alone.
    let by_referer = raw_form(
        &mut victim,
        "/shedlock/act/fleet/pause",
        &format!("csrf={own}"),
        &[("referer", "http://localhost/shedlock")],
    )
    .await;
    assert_eq!(
        by_referer.status,
        StatusCode::SEE_OTHER,
        "{}",
        by_referer.body
    );
    assert!(fleet_paused(&provider).await);
    let resumed = victim
        .post_form("/shedlock/act/fleet/resume", &[], None)
        .await;
    assert_eq!(resumed.status, StatusCode::SEE_OTHER);
    assert!(!fleet_paused(&provider).await);
    db.teardown().await;
}

/// Under a bearer token: the header alone needs no CSRF token (an API client), in any case of
/// its scheme; the header with a session cookie (a proxy that adds it to a browser's every
/// request) is checked as a browser's; a signed-in browser's token is its session's, and dies
/// with the session at sign-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_bearer_and_sessions_keep_to_their_rules_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let options = Options::new(Auth::try_bearer(TOKEN).unwrap());
    let mut api = Client::new(provider.clone().into(), options.clone());
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let answer = api
            .send(
                "POST",
                "/shedlock/api/v1/fleet/pause",
                None,
                String::new(),
                &[("authorization", &format!("{scheme} {TOKEN}"))],
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{scheme}: {}", answer.body);
        api.cookies.clear();
    }
    assert!(fleet_paused(&provider).await);
    // An API client's POST from a browser page of another origin is refused all the same.
    let cross = api
        .send(
            "POST",
            "/shedlock/api/v1/fleet/resume",
            None,
            String::new(),
            &[
                ("authorization", &format!("Bearer {TOKEN}")),
                ("origin", "http://localhost:18090"),
            ],
        )
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN, "{}", cross.body);

    // A browser signs in; its session cookie's attributes.
    let mut browser = api.another();
    let signed = browser.sign_in(TOKEN, &[("origin", ORIGIN)]).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER);
    let cookie = signed.headers["set-cookie"].to_str().unwrap().to_owned();
    for part in [
        "shedlock_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Max-Age=43200",
        "Path=/",
    ] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let session = browser.cookie("shedlock_session").unwrap();
    browser.get("/shedlock").await;
    let csrf = browser.csrf.clone();
    // The header a proxy adds, with the session cookie: a browser's request, token needed.
    let proxied = browser
        .send(
            "POST",
            "/shedlock/api/v1/fleet/resume",
            None,
            String::new(),
            &[
                ("authorization", &format!("Bearer {TOKEN}")),
                ("origin", ORIGIN),
            ],
        )
        .await;
    assert_eq!(proxied.status, StatusCode::FORBIDDEN, "{}", proxied.body);
    assert!(fleet_paused(&provider).await);
    let overview = browser.get("/shedlock").await;
    assert!(
        overview.body.contains("id=\"sign-out\""),
        "{}",
        overview.body
    );

    // Sign-out: refused without the token; with it, the session ends on the server too.
    let forged = raw_form(&mut browser, "/shedlock/logout", "", &[("origin", ORIGIN)]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_eq!(browser.get("/shedlock/jobs").await.status, StatusCode::OK);
    let out = browser
        .post_form("/shedlock/logout", &[], Some(&csrf))
        .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER, "{}", out.body);
    let location = out.location.unwrap();
    assert!(location.starts_with("/shedlock/login?flash="), "{location}");
    let cleared = out.headers["set-cookie"].to_str().unwrap();
    assert!(
        cleared.contains("shedlock_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    let login = browser.get(&location).await;
    assert!(login.body.contains("Signed out"), "{}", login.body);
    // The old cookie, sent again, is nobody's.
    browser
        .cookies
        .push(("shedlock_session".into(), session.clone()));
    let replayed = browser.get("/shedlock/jobs").await;
    assert_eq!(replayed.status, StatusCode::SEE_OTHER);
    assert_eq!(replayed.location.as_deref(), Some("/shedlock/login"));

    // A session ends after its idle time, and after its lifetime however used.
    for options in [
        options.clone().session_idle(Duration::ZERO),
        options.clone().session_lifetime(Duration::ZERO),
    ] {
        let mut short = Client::new(provider.clone().into(), options);
        short.sign_in(TOKEN, &[]).await;
        assert!(short.cookie("shedlock_session").is_some());
        let page = short.get("/shedlock/jobs").await;
        assert_eq!(page.location.as_deref(), Some("/shedlock/login"));
    }

    // Over HTTPS (said by the options, or by a trusted proxy): __Host- and Secure.
    for (options, headers) in [
        (
            options.clone().https(true),
            vec![("origin", "https://localhost")],
        ),
        (
            options.clone().trust_proxy_headers(true),
            vec![
                ("origin", "https://localhost"),
                ("x-forwarded-proto", "https"),
            ],
        ),
    ] {
        let mut secure = Client::new(provider.clone().into(), options);
        let signed = secure.sign_in(TOKEN, &headers).await;
        let cookie = signed.headers["set-cookie"].to_str().unwrap();
        assert!(
            cookie.starts_with("__Host-shedlock_session=") && cookie.contains("; Secure"),
            "{cookie}"
        );
    }
    // A proxy's header is not believed unless the options say so.
    let mut untrusted = Client::new(provider.clone().into(), options.clone());
    let signed = untrusted
        .sign_in(TOKEN, &[("x-forwarded-proto", "https")])
        .await;
    assert!(
        signed.headers["set-cookie"]
            .to_str()
            .unwrap()
            .starts_with("shedlock_session="),
        "{:?}",
        signed.headers
    );
    db.teardown().await;
}

/// Sign-in throttled: after 10 wrong tokens from one address, the next attempt from it, the
/// right token too, is refused with 429 and Retry-After (also by the bearer header), while
/// another address signs in; after 100 wrong tokens from all addresses, every address waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_sign_in_is_throttled_per_address_and_in_all_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let mut client = Client::new(
        provider.clone().into(),
        Options::new(Auth::try_bearer(TOKEN).unwrap()),
    );
    let from = |n: u8| Some(SocketAddr::from(([10, 0, 0, n], 40_000)));
    client.peer = from(1);
    for _ in 0..10 {
        let wrong = client.sign_in("guess", &[]).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    }
    let right = client.sign_in(TOKEN, &[]).await;
    assert_eq!(
        right.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        right.body
    );
    let wait: u64 = right.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&wait), "Retry-After: {wait}");
    assert!(
        right.body.contains("too many wrong tokens"),
        "{}",
        right.body
    );
    assert!(client.cookie("shedlock_session").is_none());
    let header = client
        .send(
            "GET",
            "/shedlock/api/v1/locks",
            None,
            String::new(),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await;
    assert_eq!(header.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(header.headers.contains_key("retry-after"));
    // Another address is not held up by the first one's wrong tokens.
    client.peer = from(2);
    let other = client.sign_in(TOKEN, &[]).await;
    assert_eq!(other.status, StatusCode::SEE_OTHER, "{}", other.body);
    client.cookies.clear();

    // 100 wrong tokens in all (the first address's 10, then 9 more addresses' 10 each): every
    // address waits, one that never gave a wrong token too.
    for n in 3..12 {
        client.peer = from(n);
        for _ in 0..10 {
            client.sign_in("guess", &[]).await;
        }
    }
    client.peer = from(200);
    let fresh = client.sign_in(TOKEN, &[]).await;
    assert_eq!(
        fresh.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        fresh.body
    );
    db.teardown().await;
}

/// DNS rebinding: a request for a host the dashboard does not know is answered 421, naming
/// it and how to allow it, and changes nothing; without authentication only the loopback names
/// are known; with authentication also the allowed hosts (any port, or the one given).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_answers_only_its_own_host_names_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let mut open = Client::new(provider.clone().into(), Options::new(Auth::None));
    for host in [
        "localhost:18081",
        "127.0.0.1:18081",
        "[::1]:18081",
        "LOCALHOST",
    ] {
        let page = open
            .send("GET", "/shedlock", None, String::new(), &[("host", host)])
            .await;
        assert_eq!(page.status, StatusCode::OK, "{host}");
    }
    let mut rebound = open.another();
    for (method, path) in [
        ("GET", "/shedlock"),
        ("GET", "/shedlock/api/v1/jobs"),
        ("POST", "/shedlock/api/v1/fleet/pause"),
        ("GET", "/shedlock/login"),
    ] {
        let answer = rebound
            .send(
                method,
                path,
                None,
                String::new(),
                &[
                    ("host", "attacker.example:18081"),
                    ("origin", "http://attacker.example:18081"),
                ],
            )
            .await;
        assert_eq!(
            answer.status,
            StatusCode::MISDIRECTED_REQUEST,
            "{method} {path}"
        );
        assert!(
            answer.body.contains("\\\"attacker.example:18081\\\"")
                || answer.body.contains("\"attacker.example:18081\""),
            "{}",
            answer.body
        );
        assert!(answer.body.contains("localhost"), "{}", answer.body);
        assert!(
            !answer.headers.contains_key("set-cookie"),
            "no cookie for it"
        );
    }
    assert!(!fleet_paused(&provider).await);
    // No Host at all (an empty value is not sent), or one that is no host name.
    let nameless = open
        .send("GET", "/shedlock", None, String::new(), &[("host", "")])
        .await;
    assert_eq!(nameless.status, StatusCode::MISDIRECTED_REQUEST);
    assert!(
        nameless.body.contains("no Host header"),
        "{}",
        nameless.body
    );
    let answer = open
        .send(
            "GET",
            "/shedlock",
            None,
            String::new(),
            &[("host", "not a host")],
        )
        .await;
    assert_eq!(answer.status, StatusCode::MISDIRECTED_REQUEST);

    // With a token: the allowed hosts too; the message names the option.
    let options = Options::new(Auth::try_bearer(TOKEN).unwrap())
        .allowed_hosts(["ops.example.com", "dash.example.com:8443"]);
    let mut client = Client::new(provider.clone().into(), options);
    client.bearer = Some(TOKEN.into());
    for (host, status) in [
        ("ops.example.com", StatusCode::OK),
        ("OPS.example.com:9000", StatusCode::OK),
        ("dash.example.com:8443", StatusCode::OK),
        ("dash.example.com:9000", StatusCode::MISDIRECTED_REQUEST),
        ("attacker.example", StatusCode::MISDIRECTED_REQUEST),
        ("localhost:1", StatusCode::OK),
    ] {
        let answer = client
            .send(
                "GET",
                "/shedlock/api/v1/locks",
                None,
                String::new(),
                &[("host", host)],
            )
            .await;
        assert_eq!(answer.status, status, "{host}: {}", answer.body);
        if status == StatusCode::MISDIRECTED_REQUEST {
            let error = answer.json()["error"].as_str().unwrap().to_owned();
            assert!(error.contains("--allowed-host"), "{error}");
        }
    }
    db.teardown().await;
}

/// Every answer carries the security headers (pages, the API, the assets, the sign-in page, a
/// refusal, a page not found); pages and the API are never cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_answers_carry_the_security_headers_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let mut client = Client::new(
        provider.clone().into(),
        Options::new(Auth::try_bearer(TOKEN).unwrap()),
    );
    let mut paths = vec![
        ("/shedlock/login", true),
        ("/shedlock/jobs", true),         // a redirect to the sign-in
        ("/shedlock/api/v1/locks", true), // 401
        ("/shedlock/assets/app.js", false),
        ("/shedlock/assets/style.css", false),
    ];
    let mut answers = Vec::new();
    for (path, no_store) in paths.drain(..) {
        answers.push((path.to_owned(), no_store, client.get(path).await));
    }
    client.bearer = Some(TOKEN.into());
    for path in [
        "/shedlock",
        "/shedlock/jobs",
        "/shedlock/api/v1/jobs",
        "/shedlock/nowhere",
    ] {
        answers.push((path.to_owned(), true, client.get(path).await));
    }
    let misdirected = client
        .send(
            "GET",
            "/shedlock",
            None,
            String::new(),
            &[("host", "evil.example")],
        )
        .await;
    answers.push(("(misdirected)".into(), true, misdirected));
    for (path, no_store, answer) in &answers {
        let header = |name: &str| {
            answer
                .headers
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_else(|| panic!("{path} ({}): no {name}", answer.status))
        };
        let csp = header("content-security-policy");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "same-origin", "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        if *no_store {
            assert_eq!(header("cache-control"), "no-store", "{path}");
        }
    }
    db.teardown().await;
}

/// The API's bounds: `/api/v1/jobs` pages by default (a hundred a page, `next` to follow,
/// every job once); the library's own locks are not released through the API, the form or
/// the confirmation page (the rule the locks page follows); a message comes only from the
/// server's own redirect, never from a link's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_api_and_actions_keep_their_bounds_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let schedules: Vec<NewSchedule> = (0..250)
        .map(|i| NewSchedule::job(format!("bound-{i:03}"), "h", "{}", "0 0 * * * *", None))
        .collect();
    provider.create_schedules(&schedules, "test").await.unwrap();
    let mut client = Client::new(provider.clone().into(), Options::new(Auth::None));
    let first = client.get("/shedlock/api/v1/jobs").await.json();
    assert_eq!(
        first["jobs"].as_array().unwrap().len(),
        100,
        "a page by default"
    );
    assert_eq!(
        (first["page"].as_u64(), first["pages"].as_u64()),
        (Some(1), Some(3))
    );
    let mut names = Vec::new();
    let mut page: Value = first;
    loop {
        names.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["name"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_u64() {
            Some(next) => {
                page = client
                    .get(&format!("/shedlock/api/v1/jobs?page={next}"))
                    .await
                    .json()
            }
            None => break,
        }
    }
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!((names.len(), distinct.len()), (250, 250), "every job once");

    // A fleet seat held: no button on the page, and refused through every door.
    let seat = LockConfiguration::new(
        "shedlock.fleet/main/0",
        Duration::from_secs(300),
        Duration::ZERO,
    )
    .unwrap();
    let guard = provider.lock(&seat).await.unwrap().expect("free");
    let token = guard.fencing_token();
    let locks = client.get("/shedlock/locks").await;
    assert!(
        !locks.body.contains("shedlock.fleet%2Fmain%2F0/release"),
        "{}",
        locks.body
    );
    let api = client
        .post_api(
            "/shedlock/api/v1/locks/shedlock.fleet%2Fmain%2F0/release",
            serde_json::json!({ "token": token }),
        )
        .await;
    assert_eq!(api.status, StatusCode::FORBIDDEN, "{}", api.body);
    assert!(api.body.contains("the library's own"), "{}", api.body);
    let form = client
        .post_form(
            "/shedlock/act/locks/shedlock.fleet%2Fmain%2F0/release",
            &[("token", &token.to_string())],
            None,
        )
        .await;
    let (refused, said) = client.flash_at(&form.location.unwrap()).await;
    assert!(refused && said.contains("the library"), "{said}");
    let confirm = client
        .get("/shedlock/locks/shedlock.fleet%2Fmain%2F0/release")
        .await;
    assert_eq!(confirm.status, StatusCode::FORBIDDEN);
    assert!(
        provider
            .lock_state("shedlock.fleet/main/0")
            .await
            .unwrap()
            .unwrap()
            .is_held(),
        "the seat is still held"
    );
    drop(guard);

    // A link's own message is not shown; the server's is, once it made it.
    for path in [
        "/shedlock",
        "/shedlock/jobs",
        "/shedlock/locks",
        "/shedlock/jobs/bound-001",
    ] {
        let page = client
            .get(&format!(
                "{path}?flash=Your+session+expired%3A+sign+in+at+evil.example"
            ))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(!page.body.contains("evil.example"), "{path}: {}", page.body);
        assert!(!page.body.contains("id=\"flash\""), "{path}");
    }
    let paused = client
        .post_form("/shedlock/act/jobs/bound-001/pause", &[], None)
        .await;
    let (refused, said) = client.flash_at(&paused.location.unwrap()).await;
    assert!(!refused && said.starts_with("paused"), "{said}");
    db.teardown().await;
}

/// Rows named `.` and `..` (which a browser cannot carry in a path, even percent-encoded) are
/// reached by a query parameter: their links resolve, as a browser resolves them, to their own
/// pages, and their actions reach them; a name with a bidirectional control or a zero-width
/// character is shown escaped on every page that shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_reaches_dot_names_and_shows_hidden_characters_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    let table = db.table();
    let reversed = "report\u{202e}txt.exe";
    let invisible = "pay\u{200b}roll";
    // Rows an earlier version let in (the library refuses such names where names are made).
    for name in [".", "..", reversed, invisible] {
        db.insert_expired_row(name, 7).await;
    }
    db.exec(&format!(
        "UPDATE {table} SET locked_until = CAST(unixepoch('subsec') * 1000 AS INTEGER) + 600000 \
         WHERE name = '..'"
    ))
    .await;
    let mut client = Client::new(provider.clone().into(), Options::new(Auth::None));
    let jobs = client.get("/shedlock/jobs").await;
    let base = url::Url::parse("http://localhost/shedlock/jobs").unwrap();
    for name in [".", ".."] {
        let marker = format!("data-job=\"{name}\"");
        let row = &jobs.body[jobs
            .body
            .find(&marker)
            .unwrap_or_else(|| panic!("{name}: {}", jobs.body))..];
        let href = &row[row.find("href=\"").unwrap() + 6..];
        let href = &href[..href.find('"').unwrap()];
        // As a browser resolves it (the WHATWG URL rules collapse `.` and `..` segments).
        let resolved = base.join(&href.replace("&amp;", "&")).unwrap();
        let path = &resolved[url::Position::BeforePath..];
        let page = client.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{name}: {href} -> {path}");
        assert!(
            page.body.contains(&format!("id=\"job-name\">{name}<")),
            "{name}: {href} -> {path}: {}",
            &page.body[..page.body.len().min(3000)]
        );
    }
    // The held `..`: its release, through its confirmation page, by the query route.
    let page = client.get("/shedlock/job?name=..").await;
    let release = &page.body[page
        .body
        .find("id=\"release\" href=\"")
        .expect("a release link")
        + 19..];
    let release = release[..release.find('"').unwrap()].replace("&amp;", "&");
    let confirm = client.get(&release).await;
    assert_eq!(
        confirm.status,
        StatusCode::OK,
        "{release}: {}",
        confirm.body
    );
    let action = &confirm.body[confirm.body.find("method=\"post\" action=\"").unwrap() + 22..];
    let action = action[..action.find('"').unwrap()].replace("&amp;", "&");
    assert!(action.contains("?name=.."), "{action}");
    let released = client.post_form(&action, &[("token", "7")], None).await;
    let (refused, said) = client.flash_at(&released.location.unwrap()).await;
    assert!(!refused && said.starts_with("released"), "{said}");
    assert!(!provider.lock_state("..").await.unwrap().unwrap().is_held());
    // A job action by the query route reaches the job (and goes back to its page).
    let paused = client
        .post_form("/shedlock/act/job/pause?name=.", &[], None)
        .await;
    let back = paused.location.unwrap();
    assert!(back.starts_with("/shedlock/job?name=.&flash="), "{back}");
    let (_, said) = client.flash_at(&back).await;
    assert!(
        said.contains("&quot;.&quot;"),
        "the answer is about `.`: {said}"
    );

    // Hidden characters, escaped where the pages show the names.
    let pages = [
        client.get("/shedlock/jobs").await.body,
        client.get("/shedlock/locks").await.body,
        client
            .get(&format!("/shedlock/jobs/{}", "report%E2%80%AEtxt.exe"))
            .await
            .body,
        client
            .get(&format!("/shedlock/jobs/{}", "pay%E2%80%8Broll"))
            .await
            .body,
    ];
    for (i, body) in pages.iter().enumerate() {
        assert!(
            !body.contains('\u{202e}') && !body.contains('\u{200b}'),
            "page {i} shows a hidden character as it is"
        );
    }
    assert!(pages[0].contains("report\\u{202e}txt.exe"), "{}", pages[0]);
    assert!(pages[0].contains("pay\\u{200b}roll"), "{}", pages[0]);
    assert!(pages[1].contains("report\\u{202e}txt.exe"), "{}", pages[1]);
    assert!(
        pages[2].contains("<title>report\\u{202e}txt.exe"),
        "{}",
        pages[2]
    );
    // The API keeps the name as it is (JSON escapes nothing a program would misread).
    let api = client.get("/shedlock/api/v1/jobs").await.json();
    assert!(
        api["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["name"] == reversed),
        "{api}"
    );
    db.teardown().await;
}

/// An action is recorded with who and from where: the client's address when the router is told
/// it (`serve` does), `an unknown address` when mounted without it, the proxy's
/// `X-Forwarded-For` only when trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_records_who_acted_from_where_sqlite() {
    let db = sqlite().await;
    let provider = db.provider();
    provider
        .create_schedule(
            &NewSchedule::job("audited", "h", "{}", "0 0 * * * *", None),
            "test",
        )
        .await
        .unwrap();
    let runs = <shedlock_suite::Sqlite as TestDb>::run_store(&provider).unwrap();
    for (peer, trust, forwarded, from) in [
        (Some(([192, 0, 2, 7], 5000)), false, "", "(from 192.0.2.7)"),
        (None, false, "", "(from an unknown address)"),
        (
            Some(([127, 0, 0, 1], 5000)),
            false,
            "203.0.113.9",
            "(from 127.0.0.1)",
        ),
        (
            Some(([127, 0, 0, 1], 5000)),
            true,
            "198.51.100.1, 203.0.113.9",
            "(from 203.0.113.9)",
        ),
    ] {
        let mut client = Client::new(
            provider.clone().into(),
            Options::new(Auth::None).trust_proxy_headers(trust),
        );
        client.peer = peer.map(SocketAddr::from);
        client.get("/shedlock").await;
        let csrf = client.csrf.clone();
        let answer = client
            .send(
                "POST",
                "/shedlock/api/v1/jobs/audited/pause",
                None,
                String::new(),
                &[
                    ("x-shedlock-csrf", &csrf),
                    ("origin", ORIGIN),
                    ("x-forwarded-for", forwarded),
                ],
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let rows = runs
            .runs(&RunQuery::latest(1).outcome(RunOutcome::Operator))
            .await
            .unwrap();
        let what = rows[0].error.clone().unwrap_or_default();
        assert!(what.ends_with(from), "{what:?} should end with {from:?}");
        assert_eq!(rows[0].requested_by.as_deref(), Some("web:anonymous"));
    }
    db.teardown().await;
}
