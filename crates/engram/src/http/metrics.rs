//! `/metrics`: the engine's counters and histograms in the Prometheus text format.
//! Process-wide (all tenants), so it carries no tenant data, only counts and durations.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use engram_core::metrics::BUCKETS;

use engram_core::ErrorCode;
use engram_core::model::KeyRole;

use super::error::ApiError;
use super::{AppState, Auth};

fn labels(extra: &str, base: &str) -> String {
    match (base.is_empty(), extra.is_empty()) {
        (true, true) => String::new(),
        (true, false) => format!("{{{extra}}}"),
        (false, true) => format!("{{{base}}}"),
        (false, false) => format!("{{{base},{extra}}}"),
    }
}

/// Render every metric.
pub async fn render(state: &AppState) -> String {
    let snap = state.engine.metrics().snapshot();
    let mut out = String::new();
    let mut last = String::new();
    for ((name, l), v) in &snap.counters {
        if *name != last {
            let _ = writeln!(out, "# TYPE {name} counter");
            last.clone_from(name);
        }
        let _ = writeln!(out, "{name}{} {v}", labels("", l));
    }
    for ((name, l), h) in &snap.histograms {
        if *name != last {
            let _ = writeln!(out, "# TYPE {name} histogram");
            last.clone_from(name);
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                labels(&format!("le=\"{b}\""), l),
                h.counts.get(i).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(out, "{name}_bucket{} {}", labels("le=\"+Inf\"", l), h.count);
        let _ = writeln!(out, "{name}_sum{} {}", labels("", l), h.sum);
        let _ = writeln!(out, "{name}_count{} {}", labels("", l), h.count);
    }
    let _ = writeln!(out, "# TYPE engram_llm_configured gauge");
    let _ = writeln!(out, "engram_llm_configured {}", u8::from(state.engine.llm().is_some()));
    match state.engine.backlog_all().await {
        Ok(b) => {
            let now = engram_core::model::now();
            let age = |t| crate::api::dto::age(t, now).unwrap_or(0.0);
            for (name, help, v) in [
                (
                    "engram_embedding_backlog_messages",
                    "Messages without a vector yet (found by keywords only).",
                    b.messages_unembedded as f64,
                ),
                (
                    "engram_embedding_backlog_age_seconds",
                    "Age of the oldest embedding job waiting or running (0: none).",
                    age(b.embedding_since),
                ),
                (
                    "engram_extraction_backlog_jobs",
                    "Extraction jobs waiting or running.",
                    b.extractions_pending as f64,
                ),
                (
                    "engram_extraction_backlog_age_seconds",
                    "Age of the oldest extraction job waiting or running (0: none).",
                    age(b.extraction_since),
                ),
            ] {
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} gauge");
                let _ = writeln!(out, "{name} {v}");
            }
        }
        // The store's own failure must not hide the other figures.
        Err(e) => tracing::warn!(error = %e, "/metrics: cannot read the backlog"),
    }
    out
}

/// `GET /metrics`: needs an admin key once keys exist (the figures cover every tenant of
/// the process); open in local mode, like the rest of the API.
pub async fn metrics(
    State(st): State<Arc<AppState>>,
    Auth(p): Auth,
) -> Result<impl IntoResponse, ApiError> {
    if !matches!(p.role, KeyRole::Admin) {
        return Err(ApiError::new(ErrorCode::Forbidden, "/metrics needs an admin key"));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], render(&st).await))
}
