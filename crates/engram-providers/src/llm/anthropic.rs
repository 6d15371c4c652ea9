//! Anthropic's Messages API: `POST {base_url}/v1/messages`.
//!
//! Request: `{"model", "max_tokens", "system"?, "messages": [{"role","content"}],
//! "temperature"}` with the headers `x-api-key` and `anthropic-version: 2023-06-01`. The
//! system prompt goes in the top-level `system` field (Anthropic refuses a `system` role in
//! `messages`); `max_tokens` is required; the temperature is clamped to Anthropic's 0..=1.
//!
//! There is no JSON mode: `ChatRequest::json` changes nothing on the wire; the prompt asks
//! for JSON and the caller parses (and repairs) the answer.
//!
//! Answer: the `text` blocks of `content`, joined; an answer without any text block is a
//! `Runtime` error. `usage.input_tokens` / `output_tokens` are the token counts.

use async_trait::async_trait;
use engram_core::llm::{ChatRequest, ChatResponse, ChatRole, Llm, LlmError, Tier};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::json;

use super::http::{HttpPolicy, JsonClient, endpoint, parse_json};

/// The API version this client speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

const LABEL: &str = "anthropic llm";

/// An [`Llm`] speaking Anthropic's Messages API. Cheap to clone.
#[derive(Clone)]
pub struct AnthropicLlm {
    http: JsonClient,
    endpoint: String,
    /// `x-api-key` (marked sensitive) and `anthropic-version`.
    headers: HeaderMap,
    model: String,
    fast_model: Option<String>,
}

impl std::fmt::Debug for AnthropicLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicLlm")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("fast_model", &self.fast_model)
            .field("api_key", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
struct Response {
    model: Option<String>,
    content: Vec<Block>,
    stop_reason: Option<String>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl AnthropicLlm {
    /// Build the client; no network access. `base_url` with or without a trailing `/v1`
    /// (e.g. `https://api.anthropic.com`). An empty `api_key` is a `User` error; an empty
    /// `fast_model` counts as none.
    pub fn new(
        base_url: &str,
        api_key: &str,
        model: &str,
        fast_model: Option<&str>,
        policy: HttpPolicy,
    ) -> Result<Self, LlmError> {
        let endpoint = endpoint(LABEL, base_url, "messages")?;
        let model = super::model_name(LABEL, model)?;
        let fast_model = super::fast_model_name(fast_model);
        let key = api_key.trim();
        if key.is_empty() {
            return Err(LlmError::user(format!("{LABEL}: no API key configured")));
        }
        let mut key = HeaderValue::from_str(key).map_err(|_| {
            LlmError::user(format!(
                "{LABEL}: the API key contains characters not allowed in a header"
            ))
        })?;
        key.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("x-api-key"), key);
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(Self { http: JsonClient::new(LABEL, policy)?, endpoint, headers, model, fast_model })
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

#[async_trait]
impl Llm for AnthropicLlm {
    fn describe(&self) -> String {
        super::describe("anthropic", &self.model, self.fast_model.as_deref())
    }

    fn model(&self, tier: Tier) -> String {
        super::tier_model(&self.model, self.fast_model.as_deref(), tier)
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        super::check_request(LABEL, req)?;
        let model = req.model.clone().unwrap_or_else(|| self.model(req.tier));
        let messages: Vec<_> = req
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    ChatRole::User => "user",
                    ChatRole::Assistant => "assistant",
                };
                json!({"role": role, "content": m.content})
            })
            .collect();
        let mut body = json!({
            "model": model,
            "max_tokens": req.max_tokens,
            "messages": messages,
            "temperature": req.temperature.clamp(0.0, 1.0),
        });
        if !req.system.is_empty() {
            body["system"] = json!(req.system);
        }
        let text = self.http.post(&self.endpoint, &self.headers, &body).await?;
        let resp: Response = parse_json(self.http.label(), &self.endpoint, &text)?;
        let texts: Vec<String> =
            resp.content.into_iter().filter(|b| b.kind == "text").filter_map(|b| b.text).collect();
        let stop = resp.stop_reason.unwrap_or_default();
        if texts.is_empty() {
            return Err(LlmError::runtime(format!(
                "{LABEL}: answer from {} has no text content (stop_reason {stop:?})",
                self.endpoint
            )));
        }
        if stop == "max_tokens" {
            tracing::warn!(model, max_tokens = req.max_tokens, "LLM answer cut at max_tokens");
        }
        let usage = resp.usage.unwrap_or(Usage { input_tokens: None, output_tokens: None });
        Ok(ChatResponse {
            content: texts.concat(),
            model: resp.model.filter(|m| !m.is_empty()).unwrap_or(model),
            prompt_tokens: usage.input_tokens.unwrap_or(0),
            completion_tokens: usage.output_tokens.unwrap_or(0),
        })
    }
}
