//! The engine: one function per operation, the only entry point of every adapter.
//!
//! REST handlers, CLI commands and (later) MCP tools parse their input into the `*Input`
//! types here, call an [`Engine`] method with the caller's [`Principal`], and render the
//! result. Authorization by role (admin / agent / user key) happens here, once, so every
//! adapter enforces the same rules:
//!
//! - `admin` sees the whole tenant;
//! - `agent` keys are bound to one agent and see its pool, `kind = shared` rows and
//!   user-wide rows (written without an agent);
//! - `user` keys are bound to one user and see only that user's memories.
//!
//! A row the caller may not see is reported exactly like a row that does not exist.
//!
//! One file per group of operations (`remember`, `memories`, `search`, `context`,
//! `conversations`, `admin`, `backup`, `reembed`); `scope` resolves who sees what.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::llm::Llm;
use crate::metrics::Metrics;
use crate::model::{KeyRole, MemoryEvent, Principal};
use crate::pipeline::pii::PiiKind;
use crate::store::Store;

mod admin;
mod backup;
mod context;
mod conversations;
mod memories;
mod reembed;
mod remember;
mod scope;
mod search;
mod types;

use scope::{View, ViewKey};
pub use types::*;

/// Engine limits and defaults (plain data; loading it from files is the binary's job).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest memory or message content, in bytes.
    pub max_content_bytes: usize,
    /// Dedup threshold for agents without settings.
    pub dedup_threshold: f32,
    /// Default context token budget.
    pub token_budget: usize,
    /// Candidates taken from each of the vector and text lists before fusion (default 20,
    /// as seed 000: "top 20" per list, RRF k = 60). More is not better with k = 60: a row
    /// found deep in both lists (ranks 40 + 40: 2/100) then outscores one found first by a
    /// single list (1/61). On LoCoMo (MiniLM) 50 per list gave turn Recall@10 0.637, 20 gave
    /// 0.677 (`benches/README.md`).
    pub candidates: usize,
    /// Largest `limit` of a search or list.
    pub max_limit: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_content_bytes: 8 * 1024,
            dedup_threshold: 0.90,
            token_budget: 4000,
            candidates: 20,
            max_limit: 200,
        }
    }
}

/// The engine. Cheap to clone (everything is behind `Arc`).
#[derive(Clone)]
pub struct Engine {
    store: Arc<dyn Store>,
    embedder: Arc<dyn Embedder>,
    /// None: automatic extraction, summaries and tool-call synthesis are off.
    llm: Option<Arc<dyn Llm>>,
    metrics: Arc<Metrics>,
    cfg: EngineConfig,
}

impl Engine {
    /// Build an engine and check the store's embedding space matches the embedder.
    pub async fn new(
        store: Arc<dyn Store>,
        embedder: Arc<dyn Embedder>,
        cfg: EngineConfig,
    ) -> Result<Self> {
        if let Some((model, dims)) = store.embedding_space().await?
            && (model != embedder.model_id() || dims != embedder.dims())
        {
            return Err(Error::Unprocessable(format!(
                "this store's vectors were made by '{model}' ({dims} dimensions) but the \
                 configured embedder is '{}' ({} dimensions); start with the same embedder \
                 (--embedder) or run `engram reembed` to re-embed every memory",
                embedder.model_id(),
                embedder.dims()
            )));
        }
        Ok(Self { store, embedder, llm: None, metrics: Arc::new(Metrics::default()), cfg })
    }

    /// Turn on automatic extraction with this LLM.
    pub fn with_llm(mut self, llm: Arc<dyn Llm>) -> Self {
        self.llm = Some(llm);
        self
    }

    pub fn llm(&self) -> Option<&Arc<dyn Llm>> {
        self.llm.as_ref()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    // ------------------------------------------------------------------ scoping
}

/// Name the batch item an input error belongs to (`memories[i].field`).
pub fn prefix_batch_error(e: Error, i: usize, n: usize) -> Error {
    if n == 1 {
        return e;
    }
    match e {
        Error::InvalidInput { field, message } => Error::InvalidInput {
            field: format!("memories[{i}].{field}"),
            message: format!("memories[{i}]: {message}"),
        },
        Error::TooLarge(m) => Error::TooLarge(format!("memories[{i}]: {m}")),
        other @ (Error::NotFound { .. }
        | Error::Forbidden(_)
        | Error::Unauthorized(_)
        | Error::Conflict(_)
        | Error::Unprocessable(_)
        | Error::Embedder(_)
        | Error::StoreUnavailable(_)
        | Error::Internal(_)) => other,
    }
}

/// Record in a row's first event what the PII filter replaced in its content.
fn note_redactions(ev: &mut MemoryEvent, redacted: &[PiiKind]) {
    if !redacted.is_empty() {
        let kinds: Vec<&str> = redacted.iter().map(|k| k.as_str()).collect();
        ev.detail = serde_json::json!({ "redacted": kinds });
    }
}

fn clamp_limit(limit: usize, max: usize) -> Result<usize> {
    if limit == 0 || limit > max {
        return Err(Error::invalid("limit", format!("limit must be 1 to {max}")));
    }
    Ok(limit)
}

/// How the automatic extractor is named in the audit trail.
pub fn actor_name_system() -> String {
    "system:extractor".to_string()
}

/// How a principal is named in the audit trail.
pub fn actor_name(p: &Principal) -> String {
    match &p.role {
        KeyRole::Admin => "admin".to_string(),
        KeyRole::Agent(a) => format!("agent:{a}"),
        KeyRole::User(u) => format!("user:{u}"),
    }
}
