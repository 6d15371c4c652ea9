//! `/v1/agents/{id}`, `/v1/users/{user_id}` (GDPR erase and export) and `/v1/stats`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use engram_core::engine::{AgentInput, Engine};
use engram_core::model::{AgentId, UserId};
use engram_core::store::EraseCounts;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::dto::{AgentDto, EventDto, MemoryDto, MessageDto};
use super::error::{ApiJson, ApiPath, ApiResult, ErrorBody};
use super::{AppState, Auth};

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
    #[schema(value_type = Object)]
    pub erased: EraseCounts,
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
    Ok(Json(Erased { user_id: user.to_string(), erased: counts }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserExportDto {
    pub tenant_id: String,
    pub user_id: String,
    pub memories: Vec<MemoryDto>,
    pub events: Vec<EventDto>,
    pub messages: Vec<MessageDto>,
}

/// GDPR portability: everything stored about the user.
#[utoipa::path(get, path = "/v1/users/{user_id}/export", responses((status = 200, body = UserExportDto), (status = 403, body = ErrorBody)))]
pub async fn export_user(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(user): ApiPath<String>,
) -> ApiResult<Json<UserExportDto>> {
    let x = st.engine.export_user(&p, &UserId::parse(user)?).await?;
    Ok(Json(UserExportDto {
        tenant_id: x.tenant_id.to_string(),
        user_id: x.user_id.to_string(),
        memories: x.memories.iter().map(Into::into).collect(),
        events: x.events.iter().map(Into::into).collect(),
        messages: x.messages.iter().map(Into::into).collect(),
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatsDto {
    #[schema(value_type = Object)]
    #[serde(flatten)]
    pub store: engram_core::store::StoreStats,
    pub embedder: String,
    pub embedder_dims: usize,
    /// Share of active facts with a vector of the current model (1.0 = complete).
    pub embedding_coverage: f64,
    /// Share of transcript messages with a vector (embedded in the background; 1.0 when
    /// the queue has caught up; tool calls not yet described have no text to embed).
    pub message_embedding_coverage: f64,
    pub extraction: ExtractionStats,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExtractionStats {
    /// Automatic extraction runs (an LLM is configured).
    pub enabled: bool,
    /// The LLM, or why extraction is off.
    pub llm: String,
    /// Extraction jobs done / (done + failed for good); null before the first one.
    pub health: Option<f64>,
    pub failed: u64,
    pub pending: u64,
}

/// Queue depth, failed jobs, embedding coverage, extraction health, counts (admin).
#[utoipa::path(get, path = "/v1/stats", responses((status = 200, body = StatsDto), (status = 403, body = ErrorBody)))]
pub async fn stats(State(st): State<Arc<AppState>>, Auth(p): Auth) -> ApiResult<Json<StatsDto>> {
    let s = st.engine.stats(&p).await?;
    Ok(Json(stats_dto(&st.engine, s)))
}

/// The stats as `/v1/stats` (and the MCP tool `memory_stats`) show them.
pub fn stats_dto(engine: &Engine, s: engram_core::store::StoreStats) -> StatsDto {
    let llm = engine.llm();
    let finished = s.extractions_done + s.extractions_failed;
    let coverage = if s.memories_active == 0 {
        1.0
    } else {
        s.memories_with_vector as f64 / s.memories_active as f64
    };
    let message_coverage =
        if s.messages == 0 { 1.0 } else { s.messages_with_vector as f64 / s.messages as f64 };
    StatsDto {
        message_embedding_coverage: message_coverage,
        embedder: engine.embedder().model_id().to_string(),
        embedder_dims: engine.embedder().dims(),
        embedding_coverage: coverage,
        extraction: ExtractionStats {
            enabled: llm.is_some(),
            llm: llm.map_or_else(
                || {
                    "off: no LLM configured (set ENGRAM_LLM_PROVIDER and ENGRAM_LLM_MODEL)"
                        .to_string()
                },
                |l| l.describe(),
            ),
            health: (finished > 0).then(|| s.extractions_done as f64 / finished as f64),
            failed: s.extractions_failed,
            pending: s.jobs_pending,
        },
        store: s,
    }
}
