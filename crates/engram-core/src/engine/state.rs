//! Working memory (seeds 002 and 003): short-lived key-value state per (user, agent,
//! session), with a time to live. It is the agent's scratchpad for the current run (a plan,
//! the step it is on, a form half filled), not memory about the user: it is never embedded,
//! never extracted, never searched, and never mixed into the context block. An entry is
//! unreadable the instant its TTL ends; the workers sweep expired rows (`jobs::sweeper`); it is
//! erased with its user and travels with the user's export.
//!
//! Who may touch which entry follows the rule of every request ([`super::scope`]): an admin
//! key names the user (and agent); an agent key acts for its own agent and any user; a user
//! key for its own user and any agent. The agent is part of the entry's address, so two
//! agents of one user never see each other's state for the same session id.

use time::Duration;

use crate::error::{Error, Result};
use crate::model::{AgentId, Principal, SessionId, SessionState, StateKey, UserId};
use crate::store::StateScope;

use super::Engine;
use super::scope::acting_for;

/// TTL of an entry put without one: a day.
pub const DEFAULT_STATE_TTL: Duration = Duration::days(1);
/// Longest TTL an entry may ask for: 30 days (longer-lived knowledge is a memory).
pub const MAX_STATE_TTL: Duration = Duration::days(30);
/// Largest value, in bytes of its JSON text.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// Where an entry lives: whose session, which agent's.
#[derive(Debug, Clone, Default)]
pub struct StateAddress {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
}

impl Engine {
    /// The session scope `p` acts in; `user_id` is required unless the key is bound to a user.
    fn state_scope(p: &Principal, at: &StateAddress, session: SessionId) -> Result<StateScope> {
        let (user, agent) = acting_for(p, at.user_id.as_ref(), at.agent_id.as_ref())?;
        let user = user.ok_or_else(|| {
            Error::invalid("user_id", "user_id is required: working memory belongs to a user")
        })?;
        Ok(StateScope { user, agent, session })
    }

    /// Create or replace `key` in a session's working memory, for `ttl` (default
    /// [`DEFAULT_STATE_TTL`], at most [`MAX_STATE_TTL`]).
    pub async fn put_state(
        &self,
        p: &Principal,
        at: &StateAddress,
        session: SessionId,
        key: StateKey,
        value: serde_json::Value,
        ttl: Option<Duration>,
    ) -> Result<SessionState> {
        let scope = Self::state_scope(p, at, session)?;
        let ttl = ttl.unwrap_or(DEFAULT_STATE_TTL);
        if ttl <= Duration::ZERO || ttl > MAX_STATE_TTL {
            return Err(Error::invalid(
                "ttl_seconds",
                format!(
                    "ttl_seconds must be between 1 and {} (30 days)",
                    MAX_STATE_TTL.whole_seconds()
                ),
            ));
        }
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
        if size > MAX_STATE_BYTES {
            return Err(Error::TooLarge(format!(
                "the value is {size} bytes of JSON; working memory keeps at most {MAX_STATE_BYTES}"
            )));
        }
        let now = crate::model::now();
        let row = SessionState {
            tenant_id: p.tenant.clone(),
            user_id: scope.user,
            agent_id: scope.agent,
            session_id: scope.session,
            key,
            value,
            expires_at: now + ttl,
            created_at: now,
            updated_at: now,
        };
        self.svc.store.put_state(&row).await
    }

    /// The live entry of `key`; `NotFound` when there is none or its TTL has ended.
    pub async fn get_state(
        &self,
        p: &Principal,
        at: &StateAddress,
        session: SessionId,
        key: &StateKey,
    ) -> Result<SessionState> {
        let scope = Self::state_scope(p, at, session)?;
        let now = crate::model::now();
        self.svc
            .store
            .get_state(&p.tenant, &scope, key, now)
            .await?
            .ok_or_else(|| Self::no_entry(&scope, key))
    }

    /// Delete `key`; `NotFound` when there was no live entry.
    pub async fn delete_state(
        &self,
        p: &Principal,
        at: &StateAddress,
        session: SessionId,
        key: &StateKey,
    ) -> Result<()> {
        let scope = Self::state_scope(p, at, session)?;
        let now = crate::model::now();
        if self.svc.store.delete_state(&p.tenant, &scope, key, now).await? {
            Ok(())
        } else {
            Err(Self::no_entry(&scope, key))
        }
    }

    /// Every live entry of a session, by key.
    pub async fn list_state(
        &self,
        p: &Principal,
        at: &StateAddress,
        session: SessionId,
    ) -> Result<Vec<SessionState>> {
        let scope = Self::state_scope(p, at, session)?;
        let now = crate::model::now();
        self.svc.store.list_state(&p.tenant, &scope.user, Some(&scope), now).await
    }

    fn no_entry(scope: &StateScope, key: &StateKey) -> Error {
        Error::not_found(format!("working memory key '{key}' in session '{}'", scope.session))
    }
}
