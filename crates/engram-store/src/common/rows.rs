//! Rows to domain types, written once: each backend says how it reads one column of its
//! own representation ([`Columns`], implemented for its row type; the representations are
//! those of [`crate::tables::Ty`]). Every column is read with `try_get`: a row that does not
//! decode is an internal error, never a panic.

use engram_core::error::Result;
use engram_core::model::{
    Agent, AgentId, Category, ConversationId, EventKind, Importance, Job, JobKind, JobStatus,
    KeyRole, Kind, Memory, MemoryEvent, MemoryId, Message, MessageId, MessageRole, Source,
    SourceKind, Summary, SummaryId, SummaryKind, TenantId, UserId,
};
use engram_core::store::ApiKey;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// How a backend reads one column of a row.
pub(crate) trait Columns {
    fn text(&self, col: &str) -> Result<String>;
    fn opt_text(&self, col: &str) -> Result<Option<String>>;
    /// An integer of any width.
    fn int(&self, col: &str) -> Result<i64>;
    fn real(&self, col: &str) -> Result<f64>;
    fn flag(&self, col: &str) -> Result<bool>;
    fn id(&self, col: &str) -> Result<Uuid>;
    fn opt_id(&self, col: &str) -> Result<Option<Uuid>>;
    /// A list of ids (unreadable entries of SQLite's JSON text are skipped).
    fn ids(&self, col: &str) -> Result<Vec<Uuid>>;
    fn ts(&self, col: &str) -> Result<OffsetDateTime>;
    fn opt_ts(&self, col: &str) -> Result<Option<OffsetDateTime>>;
    /// A JSON value, if any (SQLite's text that is not JSON reads as none).
    fn opt_json(&self, col: &str) -> Result<Option<Value>>;
    fn is_null(&self, col: &str) -> Result<bool>;

    /// A JSON object, `{}` when absent.
    fn json(&self, col: &str) -> Result<Value> {
        Ok(self.opt_json(col)?.unwrap_or_else(|| serde_json::json!({})))
    }
}

pub(crate) fn memory(r: &impl Columns) -> Result<Memory> {
    Ok(Memory {
        id: MemoryId(r.id("id")?),
        tenant_id: TenantId::parse(r.text("tenant_id")?)?,
        user_id: UserId::parse(r.text("user_id")?)?,
        agent_id: r.opt_text("agent_id")?.map(AgentId::parse).transpose()?,
        pool: r.opt_text("pool")?,
        kind: Kind::parse(&r.text("kind")?)?,
        key: r.opt_text("key")?,
        category: Category::parse(&r.text("category")?)?,
        importance: Importance::clamped(r.int("importance")?),
        rating: r.int("rating")?,
        content: r.text("content")?,
        source: Source {
            kind: SourceKind::parse(&r.text("source_kind")?)?,
            conversation_id: r
                .opt_text("source_conversation_id")?
                .map(ConversationId::parse)
                .transpose()?,
            message_ids: r.ids("source_message_ids")?.into_iter().map(MessageId).collect(),
        },
        observed_at: r.ts("observed_at")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
        last_accessed_at: r.opt_ts("last_accessed_at")?,
        access_count: r.int("access_count")?,
        mention_count: r.int("mention_count")?,
        expires_at: r.opt_ts("expires_at")?,
        superseded_at: r.opt_ts("superseded_at")?,
        superseded_by: r.opt_id("superseded_by")?.map(MemoryId),
        metadata: r.json("metadata")?,
        embedding_model: r.opt_text("embedding_model")?,
    })
}

pub(crate) fn event(r: &impl Columns) -> Result<MemoryEvent> {
    Ok(MemoryEvent {
        memory_id: MemoryId(r.id("memory_id")?),
        event: EventKind::parse(&r.text("event")?)?,
        related_id: r.opt_id("related_id")?.map(MemoryId),
        actor: r.text("actor")?,
        detail: r.json("detail")?,
        at: r.ts("at")?,
    })
}

pub(crate) fn message(r: &impl Columns) -> Result<Message> {
    Ok(Message {
        id: MessageId(r.id("id")?),
        tenant_id: TenantId::parse(r.text("tenant_id")?)?,
        conversation_id: ConversationId::parse(r.text("conversation_id")?)?,
        user_id: UserId::parse(r.text("user_id")?)?,
        agent_id: r.opt_text("agent_id")?.map(AgentId::parse).transpose()?,
        seq: r.int("seq")?,
        role: MessageRole::parse(&r.text("role")?)?,
        content: r.text("content")?,
        tool_name: r.opt_text("tool_name")?,
        tool_args: r.opt_json("tool_args")?,
        tool_result: r.opt_text("tool_result")?,
        turn_id: r.opt_text("turn_id")?,
        metadata: r.json("metadata")?,
        created_at: r.ts("created_at")?,
        rating: r.int("rating")?,
        access_count: r.int("access_count")?,
        last_accessed_at: r.opt_ts("last_accessed_at")?,
    })
}

pub(crate) fn summary(r: &impl Columns) -> Result<Summary> {
    let created_at = r.ts("created_at")?;
    Ok(Summary {
        id: SummaryId(r.id("id")?),
        tenant_id: TenantId::parse(r.text("tenant_id")?)?,
        user_id: UserId::parse(r.text("user_id")?)?,
        conversation_id: ConversationId::parse(r.opt_text("conversation_id")?.unwrap_or_default())?,
        parent_id: r.opt_id("parent_id")?.map(SummaryId),
        depth: r.int("depth")?,
        kind: SummaryKind::parse(&r.text("kind")?)?,
        content: r.text("content")?,
        message_count: r.int("message_count")?,
        earliest_at: r.opt_ts("earliest_at")?.unwrap_or(created_at),
        latest_at: r.opt_ts("latest_at")?.unwrap_or(created_at),
        model: r.opt_text("model")?,
        created_at,
        access_count: r.int("access_count")?,
        last_accessed_at: r.opt_ts("last_accessed_at")?,
    })
}

pub(crate) fn agent(r: &impl Columns) -> Result<Agent> {
    Ok(Agent {
        tenant_id: TenantId::parse(r.text("tenant_id")?)?,
        id: AgentId::parse(r.text("id")?)?,
        memory_enabled: r.flag("memory_enabled")?,
        cluster_id: r.opt_text("cluster_id")?,
        dedup_threshold: r.real("dedup_threshold")? as f32,
        settings: r.json("settings")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

pub(crate) fn api_key(r: &impl Columns) -> Result<ApiKey> {
    let owner = |col: &str| -> Result<String> { Ok(r.opt_text(col)?.unwrap_or_default()) };
    let role = match r.text("role")?.as_str() {
        "admin" => KeyRole::Admin,
        "agent" => KeyRole::Agent(AgentId::parse(owner("agent_id")?)?),
        _ => KeyRole::User(UserId::parse(owner("user_id")?)?),
    };
    Ok(ApiKey {
        id: r.text("id")?,
        tenant: TenantId::parse(r.text("tenant_id")?)?,
        role,
        prefix: r.text("prefix")?,
        created_at: r.ts("created_at")?,
        revoked_at: r.opt_ts("revoked_at")?,
    })
}

pub(crate) fn job(r: &impl Columns) -> Result<Job> {
    Ok(Job {
        id: r.text("id")?,
        tenant_id: TenantId::parse(r.text("tenant_id")?)?,
        user_id: r.opt_text("user_id")?.map(UserId::parse).transpose()?,
        kind: JobKind::parse(&r.text("kind")?)?,
        dedup_key: r.opt_text("dedup_key")?,
        lock_key: r.opt_text("lock_key")?,
        payload: r.json("payload")?,
        status: JobStatus::parse(&r.text("status")?)?,
        attempts: r.int("attempts")?,
        max_attempts: r.int("max_attempts")?,
        run_after: r.ts("run_after")?,
        lease_until: r.opt_ts("lease_until")?,
        last_error: r.opt_text("last_error")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}
