//! The context block: the facts worth knowing for a query, fitted to a token budget, cached
//! per session; with a conversation, its short-term context after them (`short_term`).

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{
    AgentId, ConversationId, Kind, Memory, MemoryId, MessageId, Principal, SummaryId, UserId,
};
use crate::retrieval::{self};
use crate::store::ContextSession;

use super::scope::View;
use super::{Engine, Hit, SearchInput};

/// Context block request.
#[derive(Debug, Clone, Default)]
pub struct ContextInput {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub query: Option<String>,
    pub token_budget: Option<usize>,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub refresh: bool,
    /// Only facts whose relevance to `query` reaches this (and profile facts).
    pub min_score: Option<f64>,
    /// Add this conversation's latest summaries and last messages after the facts.
    pub conversation_id: Option<ConversationId>,
    /// With a session: the cached block takes in the facts this call's query would choose
    /// that it lacks (the memory proxy), instead of staying as it is until `refresh`. Its
    /// text changes only when a call brings such a fact, so a conversation that stays on its
    /// topics keeps one system prompt. While all the user's facts fit the budget, it holds
    /// them all (`min_score` applies past the budget only).
    pub follow_query: bool,
    /// With a conversation: its summaries only, not its last messages (the memory proxy,
    /// whose client sends them itself).
    pub summaries_only: bool,
}

/// The prompt block and what went into it.
#[derive(Debug, Clone, Default)]
pub struct ContextBlock {
    pub text: String,
    pub memory_ids: Vec<MemoryId>,
    pub token_estimate: usize,
    /// True when not every active fact fit and the most relevant were chosen.
    pub truncated: bool,
    /// True when the facts came from the session cache.
    pub cached: bool,
    /// With a conversation: the messages and summaries of its short-term context.
    pub message_ids: Vec<MessageId>,
    pub summary_ids: Vec<SummaryId>,
}

/// What a session's block notes about itself besides its terms (all absent in a session
/// cached before they were kept, which then counts as changed).
struct SessionNotes {
    /// The user's change counter when the block was chosen.
    version: Option<i64>,
    /// The block holds every fact the user had.
    holds_all: bool,
    /// The earliest expiry among its facts (Unix seconds).
    expires: Option<i64>,
    /// Not every fact fit.
    truncated: bool,
}

impl SessionNotes {
    fn of(s: &ContextSession) -> Self {
        let get = |k: &str| s.params.as_ref().and_then(|p| p.get(k));
        SessionNotes {
            version: get("version").and_then(serde_json::Value::as_i64),
            holds_all: get("holds_all").and_then(serde_json::Value::as_bool) == Some(true),
            expires: get("expires").and_then(serde_json::Value::as_i64),
            truncated: get("truncated").and_then(serde_json::Value::as_bool) == Some(true),
        }
    }

    /// No fact of the user was written since, and none of the block's has expired.
    fn unchanged(&self, version: i64, now: time::OffsetDateTime) -> bool {
        self.version == Some(version) && self.expires.is_none_or(|e| now.unix_timestamp() < e)
    }
}

impl Engine {
    /// The prompt block: `Known facts about the user:` and a bullet list, profile facts
    /// first, then all active facts by `observed_at` when they fit the budget, otherwise the
    /// most relevant to the query. With `min_score` (and a query), only the profile and the
    /// facts whose relevance to the query reaches it. Same `session_id` → same text until
    /// `refresh`.
    /// With a `conversation_id`, the short-term context follows the facts in what is left
    /// of the budget (`short_term`).
    pub async fn context(&self, p: &Principal, input: ContextInput) -> Result<ContextBlock> {
        let _busy = crate::priority::RequestsInFlight::enter(&self.svc.requests);
        let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), true).await?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        let budget = input.token_budget.unwrap_or(self.svc.cfg.token_budget);
        let conversation = input.conversation_id.clone();
        let summaries_only = input.summaries_only;
        let mut block = self.facts_context(p, &v, &user, input).await?;
        if let Some(c) = conversation {
            let left = budget.saturating_sub(block.token_estimate + 2);
            let st = self.short_term(&v, p, &user, &c, left, summaries_only).await?;
            if !st.text.is_empty() {
                if !block.text.is_empty() {
                    block.text.push_str("\n\n");
                }
                block.text.push_str(&st.text);
                block.token_estimate = retrieval::estimate_tokens(&block.text);
            }
            block.message_ids = st.message_ids;
            block.summary_ids = st.summary_ids;
        }
        Ok(block)
    }

    /// The facts part of the block (what a session caches).
    async fn facts_context(
        &self,
        p: &Principal,
        v: &View,
        user: &UserId,
        input: ContextInput,
    ) -> Result<ContextBlock> {
        let user = user.clone();
        if let Some(q) = &input.query
            && q.trim().len() > self.svc.cfg.max_content_bytes
        {
            return Err(Error::TooLarge(format!(
                "query is {} bytes; the limit is {}",
                q.trim().len(),
                self.svc.cfg.max_content_bytes
            )));
        }
        let budget = input.token_budget.unwrap_or(self.svc.cfg.token_budget);
        if budget == 0 || budget > 1_000_000 {
            return Err(Error::invalid("token_budget", "token_budget must be 1 to 1000000"));
        }
        let terms = serde_json::json!({ "token_budget": budget, "min_score": input.min_score });
        let now = crate::model::now();
        // The user's change counter, read before the facts: a session made at this version
        // knows that none of its facts was forgotten, edited or purged since, and, if it
        // holds every fact, that there is nothing new to take in.
        let version = match &input.session_id {
            Some(_) => self.svc.store.facts_version(&v.tenant, &user).await?,
            None => 0,
        };
        let mut cached = None;
        // A followed block whose facts changed: what it held, and the new versions of what
        // was edited, stay while they are active (only the changed fact leaves).
        let mut stale: Vec<MemoryId> = Vec::new();
        if let Some(sid) = &input.session_id {
            if sid.is_empty() || sid.len() > 256 {
                return Err(Error::invalid("session_id", "session_id must be 1 to 256 bytes"));
            }
            // A block chosen with other terms (budget, threshold) is not this call's.
            if !input.refresh
                && let Some(s) = self
                    .svc
                    .store
                    .get_context_session(&v.tenant, sid, &user, v.pool.as_deref())
                    .await?
                && s.params.as_ref().and_then(|p| p.get("terms")) == Some(&terms)
                // An empty block keeps nothing stable: a fact learnt since joins it.
                && !s.text.is_empty()
            {
                let changed = if SessionNotes::of(&s).unchanged(version, now) {
                    None
                } else {
                    self.changed_facts(v, &s.memory_ids).await?
                };
                match changed {
                    None => cached = Some(s),
                    Some(rows) if input.follow_query => {
                        for id in &s.memory_ids {
                            stale.push(*id);
                            let row = rows.iter().find(|m| m.id == *id);
                            stale.extend(row.and_then(|m| m.superseded_by));
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        let query = input.query.as_deref().filter(|q| !q.trim().is_empty());
        let follow = input.follow_query && query.is_some();
        if let Some(s) = cached.take_if(|s| {
            !follow || {
                let notes = SessionNotes::of(s);
                notes.holds_all && notes.unchanged(version, now)
            }
        }) {
            return self.cached_block(v, s, input.turn_id.as_deref()).await;
        }
        if input.follow_query && query.is_none() {
            // Nothing to follow and no block yet: nothing is known to be relevant.
            return Ok(ContextBlock::default());
        }
        if input.min_score.is_some() && query.is_none() {
            return Err(Error::invalid("min_score", "min_score needs a query to score facts by"));
        }
        // With a minimum score, or following the query: rank the facts by relevance to it
        // first (a followed session whose block holds every relevant fact needs no more).
        let mut relevance: Option<HashMap<MemoryId, usize>> = None;
        if let Some(q) = query
            && (input.min_score.is_some() || cached.is_some())
        {
            let ranked = self.rank_facts(p, v, &user, q, input.min_score).await?;
            let holds_all =
                cached.as_ref().is_some_and(|s| ranked.keys().all(|id| s.memory_ids.contains(id)));
            if holds_all && let Some(s) = cached.take() {
                return self.cached_block(v, s, input.turn_id.as_deref()).await;
            }
            relevance = Some(ranked);
        }
        let mut all = self.svc.store.all_active(&v.tenant, &self.filter(v)).await?;
        retrieval::drop_repeated_contents(&mut all);
        let active = all.len();
        // Over budget with a query: rank the facts by relevance to it.
        if let Some(q) = query
            && relevance.is_none()
            && !retrieval::fits(&all, budget)
        {
            relevance = Some(self.rank_facts(p, v, &user, q, None).await?);
        }
        // A followed block holds every fact while they all fit (a user's few facts, the
        // allergy that matters to "What should I cook tonight?" whatever the words); past the
        // budget, only the relevant ones.
        let all_fit = input.follow_query && retrieval::fits(&all, budget);
        if input.min_score.is_some()
            && !all_fit
            && let Some(ranked) = &relevance
        {
            // Only what scored at least the minimum, and the profile; a followed session
            // also keeps what it holds.
            let held = cached.as_ref().map_or(stale.as_slice(), |s| s.memory_ids.as_slice());
            all.retain(|m| {
                m.kind == Kind::Profile || ranked.contains_key(&m.id) || held.contains(&m.id)
            });
        }
        let previous: Vec<MemoryId> = match &cached {
            Some(s) => s.memory_ids.clone(),
            None => stale.clone(),
        };
        if let Some(s) = cached {
            // A followed session: kept as it is while what this call would choose is in it.
            let wanted = retrieval::pack(&all, budget, relevance.as_ref());
            if wanted.chosen.iter().all(|m| s.memory_ids.contains(&m.id)) {
                return self.cached_block(v, s, input.turn_id.as_deref()).await;
            }
        }
        let mut packed = retrieval::pack(&all, budget, relevance.as_ref());
        if input.follow_query {
            // What the block held keeps its place and new facts come after it: the system
            // prompt's cached prefix at the upstream stays valid up to the first new line.
            packed
                .chosen
                .sort_by_key(|m| previous.iter().position(|id| *id == m.id).unwrap_or(usize::MAX));
        }
        // No fact known, or no room for the header, gets no block; facts that do not fit
        // leave the header, which says there are some.
        let text =
            if packed.chosen.is_empty() && (!packed.truncated || !retrieval::fits(&[], budget)) {
                String::new()
            } else {
                packed.text()
            };
        let truncated = packed.truncated;
        let chosen = packed.chosen;
        let memory_ids: Vec<MemoryId> = chosen.iter().map(|m| m.id).collect();
        if let Some(sid) = &input.session_id {
            self.svc
                .store
                .put_context_session(
                    &v.tenant,
                    &ContextSession {
                        session_id: sid.clone(),
                        user_id: user.clone(),
                        pool: v.pool.clone(),
                        text: text.clone(),
                        memory_ids: memory_ids.clone(),
                        created_at: now,
                        params: Some(serde_json::json!({
                            "terms": terms,
                            "version": version,
                            "holds_all": memory_ids.len() == active,
                            "truncated": truncated,
                            "expires": chosen.iter().filter_map(|m| m.expires_at)
                                .min().map(|t| t.unix_timestamp()),
                        })),
                    },
                )
                .await?;
        }
        if !memory_ids.is_empty() {
            self.svc.store.touch_memories(&v.tenant, &memory_ids, now).await?;
            if let Some(t) = &input.turn_id {
                self.svc.store.record_recall(&v.tenant, t, &memory_ids).await?;
            }
        }
        let token_estimate = retrieval::estimate_tokens(&text);
        Ok(ContextBlock {
            text,
            memory_ids,
            token_estimate,
            truncated,
            cached: false,
            ..Default::default()
        })
    }

    /// The user's facts found by `query` (at `min_score`, else the default), by position.
    async fn rank_facts(
        &self,
        p: &Principal,
        v: &View,
        user: &UserId,
        query: &str,
        min_score: Option<f64>,
    ) -> Result<HashMap<MemoryId, usize>> {
        let hits = self
            .search(
                p,
                SearchInput {
                    query: query.to_string(),
                    user_id: Some(user.clone()),
                    agent_id: v.agent.clone(),
                    limit: self.svc.cfg.max_limit,
                    min_score,
                    rank_only: true,
                    ..Default::default()
                },
            )
            .await?;
        Ok(hits
            .iter()
            .enumerate()
            .filter_map(|(i, h)| match h {
                Hit::Memory { memory, .. } => Some((memory.id, i)),
                Hit::Message { .. } | Hit::Summary { .. } => None,
            })
            .collect())
    }

    /// A session's cached block as this call's (its recall recorded under `turn_id`).
    async fn cached_block(
        &self,
        v: &View,
        s: ContextSession,
        turn_id: Option<&str>,
    ) -> Result<ContextBlock> {
        let token_estimate = retrieval::estimate_tokens(&s.text);
        if let Some(t) = turn_id {
            self.svc.store.record_recall(&v.tenant, t, &s.memory_ids).await?;
        }
        let truncated = SessionNotes::of(&s).truncated;
        Ok(ContextBlock {
            text: s.text,
            memory_ids: s.memory_ids,
            token_estimate,
            truncated,
            cached: true,
            ..Default::default()
        })
    }

    // ------------------------------------------------------------------ conversations

    /// Whether every fact a cached block names is still active and visible to the caller: a
    /// fact forgotten, purged, edited or expired since the block was chosen makes it be
    /// chosen again (and the session's stored text overwritten), never served from the cache.
    /// `None` when every fact is still current; else the rows read, once (a followed block
    /// keeps what is still current of them, and the new versions of edited ones).
    async fn changed_facts(
        &self,
        v: &super::scope::View,
        ids: &[MemoryId],
    ) -> Result<Option<Vec<Memory>>> {
        if ids.is_empty() {
            return Ok(None);
        }
        // Only the cached rows are read, and checked as the view's filter would: the user's,
        // current, unexpired, and of the view's pool, shared or user-wide.
        let rows = self.svc.store.get_memories(&v.tenant, ids).await?;
        let now = crate::model::now();
        let current = |m: &Memory| {
            v.user.as_ref() == Some(&m.user_id)
                && m.superseded_at.is_none()
                && m.expires_at.is_none_or(|e| e > now)
                && (v.pool.is_none()
                    || m.kind == Kind::Shared
                    || m.pool.is_none()
                    || m.pool == v.pool)
        };
        let all_current = ids.iter().all(|id| rows.iter().any(|m| m.id == *id && current(m)));
        Ok((!all_current).then_some(rows))
    }
}
