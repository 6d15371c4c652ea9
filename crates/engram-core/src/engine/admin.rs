//! Tenant administration: agent settings, GDPR erasure and export of a user, statistics,
//! and the tenant's own job queue (the web UI's health page).

use crate::error::{Error, Result};
use crate::model::{Agent, AgentId, ConversationId, Job, JobStatus, KeyRole, Principal, UserId};
use crate::pipeline::policy::MemoryPolicy;
use crate::store::{Activity, EraseCounts};

use super::{AgentInput, Engine, ExportedConversation, Stats, UserExport};

/// Most conversations one agent save queues for compaction (the most recently updated; the
/// others compact at their next append).
const COMPACT_ON_SAVE: usize = 1_000;

impl Engine {
    /// An agent's settings: for admin keys and for the agent's own key. A user key (an
    /// end-user's memory panel) has no business with how agents are configured.
    pub async fn get_agent(&self, p: &Principal, id: &AgentId) -> Result<Agent> {
        match &p.role {
            KeyRole::Admin => {}
            KeyRole::Agent(bound) if bound == id => {}
            KeyRole::Agent(_) => return Err(Error::not_found(format!("agent {id}"))),
            KeyRole::User(_) => {
                return Err(Error::Forbidden(
                    "agent settings need an admin key or the agent's own key".into(),
                ));
            }
        }
        self.svc
            .store
            .get_agent(&p.tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("agent {id}")))
    }

    pub async fn put_agent(&self, p: &Principal, id: AgentId, input: AgentInput) -> Result<Agent> {
        Self::require_admin(p, "changing agent settings")?;
        let threshold = input.dedup_threshold.unwrap_or(self.svc.cfg.dedup_threshold);
        if !(0.5..=1.0).contains(&threshold) {
            return Err(Error::invalid(
                "dedup_threshold",
                "dedup_threshold must be between 0.5 and 1.0",
            ));
        }
        if !input.settings.is_object() {
            return Err(Error::invalid("settings", "settings must be a JSON object"));
        }
        MemoryPolicy::check_names(&input.settings)?;
        let policy = MemoryPolicy::from_settings(input.memory_enabled, threshold, &input.settings)?;
        // As an identifier: the UI trims what it is given, so a value that trimming changes
        // would move the agent to another pool at its next save there.
        if let Some(c) = &input.cluster_id
            && (c.is_empty() || c.len() > 256 || c.trim() != c || c.chars().any(char::is_control))
        {
            return Err(Error::invalid(
                "cluster_id",
                "cluster_id must be 1 to 256 bytes, without control characters or surrounding \
                 spaces",
            ));
        }
        let now = crate::model::now();
        let created_at =
            self.svc.store.get_agent(&p.tenant, &id).await?.map_or(now, |a| a.created_at);
        let agent = Agent {
            tenant_id: p.tenant.clone(),
            id,
            memory_enabled: input.memory_enabled,
            cluster_id: input.cluster_id,
            dedup_threshold: threshold,
            settings: input.settings,
            created_at,
            updated_at: now,
        };
        self.svc.store.put_agent(&agent).await?;
        // A threshold set or lowered applies to the agent's conversations now, not at their
        // next append: those over it are queued (the job itself re-reads the policy and
        // summarizes only what extraction has read, so a queued one may do nothing).
        if self.svc.llm.is_some() && policy.memory_enabled && policy.compaction_threshold > 0 {
            let over = self.svc.store.conversations_to_compact(
                &p.tenant,
                &agent.id,
                policy.compaction_threshold,
                COMPACT_ON_SAVE,
            );
            for c in over.await? {
                self.svc.enqueue_compaction(&p.tenant, &c.user_id, &c.id).await?;
            }
        }
        Ok(agent)
    }

    /// GDPR erasure of a user (admin, or the user's own key).
    pub async fn erase_user(&self, p: &Principal, user: &UserId) -> Result<EraseCounts> {
        self.authorize_user_admin(p, user)?;
        self.svc.store.erase_user(&p.tenant, user).await
    }

    /// GDPR export of a user.
    pub async fn export_user(&self, p: &Principal, user: &UserId) -> Result<UserExport> {
        self.authorize_user_admin(p, user)?;
        let (memories, events) = self.svc.store.user_memories(&p.tenant, user).await?;
        let messages = self.svc.store.user_messages(&p.tenant, user).await?;
        let mut ids: Vec<&ConversationId> = messages.iter().map(|m| &m.conversation_id).collect();
        ids.sort();
        ids.dedup();
        let (mut conversations, mut summaries) = (Vec::new(), Vec::new());
        for c in ids {
            summaries
                .extend(self.svc.store.conversation_summaries(&p.tenant, c, None, false).await?);
            if let Some(info) = self.svc.store.get_conversation(&p.tenant, c).await? {
                let (rolling_summary, _) = self.svc.store.rolling_summary(&p.tenant, c).await?;
                conversations.push(ExportedConversation { info, rolling_summary });
            }
        }
        let now = crate::model::now();
        let session_state = self.svc.store.list_state(&p.tenant, user, None, now).await?;
        Ok(UserExport {
            tenant_id: p.tenant.clone(),
            user_id: user.clone(),
            memories,
            events,
            messages,
            conversations,
            summaries,
            session_state,
        })
    }

    pub async fn stats(&self, p: &Principal) -> Result<Stats> {
        Self::require_admin(p, "stats")?;
        let s = self.svc.store.stats(&p.tenant).await?;
        let backlog = self.svc.store.backlog(Some(&p.tenant)).await?;
        let share = |part: u64, all: u64| if all == 0 { 1.0 } else { part as f64 / all as f64 };
        let finished = s.extractions_done + s.extractions_failed;
        let llm = self.svc.llm.as_ref();
        Ok(Stats {
            embedder: self.svc.embedder.model_id().to_string(),
            embedder_dims: self.svc.embedder.dims(),
            embedding_coverage: share(s.memories_with_vector, s.memories_active),
            message_embedding_coverage: share(s.messages_with_vector, s.messages),
            extraction_enabled: llm.is_some(),
            llm: llm.map_or_else(
                || {
                    "off: no LLM configured (set ENGRAM_LLM_PROVIDER and ENGRAM_LLM_MODEL)"
                        .to_string()
                },
                |l| l.describe(),
            ),
            extraction_health: (finished > 0).then(|| s.extractions_done as f64 / finished as f64),
            compaction: CompactionStatus::of(llm.is_some(), &s),
            store: s,
            backlog,
            import_unfinished: self.svc.store.import_mark().await?,
            at: crate::model::now(),
        })
    }

    /// Every agent of the tenant with settings (admin keys: the UI's agent picker).
    pub async fn agents(&self, p: &Principal) -> Result<Vec<Agent>> {
        Self::require_admin(p, "the list of agents")?;
        self.svc.store.list_agents(&p.tenant).await
    }

    /// The tenant's activity over the last `days` days (admin keys), of one user or all.
    pub async fn activity(
        &self,
        p: &Principal,
        user: Option<&UserId>,
        days: i64,
    ) -> Result<Activity> {
        Self::require_admin(p, "activity")?;
        let since = crate::model::now() - time::Duration::days(days.clamp(1, 3660));
        self.svc.store.activity(&p.tenant, user, since).await
    }

    /// The tenant's background jobs, newest first (admin keys).
    pub async fn jobs(
        &self,
        p: &Principal,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        Self::require_admin(p, "the job queue")?;
        self.svc.store.list_jobs(Some(&p.tenant), status, limit.clamp(1, 1000)).await
    }

    /// Put one of the tenant's failed jobs back in the queue (admin keys); `NotFound` for
    /// another tenant's job or one that has not failed.
    pub async fn retry_job(&self, p: &Principal, id: &str) -> Result<()> {
        Self::require_admin(p, "retrying a job")?;
        self.svc.store.retry_job(Some(&p.tenant), id).await
    }
}

/// What the compactor (the summary DAG) is doing, as `/v1/stats` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionStatus {
    /// No LLM is configured: nothing is compacted.
    Off,
    /// Compaction jobs wait or run.
    Running,
    /// No compaction job waits, messages are unsummarized, and extraction jobs failed for
    /// good: a conversation is summarized only as far as extraction has read it, so theirs
    /// wait until the failed jobs are retried (`engram jobs retry`, or the health page).
    WaitingForExtraction,
    /// No compaction job waits, messages are unsummarized, and compaction jobs failed for
    /// good (their reason in `engram jobs list --status failed`): retried, they go on.
    Failed,
    /// Nothing to do.
    Idle,
}

impl CompactionStatus {
    /// The status from the tenant's counters.
    pub fn of(llm: bool, s: &crate::store::StoreStats) -> Self {
        if !llm {
            CompactionStatus::Off
        } else if s.compactions_pending > 0 {
            CompactionStatus::Running
        } else if s.extractions_failed > 0 && s.messages_unsummarized > 0 {
            CompactionStatus::WaitingForExtraction
        } else if s.compactions_failed > 0 && s.messages_unsummarized > 0 {
            CompactionStatus::Failed
        } else {
            CompactionStatus::Idle
        }
    }
}
