//! PostgreSQL: the [`engram_core::store::MaintenanceStore`] part of the store. Operator and tenant-wide work: the embedding space and re-embedding, tenants and users, GDPR erasure and export, statistics, backup and restore.
//!
//! What both backends do alike is written once in [`crate::common::memories`]; this file holds
//! the rest and calls it.

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
        common::memories::tenants(&self.pool).await
    }

    async fn rows_needing_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MemoryId, String)>> {
        common::memories::needing_vectors(&self.pool, tenant, model_id, limit).await
    }

    async fn set_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MemoryId, Vec<f32>)>,
    ) -> Result<()> {
        common::memories::set_vectors(&self.pool, tenant, model_id, rows).await
    }

    async fn reset_embedding_space(&self, model_id: &str, dims: usize) -> Result<()> {
        self.ensure_space(model_id, dims, true).await
    }

    async fn list_users(&self, tenant: &TenantId) -> Result<Vec<UserId>> {
        common::memories::users(&self.pool, tenant).await
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
        common::memories::user_messages(&self.pool, tenant, user).await
    }

    async fn user_memories(
        &self,
        tenant: &TenantId,
        user: &UserId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        common::memories::user_memories(&self.pool, tenant, user).await
    }

    async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        common::memories::stats(&self.pool, tenant, self.embedding_space().await?).await
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
