//! What every stage of a job shares: a tracing span named after the stage with its outcome,
//! and the LLM call that counts its tokens into the job's report and its latency into the
//! metrics.

use std::time::Instant;

use crate::error::JobError;
use crate::llm::ChatRequest;
use crate::metrics::ExtractionReport;
use crate::services::Services;

/// Run a stage inside a tracing span named after it, recording its outcome (with
/// `FmtSpan::CLOSE` the span's close line carries its duration).
pub(super) async fn staged<T, E>(
    stage: &'static str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    use tracing::Instrument;
    let span = match stage {
        "extract" => tracing::info_span!("extract", outcome = tracing::field::Empty),
        "embed" => tracing::info_span!("embed", outcome = tracing::field::Empty),
        "consolidate" => tracing::info_span!("consolidate", outcome = tracing::field::Empty),
        "persist" => tracing::info_span!("persist", outcome = tracing::field::Empty),
        _ => tracing::info_span!("summary", outcome = tracing::field::Empty),
    };
    let r = fut.instrument(span.clone()).await;
    span.record("outcome", if r.is_ok() { "ok" } else { "error" });
    r
}

impl Services {
    /// One LLM call of a stage: a user error when no LLM is configured.
    pub(super) async fn call(
        &self,
        req: ChatRequest,
        stage: &'static str,
        report: &mut ExtractionReport,
    ) -> Result<String, JobError> {
        let llm = self.llm().ok_or_else(|| JobError::user("no LLM is configured"))?;
        let started = Instant::now();
        let res = llm.chat(&req).await;
        self.metrics().observe_llm(stage, started.elapsed(), res.as_ref().ok());
        let res = res?;
        report.llm_calls += 1;
        report.prompt_tokens += res.prompt_tokens;
        report.completion_tokens += res.completion_tokens;
        Ok(res.content)
    }
}
