//! The compactor (seed 004, v5 rules): a conversation's old messages become a summary DAG.
//!
//! When a conversation holds more unsummarized messages than its agent's threshold
//! (`settings.compaction.threshold`, [`super::policy::DEFAULT_COMPACTION_THRESHOLD`]), the
//! `compact` job summarizes the oldest [`LEAF_MESSAGES`] into a **leaf**, again until the
//! threshold is met; then every [`FAN_IN`] leaves no summary covers yet become a **branch**,
//! every [`FAN_IN`] branches a **root** (and so on up, roots over roots). Each summary links
//! its sources in order (messages for a leaf, summaries one level down otherwise) and keeps
//! `earliest_at`/`latest_at`/`message_count`/`depth`/`model`; it is embedded and
//! keyword-indexed when written.
//!
//! **What the LLM sees and keeps.** A leaf's input is one line per message,
//! `[#01 2026-04-18T12:00Z agent/role] text` (ISO-minute timestamps and speakers; tool calls
//! through their synthesized sentence, or what was called while it has none); the prompts
//! ([`super::prompts::COMPACT_RULES`]) ask for every distinct topic, nothing invented,
//! identifiers verbatim, timestamps and speakers kept and relative dates resolved. The stored
//! text starts with a [`header`] giving the span in words and ISO minutes, so a keyword
//! search for the date finds it whatever the LLM wrote.
//!
//! **Exactly once.** A summary is written with a claim checked in its transaction
//! (`SummaryClaim`): a leaf moves the conversation's `summarized_seq` from the value the job
//! read, a parent takes children that have no parent. A job killed after its LLM call and
//! before the commit re-runs and writes the summary then; one killed after the commit re-runs
//! and finds the claim taken. No summary is ever written twice.
//!
//! **Extraction first.** With extraction on, only messages extraction has processed (up to
//! its cursor) are summarized. Extraction reads the messages no leaf covers yet; a cursor
//! whose message a leaf now covers is not found among them ([`super::cursor`]), which means
//! "everything here is new" — true, because nothing past the cursor was summarized.
//!
//! With no LLM configured the job waits in the queue like every LLM job: nothing is
//! compacted, and `/v1/stats` says so.

use std::time::Instant;

use time::{OffsetDateTime, UtcOffset};

use super::cursor::cursor_seq;
use super::policy::{ExtractionMode, MemoryPolicy};
use super::prompts::{self, message_text};
use super::stage::staged;
use crate::error::{Error, JobError};
use crate::llm::{ChatMessage, ChatRequest, ChatRole, Tier};
use crate::metrics::ExtractionReport;
use crate::model::{
    ConversationId, Job, Message, Summary, SummaryId, SummaryKind, TenantId, UserId, now,
};
use crate::services::Services;
use crate::store::{ConversationInfo, NewSummary, SummaryClaim};

/// Messages summarized into one leaf.
pub const LEAF_MESSAGES: usize = 20;

/// Summaries of one level merged into one of the next.
pub const FAN_IN: usize = 4;

/// The deepest level the compactor writes (a root over roots over …).
const MAX_DEPTH: i64 = 6;

/// Output budget of one summary, per level (seed 004 v5: 7k / 14k / 20k for a thinking
/// model; these are for the summary itself).
fn max_tokens(depth: i64) -> u32 {
    match depth {
        0 => 1_500,
        1 => 2_500,
        _ => 3_500,
    }
}

/// `2026-04-18T12:00Z`.
pub fn iso_minute(t: OffsetDateTime) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    )
}

/// `18 April 2026`.
fn day_in_words(t: OffsetDateTime) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    format!("{} {} {}", t.day(), t.month(), t.year())
}

/// The first line of a stored summary: its level and span, in words and ISO minutes.
pub fn header(
    kind: SummaryKind,
    earliest: OffsetDateTime,
    latest: OffsetDateTime,
    n: i64,
) -> String {
    let (a, b) = (day_in_words(earliest), day_in_words(latest));
    let days = if a == b { a } else { format!("{a} to {b}") };
    let unit = if n == 1 { "message" } else { "messages" };
    format!(
        "[{kind} summary, {days}, {} to {}, {n} {unit}]",
        iso_minute(earliest),
        iso_minute(latest)
    )
}

/// A leaf's input: one line per message with its number, ISO minute, agent and role.
pub fn leaf_input(messages: &[Message]) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let text = message_text(m);
        if text.is_empty() {
            continue;
        }
        let agent = m.agent_id.as_ref().map_or("-", |a| a.as_str());
        out.push_str(&format!(
            "[#{:02} {} {agent}/{}] {text}\n",
            i + 1,
            iso_minute(m.created_at),
            m.role.as_str()
        ));
    }
    out
}

/// A parent's input: the children in order, each headed by its span.
pub fn parent_input(children: &[Summary]) -> String {
    children
        .iter()
        .map(|c| {
            format!(
                "--- {} to {} ({} messages)\n{}\n",
                iso_minute(c.earliest_at),
                iso_minute(c.latest_at),
                c.message_count,
                c.content
            )
        })
        .collect()
}

/// The system prompt of a level.
fn system_prompt(depth: i64) -> String {
    let task = match SummaryKind::at_depth(depth) {
        SummaryKind::Leaf => prompts::COMPACT_LEAF,
        SummaryKind::Branch => prompts::COMPACT_BRANCH,
        SummaryKind::Root => prompts::COMPACT_ROOT,
    };
    format!("{}\n{}", task.trim(), prompts::COMPACT_RULES.trim())
}

/// What one compaction run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactionReport {
    /// Summaries written, per depth.
    pub written: Vec<(i64, usize)>,
    pub llm: ExtractionReport,
}

impl CompactionReport {
    fn wrote(&mut self, depth: i64) {
        match self.written.iter_mut().find(|(d, _)| *d == depth) {
            Some((_, n)) => *n += 1,
            None => self.written.push((depth, 1)),
        }
    }
}

/// The conversation being compacted.
struct Target<'a> {
    tenant: &'a TenantId,
    conversation: &'a ConversationId,
    user: &'a UserId,
    policy: &'a MemoryPolicy,
}

impl Services {
    /// Enqueue a compaction of a conversation (one pending per conversation).
    pub async fn enqueue_compaction(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conversation: &ConversationId,
    ) -> Result<(), Error> {
        self.store().enqueue_job(&Job::compact(tenant, user, conversation)).await.map(|_| ())
    }

    /// The `compact` job: leaves while the conversation is over its threshold, then parents
    /// wherever a level has [`FAN_IN`] summaries no parent covers.
    #[tracing::instrument(skip_all, fields(job = %job.id, tenant = %job.tenant_id))]
    pub async fn run_compact(&self, job: &Job) -> Result<CompactionReport, JobError> {
        let tenant = &job.tenant_id;
        let conversation = super::job_conversation(job)?;
        let mut report = CompactionReport::default();
        let Some(info) = self.store().get_conversation(tenant, &conversation).await? else {
            return Ok(report); // erased meanwhile
        };
        let policy = self.agent_policy(tenant, info.agent_id.as_ref()).await?;
        if !policy.memory_enabled || policy.compaction_threshold == 0 {
            return Ok(report);
        }
        let t =
            Target { tenant, conversation: &conversation, user: &info.user_id, policy: &policy };
        let started = Instant::now();
        self.compact_leaves(&t, &info, &mut report).await?;
        for depth in 0..MAX_DEPTH {
            self.compact_level(&t, depth, &mut report).await?;
        }
        self.metrics().observe_stage("compact", started.elapsed(), true);
        Ok(report)
    }

    /// Leaves of [`LEAF_MESSAGES`] oldest messages while more than the threshold are
    /// unsummarized (and, with extraction on, already extracted).
    async fn compact_leaves(
        &self,
        t: &Target<'_>,
        info: &ConversationInfo,
        report: &mut CompactionReport,
    ) -> Result<(), JobError> {
        let extracting = t.policy.mode != ExtractionMode::Off;
        let ceiling = if extracting {
            let cursor = self.store().extraction_cursor(t.tenant, t.conversation).await?;
            cursor.as_deref().and_then(cursor_seq).unwrap_or(0)
        } else {
            info.messages
        };
        let mut after = info.summarized_seq;
        let mut lost = 0;
        while info.messages - after > t.policy.compaction_threshold
            && ceiling - after >= LEAF_MESSAGES as i64
        {
            let messages =
                self.store().list_messages(t.tenant, t.conversation, after, LEAF_MESSAGES).await?;
            let (Some(first), Some(last)) = (messages.first(), messages.last()) else { break };
            let (earliest, latest) = (first.created_at, last.created_at);
            let n = messages.len() as i64;
            let body = self.summarize(t, 0, leaf_input(&messages), &mut report.llm).await?;
            let summary =
                self.new_summary(t, 0, n, earliest.min(latest), latest.max(earliest), &body);
            let sources = messages.iter().map(|m| m.id.0).collect();
            let claim = SummaryClaim::Messages { after_seq: after, through_seq: last.seq };
            if self.write_summary(t.tenant, summary, sources, claim).await? {
                report.wrote(0);
                after = last.seq;
            } else {
                // Another run wrote this leaf: start from where it left the conversation.
                lost += 1;
                if lost > 3 {
                    return Err(JobError::runtime("compaction keeps losing its claim"));
                }
                let now = self.store().get_conversation(t.tenant, t.conversation).await?;
                let Some(now) = now else { return Ok(()) };
                after = now.summarized_seq;
            }
        }
        Ok(())
    }

    /// Parents of depth `depth + 1` over every [`FAN_IN`] summaries of `depth` that no parent
    /// covers yet, oldest first.
    async fn compact_level(
        &self,
        t: &Target<'_>,
        depth: i64,
        report: &mut CompactionReport,
    ) -> Result<(), JobError> {
        let mut lost = 0;
        loop {
            let open = self
                .store()
                .conversation_summaries(t.tenant, t.conversation, Some(depth), true)
                .await?;
            if open.len() < FAN_IN {
                return Ok(());
            }
            let children = &open[..FAN_IN];
            let earliest = children.iter().map(|c| c.earliest_at).min().unwrap_or_else(now);
            let latest = children.iter().map(|c| c.latest_at).max().unwrap_or_else(now);
            let n = children.iter().map(|c| c.message_count).sum();
            let body =
                self.summarize(t, depth + 1, parent_input(children), &mut report.llm).await?;
            let summary = self.new_summary(t, depth + 1, n, earliest, latest, &body);
            let sources = children.iter().map(|c| c.id.0).collect();
            if self.write_summary(t.tenant, summary, sources, SummaryClaim::Children).await? {
                report.wrote(depth + 1);
            } else {
                lost += 1;
                if lost > 3 {
                    return Err(JobError::runtime("compaction keeps losing its claim"));
                }
            }
        }
    }

    /// One summary from the main-tier LLM.
    async fn summarize(
        &self,
        t: &Target<'_>,
        depth: i64,
        input: String,
        report: &mut ExtractionReport,
    ) -> Result<String, JobError> {
        let req = ChatRequest {
            tier: Tier::Main,
            model: t.policy.model.clone(),
            system: system_prompt(depth),
            messages: vec![ChatMessage { role: ChatRole::User, content: input }],
            max_tokens: max_tokens(depth),
            json: false,
            temperature: 0.0,
        };
        let text = staged("summary", self.call(req, "compact", report)).await?;
        let text = text.trim();
        if text.is_empty() {
            return Err(JobError::runtime("the LLM returned an empty summary"));
        }
        Ok(text.to_string())
    }

    fn new_summary(
        &self,
        t: &Target<'_>,
        depth: i64,
        message_count: i64,
        earliest_at: OffsetDateTime,
        latest_at: OffsetDateTime,
        body: &str,
    ) -> Summary {
        let kind = SummaryKind::at_depth(depth);
        let model = t.policy.model.clone().or_else(|| self.llm().map(|l| l.model(Tier::Main)));
        Summary {
            id: SummaryId::new(),
            tenant_id: t.tenant.clone(),
            user_id: t.user.clone(),
            conversation_id: t.conversation.clone(),
            parent_id: None,
            depth,
            kind,
            content: format!("{}\n{body}", header(kind, earliest_at, latest_at, message_count)),
            message_count,
            earliest_at,
            latest_at,
            model,
            created_at: now(),
            access_count: 0,
            last_accessed_at: None,
        }
    }

    /// Embed and write a summary under its claim; false when the claim was taken.
    async fn write_summary(
        &self,
        tenant: &TenantId,
        summary: Summary,
        sources: Vec<uuid::Uuid>,
        claim: SummaryClaim,
    ) -> Result<bool, JobError> {
        let e = self.embedder();
        self.store().ensure_embedding_space(e.model_id(), e.dims()).await?;
        let vector = e
            .embed_background(std::slice::from_ref(&summary.content))
            .await
            .map_err(Error::from)?
            .pop();
        let embedding = match vector {
            Some(v) if v.len() == e.dims() => Some((e.model_id().to_string(), v)),
            _ => return Err(JobError::runtime("the embedder returned no vector for a summary")),
        };
        let new = NewSummary { summary, sources, embedding, claim };
        Ok(self.store().insert_summary(tenant, new).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MessageRole;
    use time::macros::datetime;

    #[test]
    fn leaf_lines_keep_minutes_speakers_and_tool_calls() {
        let mut a = Message::sample(MessageRole::User, "I moved to Porto yesterday.");
        a.created_at = datetime!(2023-05-08 13:56:30 UTC);
        let mut b = Message::sample(MessageRole::Assistant, "");
        b.created_at = datetime!(2023-05-08 13:57 +02:00);
        b.tool_name = Some("weather".into());
        b.tool_args = Some(serde_json::json!({ "city": "Porto" }));
        let empty = Message::sample(MessageRole::Assistant, "  ");
        assert_eq!(
            leaf_input(&[a, b, empty]),
            "[#01 2023-05-08T13:56Z -/user] I moved to Porto yesterday.\n\
             [#02 2023-05-08T11:57Z -/assistant] [called weather {\"city\":\"Porto\"}]\n"
        );
    }

    #[test]
    fn headers_name_the_span_in_words_and_minutes() {
        let (a, b) = (datetime!(2023-05-08 13:56 UTC), datetime!(2023-05-09 09:01 UTC));
        assert_eq!(
            header(SummaryKind::Branch, a, b, 80),
            "[branch summary, 8 May 2023 to 9 May 2023, 2023-05-08T13:56Z to 2023-05-09T09:01Z, 80 messages]"
        );
        assert_eq!(
            header(SummaryKind::Leaf, a, a, 1),
            "[leaf summary, 8 May 2023, 2023-05-08T13:56Z to 2023-05-08T13:56Z, 1 message]"
        );
        assert_eq!(SummaryKind::at_depth(0), SummaryKind::Leaf);
        assert_eq!(SummaryKind::at_depth(1), SummaryKind::Branch);
        assert_eq!(SummaryKind::at_depth(4), SummaryKind::Root);
    }

    #[test]
    fn every_level_gets_the_shared_rules() {
        for d in 0..3 {
            let p = system_prompt(d);
            assert!(p.contains("Keep identifiers verbatim"), "{p}");
            assert!(p.contains("ISO-minute"), "{p}");
        }
        assert!(system_prompt(0).contains("stretch of a conversation"));
        assert!(system_prompt(2).contains("overview"));
    }
}
