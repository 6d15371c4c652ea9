//! PostgreSQL: the [`engram_core::store::MaintenanceStore`] part of the store. Operator and tenant-wide work: the embedding space and re-embedding, tenants and users, GDPR erasure and export, statistics, backup and restore.

use super::*;

#[async_trait]
impl MaintenanceStore for PgStore {
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
        for (table, sql) in crate::tables::erase_statements(|i| format!("${i}")) {
            let n = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(t)
                .bind(u)
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
            crate::tables::count_erased(&mut counts, table, n);
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
}
