//! The engine: one function per operation, the only entry point of every adapter.
//!
//! REST handlers, MCP tools and CLI commands (through the binary's API layer) parse their
//! input into the `*Input` types here, call an [`Engine`] method with the caller's
//! [`Principal`], and render the result. Authorization by role (admin / agent / user key) happens here, once, so every
//! adapter enforces the same rules:
//!
//! - `admin` sees the whole tenant;
//! - `agent` keys are bound to one agent and see its pool, `kind = shared` rows and
//!   user-wide rows (written without an agent);
//! - `user` keys are bound to one user and see only that user's memories.
//!
//! A row the caller may not see is reported exactly like a row that does not exist.
//!
//! One file per group of operations (`remember`, `memories`, `search`, `dates`, `literal`,
//! `speakers`, `summaries`, `synthesis`, `context`, `short_term`, `conversations`, `admin`, `backup`, `reembed`);
//! `scope` resolves who sees what.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::llm::Llm;
use crate::metrics::Metrics;
use crate::model::MemoryEvent;
use crate::pipeline::pii::PiiKind;
use crate::store::Store;

mod access;
mod admin;
mod backup;
mod context;
mod conversations;
mod dates;
mod expand;
mod literal;
mod memories;
mod profile;
mod reembed;
mod relations;
mod remember;
mod scope;
mod search;
mod short_term;
mod speakers;
mod state;
mod summaries;
mod synthesis;
mod types;

pub use crate::model::{actor_name, actor_name_system};
pub use crate::services::EngineConfig;
pub use crate::services::Services;
pub use access::{Operator, UI_SESSION_TTL};
pub use admin::CompactionStatus;
pub use context::{ContextBlock, ContextInput};
use scope::{View, ViewKey};
pub use state::{DEFAULT_STATE_TTL, MAX_STATE_BYTES, MAX_STATE_TTL, StateAddress};
pub use synthesis::{Citation, Synthesis};
pub use types::*;

/// The engine. Cheap to clone (everything is behind `Arc`).
#[derive(Clone)]
pub struct Engine {
    svc: Services,
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
        Ok(Self {
            svc: Services {
                store,
                embedder,
                llm: None,
                metrics: Arc::new(Metrics::default()),
                cfg,
                space_ready: Arc::default(),
                requests: Arc::default(),
                embedding_wanted: Arc::default(),
                known_keys: Arc::default(),
                consolidating: Arc::default(),
            },
        })
    }

    /// Turn on automatic extraction with this LLM.
    pub fn with_llm(mut self, llm: Arc<dyn Llm>) -> Self {
        self.svc.llm = Some(llm);
        self
    }

    pub fn llm(&self) -> Option<&Arc<dyn Llm>> {
        self.svc.llm.as_ref()
    }

    /// The services, for the worker loop ([`crate::jobs::run_workers`]) and benchmarks that
    /// time a store call alone. Adapters go through the engine's operations instead.
    pub fn services(&self) -> &Services {
        &self.svc
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.svc.metrics
    }

    /// The background backlog of every tenant together, counts and times only (for the
    /// process-wide `/metrics`, which the adapter shows to admin keys).
    pub async fn backlog_all(&self) -> Result<crate::store::Backlog> {
        self.svc.store.backlog(None).await
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.svc.embedder
    }

    pub fn config(&self) -> &EngineConfig {
        &self.svc.cfg
    }

    // ------------------------------------------------------------------ scoping
}

/// Name the batch item an input error belongs to (`memories[i].field`), for a batch call
/// (`batch`), whatever its size; a single write's error names the field alone.
pub fn prefix_batch_error(e: Error, i: usize, batch: bool) -> Error {
    if !batch {
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
        | Error::Llm(_)
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
