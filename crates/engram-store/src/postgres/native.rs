//! PostgreSQL: what this backend does its own way ([`Native`]); the rest of the store
//! contract is written once in [`crate::common`]. Batch inserts are one `INSERT … SELECT
//! FROM unnest(…)` per table, searches go through pgvector and the BM25 of [`super::search`],
//! message vectors are written in one statement, and jobs are claimed as [`super::jobs`]
//! describes.

use super::*;
use crate::common::store::{
    Hits, Native, Ranked, Select, Sink, Transcript, TranscriptScope, VectorScope, Vectors, Versions,
};

#[async_trait]
impl Native for PgDb {
    async fn insert_rows(tx: &mut Tx, rows: &[NewMemory], v: &Versions) -> Result<()> {
        // One statement per table for the whole batch (one round trip per row and event
        // made a 1,000-row batch ~2,000 statements).
        for chunk in rows.chunks(INSERT_CHUNK) {
            Self::insert_chunk(tx, chunk, v).await?;
        }
        Ok(())
    }

    async fn select(&self, tenant: &TenantId, s: Select<'_>) -> Result<Vec<Memory>> {
        let mut q = QueryBuilder::<Postgres>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        push_filter(&mut q, s.filter, OffsetDateTime::now_utc(), "");
        if let Some(c) = s.cursor {
            q.push(" AND id < ").push_bind(c.0);
        }
        q.push(s.order);
        if let Some(l) = s.limit {
            q.push(" LIMIT ").push_bind(l);
        }
        let rows = q.build().fetch_all(&self.pool).await.map_err(db)?;
        rows.iter().map(rows::memory).collect()
    }

    async fn search_vectors(&self, q: Ranked<'_, &MemoryFilter, [f32]>) -> Hits<MemoryId, f32> {
        self.vector_search_impl(q).await
    }

    async fn search_text(&self, q: Ranked<'_, &MemoryFilter, str>) -> Hits<MemoryId, f64> {
        let scope = search::TextScope::Memories(q.tenant, q.scope);
        self.text_search_impl(scope, q.query, q.k, MemoryId).await
    }

    async fn search_transcript_text(
        &self,
        q: Ranked<'_, TranscriptScope<'_>, str>,
    ) -> Hits<Uuid, f64> {
        let scope = search::TextScope::Transcript(q.tenant, q.scope.0, q.scope.1);
        self.text_search_impl(scope, q.query, q.k, |id| id).await
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
        if self.transcript_cached(&key)
            && let Some(top) = crate::common::transcript_vectors::cached_top(
                self,
                &key,
                (
                    filter.since.map(super::transcript_vectors::micros),
                    filter.until.map(super::transcript_vectors::micros),
                ),
                query,
                q.k,
            )
            .await?
        {
            return Ok(top);
        }
        // A user of few rows, or the cache could not vouch for an answer: rank the user's
        // rows in SQL (exact, and only vectors of the query's model and dimension are
        // compared), counting them to know whether the cache would be worth it.
        let qv = pgvector::Vector::from(query.to_vec());
        let mut b =
            QueryBuilder::<Postgres>::new("SELECT count(*) OVER () AS n, id, -(embedding <#> ");
        b.push_bind(qv.clone()).push(format!(") AS sim FROM {} WHERE tenant_id = ", table.table()));
        b.push_bind(q.tenant.as_str().to_string());
        super::push_window(&mut b, filter, table, "");
        b.push(" AND embedding_model = ").push_bind(model.to_string());
        b.push(" AND vector_dims(embedding) = ").push_bind(query.len() as i32);
        b.push(" ORDER BY embedding <#> ").push_bind(qv).push(", id LIMIT ").push_bind(q.k as i64);
        let rows = b.build().fetch_all(&self.pool).await.map_err(db)?;
        if let Some(r) = rows.first() {
            self.note_transcript_rows(&key, usize::try_from(col::<i64>(r, "n")?).unwrap_or(0));
        }
        rows.iter().map(|r| Ok((col(r, "id")?, col::<f64>(r, "sim")? as f32))).collect()
    }

    async fn score_transcript_vectors(
        &self,
        tenant: &TenantId,
        table: Transcript,
        model: &str,
        query: &[f32],
        ids: &[Uuid],
    ) -> Hits<Uuid, f32> {
        let sql = format!(
            "SELECT id, -(embedding <#> $1) AS sim FROM {} WHERE tenant_id = $2 \
             AND id = ANY($3) AND embedding_model = $4 AND vector_dims(embedding) = $5",
            table.table()
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(pgvector::Vector::from(query.to_vec()))
            .bind(tenant.as_str())
            .bind(ids)
            .bind(model)
            .bind(query.len() as i32)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.iter().map(|r| Ok((col(r, "id")?, col::<f64>(r, "sim")? as f32))).collect()
    }

    async fn store_transcript_vectors(
        &self,
        tenant: &TenantId,
        table: Transcript,
        model: &str,
        rows: Vectors<Uuid>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let vectors: Vec<pgvector::Vector> =
            rows.into_iter().map(|r| pgvector::Vector::from(r.1)).collect();
        let sql = format!(
            "UPDATE {} m SET embedding = v.embedding, embedding_model = $2, \
             vector_xid = pg_current_xact_id() \
             FROM unnest($3::uuid[], $4::vector[]) AS v(id, embedding) \
             WHERE m.tenant_id = $1 AND m.id = v.id",
            table.table()
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(model)
            .bind(&ids)
            .bind(&vectors)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn fill_message(&self, tenant: &TenantId, id: MessageId, text: &str) -> Result<bool> {
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
        // The keyword index is a column of the row here.
        sqlx::query(
            "UPDATE messages SET content = $1, fts_text = $2 WHERE tenant_id = $3 AND id = $4",
        )
        .bind(text)
        .bind(index_text(&[text, tool.as_deref().unwrap_or("")]))
        .bind(tenant.as_str())
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(true)
    }

    async fn record_space(&self, model_id: &str, dims: usize, reset: bool) -> Result<()> {
        self.ensure_space(model_id, dims, reset).await
    }

    async fn erased(&self, tenant: &str, user: &str) -> Result<()> {
        self.transcripts.drop_user(tenant, user);
        self.forget_transcript_sizes(tenant, user);
        Ok(())
    }

    async fn backup_rows(&self, scope: &BackupScope, sink: &mut Sink<'_>) -> Result<u64> {
        crate::backup::pg_backup(&self.pool, scope, sink).await
    }

    async fn restore_rows(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        crate::backup::pg_restore(&self.pool, rows, state).await
    }

    async fn claim(
        &self,
        now: OffsetDateTime,
        lease: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        jobs::claim(&self.pool, now, lease, kinds).await
    }

    async fn claim_many(
        &self,
        now: OffsetDateTime,
        lease: OffsetDateTime,
        kinds: &[JobKind],
        limit: usize,
    ) -> Result<Vec<Job>> {
        jobs::claim_many(&self.pool, now, lease, kinds, limit).await
    }
}

#[async_trait]
impl crate::common::typos::PrefixWords for PgDb {
    /// Per prefix, one prefix query of the scope's postings (the user's keyed lexemes of
    /// migration 4, or the tenant's rows through the unscoped index), `fts_text` read from at
    /// most `rows` rows. A prefix is letters only ([`crate::common::typos`]), so it needs no
    /// quoting inside the tsquery.
    async fn prefix_words(
        &self,
        tenant: &TenantId,
        user: Option<&str>,
        table: &'static str,
        prefixes: &[String],
        rows: usize,
    ) -> Result<Vec<Vec<(String, usize)>>> {
        let mut out = vec![Vec::new(); prefixes.len()];
        let limit = i64::try_from(rows).unwrap_or(i64::MAX);
        for (p, words) in prefixes.iter().zip(out.iter_mut()) {
            if !p.chars().all(char::is_alphabetic) {
                continue;
            }
            let mut q = QueryBuilder::<Postgres>::new(format!(
                "SELECT fts_text FROM {table} WHERE tenant_id = "
            ));
            q.push_bind(tenant.as_str().to_string());
            match user {
                // The key from the bound values, not the row's columns: a constant tsquery
                // lets the planner read the user's postings through the GIN index.
                Some(u) => {
                    q.push(" AND user_id = ").push_bind(u.to_string());
                    q.push(" AND engram_scoped_fts(tenant_id, user_id, fts) @@ ('''' || ");
                    q.push("engram_fts_key(").push_bind(tenant.as_str().to_string());
                    q.push(", ").push_bind(u.to_string()).push(") || '_' || ");
                }
                None => {
                    q.push(" AND fts @@ ('''' || ");
                }
            }
            q.push_bind(p.clone()).push(" || ''':*')::tsquery");
            if table == "memories" {
                q.push(" AND superseded_at IS NULL");
            }
            q.push(" LIMIT ").push_bind(limit);
            for r in q.build().fetch_all(&self.pool).await.map_err(db)? {
                let text: Option<String> = sqlx::Row::try_get(&r, 0).map_err(db)?;
                crate::common::typos::count_words(text.as_deref().unwrap_or(""), p, words);
            }
        }
        Ok(out)
    }
}
