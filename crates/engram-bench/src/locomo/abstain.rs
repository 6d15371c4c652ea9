//! `--abstention`: does a search know when it has nothing?
//!
//! Three sets of queries against each conversation's store (hybrid search, 20 results,
//! `min_score: 0` so that every candidate comes back with its score, `explain` on):
//!
//! - the answerable questions (categories 1–4): at each threshold, the share of questions
//!   that lose at least one evidence turn from their top 10, and Recall@10;
//! - LoCoMo's adversarial questions (category 5, whose answers are not in the conversation,
//!   though their words and topic often are);
//! - queries on unrelated topics (`abstention_topics.txt`: academic and technical subjects no
//!   casual conversation touches), each asked of every conversation.
//!
//! For the last two, the share of searches that return nothing at each threshold. The lists
//! at a threshold are the 20 results filtered by score (the engine filters before it cuts to
//! `limit`, so a threshold could admit a 21st candidate the simulation does not see; only a
//! question whose top 20 mostly fail the threshold can differ).
//!
//! It also reports where the embedder's cosine similarities fall — the best one an unrelated
//! query reaches, and those of evidence turns — which is how each embedder's
//! [`engram_core::embed::SimilarityScale`] was set.

use engram_core::engine::{SearchInput, SearchMode, SearchSource};
use engram_core::model::UserId;
use engram_core::retrieval::DEFAULT_MIN_SCORE;
use serde::Serialize;

use super::{Corpus, Ctx, dia_id, principal};
use crate::report;

/// Queries on topics no casual conversation touches.
const TOPICS: &str = include_str!("abstention_topics.txt");

/// The thresholds reported.
const THRESHOLDS: [f64; 7] = [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4];

/// One search's results: `(dia_id, score, cosine if the vector list had it)`, best first.
type Scored = Vec<(String, f64, Option<f32>)>;

#[derive(Debug, Serialize)]
pub struct Row {
    min_score: f64,
    /// Answerable questions that lose at least one evidence turn from their top 10.
    answerable_losing_evidence: f64,
    answerable_recall_at_10: f64,
    /// Adversarial questions (category 5) answered with nothing.
    adversarial_empty: f64,
    /// Unrelated-topic queries answered with nothing.
    unrelated_empty: f64,
}

#[derive(Debug, Serialize)]
pub struct Abstention {
    answerable: usize,
    adversarial: usize,
    unrelated: usize,
    rows: Vec<Row>,
    /// Percentiles (5, 50, 95, max) of the best cosine an unrelated query reaches.
    unrelated_top_cosine: [f32; 4],
    /// Percentiles (5, 25, 50, 95) of the cosine of evidence turns in the vector list.
    evidence_cosine: [f32; 4],
    /// Unrelated queries with at least one keyword hit.
    unrelated_with_keyword_hits: f64,
}

async fn scored(
    engine: &engram_core::engine::Engine,
    user: &UserId,
    query: &str,
    corpus: Corpus,
) -> anyhow::Result<Scored> {
    let input = SearchInput {
        query: query.to_string(),
        user_id: Some(user.clone()),
        limit: 20,
        mode: SearchMode::Hybrid,
        sources: vec![match corpus {
            Corpus::Memories => SearchSource::Memories,
            Corpus::Messages => SearchSource::Messages,
        }],
        explain: true,
        min_score: Some(0.0),
        ..Default::default()
    };
    let hits = engine.search(&principal(), input).await?;
    Ok(hits
        .iter()
        .filter_map(|h| Some((dia_id(h)?, h.score(), h.explain().vector_similarity)))
        .collect())
}

fn percentile(sorted: &[f32], p: f64) -> f32 {
    if sorted.is_empty() {
        return f32::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Abstention> {
    let topics: Vec<&str> = TOPICS.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    // (evidence, scored) per answerable question; scored lists of the other two sets.
    let mut answerable: Vec<(Vec<String>, Scored)> = Vec::new();
    let mut adversarial: Vec<Scored> = Vec::new();
    let mut unrelated: Vec<Scored> = Vec::new();
    for (c, pristine) in ctx.convs.iter().zip(ctx.pristine) {
        let (_tmp, engine) = pristine.open_copy(ctx.scratch, ctx.embedder, ctx.cfg.clone()).await?;
        let user = UserId::parse(c.sample_id.clone())?;
        for q in &c.queries {
            answerable
                .push((q.evidence.clone(), scored(&engine, &user, &q.text, ctx.corpus).await?));
        }
        for q in &c.adversarial {
            adversarial.push(scored(&engine, &user, q, ctx.corpus).await?);
        }
        for q in &topics {
            unrelated.push(scored(&engine, &user, q, ctx.corpus).await?);
        }
    }
    let share = |n: usize, d: usize| n as f64 / d.max(1) as f64;
    let mut rows = Vec::new();
    for t in THRESHOLDS {
        let top10 = |s: &Scored| -> Vec<String> {
            s.iter().filter(|h| h.1 >= t).take(10).map(|h| h.0.clone()).collect()
        };
        let mut losing = 0;
        let mut recall = 0.0;
        for (evidence, s) in &answerable {
            let all: Vec<String> = s.iter().take(10).map(|h| h.0.clone()).collect();
            let kept = top10(s);
            let found = |l: &[String]| evidence.iter().filter(|e| l.contains(e)).count();
            if found(&kept) < found(&all) {
                losing += 1;
            }
            recall += found(&kept) as f64 / evidence.len() as f64;
        }
        let empty = |sets: &[Scored]| sets.iter().filter(|s| top10(s).is_empty()).count();
        rows.push(Row {
            min_score: t,
            answerable_losing_evidence: share(losing, answerable.len()),
            answerable_recall_at_10: recall / answerable.len().max(1) as f64,
            adversarial_empty: share(empty(&adversarial), adversarial.len()),
            unrelated_empty: share(empty(&unrelated), unrelated.len()),
        });
    }
    let mut tops: Vec<f32> =
        unrelated.iter().filter_map(|s| s.iter().filter_map(|h| h.2).reduce(f32::max)).collect();
    tops.sort_by(f32::total_cmp);
    let mut ev: Vec<f32> = answerable
        .iter()
        .flat_map(|(e, s)| s.iter().filter(|h| e.contains(&h.0)).filter_map(|h| h.2))
        .collect();
    ev.sort_by(f32::total_cmp);
    let keyword = unrelated.iter().filter(|s| s.iter().any(|h| h.2.is_none())).count();
    Ok(Abstention {
        answerable: answerable.len(),
        adversarial: adversarial.len(),
        unrelated: unrelated.len(),
        rows,
        unrelated_top_cosine: [
            percentile(&tops, 0.05),
            percentile(&tops, 0.5),
            percentile(&tops, 0.95),
            tops.last().copied().unwrap_or(f32::NAN),
        ],
        evidence_cosine: [
            percentile(&ev, 0.05),
            percentile(&ev, 0.25),
            percentile(&ev, 0.5),
            percentile(&ev, 0.95),
        ],
        unrelated_with_keyword_hits: share(keyword, unrelated.len()),
    })
}

impl Abstention {
    pub fn markdown(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    if r.min_score == DEFAULT_MIN_SCORE {
                        format!("**{} (default)**", r.min_score)
                    } else {
                        r.min_score.to_string()
                    },
                    format!("{:.3}", r.answerable_losing_evidence),
                    format!("{:.3}", r.answerable_recall_at_10),
                    format!("{:.3}", r.adversarial_empty),
                    format!("{:.3}", r.unrelated_empty),
                ]
            })
            .collect();
        let mut out = format!(
            "Abstention ({} answerable, {} adversarial, {} unrelated-topic searches):\n\n",
            self.answerable, self.adversarial, self.unrelated
        );
        out.push_str(&report::table(
            &[
                "min_score",
                "answerable losing evidence (top 10)",
                "answerable R@10",
                "adversarial empty",
                "unrelated empty",
            ],
            &rows,
        ));
        let c = self.unrelated_top_cosine;
        let e = self.evidence_cosine;
        out.push_str(&format!(
            "\nBest cosine of an unrelated query: p5 {:.3}, p50 {:.3}, p95 {:.3}, max {:.3}; \
             {:.3} of unrelated queries had a keyword hit.\nCosine of evidence turns in the \
             vector list: p5 {:.3}, p25 {:.3}, p50 {:.3}, p95 {:.3}.\n",
            c[0], c[1], c[2], c[3], self.unrelated_with_keyword_hits, e[0], e[1], e[2], e[3]
        ));
        out
    }
}
