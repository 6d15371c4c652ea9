//! The LLM providers behind [`engram_core::llm::Llm`].
//!
//! Two protocols, chosen with an [`LlmConfig`] and built by [`build_llm`] (conventions
//! item 8: a typed config enum and one factory, no string registry):
//!
//! - [`LlmConfig::OpenAi`] → [`OpenAiLlm`]: any OpenAI-compatible chat-completions endpoint
//!   (OpenAI, Ollama, vLLM, llama.cpp, LM Studio, …).
//! - [`LlmConfig::Anthropic`] → [`AnthropicLlm`]: Anthropic's Messages API.
//!
//! Both share [`http`]: per-attempt timeout, up to 3 attempts with exponential backoff and
//! jitter for timeouts, connection errors, 429 and 5xx, `Retry-After` honoured (up to a
//! cap), and every failure classified by [`engram_core::FaultSource`] (conventions item 5):
//! bad key, model or URL → `User` at once; rate limits, 5xx and timeouts that outlast the
//! retries, malformed answers → `Runtime` (with `retry_after` when the server gave one);
//! an impossible request built by engram (no message, `max_tokens` 0) → `Bug`.
//!
//! Tiers: `fast_model` answers [`Tier::Fast`] (extraction) when configured, else `model`
//! answers both tiers.
//!
//! Adding a provider: one file, one [`LlmConfig`] variant, one arm in [`build_llm_with`]
//! (the compiler points at it), one test against `testkit::ScriptedLlm`.

pub mod anthropic;
pub mod http;
pub mod openai;

use std::sync::Arc;

use engram_core::llm::{ChatRequest, Llm, LlmError, Tier};

pub use anthropic::AnthropicLlm;
pub use http::HttpPolicy;
pub use openai::OpenAiLlm;

/// OpenAI's public endpoint, for configurations that do not name one.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com";
/// Anthropic's public endpoint, for configurations that do not name one.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

/// Which LLM to call. Built into an [`Llm`] by [`build_llm`]. `Debug` never prints a key.
#[derive(Clone, PartialEq, Eq)]
pub enum LlmConfig {
    /// An OpenAI-compatible chat-completions endpoint.
    OpenAi {
        /// e.g. `https://api.openai.com` or `http://127.0.0.1:11434/v1` (a trailing `/v1` is
        /// accepted and not doubled).
        base_url: String,
        /// Sent as `Authorization: Bearer <key>` when present (local servers need none).
        api_key: Option<String>,
        /// The main-tier model, e.g. `gpt-4o`; also the fast one when `fast_model` is none.
        model: String,
        /// The fast-tier model (extraction), e.g. `gpt-4o-mini`.
        fast_model: Option<String>,
    },
    /// Anthropic's Messages API.
    Anthropic {
        /// e.g. `https://api.anthropic.com` (a trailing `/v1` is accepted).
        base_url: String,
        /// Sent as `x-api-key`. Required.
        api_key: String,
        /// The main-tier model, e.g. `claude-sonnet-4-5`.
        model: String,
        /// The fast-tier model, e.g. `claude-haiku-4-5`.
        fast_model: Option<String>,
    },
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LlmConfig::OpenAi { base_url, api_key, model, fast_model } => f
                .debug_struct("OpenAi")
                .field("base_url", base_url)
                .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
                .field("model", model)
                .field("fast_model", fast_model)
                .finish(),
            LlmConfig::Anthropic { base_url, api_key: _, model, fast_model } => f
                .debug_struct("Anthropic")
                .field("base_url", base_url)
                .field("api_key", &"<redacted>")
                .field("model", model)
                .field("fast_model", fast_model)
                .finish(),
        }
    }
}

/// Build the LLM a configuration names, with the default [`HttpPolicy`] (60 s timeout,
/// 3 attempts). No network access: a wrong key or model shows on the first call (as a
/// `User` error). Errors here are `User` faults naming the bad setting (URL not http(s),
/// empty model, missing Anthropic key).
pub fn build_llm(cfg: &LlmConfig) -> Result<Arc<dyn Llm>, LlmError> {
    build_llm_with(cfg, HttpPolicy::default())
}

/// [`build_llm`] with an explicit timeout and retry policy.
pub fn build_llm_with(cfg: &LlmConfig, policy: HttpPolicy) -> Result<Arc<dyn Llm>, LlmError> {
    match cfg {
        LlmConfig::OpenAi { base_url, api_key, model, fast_model } => Ok(Arc::new(OpenAiLlm::new(
            base_url,
            api_key.as_deref(),
            model,
            fast_model.as_deref(),
            policy,
        )?)),
        LlmConfig::Anthropic { base_url, api_key, model, fast_model } => Ok(Arc::new(
            AnthropicLlm::new(base_url, api_key, model, fast_model.as_deref(), policy)?,
        )),
    }
}

/// The configured model name, trimmed; empty is a `User` error.
fn model_name(label: &str, model: &str) -> Result<String, LlmError> {
    let model = model.trim();
    if model.is_empty() {
        return Err(LlmError::user(format!("{label}: no model name configured")));
    }
    Ok(model.to_owned())
}

/// The fast model, trimmed; empty counts as none (an empty environment variable).
fn fast_model_name(fast: Option<&str>) -> Option<String> {
    fast.map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned)
}

fn tier_model(model: &str, fast: Option<&str>, tier: Tier) -> String {
    match (tier, fast) {
        (Tier::Fast, Some(fast)) => fast.to_owned(),
        (Tier::Fast, None) | (Tier::Main, _) => model.to_owned(),
    }
}

/// `openai:gpt-4o-mini (fast) / gpt-4o (main)`, or `openai:gpt-4o` with one model.
fn describe(provider: &str, model: &str, fast: Option<&str>) -> String {
    match fast {
        Some(fast) if fast != model => format!("{provider}:{fast} (fast) / {model} (main)"),
        Some(_) | None => format!("{provider}:{model}"),
    }
}

/// Refuse requests no provider accepts: they are engram's bugs, not the provider's.
fn check_request(label: &str, req: &ChatRequest) -> Result<(), LlmError> {
    if req.messages.is_empty() {
        return Err(http::bug(format!("{label}: chat request without any message")));
    }
    if req.max_tokens == 0 {
        return Err(http::bug(format!("{label}: chat request with max_tokens 0")));
    }
    Ok(())
}
