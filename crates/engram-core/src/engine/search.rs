//! Hybrid search over memories, messages and the summaries of the DAG: vector and keyword
//! lists fused by RRF, then weighted by recency, importance, rating and (messages) a speaker
//! the query names (`crate::speaker`); summary hits expanded to their best source messages.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{AgentId, MemoryId, Message, MessageId, Principal, Summary, SummaryId};
use crate::retrieval::{self, Explain};
use crate::speaker;
use crate::store::TranscriptFilter;
use crate::when::Span;

use super::scope::View;
use super::{Engine, Hit, SearchInput, SearchMode, SearchSource, clamp_limit};

/// Source messages an expanded summary hit shows at most.
pub const EXPANDED_MESSAGES: usize = 3;

/// The two ranked lists of a transcript search: query, vector (none in text mode), count.
#[derive(Clone, Copy)]
pub(super) struct Lists<'a> {
    /// The keyword query (without the words of a time it names).
    pub query: &'a str,
    /// The query as the caller wrote it: the speakers it names are read from it (names are
    /// capitalised, and the keyword query may not be).
    pub asked: &'a str,
    /// The vector the list is ranked by.
    pub vector: Option<&'a [f32]>,
    /// The vector messages' semantic support is read against when the list is ranked by
    /// another (a query that names speakers: the query as asked; `engine/speakers.rs`).
    pub scored_by: Option<&'a [f32]>,
    pub mode: SearchMode,
    pub k: usize,
    /// The time the query names, if any (`crate::when`).
    pub when: Option<Span>,
    /// The caller asked for `explain`.
    pub explain: bool,
}

impl Engine {
    /// Hybrid search (vector + BM25, RRF k=60, then decay, importance and rating).
    pub async fn search(&self, p: &Principal, input: SearchInput) -> Result<Vec<Hit>> {
        let _busy = crate::priority::RequestsInFlight::enter(&self.svc.requests);
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
                "sources must name at least one of: memories, messages, summaries",
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
        if input.mode.is_literal() {
            return self.literal_search(&v, &input, query, limit).await;
        }
        let scale = self.svc.embedder.query_scale(query);
        let now = crate::model::now();
        let n = self.svc.cfg.candidates.max(limit);
        let mut hits = Vec::new();
        // A time the query names is matched by dates; its words leave the keyword query.
        let timed = self.query_time(&v, query).await?;
        let (when, keywords) = match &timed {
            Some(t) => (t.span, t.keywords.as_str()),
            None => (None, query),
        };
        let (qv, message_qv) = self.query_vectors(&v, &input, query).await?;
        // Messages are ranked by the vector without the speakers' names when there is one,
        // and scored as asked.
        let ranking = message_qv.as_ref().map(|(v, _)| v.as_slice());
        let (message_vector, scored_by) = (ranking.or(qv.as_deref()), ranking.and(qv.as_deref()));

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
                    self.svc.store.text_search(&v.tenant, &f, keywords, n).await
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
                if when.is_some_and(|w| w.contains(m.observed_at.date())) {
                    e.date_match = retrieval::DATE_WITHIN;
                }
                e.days_since_access =
                    retrieval::days_between(m.last_accessed_at.unwrap_or(m.created_at), now);
                e.access_count = m.access_count;
                e.importance = m.importance.get();
                e.rating = m.rating;
                let score = retrieval::finish(&mut e, scale);
                hits.push(Hit::Memory { memory: m, score, explain: e });
            }
        }
        if input.sources.contains(&SearchSource::Messages)
            || input.sources.contains(&SearchSource::Summaries)
        {
            let user =
                v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
            let (since, until, pooled) = (input.since, input.until, v.pool.is_some());
            let window = TranscriptFilter { user, since, until, pooled };
            let lists = Lists {
                query: keywords,
                asked: query,
                vector: qv.as_deref(),
                scored_by: None,
                mode: input.mode,
                k: n,
                when,
                explain: input.explain,
            };
            if input.sources.contains(&SearchSource::Messages) {
                let how = message_qv.as_ref().filter(|_| input.explain).map(|(_, t)| t);
                let lists = Lists { vector: message_vector, scored_by, ..lists };
                let mut found: Vec<Hit> = (self.message_hits(&v, &window, &lists).await?)
                    .into_iter()
                    .map(|(message, mut e)| {
                        e.speakers = how.map(|t| speaker::explain(query, t));
                        Hit::of_message(message, e, now, scale)
                    })
                    .collect();
                add_context_support(&mut found, scale);
                hits.extend(found);
            }
            if input.sources.contains(&SearchSource::Summaries) {
                for (summary, mut e) in self.summary_hits(&v, &window, &lists).await? {
                    let span =
                        Span { start: summary.earliest_at.date(), end: summary.latest_at.date() };
                    if when.is_some_and(|w| w.overlaps(&span)) {
                        e.date_match = retrieval::DATE_WITHIN;
                    }
                    e.importance = 5;
                    let seen = summary.last_accessed_at.unwrap_or(summary.latest_at);
                    e.days_since_access = retrieval::days_between(seen, now);
                    e.access_count = summary.access_count;
                    let score = retrieval::finish(&mut e, scale);
                    hits.push(Hit::Summary { summary, score, explain: e, expanded: vec![] });
                }
            }
        }
        if let Some(t) = timed.filter(|_| input.explain) {
            for h in &mut hits {
                h.explain_mut().time = Some(t.how.clone());
            }
        }
        hits.retain(|h| h.score() >= min_score);
        let by_relevance = self.svc.cfg.rank_by_relevance;
        hits.sort_by(|a, b| Hit::rank_cmp(a, b, by_relevance));
        Hit::drop_repeated_facts(&mut hits);
        hits.truncate(limit);
        if input.expand {
            let vectors = (message_vector, scored_by);
            self.expand(&v, query, vectors, &input, &mut hits).await?;
        }
        if !input.rank_only {
            self.count_access(&v, &hits, input.turn_id.as_deref(), now).await?;
        }
        Ok(hits)
    }
}

/// Each message hit's support from its context among the other hits
/// ([`retrieval::context_supports`]), and its score read again with it.
fn add_context_support(hits: &mut [Hit], scale: crate::embed::SimilarityScale) {
    let rows: Vec<_> = hits
        .iter()
        .filter_map(|h| match h {
            Hit::Message { message, score, .. } => {
                Some((&message.conversation_id, message.seq, message.created_at, *score))
            }
            Hit::Memory { .. } | Hit::Summary { .. } => None,
        })
        .collect();
    let supports = retrieval::context_supports(&rows);
    let messages = hits.iter_mut().filter(|h| matches!(h, Hit::Message { .. }));
    for (h, support) in messages.zip(supports) {
        if let Hit::Message { score, explain, .. } = h
            && support > 0.0
        {
            explain.context_support = support;
            *score = retrieval::finish(explain, scale);
        }
    }
}

impl Engine {
    /// The messages of `rows` the view may see: all of them for a view without a pool; for
    /// an agent's, those written without an agent and those of the agents of its pool (their
    /// settings read with one store call).
    pub(super) async fn visible_messages(
        &self,
        v: &View,
        mut rows: Vec<Message>,
    ) -> Result<Vec<Message>> {
        let Some(pool) = &v.pool else { return Ok(rows) };
        let agents: Vec<AgentId> = rows.iter().filter_map(|m| m.agent_id.clone()).collect();
        let pools = self.pools_of(&v.tenant, &agents).await?;
        rows.retain(|m| m.agent_id.as_ref().is_none_or(|a| pools.get(a) == Some(pool)));
        Ok(rows)
    }

    /// A user's messages in the window, fused from both lists, loaded and checked against the
    /// caller's pool; best first. A message not embedded yet (they are embedded in the
    /// background, `pipeline::messages`) is found by its words only.
    pub(super) async fn message_hits(
        &self,
        v: &View,
        window: &TranscriptFilter,
        l: &Lists<'_>,
    ) -> Result<Vec<(Message, Explain)>> {
        let store = &self.svc.store;
        let model = self.svc.embedder.model_id();
        let vector = async {
            match l.vector {
                None => Ok(vec![]),
                Some(qv) => store.vector_search_messages(&v.tenant, window, model, qv, l.k).await,
            }
        };
        let text = async {
            if l.mode == SearchMode::VectorOnly {
                Ok(vec![])
            } else {
                store.text_search_messages(&v.tenant, window, l.query, l.k).await
            }
        };
        // Messages waiting for their vector: counted for an explained search by a caller
        // who sees the user's whole transcript (a count over other pools would leak).
        let count = l.vector.is_some() && l.explain && v.pool.is_none();
        let waiting = async {
            Ok(if count {
                Some(store.unembedded_messages(&v.tenant, window, model).await?)
            } else {
                None
            })
        };
        let (mut vec_list, mut text_list, waiting) = tokio::try_join!(vector, text, waiting)?;
        let mut dates = match l.when {
            Some(span) => self.date_list(v, window, span, l.k).await?,
            None => vec![],
        };
        // One load of the candidates and one read of their agents' settings, a fixed number
        // of store calls whatever their number; the messages the caller may not see leave
        // the lists before they are fused, so that no rank counts them.
        let mut ids: Vec<MessageId> = vec_list.iter().map(|(id, _)| *id).collect();
        ids.extend(text_list.iter().map(|(id, _)| *id));
        ids.extend(dates.iter().map(|(id, _)| *id));
        ids.sort_unstable();
        ids.dedup();
        let rows = self.visible_messages(v, store.get_messages(&v.tenant, &ids).await?).await?;
        let mut rows: HashMap<MessageId, Message> = rows.into_iter().map(|m| (m.id, m)).collect();
        vec_list.retain(|(id, _)| rows.contains_key(id));
        text_list.retain(|(id, _)| rows.contains_key(id));
        dates.retain(|(id, _)| rows.contains_key(id));
        let mut fused = retrieval::fuse(&vec_list, &text_list);
        if l.when.is_some() {
            retrieval::fuse_dates(&mut fused, &dates);
        }
        let words = speaker::query_words(l.asked);
        let mut out = Vec::with_capacity(fused.len());
        for (id, e) in fused {
            let Some(msg) = rows.remove(&id) else { continue };
            let speaker_named = speaker::speaks(&words, &msg.content);
            out.push((msg, Explain { unembedded_messages: waiting, speaker_named, ..e }));
        }
        super::dates::add_date_support(l.when, &mut out);
        if let Some(asked) = l.scored_by {
            self.similarity_as_asked(v, asked, &mut out).await?;
        }
        Ok(out)
    }

    /// A user's summaries overlapping the window, fused from both lists, each checked
    /// against the caller's pool through its conversation's agent; best first.
    async fn summary_hits(
        &self,
        v: &View,
        window: &TranscriptFilter,
        l: &Lists<'_>,
    ) -> Result<Vec<(Summary, Explain)>> {
        let store = &self.svc.store;
        let model = self.svc.embedder.model_id();
        let vector = async {
            match l.vector {
                None => Ok(vec![]),
                Some(qv) => store.vector_search_summaries(&v.tenant, window, model, qv, l.k).await,
            }
        };
        let text = async {
            if l.mode == SearchMode::VectorOnly {
                Ok(vec![])
            } else {
                store.text_search_summaries(&v.tenant, window, l.query, l.k).await
            }
        };
        // A query that names a time: the summaries that overlap it, the finest first, as a
        // third list (as messages have theirs, `dates.rs`).
        let dates = async {
            match l.when {
                None => Ok(vec![]),
                Some(span) => {
                    let since = Some(span.start.midnight().assume_utc()).max(window.since);
                    let end = span.end.next_day().unwrap_or(span.end).midnight().assume_utc();
                    let until = Some(window.until.map_or(end, |u| u.min(end)));
                    let f = TranscriptFilter { since, until, ..window.clone() };
                    store.summaries_in(&v.tenant, &f, l.k).await
                }
            }
        };
        let (mut vec_list, mut text_list, dated) = tokio::try_join!(vector, text, dates)?;
        let mut ids: Vec<SummaryId> = vec_list.iter().map(|(id, _)| *id).collect();
        ids.extend(text_list.iter().map(|(id, _)| *id));
        ids.sort_unstable();
        ids.dedup();
        let mut rows: HashMap<SummaryId, Summary> =
            store.get_summaries(&v.tenant, &ids).await?.into_iter().map(|s| (s.id, s)).collect();
        let mut dated_ids: Vec<SummaryId> = dated.iter().map(|s| s.id).collect();
        rows.extend(dated.into_iter().map(|s| (s.id, s)));
        // An agent key sees the summaries of the conversations it may read: those of its
        // pool and those written without an agent (the agents' settings read once). The
        // others leave the lists before they are fused, so that no rank counts them.
        if let Some(pool) = &v.pool {
            // conversation → its agent (None: gone meanwhile, so hidden).
            let mut owners: HashMap<crate::model::ConversationId, Option<Option<AgentId>>> =
                HashMap::new();
            for s in rows.values() {
                if !owners.contains_key(&s.conversation_id) {
                    let c = store.get_conversation(&v.tenant, &s.conversation_id).await?;
                    owners.insert(s.conversation_id.clone(), c.map(|c| c.agent_id));
                }
            }
            let agents: Vec<AgentId> = owners.values().flatten().flatten().cloned().collect();
            let pools = self.pools_of(&v.tenant, &agents).await?;
            rows.retain(|_, s| match &owners[&s.conversation_id] {
                None => false,
                Some(None) => true,
                Some(Some(a)) => pools.get(a) == Some(pool),
            });
        }
        vec_list.retain(|(id, _)| rows.contains_key(id));
        text_list.retain(|(id, _)| rows.contains_key(id));
        dated_ids.retain(|id| rows.contains_key(id));
        let mut fused = retrieval::fuse(&vec_list, &text_list);
        let dated: Vec<(SummaryId, f64)> =
            dated_ids.into_iter().map(|id| (id, retrieval::DATE_WITHIN)).collect();
        retrieval::fuse_dates(&mut fused, &dated);
        let mut out = Vec::with_capacity(fused.len());
        for (id, e) in fused {
            if let Some(s) = rows.remove(&id) {
                out.push((s, e));
            }
        }
        Ok(out)
    }
}
