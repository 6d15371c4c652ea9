//! Stage 4 of extraction, consolidation's I/O: each new fact is compared with the user's
//! stored facts of the same pool. A fact that repeats one in this window is dropped; one
//! that repeats a stored fact confirms it; one with no stored fact related enough
//! ([`RELATED`]) is added without asking; the rest go, with their neighbours, to the
//! main-tier LLM in one call, and [`consolidate::plan`] turns its decisions into a plan.

use std::collections::HashMap;

use super::consolidate::{self, Plan};
use super::parse::{self, Candidate, Judgement};
use super::policy::MemoryPolicy;
use super::prompts;
use super::stage::staged;
use crate::dedup::same_fact;
use crate::error::JobError;
use crate::llm::{ChatMessage, ChatRequest, ChatRole, Tier};
use crate::metrics::ExtractionReport;
use crate::model::{MemoryId, TenantId};
use crate::services::Services;
use crate::store::MemoryFilter;

/// Cosine similarity below which an existing fact is unrelated to a candidate: the candidate
/// is added without asking the LLM (pass 2 only judges candidates with related facts).
/// all-MiniLM-L6-v2 puts paraphrases and updates of one fact ("uses Postgres" / "switched to
/// SQLite") above 0.5 and facts about different things ("plays the cello" / "is allergic to
/// shellfish") around 0.1–0.3.
pub const RELATED: f32 = 0.5;

/// What consolidation decided for a window.
pub(super) struct Decision {
    /// Stored facts the window repeats (confirmed without asking), in order.
    pub restated: Vec<MemoryId>,
    /// The judge's plan for the other candidates.
    pub plan: Plan,
}

impl Services {
    /// Consolidate the window's candidates (`kept`, with their `vectors`) against the
    /// stored facts `filter` selects.
    pub(super) async fn judge(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        policy: &MemoryPolicy,
        kept: &[Candidate],
        vectors: &[Vec<f32>],
        report: &mut ExtractionReport,
    ) -> Result<Decision, JobError> {
        let mut restated: Vec<MemoryId> = Vec::new();
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
            let hits = self.store().vector_search(tenant, filter, v, 5).await?;
            // Nothing related enough to be updated or contradicted: ADD without asking.
            if hits.first().is_none_or(|(_, sim)| *sim < RELATED) {
                accepted.push(i);
                continue;
            }
            let ids: Vec<MemoryId> =
                hits.iter().filter(|(_, sim)| *sim >= RELATED).map(|h| h.0).collect();
            let rows = self.store().get_memories(tenant, &ids).await?;
            // Only a fact seen wherever the new one would be can stand for it.
            let stands_for: Vec<MemoryId> = rows
                .iter()
                .filter(|m| crate::dedup::seen_wherever(m, filter.pool.as_deref()))
                .map(|m| m.id)
                .collect();
            let by_id: HashMap<MemoryId, String> =
                rows.into_iter().map(|m| (m.id, m.content)).collect();
            // A stored fact it repeats is confirmed; one that is only similar (a new number,
            // a negation, other words) goes to the judge below.
            let repeat = hits.iter().find(|(id, sim)| {
                *sim >= policy.dedup_threshold
                    && stands_for.contains(id)
                    && by_id.get(id).is_some_and(|c| same_fact(c, &kept[i].content))
            });
            if let Some((id, _)) = repeat {
                if !restated.contains(id) {
                    restated.push(*id);
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
        let plan = consolidate::plan(&accepted, &judgements, &short_ids, &restated);
        Ok(Decision { restated, plan })
    }
}
