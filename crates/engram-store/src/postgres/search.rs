//! Vector and full-text search on PostgreSQL.
//!
//! # Vectors
//!
//! `memories.embedding` is an untyped pgvector `vector`: the store's dimension is only known
//! at the first vector, and a re-embed (`set_vectors` then `reset_embedding_space`) may move
//! every row to another dimension. Scores are the inner product, exactly what the SQLite
//! store computes (equal to the cosine for the unit vectors every embedder returns).
//!
//! **Exact by default.** A search is always about one user; one statement reads the user's
//! active vectors (stopping after [`EXACT_SCAN_LIMIT`] + 1), counts them and, if they are at
//! most [`EXACT_SCAN_LIMIT`], ranks every row of the scope: `ORDER BY embedding <#> $q` on the untyped column, which no HNSW index can
//! serve, so the plan is a btree on `(tenant_id, user_id)` plus a sort — the same result
//! as a brute-force scan, like the SQLite store.
//!
//! **A covering index for the exact path** (migration 5, [`covering_index_ddl`]):
//! `memories_vec_N` on `(tenant_id, user_id) INCLUDE (id, kind, category, observed_at,
//! expires_at, superseded_at, embedding)`, partial on active rows of N dimensions whose
//! tenant and user ids take at most 512 bytes together. The user's vectors sit next to each
//! other in its leaf pages, so the scan is index-only (rows of all users are interleaved in
//! the heap: a user of 10k sat on ~10k heap pages); the pool, the one filter column it does
//! not hold (up to 256 characters), is checked in the heap after the sort, row by row in
//! score order until k rows pass. It exists only for N ≤ [`COVERING_MAX_DIMS`] (a btree
//! tuple must fit ~2.7 kB; 1536 dimensions would make inserts fail), created with the space
//! (`ensure_space`) and dropped with it on a reset; larger spaces and longer ids read the
//! heap as before. Index-only scans skip only pages the visibility map marks all-visible,
//! so the migration makes autovacuum visit `memories` after 2 % of it changed. Measured at
//! 1M rows, user of 10k, 384 dimensions (`benches/README.md`): vector step p50 / p95 28.7 /
//! 33.6 → 12.8 / 15.6 ms; it costs ~2.6 GB of index per million rows of 384 dimensions.
//!
//! **An HNSW index per large scope, built when first needed.** No HNSW index exists until a
//! search finds a scope over the limit. That search ranks the whole scope exactly (correct,
//! slower: ~0.15–0.3 s at 100k vectors) and starts building, in the background, the scope's
//! own partial index (N = the space's dimension, ≤ 2000, pgvector's HNSW limit):
//!
//! ```sql
//! CREATE INDEX CONCURRENTLY memories_hnsw_N_<16 hex of md5(tenant, user)> ON memories
//!     USING hnsw ((embedding::vector(N)) vector_ip_ops)
//!     WHERE tenant_id = '…' AND user_id = '…' AND vector_dims(embedding) = N AND superseded_at IS NULL
//! ```
//!
//! on a connection of its own holding a session advisory lock (one build at a time per
//! database, across processes; an invalid index left by an interrupted build is dropped and
//! built again). Writes go on during the build; searches of the scope stay exact until it
//! is valid, then go through it (`hnsw.iterative_scan = strict_order`, approximate there)
//! without counting the scope first. The trade-off: every write pays the graph insertion
//! (~95 % of a PostgreSQL write, `benches/README.md`) only for rows of a scope that has an
//! index, so a deployment whose users all stay under the limit never maintains a graph; a
//! scope that grows past it is searched exactly (its latency grows with it) until its build
//! ends (~20–40 s at 100k vectors on 2 cores). Being partial on one user, the graph holds
//! only that user's rows, so the search walks no other user's vectors (a table-wide graph
//! under a 10 % filter found 0.54 of the exact top 10). Stores of earlier versions keep
//! their table-wide `memories_hnsw_N`, used for scopes over the limit until theirs exists;
//! dropping it makes every other write cheaper. [`PgStore::build_scope_index`] builds one
//! scope's index at once (tests, benchmarks, operators). Known limit: a process that exits
//! during a build (a one-shot CLI search of a large scope) leaves an invalid index, which
//! writes keep maintaining until the next search of that scope rebuilds it.
//!
//! **`ef_search = 1000`** (pgvector's maximum) on the index path. Measured on the 1M-row
//! bench table (`benches/README.md`; 200 queries, the user of 100,000 vectors, its own
//! index, m = 16, ef_construction = 64, load 2–4), recall@10 against the exact top 10 and
//! p50 / p95 latency: ef 200 0.86–0.87 in 1.9 / 5.2 ms, ef 400 0.94 in 8.4 / 21 ms, ef 1000
//! 0.97 in 9.3 / 19.5 ms; m = 24, ef_construction = 128 (build 59 s instead of 34 s) gave
//! no more (0.97 at ef 1000); exact 172–198 / 195–265 ms. The synthetic facts are
//! template sentences whose top 10 are near-ties, so no setting reaches 0.99 there; the
//! exact path would (1.0) at ~20× the latency, so scopes over the limit trade 3 % of
//! recall for speed. Rows updated in place where their page is full (the access count
//! every search bumps) enter the graph again as a duplicate vector until VACUUM: at ef 200,
//! 0.87 on the vacuumed table, 0.80 and 0.61 after one and two benchmark runs' searches (a
//! few thousand such updates of the 100k scope).
//!
//! Measured with the earlier table-wide index (2 cores, PostgreSQL 18.6, pgvector 0.8.6, HNSW
//! m = 16, ef_construction = 64, 384 dimensions; 200 000 rows: 80 users × 1 000 rows, one of 20 000 and one of 100 000, each
//! user's rows drawn around 30–300 topic centres; 20–30 queries per line; recall@10 against
//! the exact top 10 of the same filter):
//!
//! | scope (rows in the filter)          | exact     | HNSW, strict_order           |
//! |-------------------------------------|-----------|------------------------------|
//! | user of 1 000 rows                  | 0.5–0.8 ms| ef 40: 0.72 in 13.5 ms; ef 200: 0.99 in 3.7 ms; ef 400: 0.99 in 8.5 ms |
//! | same user, one category (~170 rows) | 0.3 ms    | ef 200: 0.80 in 52 ms; ef 400: 0.76 in 75 ms |
//! | user of 20 000 rows                 | 21–25 ms  | ef 40: 0.93 in 1.3 ms; ef 200: 0.95–0.96 in 2.2–3.3 ms |
//! | same user, one category (~3 300)    | 19 ms     | ef 200: 0.97 in 1.7 ms       |
//! | user of 100 000 rows                | 180 ms    | ef 40: 0.71 in 2.1 ms; ef 200: 0.91 in 3.2 ms |
//! | same user, one category (~16 700)   | 152 ms    | ef 200: 0.92 in 3.0 ms       |
//! | user of 1 000, iterative scan off   |           | 9 of 30 queries returned fewer than 10 rows |
//!
//! So under a restrictive scope filter (the normal case: one user among many) the HNSW walk
//! is both slower and wrong (recall 0.72–0.99), while the exact path costs about 1 µs per row
//! of the scope. Exact up to 50 000 rows (≈ 90 ms) keeps the contract ("exact search") for
//! every realistic user; beyond that the index trades exactness for latency (below). Tests lower the limit ([`super::PgStore::set_exact_scan_limit`]) to exercise the
//! index path.
//!
//! # Full text
//!
//! `fts` is `to_tsvector('simple', fts_text)`, where `fts_text` is the content split into
//! words like a query ([`crate::text::index_text`]). The query's terms
//! ([`crate::text::query_terms`], diacritics folded, then cut by [`crate::text::match_term`]
//! like the SQLite store's) go through the same `to_tsvector`, and each resulting lexeme
//! becomes a quoted, escaped `tsquery` term, `'lexeme'` or the prefix `'lexeme':*` (never a
//! syntax error). The ranking is BM25 computed in SQL: FTS5's formula with k1 = 1.2,
//! b = 0.75 and lexeme counts as document lengths, with the statistics (row count, average
//! length, document frequencies) of the user's corpus — every row of the tenant and user, or
//! of the tenant when the search names no user — rather than the SQLite store's global FTS5
//! vocabulary, which mixes tenants. Terms found in half of the corpus or more (when it has at
//! least 4 rows) are dropped, as in the SQLite store, unless every term of the query is
//! (then they are the query, and stay with an IDF of 1e-6); for a prefix term both count the
//! rows of each word the prefix starts and add them up (an upper bound; a search that names no
//! user counts the distinct rows, which differs only for a prefix near the 50 % line).
//!
//! A search of one user reads nothing of other users (migration 4). The row count, mean
//! length and document frequencies come from `memory_fts_stats`, kept per (tenant, user)
//! and lexeme by statement triggers on every insert and delete of memories: one row per term
//! (a prefix sums the rows of the words it starts, the upper bound the SQLite store uses to
//! drop common terms; a kept prefix of several words is then counted exactly through the
//! postings). Counting them from the rows instead cost a heap visit per matching row (GIN
//! has no index-only scans; ~10,000 page visits for a word in every row of a user of 10k).
//! The matching rows come from the user's own postings: a GIN index on
//! `engram_scoped_fts(tenant_id, user_id, fts)`, the row's lexemes each prefixed with an
//! 8-hex key of its tenant and user (`'k1b2c3d4_maya'`), so a query term `'<key>_maya'` or
//! `'<key>_siste':*` reads one short posting list of that user instead of the term's
//! table-wide list (which migration 3's `btree_gin` index on `(tenant_id, user_id, fts)`
//! still decoded whole: 4–22 ms per term at 1M rows against ~0.1 ms). Two users sharing a
//! key share postings; the statement still filters `tenant_id` and `user_id`, so that costs
//! speed, never results. The index keeps the first 500 characters of a lexeme
//! (`SCOPED_TERM_CHARS`): shorter query terms match a cut lexeme exactly as the whole one,
//! longer ones go through the unscoped index. Messages, and a search that names no user,
//! count their statistics from the rows (migration 3: an index-only scan of `(tenant_id,
//! user_id, fts_len)` and a count per term that stops at half the corpus, where the term is
//! dropped anyway). Measured in `benches/README.md` ("PostgreSQL beside SQLite").
//!
//! A message also matches through its context (`ctx_fts`, migration 10: the words of the
//! two messages before it), a term it holds weighing [`CONTEXT_WEIGHT`] and its lexemes
//! adding to the row's length, as FTS5's `bm25()` weighs the SQLite store's context column;
//! document frequencies (hence IDF and the drop of common terms) and coverage read the
//! message's own `fts` only. A message's terms count by presence, where FTS5 counts
//! occurrences, and FTS5's IDF counts a row matching in any column: the two stores order a
//! message that repeats a query word, or a term found mostly in contexts, a little
//! differently.

use std::collections::BTreeSet;
use std::sync::Mutex;

use engram_core::error::{Error, Result};
use engram_core::model::{MemoryId, TenantId, UserId};
use engram_core::store::{MemoryFilter, TranscriptFilter};
use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool, Postgres, QueryBuilder, Row};
use time::OffsetDateTime;
use uuid::Uuid;

use super::rows::col;
use super::{PgDb, db, push_filter};
use crate::common::memories::{embedding_space as space, same_space};
use crate::common::store::{Ranked, Transcript};
use crate::text::{CONTEXT_WEIGHT, fold_diacritics, match_term, query_terms};

/// Scopes with at most this many active vectors are searched exactly (see the module docs).
pub const EXACT_SCAN_LIMIT: usize = 50_000;
/// pgvector's HNSW index on `vector` supports up to 2000 dimensions.
const HNSW_MAX_DIMS: usize = 2000;
/// `hnsw.ef_search` of the index path: pgvector's maximum (recall@10 0.97 against 0.86 at
/// 200 for a scope of 100k, see the module docs).
pub const HNSW_EF_SEARCH: usize = 1000;
/// `hnsw.max_scan_tuples` of the index path: how far an iterative scan may go for a filter.
const HNSW_MAX_SCAN_TUPLES: usize = 200_000;
/// Query terms at least this long (characters) are matched through the unscoped index: the
/// per-user one (migration 4) holds lexemes cut to this length.
const SCOPED_TERM_CHARS: usize = 500;
/// Dimensions up to which the exact path has a covering btree index (`memories_vec_<N>`,
/// migration 5): a btree tuple must fit ~2.7 kB, and a vector of N dimensions takes 4N + 8
/// bytes next to the ids.
const COVERING_MAX_DIMS: usize = 500;
/// Scopes whose tenant and user ids take at most this many bytes together are in the covering
/// index (its predicate): with them every tuple fits a btree page.
const COVERING_MAX_ID_BYTES: usize = 512;
/// Advisory lock taken while the embedding space (meta rows, HNSW index) changes.
const SPACE_LOCK: i64 = 0x656e_6772_616d_0002;
/// Session advisory lock held while a scope's HNSW index is built (one build at a time).
const INDEX_BUILD_LOCK: i64 = 0x656e_6772_616d_0003;
/// `maintenance_work_mem` of a scope's index build.
const HNSW_BUILD_MEMORY: &str = "512MB";

/// The table-wide HNSW index of `dims` that versions before lazy per-scope indexes created
/// for every store (still used when present).
fn hnsw_index_name(dims: usize) -> String {
    format!("memories_hnsw_{dims}")
}

/// SQL for the name of a scope's HNSW index, `memories_hnsw_<dims>_<16 hex of md5(tenant,
/// U+001F, user)>` (ids contain no control characters, so the input is unambiguous), from
/// the parameters `$1` tenant, `$2` user, `$3` dims.
const SCOPE_INDEX_NAME: &str =
    "'memories_hnsw_' || $3::int || '_' || left(md5($1::text || chr(31) || $2::text), 16)";

/// Whether the scope's own HNSW index of `dims` is valid, and whether the table-wide one is.
async fn scope_indexes(
    pool: &PgPool,
    tenant: &TenantId,
    user: &UserId,
    dims: usize,
) -> Result<(bool, bool)> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT c.relname::text AS name, i.indisvalid AS valid FROM pg_class c \
         JOIN pg_index i ON i.indexrelid = c.oid \
         WHERE c.relnamespace = current_schema()::regnamespace \
         AND c.relname IN ({SCOPE_INDEX_NAME}, $4)"
    )))
    .bind(tenant.as_str())
    .bind(user.as_str())
    .bind(i32::try_from(dims).unwrap_or(i32::MAX))
    .bind(hnsw_index_name(dims))
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let mut out = (false, false);
    for r in &rows {
        let valid: bool = col(r, "valid")?;
        if col::<String>(r, "name")? == hnsw_index_name(dims) {
            out.1 = valid;
        } else {
            out.0 = valid;
        }
    }
    Ok(out)
}

/// Scopes whose index this process is building (a search of such a scope starts no other).
static BUILDING: Mutex<BTreeSet<(String, String, usize)>> = Mutex::new(BTreeSet::new());

/// Start building a scope's index in the background, unless this process already is.
fn spawn_scope_index_build(pool: PgPool, tenant: TenantId, user: UserId, dims: usize) {
    let key = (tenant.as_str().to_string(), user.as_str().to_string(), dims);
    if !BUILDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.clone()) {
        return;
    }
    tokio::spawn(async move {
        let t = std::time::Instant::now();
        match build_scope_index(&pool, &tenant, &user, dims, false).await {
            Ok(true) => tracing::info!(
                tenant = tenant.as_str(),
                user = user.as_str(),
                dims,
                seconds = t.elapsed().as_secs_f64(),
                "built the HNSW index of a scope over the exact-search limit"
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                tenant = tenant.as_str(),
                user = user.as_str(),
                "building the HNSW index of a scope failed (searches stay exact): {e}"
            ),
        }
        BUILDING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&key);
    });
}

/// Build a scope's partial HNSW index with `CREATE INDEX CONCURRENTLY` (writes go on), on a
/// connection of its own holding [`INDEX_BUILD_LOCK`]: one build at a time per database,
/// across processes. `wait`: wait for the lock (else return false if another build runs).
/// An invalid index left by an interrupted build is dropped and built again. Returns whether
/// the index is valid afterwards.
async fn build_scope_index(
    pool: &PgPool,
    tenant: &TenantId,
    user: &UserId,
    dims: usize,
    wait: bool,
) -> Result<bool> {
    let opts = pool.connect_options();
    let mut conn = PgConnection::connect_with(&opts).await.map_err(db)?;
    let result = async {
        // Waiting is polling: a session blocked in pg_advisory_lock is a running transaction,
        // which the other session's CREATE INDEX CONCURRENTLY waits for (a deadlock).
        loop {
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(INDEX_BUILD_LOCK)
                .fetch_one(&mut conn)
                .await
                .map_err(db)?;
            if got {
                break;
            }
            if !wait {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let dims_i32 = i32::try_from(dims).unwrap_or(i32::MAX);
        // The DDL is written by the server (%I, %L quote the name and the ids).
        let r = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT n.name, i.indisvalid AS valid, \
             format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON memories USING hnsw \
             ((embedding::vector(%s)) vector_ip_ops) WHERE tenant_id = %L AND user_id = %L \
             AND vector_dims(embedding) = %s AND superseded_at IS NULL', n.name, $3, $1, $2, $3) AS ddl \
             FROM (SELECT {SCOPE_INDEX_NAME} AS name) n \
             LEFT JOIN pg_class c ON c.relname = n.name AND c.relnamespace = current_schema()::regnamespace \
             LEFT JOIN pg_index i ON i.indexrelid = c.oid"
        )))
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(dims_i32)
        .fetch_one(&mut conn)
        .await
        .map_err(db)?;
        let name: String = col(&r, "name")?;
        let valid: Option<bool> = col(&r, "valid")?;
        let ddl: String = col(&r, "ddl")?;
        match valid {
            Some(true) => return Ok(true),
            Some(false) => {
                // Left by a build that was interrupted (we hold the lock: nobody builds it).
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP INDEX CONCURRENTLY IF EXISTS \"{name}\""
                )))
                .execute(&mut conn)
                .await
                .map_err(db)?;
            }
            None => {}
        }
        // The graph of a 100k-vector scope (384 dimensions) takes ~200 MB: built in memory
        // when it fits (much faster than on disk).
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SET maintenance_work_mem = '{HNSW_BUILD_MEMORY}'"
        )))
        .execute(&mut conn)
        .await
        .map_err(db)?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(ddl)).execute(&mut conn).await.map_err(db)?;
        Ok(true)
    }
    .await;
    // Closing the session releases the lock and the setting.
    let _ = conn.close().await;
    result
}

/// The covering index of the exact path for vectors of `dims` (migration 5 creates it for
/// stores that had a space before it; keep both in step), or None if its tuples might not fit
/// a btree page. The user's active vectors and every column a filter reads sit together in
/// its leaf pages: the exact path is an index-only scan instead of one heap page per row.
fn covering_index_ddl(dims: usize) -> Option<String> {
    (dims <= COVERING_MAX_DIMS).then(|| {
        format!(
            "CREATE INDEX IF NOT EXISTS memories_vec_{dims} ON memories (tenant_id, user_id) \
             INCLUDE (id, kind, category, observed_at, expires_at, superseded_at, embedding) \
             WHERE superseded_at IS NULL AND vector_dims(embedding) = {dims} \
             AND octet_length(tenant_id) + octet_length(user_id) <= {COVERING_MAX_ID_BYTES}"
        )
    })
}

/// Where a text search looks.
pub(crate) enum TextScope<'a> {
    /// Memories of a tenant admitted by a filter.
    Memories(&'a TenantId, &'a MemoryFilter),
    /// Messages or summaries of one user in a time window.
    Transcript(&'a TenantId, &'a TranscriptFilter, Transcript),
}

impl TextScope<'_> {
    fn table(&self) -> &'static str {
        match self {
            TextScope::Memories(..) => "memories",
            TextScope::Transcript(_, _, t) => t.table(),
        }
    }

    /// The tenant and, if the search names one, the user: the corpus whose statistics rank
    /// a search.
    fn corpus(&self) -> (&TenantId, Option<&UserId>) {
        match self {
            TextScope::Memories(t, f) => (*t, f.user_id.as_ref()),
            TextScope::Transcript(t, f, _) => (*t, Some(&f.user)),
        }
    }

    /// `<p>tenant_id = … [AND <p>user_id = …]`: the corpus whose statistics rank a search.
    fn push_corpus(&self, q: &mut QueryBuilder<Postgres>, p: &str) {
        let (t, u) = self.corpus();
        q.push(format!("{p}tenant_id = ")).push_bind(t.as_str().to_string());
        if let Some(u) = u {
            q.push(format!(" AND {p}user_id = ")).push_bind(u.as_str().to_string());
        }
    }

    /// `<p>tenant_id = … AND …` for this scope.
    fn push_where(&self, q: &mut QueryBuilder<Postgres>, now: OffsetDateTime, p: &str) {
        match self {
            TextScope::Memories(t, f) => {
                q.push(format!("{p}tenant_id = ")).push_bind(t.as_str().to_string());
                push_filter(q, f, now, p);
            }
            TextScope::Transcript(t, f, table) => {
                q.push(format!("{p}tenant_id = ")).push_bind(t.as_str().to_string());
                super::push_window(q, f, *table, p);
            }
        }
    }
}

impl PgDb {
    /// Record the embedding space (first use, or `reset`; a reset drops the HNSW indexes of
    /// other dimensions). HNSW indexes are made per scope, when a search needs one.
    pub(super) async fn ensure_space(
        &self,
        model_id: &str,
        dims: usize,
        reset: bool,
    ) -> Result<()> {
        if !reset && let Some((m, d)) = space(self).await? {
            return same_space((&m, d), (model_id, dims));
        }
        let mut tx = self.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SPACE_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        if !reset {
            // Another process may have recorded a space since the check above.
            let rows = sqlx::query(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dims')",
            )
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?;
            if rows.len() == 2 {
                tx.commit().await.map_err(db)?;
                return Box::pin(self.ensure_space(model_id, dims, false)).await;
            }
        }
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES ('embedding_model', $1), ('embedding_dims', $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(model_id)
        .bind(dims.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        if reset {
            // Indexes of other dimensions serve no search any more.
            let rows = sqlx::query(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() \
                 AND tablename = 'memories' AND (indexname LIKE 'memories\\_hnsw\\_%' \
                 OR indexname LIKE 'memories\\_vec\\_%')",
            )
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?;
            for r in &rows {
                let name: String = col(r, "indexname")?;
                // memories_hnsw_<dims> (table-wide), memories_hnsw_<dims>_<scope key> or
                // memories_vec_<dims> (covering).
                let rest = name
                    .strip_prefix("memories_hnsw_")
                    .or_else(|| name.strip_prefix("memories_vec_"))
                    .unwrap_or_default();
                let d = rest.split('_').next().unwrap_or_default();
                let key = rest.get(d.len()..).unwrap_or_default().trim_start_matches('_');
                if !d.is_empty()
                    && d.chars().all(|c| c.is_ascii_digit())
                    && d != dims.to_string()
                    && key.chars().all(|c| c.is_ascii_hexdigit())
                {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP INDEX IF EXISTS {name}")))
                        .execute(&mut *tx)
                        .await
                        .map_err(db)?;
                }
            }
        }
        // The covering index of the exact path (built in this transaction: a new store has
        // few rows, a re-embed blocks writes meanwhile).
        if let Some(ddl) = covering_index_ddl(dims) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(ddl)).execute(&mut *tx).await.map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    pub(super) async fn vector_search_impl(
        &self,
        q: Ranked<'_, &MemoryFilter, [f32]>,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let (tenant, filter, vector, k) = (q.tenant, q.scope, q.query, q.k);
        let Some(user) = &filter.user_id else {
            return Err(Error::invalid("user_id", "vector search needs a user_id"));
        };
        if k == 0 || vector.is_empty() {
            return Ok(vec![]);
        }
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid(
                "vector",
                "the query vector has NaN or infinite components",
            ));
        }
        let dims = vector.len();
        // Like the SQLite index: only active, unexpired rows, whatever the filter says.
        let f = MemoryFilter { include_superseded: false, ..filter.clone() };
        let limit = self.exact_limit();
        let now = OffsetDateTime::now_utc();
        let query = pgvector::Vector::from(vector.to_vec());
        let k = i64::try_from(k).unwrap_or(i64::MAX);
        // An index of this dimension covers exactly the rows of that dimension (its
        // predicate), so whether it is the store's space only matters for building one.
        let indexable = dims <= HNSW_MAX_DIMS && limit != usize::MAX;
        let indexes = if indexable {
            scope_indexes(&self.pool, tenant, user, dims).await?
        } else {
            (false, false)
        };
        // A scope with an index of its own was found over the limit before: no count.
        let mut use_index = indexes.0;
        let mut rows = Vec::new();
        let mut in_scope = 0;
        if !use_index {
            // One pass over the user's active vectors of this dimension (at most limit + 1 of
            // them) both counts them and scores those the filter admits: if there are more
            // than `limit`, the scores are thrown away and an index answers, or every row is
            // ranked. With the dimension and the id length as literals the pass is an
            // index-only scan of the covering index (`covering_index_ddl`), which holds every
            // column it reads but the pool; the pool is checked in the heap after the sort,
            // row by row in score order until k rows pass (about k lookups).
            let covered = covering_index_ddl(dims).is_some()
                && tenant.as_str().len() + user.as_str().len() <= COVERING_MAX_ID_BYTES;
            let in_index = MemoryFilter { pool: None, ..f.clone() };
            let mut q = QueryBuilder::<Postgres>::new(
                "WITH s AS MATERIALIZED (SELECT id, -(embedding <#> ",
            );
            q.push_bind(query.clone()).push(") AS score, (true");
            push_filter(&mut q, &in_index, now, "");
            q.push(") AS ok FROM memories WHERE tenant_id = ")
                .push_bind(tenant.as_str().to_string())
                .push(" AND user_id = ")
                .push_bind(user.as_str().to_string())
                .push(format!(
                    " AND superseded_at IS NULL AND vector_dims(embedding) = {dims}{} LIMIT ",
                    if covered {
                        format!(
                            " AND octet_length(tenant_id) + octet_length(user_id) <= {COVERING_MAX_ID_BYTES}"
                        )
                    } else {
                        String::new()
                    }
                ))
                .push_bind(i64::try_from(limit).unwrap_or(i64::MAX - 1).saturating_add(1))
                .push("), c AS (SELECT count(*) AS n FROM s) SELECT c.n, h.id, h.score FROM c LEFT JOIN LATERAL (SELECT o.id, o.score FROM (SELECT id, score FROM s WHERE c.n <= ")
                .push_bind(i64::try_from(limit).unwrap_or(i64::MAX - 1))
                .push(" AND ok ORDER BY score DESC, id OFFSET 0) o");
            if let Some(pool) = &f.pool {
                // OFFSET 0 keeps the sort below this check, so it runs only until k rows pass.
                q.push(" WHERE (SELECT (m.pool = ")
                    .push_bind(pool.clone())
                    .push(" OR m.pool IS NULL OR m.kind = 'shared') FROM memories m WHERE m.tenant_id = ")
                    .push_bind(tenant.as_str().to_string())
                    .push(" AND m.id = o.id)");
            }
            q.push(" LIMIT ").push_bind(k).push(") h ON true");
            rows = q.build().fetch_all(&self.pool).await.map_err(db)?;
            in_scope = match rows.first() {
                Some(r) => usize::try_from(col::<i64>(r, "n")?).unwrap_or(0),
                None => 0,
            };
            if in_scope > limit && indexable && space(self).await?.is_some_and(|(_, d)| d == dims) {
                // Build the scope's index in the background; until it is there, a table-wide
                // index of an older version serves, or the whole scope is ranked.
                spawn_scope_index_build(self.pool.clone(), tenant.clone(), user.clone(), dims);
                use_index = indexes.1;
            }
        }
        let mut hits: Vec<(MemoryId, f32)> = if use_index {
            let mut tx = self.begin().await?;
            for (name, value) in [
                ("hnsw.iterative_scan", "strict_order".to_string()),
                ("hnsw.ef_search", self.ef_search().to_string()),
                ("hnsw.max_scan_tuples", HNSW_MAX_SCAN_TUPLES.to_string()),
                // The scope's partial index names the tenant and user as constants: only a
                // plan made for the bound values can prove that the index applies.
                ("plan_cache_mode", "force_custom_plan".to_string()),
            ] {
                sqlx::query("SELECT set_config($1, $2, true)")
                    .bind(name)
                    .bind(value)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
            // The expression and the predicate must be those of the partial index, with the
            // dimension as a literal (a parameter would not let the planner use it).
            let mut q = QueryBuilder::<Postgres>::new(format!(
                "SELECT id, -((embedding::vector({dims})) <#> "
            ));
            q.push_bind(query.clone())
                .push(format!("::vector({dims})) AS score FROM memories WHERE tenant_id = "))
                .push_bind(tenant.as_str().to_string());
            push_filter(&mut q, &f, now, "");
            q.push(format!(
                " AND vector_dims(embedding) = {dims} AND superseded_at IS NULL \
                 ORDER BY (embedding::vector({dims})) <#> "
            ))
            .push_bind(query)
            .push(format!("::vector({dims}) LIMIT "))
            .push_bind(k);
            let rows = q.build().fetch_all(&mut *tx).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            rows.iter()
                .map(|r| Ok((MemoryId(col(r, "id")?), col::<f64>(r, "score")? as f32)))
                .collect::<Result<_>>()?
        } else if in_scope > limit {
            // Too many rows for the exact path and no usable index: rank them all.
            let mut q = QueryBuilder::<Postgres>::new("SELECT id, -(embedding <#> ");
            q.push_bind(query).push(") AS score FROM memories WHERE tenant_id = ");
            q.push_bind(tenant.as_str().to_string());
            push_filter(&mut q, &f, now, "");
            q.push(" AND embedding IS NOT NULL AND vector_dims(embedding) = ")
                .push_bind(i32::try_from(dims).unwrap_or(i32::MAX))
                .push(" ORDER BY score DESC, id LIMIT ")
                .push_bind(k);
            let rows = q.build().fetch_all(&self.pool).await.map_err(db)?;
            rows.iter()
                .map(|r| Ok((MemoryId(col(r, "id")?), col::<f64>(r, "score")? as f32)))
                .collect::<Result<_>>()?
        } else {
            rows.iter()
                .filter_map(|r| match r.try_get::<Option<Uuid>, _>("id") {
                    Ok(Some(id)) => {
                        Some(col::<f64>(r, "score").map(|score| (MemoryId(id), score as f32)))
                    }
                    Ok(None) => None,
                    Err(e) => Some(Err(db(e))),
                })
                .collect::<Result<_>>()?
        };
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(hits)
    }

    /// Build the HNSW index of one user's scope now (what a search does in the background
    /// when it finds the scope over the exact limit), waiting for a build another process
    /// runs. Returns whether the index is valid afterwards (false: no embedding space yet, or
    /// vectors of more dimensions than HNSW supports). For operators' tools, the benchmarks
    /// and tests.
    pub async fn build_scope_index(&self, tenant: &TenantId, user: &UserId) -> Result<bool> {
        let Some((_, dims)) = space(self).await? else { return Ok(false) };
        if dims > HNSW_MAX_DIMS {
            return Ok(false);
        }
        build_scope_index(&self.pool, tenant, user, dims, true).await
    }

    /// Keyword search in `scope`: the ids (made by `id`) and scores of the best `k` rows.
    pub(super) async fn text_search_impl<I>(
        &self,
        scope: TextScope<'_>,
        query: &str,
        k: usize,
        id: fn(Uuid) -> I,
    ) -> Result<Vec<(I, f64)>> {
        // Diacritics folded first (the index is folded), then cut like the SQLite store cuts
        // (a prefix of a long word, `crate::text::match_term`).
        let mut terms: Vec<String> = Vec::new();
        let mut prefixes: Vec<bool> = Vec::new();
        for t in query_terms(query) {
            let m = match_term(&fold_diacritics(&t));
            if !terms.iter().zip(&prefixes).any(|(x, p)| *x == m.text && *p == m.prefix) {
                terms.push(m.text);
                prefixes.push(m.prefix);
            }
        }
        if terms.is_empty() || k == 0 {
            return Ok(vec![]);
        }
        let now = OffsetDateTime::now_utc();
        let table = scope.table();
        // A search of one user matches through that user's postings (migration 4): every
        // lexeme, and every query term, carries the user's key. Terms of SCOPED_TERM_CHARS
        // characters or more (never a real word) go through the unscoped index, because the
        // scoped one holds lexemes cut to that length.
        let (tenant, user) = scope.corpus();
        let scoped = user.filter(|_| terms.iter().all(|t| t.chars().count() < SCOPED_TERM_CHARS));
        let fts = |p: &str| match scoped {
            Some(_) => format!("engram_scoped_fts({p}tenant_id, {p}user_id, {p}fts)"),
            None => format!("{p}fts"),
        };
        // Messages are indexed with their context too (`ctx_fts`, `text::CONTEXT_WEIGHT`).
        let context = matches!(scope, TextScope::Transcript(_, _, Transcript::Messages));
        let ctx_fts = |p: &str| match scoped {
            Some(_) => format!("engram_scoped_fts({p}tenant_id, {p}user_id, {p}ctx_fts)"),
            None => format!("{p}ctx_fts"),
        };
        // A row's length for BM25: its lexemes, its context's included (FTS5 counts every
        // column's tokens).
        let doc_len = |p: &str| match context {
            true => format!("length({p}fts) + length({p}ctx_fts)"),
            false => format!("length({p}fts)"),
        };
        // The statistics come from the user's corpus (every row of the tenant and user, as
        // the SQLite store counts every indexed row), the hits from the filter. Document
        // frequencies come from the user's statistics table or are counted per term through
        // the GIN index (a prefix term `'pain':*` counts the rows holding any word that
        // starts with it); only rows matching a kept (informative) term are unnested, and a
        // term's frequency in a row is the number of occurrences of every word it matches
        // (FTS5 counts a prefix phrase the same way).
        let mut q = QueryBuilder::<Postgres>::new(
            "WITH lex AS MATERIALIZED (SELECT DISTINCT u.lexeme, t.prefix, '''' || ",
        );
        if let Some(user) = scoped {
            q.push("engram_fts_key(")
                .push_bind(tenant.as_str().to_string())
                .push(", ")
                .push_bind(user.as_str().to_string())
                .push(") || '_' || ");
        }
        q.push(
            "replace(replace(u.lexeme, '\\', '\\\\'), '''', '''''') || '''' \
             || CASE WHEN t.prefix THEN ':*' ELSE '' END AS quoted, \
             ('''' || replace(replace(u.lexeme, '\\', '\\\\'), '''', '''''') || '''' \
             || CASE WHEN t.prefix THEN ':*' ELSE '' END)::tsquery AS plain \
             FROM unnest(",
        );
        q.push_bind(terms).push("::text[], ").push_bind(prefixes).push(
            "::bool[]) AS t(term, prefix) \
                 CROSS JOIN LATERAL unnest(to_tsvector('simple', t.term)) u), ",
        );
        if let (TextScope::Memories(..), Some(user)) = (&scope, user) {
            // The user's statistics as the triggers of migration 4 keep them: the row count
            // and lexeme total, and per term the rows holding it — for a prefix, the sum over
            // the words it starts (`forms` of them), an upper bound that decides the drop as
            // the SQLite store decides it; a kept prefix of several forms is then counted
            // exactly through the postings (it holds under half the corpus). The same numeric
            // division as avg(int4), so the same mean as counting the rows.
            let (t, u) = (tenant.as_str().to_string(), user.as_str().to_string());
            q.push(
                "stats AS MATERIALIZED (SELECT coalesce(max(rows), 0)::float8 AS n, \
                 coalesce(max(len::numeric / nullif(rows, 0)::numeric), 0)::float8 AS avgdl \
                 FROM memory_fts_stats WHERE tenant_id = ",
            )
            .push_bind(t.clone())
            .push(" AND user_id = ")
            .push_bind(u.clone())
            .push(
                " AND lexeme = ''), \
                 sums AS MATERIALIZED (SELECT l.lexeme, l.prefix, l.quoted, x.total, x.forms \
                 FROM lex l CROSS JOIN LATERAL (SELECT coalesce(sum(f.rows), 0)::float8 AS total, \
                 count(*) AS forms FROM memory_fts_stats f WHERE f.tenant_id = ",
            )
            .push_bind(t.clone())
            .push(" AND f.user_id = ")
            .push_bind(u.clone())
            .push(
                " AND f.lexeme >= l.lexeme AND f.lexeme < l.lexeme || \
                 CASE WHEN l.prefix THEN chr(1114111) ELSE chr(1) END \
                 AND (f.lexeme = l.lexeme OR l.prefix AND starts_with(f.lexeme, l.lexeme))) x), \
                 df AS MATERIALIZED (SELECT m.lexeme, m.prefix, m.quoted, m.total, \
                 CASE WHEN m.prefix AND m.forms > 1 AND NOT (s.n >= 4 AND m.total * 2 >= s.n) \
                 THEN (SELECT count(*) FROM memories c WHERE c.tenant_id = ",
            )
            .push_bind(t)
            .push(" AND c.user_id = ")
            .push_bind(u)
            .push(format!(" AND {} @@ m.quoted::tsquery)::float8 ", fts("c.")))
            .push(
                "ELSE m.total END AS df FROM sums m CROSS JOIN stats s), \
                 kept AS MATERIALIZED (SELECT df.lexeme, df.prefix, df.quoted, \
                   CASE WHEN s.n >= 4 AND df.total * 2 >= s.n THEN 1e-6 \
                   WHEN s.n < 4 THEN ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) \
                   ELSE greatest(ln((s.n - df.df + 0.5) / (df.df + 0.5)), 1e-6) END AS idf \
                   FROM df CROSS JOIN stats s WHERE df.total > 0 AND (NOT (s.n >= 4 AND df.total * 2 >= s.n) \
                   OR NOT EXISTS (SELECT 1 FROM df o WHERE NOT (s.n >= 4 AND o.total * 2 >= s.n)))), ",
            );
        } else {
            // Memories of a whole tenant are counted from the rows; a transcript's statistics
            // are read from its table.
            q.push("stats AS MATERIALIZED (SELECT ");
            match scope {
                // Index-only on memories_fts_len; rows written before migration 3 (fts_len
                // NULL) add their length(fts) through memories_fts_len_missing.
                TextScope::Memories(..) => {
                    q.push(
                        "count(*)::float8 AS n, coalesce((coalesce(sum(fts_len), 0) + (SELECT coalesce(sum(length(x.fts)), 0) \
                         FROM memories x WHERE ",
                    );
                    scope.push_corpus(&mut q, "x.");
                    q.push(
                        " AND x.fts_len IS NULL))::numeric / nullif(count(*), 0)::numeric, 0)::float8 \
                         AS avgdl FROM memories WHERE ",
                    );
                }
                TextScope::Transcript(..) => {
                    // Kept by the triggers of migration 11: the row count and the sum of
                    // the rows' lengths (`doc_len`), the same numeric division as avg(int4).
                    q.push(
                        "coalesce(max(rows), 0)::float8 AS n, \
                         coalesce(max(len::numeric / nullif(rows, 0)::numeric), 0)::float8 \
                         AS avgdl FROM transcript_fts_stats WHERE source = ",
                    )
                    .push_bind(table)
                    .push(" AND ");
                }
            }
            scope.push_corpus(&mut q, "");
            // A term found in ceil(n / 2) rows or more (n ≥ 4) is dropped whatever its exact
            // frequency, so its count stops there: a common word reads at most half the corpus.
            q.push(format!(
                "), df AS MATERIALIZED (SELECT l.lexeme, l.prefix, l.quoted, l.plain, \
                 (SELECT count(*) FROM (SELECT 1 FROM {table} c WHERE "
            ));
            scope.push_corpus(&mut q, "c.");
            q.push(format!(" AND {} @@ l.quoted::tsquery", fts("c.")));
            q.push(
                " LIMIT (CASE WHEN s.n >= 4 THEN ceil(s.n / 2) ELSE s.n END)::bigint) c)::float8 AS df \
                 FROM lex l CROSS JOIN stats s), \
                 kept AS MATERIALIZED (SELECT df.lexeme, df.prefix, df.quoted, df.plain, \
                   CASE WHEN s.n >= 4 AND df.df * 2 >= s.n THEN 1e-6 \
                   WHEN s.n < 4 THEN ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) \
                   ELSE greatest(ln((s.n - df.df + 0.5) / (df.df + 0.5)), 1e-6) END AS idf \
                   FROM df CROSS JOIN stats s WHERE df.df > 0 AND (NOT (s.n >= 4 AND df.df * 2 >= s.n) \
                   OR NOT EXISTS (SELECT 1 FROM df o WHERE NOT (s.n >= 4 AND o.df * 2 >= s.n)))), ",
            );
        }
        // Each matching row is scored on its own (its lexemes against the kept terms, a
        // handful of rows to group) and only the top k are sorted: grouping every match of
        // every term together sorted thousands of (row, tsvector, term) rows (measured:
        // 49-68 → 38-53 ms for a query matching 1,917 rows of a user of 10k, same scores).
        // The query's whole keyword weight: the kept terms, plus those no row holds (the
        // highest IDF); terms dropped as common weigh 1e-6; under 4 rows, the smoothed IDF
        // (`text::term_weight`). A hit's coverage is the weight of the terms it holds over
        // this (`QueryWeights::coverage` of the SQLite store).
        q.push(
            "weight AS MATERIALIZED (SELECT (SELECT coalesce(sum(idf), 0) FROM kept) + \
             (SELECT count(*) FROM df WHERE df.df = 0) * (CASE WHEN s.n < 4 \
             THEN ln(1 + (s.n + 0.5) / 0.5) ELSE ln((s.n + 0.5) / 0.5) END) \
             AS total FROM stats s), ",
        );
        // Each matching row is scored against the kept terms. A message's context (migration
        // 10) adds CONTEXT_WEIGHT per term it holds and its lexemes to the row's length, as
        // FTS5's bm25() weighs a column; `matched` (coverage) counts only the terms of its
        // own words. A message's terms count by presence (`@@`, 1 or 0): about three times
        // the rows match once contexts do, and reading each one's lexemes (`unnest`, the
        // occurrences of every word a term matches, as for memories and summaries) cost
        // 3-4× the search at 100k messages (benches/README, "the keyword index with each
        // message's context"); a word seldom repeats within one message. The term frequency is
        // a float8 from the start: as `numeric` (the type of a literal 0.25) its arithmetic
        // over ~20,000 matches took a fifth of the statement (benches/README, "PostgreSQL:
        // the same search"). Each row's two tests per term run once (`OFFSET 0` keeps the
        // inner select from being folded into the outer one, which repeated them).
        let lexemes = if context {
            format!(
                "(SELECT m.idf, m.own, m.own + CASE WHEN m.ctx THEN {CONTEXT_WEIGHT:?}::float8 \
                 ELSE 0::float8 END AS tf FROM (SELECT k.idf, \
                 CASE WHEN d.fts @@ k.plain THEN 1::float8 ELSE 0::float8 END AS own, \
                 d.ctx_fts @@ k.plain AS ctx FROM kept k OFFSET 0) m) x WHERE x.tf > 0"
            )
        } else {
            "(SELECT y.idf, y.tf AS own, y.tf FROM (SELECT k.idf, \
             sum(coalesce(array_length(u.positions, 1), 1))::float8 AS tf \
             FROM unnest(d.fts) u JOIN kept k ON (CASE WHEN k.prefix \
             THEN starts_with(u.lexeme, k.lexeme) ELSE u.lexeme = k.lexeme END) \
             GROUP BY k.quoted, k.idf) y) x"
                .to_string()
        };
        q.push(format!(
            "hits AS (SELECT d.id, sc.score, sc.matched FROM {table} d CROSS JOIN stats s \
             CROSS JOIN LATERAL (SELECT sum(x.idf * (x.tf * 2.2) / (x.tf + 1.2 * \
             (0.25 + 0.75 * ({len})::float8 / greatest(s.avgdl, 1)))) AS score, \
             sum(CASE WHEN x.own > 0 THEN x.idf ELSE 0 END) AS matched \
             FROM {lexemes}) sc WHERE ",
            len = doc_len("d.")
        ));
        scope.push_where(&mut q, now, "d.");
        let kept = "(SELECT string_agg(quoted, ' | ')::tsquery FROM kept)";
        q.push(format!(" AND ({} @@ {kept}", fts("d.")));
        if context {
            q.push(format!(" OR {} @@ {kept}", ctx_fts("d.")));
        }
        q.push(")");
        q.push(
            ") SELECT h.id, least(1, greatest(0, h.matched / nullif(w.total, 0)))::float8 AS coverage \
             FROM hits h CROSS JOIN weight w ORDER BY h.score DESC, h.id LIMIT ",
        )
        .push_bind(i64::try_from(k).unwrap_or(i64::MAX));
        let rows = q.build().fetch_all(&self.pool).await.map_err(db)?;
        rows.iter()
            .map(|r| Ok((id(col(r, "id")?), col::<Option<f64>>(r, "coverage")?.unwrap_or(0.0))))
            .collect()
    }
}
