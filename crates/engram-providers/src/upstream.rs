//! The memory proxy's upstream: an OpenAI- or Anthropic-compatible endpoint that engram
//! forwards chat requests to as they came (the body bytes, the protocol's own headers), with
//! the configured key, and whose answer it hands back as it arrives: the status, the headers
//! that describe the body, and the body as a stream of chunks, so an answer streams through
//! unbuffered.
//!
//! Time limits: `timeout` bounds the wait for the answer's headers and every wait for its
//! next chunk (a stream that is alive but slow goes on; one that stalls ends with
//! [`UpstreamError::Timeout`]). Nothing is retried: a chat call is the client's to retry.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

/// How the upstream takes its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// `Authorization: Bearer <key>` (OpenAI and compatible servers).
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
}

/// Where the proxy forwards to.
#[derive(Clone)]
pub struct UpstreamConfig {
    /// e.g. `https://api.openai.com` or `http://127.0.0.1:8000`; a trailing `/v1` is
    /// accepted and not doubled.
    pub base_url: String,
    pub api_key: Option<String>,
    pub auth: UpstreamAuth,
    pub timeout: Duration,
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("auth", &self.auth)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why no answer came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamError {
    /// No headers, or no next chunk, within the timeout.
    Timeout,
    /// The connection failed (refused, reset, TLS, DNS), with the reason.
    Unreachable(String),
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Timeout => f.write_str("the upstream did not answer in time"),
            UpstreamError::Unreachable(why) => write!(f, "the upstream is unreachable: {why}"),
        }
    }
}

/// The upstream's answer as it arrives.
pub struct UpstreamResponse {
    pub status: u16,
    /// The headers worth passing on (content type, request ids, rate limits…): not the
    /// hop-by-hop ones nor the length and encoding of a body that is re-framed.
    pub headers: Vec<(String, String)>,
    pub body: BoxStream<'static, Result<Bytes, UpstreamError>>,
}

/// Request headers never forwarded: hop-by-hop, the framing, engram's own credentials and
/// scope headers, and `accept-encoding` (the answer is read on the way through, so it must
/// come uncompressed).
fn dropped_request_header(name: &str) -> bool {
    matches!(
        name,
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
            | "authorization"
            | "x-api-key"
            | "cookie"
            | "accept-encoding"
    ) || name.starts_with("x-engram-")
}

/// Response headers never passed back.
fn dropped_response_header(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
            | "content-encoding"
            | "set-cookie"
    )
}

/// A client for one upstream.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    cfg: UpstreamConfig,
}

impl Upstream {
    pub fn new(cfg: UpstreamConfig) -> Result<Self, String> {
        // reqwest is built without a default TLS provider (`rustls-no-provider`).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.timeout.min(Duration::from_secs(30)))
            .read_timeout(cfg.timeout)
            .build()
            .map_err(|e| format!("cannot build the upstream client: {e}"))?;
        Ok(Upstream { client, cfg })
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.cfg
    }

    /// The upstream URL of `path` (`/v1/chat/completions`).
    pub fn url(&self, path: &str) -> String {
        let base = self.cfg.base_url.trim_end_matches('/');
        match (base.ends_with("/v1"), path.strip_prefix("/v1")) {
            (true, Some(rest)) => format!("{base}{rest}"),
            _ => format!("{base}{path}"),
        }
    }

    /// Send `method path` with the client's `headers` (filtered) and `body`.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: Option<Bytes>,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| UpstreamError::Unreachable(format!("method: {e}")))?;
        let mut req = self.client.request(method, self.url(path));
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            if !dropped_request_header(&name) {
                req = req.header(name, value);
            }
        }
        req = req.header("accept-encoding", "identity");
        if let Some(key) = &self.cfg.api_key {
            req = match self.cfg.auth {
                UpstreamAuth::Bearer => req.bearer_auth(key),
                UpstreamAuth::XApiKey => req.header("x-api-key", key),
            };
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = match tokio::time::timeout(self.cfg.timeout, req.send()).await {
            Err(_) => return Err(UpstreamError::Timeout),
            Ok(Err(e)) if e.is_timeout() => return Err(UpstreamError::Timeout),
            Ok(Err(e)) => return Err(UpstreamError::Unreachable(without_url(&e))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter(|(n, _)| !dropped_response_header(n.as_str()))
            .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = resp
            .bytes_stream()
            .map(|chunk| {
                chunk.map_err(|e| {
                    if e.is_timeout() {
                        UpstreamError::Timeout
                    } else {
                        UpstreamError::Unreachable(without_url(&e))
                    }
                })
            })
            .boxed();
        Ok(UpstreamResponse { status, headers, body })
    }
}

/// A reqwest error's reason without the URL (which may carry credentials in its query).
fn without_url(e: &reqwest::Error) -> String {
    let mut reason = e.to_string();
    if let Some(url) = e.url() {
        reason = reason.replace(url.as_str(), "<upstream>");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        source = s.source();
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(base: &str) -> Upstream {
        Upstream::new(UpstreamConfig {
            base_url: base.into(),
            api_key: None,
            auth: UpstreamAuth::Bearer,
            timeout: Duration::from_secs(5),
        })
        .unwrap()
    }

    #[test]
    fn a_trailing_v1_is_not_doubled() {
        let p = "/v1/chat/completions";
        assert_eq!(upstream("http://h:1").url(p), "http://h:1/v1/chat/completions");
        assert_eq!(upstream("http://h:1/v1/").url(p), "http://h:1/v1/chat/completions");
        assert_eq!(upstream("https://h/openai/v1").url("/v1/models"), "https://h/openai/v1/models");
    }

    #[test]
    fn credentials_and_framing_are_never_forwarded() {
        for h in ["authorization", "x-api-key", "host", "content-length", "x-engram-user-id"] {
            assert!(dropped_request_header(h), "{h}");
        }
        for h in ["content-type", "anthropic-version", "openai-organization", "user-agent"] {
            assert!(!dropped_request_header(h), "{h}");
        }
        assert!(dropped_response_header("content-length"));
        assert!(!dropped_response_header("x-request-id"));
    }
}
