//! The LLM contract.
//!
//! An [`Llm`] answers one chat request. Implementations (in `engram-providers`) speak the
//! OpenAI chat-completions protocol (OpenAI, Ollama, vLLM, llama.cpp, LM Studio…) or
//! Anthropic's Messages API; they apply their own timeouts and short in-call retries
//! (429 honouring `Retry-After`, 5xx, timeouts) and classify what is left by [`FaultSource`],
//! so the job runner knows whether to retry later (`Runtime`) or fail now (`User`: bad key,
//! unknown model).

use std::time::Duration;

use async_trait::async_trait;

use crate::error::FaultSource;

/// Which model of an agent answers: the fast one (extraction) or the main one
/// (consolidation, summaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    Fast,
    Main,
}

/// Author of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRole {
    User,
    Assistant,
}

/// One message of a chat request (the system prompt travels separately).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
}

/// A chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub tier: Tier,
    /// Use this model instead of the tier's default (per-agent models).
    pub model: Option<String>,
    pub system: String,
    pub messages: Vec<ChatMessage>,
    /// Upper bound of the completion length.
    pub max_tokens: u32,
    /// Ask for JSON output where the provider supports it.
    pub json: bool,
    pub temperature: f32,
}

/// A chat answer and what it cost.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChatResponse {
    pub content: String,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A failed chat call, classified by who must act.
#[derive(Debug, Clone, thiserror::Error)]
#[error("LLM error ({fault:?}): {message}")]
pub struct LlmError {
    pub fault: FaultSource,
    pub message: String,
    /// The provider asked to wait this long before trying again.
    pub retry_after: Option<Duration>,
}

impl LlmError {
    pub fn user(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::User, message: message.into(), retry_after: None }
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::Runtime, message: message.into(), retry_after: None }
    }
}

/// A chat model endpoint.
#[async_trait]
pub trait Llm: Send + Sync {
    /// Human-readable identity, e.g. `openai:gpt-4o-mini (fast) / gpt-4o (main)`.
    fn describe(&self) -> String;
    /// The model name used for a tier.
    fn model(&self, tier: Tier) -> String;
    /// Answer one request.
    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError>;
}

impl From<LlmError> for crate::error::JobError {
    fn from(e: LlmError) -> Self {
        crate::error::JobError {
            fault: e.fault,
            message: format!("LLM: {}", e.message),
            retry_after: e.retry_after,
        }
    }
}
