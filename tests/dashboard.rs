//! The dashboard (`shedlock-web`) on every backend, through its router nested under
//! `/shedlock` as a service mounts it: what each page and the API show of a store, the actions
//! (pause, resume, run now, reschedule, lock release) and their record, the CSRF check,
//! authentication and the read-only mode; the API's history pages by key. Then what guards it
//! (`guards`: CSRF bound to the browser, the Host check, sessions, the sign-in throttle, the
//! security headers, the API's bounds, names shown escaped) and its server under slow clients
//! (`slow_clients`). A browser drives the same pages in `tests/dashboard_browser.rs`.
#![allow(missing_docs)]

#[path = "dashboard/guards.rs"]
mod guards;
#[path = "dashboard/slow_clients.rs"]
mod slow_clients;

mod cases {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use serde_json::Value;
    use shedlock::history::{NewRun, RunOutcome, RunQuery};
    use shedlock::schedules::{NewSchedule, ScheduleChange, ScheduleStore};
    use shedlock::{LockAdmin, LockConfiguration, LockProvider};
    use shedlock_suite::TestDb;
    use shedlock_web::{Auth, Options, Source};
    use tower::ServiceExt;

    /// A browser or an API client of the router: it keeps the cookies it is given and the
    /// CSRF token of the last answer, sends `Host: localhost` (unless told another) and, with a
    /// `POST`, the `Origin` a browser sends; its requests come from `peer` (as `serve` says).
    pub(crate) struct Client {
        router: Router,
        pub(crate) cookies: Vec<(String, String)>,
        pub(crate) bearer: Option<String>,
        pub(crate) csrf: String,
        pub(crate) peer: Option<SocketAddr>,
    }

    pub(crate) struct Answer {
        pub(crate) status: StatusCode,
        pub(crate) location: Option<String>,
        pub(crate) headers: axum::http::HeaderMap,
        pub(crate) body: String,
    }

    /// The origin the test client's pages come from.
    pub(crate) const ORIGIN: &str = "http://localhost";

    impl Answer {
        pub(crate) fn json(&self) -> Value {
            serde_json::from_str(&self.body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
        }
    }

    impl Client {
        pub(crate) fn new(source: Source, options: Options) -> Self {
            let router = Router::new().nest("/shedlock", shedlock_web::router(source, options));
            Client::of(router)
        }

        /// A client of `router` as it is (mounted by the caller).
        pub(crate) fn of(router: Router) -> Self {
            Client {
                router,
                cookies: Vec::new(),
                bearer: None,
                csrf: String::new(),
                peer: Some(SocketAddr::from(([127, 0, 0, 1], 50_000))),
            }
        }

        /// Another client (no cookies) of the same router.
        pub(crate) fn another(&self) -> Self {
            Client::of(self.router.clone())
        }

        pub(crate) fn cookie(&self, name: &str) -> Option<String> {
            self.cookies
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        }

        pub(crate) async fn send(
            &mut self,
            method: &str,
            path: &str,
            content_type: Option<&str>,
            body: String,
            headers: &[(&str, &str)],
        ) -> Answer {
            let mut request = Request::builder().method(method).uri(path);
            if !self.cookies.is_empty() {
                let cookies: Vec<String> = self
                    .cookies
                    .iter()
                    .map(|(n, v)| format!("{n}={v}"))
                    .collect();
                request = request.header(header::COOKIE, cookies.join("; "));
            }
            if let Some(token) = &self.bearer {
                request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
            }
            if let Some(content_type) = content_type {
                request = request.header(header::CONTENT_TYPE, content_type);
            }
            if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
                request = request.header(header::HOST, "localhost");
            }
            for (name, value) in headers {
                if !value.is_empty() {
                    request = request.header(*name, *value);
                }
            }
            let mut request = request.body(Body::from(body)).unwrap();
            if let Some(peer) = self.peer {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
            }
            let response = self.router.clone().oneshot(request).await.unwrap();
            for value in response.headers().get_all(header::SET_COOKIE) {
                let pair = value.to_str().unwrap().split(';').next().unwrap();
                let (name, value) = pair.split_once('=').unwrap();
                self.cookies.retain(|(n, _)| n != name);
                if !value.is_empty() {
                    self.cookies.push((name.to_owned(), value.to_owned()));
                }
            }
            if let Some(csrf) = response.headers().get("x-shedlock-csrf") {
                self.csrf = csrf.to_str().unwrap().to_owned();
            }
            let status = response.status();
            let location = response
                .headers()
                .get(header::LOCATION)
                .map(|v| v.to_str().unwrap().to_owned());
            let headers = response.headers().clone();
            let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
                .await
                .unwrap();
            Answer {
                status,
                location,
                headers,
                body: String::from_utf8(bytes.to_vec()).unwrap(),
            }
        }

        /// The sign-in form sent with `token` (and `headers`).
        pub(crate) async fn sign_in(&mut self, token: &str, headers: &[(&str, &str)]) -> Answer {
            self.send(
                "POST",
                "/shedlock/login",
                Some("application/x-www-form-urlencoded"),
                format!("token={token}"),
                headers,
            )
            .await
        }

        /// The message the page an action returned to shows: `(refused, text)`.
        pub(crate) async fn flash_at(&mut self, location: &str) -> (bool, String) {
            let page = self.get(location).await;
            let start = page
                .body
                .find("id=\"flash\"")
                .unwrap_or_else(|| panic!("no #flash at {location}: {}", page.body));
            let tag = page.body[..start].rfind('<').unwrap();
            let refused = page.body[tag..start].contains("error");
            let text = &page.body[start..];
            let text = &text[text.find('>').unwrap() + 1..];
            (refused, text[..text.find('<').unwrap()].to_owned())
        }

        pub(crate) async fn get(&mut self, path: &str) -> Answer {
            self.send("GET", path, None, String::new(), &[]).await
        }

        /// A form's `POST` as a browser sends it from a page of the dashboard (with `Origin`),
        /// with this browser's CSRF token unless `csrf` says otherwise.
        pub(crate) async fn post_form(
            &mut self,
            path: &str,
            fields: &[(&str, &str)],
            csrf: Option<&str>,
        ) -> Answer {
            let token = csrf.map_or_else(|| self.csrf.clone(), str::to_owned);
            let mut body = format!("csrf={token}");
            for (name, value) in fields {
                body.push_str(&format!(
                    "&{name}={}",
                    value.replace(' ', "+").replace('/', "%2F")
                ));
            }
            self.send(
                "POST",
                path,
                Some("application/x-www-form-urlencoded"),
                body,
                &[("origin", ORIGIN)],
            )
            .await
        }

        /// An API `POST` with a JSON body, as a page's script sends it: with `Origin` and the
        /// CSRF token the dashboard gave in its header.
        pub(crate) async fn post_api(&mut self, path: &str, body: Value) -> Answer {
            let csrf = self.csrf.clone();
            self.send(
                "POST",
                path,
                Some("application/json"),
                body.to_string(),
                &[("x-shedlock-csrf", &csrf), ("origin", ORIGIN)],
            )
            .await
        }
    }

    async fn store_with_a_job<B: TestDb>(db: &Arc<B>) -> (B::Provider, String, String)
    where
        B::Provider: shedlock::schedules::ScheduleStore,
    {
        let provider = db.provider();
        let run_time = "dash-sync".to_owned();
        let code = "dash-report".to_owned();
        provider
            .create_schedule(
                &NewSchedule::job(
                    &run_time,
                    "sync",
                    "{\"repo\":1}",
                    "0 */5 * * * *",
                    Some("Europe/Berlin".into()),
                ),
                "test",
            )
            .await
            .unwrap();
        provider
            .create_schedule(
                &NewSchedule::overriding(&code, ScheduleChange::new().cron("0 0 * * * *", None)),
                "test",
            )
            .await
            .unwrap();
        (provider, run_time, code)
    }

    /// Every page answers and shows the store: the jobs (an override beside the code's
    /// schedule), a held lock with its holder and token, the history where the store keeps
    /// one (and says it keeps none on Redis); links carry the mount path.
    pub(crate) async fn dashboard_pages_show_the_store<B: TestDb>(db: &Arc<B>)
    where
        B::Provider: Into<Source> + shedlock::schedules::ScheduleStore,
    {
        let (provider, run_time, code) = store_with_a_job(db).await;
        let config =
            LockConfiguration::new(&run_time, Duration::from_secs(300), Duration::ZERO).unwrap();
        let guard = provider
            .lock(&config)
            .await
            .unwrap()
            .expect("the lock is free");
        let history = B::run_store(&provider);
        if let Some(runs) = &history {
            for outcome in [
                RunOutcome::Executed,
                RunOutcome::Failed,
                RunOutcome::SkippedHeld,
            ] {
                runs.record_run(&NewRun::new(&run_time, &run_time, None, outcome))
                    .await
                    .unwrap();
            }
        }
        let options = Options::new(Auth::None).code_jobs([shedlock_web::CodeJob::new(
            &code,
            "0 30 * * * *",
            "UTC",
        )]);
        let mut client = Client::new(provider.clone().into(), options);

        let overview = client.get("/shedlock").await;
        assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
        assert!(
            overview.body.contains("id=\"count-jobs\">2<"),
            "{}",
            overview.body
        );
        assert!(
            overview.body.contains("id=\"count-running\">1<"),
            "{}",
            overview.body
        );
        assert!(
            overview
                .body
                .contains(&format!("href=\"/shedlock/jobs/{run_time}\"")),
            "{}",
            overview.body
        );

        let jobs = client.get("/shedlock/jobs").await;
        assert_eq!(jobs.status, StatusCode::OK);
        assert!(
            jobs.body.contains(&format!("data-job=\"{run_time}\"")),
            "{}",
            jobs.body
        );
        assert!(
            jobs.body.contains("code: <code>0 30 * * * *</code>"),
            "the code's schedule beside the override: {}",
            jobs.body
        );
        let filtered = client.get("/shedlock/jobs?q=report").await;
        assert!(
            filtered.body.contains(&format!("data-job=\"{code}\""))
                && !filtered.body.contains(&format!("data-job=\"{run_time}\"")),
            "{}",
            filtered.body
        );

        let job = client.get(&format!("/shedlock/jobs/{run_time}")).await;
        assert_eq!(job.status, StatusCode::OK, "{}", job.body);
        assert!(
            job.body
                .contains(&format!("<dd>{}</dd>", guard.fencing_token())),
            "the lock's token: {}",
            job.body
        );
        assert!(job.body.contains("Europe/Berlin"), "{}", job.body);
        if history.is_some() {
            assert!(job.body.contains("id=\"timeline\""), "{}", job.body);
            assert_eq!(
                job.body.matches("class=\"run outcome-").count(),
                2,
                "two runs ran, one tick skipped: {}",
                job.body
            );
            assert_eq!(
                job.body
                    .matches("class=\"skip outcome-skipped-held\"")
                    .count(),
                1,
                "{}",
                job.body
            );
        } else {
            assert!(job.body.contains("id=\"no-history\""), "{}", job.body);
        }
        let missing = client.get("/shedlock/jobs/no-such-job").await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert!(missing.body.contains("no job named"), "{}", missing.body);

        let locks = client.get("/shedlock/locks").await;
        assert!(
            locks.body.contains(&format!("data-lock=\"{run_time}\"")),
            "{}",
            locks.body
        );
        assert!(
            locks
                .body
                .contains(&format!("href=\"/shedlock/locks/{run_time}/release\"")),
            "{}",
            locks.body
        );

        let history_page = client.get("/shedlock/history?outcome=failed").await;
        assert_eq!(history_page.status, StatusCode::OK);
        if history.is_some() {
            assert_eq!(
                history_page.body.matches("data-outcome=\"failed\"").count(),
                1,
                "{}",
                history_page.body
            );
        } else {
            assert!(
                history_page.body.contains("keeps no run history"),
                "{}",
                history_page.body
            );
        }
        let bad = client.get("/shedlock/history?since=yesterday").await;
        if history.is_some() {
            assert!(bad.body.contains("`since` is not a time"), "{}", bad.body);
        }

        let api = client.get("/shedlock/api/v1/jobs").await.json();
        let keys: BTreeSet<&str> = api
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from([
                "backend", "fleet", "history", "jobs", "next", "page", "pages"
            ])
        );
        let job = api["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == run_time.as_str())
            .unwrap();
        assert_eq!(job["kind"], "run-time");
        assert_eq!(job["lock"]["fencing_token"], guard.fencing_token());
        assert_eq!(job["last_run"].is_null(), history.is_none(), "{job}");
        // Two instances holding seats of fleet `f`: the next tick's jobs shared between them as
        // every scheduler computes it.
        let seat_config = |n: usize| {
            LockConfiguration::new(
                format!("shedlock.fleet/f/{n}"),
                Duration::from_secs(300),
                Duration::ZERO,
            )
            .unwrap()
        };
        let seat0 = provider.lock(&seat_config(0)).await.unwrap().expect("free");
        let seat1 = provider.lock(&seat_config(1)).await.unwrap().expect("free");
        let overview = client.get("/shedlock/api/v1/overview").await.json();
        let instances = overview["instances"].as_array().unwrap();
        assert_eq!(instances.len(), 2, "{overview}");
        let tick: chrono::DateTime<chrono::Utc> =
            overview["next_tick"].as_str().unwrap().parse().unwrap();
        let due = overview["next_tick_due"].as_u64().unwrap();
        assert!(due >= 1, "{overview}");
        let mut expected = [0u64; 2];
        for job in api["jobs"].as_array().unwrap() {
            if job["next_tick"]
                .as_str()
                .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
                == Some(tick)
            {
                expected
                    [shedlock::scheduler::share_owner(job["name"].as_str().unwrap(), tick, 2)] += 1;
            }
        }
        let shares: Vec<u64> = instances
            .iter()
            .map(|i| i["next_tick_share"].as_u64().unwrap())
            .collect();
        assert_eq!(shares, expected, "{overview}");
        assert_eq!(shares.iter().sum::<u64>(), due);
        drop((seat0, seat1));

        let locks = client.get("/shedlock/api/v1/locks").await.json();
        assert!(
            locks
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["name"] == run_time.as_str() && l["held"] == true),
            "{locks}"
        );
        drop(guard);
    }

    /// Pause, resume, run now, reschedule and release through the pages' forms and the API:
    /// each changes the store and is recorded; a bad cron writes nothing and says why in the
    /// library's words; a release under a stale token releases nothing; a form without the
    /// CSRF token, or marked cross-site, changes nothing.
    pub(crate) async fn dashboard_actions_change_the_store<B: TestDb>(db: &Arc<B>)
    where
        B::Provider: Into<Source> + shedlock::schedules::ScheduleStore,
    {
        let (provider, run_time, code) = store_with_a_job(db).await;
        let mut client = Client::new(provider.clone().into(), Options::new(Auth::None));
        client.get("/shedlock/jobs").await; // the browser's id cookie and its CSRF token
        assert!(
            client
                .cookie("shedlock_browser")
                .is_some_and(|c| c.len() == 32)
        );
        assert_eq!(client.csrf.len(), 64, "an HMAC-SHA256 in hex");

        // Without the token, or with another's, nothing changes.
        let forged = client
            .post_form(
                &format!("/shedlock/act/jobs/{run_time}/pause"),
                &[],
                Some("0123456789abcdef0123456789abcdef"),
            )
            .await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
        assert!(forged.body.contains("id=\"refused\""), "{}", forged.body);
        let cross = client
            .send(
                "POST",
                &format!("/shedlock/api/v1/jobs/{run_time}/pause"),
                None,
                String::new(),
                &[
                    ("x-shedlock-csrf", &client.csrf.clone()),
                    ("origin", ORIGIN),
                    ("sec-fetch-site", "cross-site"),
                ],
            )
            .await;
        assert_eq!(cross.status, StatusCode::FORBIDDEN, "{}", cross.body);
        assert!(!provider.schedule(&run_time).await.unwrap().unwrap().paused);

        let paused = client
            .post_form(&format!("/shedlock/act/jobs/{run_time}/pause"), &[], None)
            .await;
        assert_eq!(paused.status, StatusCode::SEE_OTHER);
        let back = paused.location.unwrap();
        assert!(
            back.starts_with(&format!("/shedlock/jobs/{run_time}?flash=")),
            "{back}"
        );
        assert!(provider.schedule(&run_time).await.unwrap().unwrap().paused);
        let (refused, said) = client.flash_at(&back).await;
        assert!(!refused && said.starts_with("paused"), "{said}");
        let page = client.get(&back).await;
        assert!(page.body.contains("id=\"resume\""), "{}", page.body);

        let resumed = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{run_time}/resume"),
                Value::Null,
            )
            .await;
        assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
        assert_eq!(resumed.json()["result"], "resumed");
        assert_eq!(resumed.json()["was_paused"], true);

        // A pause with a note (issue 47): kept beside the pause, shown by the job's page and
        // the API, recorded with the action; a note that is not one line is refused; the
        // resume clears it.
        let noted = client
            .post_form(
                &format!("/shedlock/act/jobs/{run_time}/pause"),
                &[("note", "upstream incident")],
                None,
            )
            .await;
        assert_eq!(noted.status, StatusCode::SEE_OTHER);
        let stored = provider.schedule(&run_time).await.unwrap().unwrap();
        assert_eq!(
            (stored.paused, stored.note.as_deref()),
            (true, Some("upstream incident"))
        );
        let page = client.get(&format!("/shedlock/jobs/{run_time}")).await;
        assert!(
            page.body.contains("id=\"pause-note\">upstream incident<"),
            "{}",
            page.body
        );
        let api = client
            .get(&format!("/shedlock/api/v1/jobs/{run_time}"))
            .await;
        assert_eq!(api.json()["note"], "upstream incident", "{}", api.body);
        let listed = client.get("/shedlock/api/v1/jobs").await;
        assert!(
            listed.json()["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|j| j["name"] == run_time.as_str() && j["note"] == "upstream incident"),
            "{}",
            listed.body
        );
        let bad = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{run_time}/pause"),
                serde_json::json!({"note": "two\nlines"}),
            )
            .await;
        assert_eq!(
            bad.status,
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            bad.body
        );
        let resumed = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{run_time}/resume"),
                serde_json::json!({"note": "fixed upstream"}),
            )
            .await;
        assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
        assert_eq!(resumed.json()["warnings"], serde_json::json!([]));
        let stored = provider.schedule(&run_time).await.unwrap().unwrap();
        assert_eq!((stored.paused, stored.note), (false, None));

        // The pages read the schedules once and then only what changed (by version): a
        // schedule created, paused and deleted meanwhile is shown as it is now.
        assert!(
            !client
                .get("/shedlock/jobs?paused=yes")
                .await
                .body
                .contains(&format!("data-job=\"{run_time}\""))
        );
        provider
            .create_schedule(
                &NewSchedule::job("dash-temp", "h", "{}", "0 0 * * * *", None),
                "test",
            )
            .await
            .unwrap();
        assert!(
            client
                .get("/shedlock/jobs")
                .await
                .body
                .contains("data-job=\"dash-temp\"")
        );
        provider
            .update_schedule("dash-temp", &ScheduleChange::new().paused(true), "test")
            .await
            .unwrap();
        assert!(
            client
                .get("/shedlock/jobs?paused=yes")
                .await
                .body
                .contains("data-job=\"dash-temp\"")
        );
        assert!(provider.delete_schedule("dash-temp", "test").await.unwrap());
        assert!(
            !client
                .get("/shedlock/jobs")
                .await
                .body
                .contains("data-job=\"dash-temp\"")
        );

        let asked = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{run_time}/trigger"),
                Value::Null,
            )
            .await;
        assert_eq!(asked.status, StatusCode::OK, "{}", asked.body);
        assert_eq!(asked.json()["requested_by"], "web:anonymous");
        let again = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{run_time}/trigger"),
                Value::Null,
            )
            .await;
        assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.body);
        assert_eq!(again.json()["result"], "already_pending");

        let version = provider.schedule(&code).await.unwrap().unwrap().version;
        let bad = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{code}/reschedule"),
                serde_json::json!({"cron": "0 61 * * * *", "time_zone": "UTC"}),
            )
            .await;
        assert_eq!(
            bad.status,
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            bad.body
        );
        let expected = shedlock::Schedule::parse("0 61 * * * *", "UTC")
            .unwrap_err()
            .to_string();
        assert_eq!(bad.json()["error"], expected.as_str(), "the CLI's message");
        let zone = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{code}/reschedule"),
                serde_json::json!({"cron": "0 */5 * * * *", "time_zone": "Mars/Olympus"}),
            )
            .await;
        assert_eq!(
            zone.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            zone.body
        );
        assert_eq!(
            provider.schedule(&code).await.unwrap().unwrap().version,
            version,
            "nothing written"
        );
        let moved = client
            .post_form(
                &format!("/shedlock/act/jobs/{code}/reschedule"),
                &[("cron", "0 15 * * * *"), ("time_zone", "Asia/Seoul")],
                None,
            )
            .await;
        let (refused, said) = client.flash_at(&moved.location.unwrap()).await;
        assert!(!refused, "{said}");
        let stored = provider.schedule(&code).await.unwrap().unwrap();
        assert_eq!(
            (stored.cron.as_deref(), stored.time_zone.as_deref()),
            (Some("0 15 * * * *"), Some("Asia/Seoul"))
        );

        let unknown = client
            .post_api("/shedlock/api/v1/jobs/never-heard-of/pause", Value::Null)
            .await;
        assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.body);
        assert!(
            provider.schedule("never-heard-of").await.unwrap().is_none(),
            "no override of an unknown job"
        );

        // A lock: released only under the token it carries.
        let config =
            LockConfiguration::new("dash-stuck", Duration::from_secs(300), Duration::ZERO).unwrap();
        let guard = provider.lock(&config).await.unwrap().expect("free");
        let token = guard.fencing_token();
        let confirm = client.get("/shedlock/locks/dash-stuck/release").await;
        assert!(
            confirm.body.contains(&format!("id=\"token\">{token}<"))
                && confirm.body.contains("id=\"confirm-release\""),
            "{}",
            confirm.body
        );
        let stale = client
            .post_api(
                "/shedlock/api/v1/locks/dash-stuck/release",
                serde_json::json!({"token": token - 1}),
            )
            .await;
        assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.body);
        assert!(
            provider
                .lock_state("dash-stuck")
                .await
                .unwrap()
                .unwrap()
                .is_held()
        );
        let released = client
            .post_form(
                "/shedlock/act/locks/dash-stuck/release",
                &[("token", &token.to_string())],
                None,
            )
            .await;
        let (refused, said) = client.flash_at(&released.location.unwrap()).await;
        assert!(!refused && said.starts_with("released"), "{said}");
        assert!(
            !provider
                .lock_state("dash-stuck")
                .await
                .unwrap()
                .unwrap()
                .is_held()
        );

        // The fleet's pause.
        let fleet = client
            .post_api("/shedlock/api/v1/fleet/pause", Value::Null)
            .await;
        assert_eq!(fleet.status, StatusCode::OK, "{}", fleet.body);
        assert!(
            client
                .get("/shedlock")
                .await
                .body
                .contains("id=\"fleet-paused\"")
        );
        client
            .post_api("/shedlock/api/v1/fleet/resume", Value::Null)
            .await;

        // Recorded where the history is kept: who, what, from where.
        if let Some(runs) = B::run_store(&provider) {
            let rows = runs
                .runs(&RunQuery::latest(50).outcome(RunOutcome::Operator))
                .await
                .unwrap();
            let said: Vec<String> = rows
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {}",
                        r.name,
                        r.requested_by.as_deref().unwrap_or("-"),
                        r.error.as_deref().unwrap_or("-")
                    )
                })
                .collect();
            for expected in [
                format!("{run_time} web:anonymous paused (from 127.0.0.1)"),
                format!("{run_time} web:anonymous resumed (from 127.0.0.1)"),
                format!("{run_time} web:anonymous paused: upstream incident (from 127.0.0.1)"),
                format!("{run_time} web:anonymous resumed: fixed upstream (from 127.0.0.1)"),
                format!(
                    "{code} web:anonymous rescheduled to 0 15 * * * * (Asia/Seoul) (from 127.0.0.1)"
                ),
                format!(
                    "dash-stuck web:anonymous released lock \"dash-stuck\" held by {} (token {token}) (from 127.0.0.1)",
                    provider.locked_by()
                ),
                "shedlock.fleet web:anonymous paused the whole fleet (from 127.0.0.1)".to_owned(),
            ] {
                assert!(
                    said.iter().any(|s| s == &expected),
                    "{expected:?} not recorded in {said:#?}"
                );
            }
            assert!(
                said.iter().any(
                    |s| s.starts_with(&format!("{run_time} web:anonymous asked for a run now"))
                ),
                "{said:#?}"
            );
            // An operator's row is never a job's last run.
            let last = runs
                .latest_runs(std::slice::from_ref(&run_time))
                .await
                .unwrap();
            assert!(
                last.iter().all(|r| r.outcome != RunOutcome::Operator),
                "{last:?}"
            );
        }
        drop(guard);
    }

    /// Read-only: every page, no action; the action routes are not there.
    pub(crate) async fn dashboard_read_only_offers_no_action<B: TestDb>(db: &Arc<B>)
    where
        B::Provider: Into<Source> + shedlock::schedules::ScheduleStore,
    {
        let (provider, run_time, _code) = store_with_a_job(db).await;
        let config =
            LockConfiguration::new(&run_time, Duration::from_secs(300), Duration::ZERO).unwrap();
        let _guard = provider.lock(&config).await.unwrap().expect("free");
        let mut client = Client::new(
            provider.clone().into(),
            Options::new(Auth::None).read_only(true),
        );
        for path in [
            "/shedlock".to_owned(),
            "/shedlock/jobs".to_owned(),
            format!("/shedlock/jobs/{run_time}"),
            "/shedlock/locks".to_owned(),
        ] {
            let page = client.get(&path).await;
            assert_eq!(page.status, StatusCode::OK, "{path}");
            assert!(page.body.contains("id=\"read-only\""), "{path}");
            for action in ["method=\"post\"", "class=\"action\"", "release"] {
                assert!(
                    !page.body.contains(action),
                    "{path} offers {action}: {}",
                    page.body
                );
            }
        }
        let refused = client
            .post_api(
                &format!("/shedlock/api/v1/jobs/{run_time}/pause"),
                Value::Null,
            )
            .await;
        assert!(
            refused.status == StatusCode::NOT_FOUND
                || refused.status == StatusCode::METHOD_NOT_ALLOWED,
            "{}",
            refused.status
        );
        assert!(!provider.schedule(&run_time).await.unwrap().unwrap().paused);
    }
}

/// Authentication by a bearer token: a page sends a browser to sign in, the API answers 401;
/// the header, or the session of a browser that signed in, lets it in; an action by header
/// needs no CSRF token (a browser never sends that header by itself). SQLite: the check does
/// not depend on the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_bearer_token_guards_every_route_sqlite() {
    use axum::http::StatusCode;
    use shedlock_suite::TestDb;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let options =
        shedlock_web::Options::new(shedlock_web::Auth::bearer("s3cret-token-of-the-dashboard"));
    let mut browser = cases::Client::new(provider.clone().into(), options.clone());
    let page = browser.get("/shedlock/jobs").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location.as_deref(), Some("/shedlock/login"));
    let api = browser.get("/shedlock/api/v1/locks").await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED);
    assert!(!api.body.contains("s3cret"), "{}", api.body);
    let wrong = browser
        .send(
            "POST",
            "/shedlock/login",
            Some("application/x-www-form-urlencoded"),
            "token=guess".into(),
            &[],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(browser.cookie("shedlock_session").is_none());
    let right = browser
        .send(
            "POST",
            "/shedlock/login",
            Some("application/x-www-form-urlencoded"),
            "token=s3cret-token-of-the-dashboard".into(),
            &[],
        )
        .await;
    assert_eq!(right.location.as_deref(), Some("/shedlock"));
    let session = browser.cookie("shedlock_session").expect("a session");
    assert!(!session.contains("s3cret"));
    assert_eq!(browser.get("/shedlock/jobs").await.status, StatusCode::OK);
    assert!(!browser.get("/shedlock").await.body.contains("s3cret"));

    let mut api_client = cases::Client::new(provider.clone().into(), options);
    let wrong_header = api_client
        .send(
            "GET",
            "/shedlock/api/v1/locks",
            None,
            String::new(),
            &[("authorization", "Bearer nope")],
        )
        .await;
    assert_eq!(wrong_header.status, StatusCode::UNAUTHORIZED);
    let fleet = api_client
        .send(
            "POST",
            "/shedlock/api/v1/fleet/pause",
            None,
            String::new(),
            &[("authorization", "Bearer s3cret-token-of-the-dashboard")],
        )
        .await;
    assert_eq!(fleet.status, StatusCode::OK, "{}", fleet.body);
    assert_eq!(fleet.json()["schedule"]["updated_by"], "web:token");
    db.teardown().await;
}

/// The API's history pages by key: 130 rows in pages of 50, every row once, newest first,
/// whatever is added meanwhile; filters by instance and time. SQLite here; the keyset
/// statements of every SQL backend are the library's (its own tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_history_pages_by_key_sqlite() {
    use shedlock::history::{NewRun, RunOutcome};
    use shedlock_suite::TestDb;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let runs = <shedlock_suite::Sqlite as TestDb>::run_store(&provider).unwrap();
    for i in 0..130 {
        runs.record_run(&NewRun::new(
            format!("job-{}", i % 3),
            format!("job-{}", i % 3),
            None,
            RunOutcome::Executed,
        ))
        .await
        .unwrap();
    }
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let mut seen = Vec::new();
    let mut cursor: Option<i64> = None;
    loop {
        let path = match cursor {
            Some(before) => format!("/shedlock/api/v1/runs?before={before}"),
            None => "/shedlock/api/v1/runs".to_owned(),
        };
        let page = client.get(&path).await.json();
        let ids: Vec<i64> = page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        assert!(ids.len() <= 50);
        seen.extend(ids);
        if seen.len() == 50 {
            // Added meanwhile: newer than every page still to read.
            runs.record_run(&NewRun::new("job-0", "job-0", None, RunOutcome::Failed))
                .await
                .unwrap();
        }
        match page["next"].as_i64() {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 130, "every row once");
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "newest first");
    let by_job = client
        .get("/shedlock/api/v1/runs?job=job-1&limit=1000")
        .await
        .json();
    assert_eq!(by_job["runs"].as_array().unwrap().len(), 43);
    let future = client
        .get("/shedlock/api/v1/runs?since=2999-01-01T00:00:00Z")
        .await
        .json();
    assert_eq!(future["runs"].as_array().unwrap().len(), 0);
    // A page number past any multiple of the page size answers an empty page.
    let far = client
        .get("/shedlock/api/v1/jobs?page=18446744073709551615")
        .await;
    assert_eq!(far.status, axum::http::StatusCode::OK, "{}", far.body);
    assert_eq!(far.json()["jobs"].as_array().unwrap().len(), 0);
    let bad = client.get("/shedlock/api/v1/runs?outcome=exploded").await;
    assert_eq!(bad.status, axum::http::StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("unknown run outcome"), "{}", bad.body);
    db.teardown().await;
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: crate::cases => [
    dashboard_pages_show_the_store,
    dashboard_actions_change_the_store,
    dashboard_read_only_offers_no_action,
]);

/// The pages stay light: a job with 2,400 runs in the last hour on three instances (runs of
/// one instance a few pixels apart merged into one mark), and the jobs page of 1,000 jobs (a
/// hundred to a page), each under 200 KB with its stylesheet and script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_pages_stay_under_200_kb_sqlite() {
    use shedlock::history::{NewRun, RunOutcome};
    use shedlock::schedules::{NewSchedule, ScheduleStore};
    use shedlock_suite::{Opts, TestDb};
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let names: Vec<NewSchedule> = (0..1_000)
        .map(|i| NewSchedule::job(format!("light-{i:04}"), "h", "{}", "*/2 * * * * *", None))
        .collect();
    provider.create_schedules(&names, "test").await.unwrap();
    for instance in ["host-a", "host-b", "host-c"] {
        let p = db.provider_with(Opts::default().locked_by(instance)).await;
        let runs = <shedlock_suite::Sqlite as TestDb>::run_store(&p).unwrap();
        for i in 0..800 {
            let outcome = if i % 40 == 0 {
                RunOutcome::Failed
            } else {
                RunOutcome::Executed
            };
            runs.record_run(&NewRun::new("light-0000", "light-0000", None, outcome))
                .await
                .unwrap();
        }
    }
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let assets = client.get("/shedlock/assets/style.css").await.body.len()
        + client.get("/shedlock/assets/app.js").await.body.len();
    let job = client.get("/shedlock/jobs/light-0000?window=1h").await;
    assert!(
        job.body.contains("id=\"timeline-merged\""),
        "{}",
        &job.body[..2000.min(job.body.len())]
    );
    let marks = job.body.matches("class=\"run outcome-").count();
    assert!(marks < 2_400, "{marks} marks for 2,400 runs");
    let jobs = client.get("/shedlock/jobs").await;
    assert_eq!(jobs.body.matches("data-job=").count(), 100);
    for (page, body) in [("job", &job.body), ("jobs", &jobs.body)] {
        let weight = body.len() + assets;
        println!("{page} page: {} bytes + {assets} of assets", body.len());
        assert!(weight < 200 * 1024, "the {page} page weighs {weight} bytes");
    }
    db.teardown().await;
}

/// A job with an overlap policy (issue 48): the jobs page shows its policy, how many runs hold
/// it now and how many ticks wait, read from the rows beside its lock, and lists those rows
/// under the job, not as jobs of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_an_overlap_policy_sqlite() {
    use shedlock::LockConfiguration;
    use shedlock::schedules::{RegisteredJob, Registration, ScheduleStore};
    use shedlock_suite::TestDb;
    use std::time::Duration;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let mut job = RegisteredJob::new("reindex", "0 * * * * *", "UTC");
    job.lock = Some("reindex".to_owned());
    job.overlap = Some("buffer_all:2".to_owned());
    let registration = Registration::new("pod-a", "default", vec![job], Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let minute = Duration::from_secs(60);
    let place = LockConfiguration::new("reindex:run1", minute, Duration::ZERO).unwrap();
    let waiting = LockConfiguration::new("reindex:wait1", minute, Duration::ZERO)
        .unwrap()
        .for_tick(chrono::Utc::now());
    let _place = provider
        .lock(&place)
        .await
        .unwrap()
        .expect("the place is free");
    let _waiting = provider
        .lock(&waiting)
        .await
        .unwrap()
        .expect("the row is free");
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let jobs = client.get("/shedlock/jobs").await;
    assert!(
        jobs.body.contains("<code>buffer_all:2</code>")
            && jobs.body.contains("1 running, 1 waiting"),
        "{}",
        jobs.body
    );
    assert!(
        jobs.body.contains("data-job=\"reindex\"")
            && !jobs.body.contains("data-job=\"reindex:run1\"")
            && !jobs.body.contains("data-job=\"reindex:wait1\""),
        "the policy's rows are the job's: {}",
        jobs.body
    );
    assert!(jobs.body.contains("1 run place held"), "{}", jobs.body);
    let page = client.get("/shedlock/jobs/reindex").await;
    assert!(
        page.body.contains("1 of 1 run places held") && page.body.contains("1 of 2 ticks"),
        "the job's page reads the policy's rows too: {}",
        page.body
    );
    let running = client.get("/shedlock/jobs?running=yes").await;
    assert!(
        running.body.contains("data-job=\"reindex\""),
        "a job whose run holds a place is running: {}",
        running.body
    );
    let api = client.get("/shedlock/api/v1/jobs").await.json();
    let reindex = api["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["name"] == "reindex"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        reindex["overlap"],
        serde_json::json!({ "policy": "buffer_all:2", "running": 1, "waiting": 1, "source": "code" }),
        "{api:#}"
    );

    // An operator sets the policy on the job's page ("Set overlap"): checked against the lock
    // the instance registered, stored, and the pages show it as an override.
    let page = client.get("/shedlock/jobs/reindex").await;
    assert!(page.body.contains("id=\"new-overlap\""), "{}", page.body);
    let set = client
        .post_form(
            "/shedlock/act/jobs/reindex/reschedule",
            &[("overlap", "allow_all:3")],
            None,
        )
        .await;
    assert!(
        set.status.is_success() || set.status.is_redirection(),
        "{:?} {}",
        set.status,
        set.body
    );
    let stored = provider.schedule("reindex").await.unwrap().unwrap();
    assert_eq!(stored.overlap.as_deref(), Some("allow_all:3"), "{stored:?}");
    let page = client.get("/shedlock/jobs/reindex").await;
    assert!(
        page.body.contains("<code>allow_all:3</code>")
            && page.body.contains("the code says buffer_all:2"),
        "{}",
        page.body
    );
    let jobs = client.get("/shedlock/jobs").await;
    assert!(jobs.body.contains(">store</span>"), "{}", jobs.body);
    let api = client.get("/shedlock/api/v1/jobs/reindex").await.json();
    assert_eq!(
        api["overlap"],
        serde_json::json!({ "policy": "allow_all:3", "running": 1, "waiting": 1, "source": "store" }),
        "{api:#}"
    );
    // Through the API, a bound out of range is refused naming it; nothing changes.
    let bad = client
        .post_api(
            "/shedlock/api/v1/jobs/reindex/reschedule",
            serde_json::json!({ "overlap": "allow_all:0" }),
        )
        .await;
    assert_eq!(
        bad.status,
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad.body
    );
    assert!(bad.body.contains("max_running is 0"), "{}", bad.body);
    let stored = provider.schedule("reindex").await.unwrap().unwrap();
    assert_eq!(stored.overlap.as_deref(), Some("allow_all:3"));
    db.teardown().await;
}

/// Issue 50, point 2 on the dashboard: a job's page shows its promises (the code's, and an
/// operator's set in the store over them) and sets them with its "Set deadlines" form; the
/// API's `reschedule` sets them too, a bad value refused naming it, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_sets_a_jobs_deadlines_sqlite() {
    use shedlock::schedules::{Deadlines, RegisteredJob, Registration, ScheduleStore};
    use shedlock_suite::TestDb;
    use std::time::Duration;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let mut job = RegisteredJob::new("nightly", "0 0 2 * * *", "UTC");
    job.deadlines = Some(Deadlines::default().late_after(Duration::from_secs(30)));
    let registration = Registration::new("pod-a", "default", vec![job], Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let page = client.get("/shedlock/jobs/nightly").await;
    assert!(
        page.body.contains("id=\"deadline-late_after\">30s")
            && page.body.contains("id=\"set-deadlines\""),
        "{}",
        page.body
    );
    let set = client
        .post_form(
            "/shedlock/act/jobs/nightly/reschedule",
            &[
                ("expect_success_within", "26h"),
                ("late_after", "off"),
                ("max_runtime", ""),
            ],
            None,
        )
        .await;
    assert!(
        set.status.is_success() || set.status.is_redirection(),
        "{:?} {}",
        set.status,
        set.body
    );
    let stored = provider.schedule("nightly").await.unwrap().unwrap();
    let over =
        Deadlines::from_override_json("nightly", stored.deadlines.as_deref().unwrap()).unwrap();
    assert_eq!(
        over.describe(),
        ["expect_success_within 1day 2h", "late_after off"],
        "{stored:?}"
    );
    let page = client.get("/shedlock/jobs/nightly").await;
    assert!(
        page.body
            .contains("id=\"deadline-expect_success_within\">1day 2h")
            && page.body.contains("the code says none")
            && page.body.contains("the code says 30s"),
        "{}",
        page.body
    );
    let api = client
        .post_api(
            "/shedlock/api/v1/jobs/nightly/reschedule",
            serde_json::json!({ "failures_in_a_row": 3, "late_after": "default" }),
        )
        .await;
    assert!(api.status.is_success(), "{:?} {}", api.status, api.body);
    let job = client.get("/shedlock/api/v1/jobs/nightly").await.json();
    assert_eq!(
        job["deadlines"]["applied"],
        serde_json::json!([
            "expect_success_within 1day 2h",
            "late_after 30s",
            "failures_in_a_row 3"
        ]),
        "{job:#}"
    );
    let before = provider.schedule("nightly").await.unwrap().unwrap();
    let bad = client
        .post_api(
            "/shedlock/api/v1/jobs/nightly/reschedule",
            serde_json::json!({ "on_overrun": "kill" }),
        )
        .await;
    assert_eq!(
        bad.status,
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad.body
    );
    assert!(
        bad.body.contains("on_overrun")
            && bad.body.contains("kill")
            && bad.body.contains("is not one of"),
        "{}",
        bad.body
    );
    let after = provider.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(
        (after.version, &after.deadlines),
        (before.version, &before.deadlines),
        "nothing changed"
    );
    db.teardown().await;
}

/// Issue 49, point 4 on the dashboard: a job's page lists its next runs (the code's cron on its
/// zone's clock, with the jitter), a pause turns them into ticks that do not run and says who
/// paused it and why, and the API answers the same (`/api/v1/jobs/{name}/upcoming`), refusing a
/// bad count and naming the closest job for a mistyped one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_a_jobs_next_runs_sqlite() {
    use shedlock::schedules::{RegisteredJob, Registration, ScheduleChange, ScheduleStore};
    use shedlock_suite::TestDb;
    use std::time::Duration;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let mut job = RegisteredJob::new("ledger-close", "0 30 2 * * *", "America/New_York");
    job.jitter_ms = Some(60_000);
    let registration = Registration::new("pod-a", "default", vec![job], Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let page = client.get("/shedlock/jobs/ledger-close").await;
    assert!(
        page.body.contains("id=\"upcoming\"")
            && page.body.contains("02:30:00 EST")
            && page.body.contains("jitter up to 1m")
            && page.body.matches("runs").count() >= 5,
        "{}",
        page.body
    );
    let api = client
        .get("/shedlock/api/v1/jobs/ledger-close/upcoming?count=3")
        .await
        .json();
    assert_eq!(api["source"], "code", "{api:#}");
    assert_eq!(api["jitter_ms"], 60_000, "{api:#}");
    let ticks = api["ticks"].as_array().cloned().unwrap_or_default();
    assert_eq!(ticks.len(), 3, "{api:#}");
    assert!(
        ticks.iter().all(|t| t["local"]
            .as_str()
            .unwrap_or("")
            .contains("T02:30:00-05:00")),
        "{api:#}"
    );

    provider
        .update_schedule(
            "ledger-close",
            &ScheduleChange::new()
                .paused(true)
                .note(Some("year-end freeze".to_owned())),
            "ops:ann",
        )
        .await
        .unwrap();
    let page = client.get("/shedlock/jobs/ledger-close").await;
    assert!(
        page.body
            .contains("does not run: paused by ops:ann: year-end freeze"),
        "{}",
        page.body
    );
    let api = client
        .get("/shedlock/api/v1/jobs/ledger-close/upcoming?count=2")
        .await
        .json();
    assert_eq!(api["ticks"][0]["left_out"]["reason"], "paused", "{api:#}");
    assert_eq!(
        api["ticks"][0]["runs_at"],
        serde_json::Value::Null,
        "{api:#}"
    );

    let bad = client
        .get("/shedlock/api/v1/jobs/ledger-close/upcoming?count=many")
        .await;
    assert_eq!(bad.status, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.contains("from 1 to 1000"), "{}", bad.body);
    let typo = client
        .get("/shedlock/api/v1/jobs/ledger-clos/upcoming")
        .await;
    assert_eq!(typo.status, axum::http::StatusCode::NOT_FOUND);
    assert!(typo.body.contains("did you mean"), "{}", typo.body);
    db.teardown().await;
}

/// Issue 49, point 2 on the dashboard and the API: a backfill started from the job page's form
/// is stored as asked; the page shows it with its progress bar and its buttons; the API lists
/// it (`GET /api/v1/backfills?job=`), pauses it, lists a dry run's ticks without starting one,
/// and refuses a bad range naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_starts_and_steers_a_backfill_sqlite() {
    use shedlock::schedules::{BackfillState, RegisteredJob, Registration, ScheduleStore};
    use shedlock_suite::TestDb;
    use std::time::Duration;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let job = RegisteredJob::new("exports", "0 0 * * * *", "UTC");
    let registration = Registration::new("pod-a", "default", vec![job], Duration::from_secs(600));
    provider.register(&registration).await.unwrap();
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let page = client.get("/shedlock/jobs/exports").await;
    assert!(
        page.body.contains("id=\"start-backfill\"")
            && page.body.contains("No backfill of this job."),
        "{}",
        page.body
    );
    let started = client
        .post_form(
            "/shedlock/act/jobs/exports/backfill",
            &[
                ("from", "2026-11-20T00:00:00Z"),
                ("to", "2026-11-21T00:00:00Z"),
                ("max_running", "2"),
                ("rate_per_min", "30"),
                ("rerun", "on"),
            ],
            None,
        )
        .await;
    assert!(
        started.status.is_success() || started.status.is_redirection(),
        "{:?} {}",
        started.status,
        started.body
    );
    let kept = provider.backfills().await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let backfill = &kept[0];
    assert_eq!(
        (
            backfill.spec.total,
            backfill.spec.max_running,
            backfill.spec.rate_per_min,
            backfill.spec.rerun
        ),
        (24, 2, Some(30), true),
        "{backfill:?}"
    );
    let page = client.get("/shedlock/jobs/exports").await;
    assert!(
        page.body
            .contains(&format!("id=\"backfill-{}\"", backfill.id))
            && page.body.contains("<progress")
            && page.body.contains("0 of 24 ticks")
            && page.body.contains("at most 30 a minute"),
        "{}",
        page.body
    );

    let listed = client
        .get("/shedlock/api/v1/backfills?job=exports")
        .await
        .json();
    assert_eq!(listed["backfills"][0]["total"], 24, "{listed:#}");
    assert_eq!(listed["backfills"][0]["state"], "running", "{listed:#}");
    let paused = client
        .post_api(
            "/shedlock/api/v1/jobs/exports/pause-backfill",
            serde_json::json!({ "backfill": backfill.id }),
        )
        .await;
    assert!(
        paused.status.is_success(),
        "{:?} {}",
        paused.status,
        paused.body
    );
    let now = provider.backfill(backfill.id).await.unwrap().unwrap();
    assert_eq!(now.state, BackfillState::Paused);
    let page = client.get("/shedlock/jobs/exports").await;
    assert!(page.body.contains(">Resume<"), "{}", page.body);

    let dry = client
        .post_api(
            "/shedlock/api/v1/jobs/exports/backfill",
            serde_json::json!({ "from": "2026-11-20T00:00:00Z", "to": "2026-11-20T03:00:00Z", "dry_run": true }),
        )
        .await;
    assert!(dry.status.is_success(), "{:?} {}", dry.status, dry.body);
    let dry = dry.json();
    assert_eq!(dry["total"], 3, "{dry:#}");
    assert_eq!(dry["ticks"][0], "2026-11-20T01:00:00.000Z", "{dry:#}");
    assert_eq!(
        provider.backfills().await.unwrap().len(),
        1,
        "a dry run starts none"
    );
    let bad = client
        .post_api(
            "/shedlock/api/v1/jobs/exports/backfill",
            serde_json::json!({ "from": "last week", "to": "2026-11-20T03:00:00Z", "rerun": true }),
        )
        .await;
    assert_eq!(
        bad.status,
        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        bad.body
    );
    assert!(
        bad.body
            .contains("from \\\"last week\\\" is not an RFC 3339 time"),
        "{}",
        bad.body
    );
    db.teardown().await;
}

/// Issue 49, point 3 on the dashboard and the API: a calendar created, added to, imported into
/// (an .ics file's text) and removed from through the calendar pages' forms and the API, its
/// JSON; a job's time rules set from its page's form (its next runs then leave out the
/// excluded day's tick, naming the entry), a calendar a job excludes not deleted, bad input
/// refused naming what is wrong with its status, and each change recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_keeps_calendars_and_a_jobs_time_rules_sqlite() {
    use axum::http::StatusCode;
    use serde_json::json;
    use shedlock::RunStore;
    use shedlock::history::{RunOutcome, RunQuery};
    use shedlock::schedules::{NewSchedule, ScheduleStore};
    use shedlock_suite::TestDb;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    provider
        .create_schedule(
            &NewSchedule::job(
                "dash-nightly",
                "report",
                "null",
                "0 0 3 * * *",
                Some("Asia/Seoul".into()),
            ),
            "test",
        )
        .await
        .unwrap();
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let seoul: chrono_tz::Tz = "Asia/Seoul".parse().unwrap();
    let day = |days: i64| {
        (chrono::Utc::now() + chrono::TimeDelta::days(days))
            .with_timezone(&seoul)
            .date_naive()
    };
    let (excluded, later) = (day(2), day(9));
    let form =
        |text: &str| url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();

    // The list, reached from every page's navigation; none yet.
    let page = client.get("/shedlock").await;
    assert!(
        page.body.contains("href=\"/shedlock/calendars\""),
        "{}",
        page.body
    );
    let page = client.get("/shedlock/calendars").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body.contains("No calendar in the store yet."),
        "{}",
        page.body
    );

    // Created from the list's form: back on its page, which shows the entry and its label.
    let created = client
        .post_form(
            "/shedlock/act/calendars",
            &[
                ("name", "kr-holidays"),
                ("time_zone", "Asia/Seoul"),
                ("entries", &excluded.to_string()),
                ("label", &form("Founding Day")),
            ],
            None,
        )
        .await;
    let location = created.location.clone().unwrap_or_default();
    assert!(
        location.starts_with("/shedlock/calendars/kr-holidays?flash="),
        "{location}"
    );
    let (failed, said) = client.flash_at(&location).await;
    assert!(
        !failed
            && said.starts_with(
                "created calendar &quot;kr-holidays&quot; in Asia/Seoul with 1 entries"
            ),
        "{said}"
    );
    let page = client.get("/shedlock/calendars/kr-holidays").await;
    assert!(
        page.body.contains(&format!("data-entry=\"{excluded}\""))
            && page.body.contains("Founding Day"),
        "{}",
        page.body
    );
    // Added to from its form: a time range with a label.
    let range = format!("{later}T12:00..{later}T18:00");
    let added = client
        .post_form(
            "/shedlock/act/calendars/kr-holidays/add",
            &[("entries", &form(&range)), ("label", &form("Half day"))],
            None,
        )
        .await;
    let (failed, said) = client.flash_at(added.location.as_deref().unwrap()).await;
    assert!(
        !failed && said.starts_with("added 1 of the 1 entries given"),
        "{said}"
    );
    // An .ics file's text imported from its form: an all-day event, a yearly one (3 times)
    // and a timed one in UTC, written on Seoul's clock.
    let ics = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Example//EN\r\n\
        BEGIN:VEVENT\r\nUID:a@example.com\r\nDTSTART;VALUE=DATE:20300301\r\nSUMMARY:Independence Movement Day\r\nEND:VEVENT\r\n\
        BEGIN:VEVENT\r\nUID:b@example.com\r\nDTSTART;VALUE=DATE:20301225\r\nRRULE:FREQ=YEARLY;COUNT=3\r\nSUMMARY:Christmas Day\r\nEND:VEVENT\r\n\
        BEGIN:VEVENT\r\nUID:c@example.com\r\nDTSTART:20300601T000000Z\r\nDTEND:20300601T030000Z\r\nSUMMARY:Maintenance\r\nEND:VEVENT\r\n\
        END:VCALENDAR\r\n";
    let imported = client
        .post_form(
            "/shedlock/act/calendars/kr-holidays/import",
            &[("ics", &form(ics)), ("until", "2033-12-31")],
            None,
        )
        .await;
    let (failed, said) = client.flash_at(imported.location.as_deref().unwrap()).await;
    assert!(
        !failed
            && said.starts_with(
                "imported 5 entries into &quot;kr-holidays&quot;: 5 new; it has 7 entries"
            ),
        "{said}"
    );
    // A file the parser refuses: the page says where.
    let refused = client
        .post_form(
            "/shedlock/act/calendars/kr-holidays/import",
            &[(
                "ics",
                &form("BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nEND:VCALENDAR\r\n"),
            )],
            None,
        )
        .await;
    let (failed, said) = client.flash_at(refused.location.as_deref().unwrap()).await;
    assert!(
        failed && said.contains("the iCalendar parser refused the file at line 3 (END:VCALENDAR)"),
        "{said}"
    );
    // Removed by its button's form.
    let removed = client
        .post_form(
            "/shedlock/act/calendars/kr-holidays/remove",
            &[("entries", "2031-12-25")],
            None,
        )
        .await;
    let (failed, said) = client.flash_at(removed.location.as_deref().unwrap()).await;
    assert!(
        !failed && said.starts_with("removed 1 of the 1 entries given"),
        "{said}"
    );

    // The API: the calendar's JSON, then one created, added to, removed from and imported into.
    let shown = client.get("/shedlock/api/v1/calendars/kr-holidays").await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    let shown = shown.json();
    assert_eq!(shown["name"], "kr-holidays");
    assert_eq!(shown["time_zone"], "Asia/Seoul");
    assert_eq!(shown["jobs"], json!([]));
    let entries = shown["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 6, "{shown:#}");
    assert!(
        entries.contains(&json!({ "entry": excluded.to_string(), "label": "Founding Day" })),
        "{shown:#}"
    );
    assert!(
        entries.contains(&json!({ "entry": range, "label": "Half day" })),
        "{shown:#}"
    );
    assert!(
        entries.contains(
            &json!({ "entry": "2030-06-01T09:00..2030-06-01T12:00", "label": "Maintenance" })
        ),
        "{shown:#}"
    );
    let made = client
        .post_api(
            "/shedlock/api/v1/calendars",
            json!({ "name": "freeze", "time_zone": "Europe/Berlin", "entries": ["2030-12-24..2030-12-26"] }),
        )
        .await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.body);
    assert_eq!(
        made.json()["calendar"]["entries"][0]["entry"],
        "2030-12-24..2030-12-26"
    );
    let added = client
        .post_api(
            "/shedlock/api/v1/calendars/freeze/add",
            json!({ "entries": ["2030-12-31"], "label": "New Year's Eve" }),
        )
        .await
        .json();
    assert_eq!(
        (added["result"].as_str(), added["added"].as_u64()),
        (Some("added"), Some(1)),
        "{added:#}"
    );
    let removed = client
        .post_api(
            "/shedlock/api/v1/calendars/freeze/remove",
            json!({ "entries": ["2030-12-31"] }),
        )
        .await
        .json();
    assert_eq!(removed["removed"], 1, "{removed:#}");
    let imported = client
        .post_api(
            "/shedlock/api/v1/calendars/freeze/import",
            json!({ "ics": ics, "until": "2031-12-31T00:00:00Z" }),
        )
        .await
        .json();
    assert_eq!(
        (imported["given"].as_u64(), imported["added"].as_u64()),
        (Some(4), Some(4)),
        "{imported:#}"
    );
    let listed = client.get("/shedlock/api/v1/calendars").await.json();
    let names: Vec<&str> = listed["calendars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["freeze", "kr-holidays"], "{listed:#}");
    // Bad input through the API: a status and the problem named.
    for (path, body, status, says) in [
        (
            "/shedlock/api/v1/calendars/freeze/add",
            json!({ "entries": ["2030-02-30"] }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "entry \\\"2030-02-30\\\": \\\"2030-02-30\\\" is not a day",
        ),
        (
            "/shedlock/api/v1/calendars/freez/add",
            json!({ "entries": ["2030-12-30"] }),
            StatusCode::NOT_FOUND,
            "did you mean \\\"freeze\\\"?",
        ),
        (
            "/shedlock/api/v1/calendars",
            json!({ "name": "freeze", "time_zone": "UTC" }),
            StatusCode::CONFLICT,
            "calendar \\\"freeze\\\" already exists",
        ),
        (
            "/shedlock/api/v1/calendars",
            json!({ "name": "other", "time_zone": "Europe/Berln" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "did you mean \\\"Europe/Berlin\\\"?",
        ),
        (
            "/shedlock/api/v1/calendars/freeze/import",
            json!({ "ics": "hello" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not an iCalendar file",
        ),
        (
            "/shedlock/api/v1/jobs/dash-nightly/reschedule",
            json!({ "exclude": ["freez"] }),
            StatusCode::NOT_FOUND,
            "did you mean \\\"freeze\\\"?",
        ),
        (
            "/shedlock/api/v1/jobs/dash-nightly/reschedule",
            json!({ "max_runs": 3 }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "give a start instant too",
        ),
    ] {
        let answer = client.post_api(path, body.clone()).await;
        assert_eq!(answer.status, status, "{path} {body}: {}", answer.body);
        assert!(answer.body.contains(says), "{path} {body}: {}", answer.body);
    }
    let missing = client.get("/shedlock/calendars/kr-holidayz").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(
        missing
            .body
            .contains("did you mean &quot;kr-holidays&quot;?"),
        "{}",
        missing.body
    );

    // The job's page: no time rules; set from its form, then its next runs leave out the
    // excluded day's tick, naming the entry.
    let page = client.get("/shedlock/jobs/dash-nightly").await;
    assert!(
        page.body.contains("id=\"no-rules\"") && page.body.contains("id=\"set-rules\""),
        "{}",
        page.body
    );
    let set = client
        .post_form(
            "/shedlock/act/jobs/dash-nightly/reschedule",
            &[
                ("rules", "set"),
                ("exclude", "kr-holidays"),
                ("on_excluded", "skip"),
                ("start", ""),
                ("end", ""),
                ("max_runs", ""),
            ],
            None,
        )
        .await;
    let (failed, said) = client.flash_at(set.location.as_deref().unwrap()).await;
    assert!(
        !failed && said.contains("time rules exclude kr-holidays (skip)"),
        "{said}"
    );
    let stored = provider.schedule("dash-nightly").await.unwrap().unwrap();
    assert_eq!(
        stored.rules.as_deref(),
        Some("{\"exclude\":[\"kr-holidays\"]}")
    );
    let page = client.get("/shedlock/jobs/dash-nightly").await;
    assert!(
        page.body
            .contains("href=\"/shedlock/calendars/kr-holidays\"")
            && page.body.contains(&format!(
                "does not run: excluded by kr-holidays: {excluded} &quot;Founding Day&quot;"
            )),
        "{}",
        page.body
    );
    let job = client
        .get("/shedlock/api/v1/jobs/dash-nightly")
        .await
        .json();
    assert_eq!(
        job["time_rules"]["exclude"],
        json!(["kr-holidays"]),
        "{job:#}"
    );
    assert_eq!(job["time_rules"]["source"], "store", "{job:#}");
    let calendar_page = client.get("/shedlock/calendars/kr-holidays").await;
    assert!(
        calendar_page.body.contains("id=\"delete-refused\""),
        "{}",
        calendar_page.body
    );
    // Not deleted while the job excludes it (the form and the API), deleted after its rules
    // go back to the code's.
    let refused = client
        .post_form("/shedlock/act/calendars/kr-holidays/delete", &[], None)
        .await;
    let (failed, said) = client.flash_at(refused.location.as_deref().unwrap()).await;
    assert!(
        failed && said.contains("was not deleted: jobs exclude it (dash-nightly)"),
        "{said}"
    );
    let refused = client
        .post_api("/shedlock/api/v1/calendars/kr-holidays/delete", json!({}))
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    let back = client
        .post_api(
            "/shedlock/api/v1/jobs/dash-nightly/reschedule",
            json!({ "rules": "default" }),
        )
        .await;
    assert_eq!(back.status, StatusCode::OK, "{}", back.body);
    assert_eq!(back.json()["new"]["time_rules"], serde_json::Value::Null);
    let deleted = client
        .post_form("/shedlock/act/calendars/kr-holidays/delete", &[], None)
        .await;
    let location = deleted.location.clone().unwrap();
    assert!(
        location.starts_with("/shedlock/calendars?flash="),
        "{location}"
    );
    let (failed, said) = client.flash_at(&location).await;
    assert!(
        !failed
            && said
                .starts_with("deleted calendar &quot;kr-holidays&quot; (6 entries in Asia/Seoul)"),
        "{said}"
    );
    assert_eq!(
        client
            .get("/shedlock/api/v1/calendars/kr-holidays")
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // Each change recorded, with who and from where.
    let rows = provider
        .runs(
            &RunQuery::latest(50)
                .outcome(RunOutcome::Operator)
                .name("shedlock.calendar.kr-holidays"),
        )
        .await
        .unwrap();
    let said: Vec<&str> = rows
        .iter()
        .rev()
        .filter_map(|r| r.error.as_deref())
        .collect();
    assert_eq!(said.len(), 5, "{said:#?}");
    assert!(
        said[0].starts_with("created calendar kr-holidays in Asia/Seoul with 1 entries"),
        "{said:#?}"
    );
    assert!(
        said[4].starts_with("deleted calendar kr-holidays"),
        "{said:#?}"
    );
    assert!(
        said.iter().all(|s| s.ends_with("(from 127.0.0.1)")),
        "{said:#?}"
    );
    db.teardown().await;
}

/// Issue 50, point 4: the attention view lists every promise broken now (an open alert, the
/// ledger never swept) and each job's record over 24 h and 7 d from the ledger: its share of
/// due ticks that succeeded, its missed ticks, its start lateness; the same as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_what_needs_attention_sqlite() {
    use chrono::{TimeDelta, Utc};
    use shedlock::history::{NewRun, RunOutcome};
    use shedlock_suite::TestDb;
    let Some(db) = shedlock_suite::Sqlite::setup().await else {
        return;
    };
    let provider = db.provider();
    let runs = <shedlock_suite::Sqlite as TestDb>::run_store(&provider).unwrap();
    let now = Utc::now();
    // sync: 3 ticks succeeded (each started 2 s after its tick), 1 missed.
    for _ in 1..=3 {
        let tick = Utc::now() - TimeDelta::seconds(2);
        let id = runs
            .record_run(&NewRun::new(
                "sync",
                "sync",
                Some(tick),
                RunOutcome::Running,
            ))
            .await
            .unwrap();
        runs.finish_run(id, RunOutcome::Executed, None)
            .await
            .unwrap();
    }
    runs.record_run(&NewRun::new(
        "sync",
        "sync",
        Some(now - TimeDelta::seconds(50)),
        RunOutcome::Missed,
    ))
    .await
    .unwrap();
    runs.record_run(
        &NewRun::new(
            "sync",
            "missed",
            Some(now - TimeDelta::seconds(50)),
            RunOutcome::AlertSent,
        )
        .error(Some("raised: 1 due tick claimed by no instance".into())),
    )
    .await
    .unwrap();
    let mut client = cases::Client::new(
        provider.clone().into(),
        shedlock_web::Options::new(shedlock_web::Auth::None),
    );
    let page = client.get("/shedlock/attention").await;
    assert_eq!(page.status, axum::http::StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("id=\"problems\""), "{}", page.body);
    assert!(
        page.body.contains("1 due tick claimed by no instance")
            && page.body.contains("data-kind=\"ledger\""),
        "the open alert and the ledger never swept: {}",
        page.body
    );
    assert!(
        page.body.contains("75.0 %"),
        "3 of 4 due ticks succeeded: {}",
        page.body
    );
    let api = client.get("/shedlock/api/v1/attention").await.json();
    let week = &api["jobs"]["sync"]["week"];
    assert_eq!(week["due"], 4, "{api}");
    assert_eq!(week["missed"], 1, "{api}");
    assert_eq!(week["succeeded"], 3, "{api}");
    let median = week["lateness_median_ms"].as_u64().unwrap();
    assert!(
        (1_900..10_000).contains(&median),
        "started about 2 s late: {api}"
    );
    let kinds: Vec<&str> = api["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ledger", "missed"], "{api}");
    db.teardown().await;
}
