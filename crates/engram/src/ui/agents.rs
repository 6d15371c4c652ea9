//! Agent settings: memory on or off, the extraction policy, the dedup threshold, the cluster
//! and the PII policy, saved through the same engine operation (and so the same validation)
//! as `PUT /v1/agents/{id}`, with seed 001's warnings: memory on but no LLM configured (so
//! nothing is extracted), only the built-in embedder, failed extraction jobs.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect};
use axum_extra::extract::Form;
use engram_core::ErrorCode;
use engram_core::engine::AgentInput;
use engram_core::model::AgentId;
use serde::Deserialize;
use serde_json::{Value, json};

use super::session::Viewer;
use super::{Dates, Page, UiError, UiState, render};
use crate::api::error::ApiError;

#[derive(Deserialize)]
pub struct Pick {
    #[serde(default)]
    id: String,
}

/// `GET /agents?id=…`: the tenant's agents that have settings, and an agent's settings
/// opened by its id (also one never configured).
pub async fn pick(State(state): State<Arc<UiState>>, v: Viewer, Query(q): Query<Pick>) -> Page {
    if let Some(a) = v.bound_agent() {
        return Ok(Redirect::to(&format!("/agents/{}", super::path_segment(&a))).into_response());
    }
    let id = q.id.trim();
    if id.is_empty() {
        let agents = state.app.engine.agents(&v.principal).await?;
        let rows = agents.iter().map(Listed::of).collect();
        return Ok(render(&PickPage { v: &v, rows }));
    }
    let id = AgentId::parse(id)?;
    Ok(Redirect::to(&format!("/agents/{}", super::path_segment(id.as_str()))).into_response())
}

/// One configured agent in the list.
struct Listed {
    id: String,
    link: String,
    memory_enabled: bool,
    mode: String,
    pool: String,
    updated: String,
}

impl Listed {
    fn of(a: &engram_core::model::Agent) -> Self {
        let mode = a.settings.get("extraction").and_then(|e| e.get("mode")).and_then(Value::as_str);
        Self {
            id: a.id.to_string(),
            link: format!("/agents/{}", super::path_segment(a.id.as_str())),
            memory_enabled: a.memory_enabled,
            mode: mode.unwrap_or("post-turn").to_string(),
            pool: a.pool(),
            updated: crate::api::dto::fmt_ts(a.updated_at),
        }
    }
}

#[derive(Template)]
#[template(path = "agent_pick.html")]
struct PickPage<'a> {
    v: &'a Viewer,
    rows: Vec<Listed>,
}

impl Dates for PickPage<'_> {}

/// What the settings form shows.
struct Shown {
    memory_enabled: bool,
    mode: String,
    min_turns: i64,
    max_tokens: u64,
    pii: String,
    dedup_threshold: String,
    cluster: String,
}

#[derive(Template)]
#[template(path = "agent.html")]
struct AgentPage<'a> {
    v: &'a Viewer,
    id: String,
    exists: bool,
    s: Shown,
    warnings: Vec<String>,
    saved: bool,
    can_edit: bool,
}

#[derive(Deserialize)]
pub struct Saved {
    #[serde(default)]
    saved: String,
}

/// `GET /agents/{id}`: the settings of an agent (defaults for one never configured).
pub async fn page(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Path(id): Path<String>,
    Query(q): Query<Saved>,
) -> Page {
    let id = AgentId::parse(id)?;
    let engine = &state.app.engine;
    let stored = match engine.get_agent(&v.principal, &id).await {
        Ok(a) => Some(a),
        // Never configured: its defaults, for an admin or the agent's own key (another
        // agent's key learns nothing of it).
        Err(engram_core::Error::NotFound { .. })
            if v.bound_agent().is_none_or(|b| b == id.as_str()) =>
        {
            None
        }
        Err(e) => return Err(e.into()),
    };
    let default_threshold = engine.config().dedup_threshold;
    let (enabled, threshold, cluster, settings) = match &stored {
        Some(a) => (a.memory_enabled, a.dedup_threshold, a.cluster_id.clone(), a.settings.clone()),
        None => (true, default_threshold, None, json!({})),
    };
    let ex = settings.get("extraction").cloned().unwrap_or(Value::Null);
    let s = Shown {
        memory_enabled: enabled,
        mode: ex.get("mode").and_then(Value::as_str).unwrap_or("post-turn").to_string(),
        min_turns: ex.get("min_turns").and_then(Value::as_i64).unwrap_or(3),
        max_tokens: ex.get("max_tokens_per_extraction").and_then(Value::as_u64).unwrap_or(1024),
        pii: settings.get("pii_policy").and_then(Value::as_str).unwrap_or("redact").to_string(),
        dedup_threshold: format!("{threshold:.2}"),
        cluster: cluster.unwrap_or_default(),
    };
    let warnings = warnings(&state, &v, enabled, &s.mode).await?;
    // Only an admin changes agent settings (a user key saw a form whose save was a 403).
    let can_edit = matches!(v.principal.role, engram_core::model::KeyRole::Admin);
    let page = AgentPage {
        v: &v,
        id: id.to_string(),
        exists: stored.is_some(),
        s,
        warnings,
        saved: q.saved == "1",
        can_edit,
    };
    Ok(render(&page))
}

/// Seed 001's warnings for an agent's settings.
async fn warnings(
    state: &UiState,
    v: &Viewer,
    enabled: bool,
    mode: &str,
) -> Result<Vec<String>, UiError> {
    let engine = &state.app.engine;
    let mut out = vec![];
    if enabled && mode != "off" && engine.llm().is_none() {
        out.push(
            "Memory is enabled but no LLM is configured: conversations are kept and searchable, \
             but no facts are extracted from them (start engram with --llm-provider and its --llm-* settings)."
                .to_string(),
        );
    }
    if engine.embedder().model_id().starts_with("builtin:") {
        out.push(
            "Only the built-in embedder is configured: it is fast and offline but finds \
             paraphrases less well than a neural model (--embedder local:<dir> or an \
             OpenAI-compatible endpoint)."
                .to_string(),
        );
    }
    if v.bound_agent().is_none() {
        let stats = engine.stats(&v.principal).await?;
        if stats.store.extractions_failed > 0 {
            out.push(format!(
                "{} extraction job(s) failed for good in this tenant; see the health page or `engram jobs list --status failed`.",
                stats.store.extractions_failed
            ));
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
pub struct SettingsForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    memory_enabled: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    min_turns: String,
    #[serde(default)]
    max_tokens: String,
    #[serde(default)]
    pii: String,
    #[serde(default)]
    dedup_threshold: String,
    #[serde(default)]
    cluster: String,
}

fn number<T: std::str::FromStr>(field: &str, s: &str) -> Result<T, UiError> {
    s.trim().parse().map_err(|_| {
        UiError(ApiError::new(
            ErrorCode::InvalidInput,
            format!("{field} must be a number, got '{}'", s.trim()),
        ))
    })
}

/// `POST /agents/{id}`: save the settings (admin keys), keeping settings this form does not
/// show (a custom prompt, per-agent models) as they were.
pub async fn save(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Path(id): Path<String>,
    Form(form): Form<SettingsForm>,
) -> Page {
    v.check_csrf(&form.csrf)?;
    let id = AgentId::parse(id)?;
    let engine = &state.app.engine;
    let mut settings = match engine.get_agent(&v.principal, &id).await {
        Ok(a) => a.settings,
        Err(engram_core::Error::NotFound { .. }) => json!({}),
        Err(e) => return Err(e.into()),
    };
    let mut ex = settings.get("extraction").cloned().filter(Value::is_object).unwrap_or(json!({}));
    ex["mode"] = json!(form.mode.trim());
    if form.mode.trim() == "batched" {
        ex["min_turns"] = json!(number::<i64>("min_turns", &form.min_turns)?);
    }
    ex["max_tokens_per_extraction"] = json!(number::<u64>("max_tokens", &form.max_tokens)?);
    settings["extraction"] = ex;
    settings["pii_policy"] = json!(form.pii.trim());
    let input = AgentInput {
        memory_enabled: !form.memory_enabled.is_empty(),
        cluster_id: Some(form.cluster.trim().to_string()).filter(|c| !c.is_empty()),
        dedup_threshold: Some(number::<f32>("dedup_threshold", &form.dedup_threshold)?),
        settings,
    };
    engine.put_agent(&v.principal, id.clone(), input).await?;
    Ok(Redirect::to(&format!("/agents/{}?saved=1", super::path_segment(id.as_str())))
        .into_response())
}
