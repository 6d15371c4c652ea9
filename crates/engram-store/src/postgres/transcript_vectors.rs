//! PostgreSQL's side of the transcript vector cache ([`crate::common::transcript_vectors`]):
//! how a process loads a user's message or summary vectors, catches up with what any process
//! wrote since, and checks its answer.
//!
//! **Freshness** (migration 12). A trigger stamps a row's `vector_xid` with the id of the
//! transaction that inserts it with a vector or writes its vector or model. Each read of a
//! user is one statement, so one snapshot, and returns that snapshot's `xmin`, the oldest
//! transaction still running: every transaction below it had ended, so each row it wrote
//! was visible to the read. The next catch-up reads the user's rows whose `vector_xid` is at
//! or past the recorded `xmin` (an index range, usually a handful of rows, some read again
//! and applied again to no effect). Writers of one user need no lock to be ordered, unlike a
//! counter, which concurrent transactions could commit out of order. A transaction left
//! open for long holds `xmin` back, and each catch-up then re-reads the rows written since
//! it began.
//!
//! Rows leave the tables only when their user is erased; the top k found is checked against
//! the table by id, and a row that is gone makes the cache load the user afresh.
//!
//! **Only for users with many rows.** For a user of a few hundred messages the SQL ranking is
//! one statement of a few milliseconds, and the cache's two (the catch-up and the check of
//! its answer) cost about as much; so a key is served from the cache once a search has seen
//! it hold [`CACHE_MIN_ROWS`] vectors or more (the SQL ranking counts them as it ranks), and
//! goes back to SQL when a reload finds it under that.
//!
//! Timestamps are held as microseconds since 1970, as PostgreSQL stores them; a window's
//! bounds are cut to microseconds the way sqlx binds them, so the cache admits exactly the
//! rows the table's query would.

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use futures_util::TryStreamExt;
use sqlx::Row;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{PgDb, db};
use crate::common::transcript_vectors::{CachedTranscripts, Key, Rows, TranscriptCache};

/// The vectors a user's transcript table holds (of one model) from which searches go through
/// the cache: at 2,000 the SQL ranking takes ~5 ms, the cache ~1.5 ms (two statements).
pub const CACHE_MIN_ROWS: usize = 2_000;

/// Microseconds from 1970 to PostgreSQL's epoch (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// An instant as the table compares it: sqlx sends microseconds since 2000, cut toward zero.
pub(super) fn micros(at: OffsetDateTime) -> i64 {
    let since_2000 = (at - time::macros::datetime!(2000-01-01 0:00 UTC)).whole_microseconds();
    i64::try_from(since_2000)
        .unwrap_or(if since_2000 < 0 { i64::MIN } else { i64::MAX })
        .saturating_add(PG_EPOCH_MICROS)
}

/// A timestamp column as microseconds since 1970 (exact: PostgreSQL keeps microseconds).
fn micros_sql(column: &str) -> String {
    format!("(extract(epoch FROM {column}) * 1000000)::int8")
}

impl PgDb {
    /// Is `key` served from the cache (a search saw it hold enough rows)?
    pub(super) fn transcript_cached(&self, key: &Key) -> bool {
        self.transcript_cache_min_rows() == 0
            || self.large_transcripts.lock().unwrap_or_else(|e| e.into_inner()).contains(key)
    }

    /// Record how many vectors the SQL ranking found for `key` (within its window, so at most
    /// the user's): enough, and the next search goes through the cache.
    pub(super) fn note_transcript_rows(&self, key: &Key, rows: usize) {
        if rows >= self.transcript_cache_min_rows() {
            self.large_transcripts.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone());
        }
    }

    /// Forget which of a user's keys are served from the cache (after erasure).
    pub(super) fn forget_transcript_sizes(&self, tenant: &str, user: &str) {
        self.large_transcripts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k| !(k.tenant == tenant && k.user == user));
    }
}

#[async_trait]
impl CachedTranscripts<Uuid> for PgDb {
    fn transcript_cache(&self) -> &TranscriptCache<Uuid> {
        &self.transcripts
    }

    /// Apply the rows written since the cache last read the user (all of them the first
    /// time), in one snapshot whose `xmin` becomes the next catch-up's start.
    async fn catch_up(&self, key: &Key, rows: &mut Rows<Uuid>) -> Result<()> {
        let (start, end) = key.table.span();
        let table = key.table.table();
        // The first read takes the model's vectors; a catch-up every row written since, to
        // drop those whose vector was cleared or is now of another model. One statement, so
        // one snapshot: its xmin (the first row, also when no row matches) and its rows.
        let which = if rows.loaded {
            "vector_xid >= $3::int8::text::xid8"
        } else {
            "embedding IS NOT NULL AND embedding_model = $3"
        };
        let sql = format!(
            "SELECT s.xmin, r.* FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8 \
             AS xmin) s LEFT JOIN LATERAL (SELECT id, {} AS span_start, {} AS span_end, \
             embedding, embedding_model FROM {table} \
             WHERE tenant_id = $1 AND user_id = $2 AND {which}) r ON true",
            micros_sql(start),
            micros_sql(end),
        );
        let q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&key.tenant).bind(&key.user);
        let q = if rows.loaded { q.bind(rows.seq) } else { q.bind(&key.model) };
        let mut xmin = None;
        // Streamed: the rows are decoded one by one into the cache, never held all at once.
        let mut stream = q.fetch(&self.pool);
        while let Some(r) = stream.try_next().await.map_err(db)? {
            xmin = Some(r.try_get::<i64, _>("xmin").map_err(db)?);
            let Some(id) = r.try_get::<Option<Uuid>, _>("id").map_err(db)? else { continue };
            let span = (
                r.try_get::<Option<i64>, _>("span_start").map_err(db)?,
                r.try_get::<Option<i64>, _>("span_end").map_err(db)?,
            );
            let vector: Option<pgvector::Vector> = r.try_get("embedding").map_err(db)?;
            let model: Option<String> = r.try_get("embedding_model").map_err(db)?;
            match vector {
                Some(v) if model.as_deref() == Some(key.model.as_str()) => {
                    rows.upsert(id, id, span, v.as_slice())
                }
                _ => rows.remove(id),
            }
        }
        drop(stream);
        rows.seq = xmin.ok_or_else(|| Error::internal("the snapshot's xmin was not returned"))?;
        rows.loaded = true;
        Ok(())
    }

    async fn all_present(&self, key: &Key, top: &[(Uuid, Uuid, f32)]) -> Result<bool> {
        if top.is_empty() {
            return Ok(true);
        }
        let ids: Vec<Uuid> = top.iter().map(|h| h.0).collect();
        let sql = format!(
            "SELECT count(*) FROM {} WHERE tenant_id = $1 AND user_id = $2 AND id = ANY($3)",
            key.table.table()
        );
        let found: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(&key.tenant)
            .bind(&key.user)
            .bind(&ids)
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        Ok(usize::try_from(found).is_ok_and(|n| n == ids.len()))
    }

    fn keep(&self, key: &Key, rows: &Rows<Uuid>) {
        if rows.len() < self.transcript_cache_min_rows() {
            // Fewer than it takes to be worth it (an erasure, or vectors cleared): back to SQL.
            self.large_transcripts.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
            self.transcripts.forget(key);
        } else {
            self.transcripts.settle(key, rows.bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_cut_to_microseconds_like_the_binding() {
        let at = time::macros::datetime!(2023-05-08 13:56:01.123456789 UTC);
        assert_eq!(micros(at), 1_683_554_161_123_456);
        // Before 2000 sqlx cuts toward 2000, i.e. up.
        let old = time::macros::datetime!(1999-12-31 23:59:59.9999995 UTC);
        assert_eq!(micros(old), PG_EPOCH_MICROS);
        assert_eq!(micros(time::macros::datetime!(1970-01-01 0:00 UTC)), 0);
    }
}
