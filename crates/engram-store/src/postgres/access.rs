//! PostgreSQL: the [`engram_core::store::AccessStore`] part of the store. Who may call: API keys (stored hashed) and agent settings.

use super::*;

#[async_trait]
impl AccessStore for PgStore {
    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        let (role, agent, user) = match &key.role {
            KeyRole::Admin => ("admin", None, None),
            KeyRole::Agent(a) => ("agent", Some(a.as_str()), None),
            KeyRole::User(u) => ("user", None, Some(u.as_str())),
        };
        sqlx::query(
            "INSERT INTO api_keys (tenant_id, id, role, agent_id, user_id, prefix, secret_hash, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(key.tenant.as_str())
        .bind(&key.id)
        .bind(role)
        .bind(agent)
        .bind(user)
        .bind(&key.prefix)
        .bind(secret_hash)
        .bind(key.created_at)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            "SELECT * FROM api_keys WHERE ($1::text IS NULL OR tenant_id = $1) ORDER BY created_at, id COLLATE \"C\"",
        )
        .bind(tenant.map(TenantId::as_str))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(rows::api_key).collect()
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        let n = sqlx::query(
            "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(db)?
        .rows_affected();
        if n == 0 {
            return Err(Error::not_found(format!("active key {id}")));
        }
        Ok(())
    }

    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        let row =
            sqlx::query("SELECT * FROM api_keys WHERE secret_hash = $1 AND revoked_at IS NULL")
                .bind(secret_hash)
                .fetch_optional(&self.pool)
                .await
                .map_err(db)?;
        row.as_ref().map(rows::api_key).transpose()
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        let r = sqlx::query("SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        Ok(col::<i64>(&r, "n")?.max(0) as u64)
    }

    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        let row = sqlx::query("SELECT * FROM agents WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::agent).transpose()
    }

    async fn get_agents(&self, tenant: &TenantId, ids: &[AgentId]) -> Result<Vec<Agent>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let ids: Vec<&str> = ids.iter().map(AgentId::as_str).collect();
        let rows = sqlx::query("SELECT * FROM agents WHERE tenant_id = $1 AND id = ANY($2)")
            .bind(tenant.as_str())
            .bind(&ids)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.iter().map(rows::agent).collect()
    }

    async fn put_agent(&self, a: &Agent) -> Result<()> {
        sqlx::query(
            "INSERT INTO agents (tenant_id, id, memory_enabled, cluster_id, dedup_threshold, settings, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (tenant_id, id) DO UPDATE SET \
             memory_enabled = excluded.memory_enabled, cluster_id = excluded.cluster_id, \
             dedup_threshold = excluded.dedup_threshold, settings = excluded.settings, updated_at = excluded.updated_at",
        )
        .bind(a.tenant_id.as_str())
        .bind(a.id.as_str())
        .bind(a.memory_enabled)
        .bind(a.cluster_id.as_deref())
        .bind(f64::from(a.dedup_threshold))
        .bind(&a.settings)
        .bind(a.created_at)
        .bind(a.updated_at)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }
}
