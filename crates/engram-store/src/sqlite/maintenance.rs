//! SQLite: the [`engram_core::store::MaintenanceStore`] part of the store. Operator and tenant-wide work: the embedding space and re-embedding, tenants and users, GDPR erasure and export, statistics, backup and restore.
//!
//! What both backends do alike is written once in [`crate::common::memories`]; this file holds
//! the rest and calls it.

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
        self.set_space(false, model_id, dims).await
    }

    async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        common::memories::tenants(self).await
    }

    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        common::memories::needing_vectors(self, tenant, model_id, limit).await
    }

    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        common::memories::set_vectors(self, tenant, model_id, rows).await
    }

    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.set_space(true, model_id, dims).await
    }

    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        common::memories::users(self, tenant).await
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
        common::memories::user_messages(self, tenant, user).await
    }

    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        common::memories::user_memories(self, tenant, user).await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        common::memories::stats(self, tenant, self.embedding_space().await?).await
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
