//! The services every operation and every background job works with: the store, the
//! embedder, the LLM (when one is configured), the metrics and the configuration. The
//! [`crate::engine::Engine`] holds them for the request path; the job handlers
//! ([`crate::pipeline`]) and the worker loop ([`crate::jobs`]) take them directly, so none of
//! those modules needs the engine.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::llm::Llm;
use crate::metrics::Metrics;
use crate::priority::RequestsInFlight;
use crate::store::Store;

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
    /// Order results by their relevance instead of the fused rank (an experiment measured
    /// in `benches/README.md`).
    pub rank_by_relevance: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_content_bytes: 8 * 1024,
            dedup_threshold: 0.90,
            token_budget: 4000,
            candidates: 20,
            max_limit: 200,
            rank_by_relevance: false,
        }
    }
}

/// The engine's services. Cheap to clone (everything is behind `Arc`).
#[derive(Clone)]
pub struct Services {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) embedder: Arc<dyn Embedder>,
    /// None: automatic extraction, summaries and tool-call synthesis are off.
    pub(crate) llm: Option<Arc<dyn Llm>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) cfg: EngineConfig,
    /// Set once this process has recorded (or found) the embedder's space in the store:
    /// later writes skip the meta read.
    pub(crate) space_ready: Arc<std::sync::atomic::AtomicBool>,
    /// Request-path operations running now; background steps wait for none.
    pub(crate) requests: Arc<RequestsInFlight>,
    /// Woken when messages wait for vectors, so this process's embedding lane starts at once
    /// instead of at its next poll.
    pub(crate) embedding_wanted: Arc<tokio::sync::Notify>,
    /// What the store last said about API keys, for a store outage ([`crate::engine`]'s
    /// `principal_for_key`): the memory proxy keeps chats going without memory.
    pub(crate) known_keys: Arc<std::sync::Mutex<KnownKeys>>,
    /// One user's consolidations at a time in this process ([`UserLocks`]).
    pub(crate) consolidating: Arc<UserLocks>,
}

/// Locks striped by (tenant, user): extraction holds its user's from the read of the
/// neighbours its judge sees to the commit of the decision, so two workers extracting two
/// conversations of one user cannot both add the same fact (the second sees the first's).
/// Striped, not one per user: bounded memory, and two users rarely share a stripe (the
/// price of sharing is waiting, never a wrong result).
#[derive(Debug)]
pub(crate) struct UserLocks([tokio::sync::Mutex<()>; UserLocks::STRIPES]);

impl Default for UserLocks {
    fn default() -> Self {
        Self(std::array::from_fn(|_| tokio::sync::Mutex::new(())))
    }
}

impl UserLocks {
    const STRIPES: usize = 64;

    /// The lock of `user` of `tenant`.
    pub(crate) fn of(
        &self,
        tenant: &crate::model::TenantId,
        user: &crate::model::UserId,
    ) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (tenant.as_str(), user.as_str()).hash(&mut h);
        let i = usize::try_from(h.finish() % Self::STRIPES as u64).unwrap_or_default();
        &self.0[i]
    }
}

/// The last answers of the store about API keys, each with when it was given.
#[derive(Debug, Default)]
pub(crate) struct KnownKeys {
    pub(crate) principals:
        std::collections::HashMap<String, (crate::model::Principal, std::time::Instant)>,
    pub(crate) any: Option<(bool, std::time::Instant)>,
}

impl Services {
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }
    pub fn llm(&self) -> Option<&Arc<dyn Llm>> {
        self.llm.as_ref()
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
    pub fn requests(&self) -> &Arc<RequestsInFlight> {
        &self.requests
    }
    pub fn embedding_wanted(&self) -> &Arc<tokio::sync::Notify> {
        &self.embedding_wanted
    }
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Record the embedder's space in the store before the first vector is written; once
    /// per process (the space of a store changes only offline, with `engram reembed`).
    pub async fn ensure_space(&self) -> crate::error::Result<()> {
        use std::sync::atomic::Ordering;
        if self.space_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        self.store.ensure_embedding_space(self.embedder.model_id(), self.embedder.dims()).await?;
        self.space_ready.store(true, Ordering::Release);
        Ok(())
    }
}
