//! Conversations: appending messages (and the jobs they enqueue: embedding, extraction),
//! browsing, rating messages, ending sessions, backfilling tool-call descriptions.

use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::model::{
    Agent, AgentId, ConversationId, EventKind, Job, JobKind, KeyRole, MemoryId, Message, MessageId,
    MessageRole, Principal, TenantId, UserId,
};
use crate::pipeline::compact::LEAF_MESSAGES;
use crate::pipeline::cursor::resume_index;
use crate::pipeline::policy::{ExtractionMode, MemoryPolicy};
use crate::store::ConversationInfo;

use super::{ConversationView, Engine, MessageInput, clamp_limit};

impl Engine {
    /// Append messages to a conversation (durable before return). A conversation belongs to
    /// the user (and agent) that started it.
    pub async fn append_messages(
        &self,
        p: &Principal,
        conversation: ConversationId,
        user_id: Option<UserId>,
        agent_id: Option<AgentId>,
        messages: Vec<MessageInput>,
    ) -> Result<Vec<Message>> {
        let _busy = crate::priority::RequestsInFlight::enter(&self.svc.requests);
        let v = self.view(p, user_id.as_ref(), agent_id.as_ref(), true).await?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        if messages.is_empty() {
            return Err(Error::invalid("messages", "messages must not be empty"));
        }
        let mut v = v;
        self.continue_as_owner(&mut v, &user, &conversation).await?;
        let now = crate::model::now();
        let mut rows = Vec::with_capacity(messages.len());
        for (i, m) in messages.into_iter().enumerate() {
            let field = format!("messages[{i}]");
            if m.content.len() > self.svc.cfg.max_content_bytes {
                return Err(Error::TooLarge(format!(
                    "{field}.content is {} bytes; the limit is {}",
                    m.content.len(),
                    self.svc.cfg.max_content_bytes
                )));
            }
            if m.content.contains('\0')
                || m.metadata.as_ref().is_some_and(|v| v.to_string().contains("\\u0000"))
            {
                return Err(Error::invalid(
                    format!("{field}.content"),
                    format!("{field}: text must not contain NUL characters"),
                ));
            }
            if m.content.trim().is_empty() && m.tool_name.is_none() {
                return Err(Error::invalid(
                    format!("{field}.content"),
                    format!("{field}: content must not be empty (unless tool_name is set)"),
                ));
            }
            let metadata = m.metadata.unwrap_or_else(|| serde_json::json!({}));
            if !metadata.is_object() {
                return Err(Error::invalid(
                    format!("{field}.metadata"),
                    "metadata must be a JSON object",
                ));
            }
            rows.push(Message {
                id: MessageId::new(),
                tenant_id: v.tenant.clone(),
                conversation_id: conversation.clone(),
                user_id: user.clone(),
                agent_id: v.agent.clone(),
                seq: 0,
                role: m.role,
                content: m.content,
                tool_name: m.tool_name,
                tool_args: m.tool_args,
                tool_result: m.tool_result,
                turn_id: m.turn_id,
                metadata,
                created_at: m.created_at.unwrap_or(now),
                rating: 0,
                access_count: 0,
                last_accessed_at: None,
            });
        }
        let jobs = self.append_jobs(&v.tenant, &user, &conversation, &rows);
        let stored = self.svc.store.append_messages_with_jobs(&v.tenant, rows, &jobs).await?;
        if jobs.iter().any(|j| j.kind == JobKind::EmbedMessages) {
            self.svc.embedding_wanted.notify_one();
        }
        let seqs = stored.first().map(|f| f.seq).zip(stored.last().map(|l| l.seq));
        self.after_append(&v.tenant, &user, v.settings.as_ref(), &conversation, seqs).await?;
        Ok(stored)
    }

    /// The jobs that process new messages, enqueued with them in one transaction: their
    /// vectors, and with an LLM the sentences of tool calls without content.
    fn append_jobs(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conversation: &ConversationId,
        rows: &[Message],
    ) -> Vec<Job> {
        let mut jobs = Vec::new();
        if rows.iter().any(|m| !m.content.is_empty()) {
            jobs.push(Job::embed_messages(tenant, user, conversation));
        }
        if self.svc.llm.is_some() {
            let calls = rows.iter().filter(|m| m.tool_name.is_some() && m.content.is_empty());
            jobs.extend(calls.map(|m| Job::synthesize_tool_call(tenant, user, m.id)));
        }
        jobs
    }

    /// Enqueue the extraction an append may call for (never runs it here), or, when none is
    /// due, the compaction: extraction enqueues it when it is done, and an agent that does
    /// not extract after every turn gets one each time its conversation passes the threshold
    /// by another leaf's worth of messages (`seqs`: the first and last appended). Unlike the
    /// jobs of [`Self::append_jobs`] these are decided after the append; if the process dies
    /// in between, the conversation's next append decides again.
    pub(super) async fn after_append(
        &self,
        tenant: &TenantId,
        user: &UserId,
        writer: Option<&Agent>,
        conversation: &ConversationId,
        seqs: Option<(i64, i64)>,
    ) -> Result<()> {
        if self.svc.llm.is_none() {
            return Ok(());
        }
        let policy = MemoryPolicy::of(writer, self.svc.cfg.dedup_threshold);
        if !policy.memory_enabled {
            return Ok(());
        }
        let due = match policy.mode {
            ExtractionMode::Off => false,
            ExtractionMode::PostTurn => true,
            ExtractionMode::Batched { min_turns } => {
                self.user_turns_since_cursor(tenant, conversation).await? >= min_turns
            }
        };
        if due {
            self.enqueue_extraction(tenant, user, conversation).await?;
        } else if let Some((first, last)) = seqs
            && compaction_due(first, last, policy.compaction_threshold)
        {
            self.svc.enqueue_compaction(tenant, user, conversation).await?;
        }
        Ok(())
    }

    pub(super) async fn user_turns_since_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<i64> {
        let messages = self.svc.store.conversation_messages(tenant, conversation).await?;
        let cursor = self.svc.store.extraction_cursor(tenant, conversation).await?;
        let start = resume_index(&messages, cursor.as_deref());
        Ok(messages[start..].iter().filter(|m| m.role == MessageRole::User).count() as i64)
    }

    /// The session of a conversation ended: extract what is left (also under `batched`) and
    /// regenerate its rolling summary. Returns false when no LLM is configured.
    pub async fn end_session(&self, p: &Principal, conversation: &ConversationId) -> Result<bool> {
        let _ = self.messages(p, conversation, 0, 1).await?;
        let Some((user, _)) = self.svc.store.conversation_owner(&p.tenant, conversation).await?
        else {
            return Err(Error::not_found(format!("conversation {conversation}")));
        };
        if self.svc.llm.is_none() {
            return Ok(false);
        }
        self.enqueue_extraction(&p.tenant, &user, conversation).await?;
        self.svc.enqueue_summary(&p.tenant, &user, conversation).await?;
        Ok(true)
    }

    /// Enqueue an extraction of a conversation (one pending per conversation; one running
    /// per conversation: single writer).
    pub async fn enqueue_extraction(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conversation: &ConversationId,
    ) -> Result<bool> {
        self.svc.store.enqueue_job(&Job::extract(tenant, user, conversation)).await
    }

    /// Enqueue tool-call synthesis for every old tool-call message with empty content
    /// (idempotent: one pending job per message; done messages are skipped by the job).
    pub async fn backfill_tool_calls(&self, p: &Principal) -> Result<usize> {
        Self::require_admin(p, "backfill")?;
        if self.svc.llm.is_none() {
            return Err(Error::Unprocessable(
                "no LLM is configured: tool-call synthesis needs one".into(),
            ));
        }
        let mut n = 0;
        for user in self.svc.store.list_users(&p.tenant).await? {
            for m in self.svc.store.user_messages(&p.tenant, &user).await? {
                if m.tool_name.is_some() && m.content.is_empty() {
                    let job = Job::synthesize_tool_call(&p.tenant, &user, m.id);
                    if self.svc.store.enqueue_job(&job).await? {
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }

    /// Browse a transcript chronologically.
    pub async fn messages(
        &self,
        p: &Principal,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        if !self.conversation_visible(p, conversation).await? {
            return Err(Error::not_found(format!("conversation {conversation}")));
        }
        let limit = clamp_limit(limit, 1000)?;
        if after_seq < 0 {
            return Err(Error::invalid("after", "after must be a message seq: 0 or more"));
        }
        self.svc.store.list_messages(&p.tenant, conversation, after_seq, limit).await
    }

    /// Conversations the caller may read, most recently updated first, a page after
    /// `before` (the `updated_at` and id of the previous page's last). A user key sees its
    /// own; an agent key those of agents of its pool and those written without an agent.
    pub async fn conversations(
        &self,
        p: &Principal,
        user: Option<&UserId>,
        before: Option<(OffsetDateTime, &ConversationId)>,
        limit: usize,
    ) -> Result<Vec<ConversationInfo>> {
        let limit = clamp_limit(limit, 1000)?;
        let user = match &p.role {
            KeyRole::User(own) => Some(own),
            KeyRole::Admin | KeyRole::Agent(_) => user,
        };
        let mut page = self.svc.store.list_conversations(&p.tenant, user, before, limit).await?;
        if let KeyRole::Agent(me) = &p.role {
            // One store call for the pools of every agent on the page (and the caller's).
            let mut agents: Vec<AgentId> = page.iter().filter_map(|c| c.agent_id.clone()).collect();
            agents.push(me.clone());
            let pools = self.pools_of(&p.tenant, &agents).await?;
            let mine = pools.get(me);
            page.retain(|c| c.agent_id.as_ref().is_none_or(|a| pools.get(a) == mine));
        }
        Ok(page)
    }

    /// A conversation: who it belongs to, its size and dates, and the rolling summary
    /// extraction keeps of it (`NotFound` unless the caller may read the conversation).
    pub async fn conversation(
        &self,
        p: &Principal,
        conversation: &ConversationId,
    ) -> Result<ConversationView> {
        let info = self.svc.store.get_conversation(&p.tenant, conversation).await?;
        let Some(info) = info else {
            return Err(Error::not_found(format!("conversation {conversation}")));
        };
        if !self.may_read_conversation(p, &info.user_id, info.agent_id.as_ref()).await? {
            return Err(Error::not_found(format!("conversation {conversation}")));
        }
        let (rolling_summary, summarized_user_turns) =
            self.svc.store.rolling_summary(&p.tenant, conversation).await?;
        let summaries =
            self.svc.store.conversation_summaries(&p.tenant, conversation, None, false).await?;
        Ok(ConversationView { info, rolling_summary, summarized_user_turns, summaries })
    }

    /// Rate a reply; cascades the rating to every memory recalled for its turn.
    pub async fn rate_message(
        &self,
        p: &Principal,
        id: MessageId,
        value: i64,
    ) -> Result<(Message, Vec<MemoryId>)> {
        if value != 1 && value != -1 {
            return Err(Error::invalid("value", "a rating is -1 or 1"));
        }
        let msg = self
            .svc
            .store
            .get_message(&p.tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("message {id}")))?;
        // A message of a conversation the caller may not read is unknown, as any other id:
        // the refusal names the message only, never its conversation.
        if !self.conversation_visible(p, &msg.conversation_id).await? {
            return Err(Error::not_found(format!("message {id}")));
        }
        self.svc.store.rate_message(&p.tenant, id, value).await?;
        let mut turn_ids = vec![id.to_string()];
        if let Some(t) = &msg.turn_id {
            turn_ids.push(t.clone());
        }
        let mut rated = Vec::new();
        let now = crate::model::now();
        for t in turn_ids {
            for mid in self.svc.store.recalled(&p.tenant, &t).await? {
                if rated.contains(&mid) {
                    continue;
                }
                // A version edited or forgotten since the turn keeps the rating it had:
                // history is not rewritten (found by a tester, as for a direct rating).
                if let Some(m) = self.svc.store.get_memory(&p.tenant, mid).await?
                    && m.superseded_at.is_none()
                    && self.visible(p, &m).await?
                {
                    let mut ev = Self::event(mid, EventKind::Rated, None, p, now);
                    ev.detail =
                        serde_json::json!({ "value": value, "via_message": id.to_string() });
                    self.svc.store.rate_memory(&p.tenant, mid, value, ev).await?;
                    rated.push(mid);
                }
            }
        }
        let msg = self
            .svc
            .store
            .get_message(&p.tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("message {id}")))?;
        // Batched extraction also runs when the user rates a reply.
        if self.svc.llm.is_some() {
            let agent_row = match &msg.agent_id {
                Some(a) => self.svc.store.get_agent(&p.tenant, a).await?,
                None => None,
            };
            let policy = MemoryPolicy::of(agent_row.as_ref(), self.svc.cfg.dedup_threshold);
            if policy.memory_enabled && matches!(policy.mode, ExtractionMode::Batched { .. }) {
                self.enqueue_extraction(&p.tenant, &msg.user_id, &msg.conversation_id).await?;
            }
        }
        Ok((msg, rated))
    }

    // ------------------------------------------------------------------ agents, users, stats
}

/// Did an append of messages `first..=last` take the conversation past `threshold` by another
/// [`LEAF_MESSAGES`] (at `threshold + LEAF_MESSAGES`, `threshold + 2·LEAF_MESSAGES`, …)?
fn compaction_due(first: i64, last: i64, threshold: i64) -> bool {
    let leaf = LEAF_MESSAGES as i64;
    let steps = |seq: i64| if seq < threshold { -1 } else { (seq - threshold).div_euclid(leaf) };
    threshold > 0 && steps(last) >= 1 && steps(last) > steps(first - 1)
}

#[cfg(test)]
mod compaction_tests {
    use super::compaction_due;

    #[test]
    fn compaction_is_due_once_per_leaf_past_the_threshold() {
        // Threshold 100, leaves of 20: due at 120, 140, … whichever append crosses them.
        assert!(!compaction_due(1, 119, 100));
        assert!(compaction_due(120, 120, 100));
        assert!(!compaction_due(121, 139, 100));
        assert!(compaction_due(110, 145, 100));
        assert!(compaction_due(1, 500, 100));
        assert!(!compaction_due(1, 500, 0), "0: compaction off");
    }
}
