//! Conversations: the list (most recently updated first, a page at a time, per user) and the
//! transcript viewer — messages in order with tool calls, the rolling summary extraction
//! keeps, and beside them the facts extracted from the conversation. A memory's source link
//! leads here. The engine decides visibility: a conversation the viewer may not read is
//! "not found", and a user key lists only its own.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use engram_core::engine::ListInput;
use engram_core::model::{ConversationId, UserId};
use engram_core::store::ConversationInfo;
use serde::Deserialize;
use time::OffsetDateTime;

use super::memories::opt;
use super::session::Viewer;
use super::{Dates, Page, UiState, render};
use crate::api::dto::{MemoryDto, MessageDto, SummaryDto, fmt_ts};
use crate::api::error::ApiError;

/// Messages per page.
const PAGE: usize = 200;
/// Conversations per page of the list.
const LIST_PAGE: usize = 50;
/// Facts shown beside a transcript at most.
const FACTS: usize = 100;

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    user: String,
    /// The previous page's last conversation: `<updated_at as unix nanoseconds>.<id>`.
    #[serde(default)]
    before: String,
}

/// A conversation as the list shows it.
pub struct Listed {
    pub id: String,
    pub link: String,
    pub user: String,
    pub agent: Option<String>,
    pub messages: i64,
    pub updated: String,
}

#[derive(Template)]
#[template(path = "conversations.html")]
struct ListPage<'a> {
    v: &'a Viewer,
    user: String,
    rows: Vec<Listed>,
    next: Option<String>,
}

impl Dates for ListPage<'_> {}

fn cursor(c: &ConversationInfo) -> String {
    format!("{}.{}", c.updated_at.unix_timestamp_nanos(), c.id)
}

fn parse_cursor(s: &str) -> Result<Option<(OffsetDateTime, ConversationId)>, ApiError> {
    let Some(s) = opt(s) else { return Ok(None) };
    let bad = || ApiError::invalid(format!("before is not a page cursor: '{s}'"));
    let (at, id) = s.split_once('.').ok_or_else(bad)?;
    let at =
        at.parse::<i128>().ok().and_then(|n| OffsetDateTime::from_unix_timestamp_nanos(n).ok());
    let id = ConversationId::parse(id).map_err(|_| bad())?;
    Ok(Some((at.ok_or_else(bad)?, id)))
}

/// `GET /conversations`: the conversations the viewer may read.
pub async fn list(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Query(q): Query<ListQuery>,
) -> Page {
    let user = match v.bound_user() {
        Some(u) => Some(UserId::parse(u)?),
        None => opt(&q.user).map(UserId::parse).transpose()?,
    };
    let before = parse_cursor(&q.before)?;
    let before = before.as_ref().map(|(at, id)| (*at, id));
    let page =
        state.app.engine.conversations(&v.principal, user.as_ref(), before, LIST_PAGE).await?;
    let next = (page.len() == LIST_PAGE).then(|| {
        let last = page.last().map(cursor).unwrap_or_default();
        let who = user.as_ref().map(|u| format!("user={}&", enc(u.as_str()))).unwrap_or_default();
        format!("/conversations?{who}before={}", enc(&last))
    });
    let rows = page
        .iter()
        .map(|c| Listed {
            id: c.id.to_string(),
            link: format!("/conversations/{}", super::path_segment(c.id.as_str())),
            user: c.user_id.to_string(),
            agent: c.agent_id.as_ref().map(ToString::to_string),
            messages: c.messages,
            updated: fmt_ts(c.updated_at),
        })
        .collect();
    let user = user.map(|u| u.to_string()).unwrap_or_default();
    Ok(render(&ListPage { v: &v, user, rows, next }))
}

#[derive(Deserialize)]
pub struct After {
    #[serde(default)]
    after: String,
}

#[derive(Template)]
#[template(path = "conversation.html")]
struct ConversationPage<'a> {
    v: &'a Viewer,
    id: String,
    messages: Vec<MessageDto>,
    next: Option<String>,
    summary: Option<String>,
    /// The summary DAG of the conversation, oldest first.
    tree: Vec<SummaryDto>,
    facts: Vec<MemoryDto>,
    /// The memory screen filtered to this conversation.
    facts_link: String,
}

impl Dates for ConversationPage<'_> {}

/// `GET /conversations/{id}`: the transcript from `?after=<seq>`, its rolling summary, its
/// summary DAG and the facts extracted from it.
pub async fn page(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Path(id): Path<String>,
    Query(q): Query<After>,
) -> Page {
    let conv = ConversationId::parse(id)?;
    let after: i64 = match q.after.trim() {
        "" => 0,
        s => s.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::invalid(format!("after must be a message sequence number, got '{s}'"))
        })?,
    };
    let engine = &state.app.engine;
    let messages = engine.messages(&v.principal, &conv, after, PAGE).await?;
    let view = engine.conversation(&v.principal, &conv).await?;
    let summary = view.rolling_summary;
    let tree = view.summaries.iter().map(SummaryDto::from).collect();
    let facts = engine
        .list(
            &v.principal,
            ListInput {
                user_id: messages.first().map(|m| m.user_id.clone()),
                source_conversation: Some(conv.clone()),
                limit: FACTS,
                ..Default::default()
            },
        )
        .await?
        .memories;
    let next = (messages.len() == PAGE).then(|| {
        let last = messages.last().map_or(after, |m| m.seq);
        format!("/conversations/{}?after={last}", super::path_segment(conv.as_str()))
    });
    let messages = messages.iter().map(MessageDto::from).collect();
    let facts = facts.iter().map(MemoryDto::from).collect();
    let facts_link = format!("/?conversation={}", enc(conv.as_str()));
    let page = ConversationPage {
        v: &v,
        id: conv.to_string(),
        messages,
        next,
        summary,
        tree,
        facts,
        facts_link,
    };
    Ok(render(&page))
}
