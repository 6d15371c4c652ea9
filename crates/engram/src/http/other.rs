//! `/v1/agents/{id}`, `/v1/users/{user_id}` (GDPR erase and export) and `/v1/stats`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use engram_core::engine::AgentInput;
use engram_core::model::{AgentId, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiJson, ApiPath, ApiResult, ErrorBody};
use super::{AppState, Auth};
use crate::api::dto::{AgentDto, EraseCountsDto, StatsDto, UserExportDto};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentRequest {
    /// Default true.
    pub memory_enabled: Option<bool>,
    /// Agents with the same cluster id share one memory pool for new writes.
    pub cluster_id: Option<String>,
    /// Cosine similarity at or above which a new fact is a duplicate (0.5–1.0, default 0.90).
    pub dedup_threshold: Option<f64>,
    /// Further settings (extraction policy, PII policy), kept as given.
    #[schema(value_type = Option<Object>)]
    pub settings: Option<serde_json::Value>,
}

/// Create or replace an agent's settings (admin).
#[utoipa::path(put, path = "/v1/agents/{id}", request_body = AgentRequest,
    responses((status = 200, body = AgentDto), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn put_agent(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(b): ApiJson<AgentRequest>,
) -> ApiResult<Json<AgentDto>> {
    let input = AgentInput {
        memory_enabled: b.memory_enabled.unwrap_or(true),
        cluster_id: b.cluster_id,
        // Checked before narrowing: 1.0000000000000002 must not round into the range.
        dedup_threshold: match b.dedup_threshold {
            Some(t) if !(0.5..=1.0).contains(&t) => {
                return Err(engram_core::Error::invalid(
                    "dedup_threshold",
                    "dedup_threshold must be between 0.5 and 1.0",
                )
                .into());
            }
            #[allow(clippy::cast_possible_truncation)]
            Some(t) => Some(t as f32),
            None => None,
        },
        settings: b.settings.unwrap_or_else(|| serde_json::json!({})),
    };
    let a = st.engine.put_agent(&p, AgentId::parse(id)?, input).await?;
    Ok(Json((&a).into()))
}

/// An agent's settings.
#[utoipa::path(get, path = "/v1/agents/{id}", responses((status = 200, body = AgentDto), (status = 404, body = ErrorBody)))]
pub async fn get_agent(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<AgentDto>> {
    let a = st.engine.get_agent(&p, &AgentId::parse(id)?).await?;
    Ok(Json((&a).into()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Erased {
    pub user_id: String,
    /// Rows removed per table.
    pub erased: EraseCountsDto,
}

/// GDPR erasure: every memory, event, message, conversation, summary, job, cursor, recall and
/// cached context of the user in the tenant.
#[utoipa::path(delete, path = "/v1/users/{user_id}", responses((status = 200, body = Erased), (status = 403, body = ErrorBody)))]
pub async fn erase_user(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(user): ApiPath<String>,
) -> ApiResult<Json<Erased>> {
    let user = UserId::parse(user)?;
    let counts = st.engine.erase_user(&p, &user).await?;
    Ok(Json(Erased { user_id: user.to_string(), erased: (&counts).into() }))
}

/// GDPR portability: everything stored about the user.
#[utoipa::path(get, path = "/v1/users/{user_id}/export", responses((status = 200, body = UserExportDto), (status = 403, body = ErrorBody)))]
pub async fn export_user(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(user): ApiPath<String>,
) -> ApiResult<Json<UserExportDto>> {
    let x = st.engine.export_user(&p, &UserId::parse(user)?).await?;
    Ok(Json(UserExportDto::from(&x)))
}

/// Queue depth, failed jobs, embedding coverage, extraction health, counts (admin).
#[utoipa::path(get, path = "/v1/stats", responses((status = 200, body = StatsDto), (status = 403, body = ErrorBody)))]
pub async fn stats(State(st): State<Arc<AppState>>, Auth(p): Auth) -> ApiResult<Json<StatsDto>> {
    let s = st.engine.stats(&p).await?;
    Ok(Json(StatsDto::from(s)))
}
