//! The OpenAI-compatible embedder against a real HTTP server on 127.0.0.1 speaking the
//! embeddings protocol, scripted per test.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use engram_core::FaultSource;
use engram_core::embed::Embedder;
use engram_providers::{EmbedderConfig, OpenAiEmbedder, OpenAiSettings, build_embedder};
use serde_json::{Value, json};

use crate::{assert_unit, cosine};

/// What the server does with the next request.
#[derive(Clone)]
enum Reply {
    /// A correct answer (data in reverse order, with `index`).
    Ok,
    /// This status, this body, and a `Retry-After` header when given.
    Status(u16, &'static str, Option<&'static str>),
    /// 200 with this raw body.
    Raw(&'static str),
    /// A correct answer with one vector too few.
    MissingOne,
    /// Sleep this long, then answer correctly.
    Slow(Duration),
}

#[derive(Default)]
struct Shared {
    script: VecDeque<Reply>,
    requests: Vec<(Option<String>, Value)>,
}

#[derive(Clone)]
struct Server {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

/// The vector the fake server gives `text` (native size 8, or `dims`): not normalised.
fn fake_vector(text: &str, dims: usize) -> Vec<f32> {
    let seed = text.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    (0..dims).map(|j| ((seed.wrapping_add(j as u32 * 13)) % 11) as f32 - 4.0).collect()
}

fn answer(body: &Value, drop_one: bool) -> Value {
    let dims = body.get("dimensions").and_then(Value::as_u64).unwrap_or(8) as usize;
    let inputs: Vec<String> =
        body["input"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": fake_vector(t, dims)}))
        .collect();
    data.reverse();
    if drop_one {
        data.pop();
    }
    json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}})
}

async fn embeddings(
    State(shared): State<Arc<Mutex<Shared>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let reply = {
        let mut s = shared.lock().unwrap();
        let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_owned());
        s.requests.push((auth, body.clone()));
        s.script.pop_front().unwrap_or(Reply::Ok)
    };
    match reply {
        Reply::Ok => Json(answer(&body, false)).into_response(),
        Reply::MissingOne => Json(answer(&body, true)).into_response(),
        Reply::Slow(d) => {
            tokio::time::sleep(d).await;
            Json(answer(&body, false)).into_response()
        }
        Reply::Raw(text) => {
            (StatusCode::OK, [("content-type", "application/json")], text).into_response()
        }
        Reply::Status(code, text, retry_after) => {
            let mut resp = (StatusCode::from_u16(code).unwrap(), text).into_response();
            if let Some(secs) = retry_after {
                resp.headers_mut().insert("retry-after", secs.parse().unwrap());
            }
            resp
        }
    }
}

impl Server {
    /// Start on its own thread and runtime, so a test may block its own thread on a probe.
    fn start(script: Vec<Reply>) -> Self {
        let shared = Arc::new(Mutex::new(Shared { script: script.into(), requests: Vec::new() }));
        let app = axum::Router::new()
            .route("/v1/embeddings", axum::routing::post(embeddings))
            .with_state(shared.clone());
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Self { addr, shared }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn script(&self, replies: Vec<Reply>) {
        self.shared.lock().unwrap().script.extend(replies);
    }

    fn requests(&self) -> Vec<(Option<String>, Value)> {
        self.shared.lock().unwrap().requests.clone()
    }
}

fn settings(server: &Server, dims: Option<usize>) -> OpenAiSettings {
    let mut s = OpenAiSettings::new(server.url(), "test-embed", Some("sk-secret-key".into()), dims);
    s.backoff = Duration::from_millis(50);
    s
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn probes_dims_then_embeds_in_order_and_normalised() {
    let server = Server::start(vec![]);
    for base in [
        server.url(),
        format!("{}/", server.url()),
        format!("{}/v1", server.url()),
        format!("{}/v1/", server.url()),
    ] {
        let cfg = EmbedderConfig::OpenAi {
            base_url: base.clone(),
            model: "test-embed".into(),
            api_key: Some("sk-secret-key".into()),
            dims: None,
        };
        // build_embedder blocks on the probe, even when called inside a runtime.
        let emb = build_embedder(&cfg).unwrap();
        assert_eq!(emb.dims(), 8, "{base}");
        assert_eq!(emb.model_id(), "openai:test-embed");
        let input = texts(&["alpha", "beta", "gamma"]);
        let out = emb.embed(&input).await.unwrap();
        assert_eq!(out.len(), 3);
        for (t, v) in input.iter().zip(&out) {
            assert_unit(v);
            assert!(cosine(v, &fake_vector(t, 8)) > 0.9999, "{t} came back out of order");
        }
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), 8, "one probe + one call per base URL");
    for (auth, body) in &reqs {
        assert_eq!(auth.as_deref(), Some("Bearer sk-secret-key"));
        assert_eq!(body["model"], "test-embed");
        assert!(body.get("dimensions").is_none());
        assert!(body["input"].is_array());
    }
    assert_eq!(reqs[1].1["input"], json!(["alpha", "beta", "gamma"]));
}

#[tokio::test]
async fn configured_dims_are_sent_and_checked() {
    let server = Server::start(vec![]);
    let emb = OpenAiEmbedder::connect(settings(&server, Some(5))).await.unwrap();
    assert!(server.requests().is_empty(), "no probe when dims is configured");
    assert_eq!(emb.dims(), 5);
    assert_eq!(emb.model_id(), "openai:test-embed@5");
    let out = emb.embed(&texts(&["one"])).await.unwrap();
    assert_eq!(out[0].len(), 5);
    assert_eq!(server.requests()[0].1["dimensions"], 5);

    // A server that ignores `dimensions` and returns its native 8: a Runtime fault.
    let mut s = settings(&server, Some(5));
    s.base_url = server.url();
    let emb = OpenAiEmbedder::with_known_dims(s).unwrap();
    server.script(vec![Reply::Raw(r#"{"data":[{"index":0,"embedding":[1,2,3,4,5,6,7,8]}]}"#)]);
    let err = emb.embed(&texts(&["one"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::Runtime);
    assert!(err.message.contains("8 dimensions"), "{}", err.message);
}

#[tokio::test]
async fn rate_limit_honours_retry_after_then_succeeds() {
    let server = Server::start(vec![]);
    let emb = OpenAiEmbedder::connect(settings(&server, Some(4))).await.unwrap();
    server.script(vec![Reply::Status(429, r#"{"error":{"message":"slow down"}}"#, Some("1"))]);
    let start = Instant::now();
    let out = emb.embed(&texts(&["a", "b"])).await.unwrap();
    let waited = start.elapsed();
    assert_eq!(out.len(), 2);
    assert_eq!(server.requests().len(), 2);
    assert!(waited >= Duration::from_millis(950), "Retry-After: 1 not honoured ({waited:?})");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

#[tokio::test]
async fn server_errors_are_retried_three_times_then_runtime() {
    let server = Server::start(vec![]);
    let emb = OpenAiEmbedder::connect(settings(&server, Some(4))).await.unwrap();
    server.script(vec![
        Reply::Status(503, "overloaded", None),
        Reply::Status(500, "boom", None),
        Reply::Status(502, "bad gateway", None),
    ]);
    let err = emb.embed(&texts(&["a"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::Runtime);
    assert!(err.message.contains("bad gateway"), "{}", err.message);
    assert!(err.message.contains("3 attempts"), "{}", err.message);
    assert_eq!(server.requests().len(), 3);

    // Two failures then success: recovered within the attempts.
    server.script(vec![Reply::Status(500, "boom", None), Reply::Status(503, "busy", None)]);
    assert_eq!(emb.embed(&texts(&["a"])).await.unwrap().len(), 1);
    assert_eq!(server.requests().len(), 6);
}

#[tokio::test]
async fn unauthorized_is_a_user_fault_without_retry() {
    let server = Server::start(vec![]);
    let emb = OpenAiEmbedder::connect(settings(&server, Some(4))).await.unwrap();
    server.script(vec![Reply::Status(
        401,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
        None,
    )]);
    let err = emb.embed(&texts(&["a"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("401"), "{}", err.message);
    assert!(err.message.contains("Incorrect API key provided"), "{}", err.message);
    assert!(!err.message.contains("sk-secret-key"), "{}", err.message);
    assert_eq!(server.requests().len(), 1, "a 401 must not be retried");

    for (code, body) in
        [(400, "bad input"), (403, "forbidden"), (404, "{\"error\":\"model not found\"}")]
    {
        server.script(vec![Reply::Status(code, body, None)]);
        let err = emb.embed(&texts(&["a"])).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::User, "{code}");
        assert!(
            err.message.contains(body.trim_start_matches("{\"error\":\"").trim_end_matches("\"}")),
            "{code}: {}",
            err.message
        );
    }
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn wrong_url_is_a_user_fault_at_build() {
    let server = Server::start(vec![]);
    let mut s = settings(&server, None);
    s.base_url = format!("{}/not-here", server.url());
    let err = OpenAiEmbedder::connect(s).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("404"), "{}", err.message);

    let mut s = settings(&server, Some(3));
    s.base_url = "localhost:1234".into();
    assert_eq!(OpenAiEmbedder::connect(s).await.unwrap_err().fault, FaultSource::User);
}

#[tokio::test]
async fn malformed_answers_are_runtime_faults() {
    let server = Server::start(vec![]);
    let emb = OpenAiEmbedder::connect(settings(&server, Some(4))).await.unwrap();
    server.script(vec![Reply::Raw("this is not json")]);
    let err = emb.embed(&texts(&["a"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::Runtime);
    assert!(err.message.contains("bad answer"), "{}", err.message);
    assert_eq!(server.requests().len(), 1);

    server.script(vec![Reply::MissingOne]);
    let err = emb.embed(&texts(&["a", "b"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::Runtime);
    assert!(err.message.contains("1 embeddings for 2 inputs"), "{}", err.message);

    server.script(vec![Reply::Raw(
        r#"{"data":[{"index":0,"embedding":[1,0,0,0]},{"index":0,"embedding":[0,1,0,0]}]}"#,
    )]);
    let err = emb.embed(&texts(&["a", "b"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::Runtime);
    assert!(err.message.contains("twice"), "{}", err.message);
}

#[tokio::test]
async fn timeouts_are_retried_then_runtime() {
    let server = Server::start(vec![]);
    let mut s = settings(&server, Some(4));
    s.timeout = Duration::from_millis(300);
    s.max_attempts = 2;
    let emb = OpenAiEmbedder::connect(s).await.unwrap();
    server.script(vec![Reply::Slow(Duration::from_secs(2)), Reply::Slow(Duration::from_secs(2))]);
    let start = Instant::now();
    let err = emb.embed(&texts(&["a"])).await.unwrap_err();
    assert_eq!(err.fault, FaultSource::Runtime);
    assert!(err.message.contains("timed out"), "{}", err.message);
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn large_inputs_are_split_into_batches() {
    let server = Server::start(vec![]);
    let mut s = settings(&server, Some(3));
    s.batch_size = 4;
    let emb = OpenAiEmbedder::connect(s).await.unwrap();
    let input: Vec<String> = (0..10).map(|i| format!("text {i}")).collect();
    let out = emb.embed(&input).await.unwrap();
    assert_eq!(out.len(), 10);
    for (t, v) in input.iter().zip(&out) {
        assert!(cosine(v, &fake_vector(t, 3)) > 0.9999);
    }
    let sizes: Vec<usize> =
        server.requests().iter().map(|(_, b)| b["input"].as_array().unwrap().len()).collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    assert!(emb.embed(&[]).await.unwrap().is_empty());
}

#[test]
fn debug_never_prints_the_key() {
    let cfg = EmbedderConfig::OpenAi {
        base_url: "http://127.0.0.1:9".into(),
        model: "m".into(),
        api_key: Some("sk-secret-key".into()),
        dims: Some(3),
    };
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("sk-secret-key") && shown.contains("redacted"), "{shown}");
    let emb = build_embedder(&cfg).unwrap();
    assert_eq!(emb.dims(), 3);
    let s = OpenAiSettings::new("http://x", "m", Some("sk-secret-key".into()), None);
    assert!(!format!("{s:?}").contains("sk-secret-key"));
    let e = OpenAiEmbedder::with_known_dims(OpenAiSettings { dims: Some(2), ..s }).unwrap();
    assert!(!format!("{e:?}").contains("sk-secret-key"));
}
