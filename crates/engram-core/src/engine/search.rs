//! Hybrid search over memories and messages: vector and keyword lists fused by RRF, then
//! weighted by recency, importance and rating.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{AgentId, MemoryId, Message, MessageId, Principal};
use crate::retrieval::{self, Explain};
use crate::store::TranscriptFilter;

use super::{Engine, Hit, SearchInput, SearchMode, SearchSource, clamp_limit};

impl Engine {
    /// Hybrid search (vector + BM25, RRF k=60, then decay, importance and rating).
    pub async fn search(&self, p: &Principal, input: SearchInput) -> Result<Vec<Hit>> {
        let query = input.query.trim();
        if query.is_empty() {
            return Err(Error::invalid("query", "query must not be empty"));
        }
        if query.len() > self.svc.cfg.max_content_bytes {
            return Err(Error::TooLarge(format!(
                "query is {} bytes; the limit is {}",
                query.len(),
                self.svc.cfg.max_content_bytes
            )));
        }
        let limit = clamp_limit(input.limit, self.svc.cfg.max_limit)?;
        if input.sources.is_empty() {
            return Err(Error::invalid(
                "sources",
                "sources must name at least one of: memories, messages",
            ));
        }
        let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), true).await?;
        let mut f = self.filter(&v);
        f.kinds = input.kinds.clone();
        f.categories = input.categories.clone();
        f.since = input.since;
        f.until = input.until;
        f.source_conversation = input.source_conversation.clone();
        f.rating = input.rating;
        let min_score = match input.min_score {
            None => retrieval::DEFAULT_MIN_SCORE,
            Some(s) if (0.0..=1.0).contains(&s) => s,
            Some(_) => {
                return Err(Error::invalid("min_score", "min_score must be between 0 and 1"));
            }
        };
        let scale = self.svc.embedder.similarity_scale();
        let now = crate::model::now();
        let n = self.svc.cfg.candidates.max(limit);
        let mut hits = Vec::new();
        let qv = match input.mode {
            SearchMode::TextOnly => None,
            SearchMode::Hybrid | SearchMode::VectorOnly => Some(self.embed_one(query).await?),
        };

        if input.sources.contains(&SearchSource::Memories) {
            // The two lists are independent: ask the store for both at once (two pooled
            // connections), so a search waits for the slower list, not for their sum.
            let vector = async {
                match &qv {
                    None => Ok(vec![]),
                    Some(qv) => self.svc.store.vector_search(&v.tenant, &f, qv, n).await,
                }
            };
            let text = async {
                if input.mode == SearchMode::VectorOnly {
                    Ok(vec![])
                } else {
                    self.svc.store.text_search(&v.tenant, &f, query, n).await
                }
            };
            let (vec_list, text_list) = tokio::try_join!(vector, text)?;
            let mut parts: HashMap<MemoryId, Explain> =
                retrieval::fuse(&vec_list, &text_list).into_iter().collect();
            let ids: Vec<MemoryId> = parts.keys().copied().collect();
            for m in self.svc.store.get_memories(&v.tenant, &ids).await? {
                // The store's vector index may not know every condition (SQLite's keeps
                // pools, kinds, categories and dates): the loaded row is checked again.
                let Some(mut e) = parts.remove(&m.id).filter(|_| f.admits(&m)) else { continue };
                e.days_since_access =
                    retrieval::days_between(m.last_accessed_at.unwrap_or(m.created_at), now);
                e.access_count = m.access_count;
                e.importance = m.importance.get();
                e.rating = m.rating;
                let score = retrieval::finish(&mut e, scale);
                hits.push(Hit::Memory { memory: m, score, explain: e });
            }
        }
        if input.sources.contains(&SearchSource::Messages) {
            let user =
                v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
            let window = TranscriptFilter { user, since: input.since, until: input.until };
            // Messages are embedded in the background (pipeline::messages): one not embedded
            // yet is found by its words only.
            let vector = async {
                match &qv {
                    None => Ok(vec![]),
                    Some(qv) => {
                        let model = self.svc.embedder.model_id();
                        self.svc
                            .store
                            .vector_search_messages(&v.tenant, &window, model, qv, n)
                            .await
                    }
                }
            };
            let text = async {
                if input.mode == SearchMode::VectorOnly {
                    Ok(vec![])
                } else {
                    self.svc.store.text_search_messages(&v.tenant, &window, query, n).await
                }
            };
            let (vec_list, text_list) = tokio::try_join!(vector, text)?;
            // One fusion, one load of the candidates, one read of their agents' settings:
            // a fixed number of store calls whatever the number of candidates.
            let fused = retrieval::fuse(&vec_list, &text_list);
            let ids: Vec<MessageId> = fused.iter().map(|(id, _)| *id).collect();
            let mut rows: HashMap<MessageId, Message> = self
                .svc
                .store
                .get_messages(&v.tenant, &ids)
                .await?
                .into_iter()
                .map(|m| (m.id, m))
                .collect();
            let pools = match &v.pool {
                Some(_) => {
                    let agents: Vec<AgentId> =
                        rows.values().filter_map(|m| m.agent_id.clone()).collect();
                    self.pools_of(&v.tenant, &agents).await?
                }
                None => HashMap::new(),
            };
            for (id, mut e) in fused {
                let Some(msg) = rows.remove(&id) else { continue };
                if let (Some(pool), Some(agent)) = (&v.pool, &msg.agent_id)
                    && pools.get(agent) != Some(pool)
                {
                    continue;
                }
                e.importance = 5;
                e.rating = msg.rating;
                e.days_since_access = retrieval::days_between(msg.created_at, now);
                let score = retrieval::finish(&mut e, scale);
                hits.push(Hit::Message { message: msg, score, explain: e });
            }
        }
        hits.retain(|h| h.score() >= min_score);
        let by_relevance = self.svc.cfg.rank_by_relevance;
        hits.sort_by(|a, b| Hit::rank_cmp(a, b, by_relevance));
        hits.truncate(limit);
        let ids: Vec<MemoryId> = hits
            .iter()
            .filter_map(|h| match h {
                Hit::Memory { memory, .. } => Some(memory.id),
                Hit::Message { .. } => None,
            })
            .collect();
        if !ids.is_empty() {
            self.svc.store.touch_memories(&v.tenant, &ids, now).await?;
            if let Some(t) = &input.turn_id {
                self.svc.store.record_recall(&v.tenant, t, &ids).await?;
            }
        }
        Ok(hits)
    }
}
