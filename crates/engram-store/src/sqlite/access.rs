//! SQLite: the [`engram_core::store::AccessStore`] part of the store. Who may call: API keys (stored hashed) and agent settings.
//!
//! What both backends do alike is written once in [`crate::common::access`]; this file holds
//! the rest and calls it.

use super::*;

#[async_trait]
impl AccessStore for SqliteStore {
    async fn create_api_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        common::access::create_api_key(self, key, secret_hash).await
    }

    async fn list_api_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        common::access::list_api_keys(self, tenant).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        common::access::revoke_api_key(self, id).await
    }

    async fn find_api_key(&self, secret_hash: &str) -> Result<Option<ApiKey>> {
        common::access::find_api_key(self, secret_hash).await
    }

    async fn count_active_api_keys(&self) -> Result<u64> {
        common::access::count_active_api_keys(self).await
    }

    async fn get_agent(&self, tenant: &TenantId, id: &AgentId) -> Result<Option<Agent>> {
        common::access::get_agent(self, tenant, id).await
    }

    async fn get_agents(&self, tenant: &TenantId, ids: &[AgentId]) -> Result<Vec<Agent>> {
        common::access::get_agents(self, tenant, ids).await
    }

    async fn put_agent(&self, a: &Agent) -> Result<()> {
        common::access::put_agent(self, a).await
    }
}
