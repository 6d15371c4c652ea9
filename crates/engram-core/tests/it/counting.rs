//! Store calls made by one request (issue 11): the engine reads the caller's agent once per
//! write and search, and a message search makes a fixed number of store calls whatever the
//! number of candidates. A counting wrapper around the real SQLite store records every call.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use engram_core::embed::{EmbedError, Embedder};
use engram_core::engine::{
    AgentInput, Engine, EngineConfig, Hit, MessageInput, RememberInput, SearchInput, SearchSource,
};
use engram_core::error::Result;
use engram_core::model::*;
use engram_core::store::prelude::*;
use engram_core::store::{
    Activity, ApiKey, Backlog, BackupRow, BackupScope, ContextSession, ConversationInfo,
    EraseCounts, ExtractionBatch, MemoryFilter, MemoryPage, NewMemory, NewSummary, RestoreState,
    StateScope, StoreStats, TranscriptFilter, UiSession,
};
use time::OffsetDateTime;

/// Every store call, by method name.
struct Counting {
    inner: Arc<dyn Store>,
    calls: Mutex<BTreeMap<&'static str, usize>>,
    /// Messages returned by `list_messages`, all calls together.
    messages_read: std::sync::atomic::AtomicUsize,
}

impl Counting {
    fn new(inner: Arc<dyn Store>) -> Self {
        Counting { inner, calls: Mutex::default(), messages_read: Default::default() }
    }
    fn hit(&self, name: &'static str) {
        *self.calls.lock().unwrap().entry(name).or_default() += 1;
    }
    fn take(&self) -> BTreeMap<&'static str, usize> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

/// A deterministic bag-of-words embedder (8 dims): enough for vector search to find the
/// messages that share words with the query.
struct Words;

#[async_trait]
impl Embedder for Words {
    fn model_id(&self) -> &str {
        "test:words"
    }
    fn dims(&self) -> usize {
        8
    }
    async fn embed(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.01f32; 8];
                for w in t.split_whitespace() {
                    let h =
                        w.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                    v[(h % 8) as usize] += 1.0;
                }
                engram_core::embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

async fn setup() -> (tempfile::TempDir, Arc<Counting>, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = engram_store::open_sqlite(dir.path()).await.unwrap();
    let counting = Arc::new(Counting::new(inner));
    let store: Arc<dyn Store> = counting.clone();
    let engine = Engine::new(store, Arc::new(Words), EngineConfig::default()).await.unwrap();
    let admin = Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin };
    for a in ["a1", "a2", "a3"] {
        engine
            .put_agent(
                &admin,
                AgentId::parse(a).unwrap(),
                AgentInput {
                    memory_enabled: true,
                    cluster_id: (a != "a3").then(|| "desk".to_string()),
                    dedup_threshold: None,
                    settings: serde_json::json!({}),
                },
            )
            .await
            .unwrap();
    }
    (dir, counting, engine)
}

fn agent(a: &str) -> Principal {
    Principal {
        tenant: TenantId::default_tenant(),
        role: KeyRole::Agent(AgentId::parse(a).unwrap()),
    }
}

fn agent_reads(calls: &BTreeMap<&'static str, usize>) -> usize {
    calls.get("get_agent").copied().unwrap_or(0) + calls.get("get_agents").copied().unwrap_or(0)
}

/// The calls of one message search over `n` messages written by three agents.
async fn message_search_calls(n: usize) -> (usize, BTreeMap<&'static str, usize>) {
    let (_dir, counting, engine) = setup().await;
    let user = UserId::parse("u").unwrap();
    for (i, a) in ["a1", "a2", "a3"].iter().enumerate() {
        let conv = ConversationId::parse(format!("c-{a}")).unwrap();
        let msgs = (0..n / 3)
            .map(|k| MessageInput {
                role: MessageRole::User,
                content: format!("I drink green tea number {k} with friend {i}"),
                ..Default::default()
            })
            .collect();
        engine
            .append_messages(&agent(a), conv.clone(), Some(user.clone()), None, msgs)
            .await
            .unwrap();
        engine.services().embed_conversation(&TenantId::default_tenant(), &conv).await.unwrap();
    }
    counting.take();
    let hits = engine
        .search(
            &agent("a1"),
            SearchInput {
                query: "green tea".into(),
                user_id: Some(user),
                sources: vec![SearchSource::Messages],
                limit: 200,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    (hits.len(), counting.take())
}

#[tokio::test]
async fn a_message_search_makes_a_fixed_number_of_store_calls() {
    let (few_hits, few) = message_search_calls(9).await;
    let (many_hits, many) = message_search_calls(90).await;
    assert!(
        many_hits > few_hits,
        "the larger store should give more candidates: {few_hits} vs {many_hits}"
    );
    assert_eq!(few, many, "store calls depend on the number of candidates");
    assert_eq!(
        agent_reads(&many),
        2,
        "the caller's agent once, the candidates' agents once: {many:?}"
    );
    assert!(!many.contains_key("get_message"), "messages loaded one by one: {many:?}");
    // a3 is outside a1's cluster: its messages are not shown to a1.
    assert!(many_hits <= 60, "{many_hits}");
}

#[tokio::test]
async fn writes_and_searches_read_the_agent_once() {
    let (_dir, counting, engine) = setup().await;
    let user = UserId::parse("u").unwrap();
    counting.take();
    engine
        .remember(
            &agent("a1"),
            RememberInput {
                user_id: Some(user.clone()),
                content: "The user drinks green tea.".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let calls = counting.take();
    assert_eq!(agent_reads(&calls), 1, "remember: {calls:?}");
    engine
        .remember(
            &agent("a1"),
            RememberInput {
                user_id: Some(user.clone()),
                content: "The user walks the dog at seven.".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let calls = counting.take();
    assert_eq!(agent_reads(&calls), 1, "second remember: {calls:?}");
    assert!(
        !calls.contains_key("ensure_embedding_space"),
        "the space is read on every write: {calls:?}"
    );
    engine
        .search(
            &agent("a1"),
            SearchInput {
                query: "tea".into(),
                user_id: Some(user.clone()),
                sources: vec![SearchSource::Memories],
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let calls = counting.take();
    assert_eq!(agent_reads(&calls), 1, "search: {calls:?}");
    let conv = ConversationId::parse("c1").unwrap();
    let msg =
        MessageInput { role: MessageRole::User, content: "hello".into(), ..Default::default() };
    engine.append_messages(&agent("a1"), conv, Some(user), None, vec![msg]).await.unwrap();
    let calls = counting.take();
    assert_eq!(agent_reads(&calls), 1, "append: {calls:?}");
}

/// The conversation list is scoped like a transcript read: an agent key sees its pool's
/// conversations and those written without an agent, with one read of agents for the page;
/// a user key only its own, whatever user it names.
#[tokio::test]
async fn conversation_lists_are_scoped() {
    let (_dir, counting, engine) = setup().await;
    let tenant = TenantId::default_tenant();
    let admin = Principal { tenant: tenant.clone(), role: KeyRole::Admin };
    let say =
        || MessageInput { role: MessageRole::User, content: "hello".into(), ..Default::default() };
    for (who, conv, user) in
        [(agent("a1"), "c-a1", "u"), (agent("a3"), "c-a3", "u"), (admin.clone(), "c-none", "v")]
    {
        let (conv, user) = (ConversationId::parse(conv).unwrap(), UserId::parse(user).unwrap());
        engine.append_messages(&who, conv, Some(user), None, vec![say()]).await.unwrap();
    }
    let ids = |l: Vec<ConversationInfo>| {
        let mut ids: Vec<String> = l.into_iter().map(|c| c.id.to_string()).collect();
        ids.sort();
        ids
    };
    counting.take();
    let seen = engine.conversations(&agent("a2"), None, None, 10).await.unwrap();
    assert_eq!(agent_reads(&counting.take()), 1, "one read of agents for the page");
    assert_eq!(ids(seen), ["c-a1", "c-none"], "a2 shares a1's pool, not a3's");
    let u = Principal { tenant: tenant.clone(), role: KeyRole::User(UserId::parse("u").unwrap()) };
    let other = UserId::parse("v").unwrap();
    assert_eq!(
        ids(engine.conversations(&u, Some(&other), None, 10).await.unwrap()),
        ["c-a1", "c-a3"]
    );
    assert_eq!(ids(engine.conversations(&admin, None, None, 10).await.unwrap()).len(), 3);
}

// ---- the wrapper: every method counted, then passed to the real store ----

#[async_trait]
impl MemoryStore for Counting {
    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()> {
        self.hit("insert_memories");
        self.inner.insert_memories(tenant, rows).await
    }
    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        self.hit("get_memory");
        self.inner.get_memory(tenant, id).await
    }
    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        self.hit("get_memories");
        self.inner.get_memories(tenant, ids).await
    }
    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage> {
        self.hit("list_memories");
        self.inner.list_memories(tenant, filter, cursor, limit).await
    }
    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>> {
        self.hit("all_active");
        self.inner.all_active(tenant, filter).await
    }
    async fn supersede(
        &self,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<NewMemory>,
        event: MemoryEvent,
    ) -> Result<()> {
        self.hit("supersede");
        self.inner.supersede(tenant, old, new, event).await
    }
    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()> {
        self.hit("confirm_memory");
        self.inner.confirm_memory(tenant, id, event).await
    }
    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64> {
        self.hit("rate_memory");
        self.inner.rate_memory(tenant, id, delta, event).await
    }
    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        self.hit("purge_memory");
        self.inner.purge_memory(tenant, id).await
    }
    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        self.hit("history");
        self.inner.history(tenant, id).await
    }
    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        self.hit("vector_search");
        self.inner.vector_search(tenant, filter, vector, k).await
    }
    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        self.hit("text_search");
        self.inner.text_search(tenant, filter, query, k).await
    }
    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        self.hit("touch_memories");
        self.inner.touch_memories(tenant, ids, at).await
    }
    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        self.hit("find_profile");
        self.inner.find_profile(tenant, user, pool, key).await
    }
    async fn record_recall(
        &self,
        tenant: &TenantId,
        turn_id: &str,
        ids: &[MemoryId],
    ) -> Result<()> {
        self.hit("record_recall");
        self.inner.record_recall(tenant, turn_id, ids).await
    }
    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        self.hit("recalled");
        self.inner.recalled(tenant, turn_id).await
    }
    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        self.hit("get_context_session");
        self.inner.get_context_session(tenant, session_id, user, pool).await
    }
    async fn put_context_session(&self, tenant: &TenantId, session: &ContextSession) -> Result<()> {
        self.hit("put_context_session");
        self.inner.put_context_session(tenant, session).await
    }
    async fn facts_version(&self, tenant: &TenantId, user: &UserId) -> Result<i64> {
        self.hit("facts_version");
        self.inner.facts_version(tenant, user).await
    }
}

#[async_trait]
impl MessageStore for Counting {
    async fn append_messages_with_jobs(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
        jobs: &[Job],
    ) -> Result<Vec<Message>> {
        self.hit("append_messages_with_jobs");
        self.inner.append_messages_with_jobs(tenant, messages, jobs).await
    }
    async fn speakers(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<String>> {
        self.hit("speakers");
        self.inner.speakers(tenant, user).await
    }
    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        self.hit("list_messages");
        let read = self.inner.list_messages(tenant, conversation, after_seq, limit).await?;
        self.messages_read.fetch_add(read.len(), std::sync::atomic::Ordering::Relaxed);
        Ok(read)
    }
    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        self.hit("conversation_owner");
        self.inner.conversation_owner(tenant, conversation).await
    }
    async fn get_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<ConversationInfo>> {
        self.hit("get_conversation");
        self.inner.get_conversation(tenant, conversation).await
    }
    async fn list_conversations(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        before: Option<(time::OffsetDateTime, &ConversationId)>,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>> {
        self.hit("list_conversations");
        self.inner.list_conversations(tenant, user, before, limit).await
    }
    async fn conversations_to_compact(
        &self,
        tenant: &TenantId,
        agent: &AgentId,
        unsummarized: i64,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>> {
        self.hit("conversations_to_compact");
        self.inner.conversations_to_compact(tenant, agent, unsummarized, limit).await
    }
    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        self.hit("get_message");
        self.inner.get_message(tenant, id).await
    }
    async fn get_messages(&self, tenant: &TenantId, ids: &[MessageId]) -> Result<Vec<Message>> {
        self.hit("get_messages");
        self.inner.get_messages(tenant, ids).await
    }
    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        self.hit("rate_message");
        self.inner.rate_message(tenant, id, delta).await
    }
    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        self.hit("text_search_messages");
        self.inner.text_search_messages(tenant, filter, query, k).await
    }
    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        self.hit("messages_needing_vectors");
        self.inner.messages_needing_vectors(tenant, conversation, model_id, limit).await
    }
    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        self.hit("conversations_needing_message_vectors");
        self.inner.conversations_needing_message_vectors(tenant, model_id, limit).await
    }
    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()> {
        self.hit("set_message_vectors");
        self.inner.set_message_vectors(tenant, model_id, rows).await
    }
    async fn touch_transcript(
        &self,
        tenant: &TenantId,
        messages: &[MessageId],
        summaries: &[SummaryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        self.hit("touch_transcript");
        self.inner.touch_transcript(tenant, messages, summaries, at).await
    }
    async fn unembedded_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
    ) -> Result<u64> {
        self.hit("unembedded_messages");
        self.inner.unembedded_messages(tenant, filter, model_id).await
    }
    async fn scan_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        before: Option<(OffsetDateTime, MessageId)>,
        limit: usize,
    ) -> Result<Vec<Message>> {
        self.hit("scan_messages");
        self.inner.scan_messages(tenant, filter, before, limit).await
    }
    async fn messages_said_about(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        from: OffsetDateTime,
        to: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Message>> {
        self.hit("messages_said_about");
        self.inner.messages_said_about(tenant, filter, from, to, limit).await
    }
    async fn index_message_dates(&self, tenant: &TenantId, messages: &[Message]) -> Result<u64> {
        self.hit("index_message_dates");
        self.inner.index_message_dates(tenant, messages).await
    }
    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>> {
        self.hit("vector_search_messages");
        self.inner.vector_search_messages(tenant, filter, model_id, query, k).await
    }
    async fn message_similarities(
        &self,
        tenant: &TenantId,
        model_id: &str,
        query: &[f32],
        ids: &[MessageId],
    ) -> Result<Vec<(MessageId, f32)>> {
        self.hit("message_similarities");
        self.inner.message_similarities(tenant, model_id, query, ids).await
    }
    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>> {
        self.hit("conversation_messages");
        self.inner.conversation_messages(tenant, conversation).await
    }
    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        self.hit("extraction_cursor");
        self.inner.extraction_cursor(tenant, conversation).await
    }
    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        self.hit("rolling_summary");
        self.inner.rolling_summary(tenant, conversation).await
    }
    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        self.hit("set_rolling_summary");
        self.inner.set_rolling_summary(tenant, conversation, summary, user_turns).await
    }
    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        self.hit("apply_extraction");
        self.inner.apply_extraction(tenant, conversation, user, batch).await
    }
    async fn set_message_content(
        &self,
        tenant: &TenantId,
        id: MessageId,
        content: &str,
    ) -> Result<bool> {
        self.hit("set_message_content");
        self.inner.set_message_content(tenant, id, content).await
    }
}

#[async_trait]
impl SummaryStore for Counting {
    async fn insert_summary(&self, tenant: &TenantId, new: NewSummary) -> Result<bool> {
        self.hit("insert_summary");
        self.inner.insert_summary(tenant, new).await
    }
    async fn get_summary(&self, tenant: &TenantId, id: SummaryId) -> Result<Option<Summary>> {
        self.hit("get_summary");
        self.inner.get_summary(tenant, id).await
    }
    async fn get_summaries(&self, tenant: &TenantId, ids: &[SummaryId]) -> Result<Vec<Summary>> {
        self.hit("get_summaries");
        self.inner.get_summaries(tenant, ids).await
    }
    async fn summary_sources(&self, tenant: &TenantId, id: SummaryId) -> Result<Vec<uuid::Uuid>> {
        self.hit("summary_sources");
        self.inner.summary_sources(tenant, id).await
    }
    async fn conversation_summaries(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        depth: Option<i64>,
        unparented: bool,
    ) -> Result<Vec<Summary>> {
        self.hit("conversation_summaries");
        self.inner.conversation_summaries(tenant, conversation, depth, unparented).await
    }
    async fn text_search_summaries(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(SummaryId, f64)>> {
        self.hit("text_search_summaries");
        self.inner.text_search_summaries(tenant, filter, query, k).await
    }
    async fn summaries_in(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        limit: usize,
    ) -> Result<Vec<Summary>> {
        self.hit("summaries_in");
        self.inner.summaries_in(tenant, filter, limit).await
    }
    async fn vector_search_summaries(
        &self,
        tenant: &TenantId,
        filter: &TranscriptFilter,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(SummaryId, f32)>> {
        self.hit("vector_search_summaries");
        self.inner.vector_search_summaries(tenant, filter, model_id, query, k).await
    }
    async fn summaries_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(SummaryId, String)>> {
        self.hit("summaries_needing_vectors");
        self.inner.summaries_needing_vectors(tenant, model_id, limit).await
    }
    async fn set_summary_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(SummaryId, Vec<f32>)>,
    ) -> Result<()> {
        self.hit("set_summary_vectors");
        self.inner.set_summary_vectors(tenant, model_id, rows).await
    }
}

#[async_trait]
impl JobStore for Counting {
    async fn enqueue_job(&self, job: &Job) -> Result<bool> {
        self.hit("enqueue_job");
        self.inner.enqueue_job(job).await
    }
    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        self.hit("claim_job");
        self.inner.claim_job(now, lease_until, kinds).await
    }
    async fn claim_jobs(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.hit("claim_jobs");
        self.inner.claim_jobs(now, lease_until, kinds, limit).await
    }
    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()> {
        self.hit("heartbeat_job");
        self.inner.heartbeat_job(id, lease_until).await
    }
    async fn complete_job(&self, id: &str) -> Result<()> {
        self.hit("complete_job");
        self.inner.complete_job(id).await
    }
    async fn complete_jobs(&self, ids: &[String]) -> Result<()> {
        self.hit("complete_jobs");
        self.inner.complete_jobs(ids).await
    }
    async fn fail_job(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<OffsetDateTime>,
    ) -> Result<()> {
        self.hit("fail_job");
        self.inner.fail_job(id, error, retry_at).await
    }
    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.hit("list_jobs");
        self.inner.list_jobs(tenant, status, limit).await
    }
    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()> {
        self.hit("retry_job");
        self.inner.retry_job(tenant, id).await
    }

    async fn prune_jobs(&self, before: OffsetDateTime, limit: usize) -> Result<u64> {
        self.hit("prune_jobs");
        self.inner.prune_jobs(before, limit).await
    }
}

#[async_trait]
impl StateStore for Counting {
    async fn put_state(&self, row: &SessionState) -> Result<SessionState> {
        self.hit("put_state");
        self.inner.put_state(row).await
    }
    async fn get_state(
        &self,
        tenant: &TenantId,
        scope: &StateScope,
        key: &StateKey,
        now: OffsetDateTime,
    ) -> Result<Option<SessionState>> {
        self.hit("get_state");
        self.inner.get_state(tenant, scope, key, now).await
    }
    async fn delete_state(
        &self,
        tenant: &TenantId,
        scope: &StateScope,
        key: &StateKey,
        now: OffsetDateTime,
    ) -> Result<bool> {
        self.hit("delete_state");
        self.inner.delete_state(tenant, scope, key, now).await
    }
    async fn list_state(
        &self,
        tenant: &TenantId,
        user: &UserId,
        scope: Option<&StateScope>,
        now: OffsetDateTime,
    ) -> Result<Vec<SessionState>> {
        self.hit("list_state");
        self.inner.list_state(tenant, user, scope, now).await
    }
    async fn sweep_state(&self, now: OffsetDateTime) -> Result<u64> {
        self.hit("sweep_state");
        self.inner.sweep_state(now).await
    }
}

#[async_trait]
impl AccessStore for Counting {
    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        self.hit("create_api_key");
        self.inner.create_api_key(key, secret_hash).await
    }
    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        self.hit("list_api_keys");
        self.inner.list_api_keys(tenant).await
    }
    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        self.hit("revoke_api_key");
        self.inner.revoke_api_key(id).await
    }
    async fn create_ui_session(&self, s: &UiSession) -> Result<()> {
        self.hit("create_ui_session");
        self.inner.create_ui_session(s).await
    }
    async fn find_ui_session(
        &self,
        token_hash: &str,
        now: OffsetDateTime,
    ) -> Result<Option<(UiSession, ApiKey)>> {
        self.hit("find_ui_session");
        self.inner.find_ui_session(token_hash, now).await
    }
    async fn delete_ui_session(&self, token_hash: &str) -> Result<()> {
        self.hit("delete_ui_session");
        self.inner.delete_ui_session(token_hash).await
    }
    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        self.hit("find_api_key");
        self.inner.find_api_key(secret_hash).await
    }
    async fn count_active_api_keys(&self) -> Result<u64> {
        self.hit("count_active_api_keys");
        self.inner.count_active_api_keys().await
    }
    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        self.hit("get_agent");
        self.inner.get_agent(tenant, id).await
    }
    async fn get_agents(&self, tenant: &TenantId, ids: &[AgentId]) -> Result<Vec<Agent>> {
        self.hit("get_agents");
        self.inner.get_agents(tenant, ids).await
    }
    async fn put_agent(&self, agent: &Agent) -> Result<()> {
        self.hit("put_agent");
        self.inner.put_agent(agent).await
    }
    async fn list_agents(&self, tenant: &TenantId) -> Result<Vec<Agent>> {
        self.hit("list_agents");
        self.inner.list_agents(tenant).await
    }
}

#[async_trait]
impl MaintenanceStore for Counting {
    async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        self.hit("embedding_space");
        self.inner.embedding_space().await
    }
    async fn ensure_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.hit("ensure_embedding_space");
        self.inner.ensure_embedding_space(model_id, dims).await
    }
    async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        self.hit("list_tenants");
        self.inner.list_tenants().await
    }
    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        self.hit("rows_needing_vectors");
        self.inner.rows_needing_vectors(tenant, model_id, limit).await
    }
    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        self.hit("set_vectors");
        self.inner.set_vectors(tenant, model_id, rows).await
    }
    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.hit("reset_embedding_space");
        self.inner.reset_embedding_space(model_id, dims).await
    }
    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        self.hit("list_users");
        self.inner.list_users(tenant).await
    }
    async fn erase_user(&self, tenant: &TenantId, user: &UserId) -> Result<EraseCounts> {
        self.hit("erase_user");
        self.inner.erase_user(tenant, user).await
    }
    async fn user_messages(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<Message>> {
        self.hit("user_messages");
        self.inner.user_messages(tenant, user).await
    }
    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        self.hit("user_memories");
        self.inner.user_memories(tenant, user).await
    }
    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        self.hit("stats");
        self.inner.stats(tenant).await
    }
    async fn backlog(&self, tenant: Option<&TenantId>) -> Result<Backlog> {
        self.hit("backlog");
        self.inner.backlog(tenant).await
    }
    async fn activity(
        &self,
        tenant: &TenantId,
        user: Option<&UserId>,
        since: time::OffsetDateTime,
    ) -> Result<Activity> {
        self.hit("activity");
        self.inner.activity(tenant, user, since).await
    }
    async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        self.hit("backup");
        self.inner.backup(scope, sink).await
    }
    async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        self.hit("restore");
        self.inner.restore(rows, state).await
    }
    async fn import_mark(&self) -> Result<Option<String>> {
        self.hit("import_mark");
        self.inner.import_mark().await
    }
    async fn set_import_mark(&self, mark: Option<&str>) -> Result<()> {
        self.hit("set_import_mark");
        self.inner.set_import_mark(mark).await
    }
}

/// [`Words`], recording the texts of every background call; it adds a message alone to its
/// document's vector only when `alone` is set.
#[derive(Default)]
struct Recording {
    background: Mutex<Vec<Vec<String>>>,
    alone: bool,
}

impl Recording {
    fn sizes(&self) -> Vec<usize> {
        self.background.lock().unwrap().iter().map(Vec::len).collect()
    }
}

#[async_trait]
impl Embedder for Recording {
    fn model_id(&self) -> &str {
        Words.model_id()
    }
    fn dims(&self) -> usize {
        Words.dims()
    }
    fn adds_message_alone(&self) -> bool {
        self.alone
    }
    async fn embed(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        Words.embed(texts).await
    }
    async fn embed_background(
        &self,
        texts: &[String],
    ) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        self.background.lock().unwrap().push(texts.to_vec());
        Words.embed(texts).await
    }
}

/// Issue 14: the embedding lane takes the `embed_messages` jobs of many conversations, users
/// and tenants at once and embeds their messages in one background call, with two reads per
/// conversation and one write per tenant, and every job ends done.
#[tokio::test]
async fn the_embedding_lane_embeds_many_conversations_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = engram_store::open_sqlite(dir.path()).await.unwrap();
    let counting = Arc::new(Counting::new(inner));
    let store: Arc<dyn Store> = counting.clone();
    let embedder = Arc::new(Recording::default());
    let engine = Engine::new(store, embedder.clone(), EngineConfig::default()).await.unwrap();
    let tenants = [TenantId::default_tenant(), TenantId::parse("other").unwrap()];
    for tenant in &tenants {
        let admin = Principal { tenant: tenant.clone(), role: KeyRole::Admin };
        for c in 0..4 {
            let msgs = (0..5)
                .map(|k| MessageInput {
                    role: MessageRole::User,
                    content: format!("message {k} of conversation {c}"),
                    ..Default::default()
                })
                .collect();
            let conv = ConversationId::parse(format!("c{c}")).unwrap();
            let user = UserId::parse(format!("u{c}")).unwrap();
            engine.append_messages(&admin, conv, Some(user), None, msgs).await.unwrap();
        }
    }
    assert_eq!(engine.backlog_all().await.unwrap().messages_unembedded, 40);
    counting.take();

    let shutdown = tokio_util::sync::CancellationToken::new();
    let cfg = engram_core::jobs::WorkerConfig {
        poll: std::time::Duration::from_millis(10),
        // One lane, so the one batch is certain (two would split the 8 jobs between them).
        embedding_lanes: 1,
        ..Default::default()
    };
    let workers = tokio::spawn(engram_core::jobs::run_workers(
        engine.services().clone(),
        cfg,
        shutdown.clone(),
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let done = counting.inner.list_jobs(None, Some(JobStatus::Done), 100).await.unwrap();
        if done.len() == 8 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "jobs not done: {done:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    workers.await.unwrap();

    assert_eq!(embedder.sizes(), vec![40], "one background call");
    assert_eq!(counting.inner.backlog(None).await.unwrap().messages_unembedded, 0);
    let calls = counting.take();
    assert_eq!(calls.get("set_message_vectors"), Some(&2), "one write per tenant: {calls:?}");
    assert_eq!(calls.get("messages_needing_vectors"), Some(&8), "{calls:?}");
    assert_eq!(calls.get("list_messages"), Some(&8), "{calls:?}");
    assert_eq!(calls.get("complete_jobs"), Some(&1), "the group is done in one write: {calls:?}");
    assert_eq!(calls.get("complete_job"), None, "{calls:?}");
    let failed = counting.inner.list_jobs(None, Some(JobStatus::Failed), 100).await.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
}

/// Issue 14: a conversation too long for one round is embedded in several; each round reads
/// only messages the one before it did not, and the first message of a round still gets the
/// two messages before it (read by the previous round) as its context.
#[tokio::test]
async fn a_long_conversation_is_read_once_across_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = engram_store::open_sqlite(dir.path()).await.unwrap();
    let counting = Arc::new(Counting::new(inner));
    let store: Arc<dyn Store> = counting.clone();
    let embedder = Arc::new(Recording::default());
    let engine = Engine::new(store, embedder.clone(), EngineConfig::default()).await.unwrap();
    let admin = Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin };
    let conv = ConversationId::parse("long").unwrap();
    let msgs: Vec<MessageInput> = (0..600)
        .map(|k| MessageInput {
            role: MessageRole::User,
            content: format!("line {k}"),
            ..Default::default()
        })
        .collect();
    engine
        .append_messages(&admin, conv.clone(), Some(UserId::parse("u").unwrap()), None, msgs)
        .await
        .unwrap();
    counting.take();
    counting.messages_read.store(0, std::sync::atomic::Ordering::Relaxed);

    let n = engine.services().embed_conversation(&TenantId::default_tenant(), &conv).await;
    assert_eq!(n.unwrap(), 600);
    let sizes = embedder.sizes();
    assert!(sizes.len() >= 3 && sizes.iter().sum::<usize>() == 600, "rounds: {sizes:?}");
    assert_eq!(
        counting.messages_read.load(std::sync::atomic::Ordering::Relaxed),
        600,
        "every message read once"
    );
    let calls = counting.take();
    assert_eq!(calls.get("list_messages"), Some(&sizes.len()), "one read per round: {calls:?}");
    // Each round's first document: the message and the two before it, the previous round's.
    let background = embedder.background.lock().unwrap();
    let mut first = 0;
    for round in background.iter() {
        let doc = &round[0];
        assert!(doc.ends_with(&format!("\nline {first}")) || first == 0, "{doc}");
        if first >= 2 {
            for k in [first - 2, first - 1] {
                assert!(doc.contains(&format!("line {k}\n")), "context {k} missing: {doc}");
            }
        }
        first += round.len();
    }
}

/// Issue 15: the workers delete expired working memory in the background (a read never
/// returns it anyway); a live entry stays.
#[tokio::test]
async fn the_workers_sweep_expired_working_memory() {
    let (_dir, counting, engine) = setup().await;
    let admin = Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin };
    let at = engram_core::engine::StateAddress {
        user_id: Some(UserId::parse("u").unwrap()),
        agent_id: None,
    };
    let session = || SessionId::parse("run").unwrap();
    let short = engine
        .put_state(
            &admin,
            &at,
            session(),
            StateKey::parse("code").unwrap(),
            serde_json::json!("493021"),
            Some(time::Duration::seconds(1)),
        )
        .await
        .unwrap();
    engine
        .put_state(&admin, &at, session(), StateKey::parse("plan").unwrap(), 1.into(), None)
        .await
        .unwrap();
    let user = UserId::parse("u").unwrap();
    let rows_at_start =
        || counting.inner.list_state(&short.tenant_id, &user, None, short.created_at);
    assert_eq!(rows_at_start().await.unwrap().len(), 2);

    let shutdown = tokio_util::sync::CancellationToken::new();
    let cfg = engram_core::jobs::WorkerConfig {
        sweep_every: std::time::Duration::from_millis(50),
        ..Default::default()
    };
    let workers = tokio::spawn(engram_core::jobs::run_workers(
        engine.services().clone(),
        cfg,
        shutdown.clone(),
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Read as of its creation, the entry is there until the sweep deletes the row.
    while rows_at_start().await.unwrap().len() == 2 {
        assert!(std::time::Instant::now() < deadline, "the expired entry was never swept");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    workers.await.unwrap();
    let left = rows_at_start().await.unwrap();
    assert_eq!(left.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["plan"]);
    assert!(short.expires_at <= engram_core::model::now(), "swept before it expired");
}

/// A message's vector is its document's (the message after its two previous messages) plus
/// the message read alone, normalised, embedded in the same background call; the first
/// message of a conversation has no context and is embedded once.
#[tokio::test]
async fn a_message_vector_adds_the_message_read_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = engram_store::open_sqlite(dir.path()).await.unwrap();
    let embedder = Arc::new(Recording { alone: true, ..Default::default() });
    let engine =
        Engine::new(store.clone(), embedder.clone(), EngineConfig::default()).await.unwrap();
    let admin = Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin };
    let conv = ConversationId::parse("c").unwrap();
    let user = UserId::parse("u").unwrap();
    let contents = ["we talked about boats", "and about trains", "Yes! Last Friday"];
    let msgs = user_messages(&contents);
    let appended = engine.append_messages(&admin, conv.clone(), Some(user.clone()), None, msgs);
    let ids: Vec<MessageId> = appended.await.unwrap().iter().map(|m| m.id).collect();
    let n = engine.services().embed_conversation(&TenantId::default_tenant(), &conv).await;
    assert_eq!(n.unwrap(), 3);

    let docs = [
        "we talked about boats",
        "we talked about boats\nand about trains",
        "we talked about boats\nand about trains\nYes! Last Friday",
    ];
    let mut want: Vec<String> = docs.iter().map(|d| (*d).to_string()).collect();
    want.extend(["and about trains".to_string(), "Yes! Last Friday".to_string()]);
    assert_eq!(*embedder.background.lock().unwrap(), vec![want], "one call, documents first");

    let filter = TranscriptFilter::user(user);
    for (k, id) in ids.iter().enumerate() {
        let mut texts = vec![docs[k].to_string()];
        if k > 0 {
            texts.push(contents[k].to_string());
        }
        let vs = Words.embed(&texts).await.unwrap();
        let mut expected = vec![0f32; 8];
        for v in &vs {
            for (x, y) in expected.iter_mut().zip(v) {
                *x += y;
            }
        }
        engram_core::embed::normalize(&mut expected);
        let hits = store
            .vector_search_messages(
                &TenantId::default_tenant(),
                &filter,
                "test:words",
                &expected,
                3,
            )
            .await
            .unwrap();
        let own = hits.iter().find(|h| h.0 == *id).expect("the message is a neighbour");
        assert!(own.1 > 0.9999, "message {k}: cosine {} of {hits:?}", own.1);
    }
}

/// A query that names a speaker ranks the messages by a vector with the name mostly left
/// out, but their semantic support (`explain.vector_similarity`, and so the score) is the
/// cosine with the query as asked, one more store call for all the candidates.
#[tokio::test]
async fn a_message_is_scored_against_the_query_as_asked() {
    let (_dir, counting, engine) = setup().await;
    let admin = Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin };
    let user = UserId::parse("u").unwrap();
    let lines = [
        "Maria: we went sailing on the boats",
        "John: the trains were late again",
        "Maria: boats and more boats this summer",
        "John: Maria loves her boats",
    ];
    let msgs = user_messages(&lines);
    let conv = ConversationId::parse("c").unwrap();
    engine.append_messages(&admin, conv.clone(), Some(user.clone()), None, msgs).await.unwrap();
    engine.services().embed_conversation(&TenantId::default_tenant(), &conv).await.unwrap();
    counting.take();

    let query = "What did Maria say about boats?";
    let input = SearchInput {
        query: query.into(),
        user_id: Some(user.clone()),
        sources: vec![SearchSource::Messages],
        limit: 10,
        explain: true,
        min_score: Some(0.0),
        ..Default::default()
    };
    let hits = engine.search(&admin, input).await.unwrap();
    let calls = counting.take();
    assert_eq!(calls.get("message_similarities"), Some(&1), "{calls:?}");
    let asked = Words.embed(&[query.to_string()]).await.unwrap().remove(0);
    let filter = TranscriptFilter::user(user);
    let store = counting.clone() as Arc<dyn Store>;
    let cosines: BTreeMap<MessageId, f32> = store
        .vector_search_messages(&TenantId::default_tenant(), &filter, "test:words", &asked, 10)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let mut checked = 0;
    for h in &hits {
        let (Hit::Message { message, .. }, e) = (h, h.explain()) else { continue };
        assert!(e.speakers.is_some(), "the name left the ranking vector: {e:?}");
        let Some(got) = e.vector_similarity else { continue };
        let want = cosines[&message.id];
        assert!((got - want).abs() < 1e-5, "{}: {got} against {want} as asked", message.content);
        checked += 1;
    }
    assert_eq!(checked, lines.len(), "every message is a vector neighbour");
}

/// User messages with these contents.
fn user_messages(contents: &[&str]) -> Vec<MessageInput> {
    contents
        .iter()
        .map(|c| MessageInput {
            role: MessageRole::User,
            content: (*c).into(),
            ..Default::default()
        })
        .collect()
}
