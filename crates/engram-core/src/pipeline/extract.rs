//! The extraction job: the conversation's messages after the cursor, in windows of
//! [`WINDOW`]; per window pass 1 (the fast-tier LLM lists candidate facts), the PII filter,
//! embedding, then consolidation ([`super::judge`]) and one transaction
//! ([`super::persist`]). The stages before are [`super::policy`] and [`super::cursor`].
//!
//! Exactly-once: an extraction batch and the cursor that follows it are written in one
//! transaction (`Store::apply_extraction`). A job killed before that commit re-runs from the
//! old cursor; one killed after it re-runs, finds nothing new after the cursor, and stops.

use std::time::Instant;

use super::cursor::{cursor_of, resume_index};
use super::parse::{self, Candidate};
use super::persist::{self, Origin};
use super::pii::{self, Filtered};
use super::policy::{ExtractionMode, MemoryPolicy};
use super::prompts::{self, transcript};
use super::stage::staged;
use super::summary::SUMMARY_EVERY;
use crate::error::{Error, JobError};
use crate::llm::{ChatMessage, ChatRequest, ChatRole, Tier};
use crate::metrics::ExtractionReport;
use crate::model::{
    AgentId, ConversationId, Job, Message, MessageRole, TenantId, UserId, actor_name_system,
    default_pool,
};
use crate::services::Services;
use crate::store::{ExtractionBatch, MemoryFilter};

/// Messages given to the extractor at most per batch (seed 000: the last fifteen).
pub const WINDOW: usize = 15;

/// The conversation a window belongs to, and what its facts are written as.
struct Scope<'a> {
    tenant: &'a TenantId,
    conversation: &'a ConversationId,
    user: &'a UserId,
    agent: Option<&'a AgentId>,
    pool: Option<&'a str>,
    policy: &'a MemoryPolicy,
}

/// How many times a window is judged again after the store refused its decision for a
/// racing write of another process.
const RACES: usize = 3;

impl Services {
    /// Extraction: everything after the cursor, in windows of [`WINDOW`] messages.
    #[tracing::instrument(skip_all, fields(job = %job.id, tenant = %job.tenant_id))]
    pub async fn run_extract(&self, job: &Job) -> Result<ExtractionReport, JobError> {
        let tenant = &job.tenant_id;
        let conv = super::job_conversation(job)?;
        let mut report = ExtractionReport::default();
        let Some((user, agent_id)) = self.store().conversation_owner(tenant, &conv).await? else {
            return Ok(report); // erased meanwhile
        };
        let agent = match &agent_id {
            Some(a) => self.store().get_agent(tenant, a).await?,
            None => None,
        };
        let policy = MemoryPolicy::of(agent.as_ref(), self.config().dedup_threshold);
        if !policy.memory_enabled || policy.mode == ExtractionMode::Off {
            return Ok(report);
        }
        let pool = match (&agent, &agent_id) {
            (Some(a), _) => Some(a.pool()),
            (None, Some(a)) => Some(default_pool(a)),
            (None, None) => None,
        };
        let messages = self.store().conversation_messages(tenant, &conv).await?;
        // What no leaf of the summary DAG covers yet (`super::compact` never summarizes past
        // the cursor, so a cursor not found here means all of it is new).
        let summarized = match self.store().get_conversation(tenant, &conv).await? {
            Some(info) => info.summarized_seq,
            None => return Ok(report), // erased meanwhile
        };
        let live = messages.iter().position(|m| m.seq > summarized).unwrap_or(messages.len());
        let cursor = self.store().extraction_cursor(tenant, &conv).await?;
        let start = live + resume_index(&messages[live..], cursor.as_deref());
        let scope = Scope {
            tenant,
            conversation: &conv,
            user: &user,
            agent: agent_id.as_ref(),
            pool: pool.as_deref(),
            policy: &policy,
        };
        for window in messages[start..].chunks(WINDOW) {
            self.extract_window(&scope, window, &mut report).await?;
            report.batches += 1;
        }
        // Refresh the rolling summary every SUMMARY_EVERY user turns.
        let user_turns = messages.iter().filter(|m| m.role == MessageRole::User).count() as i64;
        let (_, covered) = self.store().rolling_summary(tenant, &conv).await?;
        if user_turns - covered >= SUMMARY_EVERY {
            self.enqueue_summary(tenant, &user, &conv).await?;
        }
        // What extraction has processed may now be compacted.
        let unsummarized = messages.last().map_or(0, |m| m.seq) - summarized;
        if policy.compaction_threshold > 0 && unsummarized > policy.compaction_threshold {
            self.enqueue_compaction(tenant, &user, &conv).await?;
        }
        self.metrics().observe_extraction(&report);
        Ok(report)
    }

    async fn extract_window(
        &self,
        s: &Scope<'_>,
        window: &[Message],
        report: &mut ExtractionReport,
    ) -> Result<(), JobError> {
        let Some(last) = window.last() else { return Ok(()) };
        let cursor = cursor_of(last);
        let has_user_text =
            window.iter().any(|m| m.role == MessageRole::User && !m.content.trim().is_empty());
        if !has_user_text {
            // Nothing the user said: no LLM call, just move the cursor.
            return self.advance(s, cursor).await;
        }
        // ---- pass 1: extract
        let t = Instant::now();
        let candidates = self.candidates(s, window, report).await?;
        self.metrics().observe_stage("extract", t.elapsed(), true);
        // ---- PII
        let mut kept: Vec<Candidate> = Vec::new();
        for mut c in candidates {
            match pii::filter(&c.content, s.policy.pii) {
                Filtered::Keep { text, .. } => {
                    c.content = text;
                    kept.push(c);
                }
                Filtered::Rejected(_) => report.rejected_pii += 1,
            }
        }
        if kept.is_empty() {
            return self.advance(s, cursor).await;
        }
        // ---- embed
        let t = Instant::now();
        let texts: Vec<String> = kept.iter().map(|c| c.content.clone()).collect();
        let vectors = staged("embed", async {
            self.embedder().embed_background(&texts).await.map_err(|e| JobError {
                fault: e.fault,
                message: e.message,
                retry_after: None,
            })
        })
        .await?;
        self.ensure_space().await?;
        self.metrics().observe_stage("embed", t.elapsed(), true);
        // ---- pass 2: consolidate, then persist (one transaction, cursor included). One
        // consolidation of the user at a time in this process; across processes the store
        // refuses a fact added twice or a fact superseded twice (`Conflict`), and the window
        // is judged again against what it now holds.
        let _user = self.consolidating.of(s.tenant, s.user).lock().await;
        let mut attempt = 0;
        loop {
            let mut tried = report.clone();
            let t = Instant::now();
            let filter = MemoryFilter {
                user_id: Some(s.user.clone()),
                pool: s.pool.map(str::to_string),
                ..Default::default()
            };
            let decision =
                self.judge(s.tenant, &filter, s.policy, &kept, &vectors, &mut tried).await?;
            let origin = Origin {
                tenant: s.tenant,
                user: s.user,
                agent: s.agent,
                pool: s.pool,
                conversation: s.conversation,
                messages: window.iter().map(|m| m.id).collect(),
                observed_at: last.created_at,
                model: self.embedder().model_id(),
                actor: actor_name_system(),
                now: crate::model::now(),
            };
            let batch =
                persist::batch(&origin, cursor.clone(), decision, &kept, &vectors, &mut tried);
            self.metrics().observe_stage("consolidate", t.elapsed(), true);
            match self.persist(s.tenant, s.conversation, s.user, batch).await {
                Err(Error::Conflict(_)) if attempt < RACES => attempt += 1,
                done => {
                    *report = tried;
                    return done.map_err(JobError::from);
                }
            }
        }
    }

    /// Move the cursor past a window that gave nothing to remember.
    async fn advance(&self, s: &Scope<'_>, cursor: String) -> Result<(), JobError> {
        let batch = ExtractionBatch { cursor, ..Default::default() };
        self.store().apply_extraction(s.tenant, s.conversation, s.user, batch).await?;
        Ok(())
    }

    /// Pass 1: the candidate facts of a window, the rolling summary given as context.
    async fn candidates(
        &self,
        s: &Scope<'_>,
        window: &[Message],
        report: &mut ExtractionReport,
    ) -> Result<Vec<Candidate>, JobError> {
        let observed_at = window.last().map_or_else(crate::model::now, |m| m.created_at);
        let (summary, _) = self.store().rolling_summary(s.tenant, s.conversation).await?;
        let mut input = String::new();
        if let Some(sum) = summary.filter(|sum| !sum.trim().is_empty()) {
            input.push_str("Conversation summary so far:\n");
            input.push_str(sum.trim());
            input.push_str("\n\n");
        }
        input.push_str("Conversation:\n");
        input.push_str(&transcript(window));
        let req = ChatRequest {
            tier: Tier::Fast,
            model: s.policy.fast_model.clone(),
            system: prompts::extraction(s.policy.prompt.as_deref(), observed_at.date()),
            messages: vec![ChatMessage { role: ChatRole::User, content: input }],
            max_tokens: s.policy.max_tokens,
            json: true,
            temperature: 0.0,
        };
        staged("extract", async {
            let answer = self.call(req, "extract", report).await?;
            parse::parse_candidates(&answer).map_err(JobError::runtime)
        })
        .await
    }
}
