//! The embedded store: SQLite (bundled, WAL) with FTS5 and the in-process vector index.
//!
//! Connections: a pool of readers and a separate pool of **one** writer connection, every
//! write transaction opened with `BEGIN IMMEDIATE` (so a transaction never has to upgrade a
//! read lock, which is what deadlocks SQLite writers) and a busy timeout for writers of other
//! processes. `synchronous = NORMAL` in WAL mode survives a process crash (kill -9) with every
//! committed transaction intact.

mod native;
mod transcript_vectors;
pub mod vectors;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use engram_core::model::{
    Category, Job, JobKind, Kind, Memory, MemoryId, Message, MessageId, TenantId,
};
use engram_core::store::{
    BackupRow, BackupScope, MemoryFilter, NewMemory, RestoreState, TranscriptFilter,
};
use sqlx::query::Query;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool, Transaction};
use time::OffsetDateTime;

use crate::common::memories::MEMORY_COLS;
use crate::common::memories::rating_condition;
use crate::common::rows::Columns;
use crate::common::store::Transcript;
use crate::common::{self, Arg, Backend, SqlStore};
pub use crate::fault::sqlite as db;
use crate::tables::{blob_to_vec, vec_to_blob};
use crate::text::{CONTEXT_WEIGHT, MIN_ROWS_FOR_IDF, QueryWeights, term_weight};
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

/// A shared statement ([`crate::common`]) with its values bound as SQLite stores them.
fn statement(sql: &str, args: &[Arg<'_>]) -> Query<'static, Sqlite, SqliteArguments> {
    args.iter().fold(sqlx::query(sqlx::AssertSqlSafe(sql.to_string())), |q, a| match a {
        Arg::Text(v) => q.bind(*v),
        Arg::OptText(v) => q.bind(*v),
        Arg::Owned(v) => q.bind(v.clone()),
        Arg::Int(v) => q.bind(*v),
        Arg::Bool(v) => q.bind(i64::from(*v)),
        Arg::Real(v) => q.bind(*v),
        Arg::Small(v) => q.bind(i64::from(*v)),
        Arg::Id(v) => q.bind(v.to_string()),
        Arg::OptId(v) => q.bind(v.map(|v| v.to_string())),
        Arg::Ids(v) => {
            let ids: Vec<String> = v.iter().map(ToString::to_string).collect();
            q.bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        }
        Arg::Texts(v) => q.bind(serde_json::to_string(v).unwrap_or_else(|_| "[]".into())),
        Arg::Ts(v) => q.bind(ts(*v)),
        Arg::OptTs(v) => q.bind(v.map(ts)),
        Arg::Json(v) => q.bind(v.to_string()),
        Arg::OptJson(v) => q.bind(v.map(ToString::to_string)),
        Arg::OptVector(v) => q.bind(v.map(vec_to_blob)),
    })
}

/// One column, decoded: a row that does not decode is an internal error.
fn col<'r, T>(r: &'r SqliteRow, name: &str) -> Result<T>
where
    T: sqlx::Decode<'r, Sqlite> + sqlx::Type<Sqlite>,
{
    r.try_get(name).map_err(|e| Error::internal(format!("database: column {name}: {e}")))
}

#[async_trait]
impl Backend for SqliteDb {
    type Row = SqliteRow;
    type Tx = Transaction<'static, Sqlite>;

    const BYTE_ORDER: &'static str = "";
    const IN_LIST: &'static str = " IN (SELECT value FROM json_each(?))";
    // Without statistics the planner reads every finished job through `jobs_claim`
    // (status) and sorts them: ~1 s per sweep at a million jobs, under the write lock.
    const FINISHED_JOBS: &'static str = "jobs INDEXED BY jobs_done";
    const USER_LOCK: bool = false;
    const LOCK: &'static str = "";

    fn day(col: &str) -> String {
        format!("({col} / 86400000000000)")
    }

    async fn read_all(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<SqliteRow>> {
        statement(sql, args).fetch_all(&self.read).await.map_err(db)
    }

    async fn write(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        let mut tx = self.begin().await?;
        let n = Self::tx_run(&mut tx, sql, args).await.map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(n)
    }

    async fn begin_write(&self) -> Result<Self::Tx> {
        self.begin().await
    }

    async fn commit(tx: Self::Tx) -> Result<()> {
        tx.commit().await.map_err(db)
    }

    async fn tx_all(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> Result<Vec<SqliteRow>> {
        statement(sql, args).fetch_all(&mut **tx).await.map_err(db)
    }

    async fn tx_run(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> sqlx::Result<u64> {
        Ok(statement(sql, args).execute(&mut **tx).await?.rows_affected())
    }

    async fn tx_attempt(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> sqlx::Result<u64> {
        Self::tx_run(tx, sql, args).await
    }

    async fn bump(tx: &mut Self::Tx, tenant: &str, user: &str) -> Result<i64> {
        crate::versions::bump_sqlite(tx, tenant, user).await
    }

    fn fault(e: sqlx::Error) -> Error {
        db(e)
    }

    fn is_duplicate(e: &sqlx::Error) -> bool {
        matches!(e, sqlx::Error::Database(d) if d.message().contains("UNIQUE"))
    }

    fn memory_index(m: &Memory) -> (&'static str, &'static str, Vec<Arg<'static>>) {
        keyword_column(&m.content)
    }

    fn message_index(m: &Message) -> (&'static str, &'static str, Vec<Arg<'static>>) {
        keyword_column(&m.content)
    }

    fn summary_index(content: &str) -> (&'static str, &'static str, Vec<Arg<'static>>) {
        keyword_column(content)
    }
}

/// The `keyword_text` column of a new row whose text has characters written without spaces
/// (`text::keyword_text`; FTS5 follows by trigger, and reads the content of every other row).
fn keyword_column(text: &str) -> (&'static str, &'static str, Vec<Arg<'static>>) {
    match crate::text::keyword_text(text) {
        Some(k) => (", keyword_text", ", ?", vec![Arg::Owned(k)]),
        None => ("", "", vec![]),
    }
}

/// Columns as SQLite stores them: ids as text, timestamps as unix nanoseconds, JSON and id
/// lists as text, flags as 0/1.
impl Columns for SqliteRow {
    fn text(&self, name: &str) -> Result<String> {
        col(self, name)
    }

    fn opt_text(&self, name: &str) -> Result<Option<String>> {
        col(self, name)
    }

    fn int(&self, name: &str) -> Result<i64> {
        col(self, name)
    }

    fn real(&self, name: &str) -> Result<f64> {
        col(self, name)
    }

    fn flag(&self, name: &str) -> Result<bool> {
        Ok(col::<i64>(self, name)? != 0)
    }

    fn id(&self, name: &str) -> Result<uuid::Uuid> {
        uuid::Uuid::parse_str(col(self, name)?)
            .map_err(|e| Error::internal(format!("database: column {name}: {e}")))
    }

    fn opt_id(&self, name: &str) -> Result<Option<uuid::Uuid>> {
        if self.is_null(name)? { Ok(None) } else { self.id(name).map(Some) }
    }

    fn ids(&self, name: &str) -> Result<Vec<uuid::Uuid>> {
        let ids: Vec<String> = serde_json::from_str(col(self, name)?).unwrap_or_default();
        Ok(ids.iter().filter_map(|s| uuid::Uuid::parse_str(s).ok()).collect())
    }

    fn ts(&self, name: &str) -> Result<OffsetDateTime> {
        Ok(from_ts(col(self, name)?))
    }

    fn opt_ts(&self, name: &str) -> Result<Option<OffsetDateTime>> {
        Ok(opt_ts(col(self, name)?))
    }

    fn opt_json(&self, name: &str) -> Result<Option<serde_json::Value>> {
        Ok(col::<Option<&str>>(self, name)?.and_then(|s| serde_json::from_str(s).ok()))
    }

    fn is_null(&self, name: &str) -> Result<bool> {
        use sqlx::ValueRef;
        Ok(self.try_get_raw(name).map_err(db)?.is_null())
    }
}

/// The embedded SQLite store: the store contract ([`SqlStore`]) over [`SqliteDb`].
pub type SqliteStore = SqlStore<SqliteDb>;

impl SqliteStore {
    /// Open or create `data_dir/engram.db` and apply migrations.
    pub async fn open(data_dir: &Path) -> Result<Self> {
        Ok(SqlStore(SqliteDb::open(data_dir).await?))
    }
}

/// Whether a connection given back to its pool may serve again: not while it believes
/// itself inside a transaction. SQLite ends a transaction by itself on some errors (a full
/// disk, `SQLITE_FULL`; an I/O error); sqlx then still counts it open, its `ROLLBACK` fails
/// ("no transaction is active"), and every later `BEGIN IMMEDIATE` on the connection was
/// refused: with one writer connection, every write failed until a restart (found by a
/// tester on a full disk). A connection counted in a transaction is pinged, which runs what
/// the dropped transaction queued (its rollback); still counted in one, it is closed, and
/// the pool opens a fresh one. A connection whose transaction ended costs nothing more.
async fn outside_a_transaction(conn: &mut sqlx::SqliteConnection) -> sqlx::Result<bool> {
    use sqlx::Connection as _;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    conn.ping().await?;
    Ok(!conn.is_in_transaction())
}

/// The SQLite database of a [`SqliteStore`]: its connections and vector index.
pub struct SqliteDb {
    /// Readers (several connections; WAL lets them run beside the writer).
    read: SqlitePool,
    /// The one writer connection of this process.
    write: SqlitePool,
    /// Exact per-user vector index, caught up by version before each vector search.
    vectors: VectorCache,
    /// Per-user message and summary vectors, caught up by `vector_seq` before each search.
    transcripts: crate::common::transcript_vectors::TranscriptCache,
}

impl SqliteDb {
    async fn open(data_dir: &Path) -> Result<Self> {
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
            .pragma("cache_size", "-65536")
            // A deleted row's bytes are overwritten on its page, not left beside the rows
            // still there (GDPR erasure). FAST: only where that costs no extra I/O, so the
            // embedding lane's updates are not slowed; a page freed whole keeps its bytes
            // until reused.
            .pragma("secure_delete", "FAST");
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .after_release(|conn, _| Box::pin(outside_a_transaction(conn)))
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
            .after_release(|conn, _| Box::pin(outside_a_transaction(conn)))
            .connect_with(opts.read_only(true))
            .await
            .map_err(db)?;
        Ok(Self { read, write, vectors: VectorCache::default(), transcripts: Default::default() })
    }

    async fn begin(&self) -> Result<Transaction<'static, Sqlite>> {
        self.write.begin_with("BEGIN IMMEDIATE").await.map_err(db)
    }

    /// BM25 keyword search in `table` (`memories`, `messages` or `summaries`, through its FTS5
    /// index) within one scope: the user `user` of `tenant`, or (memories only, `user` None)
    /// the whole tenant. The ids (made by `id`) of the best `k` rows that `narrow` keeps (it
    /// appends conditions on the row, `m`), best first, each with the share of the query's
    /// keyword weight it holds ([`QueryWeights::coverage`]).
    ///
    /// Every index row carries its scope's token (migration 12), ANDed into the query unless
    /// the scope holds every row of the index: FTS5 reads the scope's doclist instead of
    /// every user's postings, and the drop rule of
    /// [`Self::informative_query`] counts within the scope, so no other user or tenant
    /// changes which rows match. BM25's own IDF inside FTS5 stays global: other scopes still
    /// shape the order of the matches, never which rows match.
    #[allow(clippy::too_many_arguments)]
    async fn fts_search<I>(
        &self,
        table: &'static str,
        tenant: &TenantId,
        user: Option<&str>,
        query: &str,
        k: usize,
        narrow: impl FnOnce(&mut QueryBuilder<Sqlite>),
        id: fn(uuid::Uuid) -> I,
    ) -> Result<Vec<(I, f64)>> {
        let Some((fq, weights)) = self.informative_query(query, table, tenant, user).await? else {
            return Ok(vec![]);
        };
        // FTS5 ranks every match and hands them over best first (`ORDER BY rank`), so the
        // join reads rows only until k pass the filter: at 100k messages of one user, a
        // query matching a third of them took ~2× as long when every match was joined
        // and sorted after (benches/README, "the keyword index with each message's
        // context"). A message's index holds its context (migration 11), weighted as
        // BM25F weighs a field; coverage below reads only its own words. The scope column
        // weighs nothing.
        let (tool, weights_sql) = if table == "messages" {
            ("coalesce(m.tool_name, '')", format!("1.0, 1.0, {CONTEXT_WEIGHT:?}, 0.0"))
        } else {
            ("''", "1.0, 0.0".to_string())
        };
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "SELECT m.id AS id, m.content AS content, {tool} AS tool \
             FROM {table}_fts CROSS JOIN {table} m ON m.rowid = {table}_fts.rowid WHERE {table}_fts MATCH "
        ));
        q.push_bind(fq)
            .push(format!(" AND {table}_fts.rank MATCH 'bm25({weights_sql})'"))
            .push(" AND m.tenant_id = ")
            .push_bind(tenant.as_str().to_string());
        narrow(&mut q);
        q.push(format!(" ORDER BY {table}_fts.rank LIMIT {}", common::limit(k)));
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        rows.iter()
            .map(|r| {
                let parts = [r.get::<&str, _>("content"), r.get::<&str, _>("tool")];
                Ok((id(r.id("id")?), weights.coverage(&parts)))
            })
            .collect()
    }

    /// The FTS5 query of `query` in one scope (see [`Self::fts_search`]): its terms
    /// ([`match_terms`]: words, or prefixes of longer words) minus those found in half the
    /// scope's indexed rows or more (when the scope has at least 4 rows): FTS5 gives such
    /// terms an IDF of 1e-6, so a row matching only them would enter the fusion with a
    /// meaningless rank. Unless every term is common: then they are the query ("Miso"
    /// where most memories speak of Miso) and stay. A term's rows are counted by the row's own words (a message's
    /// content and tool name, not its context). Returns the FTS5 query and the weight of every
    /// term (dropped ones included, with their IDF of 1e-6), or None when nothing can match
    /// (no term kept, or no indexed row in the scope).
    async fn informative_query(
        &self,
        query: &str,
        table: &'static str,
        tenant: &TenantId,
        user: Option<&str>,
    ) -> Result<Option<(String, QueryWeights)>> {
        let terms = match_terms(query);
        if terms.is_empty() {
            return Ok(None);
        }
        // The scope's token and row count, kept by the index's triggers (migration 12).
        let (prefix, count) = match table {
            "memories" => (if user.is_some() { "u" } else { "t" }, "memories"),
            "messages" => ("u", "messages"),
            _ => ("u", "summaries"),
        };
        // With the whole index's count (the row '', ''): a scope that holds every row of
        // the index (a store of one user) needs no token, and reading its doclist would cost
        // ~2 ms per term at 100k rows.
        let scope = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT s.id, s.{count}, a.{count} FROM keyword_scopes s, keyword_scopes a \
             WHERE s.tenant_id = ? AND s.user_id = ? AND a.tenant_id = '' AND a.user_id = ''"
        )))
        .bind(tenant.as_str())
        .bind(user.unwrap_or(""))
        .fetch_optional(&self.read)
        .await
        .map_err(db)?;
        let Some(scope) = scope else { return Ok(None) };
        let (id, n, everything) =
            (scope.get::<i64, _>(0), scope.get::<i64, _>(1), scope.get::<i64, _>(2));
        if n <= 0 {
            return Ok(None);
        }
        let token =
            if n == everything { String::new() } else { format!("scope : {prefix}{id} AND ") };
        // A query word matches the row's words, never its scope token.
        let (own, all) = match table {
            "messages" => ("{content tool_name}", "{content tool_name context}"),
            _ => ("{content}", "{content}"),
        };
        // One statement: a row per term, `(index in terms, rows of the scope holding it)`.
        let mut q = QueryBuilder::<Sqlite>::new("");
        for (i, t) in terms.iter().enumerate() {
            if i > 0 {
                q.push(" UNION ALL ");
            }
            q.push(format!("SELECT {i}, count(*) FROM {table}_fts WHERE {table}_fts MATCH "))
                .push_bind(format!("{token}{own} : {}", t.fts5()));
        }
        let mut df = vec![0i64; terms.len()];
        for r in q.build().fetch_all(&self.read).await.map_err(db)? {
            if let Some(slot) = usize::try_from(r.get::<i64, _>(0)).ok().and_then(|i| df.get_mut(i))
            {
                *slot = r.get::<i64, _>(1);
            }
        }
        let common = |i: usize| n >= MIN_ROWS_FOR_IDF && df[i] * 2 >= n;
        let weights = QueryWeights {
            terms: terms
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let w = if common(i) { 1e-6 } else { term_weight(n as f64, df[i] as f64) };
                    (t.clone(), w)
                })
                .collect(),
        };
        // The informative terms, or every term when all are common: a query made only of
        // words most rows hold ("Miso" in a store about the user's dog) asks for exactly
        // those rows, and dropping its words would find nothing at all.
        let all_common = (0..terms.len()).all(common);
        let keep: Vec<String> = terms
            .iter()
            .enumerate()
            .filter(|(i, _)| all_common || !common(*i))
            .map(|(_, t)| t.fts5())
            .collect();
        if keep.is_empty() {
            return Ok(None);
        }
        Ok(Some((format!("{token}{all} : ({})", keep.join(" OR ")), weights)))
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
        // What changed since the version the index has: rows written, rows purged.
        let changed = "tenant_id = ? AND user_id = ? AND version > ? AND version <= ?";
        let since = [Arg::Text(tenant), Arg::Text(user), Arg::Int(have), Arg::Int(db_version)];
        let written = format!(
            "SELECT id, pool, kind, category, observed_at, expires_at, superseded_at, embedding \
             FROM memories WHERE {changed}"
        );
        let rows = self.read_all(&written, &since).await?;
        let purged = format!("SELECT memory_id FROM memory_tombstones WHERE {changed}");
        let tombs = self.read_all(&purged, &since).await?;
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

/// Append the WHERE conditions of a memory filter (the query already has `WHERE tenant_id = ?`).
/// ` AND <p>user_id = … [AND <p>created_at >= since] [AND <p>created_at < until]`.
fn push_window(q: &mut QueryBuilder<Sqlite>, f: &TranscriptFilter, t: Transcript, p: &str) {
    let (start, end) = t.span();
    q.push(format!(" AND {p}user_id = ")).push_bind(f.user.as_str().to_string());
    if let Some(at) = f.since {
        q.push(format!(" AND {p}{end} >= ")).push_bind(ts(at));
    }
    if let Some(at) = f.until {
        q.push(format!(" AND {p}{start} < ")).push_bind(ts(at));
    }
}

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
    if let Some(c) = &f.source_conversation {
        q.push(" AND source_conversation_id = ").push_bind(c.as_str().to_string());
    }
    if let Some(o) = f.rating {
        q.push(rating_condition(o, ""));
    }
    if !f.include_superseded {
        q.push(" AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > ")
            .push_bind(now)
            .push(")");
    }
}

/// The candidates of [`common::typos`]: per prefix, an FTS5 prefix query of the row's own
/// words within the scope's token (migration 12), at most `rows` rows read.
#[async_trait]
impl common::typos::PrefixWords for SqliteDb {
    async fn prefix_words(
        &self,
        tenant: &TenantId,
        user: Option<&str>,
        table: &'static str,
        prefixes: &[String],
        rows: usize,
    ) -> Result<Vec<Vec<(String, usize)>>> {
        let mut out = vec![Vec::new(); prefixes.len()];
        let kind = if table == "memories" && user.is_none() { "t" } else { "u" };
        let scope: Option<i64> =
            sqlx::query("SELECT id FROM keyword_scopes WHERE tenant_id = ? AND user_id = ?")
                .bind(tenant.as_str())
                .bind(user.unwrap_or(""))
                .fetch_optional(&self.read)
                .await
                .map_err(db)?
                .map(|r| r.get(0));
        let Some(scope) = scope else { return Ok(out) };
        let (own, tool, active) = match table {
            "messages" => ("{content tool_name}", "coalesce(m.tool_name, '')", ""),
            "memories" => ("{content}", "''", " AND m.superseded_at IS NULL"),
            _ => ("{content}", "''", ""),
        };
        let sql = format!(
            "SELECT m.content, {tool} FROM {table}_fts CROSS JOIN {table} m \
             ON m.rowid = {table}_fts.rowid WHERE {table}_fts MATCH ? AND m.tenant_id = ?{active} \
             LIMIT {}",
            common::limit(rows)
        );
        for (p, words) in prefixes.iter().zip(out.iter_mut()) {
            let term = crate::text::MatchTerm { text: p.clone(), prefix: true };
            let found = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                .bind(format!("scope : {kind}{scope} AND {own} : {}", term.fts5()))
                .bind(tenant.as_str())
                .fetch_all(&self.read)
                .await
                .map_err(db)?;
            for r in found {
                let text = crate::text::index_text(&[r.get::<&str, _>(0), r.get::<&str, _>(1)]);
                common::typos::count_words(&text, p, words);
            }
        }
        Ok(out)
    }
}
