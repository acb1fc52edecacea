//! Alerts delivered to an HTTP endpoint, signed as [Standard Webhooks](https://www.standardwebhooks.com)
//! sign them (feature `webhook`).
//!
//! Each alert is one `POST` of [`Alert::to_json`] with the headers `webhook-id` (`alert-<row
//! id>`: the same for every attempt, the receiver's idempotency key), `webhook-timestamp`
//! (Unix seconds) and `webhook-signature` (`v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`).
//! A 2xx answer delivers it; anything else, or no answer within the timeout, is tried again
//! after a backoff that doubles, until the attempts run out: the alert is then kept as a dead
//! letter (outcome `alert-undelivered`, the last failure in its text).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::alerts::Alert;
use crate::error::{Error, Result};

/// Where alerts go, and how hard each one is tried.
///
/// ```
/// use shedlock::scheduler::Webhook;
///
/// let hook = Webhook::new("http://127.0.0.1:9000/alerts", "whsec_c2VjcmV0IGtleSBvZiB0aGUgaG9vaw==")?;
/// # Ok::<(), shedlock::Error>(())
/// ```
#[derive(Clone)]
pub struct Webhook {
    url: reqwest::Url,
    key: Vec<u8>,
    attempts: u32,
    backoff: Duration,
    timeout: Duration,
    client: reqwest::Client,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret; the URL's password and query too.
        let mut url = self.url.clone();
        let _ = url.set_password(None);
        url.set_query(None);
        f.debug_struct("Webhook")
            .field("url", &url.as_str())
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// Alerts to `url` (http or https), signed with `secret`: a Standard Webhooks secret
    /// (`whsec_` and the key in base64), or the key's own bytes. 5 attempts, 1 s backoff
    /// doubling, 10 s timeout each.
    pub fn new(url: &str, secret: &str) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidWebhook { reason };
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            invalid(format!(
                "its URL {:?} does not parse: {e}",
                crate::secret::mask_url(url)
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "its URL must be http or https, not {:?}",
                parsed.scheme()
            )));
        }
        let key = match secret.strip_prefix("whsec_") {
            Some(encoded) => STANDARD.decode(encoded).map_err(|e| {
                invalid(format!(
                    "its secret starts with whsec_ and the rest is not base64: {e}"
                ))
            })?,
            None => secret.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err(invalid("its secret is empty".to_owned()));
        }
        Ok(Self {
            url: parsed,
            key,
            attempts: 5,
            backoff: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            client: reqwest::Client::new(),
        })
    }

    /// How many times an alert is tried before it is kept as a dead letter (at least 1), and
    /// the first wait between two tries (doubled each time, at most a minute).
    #[must_use]
    pub fn attempts(mut self, attempts: u32, backoff: Duration) -> Self {
        self.attempts = attempts.max(1);
        self.backoff = backoff;
        self
    }

    /// How long one try waits for the answer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `webhook-signature` header's value for `id`, `timestamp` and `body`.
    pub fn signature(&self, id: &str, timestamp: i64, body: &str) -> String {
        sign(&self.key, id, timestamp, body)
    }

    /// Tries `alert` until it is delivered or the attempts run out (the last failure).
    pub(crate) async fn deliver(&self, alert: &Alert) -> std::result::Result<(), String> {
        let id = format!("alert-{}", alert.id);
        let body = alert.to_json();
        let mut wait = self.backoff;
        let mut last = String::new();
        for attempt in 1..=self.attempts {
            let timestamp = chrono::Utc::now().timestamp();
            let sent = self
                .client
                .post(self.url.clone())
                .timeout(self.timeout)
                .header("content-type", "application/json")
                .header("webhook-id", &id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", self.signature(&id, timestamp, &body))
                .body(body.clone())
                .send()
                .await;
            last = match sent {
                Ok(answer) if answer.status().is_success() => return Ok(()),
                Ok(answer) => format!(
                    "attempt {attempt}: the endpoint answered {}",
                    answer.status()
                ),
                Err(error) => format!("attempt {attempt}: {}", error.without_url()),
            };
            tracing::debug!(alert = alert.id, %last, "an alert's delivery failed; tried again");
            if attempt < self.attempts {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(60));
            }
        }
        Err(format!(
            "undelivered after {} attempts; {last}",
            self.attempts
        ))
    }
}

/// `v1,` and the base64 HMAC-SHA256 of `<id>.<timestamp>.<body>` under `key`.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        // HMAC takes a key of any length: never reached.
        return String::new();
    };
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_standard_webhooks() {
        // The example of the Standard Webhooks specification's reference libraries.
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let err = Webhook::new("ftp://x", "k").unwrap_err().to_string();
        assert!(err.contains("http or https"), "{err}");
        let err = Webhook::new("http://x", "whsec_!!")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not base64"), "{err}");
    }
}
