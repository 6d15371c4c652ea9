//! Rows to domain types for the PostgreSQL store.
//!
//! Every column is read with `try_get`: a row that does not decode is an internal error,
//! never a panic.

use engram_core::error::{Error, Result};
use engram_core::model::{
    Agent, AgentId, Category, ConversationId, EventKind, Importance, Job, JobKind, JobStatus,
    KeyRole, Kind, Memory, MemoryEvent, MemoryId, Message, MessageId, MessageRole, Source,
    SourceKind, TenantId, UserId,
};
use engram_core::store::ApiKey;
use sqlx::postgres::PgRow;
use sqlx::{Decode, Postgres, Row, Type};
use time::OffsetDateTime;
use uuid::Uuid;

/// The columns of `memories` that [`memory`] reads.
pub use crate::common::memories::MEMORY_COLS;

/// One column, decoded.
pub fn col<'r, T>(r: &'r PgRow, name: &str) -> Result<T>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    r.try_get(name).map_err(|e| Error::internal(format!("database: column {name}: {e}")))
}

fn json(r: &PgRow, name: &str) -> Result<serde_json::Value> {
    Ok(col::<Option<serde_json::Value>>(r, name)?.unwrap_or_else(|| serde_json::json!({})))
}

pub fn memory(r: &PgRow) -> Result<Memory> {
    let ids: Vec<Uuid> = col(r, "source_message_ids")?;
    Ok(Memory {
        id: MemoryId(col(r, "id")?),
        tenant_id: TenantId::parse(col::<String>(r, "tenant_id")?)?,
        user_id: UserId::parse(col::<String>(r, "user_id")?)?,
        agent_id: col::<Option<String>>(r, "agent_id")?.map(AgentId::parse).transpose()?,
        pool: col(r, "pool")?,
        kind: Kind::parse(col(r, "kind")?)?,
        key: col(r, "key")?,
        category: Category::parse(col(r, "category")?)?,
        importance: Importance::clamped(i64::from(col::<i16>(r, "importance")?)),
        rating: col(r, "rating")?,
        content: col(r, "content")?,
        source: Source {
            kind: SourceKind::parse(col(r, "source_kind")?)?,
            conversation_id: col::<Option<String>>(r, "source_conversation_id")?
                .map(ConversationId::parse)
                .transpose()?,
            message_ids: ids.into_iter().map(MessageId).collect(),
        },
        observed_at: col(r, "observed_at")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
        last_accessed_at: col(r, "last_accessed_at")?,
        access_count: col(r, "access_count")?,
        mention_count: col(r, "mention_count")?,
        expires_at: col(r, "expires_at")?,
        superseded_at: col(r, "superseded_at")?,
        superseded_by: col::<Option<Uuid>>(r, "superseded_by")?.map(MemoryId),
        metadata: json(r, "metadata")?,
        embedding_model: col(r, "embedding_model")?,
    })
}

pub fn event(r: &PgRow) -> Result<MemoryEvent> {
    Ok(MemoryEvent {
        memory_id: MemoryId(col(r, "memory_id")?),
        event: EventKind::parse(col(r, "event")?)?,
        related_id: col::<Option<Uuid>>(r, "related_id")?.map(MemoryId),
        actor: col(r, "actor")?,
        detail: json(r, "detail")?,
        at: col(r, "at")?,
    })
}

pub fn message(r: &PgRow) -> Result<Message> {
    Ok(Message {
        id: MessageId(col(r, "id")?),
        tenant_id: TenantId::parse(col::<String>(r, "tenant_id")?)?,
        conversation_id: ConversationId::parse(col::<String>(r, "conversation_id")?)?,
        user_id: UserId::parse(col::<String>(r, "user_id")?)?,
        agent_id: col::<Option<String>>(r, "agent_id")?.map(AgentId::parse).transpose()?,
        seq: col(r, "seq")?,
        role: MessageRole::parse(col(r, "role")?)?,
        content: col(r, "content")?,
        tool_name: col(r, "tool_name")?,
        tool_args: col(r, "tool_args")?,
        tool_result: col(r, "tool_result")?,
        turn_id: col(r, "turn_id")?,
        metadata: json(r, "metadata")?,
        created_at: col(r, "created_at")?,
        rating: col(r, "rating")?,
    })
}

pub fn agent(r: &PgRow) -> Result<Agent> {
    Ok(Agent {
        tenant_id: TenantId::parse(col::<String>(r, "tenant_id")?)?,
        id: AgentId::parse(col::<String>(r, "id")?)?,
        memory_enabled: col(r, "memory_enabled")?,
        cluster_id: col(r, "cluster_id")?,
        dedup_threshold: col::<f64>(r, "dedup_threshold")? as f32,
        settings: json(r, "settings")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

pub fn api_key(r: &PgRow) -> Result<ApiKey> {
    let role = match col::<&str>(r, "role")? {
        "admin" => KeyRole::Admin,
        "agent" => KeyRole::Agent(AgentId::parse(
            col::<Option<String>>(r, "agent_id")?.unwrap_or_default(),
        )?),
        _ => {
            KeyRole::User(UserId::parse(col::<Option<String>>(r, "user_id")?.unwrap_or_default())?)
        }
    };
    Ok(ApiKey {
        id: col(r, "id")?,
        tenant: TenantId::parse(col::<String>(r, "tenant_id")?)?,
        role,
        prefix: col(r, "prefix")?,
        created_at: col(r, "created_at")?,
        revoked_at: col::<Option<OffsetDateTime>>(r, "revoked_at")?,
    })
}

pub fn job(r: &PgRow) -> Result<Job> {
    Ok(Job {
        id: col(r, "id")?,
        tenant_id: TenantId::parse(col::<String>(r, "tenant_id")?)?,
        user_id: col::<Option<String>>(r, "user_id")?.map(UserId::parse).transpose()?,
        kind: JobKind::parse(col(r, "kind")?)?,
        dedup_key: col(r, "dedup_key")?,
        lock_key: col(r, "lock_key")?,
        payload: json(r, "payload")?,
        status: JobStatus::parse(col(r, "status")?)?,
        attempts: col(r, "attempts")?,
        max_attempts: col(r, "max_attempts")?,
        run_after: col(r, "run_after")?,
        lease_until: col(r, "lease_until")?,
        last_error: col(r, "last_error")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}
