//! Health and stats (admin keys): the extraction-health card of seed 002 — queue depth,
//! failed jobs with their error and a retry button, the last successful extraction — with
//! embedding coverage, the summary DAG (summaries, depth, unsummarized messages, and why
//! compaction waits), the tenant's counts, and charts (memories by category, memories and
//! messages over time, the extraction's ADD/UPDATE/DELETE/NONE decisions).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum_extra::extract::Form;
use engram_core::model::{EventKind, JobStatus};
use serde::Deserialize;

use super::session::Viewer;
use super::{Dates, Page, UiError, UiState, charts, render};
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
    /// SVG charts (this server's own drawing, no stored text) with their captions.
    charts: Vec<(String, String)>,
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
    // From the store's index of finished jobs: the newest 200 finished jobs, read before,
    // could all be message embeddings in a busy tenant.
    let last_success = stats.store.last_extraction_at.map(fmt_ts);
    let health = stats.extraction_health.map_or_else(|| "–".to_string(), pct);
    let coverage = pct(stats.embedding_coverage);
    let message_coverage = pct(stats.message_embedding_coverage);
    let charts = charts(&state, &v).await?;
    let page = HealthPage {
        v: &v,
        s: StatsDto::from(stats),
        health,
        coverage,
        message_coverage,
        failed,
        last_success,
        retried: q.retried == "1",
        charts,
    };
    Ok(render(&page))
}

/// Days the charts over time cover.
const DAYS: i64 = 30;

/// The charts of the page: memories by category, memories and messages per day, and the
/// extraction's decisions.
async fn charts(state: &UiState, v: &Viewer) -> Result<Vec<(String, String)>, UiError> {
    let a = state.app.engine.activity(&v.principal, None, DAYS).await?;
    let categories: Vec<(String, u64)> =
        a.categories.iter().map(|(c, n)| (c.as_str().to_string(), *n)).collect();
    let decision = |k: EventKind| a.decisions.iter().find(|d| d.0 == k).map_or(0, |d| d.1);
    let decisions = [
        ("ADD", EventKind::Created),
        ("UPDATE", EventKind::Superseded),
        ("DELETE", EventKind::Forgotten),
        ("NONE", EventKind::Confirmed),
    ]
    .map(|(name, k)| (name.to_string(), decision(k)));
    let drawn = [
        ("Active memories by category", charts::bars(&categories)),
        (
            "Memories and messages per day (last 30 days)",
            charts::per_day(
                &[("memories", &a.memories_per_day), ("messages", &a.messages_per_day)],
                DAYS,
            ),
        ),
        ("Extraction decisions (last 30 days)", charts::bars(&decisions)),
    ];
    Ok(drawn
        .into_iter()
        .map(|(caption, svg)| {
            let svg = svg.unwrap_or_else(|| "<p class=\"empty\">Nothing yet.</p>".into());
            (caption.to_string(), svg)
        })
        .collect())
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
