//! Summary hits expanded to their sources: every message a summary covers (through the
//! levels below it), and the best of them for the query (`"expand": true`, and
//! `memory_search`'s top summary hits).

use crate::error::Result;
use crate::model::{MessageId, Summary, SummaryId};
use crate::store::TranscriptFilter;

use super::scope::View;
use super::search::{EXPANDED_MESSAGES, Lists};
use super::{Engine, Hit, SearchInput};

impl Engine {
    /// Every message a summary covers, through the levels below it, in order.
    pub(super) async fn covered_messages(
        &self,
        tenant: &crate::model::TenantId,
        summary: &Summary,
    ) -> Result<Vec<MessageId>> {
        let mut level = vec![summary.clone()];
        loop {
            let mut sources = Vec::new();
            for s in &level {
                sources.extend(self.svc.store.summary_sources(tenant, s.id).await?);
            }
            if level.iter().all(|s| s.depth == 0) {
                return Ok(sources.into_iter().map(MessageId).collect());
            }
            let ids: Vec<SummaryId> = sources.into_iter().map(SummaryId).collect();
            let mut children = self.svc.store.get_summaries(tenant, &ids).await?;
            children.sort_by_key(|c| (c.earliest_at, c.id));
            if children.is_empty() {
                return Ok(vec![]);
            }
            level = children;
        }
    }

    /// Expand each summary hit to its best source messages: the query's message search
    /// within the summary's span and the search's own `since`/`until`, kept to the messages
    /// the summary covers. `vectors`: the messages' ranking vector and, when it is not the
    /// query as asked, the query's (`Lists::scored_by`).
    pub(super) async fn expand(
        &self,
        v: &View,
        query: &str,
        (vector, scored_by): (Option<&[f32]>, Option<&[f32]>),
        input: &SearchInput,
        hits: &mut [Hit],
    ) -> Result<()> {
        let mode = input.mode;
        let scale = self.svc.embedder.query_scale(query);
        let now = crate::model::now();
        for h in hits.iter_mut() {
            let Hit::Summary { summary, expanded, .. } = h else { continue };
            let covered: std::collections::HashSet<MessageId> =
                self.covered_messages(&v.tenant, summary).await?.into_iter().collect();
            let until = summary.latest_at + time::Duration::microseconds(1);
            let window = TranscriptFilter {
                user: summary.user_id.clone(),
                since: Some(
                    input.since.map_or(summary.earliest_at, |s| s.max(summary.earliest_at)),
                ),
                until: Some(input.until.map_or(until, |u| u.min(until))),
                pooled: v.pool.is_some(),
            };
            let k = covered.len().max(EXPANDED_MESSAGES);
            let lists = Lists {
                query,
                asked: query,
                vector,
                scored_by,
                mode,
                k,
                when: None,
                explain: false,
            };
            for (message, e) in self.message_hits(v, &window, &lists).await? {
                if covered.contains(&message.id)
                    && let Hit::Message { message, score, .. } =
                        Hit::of_message(message, e, now, scale)
                {
                    expanded.push((message, score));
                }
            }
            // The messages that hold what the query asks, first: by relevance (a message
            // embedded with the one before it as context can outrank it in the fused order).
            expanded.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.seq.cmp(&b.0.seq)));
            // Messages with no support of their own only pad the list beside one that has
            // some (found by a tester); when none has, the covered messages stay, in order.
            if expanded.first().is_some_and(|m| m.1 > 0.0) {
                expanded.retain(|m| m.1 > 0.0);
            }
            expanded.truncate(EXPANDED_MESSAGES);
        }
        Ok(())
    }
}
