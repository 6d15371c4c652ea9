//! Health and stats (admin keys): the extraction-health card of seed 002 — queue depth,
//! failed jobs with their error and a retry button, the last successful extraction — with
//! embedding coverage and the tenant's counts.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum_extra::extract::Form;
use engram_core::model::{JobKind, JobStatus};
use serde::Deserialize;

use super::session::Viewer;
use super::{Dates, Page, UiState, render};
use crate::api::dto::{StatsDto, fmt_ts};

/// Failed jobs shown at most.
const FAILED_SHOWN: usize = 50;

/// A failed job as the card lists it.
pub struct FailedJob {
    pub id: String,
    pub kind: String,
    pub attempts: i64,
    pub error: String,
    pub at: String,
}

#[derive(Template)]
#[template(path = "health.html")]
struct HealthPage<'a> {
    v: &'a Viewer,
    s: StatsDto,
    failed: Vec<FailedJob>,
    last_success: Option<String>,
    retried: bool,
    /// Extraction health, embedding coverage of facts and of messages, as percentages.
    health: String,
    coverage: String,
    message_coverage: String,
}

impl Dates for HealthPage<'_> {}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

#[derive(Deserialize)]
pub struct Retried {
    #[serde(default)]
    retried: String,
}

/// `GET /health`.
pub async fn page(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    axum::extract::Query(q): axum::extract::Query<Retried>,
) -> Page {
    let engine = &state.app.engine;
    let stats = engine.stats(&v.principal).await?;
    let failed = engine
        .jobs(&v.principal, Some(JobStatus::Failed), FAILED_SHOWN)
        .await?
        .into_iter()
        .map(|j| FailedJob {
            id: j.id,
            kind: j.kind.as_str().to_string(),
            attempts: j.attempts,
            error: j.last_error.unwrap_or_default(),
            at: fmt_ts(j.updated_at),
        })
        .collect();
    let last_success = engine
        .jobs(&v.principal, Some(JobStatus::Done), 200)
        .await?
        .into_iter()
        .find(|j| j.kind == JobKind::Extract)
        .map(|j| fmt_ts(j.updated_at));
    let health = stats.extraction_health.map_or_else(|| "–".to_string(), pct);
    let coverage = pct(stats.embedding_coverage);
    let message_coverage = pct(stats.message_embedding_coverage);
    let page = HealthPage {
        v: &v,
        s: StatsDto::from(stats),
        health,
        coverage,
        message_coverage,
        failed,
        last_success,
        retried: q.retried == "1",
    };
    Ok(render(&page))
}

#[derive(Deserialize)]
pub struct RetryForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /jobs/{id}/retry`: a failed job back in the queue.
pub async fn retry(
    State(state): State<Arc<UiState>>,
    v: Viewer,
    Path(id): Path<String>,
    Form(form): Form<RetryForm>,
) -> Page {
    v.check_csrf(&form.csrf)?;
    state.app.engine.retry_job(&v.principal, &id).await?;
    Ok(Redirect::to("/health?retried=1").into_response())
}
