//! `/v1/sessions/{id}/state` and `/v1/sessions/{id}/state/{key}`: working memory, per
//! (user, agent, session) key-value state with a TTL ([`engram_core::engine`]'s `state`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use engram_core::model::{SessionId, StateKey};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiJson, ApiPath, ApiQuery, ApiResult, ErrorBody};
use super::{AppState, Auth};
use crate::api::state::{self as wire, StateEntryDto, StateListDto};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutStateRequest {
    /// Any JSON value (at most 64 KiB of JSON text).
    #[schema(value_type = Object)]
    pub value: serde_json::Value,
    /// Seconds until the entry stops being readable, 1–2592000 (30 days; default 86400).
    pub ttl_seconds: Option<i64>,
    /// Whose working memory (required unless the key is bound to a user).
    pub user_id: Option<String>,
    /// Which agent's (default: the key's agent, or none).
    pub agent_id: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StateQuery {
    /// Whose working memory (required unless the key is bound to a user).
    pub user_id: Option<String>,
    /// Which agent's (default: the key's agent, or none).
    pub agent_id: Option<String>,
}

/// Create or replace a key of a session's working memory.
#[utoipa::path(put, path = "/v1/sessions/{id}/state/{key}", request_body = PutStateRequest,
    responses((status = 200, body = StateEntryDto), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody)))]
pub async fn put(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath((id, key)): ApiPath<(String, String)>,
    ApiJson(b): ApiJson<PutStateRequest>,
) -> ApiResult<Json<StateEntryDto>> {
    let at = wire::address(b.user_id, b.agent_id)?;
    let ttl = wire::ttl(b.ttl_seconds)?;
    let (session, key) = (SessionId::parse(id)?, StateKey::parse(key)?);
    let s = st.engine.put_state(&p, &at, session, key, b.value, ttl).await?;
    Ok(Json((&s).into()))
}

/// A key of a session's working memory (404 once its TTL has ended).
#[utoipa::path(get, path = "/v1/sessions/{id}/state/{key}", params(StateQuery),
    responses((status = 200, body = StateEntryDto), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath((id, key)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<StateQuery>,
) -> ApiResult<Json<StateEntryDto>> {
    let at = wire::address(q.user_id, q.agent_id)?;
    let (session, key) = (SessionId::parse(id)?, StateKey::parse(key)?);
    let s = st.engine.get_state(&p, &at, session, &key).await?;
    Ok(Json((&s).into()))
}

/// Delete a key of a session's working memory.
#[utoipa::path(delete, path = "/v1/sessions/{id}/state/{key}", params(StateQuery),
    responses((status = 204, description = "deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath((id, key)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<StateQuery>,
) -> ApiResult<StatusCode> {
    let at = wire::address(q.user_id, q.agent_id)?;
    let (session, key) = (SessionId::parse(id)?, StateKey::parse(key)?);
    st.engine.delete_state(&p, &at, session, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every live key of a session's working memory, by key.
#[utoipa::path(get, path = "/v1/sessions/{id}/state", params(StateQuery),
    responses((status = 200, body = StateListDto), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<StateQuery>,
) -> ApiResult<Json<StateListDto>> {
    let at = wire::address(q.user_id, q.agent_id)?;
    let session = SessionId::parse(id)?;
    let entries = st.engine.list_state(&p, &at, session.clone()).await?;
    Ok(Json(StateListDto {
        session_id: session.to_string(),
        entries: entries.iter().map(Into::into).collect(),
    }))
}
