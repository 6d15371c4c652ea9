//! OpenAI-compatible embedder: `POST {base_url}/v1/embeddings`.
//!
//! Works with OpenAI and with the servers that copy its protocol (Ollama, vLLM, TEI,
//! llama.cpp, Voyage, …). Request `{"model", "input": [...], "dimensions"?}` with an optional
//! `Authorization: Bearer` key; the answer's `data[].embedding` are put back in request order
//! by their `index` and L2-normalised (not every server normalises).
//!
//! Failure policy, by [`engram_core::FaultSource`]:
//! - timeout (30 s per attempt), connection error, 408, 429 and 5xx are retried, up to 3
//!   attempts in all, waiting `Retry-After` (seconds) when the server sends it, else 0.5 s
//!   then 1 s; when attempts run out → `Runtime`. A `Retry-After` longer than
//!   [`OpenAiSettings::max_retry_after`] is not waited for → `Runtime` at once.
//! - any other 4xx (400, 401, 403, 404, 422, …) → `User` at once, with the server's message:
//!   a wrong key, model name or URL does not get better by retrying.
//! - a 2xx whose body is not the expected JSON, or has the wrong number of vectors or a wrong
//!   dimension → `Runtime`.
//!
//! `dims()`: the configured `dims` (sent as `dimensions`), or else the size learned by one
//! probe request when the embedder is built ([`OpenAiEmbedder::connect`]).
//!
//! `model_id()`: `openai:<model>`, or `openai:<model>@<dims>` when `dims` is configured.

use std::time::Duration;

use async_trait::async_trait;
use engram_core::embed::{EmbedError, Embedder, normalize};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

/// How to reach an OpenAI-compatible endpoint, and the retry policy.
#[derive(Clone)]
pub struct OpenAiSettings {
    /// With or without a trailing `/v1`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>`; never printed.
    pub api_key: Option<String>,
    /// Requested vector size (`dimensions`), or `None` for the model's own.
    pub dims: Option<usize>,
    /// Per-attempt timeout, including reading the body. Default 30 s.
    pub timeout: Duration,
    /// Attempts per request, the first included. Default 3.
    pub max_attempts: u32,
    /// First wait between attempts when the server gives no `Retry-After`; doubled each time.
    /// Default 500 ms.
    pub backoff: Duration,
    /// Longest `Retry-After` that is waited for. Default 60 s.
    pub max_retry_after: Duration,
    /// Texts per request. Default 128.
    pub batch_size: usize,
}

impl std::fmt::Debug for OpenAiSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dims", &self.dims)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .field("max_retry_after", &self.max_retry_after)
            .field("batch_size", &self.batch_size)
            .finish()
    }
}

impl OpenAiSettings {
    /// Settings with the default policy (30 s timeout, 3 attempts, 0.5 s backoff).
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
        dims: Option<usize>,
    ) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key,
            dims,
            timeout: Duration::from_secs(30),
            max_attempts: 3,
            backoff: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(60),
            batch_size: 128,
        }
    }

    /// `{base_url}/v1/embeddings`, without doubling a `/v1` the base URL already has.
    pub fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/embeddings")
        } else {
            format!("{base}/v1/embeddings")
        }
    }
}

/// An embedder backed by an OpenAI-compatible HTTP endpoint. Cheap to clone.
#[derive(Clone)]
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    endpoint: String,
    settings: OpenAiSettings,
    dims: usize,
    model_id: String,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("endpoint", &self.endpoint)
            .field("model_id", &self.model_id)
            .field("dims", &self.dims)
            .field("settings", &self.settings)
            .finish()
    }
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    index: Option<usize>,
}

/// What one attempt ended with.
enum Attempt {
    Done(Vec<Vec<f32>>),
    /// Worth retrying; `after` is the server's `Retry-After`.
    Retry {
        message: String,
        after: Option<Duration>,
    },
    Fail(EmbedError),
}

/// Install ring as rustls' process-wide crypto provider (reqwest is built without one).
/// Another provider already installed is fine.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The server's own words from an error body: `error.message`, `error` (string), `message`
/// or `detail`, else the body itself (cut to 300 chars).
fn server_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| {
        let pick = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        v.get("error")
            .and_then(|e| e.get("message").and_then(pick).or_else(|| pick(e)))
            .or_else(|| v.get("message").and_then(pick))
            .or_else(|| v.get("detail").and_then(pick))
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = value.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

impl OpenAiEmbedder {
    /// An embedder whose `dims` is configured: no network access here.
    pub fn with_known_dims(settings: OpenAiSettings) -> Result<Self, EmbedError> {
        let dims = settings.dims.ok_or_else(|| {
            EmbedError::bug("openai embedder: with_known_dims needs settings.dims")
        })?;
        Self::build(settings, dims)
    }

    /// Build the embedder; when `dims` is not configured, learn it with one probe request.
    pub async fn connect(settings: OpenAiSettings) -> Result<Self, EmbedError> {
        if settings.dims.is_some() {
            return Self::with_known_dims(settings);
        }
        // dims 0 = not known yet: the probe's answer is not checked against it.
        let probe = Self::build(settings, 0)?;
        let vectors = probe.embed_batch(&["dimension probe".to_owned()]).await?;
        let dims = vectors.first().map(Vec::len).unwrap_or(0);
        if dims == 0 {
            return Err(EmbedError::runtime(format!(
                "openai embedder: {} returned an empty embedding for the probe",
                probe.endpoint
            )));
        }
        Ok(Self { dims, ..probe })
    }

    /// [`Self::connect`] for synchronous callers: runs on a dedicated thread with its own
    /// single-threaded runtime (so it also works inside a tokio runtime, blocking the calling
    /// thread for the probe). The returned embedder gets a fresh HTTP client, so it carries no
    /// connection of the probe's runtime.
    pub fn connect_blocking(settings: OpenAiSettings) -> Result<Self, EmbedError> {
        if settings.dims.is_some() {
            return Self::with_known_dims(settings);
        }
        let for_probe = settings.clone();
        let probed = std::thread::Builder::new()
            .name("engram-embed-probe".to_owned())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| EmbedError::runtime(format!("openai embedder: runtime: {e}")))?;
                rt.block_on(Self::connect(for_probe)).map(|e| e.dims)
            })
            .map_err(|e| EmbedError::runtime(format!("openai embedder: probe thread: {e}")))?
            .join()
            .map_err(|_| EmbedError::bug("openai embedder: probe thread panicked"))??;
        let mut embedder = Self::build(settings, probed)?;
        embedder.dims = probed;
        Ok(embedder)
    }

    fn build(settings: OpenAiSettings, dims: usize) -> Result<Self, EmbedError> {
        let base = settings.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(EmbedError::user(format!(
                "openai embedder: base URL {base:?} must start with http:// or https://"
            )));
        }
        if settings.model.trim().is_empty() {
            return Err(EmbedError::user("openai embedder: no model name configured"));
        }
        if settings.dims == Some(0) {
            return Err(EmbedError::user("openai embedder: dims must be positive"));
        }
        if settings.max_attempts == 0 || settings.batch_size == 0 {
            return Err(EmbedError::user(
                "openai embedder: max_attempts and batch_size must be positive",
            ));
        }
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .build()
            .map_err(|e| EmbedError::runtime(format!("openai embedder: HTTP client: {e}")))?;
        let model_id = match settings.dims {
            Some(d) => format!("openai:{}@{d}", settings.model),
            None => format!("openai:{}", settings.model),
        };
        Ok(Self { client, endpoint: settings.endpoint(), settings, dims, model_id })
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One request for `texts` (at most `batch_size`), with the retry policy.
    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut last = String::new();
        for attempt in 1..=self.settings.max_attempts {
            match self.attempt(texts).await {
                Attempt::Done(v) => return Ok(v),
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry { message, after } => {
                    last = message;
                    if attempt == self.settings.max_attempts {
                        break;
                    }
                    if let Some(after) = after
                        && after > self.settings.max_retry_after
                    {
                        return Err(EmbedError::runtime(format!(
                            "openai embedder: {last}; the server asks to retry after {} s",
                            after.as_secs()
                        )));
                    }
                    let wait = after.unwrap_or(self.settings.backoff * 2u32.pow(attempt - 1));
                    tracing::warn!(
                        endpoint = %self.endpoint, attempt, wait_ms = wait.as_millis() as u64,
                        "embedding request failed, retrying: {last}"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
        Err(EmbedError::runtime(format!(
            "openai embedder: {last} (gave up after {} attempts)",
            self.settings.max_attempts
        )))
    }

    async fn attempt(&self, texts: &[String]) -> Attempt {
        let body =
            Request { model: &self.settings.model, input: texts, dimensions: self.settings.dims };
        let mut req = self.client.post(&self.endpoint).json(&body);
        if let Some(key) = &self.settings.api_key {
            req = req.bearer_auth(key);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                let what = if e.is_timeout() { "timed out" } else { "request failed" };
                return Attempt::Retry {
                    message: format!("{} {what}: {e}", self.endpoint),
                    after: None,
                };
            }
        };
        let status = resp.status();
        let after = retry_after(resp.headers());
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => {
                let what = if e.is_timeout() { "timed out reading the body" } else { "body" };
                return Attempt::Retry {
                    message: format!("{} {what}: {e}", self.endpoint),
                    after: None,
                };
            }
        };
        if status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || status.is_server_error()
        {
            return Attempt::Retry {
                message: format!("{} answered {status}: {}", self.endpoint, server_message(&text)),
                after,
            };
        }
        if !status.is_success() {
            return Attempt::Fail(EmbedError::user(format!(
                "openai embedder: {} answered {status}: {}",
                self.endpoint,
                server_message(&text)
            )));
        }
        Attempt::Done(match self.parse(&text, texts.len()) {
            Ok(v) => v,
            Err(e) => return Attempt::Fail(e),
        })
    }

    fn parse(&self, body: &str, expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let bad = |why: String| {
            EmbedError::runtime(format!(
                "openai embedder: bad answer from {}: {why}",
                self.endpoint
            ))
        };
        let resp: Response = serde_json::from_str(body).map_err(|e| {
            let mut start: String = body.chars().take(120).collect();
            if start.len() < body.len() {
                start.push('…');
            }
            bad(format!("{e} (body starts with {start:?})"))
        })?;
        if resp.data.len() != expected {
            return Err(bad(format!("{} embeddings for {expected} inputs", resp.data.len())));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
        for (pos, item) in resp.data.into_iter().enumerate() {
            let i = item.index.unwrap_or(pos);
            let slot = out.get_mut(i).ok_or_else(|| bad(format!("index {i} out of range")))?;
            if slot.is_some() {
                return Err(bad(format!("index {i} appears twice")));
            }
            let want = if self.dims > 0 { self.dims } else { item.embedding.len() };
            if item.embedding.is_empty() || item.embedding.len() != want {
                return Err(bad(format!(
                    "embedding {i} has {} dimensions, expected {want}",
                    item.embedding.len()
                )));
            }
            let mut v = item.embedding;
            normalize(&mut v);
            *slot = Some(v);
        }
        let out: Vec<Vec<f32>> = out.into_iter().flatten().collect();
        if let Some(first) = out.first()
            && out.iter().any(|v| v.len() != first.len())
        {
            return Err(bad("embeddings of different dimensions".to_owned()));
        }
        Ok(out)
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.settings.batch_size) {
            out.extend(self.embed_batch(chunk).await?);
        }
        Ok(out)
    }
}
