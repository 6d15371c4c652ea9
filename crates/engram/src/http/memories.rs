//! `/v1/memories`: create (one or a batch), list, read, edit, forget/purge, history, rating.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::AppendHeaders;
use engram_core::Error;
use engram_core::engine::{EditInput, ListInput, RememberInput, prefix_batch_error};
use engram_core::model::{AgentId, Category, ConversationId, Importance, Kind, MemoryId, UserId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiJson, ApiPath, ApiQuery, ApiResult, ErrorBody};
use super::{AppState, Auth};
use crate::api::dto::{self, Created, EventDto, MemoryDto};

/// Body of `POST /v1/memories`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMemory {
    pub content: String,
    /// Whose fact it is; a user key's own user when left out (required with other keys).
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    /// `knowledge` (default), `profile` (needs `key`) or `shared`.
    pub kind: Option<String>,
    pub key: Option<String>,
    /// One of the six categories (default `general`).
    pub category: Option<String>,
    /// 1–10 (default 5).
    pub importance: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    pub source_conversation_id: Option<String>,
    pub observed_at: Option<String>,
    pub expires_at: Option<String>,
}

impl CreateMemory {
    pub fn into_input(self) -> engram_core::Result<RememberInput> {
        Ok(RememberInput {
            user_id: self.user_id.map(UserId::parse).transpose()?,
            agent_id: self.agent_id.map(AgentId::parse).transpose()?,
            kind: self.kind.as_deref().map(Kind::parse).transpose()?.unwrap_or_default(),
            key: self.key,
            category: self
                .category
                .as_deref()
                .map(Category::parse)
                .transpose()?
                .unwrap_or_default(),
            importance: self.importance.map(Importance::parse).transpose()?.unwrap_or_default(),
            content: self.content,
            metadata: self.metadata,
            source_conversation_id: self
                .source_conversation_id
                .map(ConversationId::parse)
                .transpose()?,
            source_kind: None,
            observed_at: dto::opt_ts("observed_at", self.observed_at.as_deref())?,
            expires_at: dto::opt_ts("expires_at", self.expires_at.as_deref())?,
        })
    }
}

/// Create a memory (explicit remember, deduplicated).
#[utoipa::path(post, path = "/v1/memories", request_body = CreateMemory,
    responses((status = 201, body = Created, description = "stored (ADD/UPDATE)"), (status = 200, body = Created, description = "duplicate (NONE)"),
              (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn create(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiJson(body): ApiJson<CreateMemory>,
) -> ApiResult<(StatusCode, Json<Created>)> {
    let r = st.engine.remember(&p, body.into_input()?).await?;
    let status = if r.decision == engram_core::engine::Decision::None {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(Created::from(&r))))
}

/// Body of `POST /v1/memories/batch`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchCreate {
    pub memories: Vec<CreateMemory>,
    /// Deduplicate against the store and within the batch (default true).
    pub dedup: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchCreated {
    pub results: Vec<Created>,
}

/// Bulk create in one transaction (all or nothing).
#[utoipa::path(post, path = "/v1/memories/batch", request_body = BatchCreate,
    responses((status = 200, body = BatchCreated), (status = 400, body = ErrorBody)))]
pub async fn batch(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiJson(body): ApiJson<BatchCreate>,
) -> ApiResult<Json<BatchCreated>> {
    if body.memories.is_empty() || body.memories.len() > 10_000 {
        return Err(Error::invalid("memories", "memories must hold 1 to 10000 items").into());
    }
    let inputs = body
        .memories
        .into_iter()
        .enumerate()
        .map(|(i, m)| m.into_input().map_err(|e| prefix_batch_error(e, i, true)))
        .collect::<engram_core::Result<Vec<_>>>()?;
    let out = st.engine.remember_batch(&p, inputs, body.dedup.unwrap_or(true)).await?;
    Ok(Json(BatchCreated { results: out.iter().map(Created::from).collect() }))
}

/// Query of `GET /v1/memories`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    /// Comma-separated categories.
    pub category: Option<String>,
    /// Comma-separated kinds.
    pub kind: Option<String>,
    pub include_superseded: Option<bool>,
    /// Only facts observed at or after this time: RFC 3339, or a date (`2023-05-08`,
    /// `2023-05`, `2023`) from its first instant (UTC).
    pub since: Option<String>,
    /// Only facts observed before this time: RFC 3339, or a date up to its end (`2023-05-08`
    /// includes that day).
    pub until: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// 1–200 (default 50).
    pub limit: Option<usize>,
    /// Only facts with this rating: `up`, `down` or `none`.
    pub rating: Option<String>,
    /// Only facts extracted from this conversation.
    pub source_conversation_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryList {
    pub memories: Vec<MemoryDto>,
    pub next_cursor: Option<String>,
}

fn csv<T>(
    s: Option<&str>,
    parse: fn(&str) -> engram_core::Result<T>,
) -> engram_core::Result<Option<Vec<T>>> {
    s.map(|s| s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(parse).collect())
        .transpose()
}

/// List memories, newest first, with cursor pagination.
#[utoipa::path(get, path = "/v1/memories", params(ListQuery), responses((status = 200, body = MemoryList), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<MemoryList>> {
    let (since, until) = dto::window(q.since.as_deref(), q.until.as_deref())?;
    let input = ListInput {
        user_id: q.user_id.map(UserId::parse).transpose()?,
        agent_id: q.agent_id.map(AgentId::parse).transpose()?,
        categories: csv(q.category.as_deref(), Category::parse)?,
        kinds: csv(q.kind.as_deref(), Kind::parse)?,
        include_superseded: q.include_superseded.unwrap_or(false),
        since,
        until,
        cursor: q
            .cursor
            .as_deref()
            .map(MemoryId::parse)
            .transpose()
            .map_err(|_| Error::invalid("cursor", "cursor is not a valid cursor"))?,
        limit: q.limit.unwrap_or(50),
        source_conversation: q
            .source_conversation_id
            .map(engram_core::model::ConversationId::parse)
            .transpose()?,
        rating: dto::rating_filter(q.rating.as_deref())?,
    };
    let page = st.engine.list(&p, input).await?;
    Ok(Json(MemoryList {
        memories: page.memories.iter().map(Into::into).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// Read one memory (active or superseded).
#[utoipa::path(get, path = "/v1/memories/{id}", responses((status = 200, body = MemoryDto), (status = 404, body = ErrorBody)))]
pub async fn get_one(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<MemoryDto>> {
    let m = st.engine.get(&p, MemoryId::parse(&id)?).await?;
    Ok(Json((&m).into()))
}

/// Body of `PATCH /v1/memories/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchMemory {
    pub content: Option<String>,
    pub category: Option<String>,
    pub importance: Option<i64>,
    pub kind: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
    /// A timestamp, or null to clear.
    #[serde(default, with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Option<String>>,
}

mod double_option {
    use serde::{Deserialize, Deserializer};
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Ok(Some(Option::<String>::deserialize(d)?))
    }
}

/// Edit a memory: a new version supersedes the old one (both stay in its history).
#[utoipa::path(patch, path = "/v1/memories/{id}", request_body = PatchMemory,
    responses((status = 200, body = MemoryDto, description = "the new version"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn patch(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PatchMemory>,
) -> ApiResult<(AppendHeaders<Option<(&'static str, String)>>, Json<MemoryDto>)> {
    let id = MemoryId::parse(&id)?;
    let input = EditInput {
        content: body.content,
        category: body.category.as_deref().map(Category::parse).transpose()?,
        importance: body.importance.map(Importance::parse).transpose()?,
        kind: body.kind.as_deref().map(Kind::parse).transpose()?,
        metadata: body.metadata,
        expires_at: match body.expires_at {
            None => None,
            Some(None) => Some(None),
            Some(Some(s)) => Some(Some(dto::parse_ts("expires_at", &s)?)),
        },
    };
    if input.content.is_none()
        && input.category.is_none()
        && input.importance.is_none()
        && input.kind.is_none()
        && input.metadata.is_none()
        && input.expires_at.is_none()
    {
        return Err(Error::invalid("body", "nothing to change: give at least one field").into());
    }
    let (m, redacted) = st.engine.edit_reporting(&p, id, input).await?;
    let kinds: Vec<&str> = redacted.iter().map(|k| k.as_str()).collect();
    let header = (REDACTED_HEADER, kinds.join(","));
    Ok((AppendHeaders((!kinds.is_empty()).then_some(header)), Json((&m).into())))
}

/// Response header of `PATCH /v1/memories/{id}` naming what the PII filter replaced in the
/// new content (comma-separated kinds); absent when the content is stored as given.
pub const REDACTED_HEADER: &str = "engram-redacted";

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Delete physically instead of superseding.
    pub purge: Option<bool>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    pub id: String,
    /// `forgotten` (superseded, kept in history) or `purged` (gone).
    pub status: String,
}

/// Forget a memory (supersede with no successor), or purge it with `?purge=true`.
#[utoipa::path(delete, path = "/v1/memories/{id}", params(DeleteQuery), responses((status = 200, body = Deleted), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> ApiResult<Json<Deleted>> {
    let id = MemoryId::parse(&id)?;
    let purge = q.purge.unwrap_or(false);
    st.engine.forget(&p, id, purge).await?;
    Ok(Json(Deleted {
        id: id.to_string(),
        status: if purge { "purged" } else { "forgotten" }.into(),
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryDto {
    /// The supersession chain, oldest first.
    pub chain: Vec<MemoryDto>,
    pub events: Vec<EventDto>,
}

/// The supersession chain of a memory and its events.
#[utoipa::path(get, path = "/v1/memories/{id}/history", responses((status = 200, body = HistoryDto), (status = 404, body = ErrorBody)))]
pub async fn history(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<HistoryDto>> {
    let h = st.engine.history(&p, MemoryId::parse(&id)?).await?;
    Ok(Json(HistoryDto {
        chain: h.chain.iter().map(Into::into).collect(),
        events: h.events.iter().map(Into::into).collect(),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rating {
    /// -1 or 1.
    pub value: i64,
}

/// Rate a memory.
#[utoipa::path(post, path = "/v1/memories/{id}/rating", request_body = Rating, responses((status = 200, body = MemoryDto), (status = 400, body = ErrorBody)))]
pub async fn rate(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<Rating>,
) -> ApiResult<Json<MemoryDto>> {
    let m = st.engine.rate(&p, MemoryId::parse(&id)?, body.value).await?;
    Ok(Json((&m).into()))
}
