//! The memory screen: list (cursor pagination) or hybrid search (with each score's
//! explanation on demand), filters, *New memory*, and per row edit (a new version
//! supersedes), rate −1/+1, forget, purge and bulk forget with a confirmation; a fact's
//! history as a timeline. Every action calls the engine with the viewer's principal, so a
//! `user` key sees and changes only its user's facts, whatever the form says.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::Form;
use engram_core::engine::{EditInput, Hit, ListInput, RememberInput, SearchInput};
use engram_core::model::{
    AgentId, Category, ConversationId, Importance, Kind, Memory, MemoryId, UserId,
};
use engram_core::retrieval::Explain;
use serde::Deserialize;
use time::OffsetDateTime;
use time::macros::format_description;

use super::session::Viewer;
use super::{Dates, Page, UiError, UiState, render};
use crate::api::dto::{EventDto, MemoryDto};
use crate::api::error::ApiError;

/// Rows per page.
const PAGE: usize = 50;

pub const CATEGORIES: [&str; 6] =
    ["preference", "fact", "event", "relationship", "decision", "general"];
pub const KINDS: [&str; 3] = ["knowledge", "profile", "shared"];

/// The filters of the memory screen, as its form and links send them.
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub q: String,
    #[serde(default)]
    pub category: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub cursor: String,
    /// Observed on or after this day (`YYYY-MM-DD`).
    #[serde(default)]
    pub from: String,
    /// Observed on or before this day.
    #[serde(default)]
    pub to: String,
    #[serde(default)]
    pub superseded: String,
    /// `up`, `down` or `none` (rated neither way).
    #[serde(default)]
    pub rating: String,
    /// Only facts from this source conversation.
    #[serde(default)]
    pub conversation: String,
    #[serde(default)]
    pub notice: String,
}

pub(super) fn opt(s: &str) -> Option<&str> {
    Some(s.trim()).filter(|s| !s.is_empty())
}

impl Filters {
    fn user_id(&self) -> Result<Option<UserId>, UiError> {
        Ok(opt(&self.user).map(UserId::parse).transpose()?)
    }
    fn agent_id(&self) -> Result<Option<AgentId>, UiError> {
        Ok(opt(&self.agent).map(AgentId::parse).transpose()?)
    }
    fn categories(&self) -> Result<Option<Vec<Category>>, UiError> {
        Ok(opt(&self.category).map(|c| Category::parse(c).map(|c| vec![c])).transpose()?)
    }
    fn rating(&self) -> Result<Option<std::cmp::Ordering>, UiError> {
        Ok(crate::api::dto::rating_filter(opt(&self.rating))?)
    }
    fn conversation(&self) -> Result<Option<ConversationId>, UiError> {
        Ok(opt(&self.conversation).map(ConversationId::parse).transpose()?)
    }
    fn kinds(&self) -> Result<Option<Vec<Kind>>, UiError> {
        Ok(opt(&self.kind).map(|k| Kind::parse(k).map(|k| vec![k])).transpose()?)
    }
    /// The start of `from` and the end of `to` (UTC days).
    fn bounds(&self) -> Result<(Option<OffsetDateTime>, Option<OffsetDateTime>), UiError> {
        let day = |field: &str, s: &str| -> Result<Option<time::Date>, UiError> {
            let Some(s) = opt(s) else { return Ok(None) };
            let d = time::Date::parse(s, format_description!("[year]-[month]-[day]"))
                .ok()
                .filter(|d| crate::api::dto::YEARS.contains(&d.year()))
                .ok_or_else(|| {
                    ApiError::invalid(format!("{field} must be a day like 2026-02-22, got '{s}'"))
                })?;
            Ok(Some(d))
        };
        let since = day("from", &self.from)?.map(|d| d.midnight().assume_utc());
        let until = day("to", &self.to)?.map(|d| d.next_day().unwrap_or(d).midnight().assume_utc());
        Ok((since, until))
    }

    /// This screen's address with these filters but the source conversation.
    pub fn without_conversation(&self) -> String {
        self.address(None, false)
    }

    /// This screen's address with these filters (and another cursor).
    pub fn url(&self, cursor: Option<&str>) -> String {
        self.address(cursor, true)
    }

    fn address(&self, cursor: Option<&str>, with_conversation: bool) -> String {
        let conversation = if with_conversation { self.conversation.as_str() } else { "" };
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("agent", self.agent.as_str()),
            ("user", self.user.as_str()),
            ("q", self.q.as_str()),
            ("category", self.category.as_str()),
            ("kind", self.kind.as_str()),
            ("superseded", self.superseded.as_str()),
            ("rating", self.rating.as_str()),
            ("conversation", conversation),
            ("from", self.from.as_str()),
            ("to", self.to.as_str()),
        ] {
            if !v.trim().is_empty() {
                q.append_pair(k, v.trim());
            }
        }
        if let Some(c) = cursor {
            q.append_pair("cursor", c);
        }
        let q = q.finish();
        if q.is_empty() { "/".into() } else { format!("/?{q}") }
    }
}

/// One row of the list.
pub struct Row {
    pub m: MemoryDto,
    /// The search score and its parts, for a search.
    pub score: Option<String>,
    pub why: Vec<(String, String)>,
}

fn explain_lines(e: &Explain) -> Vec<(String, String)> {
    let mut out = vec![];
    if let Some(r) = e.vector_rank {
        let sim = e.vector_similarity.map(|s| format!(", cosine {s:.3}")).unwrap_or_default();
        out.push(("by meaning".into(), format!("rank {r}{sim}, support {:.2}", e.semantic)));
    }
    if let Some(r) = e.text_rank {
        let s = e.text_coverage.map(|s| format!(", {:.0}% of the query's keywords", s * 100.0));
        out.push(("by keyword".into(), format!("rank {r}{}", s.unwrap_or_default())));
    }
    out.push(("relevance (the score)".into(), format!("{:.3}", e.relevance)));
    out.push(("fused rank (RRF)".into(), format!("{:.5}", e.rrf)));
    out.push((
        "recency".into(),
        format!(
            "× {:.3} ({:.1} days since use, used {} times)",
            e.temporal_weight, e.days_since_access, e.access_count
        ),
    ));
    out.push((
        "importance".into(),
        format!("× {:.3} (importance {})", e.importance_weight, e.importance),
    ));
    out.push(("rating".into(), format!("× {:.3} (rating {})", e.rating_weight, e.rating)));
    out.push(("order".into(), format!("{:.5}", e.rank_score)));
    out
}

#[derive(Template)]
#[template(path = "memories.html")]
struct MemoriesPage<'a> {
    v: &'a Viewer,
    f: &'a Filters,
    rows: Vec<Row>,
    next: Option<String>,
    notice: Option<&'static str>,
    error: Option<String>,
    back: String,
    categories: [&'static str; 6],
    kinds: [&'static str; 3],
    searching: bool,
    /// The tenant's agents with settings, for the picker (admin keys).
    agents: Vec<String>,
}

impl Dates for MemoriesPage<'_> {}
impl Dates for HistoryPage<'_> {}

fn notice(code: &str) -> Option<&'static str> {
    Some(match code {
        "created" => "Remembered.",
        "confirmed" => "Already known: the existing fact was confirmed.",
        "edited" => "Saved as a new version; the old one is kept in the history.",
        "rated" => "Rated.",
        "forgotten" => "Forgotten (kept for the audit trail).",
        "purged" => "Purged: the fact and its history are deleted.",
        "bulk" => "The selected facts are forgotten.",
        _ => return None,
    })
}

/// `GET /`: the memory screen.
pub async fn page(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Query(mut f): Query<Filters>,
) -> Page {
    if let Some(u) = v.bound_user() {
        f.user = u;
    }
    if let Some(a) = v.bound_agent() {
        f.agent = a;
    }
    let back = f.url(opt(&f.cursor));
    let searching = opt(&f.q).is_some();
    let (rows, next, error) = match load(&state, &v, &f).await {
        Ok((rows, next)) => (rows, next, None),
        Err(UiError(e)) => (vec![], None, Some(e.message)),
    };
    let page = MemoriesPage {
        v: &v,
        f: &f,
        rows,
        next,
        notice: notice(&f.notice),
        error,
        back,
        categories: CATEGORIES,
        kinds: KINDS,
        searching,
        agents: agent_ids(&state, &v).await?,
    };
    Ok(render(&page))
}

/// The agents an admin can pick from (other keys pick none: an agent key is bound, and a
/// user key has no business with the tenant's agents).
pub async fn agent_ids(state: &UiState, v: &Viewer) -> Result<Vec<String>, UiError> {
    if !matches!(v.principal.role, engram_core::model::KeyRole::Admin) {
        return Ok(vec![]);
    }
    let agents = state.app.engine.agents(&v.principal).await?;
    Ok(agents.into_iter().map(|a| a.id.to_string()).collect())
}

async fn load(
    state: &UiState,
    v: &Viewer,
    f: &Filters,
) -> Result<(Vec<Row>, Option<String>), UiError> {
    let engine = &state.app.engine;
    let (since, until) = f.bounds()?;
    if let Some(q) = opt(&f.q) {
        let hits = engine
            .search(
                &v.principal,
                SearchInput {
                    query: q.to_string(),
                    user_id: f.user_id()?,
                    agent_id: f.agent_id()?,
                    categories: f.categories()?,
                    kinds: f.kinds()?,
                    since,
                    until,
                    limit: PAGE,
                    explain: true,
                    source_conversation: f.conversation()?,
                    rating: f.rating()?,
                    ..Default::default()
                },
            )
            .await?;
        let rows = hits
            .into_iter()
            .filter_map(|h| match h {
                Hit::Memory { memory, score, explain } => Some(Row {
                    m: (&memory).into(),
                    score: Some(format!("{score:.2}")),
                    why: explain_lines(&explain),
                }),
                Hit::Message { .. } | Hit::Summary { .. } => None,
            })
            .collect();
        return Ok((rows, None));
    }
    let cursor = opt(&f.cursor).map(MemoryId::parse).transpose()?;
    let page = engine
        .list(
            &v.principal,
            ListInput {
                user_id: f.user_id()?,
                agent_id: f.agent_id()?,
                categories: f.categories()?,
                kinds: f.kinds()?,
                include_superseded: opt(&f.superseded).is_some(),
                since,
                until,
                cursor,
                limit: PAGE,
                source_conversation: f.conversation()?,
                rating: f.rating()?,
            },
        )
        .await?;
    let rows =
        page.memories.iter().map(|m| Row { m: m.into(), score: None, why: vec![] }).collect();
    let next = page.next_cursor.map(|c| f.url(Some(&c.to_string())));
    Ok((rows, next))
}

/// Where to go after a form: its `back` field when it is a path of this server, else `/`.
fn back_to(back: &str, notice: &str) -> Response {
    let safe = back.starts_with('/') && !back.starts_with("//") && !back.contains('\\');
    let base = if safe { back } else { "/" };
    let sep = if base.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{base}{sep}notice={notice}")).into_response()
}

#[derive(Deserialize)]
pub struct NewForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    category: String,
    #[serde(default)]
    importance: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    conversation: String,
    #[serde(default)]
    back: String,
}

fn importance(s: &str) -> Result<Option<Importance>, UiError> {
    let Some(s) = opt(s) else { return Ok(None) };
    let n: i64 = s.parse().map_err(|_| {
        ApiError::invalid(format!("importance must be a number from 1 to 10, got '{s}'"))
    })?;
    Ok(Some(Importance::parse(n)?))
}

/// `POST /memories`: *New memory*.
pub async fn create(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Form(form): Form<NewForm>,
) -> Page {
    v.check_csrf(&form.csrf)?;
    let input = RememberInput {
        user_id: opt(&form.user).map(UserId::parse).transpose()?,
        agent_id: opt(&form.agent).map(AgentId::parse).transpose()?,
        kind: opt(&form.kind).map(Kind::parse).transpose()?.unwrap_or_default(),
        key: opt(&form.key).map(str::to_string),
        category: opt(&form.category).map(Category::parse).transpose()?.unwrap_or_default(),
        importance: importance(&form.importance)?.unwrap_or_default(),
        content: form.content.clone(),
        source_conversation_id: opt(&form.conversation).map(ConversationId::parse).transpose()?,
        ..Default::default()
    };
    let r = state.app.engine.remember(&v.principal, input).await?;
    let code = match r.decision {
        engram_core::engine::Decision::None => "confirmed",
        engram_core::engine::Decision::Add | engram_core::engine::Decision::Update => "created",
    };
    Ok(back_to(&form.back, code))
}

#[derive(Deserialize)]
pub struct EditForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    category: String,
    #[serde(default)]
    importance: String,
    #[serde(default)]
    back: String,
}

fn memory_id(id: &str) -> Result<MemoryId, UiError> {
    Ok(MemoryId::parse(id)?)
}

/// `POST /memories/{id}/edit`: a new version supersedes the old one.
pub async fn edit(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Path(id): Path<String>,
    Form(form): Form<EditForm>,
) -> Page {
    v.check_csrf(&form.csrf)?;
    let id = memory_id(&id)?;
    // The form holds the fact's text: emptied, it is a mistake, not "keep the text" (a
    // tester's empty save made a new version of the old text and said "edited").
    if form.content.trim().is_empty() {
        return Err(ApiError::invalid(
            "content must not be empty; to stop a fact being recalled, forget it",
        )
        .into());
    }
    let input = EditInput {
        content: opt(&form.content).map(str::to_string),
        category: opt(&form.category).map(Category::parse).transpose()?,
        importance: importance(&form.importance)?,
        ..Default::default()
    };
    state.app.engine.edit(&v.principal, id, input).await?;
    Ok(back_to(&form.back, "edited"))
}

#[derive(Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    value: String,
    /// `yes` on a purge confirmed on its page.
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    back: String,
}

/// `POST /memories/{id}/{action}`: `rate` (−1 or +1), `forget` (superseded by nothing,
/// kept for audit) or `purge` (deleted with its history, after a confirmation page; admin
/// and user keys).
pub async fn act(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Page {
    v.check_csrf(&form.csrf)?;
    let id = memory_id(&id)?;
    let engine = &state.app.engine;
    let notice = match action.as_str() {
        "rate" => {
            let value: i64 =
                form.value.trim().parse().map_err(|_| ApiError::invalid("a rating is -1 or 1"))?;
            engine.rate(&v.principal, id, value).await?;
            "rated"
        }
        "forget" => {
            engine.forget(&v.principal, id, false).await?;
            "forgotten"
        }
        // Purging deletes the history too and cannot be undone: first a page that says
        // so, then, confirmed there, the purge.
        "purge" if form.confirm != "yes" => {
            let m: Memory = engine.get(&v.principal, id).await?;
            let rows = vec![(&m).into()];
            return Ok(render(&ConfirmPage { v: &v, rows, back: &form.back, purge: true }));
        }
        "purge" => {
            engine.forget(&v.principal, id, true).await?;
            "purged"
        }
        other => {
            return Err(ApiError::new(
                engram_core::ErrorCode::NotFound,
                format!("no action '{other}' on a memory; expected rate, forget or purge"),
            )
            .into());
        }
    };
    Ok(back_to(&form.back, notice))
}

#[derive(Deserialize)]
pub struct BulkForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    id: Vec<String>,
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    back: String,
}

#[derive(Template)]
#[template(path = "confirm.html")]
struct ConfirmPage<'a> {
    v: &'a Viewer,
    rows: Vec<MemoryDto>,
    back: &'a str,
    /// Purge one fact (else: forget the rows).
    purge: bool,
}

/// `POST /memories/bulk-forget`: first a confirmation page naming the selected facts, then,
/// confirmed, each one forgotten (those already forgotten are left as they are).
pub async fn bulk_forget(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Form(form): Form<BulkForm>,
) -> Page {
    v.check_csrf(&form.csrf)?;
    let ids: Vec<MemoryId> = form.id.iter().map(|i| memory_id(i)).collect::<Result<_, _>>()?;
    if ids.is_empty() {
        return Err(ApiError::invalid("select at least one memory to forget").into());
    }
    if ids.len() > PAGE {
        return Err(ApiError::invalid(format!("at most {PAGE} memories at a time")).into());
    }
    let engine = &state.app.engine;
    if form.confirm != "yes" {
        let mut rows = vec![];
        for id in &ids {
            let m: Memory = engine.get(&v.principal, *id).await?;
            rows.push((&m).into());
        }
        return Ok(render(&ConfirmPage { v: &v, rows, back: &form.back, purge: false }));
    }
    // One already forgotten (a second tab, a double submit) is skipped, not an error
    // halfway through the selection.
    for id in ids {
        match engine.forget(&v.principal, id, false).await {
            Ok(_) | Err(engram_core::Error::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(back_to(&form.back, "bulk"))
}

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage<'a> {
    v: &'a Viewer,
    id: String,
    chain: Vec<MemoryDto>,
    events: Vec<(EventDto, Option<String>)>,
}

/// `GET /memories/{id}`: the supersession chain and its events, as far as the viewer may see.
pub async fn history(State(state): State<Arc<UiState>>, v: Viewer, Path(id): Path<String>) -> Page {
    let id = memory_id(&id)?;
    let h = state.app.engine.history(&v.principal, id).await?;
    let chain = h.chain.iter().map(MemoryDto::from).collect();
    let events = h
        .events
        .iter()
        .map(|e| {
            let conv = e.detail.get("conversation_id").and_then(|c| c.as_str()).map(str::to_string);
            (EventDto::from(e), conv)
        })
        .collect();
    Ok(render(&HistoryPage { v: &v, id: id.to_string(), chain, events }))
}

#[derive(Deserialize)]
pub struct ExportQuery {
    #[serde(default)]
    user: String,
}

/// `GET /export?user=…`: everything stored about a user as a JSON download (a `user` key:
/// its own user, whatever the address says).
pub async fn export(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Query(q): Query<ExportQuery>,
) -> Page {
    let user = v.bound_user().unwrap_or(q.user);
    let user = UserId::parse(user.trim())?;
    let x = state.app.engine.export_user(&v.principal, &user).await?;
    let body = serde_json::to_vec_pretty(&crate::api::dto::UserExportDto::from(&x))
        .map_err(|e| ApiError::new(engram_core::ErrorCode::Internal, e.to_string()))?;
    let name: String = user
        .as_str()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, "application/json".to_string()),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"engram-export-{name}.json\""),
            ),
        ],
        body,
    )
        .into_response())
}
