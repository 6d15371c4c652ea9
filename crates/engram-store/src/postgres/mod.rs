//! The PostgreSQL + pgvector store (`--database-url postgres://…`), for deployments where
//! several `engram serve` / `engram worker` processes share one database.
//!
//! Requirements: PostgreSQL ≥ 15 and pgvector ≥ 0.8 (`CREATE EXTENSION vector` needs a
//! superuser once; [`PgStore::open`] creates it when it may and otherwise says so). The schema
//! is `migrations/postgres/*.sql`, applied at start-up under an advisory lock
//! ([`crate::migrate::run_postgres`]); a newer schema is refused.
//!
//! Behaviour is the SQLite store's (`crate::sqlite`), which the conformance suite
//! (`tests/conformance`) treats as the reference; the choices specific to PostgreSQL:
//!
//! - **Tenancy.** Every table's primary key and every btree index lead with `tenant_id`, so
//!   the schema can be distributed by tenant. The exceptions are global by contract and
//!   marked `GLOBAL` in the migration: the store-wide `meta`, API keys looked up by secret
//!   hash or id, and the job queue's claim and by-id indexes (`claim_job` takes no tenant).
//!   GIN and HNSW indexes cannot start with a text column.
//! - **Timestamps** are `timestamptz`: microsecond precision (the store contract; the SQLite
//!   store cuts to match). Text is ordered with `COLLATE "C"` (byte order, as SQLite does).
//! - **Concurrency.** Transactions are READ COMMITTED. Writes to a user's memories first
//!   bump (and so row-lock) the user's `user_versions` counter with `INSERT … ON CONFLICT DO
//!   UPDATE … RETURNING`, which serializes the writers of one user across processes; rows
//!   are then locked (`FOR UPDATE`) where a read decides the write (supersede: "already
//!   superseded" is a `Conflict`). Locks are always taken user first, then memory rows, so
//!   two writers cannot deadlock. Appending to a conversation locks its row (`INSERT … ON
//!   CONFLICT DO UPDATE … RETURNING last_seq`): one writer per conversation, consecutive `seq`.
//! - **Jobs** ([`jobs`]): claimed with `UPDATE … WHERE (tenant_id, id) = (SELECT … FOR UPDATE
//!   SKIP LOCKED LIMIT 1) RETURNING *`; a job with a lock key is only kept after a
//!   transaction-level advisory lock on the key and a re-check in a fresh snapshot, so two
//!   workers can never both start jobs of one conversation.
//! - **Vectors** ([`search`]): an untyped `vector` column (the dimension is only known at the
//!   first vector), searched exactly by default; a scope over the exact limit gets an HNSW
//!   index of its own (partial on its tenant and user), built in the background when a
//!   search first finds it over the limit, so writes maintain no graph until some scope
//!   needs one. Measurements and the choice: see [`search`].
//! - **Full text** ([`search`]): a generated `tsvector` column with the language-neutral
//!   `simple` configuration over `fts_text`, the content split into words exactly like a
//!   query ([`crate::text`]), lowercased and with diacritics folded in Rust, so matching does
//!   not depend on the database locale. Ranking is BM25 computed in SQL with the statistics
//!   of the searched scope (FTS5's formula, k1 = 1.2, b = 0.75; per user, kept by triggers in
//!   `memory_fts_stats`), postings read per user through lexemes prefixed with a key of the
//!   tenant and user, and query terms found in half the scope's rows or more are dropped,
//!   as in the SQLite store.

pub mod jobs;
pub mod rows;
pub mod search;

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use engram_core::model::{
    Agent, AgentId, ConversationId, Job, JobKind, JobStatus, KeyRole, Memory, MemoryEvent,
    MemoryId, Message, MessageId, TenantId, UserId,
};
use engram_core::store::{
    ApiKey, BackupRow, BackupScope, ContextSession, EraseCounts, ExtractionBatch, MemoryFilter,
    MemoryPage, NewMemory, RestoreState, Store, StoreStats,
};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, QueryBuilder, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::fault::is_unique_violation;
pub use crate::fault::postgres as db;
use crate::text::index_text;
use rows::{MEMORY_COLS, col};

type Tx = Transaction<'static, Postgres>;

/// Rows per `INSERT … SELECT FROM unnest(…)` of a batch insert.
const INSERT_CHUNK: usize = 1000;

/// The PostgreSQL store.
pub struct PgStore {
    pool: PgPool,
    /// Scopes with at most this many active vectors are searched exactly (see [`search`]).
    exact_scan_limit: AtomicUsize,
    /// `hnsw.ef_search` of the index path (see [`search`]).
    hnsw_ef_search: AtomicUsize,
}

/// Connection settings beyond the URL.
#[derive(Debug, Clone, Copy)]
pub struct PgOptions {
    /// Most connections this process holds (default 16). Every `serve`/`worker` process has
    /// its own pool: keep the sum under the server's `max_connections`.
    pub max_connections: u32,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self { max_connections: 16 }
    }
}

impl PgStore {
    /// Connect with the default options, check the server and pgvector, and apply migrations.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, PgOptions::default()).await
    }

    /// Connect, check the server and pgvector, and apply migrations.
    pub async fn open_with(url: &str, options: PgOptions) -> Result<Self> {
        if options.max_connections == 0 {
            return Err(Error::invalid(
                "database_pool_size",
                "the pool needs at least 1 connection",
            ));
        }
        let opts = PgConnectOptions::from_str(url)
            .map_err(|e| Error::Unprocessable(format!("invalid PostgreSQL URL: {e}")))?
            .application_name("engram");
        let target = format!(
            "{}:{}/{}",
            opts.get_host(),
            opts.get_port(),
            opts.get_database().unwrap_or("(default database)")
        );
        let refused = |e: sqlx::Error| {
            Error::Unprocessable(format!("cannot connect to PostgreSQL at {target}: {e}"))
        };
        // One direct connection first: an unreachable server or a bad password is reported
        // at once (the pool would retry until its acquire timeout).
        PgConnection::connect_with(&opts).await.map_err(refused)?.close().await.map_err(db)?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(opts)
            .await
            .map_err(refused)?;
        check_server(&pool, &target).await?;
        crate::migrate::run_postgres(&pool).await?;
        let scoped: bool =
            sqlx::query_scalar("SELECT to_regclass('memories_fts_user') IS NOT NULL")
                .fetch_one(&pool)
                .await
                .map_err(db)?;
        if !scoped {
            tracing::warn!(
                "PostgreSQL: extension btree_gin missing (migration 3 could not create it): keyword \
                 search uses the table-wide GIN index, its cost grows with the whole table"
            );
        }
        Ok(Self {
            pool,
            exact_scan_limit: AtomicUsize::new(search::EXACT_SCAN_LIMIT),
            hnsw_ef_search: AtomicUsize::new(search::HNSW_EF_SEARCH),
        })
    }

    /// The connection pool (for operators' tools and tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Change the scope size above which vector search uses an HNSW index (tests use small
    /// limits to exercise the index path on small data; `usize::MAX`: always exact, never an
    /// index, as the benchmarks' reference).
    pub fn set_exact_scan_limit(&self, rows: usize) {
        self.exact_scan_limit.store(rows, Ordering::Relaxed);
    }

    fn exact_limit(&self) -> usize {
        self.exact_scan_limit.load(Ordering::Relaxed)
    }

    /// Change `hnsw.ef_search` of the index path (1–1000; benchmarks measure recall with it).
    pub fn set_hnsw_ef_search(&self, ef: usize) {
        self.hnsw_ef_search.store(ef.clamp(1, 1000), Ordering::Relaxed);
    }

    fn ef_search(&self) -> usize {
        self.hnsw_ef_search.load(Ordering::Relaxed)
    }

    async fn begin(&self) -> Result<Tx> {
        self.pool.begin().await.map_err(db)
    }

    /// Bump several users, in a fixed order (so two transactions never wait on each other
    /// in a cycle); returns each user's new version.
    async fn bump_all(
        tx: &mut Tx,
        tenant: &str,
        users: BTreeSet<String>,
    ) -> Result<HashMap<String, i64>> {
        let mut out = HashMap::with_capacity(users.len());
        for u in users {
            let v = crate::versions::bump_postgres(tx, tenant, &u).await?;
            out.insert(u, v);
        }
        Ok(out)
    }

    async fn insert_event(tx: &mut Tx, tenant: &str, user: &str, e: &MemoryEvent) -> Result<()> {
        sqlx::query(
            "INSERT INTO memory_events (tenant_id, user_id, memory_id, event, related_id, actor, detail, at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(tenant)
        .bind(user)
        .bind(e.memory_id.0)
        .bind(e.event.as_str())
        .bind(e.related_id.map(|r| r.0))
        .bind(&e.actor)
        .bind(&e.detail)
        .bind(e.at)
        .execute(&mut **tx)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn insert_row(tx: &mut Tx, row: &NewMemory, version: i64) -> Result<()> {
        let m = &row.memory;
        let ids: Vec<Uuid> = m.source.message_ids.iter().map(|i| i.0).collect();
        sqlx::query(
            "INSERT INTO memories (tenant_id, id, user_id, agent_id, pool, kind, key, category, importance, rating, \
             content, source_kind, source_conversation_id, source_message_ids, observed_at, created_at, updated_at, \
             last_accessed_at, access_count, mention_count, expires_at, superseded_at, superseded_by, metadata, \
             embedding, embedding_model, version, fts_text, fts_len) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, \
             $21, $22, $23, $24, $25, $26, $27, $28, length(to_tsvector('simple'::regconfig, $28)))",
        )
        .bind(m.tenant_id.as_str())
        .bind(m.id.0)
        .bind(m.user_id.as_str())
        .bind(m.agent_id.as_ref().map(AgentId::as_str))
        .bind(m.pool.as_deref())
        .bind(m.kind.as_str())
        .bind(m.key.as_deref())
        .bind(m.category.as_str())
        .bind(i16::from(m.importance.get()))
        .bind(m.rating)
        .bind(&m.content)
        .bind(m.source.kind.as_str())
        .bind(m.source.conversation_id.as_ref().map(ConversationId::as_str))
        .bind(ids)
        .bind(m.observed_at)
        .bind(m.created_at)
        .bind(m.updated_at)
        .bind(m.last_accessed_at)
        .bind(m.access_count)
        .bind(m.mention_count)
        .bind(m.expires_at)
        .bind(m.superseded_at)
        .bind(m.superseded_by.map(|s| s.0))
        .bind(&m.metadata)
        .bind(row.vector.as_ref().map(|v| pgvector::Vector::from(v.clone())))
        .bind(m.embedding_model.as_deref())
        .bind(version)
        .bind(index_text(&[&m.content]))
        .execute(&mut **tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                return Error::Conflict(format!("memory {} already exists", m.id));
            }
            db(e)
        })?;
        for e in &row.events {
            Self::insert_event(tx, m.tenant_id.as_str(), m.user_id.as_str(), e).await?;
        }
        Ok(())
    }

    /// Insert many rows and their events with one `INSERT … SELECT FROM unnest(…)` per table
    /// (`versions`: each user's version in this transaction).
    async fn insert_rows(
        tx: &mut Tx,
        rows: &[NewMemory],
        versions: &HashMap<String, i64>,
    ) -> Result<()> {
        let n = rows.len();
        let mut tenant = Vec::with_capacity(n);
        let mut id = Vec::with_capacity(n);
        let mut user = Vec::with_capacity(n);
        let mut agent: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut pool: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut kind = Vec::with_capacity(n);
        let mut key: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut category = Vec::with_capacity(n);
        let mut importance = Vec::with_capacity(n);
        let mut rating = Vec::with_capacity(n);
        let mut content = Vec::with_capacity(n);
        let mut source_kind = Vec::with_capacity(n);
        let mut source_conv: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut source_msgs: Vec<String> = Vec::with_capacity(n);
        let mut observed = Vec::with_capacity(n);
        let mut created = Vec::with_capacity(n);
        let mut updated = Vec::with_capacity(n);
        let mut accessed = Vec::with_capacity(n);
        let mut access_count = Vec::with_capacity(n);
        let mut mention_count = Vec::with_capacity(n);
        let mut expires = Vec::with_capacity(n);
        let mut superseded = Vec::with_capacity(n);
        let mut superseded_by = Vec::with_capacity(n);
        let mut metadata = Vec::with_capacity(n);
        let mut embedding: Vec<Option<pgvector::Vector>> = Vec::with_capacity(n);
        let mut model: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut version = Vec::with_capacity(n);
        let mut fts_text = Vec::with_capacity(n);
        for row in rows {
            let m = &row.memory;
            tenant.push(m.tenant_id.as_str());
            id.push(m.id.0);
            user.push(m.user_id.as_str());
            agent.push(m.agent_id.as_ref().map(AgentId::as_str));
            pool.push(m.pool.as_deref());
            kind.push(m.kind.as_str());
            key.push(m.key.as_deref());
            category.push(m.category.as_str());
            importance.push(i16::from(m.importance.get()));
            rating.push(m.rating);
            content.push(m.content.as_str());
            source_kind.push(m.source.kind.as_str());
            source_conv.push(m.source.conversation_id.as_ref().map(ConversationId::as_str));
            // uuid[] per row travels as its text form (arrays of arrays must be rectangular).
            let ids: Vec<String> = m.source.message_ids.iter().map(|i| i.0.to_string()).collect();
            source_msgs.push(format!("{{{}}}", ids.join(",")));
            observed.push(m.observed_at);
            created.push(m.created_at);
            updated.push(m.updated_at);
            accessed.push(m.last_accessed_at);
            access_count.push(m.access_count);
            mention_count.push(m.mention_count);
            expires.push(m.expires_at);
            superseded.push(m.superseded_at);
            superseded_by.push(m.superseded_by.map(|s| s.0));
            metadata.push(m.metadata.clone());
            embedding.push(row.vector.as_ref().map(|v| pgvector::Vector::from(v.clone())));
            model.push(m.embedding_model.as_deref());
            version.push(versions.get(m.user_id.as_str()).copied().unwrap_or_default());
            fts_text.push(index_text(&[&m.content]));
        }
        sqlx::query(
            "INSERT INTO memories (tenant_id, id, user_id, agent_id, pool, kind, key, category, importance, rating, \
             content, source_kind, source_conversation_id, source_message_ids, observed_at, created_at, updated_at, \
             last_accessed_at, access_count, mention_count, expires_at, superseded_at, superseded_by, metadata, \
             embedding, embedding_model, version, fts_text, fts_len) \
             SELECT t, i, u, a, p, k, ky, c, im, r, co, sk, sc, sm::uuid[], ob, cr, up, la, ac, mc, ex, ss, sb, md, e, em, v, f, \
             length(to_tsvector('simple'::regconfig, f)) \
             FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
             $8::text[], $9::int2[], $10::int8[], $11::text[], $12::text[], $13::text[], $14::text[], \
             $15::timestamptz[], $16::timestamptz[], $17::timestamptz[], $18::timestamptz[], $19::int8[], \
             $20::int8[], $21::timestamptz[], $22::timestamptz[], $23::uuid[], $24::jsonb[], $25::vector[], \
             $26::text[], $27::int8[], $28::text[]) \
             AS x(t, i, u, a, p, k, ky, c, im, r, co, sk, sc, sm, ob, cr, up, la, ac, mc, ex, ss, sb, md, e, em, v, f)",
        )
        .bind(tenant)
        .bind(id)
        .bind(user)
        .bind(agent)
        .bind(pool)
        .bind(kind)
        .bind(key)
        .bind(category)
        .bind(importance)
        .bind(rating)
        .bind(content)
        .bind(source_kind)
        .bind(source_conv)
        .bind(source_msgs)
        .bind(observed)
        .bind(created)
        .bind(updated)
        .bind(accessed)
        .bind(access_count)
        .bind(mention_count)
        .bind(expires)
        .bind(superseded)
        .bind(superseded_by)
        .bind(metadata)
        .bind(embedding)
        .bind(model)
        .bind(version)
        .bind(fts_text)
        .execute(&mut **tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                // PostgreSQL names the key: "Key (tenant_id, id)=(t, <uuid>) already exists."
                let detail = e
                    .as_database_error()
                    .and_then(|d| d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
                    .and_then(|p| p.detail())
                    .unwrap_or_default()
                    .to_string();
                let id = rows
                    .iter()
                    .find(|r| detail.contains(&r.memory.id.to_string()))
                    .map_or_else(|| "of this batch".to_string(), |r| r.memory.id.to_string());
                return Error::Conflict(format!("memory {id} already exists"));
            }
            db(e)
        })?;
        let events: Vec<(&NewMemory, &MemoryEvent)> =
            rows.iter().flat_map(|r| r.events.iter().map(move |e| (r, e))).collect();
        if events.is_empty() {
            return Ok(());
        }
        let mut e_tenant = Vec::with_capacity(events.len());
        let mut e_user = Vec::with_capacity(events.len());
        let mut e_memory = Vec::with_capacity(events.len());
        let mut e_kind = Vec::with_capacity(events.len());
        let mut e_related = Vec::with_capacity(events.len());
        let mut e_actor = Vec::with_capacity(events.len());
        let mut e_detail = Vec::with_capacity(events.len());
        let mut e_at = Vec::with_capacity(events.len());
        for (r, e) in &events {
            e_tenant.push(r.memory.tenant_id.as_str());
            e_user.push(r.memory.user_id.as_str());
            e_memory.push(e.memory_id.0);
            e_kind.push(e.event.as_str());
            e_related.push(e.related_id.map(|r| r.0));
            e_actor.push(e.actor.as_str());
            e_detail.push(e.detail.clone());
            e_at.push(e.at);
        }
        // WITH ORDINALITY: the identity ids follow the events' order, as one insert each did.
        sqlx::query(
            "INSERT INTO memory_events (tenant_id, user_id, memory_id, event, related_id, actor, detail, at) \
             SELECT t, u, m, ev, r, a, d, at FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], \
             $5::uuid[], $6::text[], $7::jsonb[], $8::timestamptz[]) WITH ORDINALITY \
             AS x(t, u, m, ev, r, a, d, at, n) ORDER BY n",
        )
        .bind(e_tenant)
        .bind(e_user)
        .bind(e_memory)
        .bind(e_kind)
        .bind(e_related)
        .bind(e_actor)
        .bind(e_detail)
        .bind(e_at)
        .execute(&mut **tx)
        .await
        .map_err(db)?;
        Ok(())
    }

    /// The owner of a memory row (owners never change, so this needs no lock).
    async fn memory_user(tx: &mut Tx, tenant: &TenantId, id: MemoryId) -> Result<Option<String>> {
        let r = sqlx::query("SELECT user_id FROM memories WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.0)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db)?;
        r.map(|r| col(&r, "user_id")).transpose()
    }

    /// Supersede `old` inside a write transaction (see `Store::supersede`).
    async fn supersede_tx(
        tx: &mut Tx,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<&NewMemory>,
        event: &MemoryEvent,
    ) -> Result<()> {
        let user = Self::memory_user(tx, tenant, old)
            .await?
            .ok_or_else(|| Error::not_found(format!("memory {old}")))?;
        // User lock first, then the row: the order every writer uses.
        let v = crate::versions::bump_postgres(tx, tenant.as_str(), &user).await?;
        let row = sqlx::query(
            "SELECT superseded_at FROM memories WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(tenant.as_str())
        .bind(old.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(format!("memory {old}")))?;
        if col::<Option<OffsetDateTime>>(&row, "superseded_at")?.is_some() {
            return Err(Error::Conflict(format!("memory {old} is already superseded")));
        }
        if let Some(n) = new {
            if n.memory.tenant_id != *tenant || n.memory.user_id.as_str() != user {
                return Err(Error::internal("successor of another tenant or user"));
            }
            Self::insert_row(tx, n, v).await?;
        }
        sqlx::query(
            "UPDATE memories SET superseded_at = $1, superseded_by = $2, updated_at = $1, version = $3 \
             WHERE tenant_id = $4 AND id = $5",
        )
        .bind(event.at)
        .bind(new.map(|n| n.memory.id.0))
        .bind(v)
        .bind(tenant.as_str())
        .bind(old.0)
        .execute(&mut **tx)
        .await
        .map_err(db)?;
        Self::insert_event(tx, tenant.as_str(), &user, event).await
    }

    /// Confirm a restated fact inside a write transaction.
    async fn confirm_tx(
        tx: &mut Tx,
        tenant: &TenantId,
        id: MemoryId,
        event: &MemoryEvent,
    ) -> Result<()> {
        let r = sqlx::query(
            "UPDATE memories SET updated_at = $1, mention_count = mention_count + 1 \
             WHERE tenant_id = $2 AND id = $3 RETURNING user_id",
        )
        .bind(event.at)
        .bind(tenant.as_str())
        .bind(id.0)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        let user: String = col(&r, "user_id")?;
        Self::insert_event(tx, tenant.as_str(), &user, event).await
    }

    async fn select_memories(
        &self,
        tenant: &TenantId,
        tail: &str,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: Option<i64>,
    ) -> Result<Vec<Memory>> {
        let mut q = QueryBuilder::<Postgres>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        push_filter(&mut q, filter, OffsetDateTime::now_utc(), "");
        if let Some(c) = cursor {
            q.push(" AND id < ").push_bind(c.0);
        }
        q.push(tail);
        if let Some(l) = limit {
            q.push(" LIMIT ").push_bind(l);
        }
        let rows = q.build().fetch_all(&self.pool).await.map_err(db)?;
        rows.iter().map(rows::memory).collect()
    }
}

/// Refuse servers the store cannot work with, with a message that says what to do.
async fn check_server(pool: &PgPool, target: &str) -> Result<()> {
    let r = sqlx::query("SELECT current_setting('server_version_num')::int AS v")
        .fetch_one(pool)
        .await
        .map_err(db)?;
    let v: i32 = col(&r, "v")?;
    if v < 150_000 {
        return Err(Error::Unprocessable(format!(
            "PostgreSQL at {target} is version {}.{}; engram needs 15 or newer",
            v / 10_000,
            v % 10_000
        )));
    }
    let installed = |pool: &PgPool| {
        let pool = pool.clone();
        async move {
            let r = sqlx::query("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
                .fetch_optional(&pool)
                .await
                .map_err(db)?;
            r.map(|r| col::<String>(&r, "extversion")).transpose()
        }
    };
    let version = match installed(pool).await? {
        Some(v) => v,
        None => {
            if let Err(e) = sqlx::query("CREATE EXTENSION IF NOT EXISTS vector").execute(pool).await
            {
                return Err(Error::Unprocessable(format!(
                    "the pgvector extension is not installed in {target} and engram could not \
                     create it ({e}); run `CREATE EXTENSION vector;` there as a superuser \
                     (pgvector 0.8 or newer)"
                )));
            }
            installed(pool).await?.unwrap_or_default()
        }
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (0, 8) {
        return Err(Error::Unprocessable(format!(
            "pgvector in {target} is version {version}; engram needs 0.8 or newer \
             (ALTER EXTENSION vector UPDATE;)"
        )));
    }
    Ok(())
}

/// Append the WHERE conditions of a memory filter (the query already has `WHERE tenant_id =
/// …`); `p` qualifies the columns (e.g. `"m."`).
pub(crate) fn push_filter(
    q: &mut QueryBuilder<Postgres>,
    f: &MemoryFilter,
    now: OffsetDateTime,
    p: &str,
) {
    if let Some(u) = &f.user_id {
        q.push(format!(" AND {p}user_id = ")).push_bind(u.as_str().to_string());
    }
    if let Some(pool) = &f.pool {
        q.push(format!(" AND ({p}pool = "))
            .push_bind(pool.clone())
            .push(format!(" OR {p}pool IS NULL OR {p}kind = 'shared')"));
    }
    if let Some(kinds) = &f.kinds {
        let kinds: Vec<String> = kinds.iter().map(|k| k.as_str().to_string()).collect();
        q.push(format!(" AND {p}kind = ANY(")).push_bind(kinds).push(")");
    }
    if let Some(cats) = &f.categories {
        let cats: Vec<String> = cats.iter().map(|c| c.as_str().to_string()).collect();
        q.push(format!(" AND {p}category = ANY(")).push_bind(cats).push(")");
    }
    if let Some(t) = f.since {
        q.push(format!(" AND {p}observed_at >= ")).push_bind(t);
    }
    if let Some(t) = f.until {
        q.push(format!(" AND {p}observed_at < ")).push_bind(t);
    }
    if !f.include_superseded {
        q.push(format!(
            " AND {p}superseded_at IS NULL AND ({p}expires_at IS NULL OR {p}expires_at > "
        ))
        .push_bind(now)
        .push(")");
    }
}

#[async_trait]
impl Store for PgStore {
    async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        search::embedding_space(&self.pool).await
    }

    async fn ensure_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.ensure_space(model_id, dims, false).await
    }

    async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        let rows = sqlx::query(
            "SELECT tenant_id FROM (SELECT tenant_id FROM memories UNION SELECT tenant_id FROM messages) t \
             ORDER BY tenant_id COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| TenantId::parse(col::<String>(r, "tenant_id")?)).collect()
    }

    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        let rows = sqlx::query(
            "SELECT id, content FROM memories WHERE tenant_id = $1 AND kind <> 'profile' \
             AND (embedding IS NULL OR embedding_model IS NULL OR embedding_model <> $2) ORDER BY id LIMIT $3",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| Ok((MemoryId(col(r, "id")?), col::<String>(r, "content")?))).collect()
    }

    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0.0).collect();
        let owners =
            sqlx::query("SELECT id, user_id FROM memories WHERE tenant_id = $1 AND id = ANY($2)")
                .bind(tenant.as_str())
                .bind(&ids)
                .fetch_all(&mut *tx)
                .await
                .map_err(db)?;
        let mut owner: HashMap<Uuid, String> = HashMap::new();
        for r in &owners {
            owner.insert(col(r, "id")?, col(r, "user_id")?);
        }
        let versions =
            Self::bump_all(&mut tx, tenant.as_str(), owner.values().cloned().collect()).await?;
        for (id, v) in rows {
            let Some(user) = owner.get(&id.0) else { continue };
            let version = versions.get(user).copied().unwrap_or_default();
            sqlx::query(
                "UPDATE memories SET embedding = $1, embedding_model = $2, version = $3 WHERE tenant_id = $4 AND id = $5",
            )
            .bind(pgvector::Vector::from(v))
            .bind(model_id)
            .bind(version)
            .bind(tenant.as_str())
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.ensure_space(model_id, dims, true).await
    }

    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        let (role, agent, user) = match &key.role {
            KeyRole::Admin => ("admin", None, None),
            KeyRole::Agent(a) => ("agent", Some(a.as_str()), None),
            KeyRole::User(u) => ("user", None, Some(u.as_str())),
        };
        sqlx::query(
            "INSERT INTO api_keys (tenant_id, id, role, agent_id, user_id, prefix, secret_hash, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(key.tenant.as_str())
        .bind(&key.id)
        .bind(role)
        .bind(agent)
        .bind(user)
        .bind(&key.prefix)
        .bind(secret_hash)
        .bind(key.created_at)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            "SELECT * FROM api_keys WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY created_at, id COLLATE \"C\"",
        )
        .bind(tenant.map(TenantId::as_str))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(rows::api_key).collect()
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        let n = sqlx::query(
            "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(db)?
        .rows_affected();
        if n == 0 {
            return Err(Error::not_found(format!("active key {id}")));
        }
        Ok(())
    }

    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        let row =
            sqlx::query("SELECT * FROM api_keys WHERE secret_hash = $1 AND revoked_at IS NULL")
                .bind(secret_hash)
                .fetch_optional(&self.pool)
                .await
                .map_err(db)?;
        row.as_ref().map(rows::api_key).transpose()
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        let r = sqlx::query("SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        Ok(col::<i64>(&r, "n")?.max(0) as u64)
    }

    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        let row = sqlx::query("SELECT * FROM agents WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::agent).transpose()
    }

    async fn put_agent(&self, a: &Agent) -> Result<()> {
        sqlx::query(
            "INSERT INTO agents (tenant_id, id, memory_enabled, cluster_id, dedup_threshold, settings, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, id) DO UPDATE SET \
             memory_enabled = excluded.memory_enabled, cluster_id = excluded.cluster_id, \
             dedup_threshold = excluded.dedup_threshold, settings = excluded.settings, updated_at = excluded.updated_at",
        )
        .bind(a.tenant_id.as_str())
        .bind(a.id.as_str())
        .bind(a.memory_enabled)
        .bind(a.cluster_id.as_deref())
        .bind(f64::from(a.dedup_threshold))
        .bind(&a.settings)
        .bind(a.created_at)
        .bind(a.updated_at)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
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
        if rows.iter().any(|r| r.memory.tenant_id != *tenant) {
            return Err(Error::internal("memory of another tenant in insert batch"));
        }
        let mut tx = self.begin().await?;
        let users = rows.iter().map(|r| r.memory.user_id.as_str().to_string()).collect();
        let versions = Self::bump_all(&mut tx, tenant.as_str(), users).await?;
        // One statement per table for the whole batch (one round trip per row and event
        // made a 1,000-row batch ~2,000 statements).
        for chunk in rows.chunks(INSERT_CHUNK) {
            Self::insert_rows(&mut tx, chunk, &versions).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        let sql = format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::memory).transpose()
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        let sql =
            format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND id = ANY($2)");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(&ids)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.iter().map(rows::memory).collect()
    }

    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage> {
        let fetch = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
        let mut memories =
            self.select_memories(tenant, " ORDER BY id DESC", filter, cursor, Some(fetch)).await?;
        let next_cursor = if memories.len() > limit {
            memories.truncate(limit);
            memories.last().map(|m| m.id)
        } else {
            None
        };
        Ok(MemoryPage { memories, next_cursor })
    }

    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>> {
        let f = MemoryFilter { include_superseded: false, ..filter.clone() };
        self.select_memories(tenant, " ORDER BY observed_at, id", &f, None, None).await
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
        let row = sqlx::query(
            "UPDATE memories SET rating = rating + $1 WHERE tenant_id = $2 AND id = $3 RETURNING user_id, rating",
        )
        .bind(delta)
        .bind(tenant.as_str())
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        let user: String = col(&row, "user_id")?;
        let rating: i64 = col(&row, "rating")?;
        Self::insert_event(&mut tx, tenant.as_str(), &user, &event).await?;
        tx.commit().await.map_err(db)?;
        Ok(rating)
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        let mut tx = self.begin().await?;
        let user = Self::memory_user(&mut tx, tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        let v = crate::versions::bump_postgres(&mut tx, tenant.as_str(), &user).await?;
        let n = sqlx::query("DELETE FROM memories WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(db)?
            .rows_affected();
        if n == 0 {
            return Err(Error::not_found(format!("memory {id}")));
        }
        for sql in [
            "DELETE FROM memory_events WHERE tenant_id = $1 AND memory_id = $2",
            // Successors and predecessors keep their rows; links to the purged id are cleared.
            "UPDATE memories SET superseded_by = NULL WHERE tenant_id = $1 AND superseded_by = $2",
            "DELETE FROM recalls WHERE tenant_id = $1 AND memory_id = $2",
        ] {
            sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(id.0)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        sqlx::query(
            "INSERT INTO memory_tombstones (tenant_id, user_id, memory_id, version) VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant.as_str())
        .bind(&user)
        .bind(id.0)
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
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND superseded_by = $2 LIMIT 1"
        );
        for _ in 0..10_000 {
            let prev = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(tenant.as_str())
                .bind(cur.0)
                .fetch_optional(&self.pool)
                .await
                .map_err(db)?;
            let Some(p) = prev else { break };
            let m = rows::memory(&p)?;
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
        let ids: Vec<Uuid> = chain.iter().map(|m| m.id.0).collect();
        let rows = sqlx::query(
            "SELECT * FROM memory_events WHERE tenant_id = $1 AND memory_id = ANY($2) ORDER BY at, id",
        )
        .bind(tenant.as_str())
        .bind(&ids)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        let events = rows.iter().map(rows::event).collect::<Result<Vec<_>>>()?;
        Ok((chain, events))
    }

    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        self.vector_search_impl(tenant, filter, vector, k).await
    }

    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        let hits =
            self.text_search_impl(search::TextScope::Memories(tenant, filter), query, k).await?;
        Ok(hits.into_iter().map(|(id, s)| (MemoryId(id), s)).collect())
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
        // Sorted and deduplicated: the primary-key scan then locks rows in one order.
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect::<BTreeSet<_>>().into_iter().collect();
        sqlx::query(
            "UPDATE memories SET access_count = access_count + 1, last_accessed_at = $1 \
             WHERE tenant_id = $2 AND id = ANY($3)",
        )
        .bind(at)
        .bind(tenant.as_str())
        .bind(&ids)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND user_id = $2 AND kind = 'profile' AND key = $3 \
             AND superseded_at IS NULL AND pool IS NOT DISTINCT FROM $4 ORDER BY id DESC LIMIT 1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .bind(key)
            .bind(pool)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::memory).transpose()
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
        let now = OffsetDateTime::now_utc();
        let mut tx = self.begin().await?;
        // Creates the conversation or locks its row until commit: one appender at a time.
        let r = sqlx::query(
            "INSERT INTO conversations (tenant_id, id, user_id, agent_id, last_seq, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 0, $5, $5) \
             ON CONFLICT (tenant_id, id) DO UPDATE SET updated_at = excluded.updated_at \
             RETURNING user_id, agent_id, last_seq",
        )
        .bind(tenant.as_str())
        .bind(conv.as_str())
        .bind(user.as_str())
        .bind(agent.as_ref().map(AgentId::as_str))
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        if col::<String>(&r, "user_id")? != user.as_str() {
            return Err(Error::Conflict(format!("conversation '{conv}' belongs to another user")));
        }
        crate::check_conversation_agent(
            &conv,
            col::<Option<String>>(&r, "agent_id")?.as_deref(),
            &messages,
        )?;
        let mut seq: i64 = col(&r, "last_seq")?;
        let mut out = Vec::with_capacity(messages.len());
        for mut m in messages {
            seq += 1;
            m.seq = seq;
            sqlx::query(
                "INSERT INTO messages (tenant_id, id, conversation_id, user_id, agent_id, seq, role, content, tool_name, \
                 tool_args, tool_result, turn_id, metadata, created_at, fts_text) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
            )
            .bind(tenant.as_str())
            .bind(m.id.0)
            .bind(conv.as_str())
            .bind(user.as_str())
            .bind(m.agent_id.as_ref().map(AgentId::as_str))
            .bind(seq)
            .bind(m.role.as_str())
            .bind(&m.content)
            .bind(m.tool_name.as_deref())
            .bind(m.tool_args.as_ref())
            .bind(m.tool_result.as_deref())
            .bind(m.turn_id.as_deref())
            .bind(&m.metadata)
            .bind(m.created_at)
            .bind(index_text(&[&m.content, m.tool_name.as_deref().unwrap_or("")]))
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    return Error::Conflict(format!("message {} already exists", m.id));
                }
                db(e)
            })?;
            out.push(m);
        }
        sqlx::query(
            "UPDATE conversations SET last_seq = $1, updated_at = $2 WHERE tenant_id = $3 AND id = $4",
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
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE tenant_id = $1 AND conversation_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(after_seq)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(rows::message).collect()
    }

    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        let row = sqlx::query(
            "SELECT user_id, agent_id FROM conversations WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        row.map(|r| {
            Ok((
                UserId::parse(col::<String>(&r, "user_id")?)?,
                col::<Option<String>>(&r, "agent_id")?.map(AgentId::parse).transpose()?,
            ))
        })
        .transpose()
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::message).transpose()
    }

    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        let r = sqlx::query(
            "UPDATE messages SET rating = rating + $1 WHERE tenant_id = $2 AND id = $3 RETURNING rating",
        )
        .bind(delta)
        .bind(tenant.as_str())
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(format!("message {id}")))?;
        col(&r, "rating")
    }

    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let hits =
            self.text_search_impl(search::TextScope::Messages(tenant, user), query, k).await?;
        Ok(hits.into_iter().map(|(id, s)| (MessageId(id), s)).collect())
    }

    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        let rows = sqlx::query(
            "SELECT id, seq FROM messages WHERE tenant_id = $1 AND conversation_id = $2 \
             AND content != '' AND (embedding IS NULL OR embedding_model IS DISTINCT FROM $3) \
             ORDER BY seq LIMIT $4",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| Ok((MessageId(col(r, "id")?), col::<i64>(r, "seq")?))).collect()
    }

    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        let rows = sqlx::query(
            "SELECT DISTINCT conversation_id FROM messages WHERE tenant_id = $1 AND content != '' \
             AND (embedding IS NULL OR embedding_model IS DISTINCT FROM $2) \
             ORDER BY 1 LIMIT $3",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| ConversationId::parse(col::<String>(r, "conversation_id")?)).collect()
    }

    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0.0).collect();
        let vectors: Vec<pgvector::Vector> =
            rows.into_iter().map(|r| pgvector::Vector::from(r.1)).collect();
        sqlx::query(
            "UPDATE messages m SET embedding = v.embedding, embedding_model = $2 \
             FROM unnest($3::uuid[], $4::vector[]) AS v(id, embedding) \
             WHERE m.tenant_id = $1 AND m.id = v.id",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(&ids)
        .bind(&vectors)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>> {
        // Exact: a user's messages are ranked in full (no index on this column), and only
        // vectors of the query's model and dimension are compared.
        let rows = sqlx::query(
            "SELECT id, -(embedding <#> $4) AS sim FROM messages \
             WHERE tenant_id = $1 AND user_id = $2 AND embedding_model = $3 \
               AND vector_dims(embedding) = $5 \
             ORDER BY embedding <#> $4, id LIMIT $6",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(model_id)
        .bind(pgvector::Vector::from(query.to_vec()))
        .bind(query.len() as i32)
        .bind(k as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| Ok((MessageId(col(r, "id")?), col::<f64>(r, "sim")? as f32))).collect()
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
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        sqlx::query(
            "INSERT INTO recalls (tenant_id, turn_id, memory_id, user_id, created_at) \
             SELECT tenant_id, $2, id, user_id, now() FROM memories WHERE tenant_id = $1 AND id = ANY($3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(tenant.as_str())
        .bind(turn_id)
        .bind(&ids)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        let rows = sqlx::query(
            "SELECT memory_id FROM recalls WHERE tenant_id = $1 AND turn_id = $2 ORDER BY created_at, memory_id",
        )
        .bind(tenant.as_str())
        .bind(turn_id)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| Ok(MemoryId(col(r, "memory_id")?))).collect()
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        let row = sqlx::query(
            "SELECT * FROM context_sessions WHERE tenant_id = $1 AND session_id = $2 AND user_id = $3 AND pool = $4",
        )
        .bind(tenant.as_str())
        .bind(session_id)
        .bind(user.as_str())
        .bind(pool.unwrap_or(""))
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        let Some(r) = row else { return Ok(None) };
        let ids: Vec<Uuid> = col(&r, "memory_ids")?;
        Ok(Some(ContextSession {
            session_id: col(&r, "session_id")?,
            user_id: UserId::parse(col::<String>(&r, "user_id")?)?,
            pool: Some(col::<String>(&r, "pool")?).filter(|p| !p.is_empty()),
            text: col(&r, "text")?,
            memory_ids: ids.into_iter().map(MemoryId).collect(),
            created_at: col(&r, "created_at")?,
        }))
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        let ids: Vec<Uuid> = s.memory_ids.iter().map(|i| i.0).collect();
        sqlx::query(
            "INSERT INTO context_sessions (tenant_id, session_id, user_id, pool, text, memory_ids, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tenant_id, session_id, user_id, pool) DO UPDATE SET \
             text = excluded.text, memory_ids = excluded.memory_ids, created_at = excluded.created_at",
        )
        .bind(tenant.as_str())
        .bind(&s.session_id)
        .bind(s.user_id.as_str())
        .bind(s.pool.as_deref().unwrap_or(""))
        .bind(&s.text)
        .bind(&ids)
        .bind(s.created_at)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        let rows = sqlx::query(
            "SELECT user_id FROM (SELECT user_id FROM memories WHERE tenant_id = $1 \
             UNION SELECT user_id FROM conversations WHERE tenant_id = $1) u ORDER BY user_id COLLATE \"C\"",
        )
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| UserId::parse(col::<String>(r, "user_id")?)).collect()
    }

    async fn erase_user(&self, tenant: &TenantId, user: &UserId) -> Result<EraseCounts> {
        let mut tx = self.begin().await?;
        let t = tenant.as_str();
        let u = user.as_str();
        // Take the user's lock first (as every writer of the user's memories does).
        crate::versions::bump_postgres(&mut tx, t, u).await?;
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
        del!(memory_events, "DELETE FROM memory_events WHERE tenant_id = $1 AND user_id = $2");
        del!(memories, "DELETE FROM memories WHERE tenant_id = $1 AND user_id = $2");
        del!(messages, "DELETE FROM messages WHERE tenant_id = $1 AND user_id = $2");
        del!(conversations, "DELETE FROM conversations WHERE tenant_id = $1 AND user_id = $2");
        sqlx::query(
            "DELETE FROM summary_sources WHERE tenant_id = $1 AND summary_id IN \
             (SELECT id FROM summaries WHERE tenant_id = $1 AND user_id = $2)",
        )
        .bind(t)
        .bind(u)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        del!(summaries, "DELETE FROM summaries WHERE tenant_id = $1 AND user_id = $2");
        del!(jobs, "DELETE FROM jobs WHERE tenant_id = $1 AND user_id = $2");
        del!(cursors, "DELETE FROM extraction_cursors WHERE tenant_id = $1 AND user_id = $2");
        del!(recalls, "DELETE FROM recalls WHERE tenant_id = $1 AND user_id = $2");
        del!(
            context_sessions,
            "DELETE FROM context_sessions WHERE tenant_id = $1 AND user_id = $2"
        );
        for sql in [
            "DELETE FROM memory_tombstones WHERE tenant_id = $1 AND user_id = $2",
            "DELETE FROM user_versions WHERE tenant_id = $1 AND user_id = $2",
        ] {
            sqlx::query(sql).bind(t).bind(u).execute(&mut *tx).await.map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        Ok(counts)
    }

    async fn user_messages(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE tenant_id = $1 AND user_id = $2 ORDER BY conversation_id COLLATE \"C\", seq",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(rows::message).collect()
    }

    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND user_id = $2 ORDER BY id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        let memories = rows.iter().map(rows::memory).collect::<Result<Vec<_>>>()?;
        let rows = sqlx::query(
            "SELECT * FROM memory_events WHERE tenant_id = $1 AND user_id = $2 ORDER BY at, id",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        let events = rows.iter().map(rows::event).collect::<Result<Vec<_>>>()?;
        Ok((memories, events))
    }

    async fn enqueue_job(&self, job: &Job) -> Result<bool> {
        jobs::enqueue(&self.pool, job).await
    }

    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        jobs::claim(&self.pool, now, lease_until, kinds).await
    }

    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()> {
        jobs::heartbeat(&self.pool, id, lease_until).await
    }

    async fn complete_job(&self, id: &str) -> Result<()> {
        jobs::complete(&self.pool, id).await
    }

    async fn fail_job(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<OffsetDateTime>,
    ) -> Result<()> {
        jobs::fail(&self.pool, id, error, retry_at).await
    }

    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        jobs::list(&self.pool, tenant, status, limit).await
    }

    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()> {
        jobs::retry(&self.pool, tenant, id).await
    }

    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE tenant_id = $1 AND conversation_id = $2 ORDER BY seq",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(rows::message).collect()
    }

    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        let r = sqlx::query(
            "SELECT last_hash FROM extraction_cursors WHERE tenant_id = $1 AND conversation_id = $2",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        r.map(|r| col(&r, "last_hash")).transpose()
    }

    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        let r = sqlx::query(
            "SELECT rolling_summary, summary_user_turns FROM conversations WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        match r {
            Some(r) => Ok((col(&r, "rolling_summary")?, col(&r, "summary_user_turns")?)),
            None => Ok((None, 0)),
        }
    }

    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE conversations SET rolling_summary = $1, summary_user_turns = $2 WHERE tenant_id = $3 AND id = $4",
        )
        .bind(summary)
        .bind(user_turns)
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        if batch.adds.iter().any(|r| r.memory.tenant_id != *tenant || r.memory.user_id != *user) {
            return Err(Error::internal("extracted memory of another tenant or user"));
        }
        let mut tx = self.begin().await?;
        // The user's lock first, whatever the batch holds.
        let v = crate::versions::bump_postgres(&mut tx, tenant.as_str(), user.as_str()).await?;
        for row in &batch.adds {
            Self::insert_row(&mut tx, row, v).await?;
        }
        for (old, new, event) in &batch.supersedes {
            Self::supersede_tx(&mut tx, tenant, *old, new.as_ref(), event).await?;
        }
        for (id, event) in &batch.confirms {
            Self::confirm_tx(&mut tx, tenant, *id, event).await?;
        }
        sqlx::query(
            "INSERT INTO extraction_cursors (tenant_id, conversation_id, user_id, last_hash, updated_at) \
             VALUES ($1, $2, $3, $4, now()) ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET \
             last_hash = excluded.last_hash, updated_at = excluded.updated_at",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(user.as_str())
        .bind(&batch.cursor)
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
        let r = sqlx::query(
            "SELECT tool_name FROM messages WHERE tenant_id = $1 AND id = $2 AND content = '' FOR UPDATE",
        )
        .bind(tenant.as_str())
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let Some(r) = r else { return Ok(false) };
        let tool: Option<String> = col(&r, "tool_name")?;
        sqlx::query(
            "UPDATE messages SET content = $1, fts_text = $2 WHERE tenant_id = $3 AND id = $4",
        )
        .bind(content)
        .bind(index_text(&[content, tool.as_deref().unwrap_or("")]))
        .bind(tenant.as_str())
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(true)
    }

    async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        crate::backup::pg_backup(&self.pool, scope, sink).await
    }

    async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        crate::backup::pg_restore(&self.pool, rows, state).await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        let r = sqlx::query(
            "SELECT \
              (SELECT count(*) FROM memories WHERE tenant_id = $1 AND superseded_at IS NULL) AS active, \
              (SELECT count(*) FROM memories WHERE tenant_id = $1 AND superseded_at IS NOT NULL) AS superseded, \
              (SELECT count(*) FROM memories WHERE tenant_id = $1 AND (embedding IS NOT NULL OR kind = 'profile') AND superseded_at IS NULL) AS with_vec, \
              (SELECT count(DISTINCT user_id) FROM memories WHERE tenant_id = $1) AS users, \
              (SELECT count(*) FROM conversations WHERE tenant_id = $1) AS convs, \
              (SELECT count(*) FROM messages WHERE tenant_id = $1) AS msgs, \
              (SELECT count(*) FROM messages WHERE tenant_id = $1 AND embedding IS NOT NULL) AS msgs_vec, \
              (SELECT count(*) FROM messages m WHERE tenant_id = $1 AND NOT EXISTS \
                 (SELECT 1 FROM summary_sources s WHERE s.tenant_id = $1 AND s.source_id = m.id::text)) AS unsummarized, \
              (SELECT count(*) FROM summaries WHERE tenant_id = $1) AS summaries, \
              (SELECT coalesce(max(depth) + 1, 0) FROM summaries WHERE tenant_id = $1) AS depth, \
              (SELECT count(*) FROM jobs WHERE tenant_id = $1 AND status = 'pending') AS pending, \
              (SELECT count(*) FROM jobs WHERE tenant_id = $1 AND status = 'running') AS running, \
              (SELECT count(*) FROM jobs WHERE tenant_id = $1 AND status = 'failed') AS failed, \
              (SELECT count(*) FROM jobs WHERE tenant_id = $1 AND status = 'done') AS done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = $1 AND kind = 'extract' AND status = 'done') AS ex_done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = $1 AND kind = 'extract' AND status = 'failed') AS ex_failed",
        )
        .bind(tenant.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(db)?;
        let g = |c: &str| -> Result<u64> { Ok(col::<i64>(&r, c)?.max(0) as u64) };
        let space = self.embedding_space().await?;
        Ok(StoreStats {
            memories_active: g("active")?,
            memories_superseded: g("superseded")?,
            memories_with_vector: g("with_vec")?,
            users: g("users")?,
            conversations: g("convs")?,
            messages: g("msgs")?,
            messages_with_vector: g("msgs_vec")?,
            messages_unsummarized: g("unsummarized")?,
            summaries: g("summaries")?,
            summary_depth: g("depth")?,
            jobs_pending: g("pending")?,
            jobs_running: g("running")?,
            jobs_failed: g("failed")?,
            jobs_done: g("done")?,
            extractions_done: g("ex_done")?,
            extractions_failed: g("ex_failed")?,
            embedding_model: space.as_ref().map(|s| s.0.clone()),
            embedding_dims: space.map(|s| s.1 as u64),
        })
    }
}
