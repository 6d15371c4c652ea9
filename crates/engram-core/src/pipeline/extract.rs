//! Job handlers of the memory pipeline: extraction (cursor → pass 1 → PII → embed → pass 2 →
//! persist), rolling summaries and tool-call synthesis.
//!
//! Exactly-once: an extraction batch and the cursor that follows it are written in one
//! transaction (`Store::apply_extraction`). A job killed before that commit re-runs from the
//! old cursor; one killed after it re-runs, finds nothing new after the cursor, and stops.

use std::collections::HashMap;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::consolidate;
use super::parse::{self, Candidate, Judgement};
use super::pii::{self, Filtered, PiiPolicy};
use super::prompts;
use crate::dedup::same_fact;
use crate::error::JobError;
use crate::error::{Error, FaultSource};
use crate::llm::{ChatMessage, ChatRequest, ChatRole, Tier};
pub use crate::metrics::ExtractionReport;
use crate::model::{
    Agent, ConversationId, EventKind, Job, JobKind, Kind, Memory, MemoryEvent, MemoryId, Message,
    MessageRole, Source, SourceKind, TenantId, UserId, actor_name_system, default_pool,
};
use crate::services::Services;
use crate::store::{ExtractionBatch, MemoryFilter, NewMemory};

/// Messages given to the extractor at most per batch (seed 000: the last fifteen).
pub const WINDOW: usize = 15;
/// Cosine similarity below which an existing fact is unrelated to a candidate: the candidate
/// is added without asking the LLM (pass 2 only judges candidates with related facts).
/// all-MiniLM-L6-v2 puts paraphrases and updates of one fact ("uses Postgres" / "switched to
/// SQLite") above 0.5 and facts about different things ("plays the cello" / "is allergic to
/// shellfish") around 0.1–0.3.
pub const RELATED: f32 = 0.5;

/// A rolling summary is regenerated after this many new user turns.
pub const SUMMARY_EVERY: i64 = 10;

/// When an agent's conversations are extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtractionMode {
    /// After every appended turn.
    PostTurn,
    /// After `min_turns` user turns since the last extraction, or when a reply is rated.
    Batched {
        min_turns: i64,
    },
    Off,
}

/// An agent's memory settings, read from its `settings` JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPolicy {
    pub memory_enabled: bool,
    pub mode: ExtractionMode,
    pub max_tokens: u32,
    pub prompt: Option<String>,
    pub pii: PiiPolicy,
    pub dedup_threshold: f32,
    /// Per-agent models (`settings.llm.model` / `settings.llm.fast_model`); None: the
    /// process-wide ones.
    pub model: Option<String>,
    pub fast_model: Option<String>,
}

impl MemoryPolicy {
    /// Parse and validate `settings` (`{"extraction": {"mode", "min_turns",
    /// "max_tokens_per_extraction", "prompt"}, "pii_policy"}`).
    pub fn from_settings(
        memory_enabled: bool,
        dedup_threshold: f32,
        settings: &serde_json::Value,
    ) -> Result<Self, Error> {
        let ex = settings.get("extraction").cloned().unwrap_or(serde_json::Value::Null);
        if !ex.is_null() && !ex.is_object() {
            return Err(Error::invalid(
                "settings.extraction",
                "settings.extraction must be an object",
            ));
        }
        let mode = match ex.get("mode").and_then(|v| v.as_str()).unwrap_or("post-turn") {
            "post-turn" => ExtractionMode::PostTurn,
            "batched" => {
                let n = ex.get("min_turns").and_then(serde_json::Value::as_i64).unwrap_or(3);
                if !(1..=1000).contains(&n) {
                    return Err(Error::invalid(
                        "settings.extraction.min_turns",
                        "min_turns must be 1 to 1000",
                    ));
                }
                ExtractionMode::Batched { min_turns: n }
            }
            "off" => ExtractionMode::Off,
            other => {
                return Err(Error::invalid(
                    "settings.extraction.mode",
                    format!(
                        "unknown extraction mode '{other}'; expected post-turn, batched or off"
                    ),
                ));
            }
        };
        let max_tokens =
            ex.get("max_tokens_per_extraction").and_then(serde_json::Value::as_u64).unwrap_or(1024);
        if !(64..=32_000).contains(&max_tokens) {
            return Err(Error::invalid(
                "settings.extraction.max_tokens_per_extraction",
                "max_tokens_per_extraction must be 64 to 32000",
            ));
        }
        let prompt = match ex.get("prompt") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(_) => {
                return Err(Error::invalid(
                    "settings.extraction.prompt",
                    "prompt must be a non-empty string or null",
                ));
            }
        };
        let pii = match settings.get("pii_policy") {
            None | Some(serde_json::Value::Null) => PiiPolicy::default(),
            Some(v) => v.as_str().and_then(PiiPolicy::parse).ok_or_else(|| {
                Error::invalid("settings.pii_policy", "pii_policy must be allow, redact or reject")
            })?,
        };
        let llm = settings.get("llm").cloned().unwrap_or(serde_json::Value::Null);
        if !llm.is_null() && !llm.is_object() {
            return Err(Error::invalid("settings.llm", "settings.llm must be an object"));
        }
        let name = |k: &str| -> Result<Option<String>, Error> {
            match llm.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) if !s.trim().is_empty() => {
                    Ok(Some(s.trim().to_string()))
                }
                Some(_) => Err(Error::invalid(
                    format!("settings.llm.{k}"),
                    format!("settings.llm.{k} must be a model name"),
                )),
            }
        };
        let model = name("model")?;
        let fast_model = name("fast_model")?;
        Ok(MemoryPolicy {
            memory_enabled,
            mode,
            max_tokens: max_tokens as u32,
            prompt,
            pii,
            dedup_threshold,
            model,
            fast_model,
        })
    }

    /// The policy of an agent (defaults for no agent or an agent without settings).
    pub fn of(agent: Option<&Agent>, default_threshold: f32) -> Self {
        match agent {
            Some(a) => Self::from_settings(a.memory_enabled, a.dedup_threshold, &a.settings)
                .unwrap_or_else(|_| {
                    Self::from_settings(a.memory_enabled, a.dedup_threshold, &serde_json::json!({}))
                        .expect("defaults parse")
                }),
            None => Self::from_settings(true, default_threshold, &serde_json::json!({}))
                .expect("defaults parse"),
        }
    }
}

/// `sha256(role + ":" + content)`: the content-hash cursor of a message.
pub fn message_hash(m: &Message) -> String {
    hex::encode(Sha256::digest(format!("{}:{}", m.role.as_str(), m.content).as_bytes()))
}

/// The cursor stored after a batch: `<seq>:<content hash>` of the last processed message.
/// The sequence number tells apart messages with the same text (a repeated "Noted, thanks!"
/// would otherwise make every later turn look already processed); the hash proves the
/// message at that position is still the one that was processed.
pub fn cursor_of(m: &Message) -> String {
    format!("{}:{}", m.seq, message_hash(m))
}

/// Where extraction resumes: after the cursor message; from the start when there is no
/// cursor, or when the cursor message is gone (the conversation was summarized).
pub fn resume_index(messages: &[Message], cursor: Option<&str>) -> usize {
    let Some(c) = cursor else { return 0 };
    let (seq, hash) = match c.split_once(':') {
        Some((s, h)) => (s.parse::<i64>().ok(), h),
        None => (None, c),
    };
    if let Some(seq) = seq
        && let Some(i) = messages.iter().position(|m| m.seq == seq)
        && message_hash(&messages[i]) == hash
    {
        return i + 1;
    }
    // The message moved or is gone: find its content; not found → summarized → everything.
    messages.iter().rposition(|m| message_hash(m) == hash).map_or(0, |i| i + 1)
}

/// `User:` / `Assistant:` lines for the extractor.
pub fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            MessageRole::User => "User",
            MessageRole::Assistant => "Assistant",
            MessageRole::System => "System",
            MessageRole::Tool => "Tool",
        };
        let mut text = m.content.trim().to_string();
        if let Some(tool) = &m.tool_name {
            let args = m.tool_args.as_ref().map(ToString::to_string).unwrap_or_default();
            text = format!("[called {tool} {args}] {text}").trim().to_string();
            if let Some(r) = &m.tool_result {
                text.push_str(&format!(" → {r}"));
            }
        }
        if text.is_empty() {
            continue;
        }
        out.push_str(&format!("{who}: {text}\n"));
    }
    out
}

/// Run a stage inside a tracing span named after it, recording its outcome (with
/// `FmtSpan::CLOSE` the span's close line carries its duration).
async fn staged<T, E>(
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
    async fn call(
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

    /// Run one job.
    pub async fn run_job(&self, job: &Job) -> Result<(), JobError> {
        match job.kind {
            JobKind::Extract => self.run_extract(job).await.map(|_| ()),
            JobKind::Summarize => self.run_summarize(job).await,
            JobKind::SynthesizeToolCall => self.run_tool_synthesis(job).await,
            JobKind::EmbedMessages => self.run_embed_messages(job).await,
        }
    }

    async fn agent_policy(
        &self,
        tenant: &TenantId,
        agent: Option<&crate::model::AgentId>,
    ) -> Result<MemoryPolicy, JobError> {
        let row = match agent {
            Some(a) => self.store().get_agent(tenant, a).await?,
            None => None,
        };
        Ok(MemoryPolicy::of(row.as_ref(), self.config().dedup_threshold))
    }

    fn job_conversation(job: &Job) -> Result<ConversationId, JobError> {
        let c = job.payload.get("conversation_id").and_then(|v| v.as_str()).unwrap_or_default();
        ConversationId::parse(c)
            .map_err(|e| JobError::bug(format!("job {} has no valid conversation_id: {e}", job.id)))
    }

    /// Extraction: everything after the cursor, in windows of [`WINDOW`] messages.
    #[tracing::instrument(skip_all, fields(job = %job.id, tenant = %job.tenant_id))]
    pub async fn run_extract(&self, job: &Job) -> Result<ExtractionReport, JobError> {
        let tenant = &job.tenant_id;
        let conv = Self::job_conversation(job)?;
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
        let cursor = self.store().extraction_cursor(tenant, &conv).await?;
        let start = resume_index(&messages, cursor.as_deref());
        let new = &messages[start..];
        for window in new.chunks(WINDOW) {
            self.extract_window(
                tenant,
                &conv,
                &user,
                agent_id.as_ref(),
                pool.as_deref(),
                &policy,
                window,
                &mut report,
            )
            .await?;
            report.batches += 1;
        }
        // Refresh the rolling summary every SUMMARY_EVERY user turns.
        let user_turns = messages.iter().filter(|m| m.role == MessageRole::User).count() as i64;
        let (_, covered) = self.store().rolling_summary(tenant, &conv).await?;
        if user_turns - covered >= SUMMARY_EVERY {
            self.enqueue_summary(tenant, &user, &conv).await?;
        }
        self.metrics().observe_extraction(&report);
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    async fn extract_window(
        &self,
        tenant: &TenantId,
        conv: &ConversationId,
        user: &UserId,
        agent_id: Option<&crate::model::AgentId>,
        pool: Option<&str>,
        policy: &MemoryPolicy,
        window: &[Message],
        report: &mut ExtractionReport,
    ) -> Result<(), JobError> {
        let Some(last) = window.last() else { return Ok(()) };
        let cursor = cursor_of(last);
        let has_user_text =
            window.iter().any(|m| m.role == MessageRole::User && !m.content.trim().is_empty());
        if !has_user_text {
            // Nothing the user said: no LLM call, just move the cursor.
            self.store()
                .apply_extraction(
                    tenant,
                    conv,
                    user,
                    ExtractionBatch { cursor, ..Default::default() },
                )
                .await?;
            return Ok(());
        }
        let observed_at = last.created_at;
        // ---- pass 1: extract
        let t = Instant::now();
        let (summary, _) = self.store().rolling_summary(tenant, conv).await?;
        let mut input = String::new();
        if let Some(s) = summary.filter(|s| !s.trim().is_empty()) {
            input.push_str("Conversation summary so far:\n");
            input.push_str(s.trim());
            input.push_str("\n\n");
        }
        input.push_str("Conversation:\n");
        input.push_str(&transcript(window));
        let req = ChatRequest {
            tier: Tier::Fast,
            model: policy.fast_model.clone(),
            system: prompts::extraction(policy.prompt.as_deref(), observed_at.date()),
            messages: vec![ChatMessage { role: ChatRole::User, content: input }],
            max_tokens: policy.max_tokens,
            json: true,
            temperature: 0.0,
        };
        let candidates = staged("extract", async {
            let answer = self.call(req, "extract", report).await?;
            parse::parse_candidates(&answer).map_err(JobError::runtime)
        })
        .await?;
        self.metrics().observe_stage("extract", t.elapsed(), true);
        // ---- PII
        let mut kept: Vec<Candidate> = Vec::new();
        for mut c in candidates {
            match pii::filter(&c.content, policy.pii) {
                Filtered::Keep { text, .. } => {
                    c.content = text;
                    kept.push(c);
                }
                Filtered::Rejected(_) => report.rejected_pii += 1,
            }
        }
        if kept.is_empty() {
            self.store()
                .apply_extraction(
                    tenant,
                    conv,
                    user,
                    ExtractionBatch { cursor, ..Default::default() },
                )
                .await?;
            return Ok(());
        }
        // ---- embed
        let t = Instant::now();
        let texts: Vec<String> = kept.iter().map(|c| c.content.clone()).collect();
        let vectors = staged("embed", async {
            self.embedder().embed(&texts).await.map_err(|e| JobError {
                fault: e.fault,
                message: e.message,
                retry_after: None,
            })
        })
        .await?;
        self.ensure_space().await?;
        self.metrics().observe_stage("embed", t.elapsed(), true);
        // ---- pass 2: consolidate
        let t = Instant::now();
        let filter = MemoryFilter {
            user_id: Some(user.clone()),
            pool: pool.map(str::to_string),
            ..Default::default()
        };
        let now = crate::model::now();
        let actor = actor_name_system();
        let message_ids: Vec<_> = window.iter().map(|m| m.id).collect();
        let new_memory = |c: &Candidate| Memory {
            id: MemoryId::new(),
            tenant_id: tenant.clone(),
            user_id: user.clone(),
            agent_id: agent_id.cloned(),
            pool: pool.map(str::to_string),
            kind: Kind::Knowledge,
            key: None,
            category: c.category,
            importance: c.importance,
            rating: 0,
            content: c.content.clone(),
            source: Source {
                kind: SourceKind::Conversation,
                conversation_id: Some(conv.clone()),
                message_ids: message_ids.clone(),
            },
            observed_at,
            created_at: now,
            updated_at: now,
            last_accessed_at: None,
            access_count: 0,
            mention_count: 1,
            expires_at: None,
            superseded_at: None,
            superseded_by: None,
            metadata: serde_json::json!({}),
            embedding_model: Some(self.embedder().model_id().to_string()),
        };
        let event = |id: MemoryId, kind: EventKind, related: Option<MemoryId>| MemoryEvent {
            memory_id: id,
            event: kind,
            related_id: related,
            actor: actor.clone(),
            detail: serde_json::json!({ "conversation_id": conv.as_str() }),
            at: now,
        };
        let mut batch = ExtractionBatch { cursor, ..Default::default() };
        // Candidates that need the LLM: (candidate index, neighbour ids).
        let mut to_judge: Vec<(usize, Vec<(MemoryId, String)>)> = Vec::new();
        let mut accepted: Vec<usize> = Vec::new();
        for (i, v) in vectors.iter().enumerate() {
            // A repeat inside the batch: similar and the same words (crate::dedup).
            if accepted.iter().any(|&j| {
                crate::embed::dot(&vectors[j], v) >= policy.dedup_threshold
                    && same_fact(&kept[j].content, &kept[i].content)
            }) {
                continue;
            }
            let hits = self.store().vector_search(tenant, &filter, v, 5).await?;
            // Nothing related enough to be updated or contradicted: ADD without asking.
            if hits.first().is_none_or(|(_, sim)| *sim < RELATED) {
                accepted.push(i);
                continue;
            }
            let ids: Vec<MemoryId> =
                hits.iter().filter(|(_, sim)| *sim >= RELATED).map(|h| h.0).collect();
            let rows = self.store().get_memories(tenant, &ids).await?;
            let by_id: HashMap<MemoryId, String> =
                rows.into_iter().map(|m| (m.id, m.content)).collect();
            // A stored fact it repeats is confirmed; one that is only similar (a new number,
            // a negation, other words) goes to the judge below.
            let repeat = hits.iter().find(|(id, sim)| {
                *sim >= policy.dedup_threshold
                    && by_id.get(id).is_some_and(|c| same_fact(c, &kept[i].content))
            });
            if let Some((id, _)) = repeat {
                if !batch.confirms.iter().any(|(c, _)| c == id) {
                    batch.confirms.push((*id, event(*id, EventKind::Confirmed, None)));
                    report.confirmed += 1;
                }
                continue;
            }
            accepted.push(i);
            to_judge.push((
                i,
                ids.iter().filter_map(|id| by_id.get(id).map(|c| (*id, c.clone()))).collect(),
            ));
        }
        let mut judgements: HashMap<usize, Judgement> = HashMap::new();
        let mut short_ids: Vec<MemoryId> = Vec::new();
        if !to_judge.is_empty() {
            let contents: Vec<String> = kept.iter().map(|c| c.content.clone()).collect();
            let (prompt, ids) = consolidate::prompt(&to_judge, &contents);
            short_ids = ids;
            let req = ChatRequest {
                tier: Tier::Main,
                model: policy.model.clone(),
                system: prompts::CONSOLIDATE.to_string(),
                messages: vec![ChatMessage { role: ChatRole::User, content: prompt }],
                max_tokens: policy.max_tokens,
                json: true,
                temperature: 0.0,
            };
            let n_ids = short_ids.len();
            let parsed = staged("consolidate", async {
                let answer = self.call(req, "consolidate", report).await?;
                parse::parse_judgements(&answer, to_judge.len(), n_ids).map_err(JobError::runtime)
            })
            .await?;
            for (n, j) in parsed.into_iter().enumerate() {
                judgements.insert(to_judge[n].0, j);
            }
        }
        let confirmed: Vec<MemoryId> = batch.confirms.iter().map(|(id, _)| *id).collect();
        let plan = consolidate::plan(&accepted, &judgements, &short_ids, &confirmed);
        for i in plan.adds {
            let m = new_memory(&kept[i]);
            let ev = event(m.id, EventKind::Created, None);
            batch.adds.push(NewMemory {
                memory: m,
                vector: Some(vectors[i].clone()),
                events: vec![ev],
            });
            report.added += 1;
        }
        for (i, old) in plan.updates {
            let m = new_memory(&kept[i]);
            let new_ev = event(m.id, EventKind::Created, Some(old));
            let old_ev = event(old, EventKind::Superseded, Some(m.id));
            batch.supersedes.push((
                old,
                Some(NewMemory {
                    memory: m,
                    vector: Some(vectors[i].clone()),
                    events: vec![new_ev],
                }),
                old_ev,
            ));
            report.updated += 1;
        }
        for old in plan.deletes {
            batch.supersedes.push((old, None, event(old, EventKind::Forgotten, None)));
            report.deleted += 1;
        }
        for id in plan.confirms {
            batch.confirms.push((id, event(id, EventKind::Confirmed, None)));
            report.confirmed += 1;
        }
        self.metrics().observe_stage("consolidate", t.elapsed(), true);
        // ---- persist (one transaction, cursor included)
        let t = Instant::now();
        let res = staged("persist", self.store().apply_extraction(tenant, conv, user, batch)).await;
        self.metrics().observe_stage("persist", t.elapsed(), res.is_ok());
        res.map_err(JobError::from)
    }

    /// Enqueue a rolling-summary refresh (one pending per conversation).
    pub(crate) async fn enqueue_summary(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conv: &ConversationId,
    ) -> Result<(), Error> {
        self.store().enqueue_job(&Job::summarize(tenant, user, conv)).await.map(|_| ())
    }

    /// Regenerate a conversation's rolling summary from its recent messages.
    #[tracing::instrument(skip_all, fields(job = %job.id, tenant = %job.tenant_id))]
    pub async fn run_summarize(&self, job: &Job) -> Result<(), JobError> {
        let t = Instant::now();
        let conv = Self::job_conversation(job)?;
        let messages = self.store().conversation_messages(&job.tenant_id, &conv).await?;
        if messages.is_empty() {
            return Ok(());
        }
        let agent =
            self.store().conversation_owner(&job.tenant_id, &conv).await?.and_then(|(_, a)| a);
        let policy = self.agent_policy(&job.tenant_id, agent.as_ref()).await?;
        let recent = &messages[messages.len().saturating_sub(60)..];
        let mut report = ExtractionReport::default();
        let req = ChatRequest {
            tier: Tier::Main,
            model: policy.model.clone(),
            system: prompts::SUMMARY.to_string(),
            messages: vec![ChatMessage { role: ChatRole::User, content: transcript(recent) }],
            max_tokens: 400,
            json: false,
            temperature: 0.0,
        };
        let summary = staged("summary", self.call(req, "summary", &mut report)).await?;
        let summary = summary.trim();
        if summary.is_empty() {
            return Err(JobError::runtime("the LLM returned an empty summary"));
        }
        let user_turns = messages.iter().filter(|m| m.role == MessageRole::User).count() as i64;
        self.store().set_rolling_summary(&job.tenant_id, &conv, summary, user_turns).await?;
        self.metrics().observe_stage("summary", t.elapsed(), true);
        Ok(())
    }

    /// Give an empty tool-call message a one-sentence description, so search can find it.
    pub async fn run_tool_synthesis(&self, job: &Job) -> Result<(), JobError> {
        let id = job.payload.get("message_id").and_then(|v| v.as_str()).unwrap_or_default();
        let id = crate::model::MessageId::parse(id)
            .map_err(|e| JobError::bug(format!("bad message id in job {}: {e}", job.id)))?;
        let Some(msg) = self.store().get_message(&job.tenant_id, id).await? else { return Ok(()) };
        if !msg.content.is_empty() || msg.tool_name.is_none() {
            return Ok(()); // already done (idempotent)
        }
        let policy = self.agent_policy(&job.tenant_id, msg.agent_id.as_ref()).await?;
        let mut report = ExtractionReport::default();
        let req = ChatRequest {
            tier: Tier::Fast,
            model: policy.fast_model.clone(),
            system: prompts::TOOL_CALL.to_string(),
            messages: vec![ChatMessage {
                role: ChatRole::User,
                content: transcript(std::slice::from_ref(&msg)),
            }],
            max_tokens: 100,
            json: false,
            temperature: 0.0,
        };
        let sentence = self.call(req, "synthesize", &mut report).await?;
        let sentence = sentence.trim();
        if sentence.is_empty() {
            return Err(JobError::runtime("the LLM returned an empty description"));
        }
        if self.store().set_message_content(&job.tenant_id, id, sentence).await? {
            // The message now has text to embed.
            self.enqueue_message_embedding(&job.tenant_id, &msg.user_id, &msg.conversation_id)
                .await?;
        }
        Ok(())
    }
}

/// Faults of a job run map onto the job's retry decision.
impl From<Error> for JobError {
    fn from(e: Error) -> Self {
        let fault = match &e {
            Error::Embedder(x) => x.fault,
            // A fact edited or purged by someone else meanwhile: the next attempt re-reads.
            Error::Internal(_)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageId, TenantId};

    fn msg(role: MessageRole, content: &str) -> Message {
        Message {
            id: MessageId::new(),
            tenant_id: TenantId::default_tenant(),
            conversation_id: ConversationId::parse("c").unwrap(),
            user_id: UserId::parse("u").unwrap(),
            agent_id: None,
            seq: 0,
            role,
            content: content.into(),
            tool_name: None,
            tool_args: None,
            tool_result: None,
            turn_id: None,
            metadata: serde_json::json!({}),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            rating: 0,
        }
    }

    #[test]
    fn cursor_three_cases() {
        let conv = vec![
            msg(MessageRole::User, "a"),
            msg(MessageRole::Assistant, "b"),
            msg(MessageRole::User, "c"),
        ];
        // No cursor: everything.
        assert_eq!(resume_index(&conv, None), 0);
        // Cursor found: what follows it.
        assert_eq!(resume_index(&conv, Some(&message_hash(&conv[1]))), 2);
        assert_eq!(resume_index(&conv, Some(&message_hash(&conv[2]))), 3);
        let mut seqd = conv.clone();
        for (i, m) in seqd.iter_mut().enumerate() {
            m.seq = i as i64 + 1;
        }
        assert_eq!(resume_index(&seqd, Some(&cursor_of(&seqd[1]))), 2);
        // A later message with the same text as the cursor message is still new.
        seqd.push(Message { seq: 4, ..msg(MessageRole::User, "d") });
        seqd.push(Message { seq: 5, ..msg(MessageRole::Assistant, "b") });
        assert_eq!(resume_index(&seqd, Some(&cursor_of(&seqd[1]))), 2);
        // Cursor gone (the conversation was summarized): the whole current conversation.
        let summarized = vec![
            msg(MessageRole::System, "[Previous conversation summary] …"),
            msg(MessageRole::User, "c"),
        ];
        assert_eq!(resume_index(&summarized, Some(&message_hash(&conv[1]))), 0);
        // The hash is over role and content: the same text from another role is another message.
        assert_ne!(message_hash(&msg(MessageRole::User, "b")), message_hash(&conv[1]));
        assert_eq!(message_hash(&conv[0]), hex::encode(Sha256::digest(b"user:a")));
    }

    #[test]
    fn transcript_prefixes_roles_and_describes_tool_calls() {
        let mut tool = msg(MessageRole::Assistant, "");
        tool.tool_name = Some("weather".into());
        tool.tool_args = Some(serde_json::json!({ "city": "Porto" }));
        let t = transcript(&[
            msg(MessageRole::User, "Hi, I live in Porto."),
            tool,
            msg(MessageRole::Assistant, "  "),
        ]);
        assert_eq!(
            t,
            "User: Hi, I live in Porto.\nAssistant: [called weather {\"city\":\"Porto\"}]\n"
        );
    }

    #[test]
    fn policies_parse_and_reject_nonsense() {
        let p = MemoryPolicy::from_settings(true, 0.9, &serde_json::json!({ "extraction": { "mode": "batched", "min_turns": 4 }, "pii_policy": "reject" })).unwrap();
        assert_eq!((p.mode, p.pii), (ExtractionMode::Batched { min_turns: 4 }, PiiPolicy::Reject));
        assert!(
            MemoryPolicy::from_settings(
                true,
                0.9,
                &serde_json::json!({ "extraction": { "mode": "sometimes" } })
            )
            .is_err()
        );
        assert!(
            MemoryPolicy::from_settings(true, 0.9, &serde_json::json!({ "pii_policy": "shred" }))
                .is_err()
        );
        assert!(
            MemoryPolicy::from_settings(
                true,
                0.9,
                &serde_json::json!({ "extraction": { "max_tokens_per_extraction": 5 } })
            )
            .is_err()
        );
    }
}
