//! The [`engram_core::store::AccessStore`] methods, the same on both backends: API keys,
//! web-UI sign-ins and agent settings.

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use engram_core::model::{Agent, AgentId, KeyRole, TenantId};
use engram_core::store::AccessStore;
use engram_core::store::{ApiKey, UiSession};
use time::OffsetDateTime;

use super::Arg::{Bool, Json, OptText, Real, Text, Texts, Ts};
use super::Backend;
use super::SqlStore;
use super::rows::{self, Columns};
use super::store::Native;

pub(crate) async fn create_api_key<B: Backend>(
    b: &B,
    key: &ApiKey,
    secret_hash: &str,
) -> Result<()> {
    let (role, agent, user) = match &key.role {
        KeyRole::Admin => ("admin", None, None),
        KeyRole::Agent(a) => ("agent", Some(a.as_str()), None),
        KeyRole::User(u) => ("user", None, Some(u.as_str())),
    };
    b.write(
        "INSERT INTO api_keys (tenant_id, id, role, agent_id, user_id, prefix, secret_hash, created_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        &[
            Text(key.tenant.as_str()),
            Text(&key.id),
            Text(role),
            OptText(agent),
            OptText(user),
            Text(&key.prefix),
            Text(secret_hash),
            Ts(key.created_at),
        ],
    )
    .await?;
    Ok(())
}

/// Every key (of one tenant, or of all), oldest first.
pub(crate) async fn list_api_keys<B: Backend>(
    b: &B,
    tenant: Option<&TenantId>,
) -> Result<Vec<ApiKey>> {
    let sql = format!(
        "SELECT * FROM api_keys WHERE (CAST(?1 AS TEXT) IS NULL OR tenant_id = ?1) \
         ORDER BY created_at, id{}",
        B::BYTE_ORDER
    );
    let rows = b.read_all(&sql, &[OptText(tenant.map(TenantId::as_str))]).await?;
    rows.iter().map(rows::api_key).collect()
}

pub(crate) async fn revoke_api_key<B: Backend>(b: &B, id: &str) -> Result<()> {
    let n = b
        .write(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            &[Ts(OffsetDateTime::now_utc()), Text(id)],
        )
        .await?;
    if n == 0 {
        return Err(Error::not_found(format!("active key {id}")));
    }
    Ok(())
}

pub(crate) async fn find_api_key<B: Backend>(b: &B, secret_hash: &str) -> Result<Option<ApiKey>> {
    let sql = "SELECT * FROM api_keys WHERE secret_hash = ? AND revoked_at IS NULL";
    let row = b.read_opt(sql, &[Text(secret_hash)]).await?;
    row.as_ref().map(rows::api_key).transpose()
}

pub(crate) async fn count_active_api_keys<B: Backend>(b: &B) -> Result<u64> {
    let sql = "SELECT count(*) AS n FROM api_keys WHERE revoked_at IS NULL";
    let row = b.read_opt(sql, &[]).await?;
    Ok(row.map(|r| r.int("n")).transpose()?.unwrap_or(0).max(0) as u64)
}

/// Record a web-UI sign-in, after deleting the expired ones (a handful at most: sign-ins are
/// rare, and each one sweeps).
pub(crate) async fn create_ui_session<B: Backend>(b: &B, s: &UiSession) -> Result<()> {
    b.write("DELETE FROM ui_sessions WHERE expires_at <= ?", &[Ts(s.created_at)]).await?;
    b.write(
        "INSERT INTO ui_sessions (token_hash, tenant_id, key_id, csrf, created_at, expires_at) \
         VALUES (?, ?, ?, ?, ?, ?)",
        &[
            Text(&s.token_hash),
            Text(s.tenant.as_str()),
            Text(&s.key_id),
            Text(&s.csrf),
            Ts(s.created_at),
            Ts(s.expires_at),
        ],
    )
    .await?;
    Ok(())
}

/// The live sign-in with this token hash and its key, while the key is active.
pub(crate) async fn find_ui_session<B: Backend>(
    b: &B,
    token_hash: &str,
    now: OffsetDateTime,
) -> Result<Option<(UiSession, ApiKey)>> {
    let sql = "SELECT k.*, s.token_hash AS session_token_hash, s.csrf AS session_csrf, \
               s.created_at AS session_created_at, s.expires_at AS session_expires_at \
               FROM ui_sessions s JOIN api_keys k ON k.tenant_id = s.tenant_id AND k.id = s.key_id \
               WHERE s.token_hash = ? AND s.expires_at > ? AND k.revoked_at IS NULL";
    let Some(r) = b.read_opt(sql, &[Text(token_hash), Ts(now)]).await? else { return Ok(None) };
    let key = rows::api_key(&r)?;
    let session = UiSession {
        token_hash: r.text("session_token_hash")?,
        tenant: key.tenant.clone(),
        key_id: key.id.clone(),
        csrf: r.text("session_csrf")?,
        created_at: r.ts("session_created_at")?,
        expires_at: r.ts("session_expires_at")?,
    };
    Ok(Some((session, key)))
}

pub(crate) async fn delete_ui_session<B: Backend>(b: &B, token_hash: &str) -> Result<()> {
    b.write("DELETE FROM ui_sessions WHERE token_hash = ?", &[Text(token_hash)]).await?;
    Ok(())
}

pub(crate) async fn get_agent<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: &AgentId,
) -> Result<Option<Agent>> {
    let sql = "SELECT * FROM agents WHERE tenant_id = ? AND id = ?";
    let row = b.read_opt(sql, &[Text(tenant.as_str()), Text(id.as_str())]).await?;
    row.as_ref().map(rows::agent).transpose()
}

/// The agents of a tenant among `ids`, in any order.
pub(crate) async fn get_agents<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[AgentId],
) -> Result<Vec<Agent>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let ids = Texts(ids.iter().map(AgentId::as_str).collect());
    super::by_ids(b, "SELECT * FROM agents", tenant.as_str(), ids, rows::agent).await
}

/// Every agent of a tenant with settings, by id.
pub(crate) async fn list_agents<B: Backend>(b: &B, tenant: &TenantId) -> Result<Vec<Agent>> {
    let sql = format!("SELECT * FROM agents WHERE tenant_id = ? ORDER BY id{}", B::BYTE_ORDER);
    let rows = b.read_all(&sql, &[Text(tenant.as_str())]).await?;
    rows.iter().map(rows::agent).collect()
}

/// Create or update an agent's settings (its creation time stays).
pub(crate) async fn put_agent<B: Backend>(b: &B, a: &Agent) -> Result<()> {
    b.write(
        "INSERT INTO agents (tenant_id, id, memory_enabled, cluster_id, dedup_threshold, settings, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, id) DO UPDATE SET \
         memory_enabled = excluded.memory_enabled, cluster_id = excluded.cluster_id, \
         dedup_threshold = excluded.dedup_threshold, settings = excluded.settings, updated_at = excluded.updated_at",
        &[
            Text(a.tenant_id.as_str()),
            Text(a.id.as_str()),
            Bool(a.memory_enabled),
            OptText(a.cluster_id.as_deref()),
            Real(f64::from(a.dedup_threshold)),
            Json(&a.settings),
            Ts(a.created_at),
            Ts(a.updated_at),
        ],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl<D: Native> AccessStore for SqlStore<D> {
    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        create_api_key(&self.0, key, secret_hash).await
    }

    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        list_api_keys(&self.0, tenant).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        revoke_api_key(&self.0, id).await
    }

    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        find_api_key(&self.0, secret_hash).await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        count_active_api_keys(&self.0).await
    }

    async fn create_ui_session(&self, s: &UiSession) -> Result<()> {
        create_ui_session(&self.0, s).await
    }

    async fn find_ui_session(
        &self,
        token_hash: &str,
        now: OffsetDateTime,
    ) -> Result<Option<(UiSession, ApiKey)>> {
        find_ui_session(&self.0, token_hash, now).await
    }

    async fn delete_ui_session(&self, token_hash: &str) -> Result<()> {
        delete_ui_session(&self.0, token_hash).await
    }

    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        get_agent(&self.0, tenant, id).await
    }

    async fn get_agents(&self, tenant: &TenantId, ids: &[AgentId]) -> Result<Vec<Agent>> {
        get_agents(&self.0, tenant, ids).await
    }

    async fn put_agent(&self, a: &Agent) -> Result<()> {
        put_agent(&self.0, a).await
    }

    async fn list_agents(&self, tenant: &TenantId) -> Result<Vec<Agent>> {
        list_agents(&self.0, tenant).await
    }
}
