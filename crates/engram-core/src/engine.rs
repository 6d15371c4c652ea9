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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;
use time::OffsetDateTime;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::llm::Llm;
use crate::metrics::Metrics;
use crate::model::{
    Agent, AgentId, Category, Content, ConversationId, EventKind, Importance, Job, JobKind,
    KeyRole, Kind, Memory, MemoryEvent, MemoryId, Message, MessageId, MessageRole, Principal,
    Source, SourceKind, TenantId, UserId, default_pool,
};
use crate::pipeline::extract::{ExtractionMode, MemoryPolicy, resume_index};
use crate::pipeline::pii::{self, Filtered, PiiKind};
use crate::retrieval::{self, Explain};
use crate::store::{
    BackupRow, BackupScope, ContextSession, EraseCounts, MemoryFilter, MemoryPage, NewMemory,
    RestoreState, Store, StoreStats,
};

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

/// Explicit remember (one memory).
#[derive(Debug, Clone, Default)]
pub struct RememberInput {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub kind: Kind,
    pub key: Option<String>,
    pub category: Category,
    pub importance: Importance,
    pub content: String,
    pub metadata: Option<serde_json::Value>,
    pub source_conversation_id: Option<ConversationId>,
    pub source_kind: Option<SourceKind>,
    pub observed_at: Option<OffsetDateTime>,
    pub expires_at: Option<OffsetDateTime>,
}

/// What a write decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Decision {
    /// A new row was inserted.
    Add,
    /// A new row superseded an older one (profile key changed value).
    Update,
    /// Nothing new: the existing fact was confirmed.
    None,
}

/// Result of a remember.
/// Rows embedded by [`Engine::reembed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReembedReport {
    pub memories: usize,
    pub messages: usize,
}

#[derive(Debug, Clone)]
pub struct Remembered {
    pub decision: Decision,
    pub memory: Memory,
    /// For `NONE`: the similarity to the confirmed fact.
    pub similarity: Option<f32>,
    /// What the PII filter replaced in the content as given (policy `redact`), in order:
    /// an explicit write is never altered without the caller being told.
    pub redacted: Vec<PiiKind>,
}

/// Edit of a memory (PATCH): every field optional; content changes re-embed.
#[derive(Debug, Clone, Default)]
pub struct EditInput {
    pub content: Option<String>,
    pub category: Option<Category>,
    pub importance: Option<Importance>,
    pub kind: Option<Kind>,
    pub metadata: Option<serde_json::Value>,
    pub expires_at: Option<Option<OffsetDateTime>>,
}

/// Where a search looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchSource {
    Memories,
    Messages,
}

/// Hybrid search request.
#[derive(Debug, Clone)]
pub struct SearchInput {
    pub query: String,
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub categories: Option<Vec<Category>>,
    pub kinds: Option<Vec<Kind>>,
    pub sources: Vec<SearchSource>,
    pub since: Option<OffsetDateTime>,
    pub until: Option<OffsetDateTime>,
    pub limit: usize,
    pub explain: bool,
    pub turn_id: Option<String>,
    /// Search only one of the two lists (benchmarks and diagnostics).
    pub mode: SearchMode,
}

/// Which lists a search fuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    #[default]
    Hybrid,
    VectorOnly,
    TextOnly,
}

impl Default for SearchInput {
    fn default() -> Self {
        Self {
            query: String::new(),
            user_id: None,
            agent_id: None,
            categories: None,
            kinds: None,
            sources: vec![SearchSource::Memories],
            since: None,
            until: None,
            limit: 10,
            explain: false,
            turn_id: None,
            mode: SearchMode::Hybrid,
        }
    }
}

/// One search result.
#[derive(Debug, Clone)]
pub enum Hit {
    Memory { memory: Memory, score: f64, explain: Explain },
    Message { message: Message, score: f64, explain: Explain },
}

impl Hit {
    pub fn score(&self) -> f64 {
        match self {
            Hit::Memory { score, .. } | Hit::Message { score, .. } => *score,
        }
    }

    /// Best first: by score, then (exact ties, e.g. vector rank 1 + text rank 2 against the
    /// reverse) by the better keyword rank, then by id, so the same store and query always
    /// give the same order. Keyword first: on LoCoMo it is the more precise list (R@10 text
    /// alone 0.633 vs vector alone 0.551), and breaking ties by it measured R@10 0.687 vs
    /// 0.682 by vector rank (memories; messages 0.737 vs 0.739, R@1 0.305 vs 0.293).
    fn rank_cmp(a: &Hit, b: &Hit) -> std::cmp::Ordering {
        let key = |h: &Hit| match h {
            Hit::Memory { memory, explain, .. } => {
                (explain.text_rank.unwrap_or(usize::MAX), memory.id.0)
            }
            Hit::Message { message, explain, .. } => {
                (explain.text_rank.unwrap_or(usize::MAX), message.id.0)
            }
        };
        b.score().total_cmp(&a.score()).then_with(|| key(a).cmp(&key(b)))
    }
}

/// Context block request.
#[derive(Debug, Clone, Default)]
pub struct ContextInput {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub query: Option<String>,
    pub token_budget: Option<usize>,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub refresh: bool,
}

/// The prompt block and what went into it.
#[derive(Debug, Clone, Serialize)]
pub struct ContextBlock {
    pub text: String,
    pub memory_ids: Vec<MemoryId>,
    pub token_estimate: usize,
    /// True when not every active fact fit and the most relevant were chosen.
    pub truncated: bool,
    /// True when the text came from the session cache.
    pub cached: bool,
}

/// One message to append.
#[derive(Debug, Clone, Default)]
pub struct MessageInput {
    pub role: MessageRole,
    pub content: String,
    pub created_at: Option<OffsetDateTime>,
    pub tool_name: Option<String>,
    pub tool_args: Option<serde_json::Value>,
    pub tool_result: Option<String>,
    pub turn_id: Option<String>,
    pub metadata: Option<serde_json::Value>,
}

/// A memory's supersession chain and events.
#[derive(Debug, Clone)]
pub struct History {
    pub chain: Vec<Memory>,
    pub events: Vec<MemoryEvent>,
}

/// Everything stored about one user (GDPR portability).
#[derive(Debug, Clone)]
pub struct UserExport {
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub memories: Vec<Memory>,
    pub events: Vec<MemoryEvent>,
    pub messages: Vec<Message>,
}

/// Outcome of an import.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ImportReport {
    pub imported: usize,
    pub skipped: usize,
}

/// Filters of a list call.
#[derive(Debug, Clone, Default)]
pub struct ListInput {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub categories: Option<Vec<Category>>,
    pub kinds: Option<Vec<Kind>>,
    pub include_superseded: bool,
    pub cursor: Option<MemoryId>,
    pub limit: usize,
}

/// Agent settings as given by a client.
#[derive(Debug, Clone)]
pub struct AgentInput {
    pub memory_enabled: bool,
    pub cluster_id: Option<String>,
    pub dedup_threshold: Option<f32>,
    pub settings: serde_json::Value,
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

/// The `(user, agent)` a batch item names; items with the same key share a [`View`].
type ViewKey = (Option<UserId>, Option<AgentId>);

/// The memory-visibility view of a caller for one request.
struct View {
    tenant: TenantId,
    user: Option<UserId>,
    agent: Option<AgentId>,
    /// The pool of `agent`, if any.
    pool: Option<String>,
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

    /// Re-embed every memory and every transcript message of every tenant with `embedder`
    /// (after a model change; messages appended before message embeddings existed are
    /// embedded too), then record the new embedding space. Resumable: rows already carrying
    /// the new model's vector are skipped, and the space changes only once every row is
    /// done. Run it with no server on the store. Returns the numbers of rows embedded;
    /// `progress` gets the running totals after every batch.
    pub async fn reembed(
        store: &Arc<dyn Store>,
        embedder: &Arc<dyn Embedder>,
        batch: usize,
        progress: &(dyn Fn(&ReembedReport) + Send + Sync),
    ) -> Result<ReembedReport> {
        let model = embedder.model_id().to_string();
        let mut report = ReembedReport::default();
        for tenant in store.list_tenants().await? {
            loop {
                let rows = store.rows_needing_vectors(&tenant, &model, batch.max(1)).await?;
                if rows.is_empty() {
                    break;
                }
                let texts: Vec<String> = rows.iter().map(|(_, c)| c.clone()).collect();
                let vectors = embedder.embed(&texts).await?;
                if vectors.len() != rows.len() || vectors.iter().any(|v| v.len() != embedder.dims())
                {
                    return Err(Error::internal(
                        "embedder returned vectors of the wrong count or dimension",
                    ));
                }
                report.memories += rows.len();
                store
                    .set_vectors(
                        &tenant,
                        &model,
                        rows.into_iter().map(|(id, _)| id).zip(vectors).collect(),
                    )
                    .await?;
                progress(&report);
            }
            loop {
                let convs =
                    store.conversations_needing_message_vectors(&tenant, &model, 100).await?;
                if convs.is_empty() {
                    break;
                }
                let mut n = 0;
                for c in &convs {
                    n += crate::pipeline::messages::embed_conversation(store, embedder, &tenant, c)
                        .await?;
                }
                if n == 0 {
                    break; // nothing embeddable left (cannot loop forever)
                }
                report.messages += n;
                progress(&report);
            }
        }
        store.reset_embedding_space(&model, embedder.dims()).await?;
        Ok(report)
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

    /// Resolve who may see what for a request naming `user` and `agent`.
    async fn view(
        &self,
        p: &Principal,
        user: Option<&UserId>,
        agent: Option<&AgentId>,
        user_required: bool,
    ) -> Result<View> {
        let (user, agent) = match &p.role {
            KeyRole::Admin => (user.cloned(), agent.cloned()),
            KeyRole::Agent(bound) => {
                if let Some(a) = agent
                    && a != bound
                {
                    return Err(Error::Forbidden(format!(
                        "this key is bound to agent '{bound}' and cannot act for agent '{a}'"
                    )));
                }
                (user.cloned(), Some(bound.clone()))
            }
            KeyRole::User(bound) => {
                if let Some(u) = user
                    && u != bound
                {
                    return Err(Error::Forbidden(format!(
                        "this key is bound to user '{bound}' and cannot act for user '{u}'"
                    )));
                }
                (Some(bound.clone()), agent.cloned())
            }
        };
        if user_required && user.is_none() {
            return Err(Error::invalid("user_id", "user_id is required"));
        }
        let pool = match &agent {
            Some(a) => Some(self.pool_of(&p.tenant, a).await?),
            None => None,
        };
        Ok(View { tenant: p.tenant.clone(), user, agent, pool })
    }

    async fn pool_of(&self, tenant: &TenantId, agent: &AgentId) -> Result<String> {
        Ok(match self.store.get_agent(tenant, agent).await? {
            Some(a) => a.pool(),
            None => default_pool(agent),
        })
    }

    fn filter(&self, v: &View) -> MemoryFilter {
        MemoryFilter { user_id: v.user.clone(), pool: v.pool.clone(), ..Default::default() }
    }

    /// May the caller see this row? (Same rule as the store filter.)
    async fn visible(&self, p: &Principal, m: &Memory) -> Result<bool> {
        let pool = self.caller_pool(p).await?;
        Ok(Self::sees(p, pool.as_deref(), m))
    }

    /// The memory pool of an agent key (one agent read); None for other roles. Resolve it
    /// once before checking many rows with [`Engine::sees`].
    async fn caller_pool(&self, p: &Principal) -> Result<Option<String>> {
        match &p.role {
            KeyRole::Agent(a) => Ok(Some(self.pool_of(&p.tenant, a).await?)),
            KeyRole::Admin | KeyRole::User(_) => Ok(None),
        }
    }

    /// The visibility rule, with the caller's pool already resolved ([`Engine::caller_pool`]).
    fn sees(p: &Principal, caller_pool: Option<&str>, m: &Memory) -> bool {
        match &p.role {
            KeyRole::Admin => true,
            KeyRole::User(u) => &m.user_id == u,
            KeyRole::Agent(_) => {
                m.kind == Kind::Shared || m.pool.is_none() || m.pool.as_deref() == caller_pool
            }
        }
    }

    async fn load_visible(&self, p: &Principal, id: MemoryId) -> Result<Memory> {
        match self.store.get_memory(&p.tenant, id).await? {
            Some(m) if self.visible(p, &m).await? => Ok(m),
            _ => Err(Error::not_found(format!("memory {id}"))),
        }
    }

    /// Is the row `id` visible to the caller? (An unknown id is not.)
    async fn id_visible(&self, p: &Principal, id: MemoryId) -> Result<bool> {
        Ok(match self.store.get_memory(&p.tenant, id).await? {
            Some(m) => self.visible(p, &m).await?,
            None => false,
        })
    }

    /// Clear the `superseded_by` of rows whose successor the caller cannot see: a private
    /// successor's id is none of the caller's business (issue 10: ids inside other rows).
    /// Admin keys see every row, and a successor always belongs to its predecessor's user,
    /// so only agent keys can have something to hide.
    async fn hide_invisible_successors(&self, p: &Principal, rows: &mut [Memory]) -> Result<()> {
        if !matches!(p.role, KeyRole::Agent(_)) {
            return Ok(());
        }
        let ids: Vec<MemoryId> = rows.iter().filter_map(|m| m.superseded_by).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let pool = self.caller_pool(p).await?;
        let seen: HashSet<MemoryId> = self
            .store
            .get_memories(&p.tenant, &ids)
            .await?
            .into_iter()
            .filter(|s| Self::sees(p, pool.as_deref(), s))
            .map(|s| s.id)
            .collect();
        for m in rows {
            if m.superseded_by.is_some_and(|s| !seen.contains(&s)) {
                m.superseded_by = None;
            }
        }
        Ok(())
    }

    fn require_admin(p: &Principal, what: &str) -> Result<()> {
        match &p.role {
            KeyRole::Admin => Ok(()),
            KeyRole::Agent(_) | KeyRole::User(_) => {
                Err(Error::Forbidden(format!("{what} needs an admin key")))
            }
        }
    }

    async fn dedup_threshold(&self, tenant: &TenantId, agent: Option<&AgentId>) -> Result<f32> {
        if let Some(a) = agent
            && let Some(agent) = self.store.get_agent(tenant, a).await?
        {
            return Ok(agent.dedup_threshold);
        }
        Ok(self.cfg.dedup_threshold)
    }

    /// The stored active fact in `v`'s scope that `content` (embedded as `vector`) repeats:
    /// cosine ≥ `threshold` and [`crate::dedup::same_fact`]; the most similar such fact among
    /// the nearest few.
    async fn duplicate_of(
        &self,
        v: &View,
        vector: &[f32],
        content: &str,
        threshold: f32,
    ) -> Result<Option<(MemoryId, f32)>> {
        const NEIGHBOURS: usize = 5;
        let filter = self.filter(v);
        let hits = self.store.vector_search(&v.tenant, &filter, vector, NEIGHBOURS).await?;
        let close: Vec<(MemoryId, f32)> =
            hits.into_iter().filter(|(_, sim)| *sim >= threshold).collect();
        if close.is_empty() {
            return Ok(None);
        }
        let ids: Vec<MemoryId> = close.iter().map(|h| h.0).collect();
        let rows = self.store.get_memories(&v.tenant, &ids).await?;
        Ok(close.into_iter().find(|(id, _)| {
            rows.iter().any(|m| m.id == *id && crate::dedup::same_fact(&m.content, content))
        }))
    }

    async fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        let mut v = self.embedder.embed(&[text.to_string()]).await?;
        v.pop().ok_or_else(|| Error::internal("embedder returned no vector"))
    }

    // ------------------------------------------------------------------ writes

    /// Explicit writes go through the writer agent's PII policy (default: redact); returns
    /// the row to store and what was redacted. A redaction is recorded in the row's first
    /// event (`detail.redacted`), so the audit trail says the text is not as given.
    async fn apply_pii(
        &self,
        tenant: &TenantId,
        agent: Option<&AgentId>,
        mut m: Memory,
    ) -> Result<(Memory, Vec<PiiKind>)> {
        let agent_row = match agent {
            Some(a) => self.store.get_agent(tenant, a).await?,
            None => None,
        };
        let policy = MemoryPolicy::of(agent_row.as_ref(), self.cfg.dedup_threshold).pii;
        match pii::filter(&m.content, policy) {
            Filtered::Keep { text, redacted } => {
                m.content = text;
                Ok((m, redacted))
            }
            Filtered::Rejected(kinds) => {
                let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
                Err(Error::Unprocessable(format!(
                    "the content holds personal data ({}) and the agent's PII policy is reject",
                    kinds.join(", ")
                )))
            }
        }
    }

    fn build_memory(&self, v: &View, input: &RememberInput, now: OffsetDateTime) -> Result<Memory> {
        let content = Content::parse(&input.content, self.cfg.max_content_bytes)?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        let key = match (input.kind, &input.key) {
            (Kind::Profile, Some(k)) if !k.trim().is_empty() => Some(k.trim().to_string()),
            (Kind::Profile, _) => {
                return Err(Error::invalid("key", "a profile memory needs a non-empty key"));
            }
            (Kind::Knowledge | Kind::Shared, Some(_)) => {
                return Err(Error::invalid("key", "only profile memories have a key"));
            }
            (Kind::Knowledge | Kind::Shared, None) => None,
        };
        let metadata = input.metadata.clone().unwrap_or_else(|| serde_json::json!({}));
        if !metadata.is_object() {
            return Err(Error::invalid("metadata", "metadata must be a JSON object"));
        }
        if metadata.to_string().contains("\\u0000") {
            return Err(Error::invalid("metadata", "metadata must not contain NUL characters"));
        }
        if let Some(e) = input.expires_at
            && e <= now
        {
            return Err(Error::invalid("expires_at", "expires_at must be in the future"));
        }
        let source_kind = input.source_kind.unwrap_or(if input.source_conversation_id.is_some() {
            SourceKind::Conversation
        } else {
            SourceKind::Manual
        });
        Ok(Memory {
            id: MemoryId::new(),
            tenant_id: v.tenant.clone(),
            user_id: user,
            agent_id: v.agent.clone(),
            pool: v.pool.clone(),
            kind: input.kind,
            key,
            category: input.category,
            importance: input.importance,
            rating: 0,
            content: content.into_string(),
            source: Source {
                kind: source_kind,
                conversation_id: input.source_conversation_id.clone(),
                message_ids: vec![],
            },
            observed_at: input.observed_at.map_or(now, crate::model::micros),
            created_at: now,
            updated_at: now,
            last_accessed_at: None,
            access_count: 0,
            mention_count: 1,
            expires_at: input.expires_at,
            superseded_at: None,
            superseded_by: None,
            metadata,
            embedding_model: None,
        })
    }

    fn event(
        id: MemoryId,
        kind: EventKind,
        related: Option<MemoryId>,
        p: &Principal,
        at: OffsetDateTime,
    ) -> MemoryEvent {
        MemoryEvent {
            memory_id: id,
            event: kind,
            related_id: related,
            actor: actor_name(p),
            detail: serde_json::json!({}),
            at,
        }
    }

    /// Explicit remember: PII-free content is embedded, deduplicated against the active facts
    /// the caller can see (cosine ≥ threshold → `NONE`, the existing fact confirmed), and
    /// stored. Profile facts upsert by key instead (`UPDATE` supersedes the old value).
    pub async fn remember(&self, p: &Principal, input: RememberInput) -> Result<Remembered> {
        let mut out = self.remember_batch(p, vec![input], true).await?;
        out.pop().ok_or_else(|| Error::internal("empty batch result"))
    }

    /// Bulk remember in one transaction. With `dedup`, every item is checked against the
    /// store and against the earlier items of the same batch; without, every item is stored
    /// as given. All items are validated before anything is written: one bad item fails
    /// the whole batch and nothing is stored.
    pub async fn remember_batch(
        &self,
        p: &Principal,
        inputs: Vec<RememberInput>,
        dedup: bool,
    ) -> Result<Vec<Remembered>> {
        let now = crate::model::now();
        // Validate and scope everything first.
        let mut prepared = Vec::with_capacity(inputs.len());
        let mut views: HashMap<ViewKey, View> = HashMap::new();
        for (i, input) in inputs.iter().enumerate() {
            let key = (input.user_id.clone(), input.agent_id.clone());
            if !views.contains_key(&key) {
                let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), true).await?;
                views.insert(key.clone(), v);
            }
            let v = &views[&key];
            let m = self
                .build_memory(v, input, now)
                .map_err(|e| prefix_batch_error(e, i, inputs.len()))?;
            let (m, redacted) = self
                .apply_pii(&v.tenant, v.agent.as_ref(), m)
                .await
                .map_err(|e| prefix_batch_error(e, i, inputs.len()))?;
            prepared.push((key, m, redacted));
        }
        // Embed every non-profile item in one call.
        let texts: Vec<String> = prepared
            .iter()
            .filter(|(_, m, _)| m.kind != Kind::Profile)
            .map(|(_, m, _)| m.content.clone())
            .collect();
        let mut vectors =
            if texts.is_empty() { vec![] } else { self.embedder.embed(&texts).await? }.into_iter();
        if !texts.is_empty() {
            self.store
                .ensure_embedding_space(self.embedder.model_id(), self.embedder.dims())
                .await?;
        }

        let mut results = Vec::with_capacity(prepared.len());
        let mut rows: Vec<NewMemory> = Vec::new();
        // Items of this batch already accepted, per view, for in-batch dedup.
        let mut batch_vecs: HashMap<ViewKey, Vec<(usize, Vec<f32>)>> = HashMap::new();
        let mut thresholds: HashMap<ViewKey, f32> = HashMap::new();
        for (key, mut m, redacted) in prepared {
            let v = &views[&key];
            if m.kind == Kind::Profile {
                let mut r = self.remember_profile(p, v, m, &redacted, now).await?;
                r.redacted = redacted;
                results.push(r);
                continue;
            }
            let vector = vectors
                .next()
                .ok_or_else(|| Error::internal("embedder returned too few vectors"))?;
            m.embedding_model = Some(self.embedder.model_id().to_string());
            if dedup {
                // One agent lookup per view, not per item.
                let threshold = match thresholds.get(&key) {
                    Some(t) => *t,
                    None => {
                        let t = self.dedup_threshold(&v.tenant, v.agent.as_ref()).await?;
                        thresholds.insert(key.clone(), t);
                        t
                    }
                };
                // Against earlier items of this batch: similar enough and the same words.
                let earlier = batch_vecs.get(&key).and_then(|list| {
                    list.iter()
                        .map(|(i, vec)| (*i, crate::embed::dot(vec, &vector)))
                        .filter(|(i, sim)| {
                            *sim >= threshold
                                && crate::dedup::same_fact(&results[*i].memory.content, &m.content)
                        })
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                });
                if let Some((idx, sim)) = earlier {
                    let existing = results[idx].memory.clone();
                    results.push(Remembered {
                        decision: Decision::None,
                        memory: existing,
                        similarity: Some(sim),
                        redacted,
                    });
                    continue;
                }
                // Against the store: the most similar fact that passes the word check.
                if let Some((id, sim)) =
                    self.duplicate_of(v, &vector, &m.content, threshold).await?
                {
                    let ev = Self::event(id, EventKind::Confirmed, None, p, now);
                    self.store.confirm_memory(&v.tenant, id, ev).await?;
                    let existing = self
                        .store
                        .get_memory(&v.tenant, id)
                        .await?
                        .ok_or_else(|| Error::internal("confirmed memory vanished"))?;
                    results.push(Remembered {
                        decision: Decision::None,
                        memory: existing,
                        similarity: Some(sim),
                        redacted,
                    });
                    continue;
                }
                batch_vecs.entry(key.clone()).or_default().push((results.len(), vector.clone()));
            }
            let kind = if m.source.kind == SourceKind::Import {
                EventKind::Imported
            } else {
                EventKind::Created
            };
            let mut event = Self::event(m.id, kind, None, p, now);
            note_redactions(&mut event, &redacted);
            rows.push(NewMemory { memory: m.clone(), vector: Some(vector), events: vec![event] });
            results.push(Remembered {
                decision: Decision::Add,
                memory: m,
                similarity: None,
                redacted,
            });
        }
        if !rows.is_empty() {
            self.store.insert_memories(&p.tenant, rows).await?;
        }
        Ok(results)
    }

    async fn remember_profile(
        &self,
        p: &Principal,
        v: &View,
        m: Memory,
        redacted: &[PiiKind],
        now: OffsetDateTime,
    ) -> Result<Remembered> {
        let key = m.key.clone().unwrap_or_default();
        let existing =
            self.store.find_profile(&v.tenant, &m.user_id, v.pool.as_deref(), &key).await?;
        match existing {
            Some(old) if old.content == m.content => {
                let ev = Self::event(old.id, EventKind::Confirmed, None, p, now);
                self.store.confirm_memory(&v.tenant, old.id, ev).await?;
                let old = self.store.get_memory(&v.tenant, old.id).await?.unwrap_or(old);
                Ok(Remembered {
                    decision: Decision::None,
                    memory: old,
                    similarity: Some(1.0),
                    redacted: vec![],
                })
            }
            Some(old) => {
                let mut new_ev = Self::event(m.id, EventKind::Created, Some(old.id), p, now);
                note_redactions(&mut new_ev, redacted);
                let old_ev = Self::event(old.id, EventKind::Superseded, Some(m.id), p, now);
                let row = NewMemory { memory: m.clone(), vector: None, events: vec![new_ev] };
                self.store.supersede(&v.tenant, old.id, Some(row), old_ev).await?;
                Ok(Remembered {
                    decision: Decision::Update,
                    memory: m,
                    similarity: None,
                    redacted: vec![],
                })
            }
            None => {
                let mut ev = Self::event(m.id, EventKind::Created, None, p, now);
                note_redactions(&mut ev, redacted);
                self.store
                    .insert_memories(
                        &v.tenant,
                        vec![NewMemory { memory: m.clone(), vector: None, events: vec![ev] }],
                    )
                    .await?;
                Ok(Remembered {
                    decision: Decision::Add,
                    memory: m,
                    similarity: None,
                    redacted: vec![],
                })
            }
        }
    }

    /// Edit: a new row with the changes supersedes the old one (its history keeps both).
    /// New content goes through the PII filter of the row's agent, as any explicit write.
    pub async fn edit(&self, p: &Principal, id: MemoryId, input: EditInput) -> Result<Memory> {
        Ok(self.edit_reporting(p, id, input).await?.0)
    }

    /// [`Engine::edit`], also returning what the PII filter redacted in the new content.
    pub async fn edit_reporting(
        &self,
        p: &Principal,
        id: MemoryId,
        input: EditInput,
    ) -> Result<(Memory, Vec<PiiKind>)> {
        let old = self.load_visible(p, id).await?;
        if old.superseded_at.is_some() {
            let by = match old.superseded_by {
                Some(s) if self.id_visible(p, s).await? => format!(" by {s}"),
                Some(_) | None => String::new(),
            };
            return Err(Error::Conflict(format!(
                "memory {id} is superseded{by}; edit the current version"
            )));
        }
        let now = crate::model::now();
        let content = match &input.content {
            Some(c) => Content::parse(c, self.cfg.max_content_bytes)?.into_string(),
            None => old.content.clone(),
        };
        let kind = input.kind.unwrap_or(old.kind);
        if kind == Kind::Profile && old.kind != Kind::Profile {
            return Err(Error::invalid(
                "kind",
                "a memory cannot become a profile fact; create one with a key",
            ));
        }
        if kind != Kind::Profile && old.kind == Kind::Profile {
            return Err(Error::invalid("kind", "a profile fact cannot change kind"));
        }
        // A new version stays in the old one's pool: an agent that sees another pool's
        // shared fact may edit it, but not turn it into a private fact of that pool (it
        // would write into another agent's memory and get back a row it cannot see).
        if let KeyRole::Agent(a) = &p.role
            && kind != Kind::Shared
            && let Some(pool) = &old.pool
            && *pool != self.pool_of(&p.tenant, a).await?
        {
            return Err(Error::Forbidden(format!(
                "memory {id} is a shared fact of another agent's memory pool: keep it shared \
                 or ask an admin key to change its kind"
            )));
        }
        if let Some(md) = &input.metadata
            && !md.is_object()
        {
            return Err(Error::invalid("metadata", "metadata must be a JSON object"));
        }
        let expires_at = match input.expires_at {
            Some(Some(e)) if e <= now => {
                return Err(Error::invalid("expires_at", "expires_at must be in the future"));
            }
            Some(e) => e,
            None => old.expires_at,
        };
        let mut new = Memory {
            id: MemoryId::new(),
            content,
            kind,
            category: input.category.unwrap_or(old.category),
            importance: input.importance.unwrap_or(old.importance),
            metadata: input.metadata.clone().unwrap_or_else(|| old.metadata.clone()),
            expires_at,
            created_at: now,
            updated_at: now,
            superseded_at: None,
            superseded_by: None,
            last_accessed_at: None,
            access_count: 0,
            ..old.clone()
        };
        let mut redacted = vec![];
        if input.content.is_some() {
            let agent = new.agent_id.clone();
            (new, redacted) = self.apply_pii(&p.tenant, agent.as_ref(), new).await?;
        }
        let vector = if new.kind == Kind::Profile {
            None
        } else {
            self.store
                .ensure_embedding_space(self.embedder.model_id(), self.embedder.dims())
                .await?;
            new.embedding_model = Some(self.embedder.model_id().to_string());
            Some(self.embed_one(&new.content).await?)
        };
        let mut new_ev = Self::event(new.id, EventKind::Created, Some(old.id), p, now);
        note_redactions(&mut new_ev, &redacted);
        let old_ev = Self::event(old.id, EventKind::Superseded, Some(new.id), p, now);
        self.store
            .supersede(
                &p.tenant,
                old.id,
                Some(NewMemory { memory: new.clone(), vector, events: vec![new_ev] }),
                old_ev,
            )
            .await?;
        Ok((new, redacted))
    }

    /// Forget: supersede with no successor (kept for audit), or purge physically.
    pub async fn forget(&self, p: &Principal, id: MemoryId, purge: bool) -> Result<()> {
        let old = self.load_visible(p, id).await?;
        if purge {
            if let KeyRole::Agent(_) = p.role {
                return Err(Error::Forbidden("purge needs an admin or user key".into()));
            }
            return self.store.purge_memory(&p.tenant, old.id).await;
        }
        if old.superseded_at.is_some() {
            return Err(Error::Conflict(format!("memory {id} is already superseded or forgotten")));
        }
        let ev = Self::event(old.id, EventKind::Forgotten, None, p, crate::model::now());
        self.store.supersede(&p.tenant, old.id, None, ev).await
    }

    pub async fn get(&self, p: &Principal, id: MemoryId) -> Result<Memory> {
        let mut m = [self.load_visible(p, id).await?];
        self.hide_invisible_successors(p, &mut m).await?;
        let [m] = m;
        Ok(m)
    }

    /// The supersession chain through `id` and its events, as far as the caller may see:
    /// versions the caller cannot see (another agent's private edit of a shared fact, or
    /// the private original of a shared one) are left out with their events, and ids of
    /// left-out versions are cleared from `superseded_by` and from the events.
    pub async fn history(&self, p: &Principal, id: MemoryId) -> Result<History> {
        let _ = self.load_visible(p, id).await?;
        let (chain, events) = self.store.history(&p.tenant, id).await?;
        let pool = self.caller_pool(p).await?;
        let mut kept: Vec<Memory> =
            chain.into_iter().filter(|m| Self::sees(p, pool.as_deref(), m)).collect();
        let ids: HashSet<MemoryId> = kept.iter().map(|m| m.id).collect();
        for m in &mut kept {
            if m.superseded_by.is_some_and(|s| !ids.contains(&s)) {
                m.superseded_by = None;
            }
        }
        let mut shown = Vec::with_capacity(events.len());
        for mut e in events.into_iter().filter(|e| ids.contains(&e.memory_id)) {
            if e.related_id.is_some_and(|r| !ids.contains(&r)) {
                e.related_id = None;
            }
            let via = e.detail.get("via_message").and_then(|v| v.as_str()).map(str::to_string);
            if let Some(msg) = via
                && !self.message_visible(p, &msg).await?
                && let Some(d) = e.detail.as_object_mut()
            {
                d.remove("via_message");
            }
            shown.push(e);
        }
        Ok(History { chain: kept, events: shown })
    }

    /// Rate a memory −1 or +1.
    pub async fn rate(&self, p: &Principal, id: MemoryId, value: i64) -> Result<Memory> {
        if value != 1 && value != -1 {
            return Err(Error::invalid("value", "a rating is -1 or 1"));
        }
        let m = self.load_visible(p, id).await?;
        let mut ev = Self::event(m.id, EventKind::Rated, None, p, crate::model::now());
        ev.detail = serde_json::json!({ "value": value });
        self.store.rate_memory(&p.tenant, m.id, value, ev).await?;
        self.get(p, id).await
    }

    pub async fn list(&self, p: &Principal, input: ListInput) -> Result<MemoryPage> {
        let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), false).await?;
        let mut f = self.filter(&v);
        f.kinds = input.kinds;
        f.categories = input.categories;
        f.include_superseded = input.include_superseded;
        let limit = clamp_limit(input.limit, self.cfg.max_limit)?;
        let mut page = self.store.list_memories(&p.tenant, &f, input.cursor, limit).await?;
        self.hide_invisible_successors(p, &mut page.memories).await?;
        Ok(page)
    }

    // ------------------------------------------------------------------ reads

    /// Hybrid search (vector + BM25, RRF k=60, then decay, importance and rating).
    pub async fn search(&self, p: &Principal, input: SearchInput) -> Result<Vec<Hit>> {
        let query = input.query.trim();
        if query.is_empty() {
            return Err(Error::invalid("query", "query must not be empty"));
        }
        if query.len() > self.cfg.max_content_bytes {
            return Err(Error::TooLarge(format!(
                "query is {} bytes; the limit is {}",
                query.len(),
                self.cfg.max_content_bytes
            )));
        }
        let limit = clamp_limit(input.limit, self.cfg.max_limit)?;
        if input.sources.is_empty() {
            return Err(Error::invalid(
                "sources",
                "sources must name at least one of: memories, messages",
            ));
        }
        let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), true).await?;
        let mut f = self.filter(&v);
        f.kinds = input.kinds.clone();
        f.categories = input.categories.clone();
        f.since = input.since;
        f.until = input.until;
        let now = crate::model::now();
        let n = self.cfg.candidates.max(limit);
        let mut hits = Vec::new();
        let qv = match input.mode {
            SearchMode::TextOnly => None,
            SearchMode::Hybrid | SearchMode::VectorOnly => Some(self.embed_one(query).await?),
        };

        if input.sources.contains(&SearchSource::Memories) {
            // The two lists are independent: ask the store for both at once (two pooled
            // connections), so a search waits for the slower list, not for their sum.
            let vector = async {
                match &qv {
                    None => Ok(vec![]),
                    Some(qv) => self.store.vector_search(&v.tenant, &f, qv, n).await,
                }
            };
            let text = async {
                if input.mode == SearchMode::VectorOnly {
                    Ok(vec![])
                } else {
                    self.store.text_search(&v.tenant, &f, query, n).await
                }
            };
            let (vec_list, text_list) = tokio::try_join!(vector, text)?;
            let mut parts: HashMap<MemoryId, Explain> = HashMap::new();
            for (rank, (id, sim)) in vec_list.iter().enumerate() {
                let e = parts.entry(*id).or_default();
                e.vector_rank = Some(rank + 1);
                e.vector_similarity = Some(*sim);
            }
            for (rank, (id, s)) in text_list.iter().enumerate() {
                let e = parts.entry(*id).or_default();
                e.text_rank = Some(rank + 1);
                e.text_score = Some(*s);
            }
            let ids: Vec<MemoryId> = parts.keys().copied().collect();
            for m in self.store.get_memories(&v.tenant, &ids).await? {
                let Some(mut e) = parts.remove(&m.id) else { continue };
                e.days_since_access =
                    retrieval::days_between(m.last_accessed_at.unwrap_or(m.created_at), now);
                e.access_count = m.access_count;
                e.importance = m.importance.get();
                e.rating = m.rating;
                let score = retrieval::finish(&mut e);
                hits.push(Hit::Memory { memory: m, score, explain: e });
            }
        }
        if input.sources.contains(&SearchSource::Messages) {
            let user =
                v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
            // Messages are embedded in the background (pipeline::messages): one not embedded
            // yet is found by its words only.
            let vector = async {
                match &qv {
                    None => Ok(vec![]),
                    Some(qv) => {
                        let model = self.embedder.model_id();
                        self.store.vector_search_messages(&v.tenant, &user, model, qv, n).await
                    }
                }
            };
            let text = async {
                if input.mode == SearchMode::VectorOnly {
                    Ok(vec![])
                } else {
                    self.store.text_search_messages(&v.tenant, &user, query, n).await
                }
            };
            let (vec_list, text_list) = tokio::try_join!(vector, text)?;
            // In first-seen order (vector list, then text list), so ties rank the same way
            // on every call.
            let mut parts: Vec<(MessageId, Explain)> = Vec::new();
            fn slot(parts: &mut Vec<(MessageId, Explain)>, id: MessageId) -> &mut Explain {
                let i = parts.iter().position(|(p, _)| *p == id).unwrap_or_else(|| {
                    parts.push((id, Explain::default()));
                    parts.len() - 1
                });
                &mut parts[i].1
            }
            for (rank, (id, sim)) in vec_list.iter().enumerate() {
                let e = slot(&mut parts, *id);
                e.vector_rank = Some(rank + 1);
                e.vector_similarity = Some(*sim);
            }
            for (rank, (id, s)) in text_list.iter().enumerate() {
                let e = slot(&mut parts, *id);
                e.text_rank = Some(rank + 1);
                e.text_score = Some(*s);
            }
            for (id, mut e) in parts {
                let Some(msg) = self.store.get_message(&v.tenant, id).await? else { continue };
                if let (Some(pool), Some(agent)) = (&v.pool, &msg.agent_id)
                    && &self.pool_of(&v.tenant, agent).await? != pool
                {
                    continue;
                }
                e.importance = 5;
                e.rating = msg.rating;
                e.days_since_access = retrieval::days_between(msg.created_at, now);
                let score = retrieval::finish(&mut e);
                hits.push(Hit::Message { message: msg, score, explain: e });
            }
        }
        hits.sort_by(Hit::rank_cmp);
        hits.truncate(limit);
        let ids: Vec<MemoryId> = hits
            .iter()
            .filter_map(|h| match h {
                Hit::Memory { memory, .. } => Some(memory.id),
                Hit::Message { .. } => None,
            })
            .collect();
        if !ids.is_empty() {
            self.store.touch_memories(&v.tenant, &ids, now).await?;
            if let Some(t) = &input.turn_id {
                self.store.record_recall(&v.tenant, t, &ids).await?;
            }
        }
        Ok(hits)
    }

    /// The prompt block: `Known facts about the user:` and a bullet list, profile facts
    /// first, then all active facts by `observed_at` when they fit the budget, otherwise the
    /// most relevant to the query. Same `session_id` → same text until `refresh`.
    pub async fn context(&self, p: &Principal, input: ContextInput) -> Result<ContextBlock> {
        let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), true).await?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        if let Some(q) = &input.query
            && q.trim().len() > self.cfg.max_content_bytes
        {
            return Err(Error::TooLarge(format!(
                "query is {} bytes; the limit is {}",
                q.trim().len(),
                self.cfg.max_content_bytes
            )));
        }
        let budget = input.token_budget.unwrap_or(self.cfg.token_budget);
        if budget == 0 || budget > 1_000_000 {
            return Err(Error::invalid("token_budget", "token_budget must be 1 to 1000000"));
        }
        if let Some(sid) = &input.session_id {
            if sid.is_empty() || sid.len() > 256 {
                return Err(Error::invalid("session_id", "session_id must be 1 to 256 bytes"));
            }
            if !input.refresh
                && let Some(s) =
                    self.store.get_context_session(&v.tenant, sid, &user, v.pool.as_deref()).await?
            {
                let token_estimate = retrieval::estimate_tokens(&s.text);
                if let Some(t) = &input.turn_id {
                    self.store.record_recall(&v.tenant, t, &s.memory_ids).await?;
                }
                return Ok(ContextBlock {
                    text: s.text,
                    memory_ids: s.memory_ids,
                    token_estimate,
                    truncated: false,
                    cached: true,
                });
            }
        }
        let now = crate::model::now();
        let all = self.store.all_active(&v.tenant, &self.filter(&v)).await?;
        let header = "Known facts about the user:";
        let line = |m: &Memory| format!("- {}", m.content);
        let cost = |m: &Memory| retrieval::estimate_tokens(&line(m)) + 1;
        let mut total = retrieval::estimate_tokens(header) + 1;
        let (profiles, facts): (Vec<&Memory>, Vec<&Memory>) =
            all.iter().partition(|m| m.kind == Kind::Profile);
        let all_cost: usize = total + all.iter().map(cost).sum::<usize>();
        let mut chosen: Vec<&Memory> = Vec::new();
        let mut truncated = false;
        if all_cost <= budget {
            chosen.extend(profiles.iter().copied());
            chosen.extend(facts.iter().copied());
        } else {
            truncated = true;
            for m in &profiles {
                if total + cost(m) <= budget {
                    total += cost(m);
                    chosen.push(m);
                }
            }
            // Rank the rest: by relevance to the query, else by importance and recency.
            let mut ranked: Vec<&Memory> = facts.clone();
            if let Some(q) = input.query.as_deref().filter(|q| !q.trim().is_empty()) {
                let hits = self
                    .search(
                        p,
                        SearchInput {
                            query: q.to_string(),
                            user_id: Some(user.clone()),
                            agent_id: v.agent.clone(),
                            limit: self.cfg.max_limit,
                            ..Default::default()
                        },
                    )
                    .await?;
                let order: HashMap<MemoryId, usize> = hits
                    .iter()
                    .enumerate()
                    .filter_map(|(i, h)| match h {
                        Hit::Memory { memory, .. } => Some((memory.id, i)),
                        Hit::Message { .. } => None,
                    })
                    .collect();
                ranked.sort_by_key(|m| {
                    (
                        order.get(&m.id).copied().unwrap_or(usize::MAX),
                        std::cmp::Reverse(m.importance),
                        std::cmp::Reverse(m.observed_at),
                    )
                });
            } else {
                ranked.sort_by_key(|m| {
                    (std::cmp::Reverse(m.importance), std::cmp::Reverse(m.observed_at))
                });
            }
            let mut picked: Vec<&Memory> = Vec::new();
            for m in ranked {
                if total + cost(m) <= budget {
                    total += cost(m);
                    picked.push(m);
                }
            }
            picked.sort_by_key(|m| (m.observed_at, m.id));
            chosen.extend(picked);
        }
        let mut text = String::from(header);
        for m in &chosen {
            text.push('\n');
            text.push_str(&line(m));
        }
        let memory_ids: Vec<MemoryId> = chosen.iter().map(|m| m.id).collect();
        if let Some(sid) = &input.session_id {
            self.store
                .put_context_session(
                    &v.tenant,
                    &ContextSession {
                        session_id: sid.clone(),
                        user_id: user.clone(),
                        pool: v.pool.clone(),
                        text: text.clone(),
                        memory_ids: memory_ids.clone(),
                        created_at: now,
                    },
                )
                .await?;
        }
        if !memory_ids.is_empty() {
            self.store.touch_memories(&v.tenant, &memory_ids, now).await?;
            if let Some(t) = &input.turn_id {
                self.store.record_recall(&v.tenant, t, &memory_ids).await?;
            }
        }
        let token_estimate = retrieval::estimate_tokens(&text);
        Ok(ContextBlock { text, memory_ids, token_estimate, truncated, cached: false })
    }

    // ------------------------------------------------------------------ conversations

    /// Append messages to a conversation (durable before return). A conversation belongs to
    /// the user (and agent) that started it.
    pub async fn append_messages(
        &self,
        p: &Principal,
        conversation: ConversationId,
        user_id: Option<UserId>,
        agent_id: Option<AgentId>,
        messages: Vec<MessageInput>,
    ) -> Result<Vec<Message>> {
        let v = self.view(p, user_id.as_ref(), agent_id.as_ref(), true).await?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        if messages.is_empty() {
            return Err(Error::invalid("messages", "messages must not be empty"));
        }
        // A conversation belongs to the user and the agent that started it: another agent
        // may not add to it (issue 10: it would feed that agent's private extraction), and
        // a caller that names no agent continues it as its agent.
        let mut v = v;
        if let Some((owner, conv_agent)) =
            self.store.conversation_owner(&v.tenant, &conversation).await?
        {
            if owner != user {
                return Err(Error::Conflict(format!(
                    "conversation '{conversation}' belongs to another user"
                )));
            }
            match (&conv_agent, &v.agent) {
                (Some(c), Some(a)) if c != a => {
                    return Err(Error::Conflict(format!(
                        "conversation '{conversation}' belongs to another agent"
                    )));
                }
                (Some(c), None) => {
                    v.pool = Some(self.pool_of(&v.tenant, c).await?);
                    v.agent = conv_agent.clone();
                }
                (Some(_) | None, Some(_)) | (None, None) => {}
            }
        }
        let now = crate::model::now();
        let mut rows = Vec::with_capacity(messages.len());
        for (i, m) in messages.into_iter().enumerate() {
            let field = format!("messages[{i}]");
            if m.content.len() > self.cfg.max_content_bytes {
                return Err(Error::TooLarge(format!(
                    "{field}.content is {} bytes; the limit is {}",
                    m.content.len(),
                    self.cfg.max_content_bytes
                )));
            }
            if m.content.contains('\0')
                || m.metadata.as_ref().is_some_and(|v| v.to_string().contains("\\u0000"))
            {
                return Err(Error::invalid(
                    format!("{field}.content"),
                    format!("{field}: text must not contain NUL characters"),
                ));
            }
            if m.content.trim().is_empty() && m.tool_name.is_none() {
                return Err(Error::invalid(
                    format!("{field}.content"),
                    format!("{field}: content must not be empty (unless tool_name is set)"),
                ));
            }
            let metadata = m.metadata.unwrap_or_else(|| serde_json::json!({}));
            if !metadata.is_object() {
                return Err(Error::invalid(
                    format!("{field}.metadata"),
                    "metadata must be a JSON object",
                ));
            }
            rows.push(Message {
                id: MessageId::new(),
                tenant_id: v.tenant.clone(),
                conversation_id: conversation.clone(),
                user_id: user.clone(),
                agent_id: v.agent.clone(),
                seq: 0,
                role: m.role,
                content: m.content,
                tool_name: m.tool_name,
                tool_args: m.tool_args,
                tool_result: m.tool_result,
                turn_id: m.turn_id,
                metadata,
                created_at: m.created_at.unwrap_or(now),
                rating: 0,
            });
        }
        let stored = self.store.append_messages(&v.tenant, rows).await?;
        self.after_append(&v.tenant, &user, v.agent.as_ref(), &conversation, &stored).await?;
        Ok(stored)
    }

    /// Enqueue the background work an append calls for (never runs it here).
    async fn after_append(
        &self,
        tenant: &TenantId,
        user: &UserId,
        agent: Option<&AgentId>,
        conversation: &ConversationId,
        stored: &[Message],
    ) -> Result<()> {
        if stored.iter().any(|m| !m.content.is_empty()) {
            self.enqueue_message_embedding(tenant, user, conversation).await?;
        }
        if self.llm.is_none() {
            return Ok(());
        }
        for m in stored.iter().filter(|m| m.tool_name.is_some() && m.content.is_empty()) {
            let mut job = Job::new(
                tenant.clone(),
                Some(user.clone()),
                JobKind::SynthesizeToolCall,
                serde_json::json!({ "message_id": m.id.to_string() }),
            );
            job.dedup_key = Some(format!("tool:{}", m.id));
            self.store.enqueue_job(&job).await?;
        }
        let agent_row = match agent {
            Some(a) => self.store.get_agent(tenant, a).await?,
            None => None,
        };
        let policy = MemoryPolicy::of(agent_row.as_ref(), self.cfg.dedup_threshold);
        if !policy.memory_enabled {
            return Ok(());
        }
        let due = match policy.mode {
            ExtractionMode::Off => false,
            ExtractionMode::PostTurn => true,
            ExtractionMode::Batched { min_turns } => {
                self.user_turns_since_cursor(tenant, conversation).await? >= min_turns
            }
        };
        if due {
            self.enqueue_extraction(tenant, user, conversation).await?;
        }
        Ok(())
    }

    /// Enqueue the embedding of a conversation's new messages (at most one pending job per
    /// conversation; one running at a time).
    pub(crate) async fn enqueue_message_embedding(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conversation: &ConversationId,
    ) -> Result<()> {
        let mut job = Job::new(
            tenant.clone(),
            Some(user.clone()),
            JobKind::EmbedMessages,
            serde_json::json!({ "conversation_id": conversation.as_str() }),
        );
        job.dedup_key = Some(format!("embed:{conversation}"));
        job.lock_key = Some(format!("embed:{conversation}"));
        self.store.enqueue_job(&job).await?;
        Ok(())
    }

    async fn user_turns_since_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<i64> {
        let messages = self.store.conversation_messages(tenant, conversation).await?;
        let cursor = self.store.extraction_cursor(tenant, conversation).await?;
        let start = resume_index(&messages, cursor.as_deref());
        Ok(messages[start..].iter().filter(|m| m.role == MessageRole::User).count() as i64)
    }

    /// The session of a conversation ended: extract what is left (also under `batched`) and
    /// regenerate its rolling summary. Returns false when no LLM is configured.
    pub async fn end_session(&self, p: &Principal, conversation: &ConversationId) -> Result<bool> {
        let _ = self.messages(p, conversation, 0, 1).await?;
        let Some((user, _)) = self.store.conversation_owner(&p.tenant, conversation).await? else {
            return Err(Error::not_found(format!("conversation {conversation}")));
        };
        if self.llm.is_none() {
            return Ok(false);
        }
        self.enqueue_extraction(&p.tenant, &user, conversation).await?;
        self.enqueue_summary(&p.tenant, &user, conversation).await?;
        Ok(true)
    }

    /// Enqueue an extraction of a conversation (one pending per conversation; one running
    /// per conversation: single writer).
    pub async fn enqueue_extraction(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conversation: &ConversationId,
    ) -> Result<bool> {
        let mut job = Job::new(
            tenant.clone(),
            Some(user.clone()),
            JobKind::Extract,
            serde_json::json!({ "conversation_id": conversation.as_str() }),
        );
        job.dedup_key = Some(format!("extract:{conversation}"));
        job.lock_key = Some(format!("conversation:{conversation}"));
        self.store.enqueue_job(&job).await
    }

    /// Enqueue tool-call synthesis for every old tool-call message with empty content
    /// (idempotent: one pending job per message; done messages are skipped by the job).
    pub async fn backfill_tool_calls(&self, p: &Principal) -> Result<usize> {
        Self::require_admin(p, "backfill")?;
        if self.llm.is_none() {
            return Err(Error::Unprocessable(
                "no LLM is configured: tool-call synthesis needs one".into(),
            ));
        }
        let mut n = 0;
        for user in self.store.list_users(&p.tenant).await? {
            for m in self.store.user_messages(&p.tenant, &user).await? {
                if m.tool_name.is_some() && m.content.is_empty() {
                    let mut job = Job::new(
                        p.tenant.clone(),
                        Some(user.clone()),
                        JobKind::SynthesizeToolCall,
                        serde_json::json!({ "message_id": m.id.to_string() }),
                    );
                    job.dedup_key = Some(format!("tool:{}", m.id));
                    if self.store.enqueue_job(&job).await? {
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }

    /// Browse a transcript chronologically.
    pub async fn messages(
        &self,
        p: &Principal,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        if !self.conversation_visible(p, conversation).await? {
            return Err(Error::not_found(format!("conversation {conversation}")));
        }
        let limit = clamp_limit(limit, 1000)?;
        self.store.list_messages(&p.tenant, conversation, after_seq, limit).await
    }

    /// May the caller read this conversation? Admin: any; a user key: its user's; an agent
    /// key: those of its pool and those started without an agent. Unknown: no.
    async fn conversation_visible(
        &self,
        p: &Principal,
        conversation: &ConversationId,
    ) -> Result<bool> {
        let Some((owner, agent)) = self.store.conversation_owner(&p.tenant, conversation).await?
        else {
            return Ok(false);
        };
        Ok(match &p.role {
            KeyRole::Admin => true,
            KeyRole::User(u) => u == &owner,
            KeyRole::Agent(a) => match &agent {
                Some(owner_agent) => {
                    self.pool_of(&p.tenant, owner_agent).await?
                        == self.pool_of(&p.tenant, a).await?
                }
                None => true,
            },
        })
    }

    /// May the caller see the message with this id (text form, as events keep it)?
    async fn message_visible(&self, p: &Principal, id: &str) -> Result<bool> {
        let Ok(id) = MessageId::parse(id) else { return Ok(false) };
        match self.store.get_message(&p.tenant, id).await? {
            Some(m) => self.conversation_visible(p, &m.conversation_id).await,
            None => Ok(false),
        }
    }

    /// Rate a reply; cascades the rating to every memory recalled for its turn.
    pub async fn rate_message(
        &self,
        p: &Principal,
        id: MessageId,
        value: i64,
    ) -> Result<(Message, Vec<MemoryId>)> {
        if value != 1 && value != -1 {
            return Err(Error::invalid("value", "a rating is -1 or 1"));
        }
        let msg = self
            .store
            .get_message(&p.tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("message {id}")))?;
        let _ = self.messages(p, &msg.conversation_id, 0, 1).await?;
        self.store.rate_message(&p.tenant, id, value).await?;
        let mut turn_ids = vec![id.to_string()];
        if let Some(t) = &msg.turn_id {
            turn_ids.push(t.clone());
        }
        let mut rated = Vec::new();
        let now = crate::model::now();
        for t in turn_ids {
            for mid in self.store.recalled(&p.tenant, &t).await? {
                if rated.contains(&mid) {
                    continue;
                }
                if let Some(m) = self.store.get_memory(&p.tenant, mid).await?
                    && self.visible(p, &m).await?
                {
                    let mut ev = Self::event(mid, EventKind::Rated, None, p, now);
                    ev.detail =
                        serde_json::json!({ "value": value, "via_message": id.to_string() });
                    self.store.rate_memory(&p.tenant, mid, value, ev).await?;
                    rated.push(mid);
                }
            }
        }
        let msg = self
            .store
            .get_message(&p.tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("message {id}")))?;
        // Batched extraction also runs when the user rates a reply.
        if self.llm.is_some() {
            let agent_row = match &msg.agent_id {
                Some(a) => self.store.get_agent(&p.tenant, a).await?,
                None => None,
            };
            let policy = MemoryPolicy::of(agent_row.as_ref(), self.cfg.dedup_threshold);
            if policy.memory_enabled && matches!(policy.mode, ExtractionMode::Batched { .. }) {
                self.enqueue_extraction(&p.tenant, &msg.user_id, &msg.conversation_id).await?;
            }
        }
        Ok((msg, rated))
    }

    // ------------------------------------------------------------------ agents, users, stats

    /// An agent's settings: for admin keys and for the agent's own key. A user key (an
    /// end-user's memory panel) has no business with how agents are configured.
    pub async fn get_agent(&self, p: &Principal, id: &AgentId) -> Result<Agent> {
        match &p.role {
            KeyRole::Admin => {}
            KeyRole::Agent(bound) if bound == id => {}
            KeyRole::Agent(_) => return Err(Error::not_found(format!("agent {id}"))),
            KeyRole::User(_) => {
                return Err(Error::Forbidden(
                    "agent settings need an admin key or the agent's own key".into(),
                ));
            }
        }
        self.store
            .get_agent(&p.tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("agent {id}")))
    }

    pub async fn put_agent(&self, p: &Principal, id: AgentId, input: AgentInput) -> Result<Agent> {
        Self::require_admin(p, "changing agent settings")?;
        let threshold = input.dedup_threshold.unwrap_or(self.cfg.dedup_threshold);
        if !(0.5..=1.0).contains(&threshold) {
            return Err(Error::invalid(
                "dedup_threshold",
                "dedup_threshold must be between 0.5 and 1.0",
            ));
        }
        if !input.settings.is_object() {
            return Err(Error::invalid("settings", "settings must be a JSON object"));
        }
        MemoryPolicy::from_settings(input.memory_enabled, threshold, &input.settings)?;
        if let Some(c) = &input.cluster_id
            && (c.is_empty() || c.len() > 256)
        {
            return Err(Error::invalid("cluster_id", "cluster_id must be 1 to 256 bytes"));
        }
        let now = crate::model::now();
        let created_at = self.store.get_agent(&p.tenant, &id).await?.map_or(now, |a| a.created_at);
        let agent = Agent {
            tenant_id: p.tenant.clone(),
            id,
            memory_enabled: input.memory_enabled,
            cluster_id: input.cluster_id,
            dedup_threshold: threshold,
            settings: input.settings,
            created_at,
            updated_at: now,
        };
        self.store.put_agent(&agent).await?;
        Ok(agent)
    }

    /// GDPR erasure of a user (admin, or the user's own key).
    pub async fn erase_user(&self, p: &Principal, user: &UserId) -> Result<EraseCounts> {
        self.authorize_user_admin(p, user)?;
        self.store.erase_user(&p.tenant, user).await
    }

    /// GDPR export of a user.
    pub async fn export_user(&self, p: &Principal, user: &UserId) -> Result<UserExport> {
        self.authorize_user_admin(p, user)?;
        let (memories, events) = self.store.user_memories(&p.tenant, user).await?;
        let messages = self.store.user_messages(&p.tenant, user).await?;
        Ok(UserExport {
            tenant_id: p.tenant.clone(),
            user_id: user.clone(),
            memories,
            events,
            messages,
        })
    }

    fn authorize_user_admin(&self, p: &Principal, user: &UserId) -> Result<()> {
        match &p.role {
            KeyRole::Admin => Ok(()),
            KeyRole::User(u) if u == user => Ok(()),
            KeyRole::User(_) | KeyRole::Agent(_) => {
                Err(Error::Forbidden("only an admin key or the user's own key can do this".into()))
            }
        }
    }

    /// Operator backup (`engram export`, never reachable over the API): every row in `scope`
    /// from one snapshot, see [`Store::backup`].
    pub async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        self.store.backup(scope, sink).await
    }

    /// The store's embedding space `(model id, dimensions)`, if it holds vectors.
    pub async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        self.store.embedding_space().await
    }

    /// Before restoring a backup whose vectors are of `space`: the store must hold that space
    /// or none (it is then recorded); vectors of two models are never mixed.
    pub async fn prepare_restore(&self, space: Option<(&str, usize)>) -> Result<()> {
        let Some((model, dims)) = space else { return Ok(()) };
        match self.store.embedding_space().await? {
            Some((m, d)) if m != model || d != dims => Err(Error::Unprocessable(format!(
                "the export's vectors are of {model} ({dims} dims) but this store's of {m} ({d} \
                 dims); one store holds one embedding space (import into an empty store, or run \
                 `engram reembed` after importing into a store of the export's model)"
            ))),
            Some(_) => Ok(()),
            None => self.store.ensure_embedding_space(model, dims).await,
        }
    }

    /// Operator restore (`engram import`): one batch of backup rows, see [`Store::restore`].
    pub async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        self.store.restore(rows, state).await
    }

    /// Every memory row (active and superseded) with its events, of one user or of the
    /// whole tenant: the lossless export that [`Engine::import`] reads back.
    pub async fn export_memories(
        &self,
        p: &Principal,
        user: Option<&UserId>,
    ) -> Result<Vec<(Memory, Vec<MemoryEvent>)>> {
        Self::require_admin(p, "exporting memories")?;
        let users = match user {
            Some(u) => vec![u.clone()],
            None => self.store.list_users(&p.tenant).await?,
        };
        let mut out = Vec::new();
        for u in users {
            let (memories, events) = self.store.user_memories(&p.tenant, &u).await?;
            let mut by_id: HashMap<MemoryId, Vec<MemoryEvent>> = HashMap::new();
            for e in events {
                by_id.entry(e.memory_id).or_default().push(e);
            }
            for m in memories {
                let ev = by_id.remove(&m.id).unwrap_or_default();
                out.push((m, ev));
            }
        }
        Ok(out)
    }

    /// Restore exported rows exactly (ids, timestamps, supersession, ratings, events), into
    /// the caller's tenant, re-embedding their content with the current embedder. Rows whose
    /// id already exists are skipped, so an import can be re-run.
    pub async fn import(
        &self,
        p: &Principal,
        records: Vec<(Memory, Vec<MemoryEvent>)>,
        progress: &(dyn Fn(&ImportReport) + Send + Sync),
    ) -> Result<ImportReport> {
        Self::require_admin(p, "importing memories")?;
        let mut report = ImportReport::default();
        for chunk in records.chunks(500) {
            let ids: Vec<MemoryId> = chunk.iter().map(|(m, _)| m.id).collect();
            let existing: std::collections::HashSet<MemoryId> =
                self.store.get_memories(&p.tenant, &ids).await?.into_iter().map(|m| m.id).collect();
            let fresh: Vec<&(Memory, Vec<MemoryEvent>)> =
                chunk.iter().filter(|(m, _)| !existing.contains(&m.id)).collect();
            report.skipped += chunk.len() - fresh.len();
            let texts: Vec<String> = fresh
                .iter()
                .filter(|(m, _)| m.kind != Kind::Profile)
                .map(|(m, _)| m.content.clone())
                .collect();
            let mut vectors =
                if texts.is_empty() { vec![] } else { self.embedder.embed(&texts).await? }
                    .into_iter();
            if !texts.is_empty() {
                self.store
                    .ensure_embedding_space(self.embedder.model_id(), self.embedder.dims())
                    .await?;
            }
            let mut rows = Vec::with_capacity(fresh.len());
            for (m, events) in fresh {
                let mut m = m.clone();
                Content::parse(&m.content, usize::MAX)?;
                m.tenant_id = p.tenant.clone();
                let vector = if m.kind == Kind::Profile {
                    m.embedding_model = None;
                    None
                } else {
                    m.embedding_model = Some(self.embedder.model_id().to_string());
                    Some(
                        vectors
                            .next()
                            .ok_or_else(|| Error::internal("embedder returned too few vectors"))?,
                    )
                };
                rows.push(NewMemory { memory: m, vector, events: events.clone() });
            }
            report.imported += rows.len();
            self.store.insert_memories(&p.tenant, rows).await?;
            progress(&report);
        }
        Ok(report)
    }

    pub async fn stats(&self, p: &Principal) -> Result<StoreStats> {
        Self::require_admin(p, "stats")?;
        self.store.stats(&p.tenant).await
    }
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
