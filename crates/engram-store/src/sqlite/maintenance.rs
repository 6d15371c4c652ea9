//! SQLite: the [`engram_core::store::MaintenanceStore`] part of the store. Operator and tenant-wide work: the embedding space and re-embedding, tenants and users, GDPR erasure and export, statistics, backup and restore.

use super::*;

#[async_trait]
impl MaintenanceStore for SqliteStore {
    async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        let rows = sqlx::query(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dims')",
        )
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let mut model = None;
        let mut dims = None;
        for r in rows {
            match r.get::<&str, _>(0) {
                "embedding_model" => model = Some(r.get::<String, _>(1)),
                _ => dims = r.get::<&str, _>(1).parse::<usize>().ok(),
            }
        }
        Ok(model.zip(dims))
    }

    async fn ensure_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        if let Some((m, d)) = self.embedding_space().await? {
            if d != dims || m != model_id {
                return Err(Error::Unprocessable(format!(
                    "this store holds vectors of '{m}' ({d} dimensions); refusing vectors of '{model_id}' ({dims})"
                )));
            }
            return Ok(());
        }
        let mut tx = self.begin().await?;
        sqlx::query("INSERT OR IGNORE INTO meta (key, value) VALUES ('embedding_model', ?), ('embedding_dims', ?)")
            .bind(model_id)
            .bind(dims.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        let rows = sqlx::query(
            "SELECT tenant_id FROM memories UNION SELECT tenant_id FROM messages ORDER BY 1",
        )
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(|r| TenantId::parse(r.get::<String, _>(0))).collect()
    }

    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        let rows = sqlx::query(
            "SELECT id, content FROM memories WHERE tenant_id = ? AND kind != 'profile' \
             AND (embedding IS NULL OR embedding_model IS NULL OR embedding_model != ?) ORDER BY id LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| Ok((MemoryId::parse(r.get("id"))?, r.get::<String, _>("content"))))
            .collect()
    }

    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let mut versions: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for (id, v) in rows {
            let user: Option<String> =
                sqlx::query("SELECT user_id FROM memories WHERE tenant_id = ? AND id = ?")
                    .bind(tenant.as_str())
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(db)?
                    .map(|r| r.get(0));
            let Some(user) = user else { continue };
            let version = match versions.get(&user) {
                Some(v) => *v,
                None => {
                    let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), &user).await?;
                    versions.insert(user.clone(), v);
                    v
                }
            };
            sqlx::query("UPDATE memories SET embedding = ?, embedding_model = ?, version = ? WHERE tenant_id = ? AND id = ?")
                .bind(vec_to_blob(&v))
                .bind(model_id)
                .bind(version)
                .bind(tenant.as_str())
                .bind(id.to_string())
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?), ('embedding_dims', ?)")
            .bind(model_id)
            .bind(dims.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        let rows = sqlx::query(
            "SELECT user_id FROM memories WHERE tenant_id = ?1 UNION SELECT user_id FROM conversations WHERE tenant_id = ?1 ORDER BY 1",
        )
        .bind(tenant.as_str())
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(|r| UserId::parse(r.get::<String, _>(0))).collect()
    }

    async fn erase_user(&self, tenant: &TenantId, user: &UserId) -> Result<EraseCounts> {
        let mut tx = self.begin().await?;
        let t = tenant.as_str();
        let u = user.as_str();
        let mut counts = EraseCounts::default();
        for (table, sql) in crate::tables::erase_statements(|_| "?".to_string()) {
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
        self.vectors.drop_user(t, u);
        Ok(counts)
    }

    async fn user_messages(&self, tenant: &TenantId, user: &UserId) -> Result<Vec<Message>> {
        let rows = sqlx::query("SELECT * FROM messages WHERE tenant_id = ? AND user_id = ? ORDER BY conversation_id, seq")
            .bind(tenant.as_str())
            .bind(user.as_str())
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        rows.iter().map(message_from_row).collect()
    }

    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND user_id = ? ORDER BY id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        let memories = rows.iter().map(memory_from_row).collect::<Result<Vec<_>>>()?;
        let rows = sqlx::query(
            "SELECT * FROM memory_events WHERE tenant_id = ? AND user_id = ? ORDER BY at, id",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let events = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
        Ok((memories, events))
    }

    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        let t = tenant.as_str();
        let r = sqlx::query(
            "SELECT \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND superseded_at IS NULL) AS active, \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND superseded_at IS NOT NULL) AS superseded, \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND (embedding IS NOT NULL OR kind = 'profile') AND superseded_at IS NULL) AS with_vec, \
              (SELECT count(DISTINCT user_id) FROM memories WHERE tenant_id = ?1) AS users, \
              (SELECT count(*) FROM conversations WHERE tenant_id = ?1) AS convs, \
              (SELECT count(*) FROM messages WHERE tenant_id = ?1) AS msgs, \
              (SELECT count(*) FROM messages WHERE tenant_id = ?1 AND embedding IS NOT NULL) AS msgs_vec, \
              (SELECT count(*) FROM messages m WHERE tenant_id = ?1 AND NOT EXISTS \
                 (SELECT 1 FROM summary_sources s WHERE s.tenant_id = ?1 AND s.source_id = m.id)) AS unsummarized, \
              (SELECT count(*) FROM summaries WHERE tenant_id = ?1) AS summaries, \
              (SELECT coalesce(max(depth) + 1, 0) FROM summaries WHERE tenant_id = ?1) AS depth, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'pending') AS pending, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'running') AS running, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'failed') AS failed, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'done') AS done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'done') AS ex_done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'failed') AS ex_failed",
        )
        .bind(t)
        .fetch_one(&self.read)
        .await
        .map_err(db)?;
        let g = |c: &str| r.get::<i64, _>(c) as u64;
        let space = self.embedding_space().await?;
        Ok(StoreStats {
            memories_active: g("active"),
            memories_superseded: g("superseded"),
            memories_with_vector: g("with_vec"),
            users: g("users"),
            conversations: g("convs"),
            messages: g("msgs"),
            messages_with_vector: g("msgs_vec"),
            messages_unsummarized: g("unsummarized"),
            summaries: g("summaries"),
            summary_depth: g("depth"),
            jobs_pending: g("pending"),
            jobs_running: g("running"),
            jobs_failed: g("failed"),
            jobs_done: g("done"),
            extractions_done: g("ex_done"),
            extractions_failed: g("ex_failed"),
            embedding_model: space.as_ref().map(|s| s.0.clone()),
            embedding_dims: space.map(|s| s.1 as u64),
        })
    }

    async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        crate::backup::sqlite_backup(&self.read, scope, sink).await
    }

    async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        crate::backup::sqlite_restore(&self.write, rows, state).await
    }
}
