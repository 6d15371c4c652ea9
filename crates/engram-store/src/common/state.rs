//! The [`engram_core::store::StateStore`] methods, the same on both backends: working memory,
//! one row per `(tenant, user, agent, session, key)` in `session_state` (no agent is stored
//! as `''`: a primary key column cannot be NULL on PostgreSQL).
//!
//! Every read takes `now` and skips rows whose `expires_at` has passed, so an entry is
//! unreadable the instant its TTL ends, whether or not [`sweep`] has deleted it yet. A put
//! over an expired row starts a new entry (its `created_at` is the put's).

use engram_core::error::Result;
use engram_core::model::{AgentId, SessionId, SessionState, StateKey, TenantId, UserId};
use engram_core::store::StateScope;
use time::OffsetDateTime;

use super::Arg::{Json, Text, Ts};
use super::Backend;
use super::rows::Columns;
use super::store::{Native, SqlStore};
use async_trait::async_trait;
use engram_core::store::StateStore;

/// Entries a session lists at most (a session's working memory is small by nature; the
/// rest is not returned, oldest keys first kept).
pub(crate) const LIST_LIMIT: i64 = 1000;

fn agent_col(agent: Option<&AgentId>) -> &str {
    agent.map_or("", AgentId::as_str)
}

pub(crate) fn row(r: &impl Columns) -> Result<SessionState> {
    let agent = r.text("agent_id")?;
    Ok(SessionState {
        tenant_id: TenantId::parse(r.text("tenant_id")?)?,
        user_id: UserId::parse(r.text("user_id")?)?,
        agent_id: if agent.is_empty() { None } else { Some(AgentId::parse(agent)?) },
        session_id: SessionId::parse(r.text("session_id")?)?,
        key: StateKey::parse(r.text("key")?)?,
        value: r.json("value")?,
        expires_at: r.ts("expires_at")?,
        created_at: r.ts("created_at")?,
        updated_at: r.ts("updated_at")?,
    })
}

/// Create or replace an entry; returns it as stored.
pub(crate) async fn put<B: Backend>(b: &B, s: &SessionState) -> Result<SessionState> {
    let stored = b
        .write_opt(
            "INSERT INTO session_state (tenant_id, user_id, agent_id, session_id, key, value, \
             expires_at, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
             ON CONFLICT (tenant_id, user_id, agent_id, session_id, key) DO UPDATE SET \
             value = excluded.value, expires_at = excluded.expires_at, updated_at = excluded.updated_at, \
             created_at = CASE WHEN session_state.expires_at <= ?9 THEN excluded.created_at \
             ELSE session_state.created_at END \
             RETURNING *",
            &[
                Text(s.tenant_id.as_str()),
                Text(s.user_id.as_str()),
                Text(agent_col(s.agent_id.as_ref())),
                Text(s.session_id.as_str()),
                Text(s.key.as_str()),
                Json(&s.value),
                Ts(s.expires_at),
                Ts(s.created_at),
                Ts(s.updated_at),
            ],
        )
        .await?;
    match stored {
        Some(r) => row(&r),
        None => Ok(s.clone()),
    }
}

/// The live entry of `key` in a session.
pub(crate) async fn get<B: Backend>(
    b: &B,
    tenant: &TenantId,
    scope: &StateScope,
    key: &StateKey,
    now: OffsetDateTime,
) -> Result<Option<SessionState>> {
    let r = b
        .read_opt(
            "SELECT * FROM session_state WHERE tenant_id = ?1 AND user_id = ?2 AND agent_id = ?3 \
             AND session_id = ?4 AND key = ?5 AND expires_at > ?6",
            &[
                Text(tenant.as_str()),
                Text(scope.user.as_str()),
                Text(agent_col(scope.agent.as_ref())),
                Text(scope.session.as_str()),
                Text(key.as_str()),
                Ts(now),
            ],
        )
        .await?;
    r.as_ref().map(row).transpose()
}

/// Delete an entry; true when a live one was there (an expired one goes too, as `false`).
pub(crate) async fn delete<B: Backend>(
    b: &B,
    tenant: &TenantId,
    scope: &StateScope,
    key: &StateKey,
    now: OffsetDateTime,
) -> Result<bool> {
    let gone = b
        .write_opt(
            "DELETE FROM session_state WHERE tenant_id = ?1 AND user_id = ?2 AND agent_id = ?3 \
             AND session_id = ?4 AND key = ?5 RETURNING expires_at",
            &[
                Text(tenant.as_str()),
                Text(scope.user.as_str()),
                Text(agent_col(scope.agent.as_ref())),
                Text(scope.session.as_str()),
                Text(key.as_str()),
            ],
        )
        .await?;
    Ok(match gone {
        Some(r) => r.ts("expires_at")? > now,
        None => false,
    })
}

/// The live entries of a session by key, or (`scope` None) of every session of a user (the
/// GDPR export).
pub(crate) async fn list<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: &UserId,
    scope: Option<&StateScope>,
    now: OffsetDateTime,
) -> Result<Vec<SessionState>> {
    let rows = match scope {
        Some(s) => {
            let sql = format!(
                "SELECT * FROM session_state WHERE tenant_id = ?1 AND user_id = ?2 AND agent_id = ?3 \
                 AND session_id = ?4 AND expires_at > ?5 ORDER BY key{} LIMIT {LIST_LIMIT}",
                B::BYTE_ORDER
            );
            b.read_all(
                &sql,
                &[
                    Text(tenant.as_str()),
                    Text(user.as_str()),
                    Text(agent_col(s.agent.as_ref())),
                    Text(s.session.as_str()),
                    Ts(now),
                ],
            )
            .await?
        }
        None => {
            let sql = format!(
                "SELECT * FROM session_state WHERE tenant_id = ?1 AND user_id = ?2 AND expires_at > ?3 \
                 ORDER BY agent_id{0}, session_id{0}, key{0}",
                B::BYTE_ORDER
            );
            b.read_all(&sql, &[Text(tenant.as_str()), Text(user.as_str()), Ts(now)]).await?
        }
    };
    rows.iter().map(row).collect()
}

/// Delete every expired entry of every tenant; returns how many.
pub(crate) async fn sweep<B: Backend>(b: &B, now: OffsetDateTime) -> Result<u64> {
    b.write("DELETE FROM session_state WHERE expires_at <= ?1", &[Ts(now)]).await
}

// The store contract's working-memory part, on either backend.
#[async_trait]
impl<D: Native> StateStore for SqlStore<D> {
    async fn put_state(&self, row: &SessionState) -> Result<SessionState> {
        put(&self.0, row).await
    }

    async fn get_state(
        &self,
        tenant: &TenantId,
        scope: &StateScope,
        key: &StateKey,
        now: OffsetDateTime,
    ) -> Result<Option<SessionState>> {
        get(&self.0, tenant, scope, key, now).await
    }

    async fn delete_state(
        &self,
        tenant: &TenantId,
        scope: &StateScope,
        key: &StateKey,
        now: OffsetDateTime,
    ) -> Result<bool> {
        delete(&self.0, tenant, scope, key, now).await
    }

    async fn list_state(
        &self,
        tenant: &TenantId,
        user: &UserId,
        scope: Option<&StateScope>,
        now: OffsetDateTime,
    ) -> Result<Vec<SessionState>> {
        list(&self.0, tenant, user, scope, now).await
    }

    async fn sweep_state(&self, now: OffsetDateTime) -> Result<u64> {
        sweep(&self.0, now).await
    }
}
