//! SQLite: the [`engram_core::store::AccessStore`] part of the store. Who may call: API keys (stored hashed) and agent settings.

use super::*;

#[async_trait]
impl AccessStore for SqliteStore {
    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        let (role, agent, user) = match &key.role {
            KeyRole::Admin => ("admin", None, None),
            KeyRole::Agent(a) => ("agent", Some(a.as_str()), None),
            KeyRole::User(u) => ("user", None, Some(u.as_str())),
        };
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO api_keys (id, tenant_id, role, agent_id, user_id, prefix, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&key.id)
        .bind(key.tenant.as_str())
        .bind(role)
        .bind(agent)
        .bind(user)
        .bind(&key.prefix)
        .bind(secret_hash)
        .bind(ts(key.created_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            "SELECT * FROM api_keys WHERE (?1 IS NULL OR tenant_id = ?1) ORDER BY created_at, id",
        )
        .bind(tenant.map(TenantId::as_str))
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(key_from_row).collect()
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        let n =
            sqlx::query("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL")
                .bind(ts(OffsetDateTime::now_utc()))
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
        tx.commit().await.map_err(db)?;
        if n == 0 {
            return Err(Error::not_found(format!("active key {id}")));
        }
        Ok(())
    }

    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        let row =
            sqlx::query("SELECT * FROM api_keys WHERE secret_hash = ? AND revoked_at IS NULL")
                .bind(secret_hash)
                .fetch_optional(&self.read)
                .await
                .map_err(db)?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        let n: i64 = sqlx::query("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL")
            .fetch_one(&self.read)
            .await
            .map_err(db)?
            .get(0);
        Ok(n as u64)
    }

    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        let row = sqlx::query("SELECT * FROM agents WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(agent_from_row).transpose()
    }

    async fn get_agents(&self, tenant: &TenantId, ids: &[AgentId]) -> Result<Vec<Agent>> {
        let ids: Vec<String> = ids.iter().map(|a| a.as_str().to_string()).collect();
        self.select_by_ids("SELECT * FROM agents", tenant, &ids, agent_from_row).await
    }

    async fn put_agent(&self, a: &Agent) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO agents (tenant_id, id, memory_enabled, cluster_id, dedup_threshold, settings, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, id) DO UPDATE SET \
             memory_enabled = excluded.memory_enabled, cluster_id = excluded.cluster_id, \
             dedup_threshold = excluded.dedup_threshold, settings = excluded.settings, updated_at = excluded.updated_at",
        )
        .bind(a.tenant_id.as_str())
        .bind(a.id.as_str())
        .bind(i64::from(a.memory_enabled))
        .bind(a.cluster_id.as_deref())
        .bind(f64::from(a.dedup_threshold))
        .bind(a.settings.to_string())
        .bind(ts(a.created_at))
        .bind(ts(a.updated_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }
}
