//! The store's access part ([`AccessStore`]): API keys (stored hashed), web-UI sign-ins and
//! agent settings.

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::error::Result;
use crate::model::{Agent, AgentId, KeyRole, TenantId};

/// Stored API key (never the secret itself).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub id: String,
    pub tenant: TenantId,
    pub role: KeyRole,
    /// First characters of the key, to recognise it in listings.
    pub prefix: String,
    pub created_at: OffsetDateTime,
    pub revoked_at: Option<OffsetDateTime>,
}

/// A web-UI sign-in: the browser holds a random token, the store its SHA-256 and the key it
/// stands for (never the key itself). Ends at sign-out, at `expires_at`, or with its key.
#[derive(Debug, Clone, PartialEq)]
pub struct UiSession {
    pub token_hash: String,
    pub tenant: TenantId,
    pub key_id: String,
    /// The token every form of this sign-in carries.
    pub csrf: String,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

/// Who may call: API keys (stored hashed) and agent settings.
#[async_trait]
pub trait AccessStore: Send + Sync {
    // ---- keys ----
    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()>;
    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>>;
    /// Revoke by id; `NotFound` if absent or already revoked.
    async fn revoke_api_key(&self, id: &str) -> Result<()>;
    /// The active key with this secret hash (not tenant-scoped: the hash is the lookup).
    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>>;
    /// Number of active keys in the whole store (0 = local mode).
    async fn count_active_api_keys(&self) -> Result<u64>;
    // ---- web UI sign-ins ----
    /// Record a sign-in, and delete every expired one (of any key).
    async fn create_ui_session(&self, session: &UiSession) -> Result<()>;
    /// The sign-in with this token hash, unexpired at `now`, with its key while the key is
    /// active.
    async fn find_ui_session(
        &self,
        token_hash: &str,
        now: OffsetDateTime,
    ) -> Result<Option<(UiSession, ApiKey)>>;
    /// End a sign-in (nothing when there is none).
    async fn delete_ui_session(&self, token_hash: &str) -> Result<()>;
    // ---- agents ----
    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>>;
    /// Several agents' settings in one call (agents without settings left out).
    async fn get_agents(&self, tenant: &TenantId, ids: &[AgentId]) -> Result<Vec<Agent>>;
    async fn put_agent(&self, agent: &Agent) -> Result<()>;
    /// Every agent of the tenant with settings, by id.
    async fn list_agents(&self, tenant: &TenantId) -> Result<Vec<Agent>>;
}
