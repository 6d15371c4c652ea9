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
//! - **Message and summary vectors** ([`transcript_vectors`]): ranked exactly, in SQL for a
//!   user of few rows, from an in-process cache (shared with SQLite's, caught up through
//!   each row's writer transaction id) once a search has counted 2,000 vectors or more.
//! - **Full text** ([`search`]): a generated `tsvector` column with the language-neutral
//!   `simple` configuration over `fts_text`, the content split into words exactly like a
//!   query ([`crate::text`]), lowercased and with diacritics folded in Rust, so matching does
//!   not depend on the database locale. Ranking is BM25 computed in SQL with the statistics
//!   of the searched scope (FTS5's formula, k1 = 1.2, b = 0.75; per user, kept by triggers in
//!   `memory_fts_stats`), postings read per user through lexemes prefixed with a key of the
//!   tenant and user, and query terms found in half the scope's rows or more are dropped,
//!   as in the SQLite store.

pub mod jobs;
mod native;
pub mod rows;
pub mod search;
pub mod transcript_vectors;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use engram_core::model::{
    AgentId, ConversationId, Job, JobKind, Memory, MemoryEvent, MemoryId, Message, MessageId,
    TenantId,
};
use engram_core::store::{
    BackupRow, BackupScope, MemoryFilter, NewMemory, RestoreState, TranscriptFilter,
};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, PgPool, Postgres, QueryBuilder, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::common::memories::rating_condition;
use crate::common::store::Transcript;
use crate::common::{self, Arg, Backend, SqlStore};
use crate::fault::is_unique_violation;
pub use crate::fault::postgres as db;
use crate::text::index_text;
use rows::{MEMORY_COLS, col};

type Tx = Transaction<'static, Postgres>;

/// Rows per `INSERT … SELECT FROM unnest(…)` of a batch insert.
const INSERT_CHUNK: usize = 1000;

/// A shared statement ([`crate::common`]) with numbered placeholders and its values bound as
/// PostgreSQL stores them.
fn statement(sql: &str, args: &[Arg<'_>]) -> Query<'static, Postgres, PgArguments> {
    let q = sqlx::query(sqlx::AssertSqlSafe(common::numbered(sql)));
    args.iter().fold(q, |q, a| match a {
        Arg::Text(v) => q.bind(*v),
        Arg::OptText(v) => q.bind(*v),
        Arg::Owned(v) => q.bind(v.clone()),
        Arg::Int(v) => q.bind(*v),
        Arg::Bool(v) => q.bind(*v),
        Arg::Real(v) => q.bind(*v),
        Arg::Small(v) => q.bind(*v),
        Arg::Id(v) => q.bind(*v),
        Arg::OptId(v) => q.bind(*v),
        Arg::Ids(v) => q.bind(v.clone()),
        Arg::Texts(v) => q.bind(v.clone()),
        Arg::Ts(v) => q.bind(*v),
        Arg::OptTs(v) => q.bind(*v),
        Arg::Json(v) => q.bind(*v),
        Arg::OptJson(v) => q.bind(*v),
        Arg::OptVector(v) => q.bind(v.map(|v| pgvector::Vector::from(v.to_vec()))),
    })
}

/// The shared code ([`crate::common`]) runs on the pool.
#[async_trait]
impl Backend for PgDb {
    type Row = PgRow;
    type Tx = Tx;

    const BYTE_ORDER: &'static str = " COLLATE \"C\"";
    const IN_LIST: &'static str = " = ANY(?)";
    const FINISHED_JOBS: &'static str = "jobs";
    const USER_LOCK: bool = true;
    const LOCK: &'static str = " FOR UPDATE";

    fn day(col: &str) -> String {
        format!("floor(extract(epoch FROM {col}) / 86400)::bigint")
    }

    async fn read_all(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<PgRow>> {
        statement(sql, args).fetch_all(&self.pool).await.map_err(db)
    }

    async fn write(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        Ok(statement(sql, args).execute(&self.pool).await.map_err(db)?.rows_affected())
    }

    async fn begin_write(&self) -> Result<Tx> {
        self.begin().await
    }

    async fn commit(tx: Tx) -> Result<()> {
        tx.commit().await.map_err(db)
    }

    async fn tx_all(tx: &mut Tx, sql: &str, args: &[Arg<'_>]) -> Result<Vec<PgRow>> {
        statement(sql, args).fetch_all(&mut **tx).await.map_err(db)
    }

    async fn tx_run(tx: &mut Tx, sql: &str, args: &[Arg<'_>]) -> sqlx::Result<u64> {
        Ok(statement(sql, args).execute(&mut **tx).await?.rows_affected())
    }

    async fn tx_attempt(tx: &mut Tx, sql: &str, args: &[Arg<'_>]) -> sqlx::Result<u64> {
        let mut savepoint = sqlx::Acquire::begin(&mut **tx).await?;
        match statement(sql, args).execute(&mut *savepoint).await {
            Ok(r) => {
                savepoint.commit().await?;
                Ok(r.rows_affected())
            }
            Err(e) => {
                savepoint.rollback().await?;
                Err(e)
            }
        }
    }

    async fn bump(tx: &mut Tx, tenant: &str, user: &str) -> Result<i64> {
        crate::versions::bump_postgres(tx, tenant, user).await
    }

    fn fault(e: sqlx::Error) -> Error {
        db(e)
    }

    fn is_duplicate(e: &sqlx::Error) -> bool {
        is_unique_violation(e)
    }

    fn memory_index(m: &Memory) -> (&'static str, &'static str, Vec<Arg<'static>>) {
        let text = index_text(&[&m.content]);
        let values = ", ?, length(to_tsvector('simple'::regconfig, ?))";
        (", fts_text, fts_len", values, vec![Arg::Owned(text.clone()), Arg::Owned(text)])
    }

    fn message_index(m: &Message) -> (&'static str, &'static str, Vec<Arg<'static>>) {
        let text = index_text(&[&m.content, m.tool_name.as_deref().unwrap_or("")]);
        (", fts_text", ", ?", vec![Arg::Owned(text)])
    }

    fn summary_index(content: &str) -> (&'static str, &'static str, Vec<Arg<'static>>) {
        (", fts_text", ", ?", vec![Arg::Owned(index_text(&[content]))])
    }
}

/// The PostgreSQL store: the store contract ([`SqlStore`]) over [`PgDb`].
pub type PgStore = SqlStore<PgDb>;

impl PgStore {
    /// Connect with the default options, check the server and pgvector, and apply migrations.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, PgOptions::default()).await
    }

    /// Connect, check the server and pgvector, and apply migrations.
    pub async fn open_with(url: &str, options: PgOptions) -> Result<Self> {
        Ok(SqlStore(PgDb::open_with(url, options).await?))
    }
}

/// The database of a [`PgStore`]: its pool and the vector-search settings.
pub struct PgDb {
    pool: PgPool,
    /// Scopes with at most this many active vectors are searched exactly (see [`search`]).
    exact_scan_limit: AtomicUsize,
    /// `hnsw.ef_search` of the index path (see [`search`]).
    hnsw_ef_search: AtomicUsize,
    /// Message and summary vectors of recently searched users ([`transcript_vectors`]).
    transcripts: common::transcript_vectors::TranscriptCache<Uuid>,
    /// The keys searched through that cache (they hold enough rows to be worth it).
    large_transcripts: std::sync::Mutex<std::collections::HashSet<common::transcript_vectors::Key>>,
    /// [`transcript_vectors::CACHE_MIN_ROWS`], or what a test set.
    transcript_cache_min_rows: AtomicUsize,
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

impl PgDb {
    async fn open_with(url: &str, options: PgOptions) -> Result<Self> {
        if options.max_connections == 0 {
            return Err(Error::invalid(
                "database_pool_size",
                "the pool needs at least 1 connection",
            ));
        }
        let opts = PgConnectOptions::from_str(url)
            .map_err(|e| Error::Unprocessable(format!("invalid PostgreSQL URL: {e}")))?
            .application_name("engram")
            // The server's notices ("relation schema_migrations already exists, skipping" on
            // every start) are no news to an operator: sqlx logs each at INFO, so every CLI
            // command on PostgreSQL printed one. Warnings and errors still come through.
            .options([("client_min_messages", "warning")]);
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
            transcripts: Default::default(),
            large_transcripts: Default::default(),
            transcript_cache_min_rows: AtomicUsize::new(transcript_vectors::CACHE_MIN_ROWS),
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

    /// Change how many vectors a user's transcript table must hold for its searches to go
    /// through the in-process cache (tests: 0, always; the default is
    /// [`transcript_vectors::CACHE_MIN_ROWS`]).
    pub fn set_transcript_cache_min_rows(&self, rows: usize) {
        self.transcript_cache_min_rows.store(rows, Ordering::Relaxed);
    }

    fn transcript_cache_min_rows(&self) -> usize {
        self.transcript_cache_min_rows.load(Ordering::Relaxed)
    }

    /// How many vectors the cache holds for a user's messages or summaries (of any model;
    /// `None`: not cached). For tests and operators.
    pub fn cached_transcript_rows(&self, tenant: &str, user: &str) -> Option<usize> {
        self.transcripts.rows_of(tenant, user)
    }

    fn ef_search(&self) -> usize {
        self.hnsw_ef_search.load(Ordering::Relaxed)
    }

    async fn begin(&self) -> Result<Tx> {
        self.pool.begin().await.map_err(db)
    }

    /// Insert many rows and their events with one `INSERT … SELECT FROM unnest(…)` per table
    /// (`versions`: each user's version in this transaction).
    async fn insert_chunk(
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
/// ` AND <p>user_id = … [AND <p>created_at >= since] [AND <p>created_at < until]`.
pub(crate) fn push_window(
    q: &mut QueryBuilder<Postgres>,
    f: &TranscriptFilter,
    t: Transcript,
    p: &str,
) {
    let (start, end) = t.span();
    q.push(format!(" AND {p}user_id = ")).push_bind(f.user.as_str().to_string());
    if let Some(at) = f.since {
        q.push(format!(" AND {p}{end} >= ")).push_bind(at);
    }
    if let Some(at) = f.until {
        q.push(format!(" AND {p}{start} < ")).push_bind(at);
    }
}

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
    if let Some(c) = &f.source_conversation {
        q.push(format!(" AND {p}source_conversation_id = ")).push_bind(c.as_str().to_string());
    }
    if let Some(o) = f.rating {
        q.push(rating_condition(o, p));
    }
    if !f.include_superseded {
        q.push(format!(
            " AND {p}superseded_at IS NULL AND ({p}expires_at IS NULL OR {p}expires_at > "
        ))
        .push_bind(now)
        .push(")");
    }
}
