//! The working-memory tools (seeds 002, 003): an agent's short-lived state per (user, agent,
//! session), with a TTL — the plan it is following, the step it is on. Never embedded,
//! extracted or recalled: `recall` and `memory_search` do not see it.
//!
//! | tool | engine | what |
//! |---|---|---|
//! | `working_memory_set` | `put_state` | create or replace a key, for `ttl_seconds` (default a day) |
//! | `working_memory_get` | `get_state` | a key's value (a `not_found` error once its TTL has ended) |
//! | `working_memory_delete` | `delete_state` | delete a key |
//! | `working_memory_list` | `list_state` | every live key of a session |

use engram_core::Result;
use engram_core::engine::Engine;
use engram_core::model::{Principal, SessionId, StateKey};
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Outcome, parse, to_value, tool};
use crate::api::state::{self as wire, StateEntryDto, StateListDto};

/// Arguments of `working_memory_set`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct SetArgs {
    /// Your session or run id (the same id across the calls of one task).
    pub session_id: String,
    /// The name of the value ("plan", "current_step").
    pub key: String,
    /// Any JSON value, at most 64 KiB.
    pub value: Value,
    /// Seconds until it is forgotten, 1–2592000 (default 86400, a day).
    pub ttl_seconds: Option<i64>,
    /// The user the session serves (not needed with a user's own key).
    pub user_id: Option<String>,
    /// Default: the key's agent, or none.
    pub agent_id: Option<String>,
}

/// Arguments of `working_memory_get` and `working_memory_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct KeyArgs {
    pub session_id: String,
    pub key: String,
    /// The user the session serves (not needed with a user's own key).
    pub user_id: Option<String>,
    /// Default: the key's agent, or none.
    pub agent_id: Option<String>,
}

/// Arguments of `working_memory_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListArgs {
    pub session_id: String,
    /// The user the session serves (not needed with a user's own key).
    pub user_id: Option<String>,
    /// Default: the key's agent, or none.
    pub agent_id: Option<String>,
}

/// The four tools (the last four of `TOOL_NAMES`).
pub(super) fn tools() -> Vec<Tool> {
    let note = |title: &str, read_only: bool, destructive: bool| {
        ToolAnnotations::with_title(title)
            .read_only(read_only)
            .destructive(destructive)
            .open_world(false)
    };
    vec![
        tool::<SetArgs>(
            "working_memory_set",
            "Keep a short-lived value for this session (your plan, the step you are on, a form \
             half filled) under a key, for ttl_seconds (default a day). It replaces the key's \
             previous value. Working memory is not long-term memory: it is never recalled or \
             searched, and it is gone when its time ends. Durable facts about the user go to \
             remember instead.",
            note("Set working memory", false, false),
        ),
        tool::<KeyArgs>(
            "working_memory_get",
            "The value kept under a key for this session (a not_found error when there is none \
             or its time has ended).",
            note("Get working memory", true, false),
        ),
        tool::<KeyArgs>(
            "working_memory_delete",
            "Delete a key of this session's working memory.",
            note("Delete working memory", false, true),
        ),
        tool::<ListArgs>(
            "working_memory_list",
            "Every key this session keeps, with its value and when it expires.",
            note("List working memory", true, false),
        ),
    ]
}

/// Run tool `name` if it is one of these (None: not a working-memory tool).
pub(super) async fn call(
    engine: &Engine,
    p: &Principal,
    name: &str,
    args: Value,
) -> Option<Result<Outcome>> {
    Some(match name {
        "working_memory_set" => set(engine, p, args).await,
        "working_memory_get" => get(engine, p, args).await,
        "working_memory_delete" => delete(engine, p, args).await,
        "working_memory_list" => list(engine, p, args).await,
        _ => return None,
    })
}

async fn set(engine: &Engine, p: &Principal, args: Value) -> Result<Outcome> {
    let a: SetArgs = parse(args)?;
    let at = wire::address(a.user_id, a.agent_id)?;
    let ttl = wire::ttl(a.ttl_seconds)?;
    let (session, key) = (SessionId::parse(a.session_id)?, StateKey::parse(a.key)?);
    let s = engine.put_state(p, &at, session, key, a.value, ttl).await?;
    Ok(Outcome::json(to_value(StateEntryDto::from(&s))?))
}

async fn get(engine: &Engine, p: &Principal, args: Value) -> Result<Outcome> {
    let a: KeyArgs = parse(args)?;
    let at = wire::address(a.user_id, a.agent_id)?;
    let (session, key) = (SessionId::parse(a.session_id)?, StateKey::parse(a.key)?);
    let s = engine.get_state(p, &at, session, &key).await?;
    Ok(Outcome::json(to_value(StateEntryDto::from(&s))?))
}

async fn delete(engine: &Engine, p: &Principal, args: Value) -> Result<Outcome> {
    let a: KeyArgs = parse(args)?;
    let at = wire::address(a.user_id, a.agent_id)?;
    let (session, key) = (SessionId::parse(a.session_id)?, StateKey::parse(a.key)?);
    engine.delete_state(p, &at, session.clone(), &key).await?;
    Ok(Outcome::json(
        json!({ "session_id": session.as_str(), "key": key.as_str(), "status": "deleted" }),
    ))
}

async fn list(engine: &Engine, p: &Principal, args: Value) -> Result<Outcome> {
    let a: ListArgs = parse(args)?;
    let at = wire::address(a.user_id, a.agent_id)?;
    let session = SessionId::parse(a.session_id)?;
    let entries = engine.list_state(p, &at, session.clone()).await?;
    let dto = StateListDto {
        session_id: session.to_string(),
        entries: entries.iter().map(Into::into).collect(),
    };
    Ok(Outcome::json(to_value(dto)?))
}
