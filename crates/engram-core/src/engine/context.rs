//! The context block: the facts worth knowing for a query, fitted to a token budget, cached
//! per session; with a conversation, its short-term context after them (`short_term`).

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{Kind, Memory, MemoryId, Principal, UserId};
use crate::retrieval::{self};
use crate::store::ContextSession;

use super::scope::View;
use super::{ContextBlock, ContextInput, Engine, Hit, SearchInput};

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
        let mut block = self.facts_context(p, &v, &user, input).await?;
        if let Some(c) = conversation {
            let left = budget.saturating_sub(block.token_estimate + 2);
            let st = self.short_term(&v, p, &user, &c, left).await?;
            if !st.text.is_empty() {
                block.text.push_str("\n\n");
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
        if let Some(sid) = &input.session_id {
            if sid.is_empty() || sid.len() > 256 {
                return Err(Error::invalid("session_id", "session_id must be 1 to 256 bytes"));
            }
            if !input.refresh
                && let Some(s) = self
                    .svc
                    .store
                    .get_context_session(&v.tenant, sid, &user, v.pool.as_deref())
                    .await?
                && self.still_active(v, &s.memory_ids).await?
            {
                let token_estimate = retrieval::estimate_tokens(&s.text);
                if let Some(t) = &input.turn_id {
                    self.svc.store.record_recall(&v.tenant, t, &s.memory_ids).await?;
                }
                return Ok(ContextBlock {
                    text: s.text,
                    memory_ids: s.memory_ids,
                    token_estimate,
                    truncated: false,
                    cached: true,
                    ..Default::default()
                });
            }
        }
        let query = input.query.as_deref().filter(|q| !q.trim().is_empty());
        if input.min_score.is_some() && query.is_none() {
            return Err(Error::invalid("min_score", "min_score needs a query to score facts by"));
        }
        let now = crate::model::now();
        let mut all = self.svc.store.all_active(&v.tenant, &self.filter(v)).await?;
        // Over budget with a query, or with a minimum score: rank the facts by relevance to
        // the query.
        let mut relevance: Option<HashMap<MemoryId, usize>> = None;
        if let Some(q) = query
            && (input.min_score.is_some() || !retrieval::fits(&all, budget))
        {
            let hits = self
                .search(
                    p,
                    SearchInput {
                        query: q.to_string(),
                        user_id: Some(user.clone()),
                        agent_id: v.agent.clone(),
                        limit: self.svc.cfg.max_limit,
                        min_score: input.min_score,
                        ..Default::default()
                    },
                )
                .await?;
            let ranked: HashMap<MemoryId, usize> = hits
                .iter()
                .enumerate()
                .filter_map(|(i, h)| match h {
                    Hit::Memory { memory, .. } => Some((memory.id, i)),
                    Hit::Message { .. } | Hit::Summary { .. } => None,
                })
                .collect();
            if input.min_score.is_some() {
                // Only what scored at least the minimum, and the profile.
                all.retain(|m| m.kind == Kind::Profile || ranked.contains_key(&m.id));
            }
            relevance = Some(ranked);
        }
        let packed = retrieval::pack(&all, budget, relevance.as_ref());
        let text = packed.text();
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

    // ------------------------------------------------------------------ conversations

    /// Whether every fact a cached block names is still active and visible to the caller: a
    /// fact forgotten, purged, edited or expired since the block was chosen makes it be
    /// chosen again (and the session's stored text overwritten), never served from the cache.
    async fn still_active(&self, v: &super::scope::View, ids: &[MemoryId]) -> Result<bool> {
        if ids.is_empty() {
            return Ok(true);
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
        Ok(ids.iter().all(|id| rows.iter().any(|m| m.id == *id && current(m))))
    }
}
