//! The embedded store: SQLite (bundled, WAL) with FTS5 and the in-process vector index.
//!
//! Connections: a pool of readers and a separate pool of **one** writer connection, every
//! write transaction opened with `BEGIN IMMEDIATE` (so a transaction never has to upgrade a
//! read lock, which is what deadlocks SQLite writers) and a busy timeout for writers of other
//! processes. `synchronous = NORMAL` in WAL mode survives a process crash (kill -9) with every
//! committed transaction intact.

pub mod vectors;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use engram_core::model::{
    Agent, AgentId, Category, ConversationId, EventKind, Importance, Job, JobKind, JobStatus,
    KeyRole, Kind, Memory, MemoryEvent, MemoryId, Message, MessageId, MessageRole, Source,
    SourceKind, TenantId, UserId,
};
use engram_core::store::{
    ApiKey, BackupRow, BackupScope, ContextSession, EraseCounts, ExtractionBatch, MemoryFilter,
    MemoryPage, NewMemory, RestoreState, Store, StoreStats,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool, Transaction};
use time::OffsetDateTime;

pub use crate::fault::sqlite as db;
pub use crate::text::{MatchTerm, fts_query, match_terms, query_terms};
use vectors::{Entry, VectorCache};

/// The data dir can be read but not written (wrong owner, read-only mount, full disk).
fn not_writable(data_dir: &Path, cause: &str) -> Error {
    Error::Unprocessable(format!(
        "the data dir {} cannot be written ({cause}); engram needs to write its database and \
         its -wal and -shm files there: fix the permissions or choose another --data-dir",
        data_dir.display()
    ))
}

/// A timestamp as stored: unix nanoseconds, cut to whole microseconds (the precision of the
/// store contract, the same as PostgreSQL's `timestamptz`).
pub fn ts(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1000 * 1000).unwrap_or(i64::MAX)
}

fn from_ts(n: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(n)).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn opt_ts(n: Option<i64>) -> Option<OffsetDateTime> {
    n.map(from_ts)
}

fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn blob_to_vec(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

const MEMORY_COLS: &str = "id, tenant_id, user_id, agent_id, pool, kind, key, category, importance, rating, content, \
     source_kind, source_conversation_id, source_message_ids, observed_at, created_at, updated_at, \
     last_accessed_at, access_count, mention_count, expires_at, superseded_at, superseded_by, metadata, embedding_model";

/// The embedded SQLite store.
pub struct SqliteStore {
    /// Readers (several connections; WAL lets them run beside the writer).
    read: SqlitePool,
    /// The one writer connection of this process.
    write: SqlitePool,
    /// Exact per-user vector index, caught up by version before each vector search.
    vectors: VectorCache,
}

impl SqliteStore {
    /// Open or create `data_dir/engram.db` and apply migrations.
    pub async fn open(data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            Error::Unprocessable(format!("cannot create data dir {}: {e}", data_dir.display()))
        })?;
        let path = data_dir.join("engram.db");
        let opts = SqliteConnectOptions::from_str("sqlite://")
            .map_err(db)?
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            .pragma("temp_store", "memory")
            .pragma("cache_size", "-65536");
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(opts.clone())
            .await
            .map_err(|e| {
                let e = db(e);
                if matches!(e, Error::StoreUnavailable(_)) {
                    not_writable(data_dir, &e.to_string())
                } else {
                    Error::Unprocessable(format!("cannot open {}: {e}", path.display()))
                }
            })?;
        crate::migrate::run_sqlite(&write).await.map_err(|e| {
            if matches!(e, Error::StoreUnavailable(_)) {
                not_writable(data_dir, &e.to_string())
            } else {
                e
            }
        })?;
        // A data dir that can be read but not written (wrong owner, read-only mount) would
        // serve reads and fail every write and search: refuse it here, with the reason.
        let probe = async {
            let mut tx = write.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('write_check', '')")
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM meta WHERE key = 'write_check'").execute(&mut *tx).await?;
            tx.commit().await
        };
        probe.await.map_err(|e| not_writable(data_dir, &e.to_string()))?;
        let read = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(opts.read_only(true))
            .await
            .map_err(db)?;
        Ok(Self { read, write, vectors: VectorCache::default() })
    }

    async fn begin(&self) -> Result<Transaction<'static, Sqlite>> {
        self.write.begin_with("BEGIN IMMEDIATE").await.map_err(db)
    }

    async fn insert_event(
        tx: &mut Transaction<'static, Sqlite>,
        tenant: &str,
        user: &str,
        e: &MemoryEvent,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO memory_events (tenant_id, user_id, memory_id, event, related_id, actor, detail, at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(tenant)
        .bind(user)
        .bind(e.memory_id.to_string())
        .bind(e.event.as_str())
        .bind(e.related_id.map(|r| r.to_string()))
        .bind(&e.actor)
        .bind(e.detail.to_string())
        .bind(ts(e.at))
        .execute(&mut **tx)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn insert_row(
        tx: &mut Transaction<'static, Sqlite>,
        row: &NewMemory,
        version: i64,
    ) -> Result<()> {
        let m = &row.memory;
        let ids: Vec<String> = m.source.message_ids.iter().map(ToString::to_string).collect();
        sqlx::query(
            "INSERT INTO memories (id, tenant_id, user_id, agent_id, pool, kind, key, category, importance, rating, \
             content, source_kind, source_conversation_id, source_message_ids, observed_at, created_at, updated_at, \
             last_accessed_at, access_count, mention_count, expires_at, superseded_at, superseded_by, metadata, \
             embedding, embedding_model, version) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(m.id.to_string())
        .bind(m.tenant_id.as_str())
        .bind(m.user_id.as_str())
        .bind(m.agent_id.as_ref().map(AgentId::as_str))
        .bind(m.pool.as_deref())
        .bind(m.kind.as_str())
        .bind(m.key.as_deref())
        .bind(m.category.as_str())
        .bind(i64::from(m.importance.get()))
        .bind(m.rating)
        .bind(&m.content)
        .bind(m.source.kind.as_str())
        .bind(m.source.conversation_id.as_ref().map(ConversationId::as_str))
        .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        .bind(ts(m.observed_at))
        .bind(ts(m.created_at))
        .bind(ts(m.updated_at))
        .bind(m.last_accessed_at.map(ts))
        .bind(m.access_count)
        .bind(m.mention_count)
        .bind(m.expires_at.map(ts))
        .bind(m.superseded_at.map(ts))
        .bind(m.superseded_by.map(|s| s.to_string()))
        .bind(m.metadata.to_string())
        .bind(row.vector.as_deref().map(vec_to_blob))
        .bind(m.embedding_model.as_deref())
        .bind(version)
        .execute(&mut **tx)
        .await
        .map_err(|e| {
            if let sqlx::Error::Database(d) = &e
                && d.message().contains("UNIQUE")
            {
                return Error::Conflict(format!("memory {} already exists", m.id));
            }
            db(e)
        })?;
        for e in &row.events {
            Self::insert_event(tx, m.tenant_id.as_str(), m.user_id.as_str(), e).await?;
        }
        Ok(())
    }

    /// The query's terms ([`match_terms`]: words, or prefixes of longer words) minus those
    /// found in half the indexed rows or more (when the index has at least 4 rows): FTS5 gives
    /// such terms an IDF of 1e-6, so a row matching only them would enter the fusion with a
    /// meaningless rank. A prefix's rows are counted as the sum over the indexed words it
    /// starts (an upper bound: a row holding two such words counts twice). Returns the FTS5
    /// query, or None.
    async fn informative_query(
        &self,
        query: &str,
        vocab: &'static str,
        table: &'static str,
    ) -> Result<Option<String>> {
        let terms = match_terms(query);
        if terms.is_empty() {
            return Ok(None);
        }
        // max(rowid) is O(1) and close enough to the row count for a 50% cut.
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT coalesce(max(rowid), 0) FROM {table}"
        )))
        .fetch_one(&self.read)
        .await
        .map_err(db)?
        .get(0);
        let mut keep = terms.clone();
        if n >= 4 {
            // One statement: a row per term, `(index in terms, rows)`.
            let mut q = QueryBuilder::<Sqlite>::new("");
            for (i, t) in terms.iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL ");
                }
                q.push(format!("SELECT {i}, coalesce(sum(doc), 0) FROM {vocab} WHERE "));
                if t.prefix {
                    // Every indexed word starting with the prefix (terms compare bytewise;
                    // U+10FFFF sorts after any continuation of a UTF-8 string).
                    q.push("term >= ")
                        .push_bind(t.text.clone())
                        .push(" AND term < ")
                        .push_bind(format!("{}\u{10FFFF}", t.text));
                } else {
                    q.push("term = ").push_bind(t.text.clone());
                }
            }
            let common: Vec<usize> = q
                .build()
                .fetch_all(&self.read)
                .await
                .map_err(db)?
                .iter()
                .filter(|r| r.get::<i64, _>(1) * 2 >= n)
                .map(|r| r.get::<i64, _>(0) as usize)
                .collect();
            keep = terms
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !common.contains(i))
                .map(|(_, t)| t)
                .collect();
        }
        if keep.is_empty() {
            return Ok(None);
        }
        Ok(Some(keep.iter().map(MatchTerm::fts5).collect::<Vec<_>>().join(" OR ")))
    }

    /// Supersede `old` inside a write transaction (see `Store::supersede`).
    async fn supersede_tx(
        tx: &mut Transaction<'static, Sqlite>,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<&NewMemory>,
        event: &MemoryEvent,
    ) -> Result<()> {
        let row = sqlx::query(
            "SELECT user_id, superseded_at FROM memories WHERE tenant_id = ? AND id = ?",
        )
        .bind(tenant.as_str())
        .bind(old.to_string())
        .fetch_optional(&mut **tx)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(format!("memory {old}")))?;
        if row.get::<Option<i64>, _>("superseded_at").is_some() {
            return Err(Error::Conflict(format!("memory {old} is already superseded")));
        }
        let user: String = row.get("user_id");
        let v = crate::versions::bump_sqlite(tx, tenant.as_str(), &user).await?;
        let now = ts(event.at);
        if let Some(n) = new {
            if n.memory.tenant_id != *tenant || n.memory.user_id.as_str() != user {
                return Err(Error::internal("successor of another tenant or user"));
            }
            Self::insert_row(tx, n, v).await?;
        }
        sqlx::query(
            "UPDATE memories SET superseded_at = ?, superseded_by = ?, updated_at = ?, version = ? WHERE tenant_id = ? AND id = ?",
        )
        .bind(now)
        .bind(new.map(|n| n.memory.id.to_string()))
        .bind(now)
        .bind(v)
        .bind(tenant.as_str())
        .bind(old.to_string())
        .execute(&mut **tx)
        .await
        .map_err(db)?;
        Self::insert_event(tx, tenant.as_str(), &user, event).await
    }

    /// Confirm a restated fact inside a write transaction.
    async fn confirm_tx(
        tx: &mut Transaction<'static, Sqlite>,
        tenant: &TenantId,
        id: MemoryId,
        event: &MemoryEvent,
    ) -> Result<()> {
        let user: Option<String> = sqlx::query(
            "UPDATE memories SET updated_at = ?, mention_count = mention_count + 1 WHERE tenant_id = ? AND id = ? RETURNING user_id",
        )
        .bind(ts(event.at))
        .bind(tenant.as_str())
        .bind(id.to_string())
        .fetch_optional(&mut **tx)
        .await
        .map_err(db)?
        .map(|r| r.get(0));
        let user = user.ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        Self::insert_event(tx, tenant.as_str(), &user, event).await
    }

    /// Bring the vector index of one user up to date with the database.
    async fn catch_up(
        &self,
        tenant: &str,
        user: &str,
    ) -> Result<Arc<std::sync::Mutex<vectors::UserIndex>>> {
        let idx = self.vectors.user(tenant, user);
        let (db_version, incarnation): (i64, i64) = sqlx::query(
            "SELECT version, incarnation FROM user_versions WHERE tenant_id = ? AND user_id = ?",
        )
        .bind(tenant)
        .bind(user)
        .fetch_optional(&self.read)
        .await
        .map_err(db)?
        .map_or((0, 0), |r| (r.get(0), r.get(1)));
        let (have, have_incarnation) = {
            let g = idx.lock().unwrap_or_else(|e| e.into_inner());
            (g.version, g.incarnation)
        };
        if db_version == have && incarnation == have_incarnation {
            return Ok(idx);
        }
        if db_version < have || (have != 0 && incarnation != have_incarnation) {
            // The user was erased meanwhile (the counter row is new): start over.
            self.vectors.drop_user(tenant, user);
            return Box::pin(self.catch_up(tenant, user)).await;
        }
        let rows = sqlx::query(
            "SELECT id, pool, kind, category, observed_at, expires_at, superseded_at, embedding \
             FROM memories WHERE tenant_id = ? AND user_id = ? AND version > ? AND version <= ?",
        )
        .bind(tenant)
        .bind(user)
        .bind(have)
        .bind(db_version)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let tombs = sqlx::query(
            "SELECT memory_id FROM memory_tombstones WHERE tenant_id = ? AND user_id = ? AND version > ? AND version <= ?",
        )
        .bind(tenant)
        .bind(user)
        .bind(have)
        .bind(db_version)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let mut guard = idx.lock().unwrap_or_else(|e| e.into_inner());
        if guard.version != have {
            // Someone else caught up meanwhile; their result is at least as new.
            return Ok(idx.clone());
        }
        for r in rows {
            let id = MemoryId::parse(r.get::<&str, _>("id"))?;
            let superseded: Option<i64> = r.get("superseded_at");
            let blob: Option<Vec<u8>> = r.get("embedding");
            match (superseded, blob) {
                (None, Some(b)) => {
                    let entry = Entry {
                        id,
                        pool: r.get::<Option<String>, _>("pool").map(Arc::from),
                        kind: Kind::parse(r.get("kind"))?,
                        category: Category::parse(r.get("category"))?,
                        observed_at: r.get("observed_at"),
                        expires_at: r.get("expires_at"),
                    };
                    guard.upsert(entry, &blob_to_vec(&b));
                }
                _ => guard.remove(id),
            }
        }
        for t in tombs {
            guard.remove(MemoryId::parse(t.get::<&str, _>(0))?);
        }
        guard.version = db_version;
        guard.incarnation = incarnation;
        drop(guard);
        Ok(idx)
    }
}

fn memory_from_row(r: &SqliteRow) -> Result<Memory> {
    let ids: Vec<String> =
        serde_json::from_str(r.get::<&str, _>("source_message_ids")).unwrap_or_default();
    Ok(Memory {
        id: MemoryId::parse(r.get("id"))?,
        tenant_id: TenantId::parse(r.get::<String, _>("tenant_id"))?,
        user_id: UserId::parse(r.get::<String, _>("user_id"))?,
        agent_id: r.get::<Option<String>, _>("agent_id").map(AgentId::parse).transpose()?,
        pool: r.get("pool"),
        kind: Kind::parse(r.get("kind"))?,
        key: r.get("key"),
        category: Category::parse(r.get("category"))?,
        importance: Importance::clamped(r.get("importance")),
        rating: r.get("rating"),
        content: r.get("content"),
        source: Source {
            kind: SourceKind::parse(r.get("source_kind"))?,
            conversation_id: r
                .get::<Option<String>, _>("source_conversation_id")
                .map(ConversationId::parse)
                .transpose()?,
            message_ids: ids.iter().filter_map(|s| MessageId::parse(s).ok()).collect(),
        },
        observed_at: from_ts(r.get("observed_at")),
        created_at: from_ts(r.get("created_at")),
        updated_at: from_ts(r.get("updated_at")),
        last_accessed_at: opt_ts(r.get("last_accessed_at")),
        access_count: r.get("access_count"),
        mention_count: r.get("mention_count"),
        expires_at: opt_ts(r.get("expires_at")),
        superseded_at: opt_ts(r.get("superseded_at")),
        superseded_by: r
            .get::<Option<&str>, _>("superseded_by")
            .map(MemoryId::parse)
            .transpose()?,
        metadata: serde_json::from_str(r.get::<&str, _>("metadata"))
            .unwrap_or_else(|_| serde_json::json!({})),
        embedding_model: r.get("embedding_model"),
    })
}

fn event_from_row(r: &SqliteRow) -> Result<MemoryEvent> {
    Ok(MemoryEvent {
        memory_id: MemoryId::parse(r.get("memory_id"))?,
        event: EventKind::parse(r.get("event"))?,
        related_id: r.get::<Option<&str>, _>("related_id").map(MemoryId::parse).transpose()?,
        actor: r.get("actor"),
        detail: serde_json::from_str(r.get::<&str, _>("detail"))
            .unwrap_or_else(|_| serde_json::json!({})),
        at: from_ts(r.get("at")),
    })
}

fn message_from_row(r: &SqliteRow) -> Result<Message> {
    Ok(Message {
        id: MessageId::parse(r.get("id"))?,
        tenant_id: TenantId::parse(r.get::<String, _>("tenant_id"))?,
        conversation_id: ConversationId::parse(r.get::<String, _>("conversation_id"))?,
        user_id: UserId::parse(r.get::<String, _>("user_id"))?,
        agent_id: r.get::<Option<String>, _>("agent_id").map(AgentId::parse).transpose()?,
        seq: r.get("seq"),
        role: MessageRole::parse(r.get("role"))?,
        content: r.get("content"),
        tool_name: r.get("tool_name"),
        tool_args: r.get::<Option<&str>, _>("tool_args").and_then(|s| serde_json::from_str(s).ok()),
        tool_result: r.get("tool_result"),
        turn_id: r.get("turn_id"),
        metadata: serde_json::from_str(r.get::<&str, _>("metadata"))
            .unwrap_or_else(|_| serde_json::json!({})),
        created_at: from_ts(r.get("created_at")),
        rating: r.get("rating"),
    })
}

fn agent_from_row(r: &SqliteRow) -> Result<Agent> {
    Ok(Agent {
        tenant_id: TenantId::parse(r.get::<String, _>("tenant_id"))?,
        id: AgentId::parse(r.get::<String, _>("id"))?,
        memory_enabled: r.get::<i64, _>("memory_enabled") != 0,
        cluster_id: r.get("cluster_id"),
        dedup_threshold: r.get::<f64, _>("dedup_threshold") as f32,
        settings: serde_json::from_str(r.get::<&str, _>("settings"))
            .unwrap_or_else(|_| serde_json::json!({})),
        created_at: from_ts(r.get("created_at")),
        updated_at: from_ts(r.get("updated_at")),
    })
}

fn key_from_row(r: &SqliteRow) -> Result<ApiKey> {
    let role = match r.get::<&str, _>("role") {
        "admin" => KeyRole::Admin,
        "agent" => KeyRole::Agent(AgentId::parse(r.get::<String, _>("agent_id"))?),
        _ => KeyRole::User(UserId::parse(r.get::<String, _>("user_id"))?),
    };
    Ok(ApiKey {
        id: r.get("id"),
        tenant: TenantId::parse(r.get::<String, _>("tenant_id"))?,
        role,
        prefix: r.get("prefix"),
        created_at: from_ts(r.get("created_at")),
        revoked_at: opt_ts(r.get("revoked_at")),
    })
}

fn job_from_row(r: &SqliteRow) -> Result<Job> {
    Ok(Job {
        id: r.get("id"),
        tenant_id: TenantId::parse(r.get::<String, _>("tenant_id"))?,
        user_id: r.get::<Option<String>, _>("user_id").map(UserId::parse).transpose()?,
        kind: JobKind::parse(r.get("kind"))?,
        dedup_key: r.get("dedup_key"),
        lock_key: r.get("lock_key"),
        payload: serde_json::from_str(r.get::<&str, _>("payload"))
            .unwrap_or_else(|_| serde_json::json!({})),
        status: JobStatus::parse(r.get("status"))?,
        attempts: r.get("attempts"),
        max_attempts: r.get("max_attempts"),
        run_after: from_ts(r.get("run_after")),
        lease_until: opt_ts(r.get("lease_until")),
        last_error: r.get("last_error"),
        created_at: from_ts(r.get("created_at")),
        updated_at: from_ts(r.get("updated_at")),
    })
}

/// Append the WHERE conditions of a memory filter (the query already has `WHERE tenant_id = ?`).
fn push_filter(q: &mut QueryBuilder<Sqlite>, f: &MemoryFilter, now: i64) {
    if let Some(u) = &f.user_id {
        q.push(" AND user_id = ").push_bind(u.as_str().to_string());
    }
    if let Some(p) = &f.pool {
        q.push(" AND (pool = ").push_bind(p.clone()).push(" OR pool IS NULL OR kind = 'shared')");
    }
    if let Some(kinds) = &f.kinds {
        q.push(" AND kind IN (");
        let mut s = q.separated(", ");
        for k in kinds {
            s.push_bind(k.as_str());
        }
        s.push_unseparated(")");
    }
    if let Some(cats) = &f.categories {
        q.push(" AND category IN (");
        let mut s = q.separated(", ");
        for c in cats {
            s.push_bind(c.as_str());
        }
        s.push_unseparated(")");
    }
    if let Some(t) = f.since {
        q.push(" AND observed_at >= ").push_bind(ts(t));
    }
    if let Some(t) = f.until {
        q.push(" AND observed_at < ").push_bind(ts(t));
    }
    if !f.include_superseded {
        q.push(" AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > ")
            .push_bind(now)
            .push(")");
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        let rows = sqlx::query(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dims')",
        )
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let mut model = None;
        let mut dims = None;
        for r in rows {
            match r.get::<&str, _>(0) {
                "embedding_model" => model = Some(r.get::<String, _>(1)),
                _ => dims = r.get::<&str, _>(1).parse::<usize>().ok(),
            }
        }
        Ok(model.zip(dims))
    }

    async fn ensure_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        if let Some((m, d)) = self.embedding_space().await? {
            if d != dims || m != model_id {
                return Err(Error::Unprocessable(format!(
                    "this store holds vectors of '{m}' ({d} dimensions); refusing vectors of '{model_id}' ({dims})"
                )));
            }
            return Ok(());
        }
        let mut tx = self.begin().await?;
        sqlx::query("INSERT OR IGNORE INTO meta (key, value) VALUES ('embedding_model', ?), ('embedding_dims', ?)")
            .bind(model_id)
            .bind(dims.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        let rows = sqlx::query(
            "SELECT tenant_id FROM memories UNION SELECT tenant_id FROM messages ORDER BY 1",
        )
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(|r| TenantId::parse(r.get::<String, _>(0))).collect()
    }

    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        let rows = sqlx::query(
            "SELECT id, content FROM memories WHERE tenant_id = ? AND kind != 'profile' \
             AND (embedding IS NULL OR embedding_model IS NULL OR embedding_model != ?) ORDER BY id LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| Ok((MemoryId::parse(r.get("id"))?, r.get::<String, _>("content"))))
            .collect()
    }

    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let mut versions: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for (id, v) in rows {
            let user: Option<String> =
                sqlx::query("SELECT user_id FROM memories WHERE tenant_id = ? AND id = ?")
                    .bind(tenant.as_str())
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db)?
                    .map(|r| r.get(0));
            let Some(user) = user else { continue };
            let version = match versions.get(&user) {
                Some(v) => *v,
                None => {
                    let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), &user).await?;
                    versions.insert(user.clone(), v);
                    v
                }
            };
            sqlx::query("UPDATE memories SET embedding = ?, embedding_model = ?, version = ? WHERE tenant_id = ? AND id = ?")
                .bind(vec_to_blob(&v))
                .bind(model_id)
                .bind(version)
                .bind(tenant.as_str())
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?), ('embedding_dims', ?)")
            .bind(model_id)
            .bind(dims.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        let (role, agent, user) = match &key.role {
            KeyRole::Admin => ("admin", None, None),
            KeyRole::Agent(a) => ("agent", Some(a.as_str()), None),
            KeyRole::User(u) => ("user", None, Some(u.as_str())),
        };
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, role, agent_id, user_id, prefix, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&key.id)
        .bind(key.tenant.as_str())
        .bind(role)
        .bind(agent)
        .bind(user)
        .bind(&key.prefix)
        .bind(secret_hash)
        .bind(ts(key.created_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            "SELECT * FROM api_keys WHERE (?1 IS NULL OR tenant_id = ?1) ORDER BY created_at, id",
        )
        .bind(tenant.map(TenantId::as_str))
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(key_from_row).collect()
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        let n =
            sqlx::query("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                .bind(ts(OffsetDateTime::now_utc()))
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
        tx.commit().await.map_err(db)?;
        if n == 0 {
            return Err(Error::not_found(format!("active key {id}")));
        }
        Ok(())
    }

    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        let row =
            sqlx::query("SELECT * FROM api_keys WHERE secret_hash = ? AND revoked_at IS NULL")
                .bind(secret_hash)
                .fetch_optional(&self.read)
                .await
                .map_err(db)?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        let n: i64 = sqlx::query("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
            .fetch_one(&self.read)
            .await
            .map_err(db)?
            .get(0);
        Ok(n as u64)
    }

    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        let row = sqlx::query("SELECT * FROM agents WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(agent_from_row).transpose()
    }

    async fn put_agent(&self, a: &Agent) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO agents (tenant_id, id, memory_enabled, cluster_id, dedup_threshold, settings, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, id) DO UPDATE SET \
             memory_enabled = excluded.memory_enabled, cluster_id = excluded.cluster_id, \
             dedup_threshold = excluded.dedup_threshold, settings = excluded.settings, updated_at = excluded.updated_at",
        )
        .bind(a.tenant_id.as_str())
        .bind(a.id.as_str())
        .bind(i64::from(a.memory_enabled))
        .bind(a.cluster_id.as_deref())
        .bind(f64::from(a.dedup_threshold))
        .bind(a.settings.to_string())
        .bind(ts(a.created_at))
        .bind(ts(a.updated_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if let Some(dims) = rows.iter().find_map(|r| r.vector.as_ref().map(Vec::len))
            && let Some((_, d)) = self.embedding_space().await?
            && rows.iter().any(|r| r.vector.as_ref().is_some_and(|v| v.len() != d))
        {
            return Err(Error::Unprocessable(format!(
                "vector of {dims} dimensions in a store of {d}"
            )));
        }
        let mut tx = self.begin().await?;
        let mut versions: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for row in &rows {
            if row.memory.tenant_id != *tenant {
                return Err(Error::internal("memory of another tenant in insert batch"));
            }
            let user = row.memory.user_id.as_str();
            let v = match versions.get(user) {
                Some(v) => *v,
                None => {
                    let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), user).await?;
                    versions.insert(user.to_string(), v);
                    v
                }
            };
            Self::insert_row(&mut tx, row, v).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        let sql = format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND id = ?");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(memory_from_row).transpose()
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let mut q = QueryBuilder::<Sqlite>::new(format!(
                "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
            ));
            q.push_bind(tenant.as_str().to_string()).push(" AND id IN (");
            let mut s = q.separated(", ");
            for id in chunk {
                s.push_bind(id.to_string());
            }
            s.push_unseparated(")");
            for r in q.build().fetch_all(&self.read).await.map_err(db)? {
                out.push(memory_from_row(&r)?);
            }
        }
        Ok(out)
    }

    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage> {
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        push_filter(&mut q, filter, now);
        if let Some(c) = cursor {
            q.push(" AND id < ").push_bind(c.to_string());
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind((limit + 1) as i64);
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        let mut memories = rows.iter().map(memory_from_row).collect::<Result<Vec<_>>>()?;
        let next_cursor = if memories.len() > limit {
            memories.truncate(limit);
            memories.last().map(|m| m.id)
        } else {
            None
        };
        Ok(MemoryPage { memories, next_cursor })
    }

    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>> {
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        let f = MemoryFilter { include_superseded: false, ..filter.clone() };
        push_filter(&mut q, &f, now);
        q.push(" ORDER BY observed_at, id");
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        rows.iter().map(memory_from_row).collect()
    }

    async fn supersede(
        &self,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<NewMemory>,
        event: MemoryEvent,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        Self::supersede_tx(&mut tx, tenant, old, new.as_ref(), &event).await?;
        tx.commit().await.map_err(db)
    }

    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        Self::confirm_tx(&mut tx, tenant, id, &event).await?;
        tx.commit().await.map_err(db)
    }

    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64> {
        let mut tx = self.begin().await?;
        let row = sqlx::query("UPDATE memories SET rating = rating + ? WHERE tenant_id = ? AND id = ? RETURNING user_id, rating")
            .bind(delta)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
            .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        let user: String = row.get(0);
        let rating: i64 = row.get(1);
        Self::insert_event(&mut tx, tenant.as_str(), &user, &event).await?;
        tx.commit().await.map_err(db)?;
        Ok(rating)
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        let mut tx = self.begin().await?;
        let user: String =
            sqlx::query("DELETE FROM memories WHERE tenant_id = ? AND id = ? RETURNING user_id")
                .bind(tenant.as_str())
                .bind(id.to_string())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?
                .ok_or_else(|| Error::not_found(format!("memory {id}")))?
                .get(0);
        sqlx::query("DELETE FROM memory_events WHERE tenant_id = ? AND memory_id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        // Successors and predecessors keep their rows; links to the purged id are cleared.
        sqlx::query(
            "UPDATE memories SET superseded_by = NULL WHERE tenant_id = ? AND superseded_by = ?",
        )
        .bind(tenant.as_str())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        sqlx::query("DELETE FROM recalls WHERE tenant_id = ? AND memory_id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), &user).await?;
        sqlx::query("INSERT INTO memory_tombstones (tenant_id, user_id, memory_id, version) VALUES (?, ?, ?, ?)")
            .bind(tenant.as_str())
            .bind(&user)
            .bind(id.to_string())
            .bind(v)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let Some(start) = self.get_memory(tenant, id).await? else {
            return Err(Error::not_found(format!("memory {id}")));
        };
        // Walk back through predecessors, then forward through successors.
        let mut chain = vec![start.clone()];
        let mut cur = start.id;
        let sql =
            format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND superseded_by = ?");
        for _ in 0..10_000 {
            let prev = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(tenant.as_str())
                .bind(cur.to_string())
                .fetch_optional(&self.read)
                .await
                .map_err(db)?;
            let Some(p) = prev else { break };
            let m = memory_from_row(&p)?;
            cur = m.id;
            chain.insert(0, m);
        }
        let mut next = start.superseded_by;
        while let Some(n) = next {
            let Some(m) = self.get_memory(tenant, n).await? else { break };
            next = m.superseded_by;
            chain.push(m);
            if chain.len() > 10_000 {
                break;
            }
        }
        let mut events = Vec::new();
        for m in &chain {
            let rows = sqlx::query(
                "SELECT * FROM memory_events WHERE tenant_id = ? AND memory_id = ? ORDER BY at, id",
            )
            .bind(tenant.as_str())
            .bind(m.id.to_string())
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
            for r in rows {
                events.push(event_from_row(&r)?);
            }
        }
        events.sort_by_key(|e| e.at);
        Ok((chain, events))
    }

    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let Some(user) = &filter.user_id else {
            return Err(Error::invalid("user_id", "vector search needs a user_id"));
        };
        let idx = self.catch_up(tenant.as_str(), user.as_str()).await?;
        let now = ts(OffsetDateTime::now_utc());
        let guard = idx.lock().unwrap_or_else(|e| e.into_inner());
        Ok(guard.search(filter, vector, k, now))
    }

    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        let Some(fq) = self.informative_query(query, "memories_fts_vocab", "memories").await?
        else {
            return Ok(vec![]);
        };
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT m.id AS id, bm25(memories_fts) AS score FROM memories_fts CROSS JOIN memories m ON m.rowid = memories_fts.rowid \
             WHERE memories_fts MATCH ",
        );
        q.push_bind(fq).push(" AND m.tenant_id = ").push_bind(tenant.as_str().to_string());
        // Column names are unqualified in push_filter; they are unambiguous (fts has only `content`).
        push_filter(&mut q, filter, now);
        q.push(" ORDER BY score LIMIT ").push_bind(k as i64);
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        rows.iter()
            .map(|r| Ok((MemoryId::parse(r.get("id"))?, -r.get::<f64, _>("score"))))
            .collect()
    }

    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let mut q = QueryBuilder::<Sqlite>::new(
            "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ",
        );
        q.push_bind(ts(at))
            .push(" WHERE tenant_id = ")
            .push_bind(tenant.as_str().to_string())
            .push(" AND id IN (");
        let mut s = q.separated(", ");
        for id in ids {
            s.push_bind(id.to_string());
        }
        s.push_unseparated(")");
        q.build().execute(&mut *tx).await.map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND user_id = ? AND kind = 'profile' AND key = ? \
             AND superseded_at IS NULL AND pool IS ? ORDER BY id DESC LIMIT 1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .bind(key)
            .bind(pool)
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(memory_from_row).transpose()
    }

    async fn append_messages(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>> {
        let Some(first) = messages.first() else { return Ok(vec![]) };
        let conv = first.conversation_id.clone();
        let user = first.user_id.clone();
        let agent = first.agent_id.clone();
        let now = ts(OffsetDateTime::now_utc());
        let mut tx = self.begin().await?;
        let existing = sqlx::query(
            "SELECT user_id, agent_id, last_seq FROM conversations WHERE tenant_id = ? AND id = ?",
        )
        .bind(tenant.as_str())
        .bind(conv.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let mut seq = match existing {
            Some(r) => {
                if r.get::<&str, _>("user_id") != user.as_str() {
                    return Err(Error::Conflict(format!(
                        "conversation '{conv}' belongs to another user"
                    )));
                }
                crate::check_conversation_agent(
                    &conv,
                    r.get::<Option<&str>, _>("agent_id"),
                    &messages,
                )?;
                r.get::<i64, _>("last_seq")
            }
            None => {
                sqlx::query(
                    "INSERT INTO conversations (tenant_id, id, user_id, agent_id, last_seq, created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?)",
                )
                .bind(tenant.as_str())
                .bind(conv.as_str())
                .bind(user.as_str())
                .bind(agent.as_ref().map(AgentId::as_str))
                .bind(now)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
                0
            }
        };
        let mut out = Vec::with_capacity(messages.len());
        for mut m in messages {
            seq += 1;
            m.seq = seq;
            sqlx::query(
                "INSERT INTO messages (id, tenant_id, conversation_id, user_id, agent_id, seq, role, content, tool_name, \
                 tool_args, tool_result, turn_id, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(m.id.to_string())
            .bind(tenant.as_str())
            .bind(conv.as_str())
            .bind(user.as_str())
            .bind(m.agent_id.as_ref().map(AgentId::as_str))
            .bind(seq)
            .bind(m.role.as_str())
            .bind(&m.content)
            .bind(m.tool_name.as_deref())
            .bind(m.tool_args.as_ref().map(ToString::to_string))
            .bind(m.tool_result.as_deref())
            .bind(m.turn_id.as_deref())
            .bind(m.metadata.to_string())
            .bind(ts(m.created_at))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            out.push(m);
        }
        sqlx::query(
            "UPDATE conversations SET last_seq = ?, updated_at = ? WHERE tenant_id = ? AND id = ?",
        )
        .bind(seq)
        .bind(now)
        .bind(tenant.as_str())
        .bind(conv.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(out)
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        let rows = sqlx::query("SELECT * FROM messages WHERE tenant_id = ? AND conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?")
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .bind(after_seq)
            .bind(limit as i64)
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        rows.iter().map(message_from_row).collect()
    }

    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        let row = sqlx::query(
            "SELECT user_id, agent_id FROM conversations WHERE tenant_id = ? AND id = ?",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.read)
        .await
        .map_err(db)?;
        row.map(|r| {
            Ok((
                UserId::parse(r.get::<String, _>(0))?,
                r.get::<Option<String>, _>(1).map(AgentId::parse).transpose()?,
            ))
        })
        .transpose()
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        let mut tx = self.begin().await?;
        let r: i64 = sqlx::query("UPDATE messages SET rating = rating + ? WHERE tenant_id = ? AND id = ? RETURNING rating")
            .bind(delta)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
            .ok_or_else(|| Error::not_found(format!("message {id}")))?
            .get(0);
        tx.commit().await.map_err(db)?;
        Ok(r)
    }

    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let Some(fq) = self.informative_query(query, "messages_fts_vocab", "messages").await?
        else {
            return Ok(vec![]);
        };
        let rows = sqlx::query(
            "SELECT m.id AS id, bm25(messages_fts) AS score FROM messages_fts CROSS JOIN messages m ON m.rowid = messages_fts.rowid \
             WHERE messages_fts MATCH ? AND m.tenant_id = ? AND m.user_id = ? ORDER BY score LIMIT ?",
        )
        .bind(fq)
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(k as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| Ok((MessageId::parse(r.get("id"))?, -r.get::<f64, _>("score"))))
            .collect()
    }

    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        let rows = sqlx::query(
            "SELECT id, seq FROM messages WHERE tenant_id = ? AND conversation_id = ? \
             AND content != '' AND (embedding IS NULL OR embedding_model IS NOT ?) ORDER BY seq LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| Ok((MessageId::parse(r.get::<&str, _>("id"))?, r.get::<i64, _>("seq"))))
            .collect()
    }

    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        let rows = sqlx::query(
            "SELECT DISTINCT conversation_id FROM messages WHERE tenant_id = ? AND content != '' \
             AND (embedding IS NULL OR embedding_model IS NOT ?) ORDER BY 1 LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(|r| ConversationId::parse(r.get::<String, _>(0))).collect()
    }

    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        for (id, v) in rows {
            sqlx::query(
                "UPDATE messages SET embedding = ?, embedding_model = ? WHERE tenant_id = ? AND id = ?",
            )
            .bind(vec_to_blob(&v))
            .bind(model_id)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>> {
        let rows = sqlx::query(
            "SELECT id, embedding FROM messages WHERE tenant_id = ? AND user_id = ? \
             AND embedding IS NOT NULL AND embedding_model = ?",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(model_id)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let mut scored = Vec::with_capacity(rows.len());
        for r in &rows {
            let blob: &[u8] = r.get("embedding");
            if blob.len() != query.len() * 4 {
                continue; // another space: never comparable with this query
            }
            let sim = vectors::dot(&blob_to_vec(blob), query);
            scored.push((sim, r.get::<String, _>("id")));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        scored.truncate(k);
        scored.into_iter().map(|(s, id)| Ok((MessageId::parse(&id)?, s))).collect()
    }

    async fn record_recall(
        &self,
        tenant: &TenantId,
        turn_id: &str,
        ids: &[MemoryId],
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT OR IGNORE INTO recalls (tenant_id, turn_id, memory_id, user_id, created_at) SELECT tenant_id, ",
        );
        q.push_bind(turn_id.to_string())
            .push(", id, user_id, ")
            .push_bind(ts(OffsetDateTime::now_utc()))
            .push(" FROM memories WHERE tenant_id = ")
            .push_bind(tenant.as_str().to_string())
            .push(" AND id IN (");
        let mut s = q.separated(", ");
        for id in ids {
            s.push_bind(id.to_string());
        }
        s.push_unseparated(")");
        q.build().execute(&mut *tx).await.map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        let rows = sqlx::query("SELECT memory_id FROM recalls WHERE tenant_id = ? AND turn_id = ? ORDER BY created_at, memory_id")
            .bind(tenant.as_str())
            .bind(turn_id)
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        rows.iter().map(|r| MemoryId::parse(r.get(0))).collect()
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        let row = sqlx::query("SELECT * FROM context_sessions WHERE tenant_id = ? AND session_id = ? AND user_id = ? AND pool = ?")
            .bind(tenant.as_str())
            .bind(session_id)
            .bind(user.as_str())
            .bind(pool.unwrap_or(""))
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        let Some(r) = row else { return Ok(None) };
        let ids: Vec<String> =
            serde_json::from_str(r.get::<&str, _>("memory_ids")).unwrap_or_default();
        Ok(Some(ContextSession {
            session_id: r.get("session_id"),
            user_id: UserId::parse(r.get::<String, _>("user_id"))?,
            pool: Some(r.get::<String, _>("pool")).filter(|p| !p.is_empty()),
            text: r.get("text"),
            memory_ids: ids.iter().filter_map(|s| MemoryId::parse(s).ok()).collect(),
            created_at: from_ts(r.get("created_at")),
        }))
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        let ids: Vec<String> = s.memory_ids.iter().map(ToString::to_string).collect();
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT OR REPLACE INTO context_sessions (tenant_id, session_id, user_id, pool, text, memory_ids, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(tenant.as_str())
        .bind(&s.session_id)
        .bind(s.user_id.as_str())
        .bind(s.pool.as_deref().unwrap_or(""))
        .bind(&s.text)
        .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        .bind(ts(s.created_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn erase_user(&self, tenant: &TenantId, user: &UserId) -> Result<EraseCounts> {
        let mut tx = self.begin().await?;
        let t = tenant.as_str();
        let u = user.as_str();
        let mut counts = EraseCounts::default();
        macro_rules! del {
            ($field:ident, $sql:literal) => {
                counts.$field = sqlx::query($sql)
                    .bind(t)
                    .bind(u)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?
                    .rows_affected();
            };
        }
        del!(memory_events, "DELETE FROM memory_events WHERE tenant_id = ? AND user_id = ?");
        del!(memories, "DELETE FROM memories WHERE tenant_id = ? AND user_id = ?");
        del!(messages, "DELETE FROM messages WHERE tenant_id = ? AND user_id = ?");
        del!(conversations, "DELETE FROM conversations WHERE tenant_id = ? AND user_id = ?");
        sqlx::query("DELETE FROM summary_sources WHERE tenant_id = ? AND summary_id IN (SELECT id FROM summaries WHERE tenant_id = ? AND user_id = ?)")
            .bind(t)
            .bind(t)
            .bind(u)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        del!(summaries, "DELETE FROM summaries WHERE tenant_id = ? AND user_id = ?");
        del!(jobs, "DELETE FROM jobs WHERE tenant_id = ? AND user_id = ?");
        del!(cursors, "DELETE FROM extraction_cursors WHERE tenant_id = ? AND user_id = ?");
        del!(recalls, "DELETE FROM recalls WHERE tenant_id = ? AND user_id = ?");
        del!(context_sessions, "DELETE FROM context_sessions WHERE tenant_id = ? AND user_id = ?");
        sqlx::query("DELETE FROM memory_tombstones WHERE tenant_id = ? AND user_id = ?")
            .bind(t)
            .bind(u)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        sqlx::query("DELETE FROM user_versions WHERE tenant_id = ? AND user_id = ?")
            .bind(t)
            .bind(u)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        self.vectors.drop_user(t, u);
        Ok(counts)
    }

    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        let rows = sqlx::query(
            "SELECT user_id FROM memories WHERE tenant_id = ?1 UNION SELECT user_id FROM conversations WHERE tenant_id = ?1 ORDER BY 1",
        )
        .bind(tenant.as_str())
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(|r| UserId::parse(r.get::<String, _>(0))).collect()
    }

    async fn user_messages(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<Message>> {
        let rows = sqlx::query("SELECT * FROM messages WHERE tenant_id = ? AND user_id = ? ORDER BY conversation_id, seq")
            .bind(tenant.as_str())
            .bind(user.as_str())
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        rows.iter().map(message_from_row).collect()
    }

    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND user_id = ? ORDER BY id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        let memories = rows.iter().map(memory_from_row).collect::<Result<Vec<_>>>()?;
        let rows = sqlx::query(
            "SELECT * FROM memory_events WHERE tenant_id = ? AND user_id = ? ORDER BY at, id",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let events = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
        Ok((memories, events))
    }

    async fn enqueue_job(&self, job: &Job) -> Result<bool> {
        let mut tx = self.begin().await?;
        let n = sqlx::query(
            "INSERT OR IGNORE INTO jobs (id, tenant_id, user_id, kind, dedup_key, lock_key, payload, status, attempts, \
             max_attempts, run_after, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)",
        )
        .bind(&job.id)
        .bind(job.tenant_id.as_str())
        .bind(job.user_id.as_ref().map(UserId::as_str))
        .bind(job.kind.as_str())
        .bind(job.dedup_key.as_deref())
        .bind(job.lock_key.as_deref())
        .bind(job.payload.to_string())
        .bind(job.max_attempts)
        .bind(ts(job.run_after))
        .bind(ts(job.created_at))
        .bind(ts(job.updated_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
        tx.commit().await.map_err(db)?;
        Ok(n == 1)
    }

    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = ?1, updated_at = ?2 \
             WHERE id = (SELECT j.id FROM jobs j \
               WHERE ((j.status = 'pending' AND j.run_after <= ?2) OR (j.status = 'running' AND j.lease_until <= ?2)) \
                 AND j.kind IN (SELECT value FROM json_each(?3)) \
                 AND (j.lock_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs r WHERE r.tenant_id = j.tenant_id \
                      AND r.lock_key = j.lock_key AND r.status = 'running' AND r.lease_until > ?2 AND r.id != j.id)) \
               ORDER BY j.run_after, j.id LIMIT 1) \
             RETURNING *",
        )
        .bind(ts(lease_until))
        .bind(ts(now))
        .bind(serde_json::json!(kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>()).to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE jobs SET lease_until = ? WHERE id = ? AND status = 'running'")
            .bind(ts(lease_until))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn complete_job(&self, id: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE jobs SET status = 'done', lease_until = NULL, last_error = NULL, updated_at = ? WHERE id = ?")
            .bind(ts(OffsetDateTime::now_utc()))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn fail_job(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<OffsetDateTime>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let now = ts(OffsetDateTime::now_utc());
        match retry_at {
            Some(at) => {
                // Back to pending; if another pending job took the dedup key meanwhile, that
                // one covers the same data and this one is closed.
                let r = sqlx::query(
                    "UPDATE OR IGNORE jobs SET status = 'pending', run_after = ?, lease_until = NULL, last_error = ?, updated_at = ? WHERE id = ?",
                )
                .bind(ts(at))
                .bind(error)
                .bind(now)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
                if r.rows_affected() == 0 {
                    sqlx::query("UPDATE jobs SET status = 'done', lease_until = NULL, last_error = ?, updated_at = ? WHERE id = ?")
                        .bind(format!("superseded by a newer pending job after: {error}"))
                        .bind(now)
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(db)?;
                }
            }
            None => {
                sqlx::query("UPDATE jobs SET status = 'failed', lease_until = NULL, last_error = ?, updated_at = ? WHERE id = ?")
                    .bind(error)
                    .bind(now)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
        }
        tx.commit().await.map_err(db)
    }

    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR status = ?2) ORDER BY created_at DESC, id DESC LIMIT ?3",
        )
        .bind(tenant.map(TenantId::as_str))
        .bind(status.map(JobStatus::as_str))
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(job_from_row).collect()
    }

    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        let n = sqlx::query(
            "UPDATE OR IGNORE jobs SET status = 'pending', attempts = 0, run_after = ?1, last_error = NULL, updated_at = ?1 \
             WHERE id = ?2 AND status = 'failed' AND (?3 IS NULL OR tenant_id = ?3)",
        )
        .bind(ts(OffsetDateTime::now_utc()))
        .bind(id)
        .bind(tenant.map(TenantId::as_str))
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
        tx.commit().await.map_err(db)?;
        if n == 0 {
            return Err(Error::not_found(format!("failed job {id}")));
        }
        Ok(())
    }

    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE tenant_id = ? AND conversation_id = ? ORDER BY seq",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(message_from_row).collect()
    }

    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        Ok(sqlx::query(
            "SELECT last_hash FROM extraction_cursors WHERE tenant_id = ? AND conversation_id = ?",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.read)
        .await
        .map_err(db)?
        .map(|r| r.get(0)))
    }

    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        Ok(sqlx::query("SELECT rolling_summary, summary_user_turns FROM conversations WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?
            .map_or((None, 0), |r| (r.get(0), r.get(1))))
    }

    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE conversations SET rolling_summary = ?, summary_user_turns = ? WHERE tenant_id = ? AND id = ?")
            .bind(summary)
            .bind(user_turns)
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        if !batch.adds.is_empty() {
            let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), user.as_str()).await?;
            for row in &batch.adds {
                if row.memory.tenant_id != *tenant || row.memory.user_id != *user {
                    return Err(Error::internal("extracted memory of another tenant or user"));
                }
                Self::insert_row(&mut tx, row, v).await?;
            }
        }
        for (old, new, event) in &batch.supersedes {
            Self::supersede_tx(&mut tx, tenant, *old, new.as_ref(), event).await?;
        }
        for (id, event) in &batch.confirms {
            Self::confirm_tx(&mut tx, tenant, *id, event).await?;
        }
        sqlx::query(
            "INSERT INTO extraction_cursors (tenant_id, conversation_id, user_id, last_hash, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET last_hash = excluded.last_hash, updated_at = excluded.updated_at",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(user.as_str())
        .bind(&batch.cursor)
        .bind(ts(OffsetDateTime::now_utc()))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn set_message_content(
        &self,
        tenant: &TenantId,
        id: MessageId,
        content: &str,
    ) -> Result<bool> {
        let mut tx = self.begin().await?;
        let n = sqlx::query(
            "UPDATE messages SET content = ? WHERE tenant_id = ? AND id = ? AND content = ''",
        )
        .bind(content)
        .bind(tenant.as_str())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
        tx.commit().await.map_err(db)?;
        Ok(n == 1)
    }

    async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        crate::backup::sqlite_backup(&self.read, scope, sink).await
    }

    async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        crate::backup::sqlite_restore(&self.write, rows, state).await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        let t = tenant.as_str();
        let r = sqlx::query(
            "SELECT \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND superseded_at IS NULL) AS active, \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND superseded_at IS NOT NULL) AS superseded, \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND (embedding IS NOT NULL OR kind = 'profile') AND superseded_at IS NULL) AS with_vec, \
              (SELECT count(DISTINCT user_id) FROM memories WHERE tenant_id = ?1) AS users, \
              (SELECT count(*) FROM conversations WHERE tenant_id = ?1) AS convs, \
              (SELECT count(*) FROM messages WHERE tenant_id = ?1) AS msgs, \
              (SELECT count(*) FROM messages WHERE tenant_id = ?1 AND embedding IS NOT NULL) AS msgs_vec, \
              (SELECT count(*) FROM messages m WHERE tenant_id = ?1 AND NOT EXISTS \
                 (SELECT 1 FROM summary_sources s WHERE s.tenant_id = ?1 AND s.source_id = m.id)) AS unsummarized, \
              (SELECT count(*) FROM summaries WHERE tenant_id = ?1) AS summaries, \
              (SELECT coalesce(max(depth) + 1, 0) FROM summaries WHERE tenant_id = ?1) AS depth, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'pending') AS pending, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'running') AS running, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'failed') AS failed, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'done') AS done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'done') AS ex_done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'failed') AS ex_failed",
        )
        .bind(t)
        .fetch_one(&self.read)
        .await
        .map_err(db)?;
        let g = |c: &str| r.get::<i64, _>(c) as u64;
        let space = self.embedding_space().await?;
        Ok(StoreStats {
            memories_active: g("active"),
            memories_superseded: g("superseded"),
            memories_with_vector: g("with_vec"),
            users: g("users"),
            conversations: g("convs"),
            messages: g("msgs"),
            messages_with_vector: g("msgs_vec"),
            messages_unsummarized: g("unsummarized"),
            summaries: g("summaries"),
            summary_depth: g("depth"),
            jobs_pending: g("pending"),
            jobs_running: g("running"),
            jobs_failed: g("failed"),
            jobs_done: g("done"),
            extractions_done: g("ex_done"),
            extractions_failed: g("ex_failed"),
            embedding_model: space.as_ref().map(|s| s.0.clone()),
            embedding_dims: space.map(|s| s.1 as u64),
        })
    }
}
