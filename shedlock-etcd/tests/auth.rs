//! Issue 46, point 6: credentials on an etcd cluster with authentication on.
//!
//! The test starts a private one-member etcd on loopback ports of its own (a data folder of its
//! own), adds the user `root` with the `root` role and turns authentication on, then builds
//! providers against it:
//!
//! - without credentials, `build()` reports that the cluster wants some (before, it connected,
//!   since etcd's `Status` answers anyone, and every lock failed later with "user name is
//!   empty");
//! - with the user and password in the endpoint (`http://root:PASSWORD@host:port`), they are
//!   used: the provider takes and releases a lock (before, the client ignored them);
//! - with a wrong password, `build()` fails as [`Error::Auth`] without the password;
//! - endpoints naming different credentials, or a user without a password, are refused.
//!
//! And every value that carries the password (the target, the builder, the provider, each
//! error), printed with `{:?}` and `{}` where it has `Display`, holds no secret.
#![allow(missing_docs)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use shedlock::{Error, LockConfiguration, LockProvider};
use shedlock_etcd::{EtcdLockProvider, EtcdTarget};

const PASSWORD: &str = "etcd-topsecret-pw";

/// A one-member etcd of the test's own, killed when dropped.
struct PrivateEtcd {
    _dir: tempfile::TempDir,
    child: Child,
    url: String,
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl PrivateEtcd {
    /// Starts the member and waits (up to 30 s) until it answers.
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("http://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let binary = std::env::var("SHEDLOCK_ETCD_BINARY").unwrap_or_else(|_| "etcd".to_owned());
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let child = Command::new(&binary)
            .args(["--name", "auth"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("auth={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{binary} does not start ({e}): install it with `scripts/etcd install`")
            });
        let etcd = Self {
            _dir: dir,
            child,
            url,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut client) = Client::connect([etcd.url.as_str()], None).await
                && client.status().await.is_ok()
            {
                return etcd;
            }
            assert!(
                Instant::now() < deadline,
                "the private etcd at {} did not answer within 30 s",
                etcd.url
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `etcdctl user add root`, its `root` role, `etcdctl auth enable`.
    async fn enable_auth(&self) {
        let mut client = Client::connect([self.url.as_str()], None).await.unwrap();
        client.user_add("root", PASSWORD, None).await.unwrap();
        client.role_add("root").await.unwrap();
        client.user_grant_role("root", "root").await.unwrap();
        client.auth_enable().await.unwrap();
    }

    /// The endpoint with `user:password@` in it.
    fn with_userinfo(&self, userinfo: &str) -> String {
        self.url
            .replacen("http://", &format!("http://{userinfo}@"), 1)
    }
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD) && !text.contains("wrong-pw-1234"),
        "{what} shows a secret: {text}"
    );
}

fn error_texts(error: &Error) -> String {
    let mut text = format!("{error} {error:?}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(" {cause} {cause:?}"));
        source = cause.source();
    }
    text
}

async fn build(endpoints: &str) -> shedlock::Result<EtcdLockProvider> {
    EtcdLockProvider::builder(endpoints)
        .table_name(format!("auth-{}", std::process::id()))
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_credentials_in_the_url_are_used_and_missing_ones_are_named() {
    let etcd = PrivateEtcd::start().await;
    etcd.enable_auth().await;

    // No credentials: named as missing when the provider is built, not at the first lock.
    let error = build(&etcd.url)
        .await
        .expect_err("a cluster with authentication on wants credentials");
    assert!(matches!(error, Error::Auth { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("authentication on and no user was given")
            && text.contains("http://user:password@host:2379"),
        "{text}"
    );

    // A wrong password: refused as credentials, the password not shown.
    let error = build(&etcd.with_userinfo("root:wrong-pw-1234"))
        .await
        .expect_err("a wrong password is refused");
    assert!(matches!(error, Error::Auth { .. }), "{error:?}");
    assert_no_secret("a refused password's error", &error_texts(&error));

    // Different credentials in two endpoints, and a user without a password: refused.
    let two = format!(
        "{},{}",
        etcd.with_userinfo(&format!("root:{PASSWORD}")),
        etcd.with_userinfo("root:wrong-pw-1234")
    );
    for (endpoints, says) in [
        (two.as_str(), "name different credentials"),
        (&etcd.with_userinfo("root"), "without a password"),
    ] {
        let error = build(endpoints).await.expect_err(endpoints);
        assert!(matches!(error, Error::InvalidSetting { .. }), "{error:?}");
        assert!(error.to_string().contains(says), "{error}");
        assert_no_secret("a refused endpoint's error", &error_texts(&error));
    }

    // The credentials in the URL are used: a lock is taken and released.
    let endpoint = etcd.with_userinfo(&format!("root:{PASSWORD}"));
    let builder =
        EtcdLockProvider::builder(&endpoint).table_name(format!("auth-{}", std::process::id()));
    assert_no_secret("the builder's Debug", &format!("{builder:?}"));
    let provider = builder
        .build()
        .await
        .expect("the URL's credentials are used");
    let cfg = LockConfiguration::new("auth_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let guard = provider
        .lock(&cfg)
        .await
        .unwrap()
        .expect("the lock is free");
    assert!(guard.unlock().await.unwrap());
    assert_no_secret("the provider's Debug", &format!("{provider:?}"));
    assert_no_secret("the provider's address", provider.address());

    // The client gets the endpoint without its user-info.
    assert_eq!(
        EtcdTarget::new(&endpoint).endpoints(),
        std::slice::from_ref(&etcd.url)
    );
    // A target whose client options carry the user: its Debug does not show them.
    let mut target = EtcdTarget::new(&etcd.url);
    target.options(ConnectOptions::new().with_user("root", PASSWORD));
    assert_no_secret("the target's Debug", &format!("{target:?}"));
    let provider = shedlock::settings::ProviderBuilder::new(target)
        .table_name(format!("auth-{}", std::process::id()))
        .build()
        .await
        .expect("the options' user works too");
    assert!(provider.lock(&cfg).await.unwrap().is_some());
}
