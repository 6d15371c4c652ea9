//! Access: the principal an API key stands for, whether local mode may apply, liveness; and
//! the operator's view of keys and jobs ([`Operator`]), which needs no embedder so that
//! `engram keys` and `engram jobs` work whatever model a store was embedded with. Key lookup
//! by hash is tenant-global on purpose: the key names its tenant.

use std::sync::Arc;

use crate::error::Result;
use crate::model::{Job, JobStatus, Principal, TenantId};
use crate::store::{ApiKey, Store};

use super::Engine;

impl Engine {
    /// The principal of an API key, given the stored form (hash) of its secret; None for an
    /// unknown or revoked key.
    pub async fn principal_for_key(&self, secret_hash: &str) -> Result<Option<Principal>> {
        Ok(self
            .svc
            .store
            .find_api_key(secret_hash)
            .await?
            .map(|k| Principal { tenant: k.tenant, role: k.role }))
    }

    /// Whether any active API key exists (none: local mode may serve keyless requests on a
    /// loopback listener).
    pub async fn keys_exist(&self) -> Result<bool> {
        Ok(self.svc.store.count_active_api_keys().await? > 0)
    }

    /// Liveness: the store answers.
    pub async fn health(&self) -> Result<()> {
        self.svc.store.count_active_api_keys().await.map(drop)
    }

    /// The operator's view of this engine's store.
    pub fn operator(&self) -> Operator {
        Operator::new(self.svc.store.clone())
    }
}

/// The operator's commands on a store (the command line only; never reachable with a
/// tenant's key): API keys and the job queue.
#[derive(Clone)]
pub struct Operator {
    store: Arc<dyn Store>,
}

impl Operator {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Store a new key: its record and the hash of its secret (the secret itself is never
    /// stored).
    pub async fn create_key(&self, key: &ApiKey, secret_hash: &str) -> Result<()> {
        self.store.create_api_key(key, secret_hash).await
    }

    /// Every key (of one tenant), without secrets.
    pub async fn list_keys(&self, tenant: Option<&TenantId>) -> Result<Vec<ApiKey>> {
        self.store.list_api_keys(tenant).await
    }

    /// Revoke a key by id; `NotFound` unless active.
    pub async fn revoke_key(&self, id: &str) -> Result<()> {
        self.store.revoke_api_key(id).await
    }

    /// Jobs, newest first.
    pub async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.store.list_jobs(tenant, status, limit).await
    }

    /// Put a failed job back in the queue.
    pub async fn retry_job(&self, id: &str) -> Result<()> {
        self.store.retry_job(None, id).await
    }
}
