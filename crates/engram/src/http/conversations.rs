//! `/v1/conversations/{id}` (a conversation, its rolling summary and summary tree),
//! `/v1/conversations/{id}/messages` (append, browse), `/v1/conversations/{id}/end` and
//! `/v1/messages/{id}/rating`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use engram_core::engine::MessageInput;
use engram_core::model::{AgentId, ConversationId, MessageId, MessageRole, UserId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiJson, ApiPath, ApiQuery, ApiResult, ErrorBody};
use super::{AppState, Auth};
use crate::api::dto::{self, MessageDto, SummaryDto};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMessage {
    /// `user`, `assistant`, `system` or `tool`.
    pub role: String,
    #[serde(default)]
    pub content: String,
    pub created_at: Option<String>,
    pub tool_name: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub tool_args: Option<serde_json::Value>,
    pub tool_result: Option<String>,
    /// The caller's turn id (rating this message cascades to memories recalled for the turn).
    pub turn_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    /// Whose conversation it is; a user key's own user when left out (required with other
    /// keys).
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    pub messages: Vec<NewMessage>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AppendedMessage {
    pub id: String,
    pub seq: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AppendResponse {
    pub conversation_id: String,
    pub messages: Vec<AppendedMessage>,
}

/// Append messages to a conversation; 202 once they are durably stored.
#[utoipa::path(post, path = "/v1/conversations/{id}/messages", request_body = AppendRequest,
    responses((status = 202, body = AppendResponse), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn append(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(b): ApiJson<AppendRequest>,
) -> ApiResult<(StatusCode, Json<AppendResponse>)> {
    let conv = ConversationId::parse(id)?;
    let mut msgs = Vec::with_capacity(b.messages.len());
    for (i, m) in b.messages.into_iter().enumerate() {
        // The message at fault is named, as the engine names it for the other fields.
        let role = MessageRole::parse(&m.role).map_err(|e| {
            if let engram_core::Error::InvalidInput { message, .. } = e {
                engram_core::Error::InvalidInput {
                    field: format!("messages[{i}].role"),
                    message: format!("messages[{i}].role: {message}"),
                }
            } else {
                e
            }
        })?;
        msgs.push(MessageInput {
            role,
            content: m.content,
            created_at: dto::opt_ts("created_at", m.created_at.as_deref())?,
            tool_name: m.tool_name,
            tool_args: m.tool_args,
            tool_result: m.tool_result,
            turn_id: m.turn_id,
            metadata: m.metadata,
        });
    }
    let stored = st
        .engine
        .append_messages(
            &p,
            conv.clone(),
            b.user_id.map(UserId::parse).transpose()?,
            b.agent_id.map(AgentId::parse).transpose()?,
            msgs,
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(AppendResponse {
            conversation_id: conv.to_string(),
            messages: stored
                .iter()
                .map(|m| AppendedMessage { id: m.id.to_string(), seq: m.seq })
                .collect(),
        }),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BrowseQuery {
    /// Return messages with `seq` greater than this (default 0; not negative).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// 1–1000 (default 100).
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessagePage {
    pub messages: Vec<MessageDto>,
    /// Pass as `after` for the next page; null at the end.
    pub next_after: Option<i64>,
}

/// Browse a transcript chronologically.
#[utoipa::path(get, path = "/v1/conversations/{id}/messages", params(BrowseQuery),
    responses((status = 200, body = MessagePage), (status = 404, body = ErrorBody)))]
pub async fn browse(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<BrowseQuery>,
) -> ApiResult<Json<MessagePage>> {
    let conv = ConversationId::parse(id)?;
    let limit = q.limit.unwrap_or(100);
    let msgs = st.engine.messages(&p, &conv, q.after.unwrap_or(0), limit).await?;
    let next_after = if msgs.len() == limit { msgs.last().map(|m| m.seq) } else { None };
    Ok(Json(MessagePage { messages: msgs.iter().map(Into::into).collect(), next_after }))
}

/// A conversation: its owner, size, dates and the rolling summary of what was said.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationDto {
    pub id: String,
    pub user_id: String,
    pub agent_id: Option<String>,
    /// Messages so far.
    pub message_count: i64,
    /// When the conversation started: its first message's `created_at` (an imported
    /// history keeps its own dates).
    pub created_at: String,
    /// When a message was last appended (by the server's clock).
    pub updated_at: String,
    /// The rolling summary extraction keeps of the conversation (null before the first
    /// extraction, or with no LLM configured).
    pub rolling_summary: Option<String>,
    /// User turns the rolling summary covers.
    pub summarized_user_turns: i64,
    /// The last message a leaf of the summary DAG covers (0: none is summarized yet).
    pub summarized_through: i64,
    /// The summary tree: every summary of the conversation (leaves, branches, roots, each
    /// with its `parent_id`), oldest first.
    pub summaries: Vec<SummaryDto>,
}

/// A conversation and its rolling summary.
#[utoipa::path(get, path = "/v1/conversations/{id}",
    responses((status = 200, body = ConversationDto), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<ConversationDto>> {
    let conv = ConversationId::parse(id)?;
    let v = st.engine.conversation(&p, &conv).await?;
    Ok(Json(ConversationDto {
        id: v.info.id.to_string(),
        user_id: v.info.user_id.to_string(),
        agent_id: v.info.agent_id.map(|a| a.to_string()),
        message_count: v.info.messages,
        created_at: dto::fmt_ts(v.info.created_at),
        updated_at: dto::fmt_ts(v.info.updated_at),
        rolling_summary: v.rolling_summary,
        summarized_user_turns: v.summarized_user_turns,
        summarized_through: v.info.summarized_seq,
        summaries: v.summaries.iter().map(Into::into).collect(),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageRating {
    /// -1 or 1.
    pub value: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MessageRated {
    pub message: MessageDto,
    /// Memories recalled for this reply's turn, rated with it.
    pub rated_memories: Vec<String>,
}

/// Rate a reply; the rating cascades to the memories recalled for its turn.
#[utoipa::path(post, path = "/v1/messages/{id}/rating", request_body = MessageRating,
    responses((status = 200, body = MessageRated), (status = 404, body = ErrorBody)))]
pub async fn rate_message(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(b): ApiJson<MessageRating>,
) -> ApiResult<Json<MessageRated>> {
    let (m, rated) = st.engine.rate_message(&p, MessageId::parse(&id)?, b.value).await?;
    Ok(Json(MessageRated {
        message: (&m).into(),
        rated_memories: rated.iter().map(ToString::to_string).collect(),
    }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SessionEnded {
    pub conversation_id: String,
    /// A final extraction and a summary refresh were queued (false: no LLM configured).
    pub queued: bool,
}

/// The session ended: extract what is left and refresh the rolling summary (202).
#[utoipa::path(post, path = "/v1/conversations/{id}/end",
    responses((status = 202, body = SessionEnded), (status = 404, body = ErrorBody)))]
pub async fn end(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<(StatusCode, Json<SessionEnded>)> {
    let conv = ConversationId::parse(id)?;
    let queued = st.engine.end_session(&p, &conv).await?;
    Ok((StatusCode::ACCEPTED, Json(SessionEnded { conversation_id: conv.to_string(), queued })))
}
