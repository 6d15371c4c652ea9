//! The transcript viewer: a conversation's messages in order (tool calls with their
//! arguments and results), a page at a time, reachable from a memory's source link. The
//! engine decides visibility: a conversation the viewer may not read is "not found".

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use engram_core::model::ConversationId;
use serde::Deserialize;

use super::session::Viewer;
use super::{Dates, Page, UiState, render};
use crate::api::dto::MessageDto;
use crate::api::error::ApiError;

/// Messages per page.
const PAGE: usize = 200;

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
}

impl Dates for ConversationPage<'_> {}

/// `GET /conversations/{id}`: the transcript from `?after=<seq>`.
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
    let messages = state.app.engine.messages(&v.principal, &conv, after, PAGE).await?;
    let next = (messages.len() == PAGE).then(|| {
        let last = messages.last().map_or(after, |m| m.seq);
        format!(
            "/conversations/{}?after={last}",
            form_urlencoded::byte_serialize(conv.as_str().as_bytes()).collect::<String>()
        )
    });
    let messages = messages.iter().map(MessageDto::from).collect();
    Ok(render(&ConversationPage { v: &v, id: conv.to_string(), messages, next }))
}
