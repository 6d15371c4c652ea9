//! `/v1/search` (hybrid search) and `/v1/context` (the prompt block).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use engram_core::engine::{ContextInput, SearchInput, SearchSource};
use engram_core::model::{AgentId, Category, ConversationId, Kind, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiJson, ApiResult, ErrorBody};
use super::{AppState, Auth};
use crate::api::dto::{self, ContextDto};
use crate::api::results::{AnswerDto, SearchResultDto};

/// Body of `POST /v1/search`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    pub query: String,
    /// The user whose memory is read; a user key's own user when left out.
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    pub categories: Option<Vec<String>>,
    pub kinds: Option<Vec<String>>,
    /// `memories` (default), `messages` and/or `summaries`.
    pub sources: Option<Vec<String>>,
    /// Expand each summary hit to its source messages that best match the query (up to 3,
    /// in `expanded`). Default false.
    pub expand: Option<bool>,
    /// Also answer the query in a few sentences from the results, citing them (`answer`),
    /// with the main-tier LLM. Without an LLM configured: 422. Default false.
    pub synthesize: Option<bool>,
    /// Only what happened at or after this time: facts observed, messages sent, summaries
    /// reaching it. RFC 3339, or a date (`2023-05-08`, `2023-05`, `2023`) from its first
    /// instant (UTC).
    pub since: Option<String>,
    /// Only what happened before this time. RFC 3339, or a date (`2023-05-08`, `2023-05`,
    /// `2023`) up to its end: `until: "2023-05-08"` includes that day.
    pub until: Option<String>,
    /// 1–200 (default 10).
    pub limit: Option<usize>,
    /// Include every score component.
    pub explain: Option<bool>,
    /// The caller's turn id: the returned memories are recorded for rating cascades.
    pub turn_id: Option<String>,
    /// `hybrid` (default; `fts` is the same: keywords and meaning, ranked), `vector` or
    /// `text` (one of the two ranked lists), or, over messages only (`sources:
    /// ["messages"]`), `substring` (messages containing the query as written) or `regex`
    /// (messages a regular expression matches): both case-insensitive, newest first, the
    /// pattern at most 512 characters, the user's newest 50,000 messages read at most.
    pub mode: Option<String>,
    /// Drop results scoring under this (0 to 1; see `score`). Default 0.05: results need real
    /// lexical or semantic support, so a query about something never mentioned returns
    /// nothing. 0 returns every candidate.
    pub min_score: Option<f64>,
    /// Only facts with this rating: `up`, `down` or `none` (memories only).
    pub rating: Option<String>,
    /// Only facts extracted from this conversation (memories only).
    pub source_conversation_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResponse {
    /// Best first.
    pub results: Vec<SearchResultDto>,
    /// With `synthesize`: the answer grounded in `results`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<AnswerDto>,
}

/// Hybrid search: vector + BM25 fused by RRF (k = 60), then temporal decay, importance and rating.
#[utoipa::path(post, path = "/v1/search", request_body = SearchRequest,
    responses((status = 200, body = SearchResponse), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn search(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiJson(b): ApiJson<SearchRequest>,
) -> ApiResult<Json<SearchResponse>> {
    let explain = b.explain.unwrap_or(false);
    let sources = dto::sources(b.sources, &[SearchSource::Memories])?;
    let expand = b.expand.unwrap_or(false);
    let mode = dto::search_mode(b.mode.as_deref())?;
    let (since, until) = dto::window(b.since.as_deref(), b.until.as_deref())?;
    let query = b.query.clone();
    let input = SearchInput {
        query: b.query,
        user_id: b.user_id.map(UserId::parse).transpose()?,
        agent_id: b.agent_id.map(AgentId::parse).transpose()?,
        categories: dto::list(b.categories, Category::parse)?,
        kinds: dto::list(b.kinds, Kind::parse)?,
        sources,
        since,
        until,
        limit: b.limit.unwrap_or(10),
        explain,
        turn_id: b.turn_id,
        mode,
        source_conversation: b.source_conversation_id.map(ConversationId::parse).transpose()?,
        rating: dto::rating_filter(b.rating.as_deref())?,
        min_score: b.min_score,
        expand,
        rank_only: false,
    };
    let hits = st.engine.search(&p, input).await?;
    let answer = match b.synthesize.unwrap_or(false) {
        true => Some((&st.engine.synthesize(&query, &hits).await?).into()),
        false => None,
    };
    Ok(Json(SearchResponse {
        answer,
        results: hits.iter().map(|h| SearchResultDto::from_hit(h, explain, expand)).collect(),
    }))
}

/// Body of `POST /v1/context`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    /// The user whose memory is read; a user key's own user when left out.
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    /// Used to choose the most relevant facts when not all fit the budget.
    pub query: Option<String>,
    /// Default 4000.
    pub token_budget: Option<usize>,
    /// Same session id → same text, until `refresh`.
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub refresh: Option<bool>,
    /// With a `query`: only profile facts and the facts whose relevance to it (0 to 1, as
    /// the `score` of a search) reaches this.
    pub min_score: Option<f64>,
    /// Short-term context: this conversation's latest summaries and last messages follow
    /// the facts, within the same `token_budget` (the newest first kept). A conversation
    /// of another user, or one the caller may not read, adds nothing, as an unknown one
    /// (the answer tells nothing about it).
    pub conversation_id: Option<String>,
}

/// The prompt block: `Known facts about the user:` and a bullet list within a token budget;
/// with a `conversation_id`, the conversation's latest summaries and last messages after it.
#[utoipa::path(post, path = "/v1/context", request_body = ContextRequest,
    responses((status = 200, body = ContextDto), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn context(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiJson(b): ApiJson<ContextRequest>,
) -> ApiResult<Json<ContextDto>> {
    let input = ContextInput {
        user_id: b.user_id.map(UserId::parse).transpose()?,
        agent_id: b.agent_id.map(AgentId::parse).transpose()?,
        query: b.query,
        token_budget: b.token_budget,
        session_id: b.session_id,
        turn_id: b.turn_id,
        refresh: b.refresh.unwrap_or(false),
        min_score: b.min_score,
        conversation_id: b.conversation_id.map(ConversationId::parse).transpose()?,
        ..Default::default()
    };
    let block = st.engine.context(&p, input).await?;
    Ok(Json((&block).into()))
}
