//! Tests of the scripted LLM server, driven by a plain reqwest client (no engram code).
//!
//! - `openai`: the chat-completions shape, both paths, parsing of what was sent.
//! - `anthropic`: the Messages shape, its validation and error shapes.
//! - `rules`: matching, order, `times`, default, delays, hangs, raw and malformed bodies.
//! - `recording`: what is recorded, queries, waiting, sync start.

mod anthropic;
mod openai;
mod recording;
mod rules;

use std::time::Duration;

use serde_json::Value;

/// A reqwest client (ring installed as the rustls provider, as engram does).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap()
}

/// What came back: status, `Retry-After` header, the body as text and as JSON (Null if not).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub text: String,
    pub json: Value,
}

/// POST `body` to `url` with `headers`.
pub async fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
    let mut req = client().post(url).json(body);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, retry_after, text, json }
}

/// A minimal OpenAI request with this user message.
pub fn openai_body(user: &str) -> Value {
    serde_json::json!({"model": "gpt-test", "messages": [{"role": "user", "content": user}]})
}

/// POST an OpenAI request with this user message to `{base}/v1/chat/completions`.
pub async fn ask_openai(base: &str, user: &str) -> Answer {
    post(&format!("{base}/v1/chat/completions"), &[], &openai_body(user)).await
}

/// The assistant text of an OpenAI answer.
pub fn openai_text(a: &Answer) -> &str {
    a.json["choices"][0]["message"]["content"].as_str().unwrap_or_else(|| panic!("{a:?}"))
}

/// The headers Anthropic requires.
pub const ANTHROPIC_HEADERS: &[(&str, &str)] =
    &[("x-api-key", "sk-ant-test"), ("anthropic-version", "2023-06-01")];
