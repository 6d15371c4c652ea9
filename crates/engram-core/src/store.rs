//! The persistence contract.
//!
//! [`Store`] is implemented by `engram-store` (SQLite, and PostgreSQL + pgvector) and chosen
//! once at start-up. Contract rules, which every implementation and the conformance suite share:
//!
//! - **Tenant scoping.** Every method of a tenant's data takes the tenant; nothing reads or
//!   writes across it. The tenant-global methods are named in the doc of [`Store`].
//!   An id that exists in another tenant behaves exactly like an id that does not exist.
//! - **Active rows by default.** Reads return rows with `superseded_at IS NULL` (and not
//!   expired) unless a filter asks for superseded ones.
//! - **Supersession, never overwrite.** Content, category, importance of a memory row never
//!   change after insert; a change inserts a new row and marks the old one superseded, in one
//!   transaction. Only `purge_memory` and `erase_user` delete rows.
//! - **Scores.** A vector list gives each row's cosine similarity, best first. A keyword list
//!   is ranked by BM25, best first, and gives each row its **coverage**: the share (0 to 1)
//!   of the query's keyword weight the row holds — the IDF of the query terms found in it
//!   over the IDF of all the query's terms (a term no row holds weighs the most, one dropped
//!   as common almost nothing). Unlike BM25 it is comparable across queries, so the engine
//!   can read it as lexical support.
//! - **Durability.** When a write method returns `Ok`, the write is committed.
//! - **Microsecond timestamps.** Every timestamp is kept to the microsecond (PostgreSQL's
//!   `timestamptz`; the SQLite store cuts what it is given to match), so a row reads back
//!   equal on both backends. The engine stamps with `model::now()`, already at that
//!   precision.
//! - **Keyword statistics.** BM25 scores depend on document frequencies: per tenant and
//!   user on PostgreSQL, over the whole FTS5 index on SQLite. Which rows match is the same;
//!   scores, and so the order of near-ties, may differ between backends.
//! - **One vector space.** All vectors of a store have one dimension; inserting another is
//!   an `Unprocessable` error.

use async_trait::async_trait;

use time::OffsetDateTime;

use crate::error::Result;
use crate::model::{
    AgentId, Category, ConversationId, EventKind, Job, JobKind, JobStatus, Kind, Memory,
    MemoryEvent, MemoryId, Message, MessageId, SessionId, SessionState, StateKey, Summary,
    SummaryId, TenantId, UserId,
};

/// Which memories a read sees.
#[derive(Debug, Clone, Default)]
pub struct MemoryFilter {
    /// Only this user's memories (required for searches).
    pub user_id: Option<UserId>,
    /// An agent's view: rows of this pool, plus `kind = shared` rows and rows written
    /// without an agent (user-wide). `None`: every pool.
    pub pool: Option<String>,
    pub kinds: Option<Vec<Kind>>,
    pub categories: Option<Vec<Category>>,
    /// `observed_at >= since`.
    pub since: Option<OffsetDateTime>,
    /// `observed_at < until`.
    pub until: Option<OffsetDateTime>,
    /// Also superseded (and expired) rows.
    pub include_superseded: bool,
    /// Only facts extracted from (or written with) this source conversation.
    pub source_conversation: Option<ConversationId>,
    /// Only facts whose rating has this sign (`Greater`: rated up, `Less`: down, `Equal`:
    /// unrated or even).
    pub rating: Option<std::cmp::Ordering>,
}

impl MemoryFilter {
    /// Does `m` pass the filter's conditions on the row's own columns (user, kinds,
    /// categories, dates, source conversation, rating; not pool or expiry)? What a search
    /// re-checks on the rows it loads.
    pub fn admits(&self, m: &Memory) -> bool {
        self.user_id.as_ref().is_none_or(|u| *u == m.user_id)
            && self.kinds.as_ref().is_none_or(|k| k.contains(&m.kind))
            && self.categories.as_ref().is_none_or(|c| c.contains(&m.category))
            && self.since.is_none_or(|t| m.observed_at >= t)
            && self.until.is_none_or(|t| m.observed_at < t)
            && self
                .source_conversation
                .as_ref()
                .is_none_or(|c| m.source.conversation_id.as_ref() == Some(c))
            && self.rating.is_none_or(|o| m.rating.cmp(&0) == o)
    }
}

/// Which of a user's transcript rows (messages, summaries) a search considers: the user's,
/// within a time window. A message is in the window when its `created_at` is; a summary when
/// the span of messages it covers (`earliest_at`..=`latest_at`) overlaps it.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptFilter {
    pub user: UserId,
    /// `created_at >= since`.
    pub since: Option<OffsetDateTime>,
    /// `created_at < until`.
    pub until: Option<OffsetDateTime>,
    /// The caller sees only some of the user's conversations (an agent's pool; the engine
    /// keeps the rows it may see): the keyword search then reads nothing of the user's other
    /// rows beyond its matches, so no typo is corrected (`engram_store`'s `common::typos`
    /// reads the words of the scope).
    pub pooled: bool,
}

impl TranscriptFilter {
    /// All of a user's rows.
    pub fn user(user: UserId) -> Self {
        TranscriptFilter { user, since: None, until: None, pooled: false }
    }

    /// Is an instant inside the window?
    pub fn admits_at(&self, at: OffsetDateTime) -> bool {
        self.since.is_none_or(|s| at >= s) && self.until.is_none_or(|u| at < u)
    }
}

/// A conversation as listed: who it belongs to, how many messages, when.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationInfo {
    pub id: ConversationId,
    pub user_id: UserId,
    pub agent_id: Option<AgentId>,
    /// Messages so far (the last `seq`).
    pub messages: i64,
    /// The last message a leaf of the summary DAG covers (0: none is summarized).
    pub summarized_seq: i64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// What happened in a tenant, or to one user: the figures behind the operator's charts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    /// Active memories per category.
    pub categories: Vec<(Category, u64)>,
    /// Memories written per day (`created_at`), as (days since the Unix epoch, count),
    /// oldest first.
    pub memories_per_day: Vec<(i64, u64)>,
    /// Messages per day (`created_at`), the same way.
    pub messages_per_day: Vec<(i64, u64)>,
    /// The extraction's decisions (events by the extractor, [`crate::model::actor_name_system`]): `created` with no
    /// predecessor (ADD), `superseded` (UPDATE), `forgotten` (DELETE), `confirmed` (NONE).
    pub decisions: Vec<(EventKind, u64)>,
}

/// A memory to insert, with its vector (None for profile facts).
#[derive(Debug, Clone)]
pub struct NewMemory {
    pub memory: Memory,
    pub vector: Option<Vec<f32>>,
    /// The events recorded with the insert (`created`; an import brings the whole trail).
    pub events: Vec<MemoryEvent>,
    /// Refuse the write (`Conflict`, nothing of it stored) if the owner already has an
    /// active, unexpired fact of the same kind, agent and pool with exactly this content:
    /// set by writes that deduplicated on a read taken before their transaction, so that
    /// two racing identical writes store one fact. Whatever the flag, the store refuses a
    /// second active profile fact under one key.
    pub unique: bool,
}

/// A page of memories and the cursor of the next page.
#[derive(Debug, Clone)]
pub struct MemoryPage {
    pub memories: Vec<Memory>,
    pub next_cursor: Option<MemoryId>,
}

/// A message to append (the store assigns the sequence number).
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub message: Message,
}

/// Rows removed by a GDPR erasure, per table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EraseCounts {
    pub memories: u64,
    pub memory_events: u64,
    pub messages: u64,
    pub conversations: u64,
    pub summaries: u64,
    pub jobs: u64,
    pub cursors: u64,
    pub recalls: u64,
    pub context_sessions: u64,
    /// Working-memory entries.
    pub session_state: u64,
}

/// Counters for `/v1/stats`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    pub memories_active: u64,
    pub memories_superseded: u64,
    pub memories_with_vector: u64,
    /// Users with memories or conversations.
    pub users: u64,
    pub conversations: u64,
    pub messages: u64,
    /// Messages with a vector (search over messages). The store holds one model's vectors
    /// except during an unfinished `engram reembed`, when old ones count too.
    pub messages_with_vector: u64,
    pub messages_unsummarized: u64,
    pub summaries: u64,
    /// Summaries with a vector.
    pub summaries_with_vector: u64,
    /// Levels of the deepest summary tree (0: no summary; 1: leaves only; 3: a root).
    pub summary_depth: u64,
    /// Compaction jobs waiting or running, done, failed for good.
    pub compactions_pending: u64,
    pub compactions_done: u64,
    pub compactions_failed: u64,
    pub jobs_pending: u64,
    pub jobs_running: u64,
    pub jobs_failed: u64,
    pub jobs_done: u64,
    /// Extraction jobs done and failed for good (extraction health).
    pub extractions_done: u64,
    pub extractions_failed: u64,
    /// When the newest extraction job kept (`--job-retention-secs`) finished.
    pub last_extraction_at: Option<OffsetDateTime>,
    pub embedding_model: Option<String>,
    pub embedding_dims: Option<u64>,
}

/// Work the background jobs have not done yet ([`Store::backlog`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Backlog {
    /// Messages without a vector: found by keywords only until embedded.
    pub messages_unembedded: u64,
    /// When the oldest `embed_messages` job still waiting or running was enqueued (an append
    /// enqueues one per conversation and it takes every message appended until it runs).
    pub embedding_since: Option<OffsetDateTime>,
    /// `extract` jobs waiting or running.
    pub extractions_pending: u64,
    /// When the oldest of them was enqueued.
    pub extraction_since: Option<OffsetDateTime>,
}

/// A cached context block of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSession {
    pub session_id: String,
    pub user_id: UserId,
    pub pool: Option<String>,
    pub text: String,
    pub memory_ids: Vec<MemoryId>,
    pub created_at: OffsetDateTime,
    /// What the block was chosen with (the engine's to read; `None` for a session cached
    /// before they were kept).
    pub params: Option<serde_json::Value>,
}

/// All writes of one extraction batch.
#[derive(Debug, Clone, Default)]
pub struct ExtractionBatch {
    pub adds: Vec<NewMemory>,
    /// `(old, successor, event on old)`: successor None forgets `old`.
    pub supersedes: Vec<(MemoryId, Option<NewMemory>, MemoryEvent)>,
    pub confirms: Vec<(MemoryId, MemoryEvent)>,
    /// The new cursor (content hash of the last processed message).
    pub cursor: String,
}

mod access;
mod backup;
pub use access::{AccessStore, ApiKey, UiSession};
pub use backup::{BackupRow, BackupScope, RestoreReport, RestoreState};

/// Persistence for the engine: the sum of the five parts below, each implemented by each
/// backend in a file of its own. See the module docs for the contract.
///
/// **Tenant-global methods.** Every method takes the tenant but these, on purpose: the
/// embedding space (`embedding_space`, `ensure_embedding_space`, `reset_embedding_space`,
/// `rows_needing_vectors`/`set_vectors` run per tenant by the operator's re-embed, `list_tenants`),
/// API-key lookup by secret hash (`find_api_key`: the key names its tenant) and a web-UI
/// sign-in's by token hash (`find_ui_session`, `delete_ui_session`), `revoke_api_key` and
/// `count_active_api_keys` (operator), the job queue's worker side (`claim_job`,
/// `heartbeat_job`, `complete_job`, `fail_job`: a worker serves every tenant; jobs carry their
/// tenant), `list_jobs`/`retry_job` with no tenant (operator), and the operator backup
/// (`backup` of the whole store, `restore`: every row names its tenant). None of them is
/// reachable with a tenant's key over the API.
pub trait Store:
    MemoryStore + MessageStore + SummaryStore + JobStore + AccessStore + StateStore + MaintenanceStore
{
}

impl<
    T: MemoryStore
        + MessageStore
        + SummaryStore
        + JobStore
        + AccessStore
        + StateStore
        + MaintenanceStore,
> Store for T
{
}

/// Every part of [`Store`], to import at once where a store is used.
pub mod prelude {
    pub use super::{
        AccessStore, JobStore, MaintenanceStore, MemoryStore, MessageStore, StateStore, Store,
        SummaryStore,
    };
}

/// A summary to write ([`SummaryStore::insert_summary`]): the row, its sources in order, its
/// vector, and the claim that makes the write happen once.
#[derive(Debug, Clone)]
pub struct NewSummary {
    pub summary: Summary,
    /// Message ids (a leaf) or summary ids one level down (a branch, a root), in order.
    pub sources: Vec<uuid::Uuid>,
    /// `(model id, unit vector)`.
    pub embedding: Option<(String, Vec<f32>)>,
    pub claim: SummaryClaim,
}

/// What a summary takes for itself when written, checked in its transaction: if another run
/// took it first (a job killed after its commit and re-run), nothing is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryClaim {
    /// A leaf over the messages after `after_seq` through `through_seq`: the conversation's
    /// `summarized_seq` must still be `after_seq`, and becomes `through_seq`.
    Messages { after_seq: i64, through_seq: i64 },
    /// A parent over its sources (summaries one level down): each must still have no
    /// parent, and gets this one.
    Children,
}

/// Facts: insert, read, list, supersede, confirm, rate, purge, history, vector and keyword search, access counts, profile lookup; and the read side around them (recalls, context sessions).
#[async_trait]
pub trait MemoryStore: Send + Sync {
    // ---- memories ----
    /// Insert all rows in one transaction.
    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()>;
    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>>;
    /// Rows by id, in no particular order; unknown ids are skipped.
    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>>;
    /// Newest first; `cursor` is the last id of the previous page.
    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage>;
    /// Every active row of a user in a filter, oldest `observed_at` first (for context blocks).
    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>>;
    /// Mark `old` superseded by `new` (inserted in the same transaction) or forgotten
    /// (`new = None`). `Conflict` if `old` is already superseded; `NotFound` if absent.
    async fn supersede(
        &self,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<NewMemory>,
        event: MemoryEvent,
    ) -> Result<()>;
    /// A restated fact: bump `updated_at` and `mention_count`, record the event.
    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()>;
    /// Add `delta` to the rating and record the event; returns the new rating.
    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64>;
    /// Physically delete one row and its events, and the owner's cached context sessions
    /// (their text may quote the row).
    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()>;
    /// The supersession chain through `id` (oldest first) and the events of its rows.
    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)>;
    /// Top-`k` rows by cosine similarity to `vector` among those the filter admits
    /// (`filter.user_id` is required). Exact search.
    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>>;
    /// Top-`k` rows by BM25 for `query` (plain words, any language; never a syntax error),
    /// best first, each with its keyword coverage (see the module docs).
    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>>;
    /// Bump `access_count` and `last_accessed_at` of the rows.
    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()>;
    /// The active profile fact with this key for the user (and pool).
    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>>;
    // ---- recalls (feedback cascade) and context sessions ----
    async fn record_recall(&self, tenant: &TenantId, turn_id: &str, ids: &[MemoryId])
    -> Result<()>;
    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>>;
    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>>;
    async fn put_context_session(&self, tenant: &TenantId, session: &ContextSession) -> Result<()>;
    /// The user's change counter: it moves with every write to the user's memories (0 for a
    /// user without any).
    async fn facts_version(&self, tenant: &TenantId, user: &UserId) -> Result<i64>;
}

/// The transcript: appending and reading messages, their ratings, keyword and vector search, their vectors, and the conversation state extraction keeps (cursor, rolling summary, the extraction batch).
#[async_trait]
pub trait MessageStore: Send + Sync {
    // ---- conversations ----
    /// Append messages (assigning consecutive `seq` after the conversation's last); the
    /// conversation is created on first append and belongs to one user.
    async fn append_messages(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>> {
        self.append_messages_with_jobs(tenant, messages, &[]).await
    }
    /// [`MessageStore::append_messages`] and, in the same transaction, the jobs that will
    /// process the new messages (each added as [`JobStore::enqueue_job`] adds it): a crash
    /// right after the append never leaves messages that no job will embed.
    async fn append_messages_with_jobs(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
        jobs: &[Job],
    ) -> Result<Vec<Message>>;
    /// The speakers of the user's transcripts: every `Name: ` label ([`crate::speaker::label`])
    /// that opens one of the user's messages, recorded as messages are appended; sorted.
    async fn speakers(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<String>>;
    /// Messages in order of `seq`, after `after_seq`.
    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>>;
    /// The owner (user) of a conversation, if it exists.
    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>>;
    /// One conversation as [`MessageStore::list_conversations`] lists it, if it exists.
    async fn get_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<ConversationInfo>>;
    /// Conversations of `agent` with more than `unsummarized` messages no summary covers,
    /// most recently updated first, at most `limit` (what a lowered compaction threshold
    /// now applies to).
    async fn conversations_to_compact(
        &self,
        tenant: &TenantId,
        agent: &AgentId,
        unsummarized: i64,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>>;
    /// Conversations of the tenant (of one user with `user`), most recently updated first,
    /// after `before` (the `updated_at` and id of the last one of the previous page).
    async fn list_conversations(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        before: Option<(OffsetDateTime, &ConversationId)>,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>>;
    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>>;
    /// Several messages by id in one call (any order; unknown ids left out).
    async fn get_messages(&self, tenant: &TenantId, ids: &[MessageId]) -> Result<Vec<Message>>;
    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64>;
    /// Full-text search over a user's messages (in the filter's time window).
    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>>;
    /// A user's messages in the filter's time window that have text but no vector of
    /// `model_id` yet: what a vector search over them cannot see.
    async fn unembedded_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
    ) -> Result<u64>;
    /// Up to `limit` of a user's messages in the filter's time window, newest first (by
    /// `created_at`, then id), before `before` (the `created_at` and id of the last message
    /// of the previous page): what a literal (substring, regex) search reads.
    async fn scan_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        before: Option<(OffsetDateTime, MessageId)>,
        limit: usize,
    ) -> Result<Vec<Message>>;
    /// Up to `limit` of a user's messages in the filter's time window whose own relative
    /// dates ("three years ago", "last summer": [`crate::when::relative_spans`], recorded
    /// when a message is appended) reach into the days `from` to `to` (both included, as
    /// midnights UTC), newest first. Candidates: the caller checks each message's dates.
    async fn messages_said_about(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        from: OffsetDateTime,
        to: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Message>>;
    /// Record the relative dates of messages appended before the store recorded them
    /// (`engram backfill dates`); idempotent. The number of messages newly recorded.
    async fn index_message_dates(&self, tenant: &TenantId, messages: &[Message]) -> Result<u64>;
    /// A search returned these messages and summaries at `at`: count it (access
    /// reinforcement). Unknown ids are skipped.
    async fn touch_transcript(
        &self,
        tenant: &TenantId,
        messages: &[MessageId],
        summaries: &[SummaryId],
        at: OffsetDateTime,
    ) -> Result<()>;
    // ---- message vectors (filled in the background, see `Engine::embed_conversation`) ----
    /// Up to `limit` messages of the conversation that need a vector of `model_id` (none
    /// yet, or one made by another model), as `(id, seq)` by `seq`. Messages with empty
    /// content (a tool call not yet synthesized) are not listed.
    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>>;
    /// Up to `limit` conversations of the tenant with messages that need a vector of
    /// `model_id` (for `engram reembed`).
    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>>;
    /// Store the vectors of these messages (one transaction), recording `model_id`. Ids
    /// that no longer exist (erased meanwhile) are skipped.
    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()>;
    /// Exact nearest neighbours among a user's messages embedded by `model_id`: the top `k`
    /// by cosine similarity (vectors are unit length), best first, in the filter's time window.
    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>>;
    /// The cosine similarity with `query` of these messages' vectors of `model_id`, in no
    /// particular order; messages of other tenants, and messages without a vector of that
    /// model and dimension, are left out. Search ranks by one vector and scores by another
    /// (`engine::search`: a query that names speakers).
    async fn message_similarities(
        &self,
        tenant: &TenantId,
        model_id: &str,
        query: &[f32],
        ids: &[MessageId],
    ) -> Result<Vec<(MessageId, f32)>>;
    // ---- conversation state used by extraction ----
    /// Every message of a conversation, in order.
    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>>;
    /// The extraction cursor (hash of the last processed message).
    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>>;
    /// The rolling summary and the number of user turns it covered.
    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)>;
    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()>;
    /// Apply an extraction batch in ONE transaction: insert `adds`, supersede each
    /// `(old, successor)` pair (successor None = forget), confirm `confirms`, then move the
    /// cursor to `cursor`. Either everything is applied or nothing.
    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()>;
    /// Replace the content of a message whose content is empty (tool-call synthesis).
    async fn set_message_content(
        &self,
        tenant: &TenantId,
        id: MessageId,
        content: &str,
    ) -> Result<bool>;
}

/// The summary DAG (seed 004): summaries written by the compactor once and never changed but
/// for their parent link, read by id, by conversation and level, through their sources and
/// children, and searched like messages.
#[async_trait]
pub trait SummaryStore: Send + Sync {
    /// Write a summary, its source links and vector in one transaction, if its claim still
    /// holds; `false` (and nothing written) when another run took it first.
    async fn insert_summary(&self, tenant: &TenantId, new: NewSummary) -> Result<bool>;
    async fn get_summary(&self, tenant: &TenantId, id: SummaryId) -> Result<Option<Summary>>;
    /// Several summaries by id in one call (any order; unknown ids left out).
    async fn get_summaries(&self, tenant: &TenantId, ids: &[SummaryId]) -> Result<Vec<Summary>>;
    /// A summary's sources in order: message ids of a leaf, summary ids of a parent.
    async fn summary_sources(&self, tenant: &TenantId, id: SummaryId) -> Result<Vec<uuid::Uuid>>;
    /// Summaries of a conversation, oldest first (by `earliest_at`, then depth): all, or only
    /// those of one depth, or (`unparented`) only those no summary covers yet.
    async fn conversation_summaries(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        depth: Option<i64>,
        unparented: bool,
    ) -> Result<Vec<Summary>>;
    /// Full-text search over a user's summaries that overlap the filter's time window.
    async fn text_search_summaries(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(SummaryId, f64)>>;
    /// Up to `limit` of a user's summaries that overlap the filter's time window, the finest
    /// first (by depth, then the shortest span, then the earliest): what a query that names
    /// a time reads ("on April 5, 2023": the leaf of that day before its branch).
    async fn summaries_in(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        limit: usize,
    ) -> Result<Vec<Summary>>;
    /// Exact nearest neighbours among a user's summaries embedded by `model_id` that overlap
    /// the filter's time window, best first.
    async fn vector_search_summaries(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(SummaryId, f32)>>;
    /// Up to `limit` summaries of the tenant without a vector of `model_id`, with their text
    /// (`engram reembed`).
    async fn summaries_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(SummaryId, String)>>;
    async fn set_summary_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(SummaryId, Vec<f32>)>,
    ) -> Result<()>;
}

/// Durable background jobs: enqueue (deduplicated), claim with a lease, heartbeat, finish, fail or retry, list.
#[async_trait]
pub trait JobStore: Send + Sync {
    // ---- jobs ----
    /// Enqueue a job; returns false when a pending job with the same dedup key exists (the
    /// new one is dropped: the pending one will see the same data).
    async fn enqueue_job(&self, job: &Job) -> Result<bool>;
    /// Claim the oldest runnable job of any tenant: pending and due, or running with an
    /// expired lease (its worker died), and whose lock key no other running job holds.
    /// The claim sets `running`, bumps `attempts` and sets the lease. Only jobs of `kinds`
    /// are claimed: a worker without an LLM leaves extraction and synthesis jobs to one
    /// that has one.
    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>>;
    /// Claim up to `limit` runnable jobs of `kinds` at once, by the rules of
    /// [`JobStore::claim_job`] (oldest first; never two running jobs of one lock key). Fewer
    /// than `limit` is not the end of the queue: jobs another worker is claiming at the same
    /// instant are skipped, not waited for.
    async fn claim_jobs(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
        limit: usize,
    ) -> Result<Vec<Job>>;
    /// Extend the lease of a running job.
    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()>;
    async fn complete_job(&self, id: &str) -> Result<()>;
    /// Mark several jobs done in one transaction (the embedding lane's group).
    async fn complete_jobs(&self, ids: &[String]) -> Result<()>;
    /// Record a failure: back to pending at `retry_at`, or `failed` for good when `None`.
    async fn fail_job(&self, id: &str, error: &str, retry_at: Option<OffsetDateTime>)
    -> Result<()>;
    /// Jobs of a tenant (all tenants with `None`), newest first.
    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>>;
    /// Put a failed job back in the queue with its attempts reset; `NotFound` unless failed.
    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()>;
    /// Delete, in every tenant, up to `limit` jobs that finished (`done`) before `before`,
    /// oldest first; returns how many. Failed, pending and running jobs are never deleted.
    async fn prune_jobs(&self, before: OffsetDateTime, limit: usize) -> Result<u64>;
}

/// The address of a session's working memory inside a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateScope {
    pub user: UserId,
    /// None: the user's working memory outside any agent.
    pub agent: Option<AgentId>,
    pub session: SessionId,
}

/// Working memory: key-value entries per (tenant, user, agent, session) with an expiry. No
/// read returns an entry whose `expires_at` is at or before the `now` it is given;
/// [`StateStore::sweep_state`] deletes them.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Create or replace an entry (at `row.updated_at`); replacing a live entry keeps its
    /// `created_at`. Returns the entry as stored.
    async fn put_state(&self, row: &SessionState) -> Result<SessionState>;
    async fn get_state(
        &self,
        tenant: &TenantId,
        scope: &StateScope,
        key: &StateKey,
        now: OffsetDateTime,
    ) -> Result<Option<SessionState>>;
    /// Delete an entry; true when a live one was deleted.
    async fn delete_state(
        &self,
        tenant: &TenantId,
        scope: &StateScope,
        key: &StateKey,
        now: OffsetDateTime,
    ) -> Result<bool>;
    /// The live entries of one session by key (at most 1,000), or with `scope` None of every
    /// session of the user.
    async fn list_state(
        &self,
        tenant: &TenantId,
        user: &UserId,
        scope: Option<&StateScope>,
        now: OffsetDateTime,
    ) -> Result<Vec<SessionState>>;
    /// Delete the expired entries of every tenant; returns how many.
    async fn sweep_state(&self, now: OffsetDateTime) -> Result<u64>;
}

/// Operator and tenant-wide work: the embedding space and re-embedding, tenants and users, GDPR erasure and export, statistics, backup and restore.
#[async_trait]
pub trait MaintenanceStore: Send + Sync {
    // ---- embedding space ----
    /// The `(model_id, dims)` recorded for this store's vectors, if any vector was stored.
    async fn embedding_space(&self) -> Result<Option<(String, usize)>>;
    /// Record the embedding space on first use; `Unprocessable` if vectors of another
    /// dimension exist.
    async fn ensure_embedding_space(&self, model_id: &str, dims: usize) -> Result<()>;
    /// Operator maintenance: every tenant id that holds memories or messages.
    async fn list_tenants(&self) -> Result<Vec<TenantId>>;
    /// Up to `limit` rows of the tenant that need a vector of `model_id` (no vector, or one
    /// made by another model); profile facts never need one.
    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>>;
    /// Replace the vectors of these rows (one transaction), recording `model_id`.
    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()>;
    /// Record a new embedding space (after every row was re-embedded).
    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()>;
    // ---- users ----
    /// Every user id with at least one memory or conversation in the tenant.
    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>>;
    /// GDPR erasure: remove every row of the user in the tenant; counts per table.
    async fn erase_user(&self, tenant: &TenantId, user: &UserId) -> Result<EraseCounts>;
    /// Every message of every conversation of the user (for export).
    async fn user_messages(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<Message>>;
    /// Every memory row (active and superseded) and every event of the user.
    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)>;
    // ---- stats ----
    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats>;
    /// What background work has not caught up with yet, in one tenant or (`None`, for
    /// `/metrics`) in every tenant of the store.
    async fn backlog(&self, tenant: Option<&TenantId>) -> Result<Backlog>;
    /// The tenant's (or one user's) activity since `since`; categories count every active
    /// memory whatever its age.
    async fn activity(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        since: OffsetDateTime,
    ) -> Result<Activity>;
    // ---- backup ----
    /// Operator backup: every row in `scope`, table by table in an order that never names a
    /// row not yet given (keys, agents, memories, their events, conversations, messages,
    /// summaries and their sources, jobs, extraction cursors, recalls, context sessions), each
    /// table in key order, all from one consistent snapshot; each row is handed to `sink`.
    /// Returns the number of rows.
    async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64>;
    /// Restore rows of a backup in ONE transaction, exactly as they were (ids, timestamps,
    /// vectors, history). A row whose key is already present is skipped, so a restore can be
    /// re-run. Rows that are not a valid backup row of a known table are `Unprocessable`,
    /// naming the table and column, and nothing of the batch is written.
    async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()>;
    /// The mark of an unfinished import (`engram import` sets it, then clears it), if any.
    async fn import_mark(&self) -> Result<Option<String>>;
    async fn set_import_mark(&self, mark: Option<&str>) -> Result<()>;
}
