//! Access: the principal an API key or a web-UI sign-in stands for, whether local mode may
//! apply, liveness; and
//! the operator's view of keys and jobs ([`Operator`]), which needs no embedder so that
//! `engram keys` and `engram jobs` work whatever model a store was embedded with. Key lookup
//! by hash is tenant-global on purpose: the key names its tenant.

use std::sync::Arc;

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::model::{Job, JobStatus, Principal, TenantId};
use crate::store::{ApiKey, Store, UiSession};

use super::Engine;

/// How long a key the store confirmed keeps standing for its principal while the store is
/// unavailable.
pub const KEYS_REMEMBERED: Duration = Duration::from_secs(600);

/// How long a web-UI sign-in lasts: a working day, after which the browser asks for the key
/// again (the cookie holds a token, never the key).
pub const UI_SESSION_TTL: time::Duration = time::Duration::hours(12);

impl Engine {
    /// The principal of an API key, given the stored form (hash) of its secret; None for an
    /// unknown or revoked key.
    ///
    /// While the store is unavailable, a key the store confirmed within [`KEYS_REMEMBERED`]
    /// still stands for its principal, so that a request that needs no store (the memory
    /// proxy's chat call) still goes through; every other request fails at its first store
    /// call anyway. A key revoked during an outage works until the outage ends or the window
    /// passes, whichever is first.
    pub async fn principal_for_key(&self, secret_hash: &str) -> Result<Option<Principal>> {
        match self.svc.store.find_api_key(secret_hash).await {
            Ok(found) => {
                let p = found.map(|k| Principal { tenant: k.tenant, role: k.role });
                let mut known = self.known_keys();
                match &p {
                    Some(p) => {
                        known
                            .principals
                            .insert(secret_hash.to_string(), (p.clone(), Instant::now()));
                    }
                    None => {
                        known.principals.remove(secret_hash);
                    }
                }
                Ok(p)
            }
            Err(e @ Error::StoreUnavailable(_)) => {
                let known = self.known_keys();
                match known.principals.get(secret_hash) {
                    Some((p, at)) if at.elapsed() < KEYS_REMEMBERED => Ok(Some(p.clone())),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Start a web-UI sign-in for the key with this secret hash: the browser will hold the
    /// token whose hash is `token_hash`, and the sign-in's forms carry `csrf`. None for an
    /// unknown or revoked key (nothing is stored). It lasts [`UI_SESSION_TTL`].
    pub async fn start_ui_session(
        &self,
        secret_hash: &str,
        token_hash: &str,
        csrf: &str,
    ) -> Result<Option<Principal>> {
        let Some(key) = self.svc.store.find_api_key(secret_hash).await? else { return Ok(None) };
        let now = crate::model::now();
        let session = UiSession {
            token_hash: token_hash.to_string(),
            tenant: key.tenant.clone(),
            key_id: key.id.clone(),
            csrf: csrf.to_string(),
            created_at: now,
            expires_at: now + UI_SESSION_TTL,
        };
        self.svc.store.create_ui_session(&session).await?;
        Ok(Some(Principal { tenant: key.tenant, role: key.role }))
    }

    /// The principal of a live web-UI sign-in and its forms' CSRF token; None once it ended
    /// (signed out, expired, or its key revoked).
    pub async fn ui_session(&self, token_hash: &str) -> Result<Option<(Principal, String)>> {
        let found = self.svc.store.find_ui_session(token_hash, crate::model::now()).await?;
        Ok(found.map(|(s, k)| (Principal { tenant: k.tenant, role: k.role }, s.csrf)))
    }

    /// End a web-UI sign-in.
    pub async fn end_ui_session(&self, token_hash: &str) -> Result<()> {
        self.svc.store.delete_ui_session(token_hash).await
    }

    /// Whether any active API key exists (none: local mode may serve keyless requests on a
    /// loopback listener). During a store outage, the store's last answer within
    /// [`KEYS_REMEMBERED`].
    pub async fn keys_exist(&self) -> Result<bool> {
        match self.svc.store.count_active_api_keys().await {
            Ok(n) => {
                self.known_keys().any = Some((n > 0, Instant::now()));
                Ok(n > 0)
            }
            Err(e @ Error::StoreUnavailable(_)) => match self.known_keys().any {
                Some((any, at)) if at.elapsed() < KEYS_REMEMBERED => Ok(any),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    fn known_keys(&self) -> std::sync::MutexGuard<'_, crate::services::KnownKeys> {
        self.svc.known_keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
