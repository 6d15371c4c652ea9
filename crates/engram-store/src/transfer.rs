//! `engram migrate`: copy a whole SQLite store (a data dir) into a PostgreSQL store.
//!
//! **Table by table, not through the `Store` trait.** The trait writes the way the engine
//! does: an insert records a `created` event and bumps the user's counter, a rating adds an
//! event, appending messages assigns new `seq` numbers, jobs are enqueued as new and pending,
//! and recalls, cursors, rolling summaries, summaries and key hashes have no bulk writer at
//! all. Carrying all of that unchanged through the trait would need a "raw insert" method per
//! table used only here. So this module, which is part of the only crate that speaks SQL,
//! reads every table of the SQLite schema and writes the same rows into the PostgreSQL schema,
//! converting representations only:
//!
//! | SQLite | PostgreSQL |
//! |---|---|
//! | unix nanoseconds (INTEGER) | `timestamptz` (microseconds: the sub-microsecond digits are dropped, as PostgreSQL's own store does) |
//! | id TEXT | `uuid` (memories, messages, events' memory ids, recalls) |
//! | JSON TEXT | `jsonb` (metadata, settings, payloads, tool args, id lists → `uuid[]`) |
//! | little-endian f32 BLOB | pgvector `vector` (the same f32 values: nothing is re-embedded) |
//! | 0/1 | `boolean` |
//!
//! PostgreSQL-only columns are derived: `fts_text` (the words of the content, as
//! [`crate::text::index_text`] makes them for the PostgreSQL store's own writes; the
//! `tsvector` is generated from it). `memory_events.id` values are kept
//! (`OVERRIDING SYSTEM VALUE`) so that history keeps its order, and the identity sequence is
//! moved past them. The embedding space is recorded with the store's own
//! `ensure_embedding_space`, which also builds the HNSW index, after the rows are in.
//!
//! Not copied: `memory_tombstones` (they only tell other SQLite processes' in-memory vector
//! caches which purged rows to drop; the purged rows are not copied either), the FTS5 tables
//! (PostgreSQL indexes the copied text itself), `schema_migrations` and `meta` (the target
//! has its own). Everything else is copied row for row: API keys with their hashes, agents,
//! memories with superseded versions, counters, vectors and model ids, events, per-user
//! change counters, conversations with rolling summaries, messages, summaries and their
//! sources, jobs as they are (pending ones run on the new database; running ones keep their
//! lease and are taken over when it expires, as after a crash; done and failed ones stay
//! visible in stats and `engram jobs list`), extraction cursors, recalls (the rating cascade)
//! and context sessions.
//!
//! **Safety.** The target must hold no engram data. The copy marks the target's `meta` with
//! `migrate_state = copying` first and `done` last; rows are written in batches, one
//! transaction each, with `ON CONFLICT DO NOTHING`, so an interrupted copy can be resumed
//! (`resume: true`) — allowed only while the mark says `copying`. The source is read inside
//! one SQLite read transaction: one consistent snapshot even if a process writes meanwhile
//! (stop the servers anyway: later writes would not be copied). One embedding space only: a
//! source whose vectors come from several models or dimensions (a re-embed not finished) is
//! refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use engram_core::error::{Error, Result};
use engram_core::store::MaintenanceStore;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteRow};
use sqlx::{PgPool, Postgres, QueryBuilder, Row, Sqlite, SqlitePool};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::postgres::PgStore;
use crate::tables::{TABLES, Ty, Val, bind_pg, blob_to_vec, vec_to_blob};
use crate::text::index_text;
use Ty::*;

/// The tables [`copy`] copies, in order.
pub fn copied_tables() -> Vec<&'static str> {
    TABLES.iter().map(|t| t.name).collect()
}

/// PostgreSQL accepts at most 65535 bind parameters per statement.
const PG_MAX_BINDS: usize = 65_535;

fn sqlite_err(e: sqlx::Error) -> Error {
    Error::internal(format!("source (SQLite): {e}"))
}

fn pg_err(e: sqlx::Error) -> Error {
    Error::internal(format!("target (PostgreSQL): {e}"))
}

fn bad_row(table: &str, col: &str, what: impl std::fmt::Display) -> Error {
    Error::Unprocessable(format!("source row in {table}.{col} cannot be copied: {what}"))
}

fn ts(n: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(n)).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn uuid(table: &str, col: &str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| bad_row(table, col, format!("'{s}' is not a UUID ({e})")))
}

fn read_val(r: &SqliteRow, table: &str, col: &str, ty: Ty) -> Result<Val> {
    let get_err = |e: sqlx::Error| bad_row(table, col, e);
    Ok(match ty {
        Text => Val::Text(Some(r.try_get::<String, _>(col).map_err(get_err)?)),
        OptText => Val::Text(r.try_get::<Option<String>, _>(col).map_err(get_err)?),
        Int => Val::Int(Some(r.try_get::<i64, _>(col).map_err(get_err)?)),
        Real => Val::Real(r.try_get::<f64, _>(col).map_err(get_err)?),
        Bool => Val::Bool(r.try_get::<i64, _>(col).map_err(get_err)? != 0),
        Ts => Val::Ts(Some(ts(r.try_get::<i64, _>(col).map_err(get_err)?))),
        OptTs => Val::Ts(r.try_get::<Option<i64>, _>(col).map_err(get_err)?.map(ts)),
        Uuid => {
            let s: String = r.try_get(col).map_err(get_err)?;
            Val::Uuid(Some(uuid(table, col, &s)?))
        }
        OptUuid => {
            let s: Option<String> = r.try_get(col).map_err(get_err)?;
            Val::Uuid(s.map(|s| uuid(table, col, &s)).transpose()?)
        }
        Json | OptJson => {
            let s: Option<String> = r.try_get(col).map_err(get_err)?;
            let v = s
                .map(|s| {
                    serde_json::from_str::<serde_json::Value>(&s)
                        .map_err(|e| bad_row(table, col, format!("not JSON ({e})")))
                })
                .transpose()?;
            match (ty, v) {
                (Json, None) => Val::Json(Some(serde_json::json!({}))),
                (_, v) => Val::Json(v),
            }
        }
        UuidList => {
            let s: String = r.try_get(col).map_err(get_err)?;
            let ids: Vec<String> = serde_json::from_str(&s)
                .map_err(|e| bad_row(table, col, format!("not a JSON list of ids ({e})")))?;
            Val::Uuids(ids.iter().map(|i| uuid(table, col, i)).collect::<Result<_>>()?)
        }
        Vector => {
            let b: Option<Vec<u8>> = r.try_get(col).map_err(get_err)?;
            Val::Vector(b.map(|b| blob_to_vec(&b)))
        }
    })
}

/// Rows of one table: in the source, in the target, and written by this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCount {
    pub table: &'static str,
    pub source: u64,
    pub target: u64,
    /// Rows this run inserted (on a resume, rows already there are not counted).
    pub copied: u64,
}

/// What [`copy`] did.
#[derive(Debug, Clone)]
pub struct CopyReport {
    pub tables: Vec<TableCount>,
    /// `(model id, dimensions)` of the copied vectors, if any.
    pub embedding_space: Option<(String, usize)>,
    pub resumed: bool,
}

/// Progress of a copy, reported after every batch.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub table: &'a str,
    /// Source rows read so far and in all.
    pub done: u64,
    pub total: u64,
}

/// Options of [`copy`].
#[derive(Debug, Clone, Copy)]
pub struct CopyOptions {
    /// Rows per batch (one PostgreSQL transaction each).
    pub batch: usize,
    /// Continue a copy that was interrupted (the target's mark says `copying`).
    pub resume: bool,
}

/// A SQLite store opened for reading by `engram migrate`.
pub struct SqliteSource {
    dir: PathBuf,
    pool: SqlitePool,
}

impl SqliteSource {
    /// Open the store in `data_dir`: it must exist and hold `engram.db`. Pending migrations are
    /// applied (as any engram command would); a schema newer than this binary is refused.
    pub async fn open(data_dir: &Path) -> Result<Self> {
        if !data_dir.is_dir() {
            return Err(Error::Unprocessable(format!(
                "source data dir {} does not exist (or is not a directory)",
                data_dir.display()
            )));
        }
        let path = data_dir.join("engram.db");
        if !path.is_file() {
            return Err(Error::Unprocessable(format!(
                "{} holds no engram store: {} does not exist",
                data_dir.display(),
                path.display()
            )));
        }
        let opts = SqliteConnectOptions::from_str("sqlite://")
            .map_err(sqlite_err)?
            .filename(&path)
            .create_if_missing(false)
            .busy_timeout(Duration::from_secs(10));
        let pool =
            SqlitePoolOptions::new().max_connections(2).connect_with(opts).await.map_err(|e| {
                Error::Unprocessable(format!("cannot open {}: {e}", path.display()))
            })?;
        if let Err(e) = crate::migrate::run_sqlite(&pool).await {
            return Err(Error::Unprocessable(format!(
                "source {}: {}",
                path.display(),
                e.public_message()
            )));
        }
        Ok(Self { dir: data_dir.to_path_buf(), pool })
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store's embedding space: `meta`, checked against the vectors actually stored.
    /// `Unprocessable` when the vectors come from several models or dimensions.
    async fn embedding_space(
        &self,
        c: &mut PoolConnection<Sqlite>,
    ) -> Result<Option<(String, usize)>> {
        let meta: BTreeMap<String, String> = sqlx::query(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dims')",
        )
        .fetch_all(&mut **c)
        .await
        .map_err(sqlite_err)?
        .iter()
        .map(|r| (r.get::<String, _>("key"), r.get::<String, _>("value")))
        .collect();
        let mut spaces: Vec<(String, i64, i64, &str)> = Vec::new();
        for table in ["memories", "messages", "summaries"] {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT coalesce(embedding_model, '(none)') AS model, length(embedding) / 4 AS dims, count(*) AS n \
                 FROM {table} WHERE embedding IS NOT NULL GROUP BY 1, 2"
            )))
            .fetch_all(&mut **c)
            .await
            .map_err(sqlite_err)?;
            for r in rows {
                spaces.push((r.get("model"), r.get("dims"), r.get("n"), table));
            }
        }
        let recorded = match (meta.get("embedding_model"), meta.get("embedding_dims")) {
            (Some(m), Some(d)) => Some((
                m.clone(),
                d.parse::<usize>().map_err(|_| {
                    Error::Unprocessable(format!(
                        "source meta embedding_dims '{d}' is not a number"
                    ))
                })?,
            )),
            _ => None,
        };
        let mut distinct: Vec<(String, i64)> = spaces.iter().map(|s| (s.0.clone(), s.1)).collect();
        distinct.sort();
        distinct.dedup();
        let describe = || {
            spaces
                .iter()
                .map(|(m, d, n, t)| format!("{n} {t} rows with {d}-dim vectors of {m}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if distinct.len() > 1 {
            return Err(Error::Unprocessable(format!(
                "the source mixes embedding models or dimensions ({}); finish `engram reembed` on it \
                 first, so that one vector space is copied",
                describe()
            )));
        }
        match (recorded, distinct.pop()) {
            (None, None) => Ok(None),
            (Some(r), None) => Ok(Some(r)),
            (Some((m, d)), Some((vm, vd)))
                if m == vm && i64::try_from(d).is_ok_and(|d| d == vd) =>
            {
                Ok(Some((m, d)))
            }
            (r, Some(_)) => Err(Error::Unprocessable(format!(
                "the source's recorded embedding space ({}) does not match its vectors ({}); \
                 run `engram reembed` on it first",
                r.map_or_else(|| "none".to_string(), |(m, d)| format!("{m}, {d} dims")),
                describe()
            ))),
        }
    }

    /// Rows per copied table.
    pub async fn counts(&self) -> Result<BTreeMap<&'static str, u64>> {
        let mut c = self.pool.acquire().await.map_err(sqlite_err)?;
        let mut out = BTreeMap::new();
        for t in TABLES {
            let n: i64 =
                sqlx::query(sqlx::AssertSqlSafe(format!("SELECT count(*) AS n FROM {}", t.name)))
                    .fetch_one(&mut *c)
                    .await
                    .map_err(sqlite_err)?
                    .get("n");
            out.insert(t.name, u64::try_from(n).unwrap_or(0));
        }
        Ok(out)
    }

    /// `(tenant, agent id)` of every agent.
    pub async fn agents(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query("SELECT tenant_id, id FROM agents ORDER BY tenant_id, id")
            .fetch_all(&self.pool)
            .await
            .map_err(sqlite_err)?;
        Ok(rows.iter().map(|r| (r.get("tenant_id"), r.get("id"))).collect())
    }

    /// Every tenant id found in any copied table.
    pub async fn tenants(&self) -> Result<Vec<String>> {
        let sql = TABLES
            .iter()
            .map(|t| format!("SELECT tenant_id FROM {}", t.name))
            .collect::<Vec<_>>()
            .join(" UNION ");
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("{sql} ORDER BY 1")))
            .fetch_all(&self.pool)
            .await
            .map_err(sqlite_err)?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }
}

/// Rows per copied table in the target.
pub async fn target_counts(pg: &PgPool) -> Result<BTreeMap<&'static str, u64>> {
    let mut out = BTreeMap::new();
    for t in TABLES {
        let n: i64 =
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT count(*) AS n FROM {}", t.name)))
                .fetch_one(pg)
                .await
                .map_err(pg_err)?
                .get("n");
        out.insert(t.name, u64::try_from(n).unwrap_or(0));
    }
    Ok(out)
}

async fn target_mark(pg: &PgPool) -> Result<Option<(String, String)>> {
    let rows = sqlx::query(
        "SELECT key, value FROM meta WHERE key IN ('migrate_state', 'migrate_from') ORDER BY key",
    )
    .fetch_all(pg)
    .await
    .map_err(pg_err)?;
    let mut state = None;
    let mut from = String::new();
    for r in rows {
        match r.get::<String, _>("key").as_str() {
            "migrate_state" => state = Some(r.get::<String, _>("value")),
            _ => from = r.get("value"),
        }
    }
    Ok(state.map(|s| (s, from)))
}

async fn set_mark(pg: &PgPool, state: &str, from: &str) -> Result<()> {
    sqlx::query(
        "INSERT INTO meta (key, value) VALUES ('migrate_state', $1), ('migrate_from', $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(state)
    .bind(from)
    .execute(pg)
    .await
    .map_err(pg_err)?;
    Ok(())
}

/// Copy every table of `source` into `target` (see the module docs).
pub async fn copy(
    source: &SqliteSource,
    target: &PgStore,
    opts: CopyOptions,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<CopyReport> {
    let pg = target.pool();
    let from = source.dir.display().to_string();
    // One read transaction: every table from one snapshot.
    let mut src = source.pool.acquire().await.map_err(sqlite_err)?;
    sqlx::query("BEGIN").execute(&mut *src).await.map_err(sqlite_err)?;
    let space = source.embedding_space(&mut src).await?;

    // The target: empty, or the unfinished copy of this source when resuming.
    let existing = target_counts(pg).await?;
    let non_empty: Vec<String> =
        existing.iter().filter(|(_, n)| **n > 0).map(|(t, n)| format!("{n} {t}")).collect();
    let target_space = MaintenanceStore::embedding_space(target).await?;
    let mark = target_mark(pg).await?;
    let resumed = match (&mark, opts.resume) {
        (Some((state, prev)), true) if state == "copying" => {
            if *prev != from {
                return Err(Error::Conflict(format!(
                    "the target holds an unfinished copy of {prev}, not of {from}; resume it with \
                     --from {prev}, or migrate into an empty database"
                )));
            }
            true
        }
        (Some((state, prev)), _) if state == "done" => {
            return Err(Error::Conflict(format!(
                "the target database already holds a finished copy of {prev}; migrate only into an \
                 empty database"
            )));
        }
        (Some((_, prev)), false) => {
            return Err(Error::Conflict(format!(
                "the target database holds an interrupted copy of {prev} ({}); run the same \
                 command with --resume to finish it, or migrate into an empty database",
                if non_empty.is_empty() { "no rows yet".to_string() } else { non_empty.join(", ") }
            )));
        }
        (_, _) => {
            if !non_empty.is_empty() || target_space.is_some() {
                return Err(Error::Conflict(format!(
                    "the target database already holds engram data ({}); migrate only into an \
                     empty database (create a new one, e.g. `createdb engram`)",
                    if non_empty.is_empty() {
                        "an embedding space".to_string()
                    } else {
                        non_empty.join(", ")
                    }
                )));
            }
            false
        }
    };
    if let (Some(t), Some(s)) = (&target_space, &space)
        && t != s
    {
        return Err(Error::Unprocessable(format!(
            "the target's vectors are of {} ({} dims) but the source's of {} ({} dims); one store \
             holds one embedding space",
            t.0, t.1, s.0, s.1
        )));
    }
    set_mark(pg, "copying", &from).await?;

    let mut tables = Vec::with_capacity(TABLES.len());
    for t in TABLES {
        let total: i64 =
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT count(*) AS n FROM {}", t.name)))
                .fetch_one(&mut *src)
                .await
                .map_err(sqlite_err)?
                .get("n");
        let total = u64::try_from(total).unwrap_or(0);
        let ncols = t.cols.len() + usize::from(!t.fts.is_empty());
        let batch = opts.batch.clamp(1, PG_MAX_BINDS / ncols);
        let select = format!(
            "SELECT rowid AS engram_rowid, {} FROM {} WHERE rowid > ? ORDER BY rowid LIMIT {batch}",
            t.cols.iter().map(|c| c.0).collect::<Vec<_>>().join(", "),
            t.name
        );
        let mut insert_head = format!(
            "INSERT INTO {} ({}{})",
            t.name,
            t.cols.iter().map(|c| c.0).collect::<Vec<_>>().join(", "),
            if t.fts.is_empty() { "" } else { ", fts_text" }
        );
        if t.overriding {
            insert_head.push_str(" OVERRIDING SYSTEM VALUE");
        }
        insert_head.push(' ');
        let (mut after, mut done, mut copied) = (i64::MIN, 0u64, 0u64);
        progress(Progress { table: t.name, done, total });
        loop {
            let rows = sqlx::query(sqlx::AssertSqlSafe(select.clone()))
                .bind(after)
                .fetch_all(&mut *src)
                .await
                .map_err(sqlite_err)?;
            let Some(last) = rows.last() else { break };
            after = last.get("engram_rowid");
            let mut values: Vec<Vec<Val>> = Vec::with_capacity(rows.len());
            for r in &rows {
                let mut row = Vec::with_capacity(ncols);
                for (name, ty) in t.cols {
                    row.push(read_val(r, t.name, name, *ty)?);
                }
                if !t.fts.is_empty() {
                    let parts: Vec<String> = t
                        .fts
                        .iter()
                        .map(|c| {
                            r.try_get::<Option<String>, _>(*c).ok().flatten().unwrap_or_default()
                        })
                        .collect();
                    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
                    row.push(Val::Text(Some(index_text(&parts))));
                }
                values.push(row);
            }
            let mut q = QueryBuilder::<Postgres>::new(insert_head.clone());
            q.push_values(values, |mut b, row| {
                for v in row {
                    bind_pg(&mut b, v);
                }
            });
            q.push(" ON CONFLICT DO NOTHING");
            let mut tx = pg.begin().await.map_err(pg_err)?;
            let n = q.build().execute(&mut *tx).await.map_err(pg_err)?.rows_affected();
            tx.commit().await.map_err(pg_err)?;
            copied += n;
            done += rows.len() as u64;
            progress(Progress { table: t.name, done, total });
        }
        tables.push(TableCount { table: t.name, source: done, target: 0, copied });
    }
    sqlx::query("COMMIT").execute(&mut *src).await.map_err(sqlite_err)?;
    drop(src);

    // History keeps its event ids; new events continue after them.
    sqlx::query(
        "SELECT setval(pg_get_serial_sequence('memory_events', 'id'), \
         greatest((SELECT max(id) FROM memory_events), 1), (SELECT max(id) FROM memory_events) IS NOT NULL)",
    )
    .execute(pg)
    .await
    .map_err(pg_err)?;
    if let Some((model, dims)) = &space {
        target.ensure_embedding_space(model, *dims).await?;
    }
    let after = target_counts(pg).await?;
    for t in &mut tables {
        t.target = after.get(t.table).copied().unwrap_or(0);
    }
    set_mark(pg, "done", &from).await?;
    Ok(CopyReport { tables, embedding_space: space, resumed })
}

/// A vector that differs between the stores.
#[derive(Debug, Clone)]
pub struct VectorDiff {
    pub table: &'static str,
    pub id: String,
    pub what: String,
}

/// Compare every stored vector and its model id, row by row: the target must hold the same
/// f32 values, bit for bit, and no vector the source does not have. Reads in chunks (by id);
/// returns the number of vectors compared and the differences (at most `max`).
pub async fn compare_vectors(
    source: &SqliteSource,
    pg: &PgPool,
    max: usize,
) -> Result<(u64, Vec<VectorDiff>)> {
    const CHUNK: i64 = 1000;
    let mut diffs = Vec::new();
    let mut compared = 0u64;
    for (table, uuid_ids) in [("memories", true), ("messages", true), ("summaries", true)] {
        let mut after = String::new();
        loop {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT tenant_id, id, embedding, embedding_model FROM {table} \
                 WHERE embedding IS NOT NULL AND id > ? ORDER BY id LIMIT {CHUNK}"
            )))
            .bind(&after)
            .fetch_all(&source.pool)
            .await
            .map_err(sqlite_err)?;
            let Some(last) = rows.last() else { break };
            after = last.get("id");
            let tenants: Vec<String> = rows.iter().map(|r| r.get("tenant_id")).collect();
            let ids: Vec<String> = rows.iter().map(|r| r.get("id")).collect();
            let sql = format!(
                "SELECT t.id::text AS id, t.embedding, t.embedding_model FROM {table} t \
                 JOIN unnest($1::text[], $2::{}[]) AS k (tenant_id, id) \
                 ON t.tenant_id = k.tenant_id AND t.id = k.id",
                if uuid_ids { "uuid" } else { "text" }
            );
            let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&tenants);
            let q = if uuid_ids {
                let u: Vec<Uuid> =
                    ids.iter().map(|i| uuid(table, "id", i)).collect::<Result<_>>()?;
                q.bind(u)
            } else {
                q.bind(&ids)
            };
            let dst: BTreeMap<String, (Option<pgvector::Vector>, Option<String>)> = q
                .fetch_all(pg)
                .await
                .map_err(pg_err)?
                .into_iter()
                .map(|r| (r.get::<String, _>("id"), (r.get("embedding"), r.get("embedding_model"))))
                .collect();
            for r in &rows {
                compared += 1;
                let id: String = r.get("id");
                let blob: Option<Vec<u8>> = r.get("embedding");
                let model: Option<String> = r.get("embedding_model");
                let what = match dst.get(&id) {
                    None => Some("the row or its vector is missing in the target".to_string()),
                    Some((v, m)) => {
                        let bytes = v.as_ref().map(|v| vec_to_blob(v.as_slice()));
                        if *m != model {
                            Some(format!("model {m:?} instead of {model:?}"))
                        } else if bytes != blob {
                            Some("vector values differ".to_string())
                        } else {
                            None
                        }
                    }
                };
                if let Some(what) = what
                    && diffs.len() < max
                {
                    diffs.push(VectorDiff { table, id, what });
                }
            }
        }
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let src_n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) AS n FROM {table} WHERE embedding IS NOT NULL"
        )))
        .fetch_one(&source.pool)
        .await
        .map_err(sqlite_err)?
        .get("n");
        let dst_n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) AS n FROM {table} WHERE embedding IS NOT NULL"
        )))
        .fetch_one(pg)
        .await
        .map_err(pg_err)?
        .get("n");
        if src_n != dst_n && diffs.len() < max {
            diffs.push(VectorDiff {
                table,
                id: String::new(),
                what: format!(
                    "{} vectors in the target, {} in the source",
                    count(dst_n),
                    count(src_n)
                ),
            });
        }
    }
    Ok((compared, diffs))
}
