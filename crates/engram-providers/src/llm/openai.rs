//! OpenAI-compatible chat completions: `POST {base_url}/v1/chat/completions`.
//!
//! One client for OpenAI and the servers that copy its protocol (Ollama, vLLM, llama.cpp,
//! LM Studio, …). Request: `{"model", "messages": [{"role":"system"}?, …], "max_tokens",
//! "temperature", "response_format"?}` with `Authorization: Bearer <key>` when a key is
//! configured (local servers usually need none). `ChatRequest::json` becomes
//! `response_format: {"type":"json_object"}` (OpenAI's and most compatible servers' JSON
//! mode; the prompt must still say "JSON", as OpenAI requires).
//!
//! Answer: `choices[0].message.content`; a missing choice or a `null` content (e.g. a
//! refusal) is a `Runtime` error. `usage` is optional (counts are 0 without it); `model`
//! falls back to the requested one.
//!
//! Known limit: OpenAI's reasoning models (o-series, gpt-5) want `max_completion_tokens`
//! and a default temperature; this client sends the classic `max_tokens`/`temperature`
//! that every compatible server accepts.

use async_trait::async_trait;
use engram_core::llm::{ChatRequest, ChatResponse, ChatRole, Llm, LlmError, Tier};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::json;

use super::http::{HttpPolicy, JsonClient, endpoint, parse_json};

/// An [`Llm`] speaking the OpenAI chat-completions protocol. Cheap to clone.
#[derive(Clone)]
pub struct OpenAiLlm {
    http: JsonClient,
    endpoint: String,
    /// The prepared `Authorization` header (marked sensitive), if a key is configured.
    headers: HeaderMap,
    model: String,
    fast_model: Option<String>,
}

impl std::fmt::Debug for OpenAiLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiLlm")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("fast_model", &self.fast_model)
            .field("api_key", &self.headers.contains_key(AUTHORIZATION).then_some("<redacted>"))
            .finish()
    }
}

#[derive(Deserialize)]
struct Response {
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<Message>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    content: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

const LABEL: &str = "openai llm";

impl OpenAiLlm {
    /// Build the client; no network access. `base_url` with or without a trailing `/v1`.
    /// An empty `api_key` or `fast_model` counts as none.
    pub fn new(
        base_url: &str,
        api_key: Option<&str>,
        model: &str,
        fast_model: Option<&str>,
        policy: HttpPolicy,
    ) -> Result<Self, LlmError> {
        let endpoint = endpoint(LABEL, base_url, "chat/completions")?;
        let model = super::model_name(LABEL, model)?;
        let fast_model = super::fast_model_name(fast_model);
        let mut headers = HeaderMap::new();
        if let Some(key) = api_key.map(str::trim).filter(|k| !k.is_empty()) {
            let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                LlmError::user(format!(
                    "{LABEL}: the API key contains characters not allowed in a header"
                ))
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        Ok(Self { http: JsonClient::new(LABEL, policy)?, endpoint, headers, model, fast_model })
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

#[async_trait]
impl Llm for OpenAiLlm {
    fn describe(&self) -> String {
        super::describe("openai", &self.model, self.fast_model.as_deref())
    }

    fn model(&self, tier: Tier) -> String {
        super::tier_model(&self.model, self.fast_model.as_deref(), tier)
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        super::check_request(LABEL, req)?;
        let model = req.model.clone().unwrap_or_else(|| self.model(req.tier));
        let mut messages = Vec::with_capacity(req.messages.len() + 1);
        if !req.system.is_empty() {
            messages.push(json!({"role": "system", "content": req.system}));
        }
        for m in &req.messages {
            let role = match m.role {
                ChatRole::User => "user",
                ChatRole::Assistant => "assistant",
            };
            messages.push(json!({"role": role, "content": m.content}));
        }
        let mut body = json!({
            "model": model,
            "messages": messages,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
        });
        if req.json {
            body["response_format"] = json!({"type": "json_object"});
        }
        let text = self.http.post(&self.endpoint, &self.headers, &body).await?;
        let resp: Response = parse_json(self.http.label(), &self.endpoint, &text)?;
        let Some(choice) = resp.choices.into_iter().next() else {
            return Err(LlmError::runtime(format!(
                "{LABEL}: answer from {} has no choices",
                self.endpoint
            )));
        };
        let finish = choice.finish_reason.unwrap_or_default();
        let (content, refusal) = match choice.message {
            Some(m) => (m.content, m.refusal),
            None => (None, None),
        };
        let Some(content) = content else {
            let why = refusal.map(|r| format!("; refusal: {r}")).unwrap_or_default();
            return Err(LlmError::runtime(format!(
                "{LABEL}: answer from {} has no message content (finish_reason {finish:?}{why})",
                self.endpoint
            )));
        };
        if finish == "length" {
            tracing::warn!(model, max_tokens = req.max_tokens, "LLM answer cut at max_tokens");
        }
        let usage = resp.usage.unwrap_or(Usage { prompt_tokens: None, completion_tokens: None });
        Ok(ChatResponse {
            content,
            model: resp.model.filter(|m| !m.is_empty()).unwrap_or(model),
            prompt_tokens: usage.prompt_tokens.unwrap_or(0),
            completion_tokens: usage.completion_tokens.unwrap_or(0),
        })
    }
}
