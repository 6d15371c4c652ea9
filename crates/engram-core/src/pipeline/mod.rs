//! The write path of automatic memory (SPEC §2), as background job handlers on
//! [`Services`]. Extraction runs in stages, one file each:
//!
//! - [`policy`]: the agent's memory policy (is memory on, when, which prompt and models);
//! - [`cursor`]: where extraction resumes (content-hash cursor);
//! - [`extract`]: the job and pass 1 (candidate facts), the PII filter, embedding;
//! - [`judge`]: consolidation's I/O (neighbours, the judge LLM); [`consolidate`] is its
//!   pure part (prompt and plan, unit-tested without I/O);
//! - [`persist`]: the decision as rows and events (pure) and the one transaction.
//!
//! Beside it: the compactor and its summary DAG ([`compact`]), the rolling summary
//! ([`summary`]), tool-call synthesis ([`tool_calls`]), the
//! background embedding of transcript messages ([`messages`]), the LLM output parsers
//! ([`parse`]), the PII filter ([`pii`]), the prompts and the transcript form ([`prompts`]),
//! and what every stage shares ([`stage`]).

pub mod compact;
pub mod consolidate;
pub mod cursor;
pub mod extract;
mod judge;
pub mod messages;
pub mod parse;
mod persist;
pub mod pii;
pub mod policy;
pub mod prompts;
mod stage;
pub mod summary;
mod tool_calls;

pub use crate::metrics::ExtractionReport;
pub use judge::RELATED;

use crate::error::{Error, FaultSource, JobError};
use crate::model::{ConversationId, Job, JobKind};
use crate::services::Services;

impl Services {
    /// Run one job.
    pub async fn run_job(&self, job: &Job) -> Result<(), JobError> {
        match job.kind {
            JobKind::Extract => self.run_extract(job).await.map(|_| ()),
            JobKind::Summarize => self.run_summarize(job).await,
            JobKind::SynthesizeToolCall => self.run_tool_synthesis(job).await,
            JobKind::EmbedMessages => {
                self.run_embed_messages(std::slice::from_ref(job)).await.pop().unwrap_or(Ok(()))
            }
            JobKind::Compact => self.run_compact(job).await.map(|_| ()),
        }
    }
}

/// The conversation a conversation job names.
fn job_conversation(job: &Job) -> Result<ConversationId, JobError> {
    let c = job.payload.get("conversation_id").and_then(|v| v.as_str()).unwrap_or_default();
    ConversationId::parse(c)
        .map_err(|e| JobError::bug(format!("job {} has no valid conversation_id: {e}", job.id)))
}

/// Faults of a job run map onto the job's retry decision.
impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        let fault = match &e {
            Error::Embedder(x) => x.fault,
            // A fact edited or purged by someone else meanwhile: the next attempt re-reads.
            Error::Internal(_)
            | Error::Llm(_)
            | Error::StoreUnavailable(_)
            | Error::Conflict(_)
            | Error::NotFound { .. } => FaultSource::Runtime,
            Error::InvalidInput { .. }
            | Error::TooLarge(_)
            | Error::Forbidden(_)
            | Error::Unauthorized(_)
            | Error::Unprocessable(_) => FaultSource::Bug,
        };
        JobError { fault, message: e.to_string(), retry_after: None }
    }
}
