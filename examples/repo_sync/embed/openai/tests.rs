//! The HTTP embedder against the test server: batching, order, retries, timeouts, bad answers.

use super::*;
use std::time::Instant;

use crate::http::test_server::{Reply, Seen, TestServer, serve, unused_port};

/// The texts of an embeddings request.
trait Inputs {
    fn inputs(&self) -> Vec<String>;
}

impl Inputs for Seen {
    fn inputs(&self) -> Vec<String> {
        serde_json::from_value(self.json()["input"].clone()).unwrap()
    }
}

/// One-hot vector of dimension `dim` at the number in an input like "t3".
fn one_hot(input: &str, dim: usize) -> Vec<f32> {
    let i: usize = input.trim_start_matches('t').parse().unwrap();
    let mut v = vec![0.0; dim];
    v[i % dim] = 1.0;
    v
}

/// A success body for the request's inputs, `data` in reverse index order.
fn embeddings_reply(request: &Seen, dim: usize) -> Reply {
    let data: Vec<serde_json::Value> = request
        .inputs()
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| serde_json::json!({"object": "embedding", "index": i, "embedding": one_hot(t, dim)}))
        .collect();
    Reply::Json(
        200,
        vec![],
        serde_json::json!({"object": "list", "data": data, "model": "m"}),
    )
}

fn inputs(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t{i}")).collect()
}

fn embedder(server: &TestServer) -> HttpEmbedder {
    HttpEmbedder::new(&server.base_url, "test-model").unwrap()
}

#[test]
fn url_validation() {
    let e = HttpEmbedder::new("http://127.0.0.1:8080", "m").unwrap();
    assert_eq!(e.url(), "http://127.0.0.1:8080/v1/embeddings");
    assert_eq!(e.name(), "http:m");
    assert_eq!(Embedder::dimension(&e), 0);
    let e = HttpEmbedder::new("http://host/prefix/", "m").unwrap();
    assert_eq!(e.url(), "http://host/prefix/v1/embeddings");
    let e = HttpEmbedder::new("http://localhost:11434/v1/", "m").unwrap();
    assert_eq!(e.url(), "http://localhost:11434/v1/embeddings");

    let err = HttpEmbedder::new("https://api.openai.com", "m").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("https") && msg.contains("TLS") && msg.contains("http://"),
        "{msg}"
    );
    for bad in ["ftp://host", "not a url", "http://", "http://h/?q=1", ""] {
        let err = HttpEmbedder::new(bad, "m").unwrap_err();
        assert!(
            matches!(err, EmbedError::InvalidConfig { .. }),
            "{bad}: {err}"
        );
    }
    assert!(HttpEmbedder::new("http://h", " ").is_err());
}

#[test]
fn debug_hides_the_api_key() {
    let e = HttpEmbedder::new("http://h", "m")
        .unwrap()
        .api_key(Some("sk-secret".into()));
    let debug = format!("{e:?}");
    assert!(
        !debug.contains("sk-secret") && debug.contains("redacted"),
        "{debug}"
    );
}

#[tokio::test]
async fn batches_keep_order_even_when_data_is_out_of_order() {
    let server = serve(|_, r| embeddings_reply(r, 8)).await;
    let e = embedder(&server).batch_size(2);
    let out = e.embed(&inputs(5)).await.unwrap();
    assert_eq!(
        out,
        (0..5)
            .map(|i| one_hot(&format!("t{i}"), 8))
            .collect::<Vec<_>>()
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let batches: Vec<Vec<String>> = requests.iter().map(Seen::inputs).collect();
    assert_eq!(
        batches,
        vec![vec!["t0", "t1"], vec!["t2", "t3"], vec!["t4"]]
    );
    for r in &requests {
        assert!(
            r.head.starts_with("POST /v1/embeddings HTTP/1.1"),
            "{}",
            r.head
        );
        assert_eq!(r.json()["model"], "test-model");
        assert_eq!(r.header("authorization"), None);
    }
    assert_eq!(Embedder::dimension(&e), 8, "learned from the response");
    // Nothing to embed: no request.
    assert!(e.embed(&[]).await.unwrap().is_empty());
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn vectors_are_normalized_on_receipt() {
    let server = serve(|_, _| {
        Reply::Json(
            200,
            vec![],
            serde_json::json!({"data": [{"index": 0, "embedding": [3.0, 4.0]}, {"embedding": [0.0, 0.0]}]}),
        )
    })
    .await;
    // A zero vector stays zero: it scores 0 against every other (no NaN), so it is kept.
    let out = embedder(&server).embed(&inputs(2)).await.unwrap();
    assert_eq!(out, vec![vec![0.6, 0.8], vec![0.0, 0.0]]);
    // The largest finite components normalize to finite values.
    let server = serve(|_, _| {
        Reply::Json(
            200,
            vec![],
            serde_json::json!({"data": [{"embedding": [3.4e38, 3.4e38, -3.4e38, 1e-45]}]}),
        )
    })
    .await;
    let out = embedder(&server).embed(&inputs(1)).await.unwrap();
    assert!(out[0].iter().all(|x| x.is_finite()), "{out:?}");
}

/// A component beyond `f32` (`1e39` reads as infinity, and normalizing gave NaN) is refused;
/// the error names the input by its position among the texts given and its beginning.
/// Nothing is returned for the others.
#[tokio::test]
async fn vectors_that_cannot_be_scored_are_refused_naming_the_input() {
    for (bad, says) in [
        (serde_json::json!([1e39, 1.0]), "not a finite number"),
        (serde_json::json!([1.0, -1e39]), "not a finite number"),
    ] {
        let server = serve(move |_, r| {
            let data: Vec<serde_json::Value> = r
                .inputs()
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let embedding = if t == "t2" {
                        bad.clone()
                    } else {
                        serde_json::json!([1.0, 0.0])
                    };
                    serde_json::json!({"index": i, "embedding": embedding})
                })
                .collect();
            Reply::Json(200, vec![], serde_json::json!({ "data": data }))
        })
        .await;
        // Batches of two: "t2" is the first input of the second request.
        let err = embedder(&server)
            .batch_size(2)
            .embed(&inputs(3))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(says) && msg.contains("input 2") && msg.contains("\"t2\""),
            "{msg}"
        );
        assert_eq!(server.requests().len(), 2, "not retried");
    }
}

/// A response larger than the limit (256 KiB per input) is refused naming the limit: at once
/// when its `Content-Length` says so, without reading the body, and otherwise when reading
/// passes the limit, the connection then dropped rather than drained. Neither is retried.
#[tokio::test]
async fn a_response_over_the_limit_is_refused_without_reading_it_whole() {
    let server = serve(|_, _| Reply::Stall {
        len: 400_000_000,
        sent: 10,
    })
    .await;
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        embedder(&server)
            .timeout(Duration::from_secs(15))
            .embed(&inputs(1)),
    )
    .await
    .expect("refused from the headers")
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("400000000 bytes") && msg.contains("limit of 256 KiB"),
        "{msg}"
    );
    assert_eq!(server.requests().len(), 1, "not retried");

    // No Content-Length, and a body that never ends.
    let server = serve(|_, _| Reply::Endless).await;
    let err = tokio::time::timeout(
        Duration::from_secs(20),
        embedder(&server)
            .timeout(Duration::from_secs(15))
            .batch_size(4)
            .embed(&inputs(2)),
    )
    .await
    .expect("stops reading")
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("limit of 512 KiB"), "{msg}");
    assert_eq!(server.requests().len(), 1, "not retried");
    // The connection was dropped: the server's writes stop (waited for, up to 20 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = server.streamed();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server.streamed();
        if now == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server still streams: {now} bytes"
        );
        last = now;
    }
}

#[tokio::test]
async fn retries_503_then_succeeds() {
    let server = serve(|n, r| {
        if n < 2 {
            Reply::text(503, "overloaded")
        } else {
            embeddings_reply(r, 4)
        }
    })
    .await;
    let started = Instant::now();
    let out = embedder(&server).embed(&inputs(2)).await.unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(server.requests().len(), 3);
    // Backoff 200 ms then 400 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn gives_up_after_max_retries_naming_status_and_attempts() {
    let server = serve(|_, _| Reply::text(500, "boom")).await;
    let err = embedder(&server)
        .max_retries(1)
        .embed(&inputs(1))
        .await
        .unwrap_err();
    assert_eq!(server.requests().len(), 2);
    let msg = err.to_string();
    assert!(
        msg.contains("500") && msg.contains("2 attempt(s)") && msg.contains("boom"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("{}/v1/embeddings", server.base_url)),
        "{msg}"
    );
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let server = serve(|n, r| {
        if n == 0 {
            Reply::Json(
                429,
                vec![("Retry-After", "1".into())],
                serde_json::json!({"error": {"message": "slow down"}}),
            )
        } else {
            embeddings_reply(r, 4)
        }
    })
    .await;
    let started = Instant::now();
    embedder(&server).embed(&inputs(1)).await.unwrap();
    assert_eq!(server.requests().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_400_is_not_retried_and_names_the_server_message() {
    let server = serve(|_, _| {
        Reply::Json(
            400,
            vec![],
            serde_json::json!({"error": {"message": "input is too long", "type": "invalid_request_error"}}),
        )
    })
    .await;
    let err = embedder(&server).embed(&inputs(3)).await.unwrap_err();
    assert_eq!(server.requests().len(), 1);
    assert!(
        matches!(
            err,
            EmbedError::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("400 Bad Request") && msg.contains("input is too long"),
        "{msg}"
    );
}

#[tokio::test]
async fn timeouts_are_retried_then_reported() {
    let server = serve(|_, _| Reply::Hang).await;
    let started = Instant::now();
    let err = embedder(&server)
        .timeout(Duration::from_millis(300))
        .max_retries(2)
        .embed(&inputs(1))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, EmbedError::Timeout { attempts: 3, .. }),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 3);
    // 3 × 300 ms of waiting plus 200 + 400 ms of backoff.
    assert!(elapsed >= Duration::from_millis(1500), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("timed out") && msg.contains("3 attempt(s)"),
        "{msg}"
    );
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    let port = unused_port().await;
    let err = HttpEmbedder::new(&format!("http://127.0.0.1:{port}"), "m")
        .unwrap()
        .max_retries(1)
        .embed(&inputs(1))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, EmbedError::Transport { attempts: 2, .. }),
        "{err:?}"
    );
    assert!(msg.contains(&port.to_string()), "{msg}");
}

#[tokio::test]
async fn wrong_dimension_is_an_error() {
    let server = serve(|_, r| embeddings_reply(r, 8)).await;
    let err = embedder(&server)
        .dimension(4)
        .embed(&inputs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EmbedError::DimensionMismatch {
                expected: 4,
                got: 8,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1, "not retried");
    assert!(err.to_string().contains("dimension 8, expected 4"), "{err}");

    // Learned dimension: a later response of another length is refused too.
    let server = serve(|n, r| embeddings_reply(r, if n == 0 { 8 } else { 6 })).await;
    let e = embedder(&server);
    e.embed(&inputs(1)).await.unwrap();
    let err = e.embed(&inputs(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            EmbedError::DimensionMismatch {
                expected: 8,
                got: 6,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn malformed_responses_are_errors() {
    let server = serve(|n, r| match n {
        0 => Reply::text(200, "<html>not json</html>"),
        1 => Reply::Json(200, vec![], serde_json::json!({"data": []})),
        _ => {
            let one = one_hot(&r.inputs()[0], 4);
            Reply::Json(
                200,
                vec![],
                serde_json::json!({"data": [{"index": 0, "embedding": one}, {"index": 0, "embedding": one}]}),
            )
        }
    })
    .await;
    let e = embedder(&server);
    let err = e.embed(&inputs(2)).await.unwrap_err();
    assert!(err.to_string().contains("not json"), "{err}");
    let err = e.embed(&inputs(2)).await.unwrap_err();
    assert!(
        err.to_string().contains("0 embeddings for 2 inputs"),
        "{err}"
    );
    let err = e.embed(&inputs(2)).await.unwrap_err();
    assert!(err.to_string().contains("index 0 appears twice"), "{err}");
    assert_eq!(server.requests().len(), 3, "none retried");
}

#[tokio::test]
async fn authorization_header_when_an_api_key_is_set() {
    let server = serve(|_, r| embeddings_reply(r, 4)).await;
    embedder(&server)
        .api_key(Some("sk-test-123".into()))
        .embed(&inputs(1))
        .await
        .unwrap();
    embedder(&server)
        .api_key(None)
        .embed(&inputs(1))
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(
        requests[0].header("authorization").as_deref(),
        Some("Bearer sk-test-123")
    );
    assert_eq!(requests[1].header("authorization"), None);
}

#[tokio::test]
async fn a_password_in_the_url_is_never_shown() {
    for bad in ["ftp://u:topsecret@h", "http://u:topsecret@h/?key=topsecret"] {
        let err = HttpEmbedder::new(bad, "m").unwrap_err().to_string();
        assert!(!err.contains("topsecret") && err.contains("***"), "{err}");
    }
    let port = unused_port().await;
    let e = HttpEmbedder::new(&format!("http://u:topsecret@127.0.0.1:{port}"), "m")
        .unwrap()
        .max_retries(0);
    assert!(!format!("{e:?}").contains("topsecret"));
    let err = e.embed(&inputs(1)).await.unwrap_err().to_string();
    assert!(
        !err.contains("topsecret") && err.contains(&format!("u:***@127.0.0.1:{port}")),
        "{err}"
    );
}
