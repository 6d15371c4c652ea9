//! The HTTP part both LLM providers share: one JSON POST with a timeout, in-call retries and
//! failures classified by [`FaultSource`].
//!
//! Policy ([`HttpPolicy`], defaults in parentheses):
//! - each attempt has a timeout covering connect, send and reading the body (60 s);
//! - timeouts, connection errors, 408, 429 and 5xx are retried, up to `max_attempts` in all
//!   (3). The wait is the server's `Retry-After` (seconds, or OpenAI's `retry-after-ms`)
//!   when it sends one, else exponential backoff from `backoff` (0.5 s, 1 s, …) with ±25 %
//!   jitter (so that workers hitting the same limit do not retry in lockstep);
//! - a `Retry-After` longer than `max_retry_after` (30 s) is not waited for in the call: the
//!   call fails at once as `Runtime` with `retry_after` set, and the job runner (which can
//!   wait minutes without holding a worker) schedules the retry;
//! - when attempts run out → `Runtime`, with the last `Retry-After` if there was one;
//! - any other non-2xx (400, 401, 403, 404, 422, …) → `User` at once with the provider's own
//!   message: a wrong key, model or URL does not get better by retrying.
//!
//! Decoding the 2xx body is the caller's job (`parse_json` helps): a body that is not the
//! expected JSON is `Runtime` (not retried here; the job runner retries or repairs).
//!
//! The API key travels in the headers the caller passes and is never part of a message.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use engram_core::FaultSource;
use engram_core::llm::LlmError;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;

/// Timeouts and retries of LLM calls. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPolicy {
    /// Per attempt, including reading the body. Default 60 s.
    pub timeout: Duration,
    /// Attempts per call, the first included (at least 1). Default 3.
    pub max_attempts: u32,
    /// First wait between attempts when the server gives no `Retry-After`; doubled each
    /// time, ±25 % jitter. Default 500 ms.
    pub backoff: Duration,
    /// Longest `Retry-After` waited for inside a call. Default 30 s.
    pub max_retry_after: Duration,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            max_attempts: 3,
            backoff: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

/// What one attempt ended with.
enum Attempt {
    Done(String),
    /// Worth retrying; `after` is the server's `Retry-After`.
    Retry {
        message: String,
        after: Option<Duration>,
    },
    Fail(LlmError),
}

/// A reqwest client with the retry policy. `label` (e.g. `openai llm`) starts every error
/// message.
#[derive(Debug, Clone)]
pub(crate) struct JsonClient {
    client: reqwest::Client,
    policy: HttpPolicy,
    label: &'static str,
}

impl JsonClient {
    /// No network access: only builds the client.
    pub(crate) fn new(label: &'static str, policy: HttpPolicy) -> Result<Self, LlmError> {
        if policy.max_attempts == 0 {
            return Err(LlmError::user(format!("{label}: max_attempts must be at least 1")));
        }
        if policy.timeout.is_zero() {
            return Err(LlmError::user(format!("{label}: the timeout must be positive")));
        }
        // reqwest is built without a crypto provider (no aws-lc): install ring, as the
        // embedders do. One already installed is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(policy.timeout)
            .connect_timeout(policy.timeout)
            .build()
            .map_err(|e| LlmError::runtime(format!("{label}: HTTP client: {e}")))?;
        Ok(Self { client, policy, label })
    }

    pub(crate) fn label(&self) -> &'static str {
        self.label
    }

    /// POST `body` as JSON to `url` with `headers`, under the retry policy; the 2xx body.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &serde_json::Value,
    ) -> Result<String, LlmError> {
        let max = self.policy.max_attempts;
        for attempt in 1..=max {
            let (message, after) = match self.attempt(url, headers, body).await {
                Attempt::Done(text) => return Ok(text),
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry { message, after } => (message, after),
            };
            if attempt == max {
                return Err(LlmError {
                    fault: FaultSource::Runtime,
                    message: format!("{}: {message} (gave up after {max} attempts)", self.label),
                    retry_after: after,
                });
            }
            if let Some(after) = after
                && after > self.policy.max_retry_after
            {
                return Err(LlmError {
                    fault: FaultSource::Runtime,
                    message: format!(
                        "{}: {message}; the server asks to retry after {} s, longer than the \
                         {} s a call waits",
                        self.label,
                        after.as_secs(),
                        self.policy.max_retry_after.as_secs()
                    ),
                    retry_after: Some(after),
                });
            }
            let wait = after.unwrap_or_else(|| jittered(self.policy.backoff, attempt));
            tracing::warn!(
                url,
                attempt,
                wait_ms = wait.as_millis() as u64,
                "{} request failed, retrying: {message}",
                self.label
            );
            tokio::time::sleep(wait).await;
        }
        // The loop returns on its last attempt; this is only reached with max_attempts 0,
        // which `new` refuses.
        Err(LlmError {
            fault: FaultSource::Bug,
            message: format!("{}: no attempt made", self.label),
            retry_after: None,
        })
    }

    async fn attempt(&self, url: &str, headers: &HeaderMap, body: &serde_json::Value) -> Attempt {
        let resp = match self.client.post(url).headers(headers.clone()).json(body).send().await {
            Ok(r) => r,
            Err(e) => {
                let what = if e.is_timeout() {
                    format!("timed out after {} s", self.policy.timeout.as_secs_f64())
                } else if e.is_connect() {
                    "connection failed".to_owned()
                } else {
                    "request failed".to_owned()
                };
                return Attempt::Retry { message: format!("{url} {what}: {e}"), after: None };
            }
        };
        let status = resp.status();
        let after = retry_after(resp.headers());
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => {
                let what = if e.is_timeout() { "timed out reading the body" } else { "body" };
                return Attempt::Retry { message: format!("{url} {what}: {e}"), after: None };
            }
        };
        if status.is_success() {
            return Attempt::Done(text);
        }
        let message = format!("{url} answered {status}: {}", server_message(&text));
        if status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || status.is_server_error()
        {
            return Attempt::Retry { message, after };
        }
        Attempt::Fail(LlmError::user(format!("{}: {message}", self.label)))
    }
}

/// `base * 2^(attempt-1)`, ±25 % at random.
fn jittered(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)));
    // A fresh RandomState is randomly keyed: a cheap random number without a rand crate.
    let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let factor = 0.75 + (r % 1000) as f64 / 2000.0; // 0.75 ..= 1.2495
    exp.mul_f64(factor)
}

/// The wait a response asks for: OpenAI's `retry-after-ms`, else `Retry-After` in seconds
/// (the HTTP-date form is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let v: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    number("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| number("retry-after").map(Duration::from_secs_f64))
}

/// The provider's own words from an error body: `error.message` (OpenAI and Anthropic),
/// `error` (a string), `message` or `detail`, else the body itself; cut to 300 chars.
fn server_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| {
        let pick = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        v.get("error")
            .and_then(|e| e.get("message").and_then(pick).or_else(|| pick(e)))
            .or_else(|| v.get("message").and_then(pick))
            .or_else(|| v.get("detail").and_then(pick))
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    if text.is_empty() { "(empty body)".to_owned() } else { cut(&text, 300) }
}

/// `s` cut to `max` characters, with `…` when cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Decode a 2xx body; a body that is not the expected JSON is a `Runtime` error quoting its
/// start.
pub(crate) fn parse_json<T: DeserializeOwned>(
    label: &str,
    url: &str,
    body: &str,
) -> Result<T, LlmError> {
    serde_json::from_str(body).map_err(|e| {
        LlmError::runtime(format!(
            "{label}: malformed answer from {url}: {e} (body starts with {:?})",
            cut(body, 120)
        ))
    })
}

/// `{base}/v1/{path}`, without doubling a `/v1` the base URL already ends with. Refuses a
/// base that is not an http(s) URL (`User`).
pub(crate) fn endpoint(label: &str, base_url: &str, path: &str) -> Result<String, LlmError> {
    let base = base_url.trim().trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(LlmError::user(format!(
            "{label}: base URL {base:?} must start with http:// or https://"
        )));
    }
    if base.ends_with("/v1") {
        Ok(format!("{base}/{path}"))
    } else {
        Ok(format!("{base}/v1/{path}"))
    }
}

/// A `Bug` error: engram itself built an impossible request.
pub(crate) fn bug(message: String) -> LlmError {
    LlmError { fault: FaultSource::Bug, message, retry_after: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_do_not_double_v1() {
        let e = |b| endpoint("t", b, "messages").unwrap();
        assert_eq!(e("http://h:1"), "http://h:1/v1/messages");
        assert_eq!(e("http://h:1/"), "http://h:1/v1/messages");
        assert_eq!(e("http://h:1/v1"), "http://h:1/v1/messages");
        assert_eq!(e("https://h/proxy/v1/"), "https://h/proxy/v1/messages");
        assert_eq!(endpoint("t", "h:1", "x").unwrap_err().fault, FaultSource::User);
    }

    #[test]
    fn jitter_stays_within_a_quarter_of_the_exponential_step() {
        for attempt in 1..=3 {
            let step = Duration::from_millis(400) * 2u32.pow(attempt - 1);
            for _ in 0..50 {
                let d = jittered(Duration::from_millis(400), attempt);
                assert!(d >= step.mul_f64(0.75) && d <= step.mul_f64(1.25), "{d:?} vs {step:?}");
            }
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn server_messages_are_picked_from_known_shapes() {
        assert_eq!(server_message(r#"{"error":{"message":"bad key","type":"x"}}"#), "bad key");
        assert_eq!(
            server_message(r#"{"type":"error","error":{"type":"x","message":"no model"}}"#),
            "no model"
        );
        assert_eq!(server_message(r#"{"error":"plain"}"#), "plain");
        assert_eq!(server_message(r#"{"detail":"d"}"#), "d");
        assert_eq!(server_message("  <html>oops</html> "), "<html>oops</html>");
        assert_eq!(server_message(""), "(empty body)");
    }
}
