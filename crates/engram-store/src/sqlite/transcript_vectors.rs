//! The SQLite store's side of the transcript vector cache ([`crate::common::transcript_vectors`]):
//! how it loads a user, catches up and checks its answer.
//!
//! **Freshness.** Migration 10 gives each row `vector_seq`, a per-user counter that a trigger
//! advances whenever the row is inserted with a vector or its vector or model is written.
//! Before each search the cache reads the user's rows whose `vector_seq` is past the highest
//! it has applied (an indexed read, usually empty), so vectors written by any process on the
//! same database are seen by the next search, and the result equals a scan of the table.
//! SQLite has one writer at a time, so counters are committed in the order they are given.
//! Rows leave the transcript tables only when their user is erased; a deleted row leaves no
//! counter behind, so the top k found is checked against the table (by rowid *and* id, since
//! a rowid can be reused), and a row that is gone makes the cache load the user afresh.

use std::collections::HashMap;

use async_trait::async_trait;

use engram_core::error::{Error, Result};
use futures_util::TryStreamExt;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

use super::SqliteDb;
use crate::common::transcript_vectors::{CachedTranscripts, Key, Rows, Span, TranscriptCache};
use crate::common::{Arg, Backend};
use crate::tables::blob_to_vec;

/// A row as the cache reads it: `rowid, id, <start>, <end>, embedding[, embedding_model]`.
fn cached_row(r: &SqliteRow) -> Result<(i64, Uuid, Span, Option<Vec<f32>>)> {
    let id = parse_id(r.get("id"))?;
    let blob: Option<&[u8]> = r.get("embedding");
    Ok((r.get("rowid"), id, (r.get("span_start"), r.get("span_end")), blob.map(blob_to_vec)))
}

/// A row's id as stored (text).
fn parse_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id).map_err(|_| Error::internal(format!("row id '{id}' is not a UUID")))
}

#[async_trait]
impl CachedTranscripts<i64> for SqliteDb {
    fn transcript_cache(&self) -> &TranscriptCache<i64> {
        &self.transcripts
    }

    /// Apply the rows written since the cache last read the table (all of them the first
    /// time).
    async fn catch_up(&self, key: &Key, rows: &mut Rows) -> Result<()> {
        let (start, end) = key.table.span();
        let table = key.table.table();
        let who = [Arg::Text(&key.tenant), Arg::Text(&key.user)];
        if !rows.loaded {
            // The counter first: a row written between the two reads is read again by the next
            // catch-up, never missed.
            let sql = format!(
                "SELECT coalesce(max(vector_seq), 0) FROM {table} WHERE tenant_id = ? AND user_id = ?"
            );
            let seq: i64 = self.read_all(&sql, &who).await?.first().map_or(0, |r| r.get(0));
            let sql = format!(
                "SELECT rowid, id, {start} AS span_start, {end} AS span_end, embedding FROM {table} \
                 WHERE tenant_id = ? AND user_id = ? AND embedding IS NOT NULL AND embedding_model = ?"
            );
            // Streamed: the rows are decoded one by one into the cache, never held all at once.
            let mut stream = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&key.tenant)
                .bind(&key.user)
                .bind(&key.model)
                .fetch(&self.read);
            let mut buf = Vec::new();
            while let Some(r) = stream.try_next().await.map_err(super::db)? {
                let id = parse_id(r.get("id"))?;
                let blob: &[u8] = r.get("embedding");
                buf.clear();
                buf.extend(
                    blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
                rows.upsert(r.get("rowid"), id, (r.get("span_start"), r.get("span_end")), &buf);
            }
            rows.seq = seq;
            rows.loaded = true;
            return Ok(());
        }
        let sql = format!(
            "SELECT rowid, id, {start} AS span_start, {end} AS span_end, embedding, embedding_model, \
             vector_seq FROM {table} WHERE tenant_id = ? AND user_id = ? AND vector_seq > ?"
        );
        let args = [who[0].clone(), who[1].clone(), Arg::Int(rows.seq)];
        for r in self.read_all(&sql, &args).await? {
            let (rowid, id, span, vector) = cached_row(&r)?;
            let model: Option<String> = r.get("embedding_model");
            match vector {
                Some(v) if model.as_deref() == Some(key.model.as_str()) => {
                    rows.upsert(rowid, id, span, &v)
                }
                _ => rows.remove(rowid),
            }
            rows.seq = rows.seq.max(r.get("vector_seq"));
        }
        Ok(())
    }

    /// The same row (rowid and id) of the same tenant and user.
    async fn all_present(&self, key: &Key, top: &[(i64, Uuid, f32)]) -> Result<bool> {
        if top.is_empty() {
            return Ok(true);
        }
        let sql = format!(
            "SELECT rowid, id FROM {} WHERE tenant_id = ? AND user_id = ? AND rowid IN \
             (SELECT value FROM json_each(?))",
            key.table.table()
        );
        let rowids = serde_json::to_string(&top.iter().map(|h| h.0).collect::<Vec<_>>())
            .unwrap_or_else(|_| "[]".into());
        let args = [Arg::Text(&key.tenant), Arg::Text(&key.user), Arg::Owned(rowids)];
        let found: HashMap<i64, String> = self
            .read_all(&sql, &args)
            .await?
            .iter()
            .map(|r| (r.get::<i64, _>(0), r.get::<String, _>(1)))
            .collect();
        Ok(top.iter().all(|(rowid, id, _)| found.get(rowid) == Some(&id.to_string())))
    }
}
