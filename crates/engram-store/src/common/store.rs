//! The store contract, implemented once: [`SqlStore`] over a backend implements every
//! sub-trait of [`engram_core::store::Store`], with the shared statements of this module's
//! siblings. What a backend does its own way is the short list of [`Native`] operations
//! (SQLite's in-process vector index and FTS5, PostgreSQL's pgvector, batched `unnest`
//! inserts and `SKIP LOCKED` claims, each one's backup format); nothing else per backend.

use std::collections::HashMap;
use std::ops::Deref;

use async_trait::async_trait;
use engram_core::error::Result;
use engram_core::model::{
    AgentId, ConversationId, Job, JobKind, JobStatus, Memory, MemoryEvent, MemoryId, Message,
    MessageId, Summary, SummaryId, TenantId, UserId,
};
use engram_core::store::prelude::*;
use engram_core::store::{
    Activity, Backlog, BackupRow, BackupScope, ContextSession, ConversationInfo, EraseCounts,
    ExtractionBatch, MemoryFilter, MemoryPage, NewMemory, NewSummary, RestoreState, StoreStats,
    TranscriptFilter,
};
use time::OffsetDateTime;
use uuid::Uuid;

use super::messages::Conversation;
use super::{Arg, Backend, jobs, memories, messages, summaries, typos};

/// A store: one backend ([`crate::sqlite::SqliteDb`], [`crate::postgres::PgDb`]) under the
/// whole store contract; the backend's own methods (opening, tuning) through `Deref`.
pub struct SqlStore<D>(pub(crate) D);

impl<D> Deref for SqlStore<D> {
    type Target = D;

    fn deref(&self) -> &D {
        &self.0
    }
}

/// Each user's change-counter version in a write transaction.
pub(crate) type Versions = HashMap<String, i64>;

/// A ranked search: the best `k` rows of `tenant` in `scope` for `query`.
pub(crate) struct Ranked<'a, S, Q: ?Sized> {
    pub tenant: &'a TenantId,
    pub scope: S,
    pub query: &'a Q,
    pub k: usize,
}

/// The two transcript tables, searched the same way: messages and the summaries of the DAG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Transcript {
    Messages,
    Summaries,
}

impl Transcript {
    pub(crate) fn table(self) -> &'static str {
        match self {
            Transcript::Messages => "messages",
            Transcript::Summaries => "summaries",
        }
    }

    /// The columns of a row's span in time: a message is an instant (`created_at`), a summary
    /// the span of the messages it covers. A row is in a window `since..until` when its span
    /// overlaps it: `end >= since AND start < until`.
    pub(crate) fn span(self) -> (&'static str, &'static str) {
        match self {
            Transcript::Messages => ("created_at", "created_at"),
            Transcript::Summaries => ("earliest_at", "latest_at"),
        }
    }
}

/// A user's rows of one transcript table in a time window.
pub(crate) type TranscriptScope<'a> = (&'a TranscriptFilter, Transcript);
/// The same, compared only with vectors of the model (the id).
pub(crate) type VectorScope<'a> = (&'a TranscriptFilter, Transcript, &'a str);

/// A page of memories: `filter`, after `cursor`, in `order` (`ORDER BY …`), at most `limit`.
pub(crate) struct Select<'a> {
    pub filter: &'a MemoryFilter,
    pub cursor: Option<MemoryId>,
    pub order: &'static str,
    pub limit: Option<i64>,
}

/// Where a backup's rows go.
pub(crate) type Sink<'a> = dyn FnMut(BackupRow) -> Result<()> + Send + 'a;

/// What a backend does its own way.
#[async_trait]
pub(crate) trait Native: Backend + typos::PrefixWords + Sized + 'static {
    /// Insert new memory rows and their events inside `tx`.
    async fn insert_rows(tx: &mut Self::Tx, rows: &[NewMemory], v: &Versions) -> Result<()>;
    /// The memories of a [`Select`].
    async fn select(&self, tenant: &TenantId, q: Select<'_>) -> Result<Vec<Memory>>;
    /// Memories by vector ([`MemoryStore::vector_search`]).
    async fn search_vectors(&self, q: Ranked<'_, &MemoryFilter, [f32]>) -> Hits<MemoryId, f32>;
    /// Memories by keywords ([`MemoryStore::text_search`]).
    async fn search_text(&self, q: Ranked<'_, &MemoryFilter, str>) -> Hits<MemoryId, f64>;
    /// A user's messages or summaries by keywords.
    async fn search_transcript_text(
        &self,
        q: Ranked<'_, TranscriptScope<'_>, str>,
    ) -> Hits<Uuid, f64>;
    /// A user's messages or summaries by vector.
    async fn search_transcript_vectors(
        &self,
        q: Ranked<'_, VectorScope<'_>, [f32]>,
    ) -> Hits<Uuid, f32>;
    /// These rows' cosine with the query ([`MessageStore::message_similarities`]).
    async fn score_transcript_vectors(
        &self,
        tenant: &TenantId,
        table: Transcript,
        model: &str,
        query: &[f32],
        ids: &[Uuid],
    ) -> Hits<Uuid, f32>;
    /// Store vectors of the model (the `&str`) for messages or summaries.
    async fn store_transcript_vectors(
        &self,
        t: &TenantId,
        table: Transcript,
        m: &str,
        rows: Vectors<Uuid>,
    ) -> Result<()>;
    /// Fill an empty message ([`MessageStore::set_message_content`]).
    async fn fill_message(&self, tenant: &TenantId, id: MessageId, text: &str) -> Result<bool>;
    /// Record the embedding space; an existing one is kept (and must match) unless `reset`.
    async fn record_space(&self, model_id: &str, dims: usize, reset: bool) -> Result<()>;
    /// Before an erasure or a purge (SQLite: pages freed whole are zeroed too).
    async fn deleting(&self) -> Result<()> {
        Ok(())
    }
    /// After an erasure: the user's cached vectors dropped, no copy of the rows left in the
    /// files (SQLite: keyword indexes rewritten, log truncated; [`Native::deleting`] undone).
    async fn erased(&self, tenant: &str, user: &str) -> Result<()>;
    /// After a purge: no copy of the row's words left in the files (SQLite: FTS `optimize`).
    async fn purged(&self) -> Result<()> {
        Ok(())
    }
    async fn backup_rows(&self, scope: &BackupScope, sink: &mut Sink<'_>) -> Result<u64>;
    async fn restore_rows(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()>;
    /// Claim a job ([`JobStore::claim_job`]).
    async fn claim(
        &self,
        now: OffsetDateTime,
        lease: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>>;
    /// Claim up to `limit` jobs ([`JobStore::claim_jobs`]), one by one unless it does better.
    async fn claim_many(
        &self,
        now: OffsetDateTime,
        lease: OffsetDateTime,
        kinds: &[JobKind],
        limit: usize,
    ) -> Result<Vec<Job>> {
        let mut jobs = Vec::new();
        while jobs.len() < limit {
            match self.claim(now, lease, kinds).await? {
                Some(job) => jobs.push(job),
                None => break,
            }
        }
        Ok(jobs)
    }
}

/// Scored rows of a transcript table with their ids typed (`MessageId`, `SummaryId`).
fn typed<K, S>(hits: Vec<(Uuid, S)>, id: fn(Uuid) -> K) -> Vec<(K, S)> {
    hits.into_iter().map(|(u, s)| (id(u), s)).collect()
}

/// Scored ids, best first.
pub(crate) type Hits<I, S> = Result<Vec<(I, S)>>;
/// Rows and their new vectors.
pub(crate) type Vectors<I> = Vec<(I, Vec<f32>)>;

#[async_trait]
impl<D: Native> MemoryStore for SqlStore<D> {
    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()> {
        let Some((mut tx, v)) = memories::begin_insert(&self.0, self, tenant, &rows).await? else {
            return Ok(());
        };
        D::insert_rows(&mut tx, &rows, &v).await?;
        D::commit(tx).await
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        memories::get(&self.0, tenant, id).await
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        memories::get_many(&self.0, tenant, ids).await
    }

    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage> {
        let fetch = Some(i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1);
        let select = Select { filter, cursor, order: " ORDER BY id DESC", limit: fetch };
        let mut memories = self.0.select(tenant, select).await?;
        let next_cursor = (memories.len() > limit).then(|| {
            memories.truncate(limit);
            memories.last().map(|m| m.id)
        });
        Ok(MemoryPage { memories, next_cursor: next_cursor.flatten() })
    }

    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>> {
        let filter = &MemoryFilter { include_superseded: false, ..filter.clone() };
        let order = " ORDER BY observed_at, id";
        self.0.select(tenant, Select { filter, cursor: None, order, limit: None }).await
    }

    async fn supersede(
        &self,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<NewMemory>,
        event: MemoryEvent,
    ) -> Result<()> {
        memories::supersede(&self.0, tenant, old, new.as_ref(), &event).await
    }

    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()> {
        memories::confirm(&self.0, tenant, id, &event).await
    }

    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64> {
        memories::rate(&self.0, tenant, id, delta, &event).await
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        self.0.deleting().await?;
        memories::purge(&self.0, tenant, id).await?;
        self.0.purged().await
    }

    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        memories::history(&self.0, tenant, id).await
    }

    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        self.0.search_vectors(Ranked { tenant, scope: filter, query: vector, k }).await
    }

    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        let hits = self.0.search_text(Ranked { tenant, scope: filter, query, k }).await?;
        // An agent's view reads no other pool's words (a correction would).
        let user = filter.user_id.as_ref().map(UserId::as_str);
        let words = filter.pool.is_none().then_some((user, "memories"));
        match typos::retry(&self.0, tenant, words, query, &hits).await? {
            Some((query, weight)) => {
                let again = self.0.search_text(Ranked { tenant, scope: filter, query: &query, k });
                Ok(typos::guessed(&hits, again.await?, weight))
            }
            None => Ok(hits),
        }
    }

    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        memories::touch(&self.0, tenant, ids, at).await
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        memories::find_profile(&self.0, tenant, user, pool, key).await
    }

    async fn record_recall(
        &self,
        tenant: &TenantId,
        turn_id: &str,
        ids: &[MemoryId],
    ) -> Result<()> {
        memories::record_recall(&self.0, tenant, turn_id, ids).await
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        memories::recalled(&self.0, tenant, turn_id).await
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        memories::get_context_session(&self.0, tenant, session_id, user, pool).await
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        memories::put_context_session(&self.0, tenant, s).await
    }

    async fn facts_version(&self, tenant: &TenantId, user: &UserId) -> Result<i64> {
        memories::facts_version(&self.0, tenant, user).await
    }
}

#[async_trait]
impl<D: Native> MessageStore for SqlStore<D> {
    async fn append_messages_with_jobs(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
        jobs: &[Job],
    ) -> Result<Vec<Message>> {
        messages::append(&self.0, tenant, messages, jobs).await
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        Conversation::new(&self.0, tenant, conversation).list(after_seq, limit).await
    }

    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        Conversation::new(&self.0, tenant, conversation).owner().await
    }

    async fn get_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<ConversationInfo>> {
        Conversation::new(&self.0, tenant, conversation).info().await
    }

    async fn list_conversations(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        before: Option<(OffsetDateTime, &ConversationId)>,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>> {
        messages::list_conversations(&self.0, tenant, user, before, limit).await
    }

    async fn conversations_to_compact(
        &self,
        tenant: &TenantId,
        agent: &AgentId,
        unsummarized: i64,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>> {
        messages::conversations_to_compact(&self.0, tenant, agent, unsummarized, limit).await
    }

    async fn speakers(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<String>> {
        messages::speakers(&self.0, tenant, user).await
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        messages::get(&self.0, tenant, id).await
    }

    async fn get_messages(&self, tenant: &TenantId, ids: &[MessageId]) -> Result<Vec<Message>> {
        messages::get_many(&self.0, tenant, ids).await
    }

    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        messages::rate(&self.0, tenant, id, delta).await
    }

    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let scope = (filter, Transcript::Messages);
        let mut hits = self.0.search_transcript_text(Ranked { tenant, scope, query, k }).await?;
        let words = (!filter.pooled).then_some((Some(filter.user.as_str()), "messages"));
        if let Some((q, w)) = typos::retry(&self.0, tenant, words, query, &hits).await? {
            let again = self.0.search_transcript_text(Ranked { tenant, scope, query: &q, k });
            hits = typos::guessed(&hits, again.await?, w);
        }
        Ok(typed(hits, MessageId))
    }

    async fn touch_transcript(
        &self,
        tenant: &TenantId,
        messages: &[MessageId],
        summaries: &[SummaryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        messages::touch(&self.0, tenant, messages, summaries, at).await
    }

    async fn unembedded_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
    ) -> Result<u64> {
        messages::unembedded(&self.0, tenant, filter, model_id).await
    }

    async fn scan_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        before: Option<(OffsetDateTime, MessageId)>,
        limit: usize,
    ) -> Result<Vec<Message>> {
        messages::scan(&self.0, tenant, filter, before, limit).await
    }

    async fn messages_said_about(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        from: OffsetDateTime,
        to: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Message>> {
        messages::said_about(&self.0, tenant, filter, from, to, limit).await
    }

    async fn index_message_dates(&self, tenant: &TenantId, messages: &[Message]) -> Result<u64> {
        messages::index_dates(&self.0, tenant, messages).await
    }

    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        Conversation::new(&self.0, tenant, conversation).needing_vectors(model_id, limit).await
    }

    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        messages::conversations_needing_vectors(&self.0, tenant, model_id, limit).await
    }

    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()> {
        let rows = rows.into_iter().map(|(id, v)| (id.0, v)).collect();
        self.0.store_transcript_vectors(tenant, Transcript::Messages, model_id, rows).await
    }

    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>> {
        let scope = (filter, Transcript::Messages, model_id);
        let hits = self.0.search_transcript_vectors(Ranked { tenant, scope, query, k }).await?;
        Ok(typed(hits, MessageId))
    }

    async fn message_similarities(
        &self,
        tenant: &TenantId,
        model_id: &str,
        query: &[f32],
        ids: &[MessageId],
    ) -> Result<Vec<(MessageId, f32)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
        let table = Transcript::Messages;
        let hits = self.0.score_transcript_vectors(tenant, table, model_id, query, &ids).await?;
        Ok(typed(hits, MessageId))
    }

    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>> {
        Conversation::new(&self.0, tenant, conversation).messages().await
    }

    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        Conversation::new(&self.0, tenant, conversation).extraction_cursor().await
    }

    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        Conversation::new(&self.0, tenant, conversation).rolling_summary().await
    }

    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        let c = Conversation::new(&self.0, tenant, conversation);
        c.set_rolling_summary(summary, user_turns).await
    }

    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        memories::apply_extraction(&self.0, tenant, conversation, user, batch).await
    }

    async fn set_message_content(
        &self,
        tenant: &TenantId,
        id: MessageId,
        content: &str,
    ) -> Result<bool> {
        self.0.fill_message(tenant, id, content).await
    }
}

#[async_trait]
impl<D: Native> SummaryStore for SqlStore<D> {
    async fn insert_summary(&self, tenant: &TenantId, new: NewSummary) -> Result<bool> {
        summaries::insert(&self.0, tenant, &new).await
    }

    async fn get_summary(&self, tenant: &TenantId, id: SummaryId) -> Result<Option<Summary>> {
        summaries::get(&self.0, tenant, id).await
    }

    async fn get_summaries(&self, tenant: &TenantId, ids: &[SummaryId]) -> Result<Vec<Summary>> {
        summaries::get_many(&self.0, tenant, ids).await
    }

    async fn summary_sources(&self, tenant: &TenantId, id: SummaryId) -> Result<Vec<Uuid>> {
        summaries::sources(&self.0, tenant, id).await
    }

    async fn conversation_summaries(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        depth: Option<i64>,
        unparented: bool,
    ) -> Result<Vec<Summary>> {
        summaries::of_conversation(&self.0, tenant, conversation, depth, unparented).await
    }

    async fn text_search_summaries(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(SummaryId, f64)>> {
        let scope = (filter, Transcript::Summaries);
        let mut hits = self.0.search_transcript_text(Ranked { tenant, scope, query, k }).await?;
        let words = (!filter.pooled).then_some((Some(filter.user.as_str()), "summaries"));
        if let Some((q, w)) = typos::retry(&self.0, tenant, words, query, &hits).await? {
            let again = self.0.search_transcript_text(Ranked { tenant, scope, query: &q, k });
            hits = typos::guessed(&hits, again.await?, w);
        }
        Ok(typed(hits, SummaryId))
    }

    async fn summaries_in(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        limit: usize,
    ) -> Result<Vec<Summary>> {
        summaries::in_window(&self.0, tenant, filter, limit).await
    }

    async fn vector_search_summaries(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(SummaryId, f32)>> {
        let scope = (filter, Transcript::Summaries, model_id);
        let hits = self.0.search_transcript_vectors(Ranked { tenant, scope, query, k }).await?;
        Ok(typed(hits, SummaryId))
    }

    async fn summaries_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(SummaryId, String)>> {
        summaries::needing_vectors(&self.0, tenant, model_id, limit).await
    }

    async fn set_summary_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(SummaryId, Vec<f32>)>,
    ) -> Result<()> {
        let rows = rows.into_iter().map(|(id, v)| (id.0, v)).collect();
        self.0.store_transcript_vectors(tenant, Transcript::Summaries, model_id, rows).await
    }
}

#[async_trait]
impl<D: Native> JobStore for SqlStore<D> {
    async fn enqueue_job(&self, job: &Job) -> Result<bool> {
        jobs::enqueue(&self.0, job).await
    }

    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        self.0.claim(now, lease_until, kinds).await
    }

    async fn claim_jobs(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.0.claim_many(now, lease_until, kinds, limit).await
    }

    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()> {
        jobs::heartbeat(&self.0, id, lease_until).await
    }

    async fn complete_job(&self, id: &str) -> Result<()> {
        jobs::complete(&self.0, id).await
    }

    async fn complete_jobs(&self, ids: &[String]) -> Result<()> {
        jobs::complete_all(&self.0, ids).await
    }

    async fn fail_job(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<OffsetDateTime>,
    ) -> Result<()> {
        jobs::fail(&self.0, id, error, retry_at).await
    }

    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        jobs::list(&self.0, tenant, status, limit).await
    }

    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()> {
        jobs::retry(&self.0, tenant, id).await
    }

    async fn prune_jobs(&self, before: OffsetDateTime, limit: usize) -> Result<u64> {
        jobs::prune(&self.0, before, limit).await
    }
}

#[async_trait]
impl<D: Native> MaintenanceStore for SqlStore<D> {
    async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        memories::embedding_space(&self.0).await
    }

    async fn ensure_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.0.record_space(model_id, dims, false).await
    }

    async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        memories::tenants(&self.0).await
    }

    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        memories::needing_vectors(&self.0, tenant, model_id, limit).await
    }

    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        memories::set_vectors(&self.0, tenant, model_id, rows).await
    }

    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.0.record_space(model_id, dims, true).await
    }

    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        memories::users(&self.0, tenant).await
    }

    async fn erase_user(&self, tenant: &TenantId, user: &UserId) -> Result<EraseCounts> {
        let (t, u) = (tenant.as_str(), user.as_str());
        self.0.deleting().await?;
        let mut tx = self.0.begin_write().await?;
        if D::USER_LOCK {
            D::bump(&mut tx, t, u).await?; // the user's lock first, as every writer's
        }
        let mut counts = EraseCounts::default();
        for (table, sql) in crate::tables::erase_statements(|i| format!("?{i}")) {
            let n = D::tx_run(&mut tx, &sql, &[Arg::Text(t), Arg::Text(u)]).await;
            crate::tables::count_erased(&mut counts, table, n.map_err(D::fault)?);
        }
        D::commit(tx).await?;
        self.0.erased(t, u).await?;
        Ok(counts)
    }

    async fn user_messages(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<Message>> {
        memories::user_messages(&self.0, tenant, user).await
    }

    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        memories::user_memories(&self.0, tenant, user).await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        memories::stats(&self.0, tenant, self.embedding_space().await?).await
    }

    async fn backlog(&self, tenant: Option<&TenantId>) -> Result<Backlog> {
        memories::backlog(&self.0, tenant).await
    }

    async fn activity(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        since: OffsetDateTime,
    ) -> Result<Activity> {
        memories::activity(&self.0, tenant, user, since).await
    }

    async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        self.0.backup_rows(scope, sink).await
    }

    async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        self.0.restore_rows(rows, state).await
    }

    async fn import_mark(&self) -> Result<Option<String>> {
        let sql = "SELECT value FROM meta WHERE key = 'import_unfinished'";
        self.0
            .read_opt(sql, &[])
            .await?
            .map(|r| super::rows::Columns::text(&r, "value"))
            .transpose()
    }

    async fn set_import_mark(&self, mark: Option<&str>) -> Result<()> {
        match mark {
            Some(m) => {
                let sql = "INSERT INTO meta (key, value) VALUES ('import_unfinished', ?) \
                           ON CONFLICT (key) DO UPDATE SET value = excluded.value";
                self.0.write(sql, &[Arg::Text(m)]).await?
            }
            None => self.0.write("DELETE FROM meta WHERE key = 'import_unfinished'", &[]).await?,
        };
        Ok(())
    }
}
