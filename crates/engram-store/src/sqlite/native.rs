//! SQLite: what this backend does its own way ([`Native`]); the rest of the store contract
//! is written once in [`crate::common`]. Vector search goes through the in-process indexes
//! ([`super::vectors`] for memories, [`super::transcript_vectors`] for messages and
//! summaries), keyword search through FTS5, a batch insert is a statement per row on the one
//! writer connection, and a claim is one `UPDATE … RETURNING`.

use super::*;
use crate::common::store::{
    Hits, Native, Ranked, Select, Sink, Transcript, TranscriptScope, VectorScope, Vectors, Versions,
};
use uuid::Uuid;

/// The statements that rewrite each FTS5 index without the words of deleted rows
/// ([`SqliteDb::scrub_keywords`]).
const OPTIMIZE_MEMORIES: &str = "INSERT INTO memories_fts (memories_fts) VALUES ('optimize')";
const OPTIMIZE_MESSAGES: &str = "INSERT INTO messages_fts (messages_fts) VALUES ('optimize')";
const OPTIMIZE_SUMMARIES: &str = "INSERT INTO summaries_fts (summaries_fts) VALUES ('optimize')";

/// Rows of transcript vectors written per `UPDATE` statement (two parameters each).
const VECTOR_ROWS_PER_STATEMENT: usize = 64;

#[async_trait]
impl Native for SqliteDb {
    async fn insert_rows(tx: &mut Self::Tx, rows: &[NewMemory], v: &Versions) -> Result<()> {
        for row in rows {
            let version = v.get(row.memory.user_id.as_str()).copied().unwrap_or_default();
            common::memories::insert::<Self>(tx, row, version).await?;
        }
        Ok(())
    }

    async fn select(&self, tenant: &TenantId, s: Select<'_>) -> Result<Vec<Memory>> {
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        push_filter(&mut q, s.filter, now);
        if let Some(c) = s.cursor {
            q.push(" AND id < ").push_bind(c.to_string());
        }
        q.push(s.order);
        if let Some(l) = s.limit {
            q.push(format!(" LIMIT {l}"));
        }
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        rows.iter().map(common::rows::memory).collect()
    }

    async fn search_vectors(&self, q: Ranked<'_, &MemoryFilter, [f32]>) -> Hits<MemoryId, f32> {
        let Some(user) = &q.scope.user_id else {
            return Err(Error::invalid("user_id", "vector search needs a user_id"));
        };
        let idx = self.catch_up(q.tenant.as_str(), user.as_str()).await?;
        let now = ts(OffsetDateTime::now_utc());
        {
            let guard = idx.lock().unwrap_or_else(|e| e.into_inner());
            if guard.len() < vectors::OFF_THREAD_ROWS {
                return Ok(guard.search(q.scope, q.query, q.k, now));
            }
        }
        // A large scan reads every vector of the user (150 MB at 100k): on the blocking pool,
        // so that the keyword search of the same request goes on meanwhile.
        let (filter, query, k) = (q.scope.clone(), q.query.to_vec(), q.k);
        vectors::off_thread(move || {
            let guard = idx.lock().unwrap_or_else(|e| e.into_inner());
            guard.search(&filter, &query, k, now)
        })
        .await
    }

    async fn search_text(&self, q: Ranked<'_, &MemoryFilter, str>) -> Hits<MemoryId, f64> {
        let now = ts(OffsetDateTime::now_utc());
        // Column names are unqualified in push_filter; they are unambiguous (the index's
        // columns, `content` and `scope`, are not filtered on).
        let narrow = |b: &mut QueryBuilder<Sqlite>| push_filter(b, q.scope, now);
        let user = q.scope.user_id.as_ref().map(|u| u.as_str());
        self.fts_search("memories", q.tenant, user, q.query, q.k, narrow, MemoryId).await
    }

    async fn search_transcript_text(
        &self,
        q: Ranked<'_, TranscriptScope<'_>, str>,
    ) -> Hits<Uuid, f64> {
        let (filter, table) = q.scope;
        let narrow = |b: &mut QueryBuilder<Sqlite>| push_window(b, filter, table, "m.");
        let user = Some(filter.user.as_str());
        self.fts_search(table.table(), q.tenant, user, q.query, q.k, narrow, |id| id).await
    }

    async fn search_transcript_vectors(
        &self,
        q: Ranked<'_, VectorScope<'_>, [f32]>,
    ) -> Hits<Uuid, f32> {
        let ((filter, table, model), query) = (q.scope, q.query);
        let key = crate::common::transcript_vectors::Key {
            tenant: q.tenant.as_str().to_string(),
            user: filter.user.as_str().to_string(),
            table,
            model: model.to_string(),
        };
        let window = (filter.since.map(ts), filter.until.map(ts));
        if let Some(top) =
            crate::common::transcript_vectors::cached_top(self, &key, window, query, q.k).await?
        {
            return Ok(top);
        }
        // The cache could not vouch for an answer: scan the table.
        let mut b = QueryBuilder::<Sqlite>::new(format!(
            "SELECT m.id AS id, m.embedding AS embedding FROM {} m WHERE m.tenant_id = ",
            table.table()
        ));
        b.push_bind(q.tenant.as_str().to_string());
        push_window(&mut b, filter, table, "m.");
        b.push(" AND m.embedding IS NOT NULL AND m.embedding_model = ")
            .push_bind(model.to_string());
        let rows = b.build().fetch_all(&self.read).await.map_err(db)?;
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
        scored.truncate(q.k);
        scored
            .into_iter()
            .map(|(s, id)| {
                Uuid::parse_str(&id)
                    .map(|u| (u, s))
                    .map_err(|_| Error::internal(format!("row id '{id}' is not a UUID")))
            })
            .collect()
    }

    async fn score_transcript_vectors(
        &self,
        tenant: &TenantId,
        table: Transcript,
        model: &str,
        query: &[f32],
        ids: &[Uuid],
    ) -> Hits<Uuid, f32> {
        let mut b = QueryBuilder::<Sqlite>::new(format!(
            "SELECT id, embedding FROM {} WHERE tenant_id = ",
            table.table()
        ));
        b.push_bind(tenant.as_str().to_string());
        b.push(" AND embedding IS NOT NULL AND embedding_model = ").push_bind(model.to_string());
        b.push(" AND id IN (");
        let mut list = b.separated(", ");
        for id in ids {
            list.push_bind(id.to_string());
        }
        b.push(")");
        let rows = b.build().fetch_all(&self.read).await.map_err(db)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let blob: &[u8] = r.get("embedding");
            if blob.len() != query.len() * 4 {
                continue; // another space: never comparable with this query
            }
            let id: String = r.get("id");
            let id = Uuid::parse_str(&id)
                .map_err(|_| Error::internal(format!("row id '{id}' is not a UUID")))?;
            out.push((id, vectors::dot(&blob_to_vec(blob), query)));
        }
        Ok(out)
    }

    async fn store_transcript_vectors(
        &self,
        tenant: &TenantId,
        table: Transcript,
        model: &str,
        rows: Vectors<Uuid>,
    ) -> Result<()> {
        // Many rows per statement: each statement is a round trip to the connection's worker
        // thread, and one per row held the embedding lane to three quarters of its rate
        // (benches/README.md, "Search during a backlog").
        let mut tx = self.begin().await?;
        for chunk in rows.chunks(VECTOR_ROWS_PER_STATEMENT) {
            let mut b = QueryBuilder::<Sqlite>::new("WITH v(id, e) AS (VALUES ");
            let mut list = b.separated(", ");
            for (id, v) in chunk {
                list.push("(")
                    .push_bind_unseparated(id.to_string())
                    .push_unseparated(", ")
                    .push_bind_unseparated(vec_to_blob(v))
                    .push_unseparated(")");
            }
            let t = table.table();
            b.push(format!(") UPDATE {t} SET embedding = v.e, embedding_model = "));
            b.push_bind(model.to_string());
            b.push(format!(" FROM v WHERE {t}.tenant_id = "));
            b.push_bind(tenant.as_str().to_string());
            b.push(format!(" AND {t}.id = v.id"));
            b.build().execute(&mut *tx).await.map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn fill_message(&self, tenant: &TenantId, id: MessageId, text: &str) -> Result<bool> {
        // The FTS5 index follows by trigger.
        let sql = "UPDATE messages SET content = ?, keyword_text = ? \
                   WHERE tenant_id = ? AND id = ? AND content = ''";
        let words = crate::text::keyword_text(text);
        let args = [
            Arg::Text(text),
            Arg::OptText(words.as_deref()),
            Arg::Text(tenant.as_str()),
            Arg::Id(id.0),
        ];
        Ok(self.write(sql, &args).await? == 1)
    }

    async fn record_space(&self, model_id: &str, dims: usize, reset: bool) -> Result<()> {
        if !reset && let Some((m, d)) = common::memories::embedding_space(self).await? {
            return common::memories::same_space((&m, d), (model_id, dims));
        }
        let conflict = if reset { "OR REPLACE" } else { "OR IGNORE" };
        let sql = format!(
            "INSERT {conflict} INTO meta (key, value) \
             VALUES ('embedding_model', ?), ('embedding_dims', ?)"
        );
        self.write(&sql, &[Arg::Text(model_id), Arg::Owned(dims.to_string())]).await?;
        Ok(())
    }

    async fn erased(&self, tenant: &str, user: &str) -> Result<()> {
        self.vectors.drop_user(tenant, user);
        self.transcripts.drop_user(tenant, user);
        for optimize in [OPTIMIZE_MEMORIES, OPTIMIZE_MESSAGES, OPTIMIZE_SUMMARIES] {
            self.scrub_keywords(optimize).await?;
        }
        self.secure_delete(false).await?;
        // The log still holds the pages as they were before the erasure: copy it into the
        // database and empty it (a reader still on an old snapshot can keep it from being
        // emptied; the next checkpoint then does).
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.write).await.map_err(db)?;
        Ok(())
    }

    async fn deleting(&self) -> Result<()> {
        self.secure_delete(true).await
    }

    async fn purged(&self) -> Result<()> {
        self.scrub_keywords(OPTIMIZE_MEMORIES).await?;
        self.secure_delete(false).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.write).await.map_err(db)?;
        Ok(())
    }

    async fn backup_rows(&self, scope: &BackupScope, sink: &mut Sink<'_>) -> Result<u64> {
        crate::backup::sqlite_backup(&self.read, scope, sink).await
    }

    async fn restore_rows(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        crate::backup::sqlite_restore(&self.write, rows, state).await
    }

    async fn claim(
        &self,
        now: OffsetDateTime,
        lease: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        let row = self
            .write_opt(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = ?1, updated_at = ?2 \
                 WHERE id = (SELECT j.id FROM jobs j \
                   WHERE ((j.status = 'pending' AND j.run_after <= ?2) OR (j.status = 'running' AND j.lease_until <= ?2)) \
                     AND j.kind IN (SELECT value FROM json_each(?3)) \
                     AND (j.lock_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs r WHERE r.tenant_id = j.tenant_id \
                          AND r.lock_key = j.lock_key AND r.status = 'running' AND r.lease_until > ?2 AND r.id != j.id)) \
                   ORDER BY j.run_after, j.id LIMIT 1) \
                 RETURNING *",
                &[Arg::Ts(lease), Arg::Ts(now), Arg::Texts(kinds)],
            )
            .await?;
        row.as_ref().map(common::rows::job).transpose()
    }
}

impl SqliteDb {
    /// `secure_delete` of the writer connection: `ON` for an erasure or a purge (every
    /// freed page zeroed, also those freed whole, which `FAST` leaves as they were: a
    /// tester read 30 erased facts back from the file), `FAST` otherwise (the embedding
    /// lane's updates cost no extra I/O). Set on the one writer connection, between
    /// transactions.
    async fn secure_delete(&self, all: bool) -> Result<()> {
        let sql = if all { "PRAGMA secure_delete = ON" } else { "PRAGMA secure_delete = FAST" };
        sqlx::query(sql).execute(&self.write).await.map_err(db)?;
        Ok(())
    }

    /// Rewrite an FTS5 index without the words of deleted rows. A contentless index with
    /// `contentless_delete` only marks a deleted row (its `secure-delete` option does not
    /// apply to such tables): the row's words stay in the index's pages until their
    /// segments are merged. `optimize` merges every segment now (about 0.7 s per 100,000
    /// rows of 30 words, on the one writer connection); `secure_delete` then zeroes the
    /// freed pages.
    async fn scrub_keywords(&self, optimize: &'static str) -> Result<()> {
        sqlx::query(optimize).execute(&self.write).await.map_err(db)?;
        Ok(())
    }
}
