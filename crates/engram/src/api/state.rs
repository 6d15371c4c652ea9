//! Working memory on the wire: an entry as REST and MCP return it, and the address fields
//! both take (user, agent, TTL in seconds).

use engram_core::engine::StateAddress;
use engram_core::error::{Error, Result};
use engram_core::model::{AgentId, SessionState, UserId};
use serde::Serialize;
use utoipa::ToSchema;

use super::dto::fmt_ts;

/// One entry of a session's working memory.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateEntryDto {
    pub session_id: String,
    pub key: String,
    /// The value as it was put (any JSON).
    #[schema(value_type = Object)]
    pub value: serde_json::Value,
    pub user_id: String,
    /// The agent whose working memory this is (null: the user's, outside any agent).
    pub agent_id: Option<String>,
    /// When the entry stops being readable (its TTL ends).
    pub expires_at: String,
    /// When the entry was first put (a put over an expired entry starts a new one).
    pub created_at: String,
    pub updated_at: String,
}

impl From<&SessionState> for StateEntryDto {
    fn from(s: &SessionState) -> Self {
        StateEntryDto {
            session_id: s.session_id.to_string(),
            key: s.key.to_string(),
            value: s.value.clone(),
            user_id: s.user_id.to_string(),
            agent_id: s.agent_id.as_ref().map(ToString::to_string),
            expires_at: fmt_ts(s.expires_at),
            created_at: fmt_ts(s.created_at),
            updated_at: fmt_ts(s.updated_at),
        }
    }
}

/// A session's live entries, by key.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateListDto {
    pub session_id: String,
    pub entries: Vec<StateEntryDto>,
}

/// The address fields of a request: whose working memory, which agent's.
pub fn address(user_id: Option<String>, agent_id: Option<String>) -> Result<StateAddress> {
    Ok(StateAddress {
        user_id: user_id.map(UserId::parse).transpose()?,
        agent_id: agent_id.map(AgentId::parse).transpose()?,
    })
}

/// `ttl_seconds` as a duration (the engine checks its range).
pub fn ttl(seconds: Option<i64>) -> Result<Option<time::Duration>> {
    match seconds {
        Some(s) if s < 1 => Err(Error::invalid("ttl_seconds", "ttl_seconds must be at least 1")),
        Some(s) => Ok(Some(time::Duration::seconds(s))),
        None => Ok(None),
    }
}
