//! `--diagnose`: where the hybrid ranking loses evidence, measured by re-fusing the raw lists.
//!
//! For every question, one hybrid `Engine::search` on a pristine copy of its conversation's
//! store, with `candidates = C` and `limit = 2C` and `explain: true`, returns every candidate
//! of both lists with its vector rank and similarity and its text rank and BM25 score. Those
//! ranks and scores do not depend on access counts or time, so they are exactly the lists
//! the engine fuses. From them this module recomputes the top 20 under other settings:
//!
//! - each list alone (what the vector-only / text-only modes return);
//! - `coverage@c`: the share of evidence anywhere in either list's top c, the ceiling of any
//!   fusion of c candidates per list;
//! - plain RRF (no decay, importance or rating factors, which are all neutral on a fresh
//!   store) for candidate counts c, RRF constants k and list weights w:
//!   `score = 2w/(k + r_vec) + 2(1−w)/(k + r_text)` (w = 0.5 is the engine's formula);
//! - score fusion: `α·minmax(cosine) + (1−α)·minmax(bm25)` over the top 50 of each list;
//! - the text list of other full-text set-ups ([`super::fts`]: stemming, no frequency cut),
//!   alone and fused (RRF k = 60, the engine's candidates per list) with the engine's vector list;
//! - the vector list of other turn documents ([`DOCS`]: without the date prefix, or with the
//!   neighbouring turns of the same session embedded along with the turn), ranked by brute
//!   force over the embedder's vectors, alone and fused with the store's text list exactly as
//!   the engine fuses (RRF k = 60, the engine's candidates per list).
//!
//! Ties are broken by the better vector rank, then the better text rank (the engine breaks
//! them arbitrarily).

use std::collections::HashMap;

use engram_core::engine::{EngineConfig, Hit, SearchInput, SearchMode};
use engram_core::model::UserId;
use serde::Serialize;

use super::{Ctx, KS, Query, Recall, dia_id, fts, principal};
use crate::report;

/// A candidate's place in one list: `(1-based rank, score)`.
type Part = Option<(usize, f64)>;

/// How the text that gets embedded for a turn is built: the turn as stored (or without its
/// `"(<date>) "` prefix), with up to `prev` preceding and `next` following turns of the same
/// session around it, in conversation order, one per line and without their date prefix.
/// The ranking unit stays the single turn: only its vector changes.
struct DocText {
    name: &'static str,
    strip_date: bool,
    prev: usize,
    next: usize,
    /// Keep the `"<speaker>: "` of the context turns.
    speakers: bool,
}

/// The vector documents compared: as stored, without the date, and with conversational
/// context (the neighbouring turns of the same session, with or without their speaker).
const DOCS: [DocText; 9] = [
    DocText { name: "as stored", strip_date: false, prev: 0, next: 0, speakers: true },
    DocText {
        name: "without the \"(<date>) \" prefix",
        strip_date: true,
        prev: 0,
        next: 0,
        speakers: true,
    },
    DocText {
        name: "context: previous turn + the turn",
        strip_date: false,
        prev: 1,
        next: 0,
        speakers: true,
    },
    DocText {
        name: "context: the turn + next turn",
        strip_date: false,
        prev: 0,
        next: 1,
        speakers: true,
    },
    DocText {
        name: "context: previous + the turn + next",
        strip_date: false,
        prev: 1,
        next: 1,
        speakers: true,
    },
    DocText {
        name: "context: two previous + the turn",
        strip_date: false,
        prev: 2,
        next: 0,
        speakers: true,
    },
    DocText {
        name: "context: three previous + the turn",
        strip_date: false,
        prev: 3,
        next: 0,
        speakers: true,
    },
    DocText {
        name: "context without speakers: previous + the turn",
        strip_date: false,
        prev: 1,
        next: 0,
        speakers: false,
    },
    DocText {
        name: "context without speakers: two previous + the turn",
        strip_date: false,
        prev: 2,
        next: 0,
        speakers: false,
    },
];

/// The session part of a dia_id (`"D3:7"` → `"D3"`).
fn session(dia: &str) -> &str {
    dia.split_once(':').map_or(dia, |(s, _)| s)
}

/// The text embedded for turn `i` of `turns` (`(dia_id, content as stored)`) under `d`.
fn document(turns: &[(String, String)], i: usize, d: &DocText) -> String {
    let s = session(&turns[i].0);
    let same = |j: &usize| session(&turns[*j].0) == s;
    let before = (i.saturating_sub(d.prev)..i).filter(same);
    let after = (i + 1..(i + 1 + d.next).min(turns.len())).filter(same);
    let context = |j: usize| {
        let t = strip_date(&turns[j].1);
        if d.speakers { t } else { t.split_once(": ").map_or(t, |(_, text)| text) }
    };
    let mut parts: Vec<&str> = before.map(context).collect();
    parts.push(if d.strip_date { strip_date(&turns[i].1) } else { &turns[i].1 });
    parts.extend(after.map(context));
    parts.join("\n")
}

/// The two raw lists of one question, best first: `(dia_id, similarity or -bm25)`.
#[derive(Debug, Clone, Default)]
pub struct Lists {
    pub vector: Vec<(String, f64)>,
    pub text: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
pub struct Variant {
    pub group: &'static str,
    pub name: String,
    /// Overall Recall@1/5/10/20.
    pub recall: [f64; 4],
    /// Recall@10 per category (1–4).
    pub r10_by_category: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
pub struct Diagnosis {
    pub candidates: usize,
    pub variants: Vec<Variant>,
}

impl Diagnosis {
    pub fn markdown(&self) -> String {
        let mut header = vec!["group", "variant", "R@1", "R@5", "R@10", "R@20"];
        let cats: Vec<String> = self
            .variants
            .first()
            .map(|v| v.r10_by_category.iter().map(|(c, _)| format!("R@10 {c}")).collect())
            .unwrap_or_default();
        header.extend(cats.iter().map(String::as_str));
        let rows: Vec<Vec<String>> = self
            .variants
            .iter()
            .map(|v| {
                let mut r = vec![v.group.to_string(), v.name.clone()];
                r.extend(v.recall.iter().map(|x| format!("{x:.3}")));
                r.extend(v.r10_by_category.iter().map(|(_, x)| format!("{x:.3}")));
                r
            })
            .collect();
        let mut s = format!(
            "Hybrid diagnosis: the raw lists ({} candidates each) re-fused offline\n\n",
            self.candidates
        );
        s.push_str(&report::table(&header, &rows));
        s
    }
}

/// Rank the union of both lists by `score(vector rank, similarity, text rank, bm25)`.
fn fuse(l: &Lists, score: &dyn Fn(Part, Part) -> Option<f64>) -> Vec<String> {
    let mut parts: HashMap<&str, (Part, Part)> = HashMap::new();
    for (i, (d, s)) in l.vector.iter().enumerate() {
        parts.entry(d).or_default().0 = Some((i + 1, *s));
    }
    for (i, (d, s)) in l.text.iter().enumerate() {
        parts.entry(d).or_default().1 = Some((i + 1, *s));
    }
    let mut scored: Vec<(f64, usize, usize, &str)> = parts
        .into_iter()
        .filter_map(|(d, (v, t))| {
            let s = score(v, t)?;
            Some((s, v.map_or(usize::MAX, |x| x.0), t.map_or(usize::MAX, |x| x.0), d))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    scored.into_iter().take(KS[KS.len() - 1]).map(|x| x.3.to_string()).collect()
}

/// Weighted RRF over the top `cap` of each list.
fn rrf(cap: usize, k: f64, w: f64) -> impl Fn(Part, Part) -> Option<f64> {
    move |v, t| {
        let v = v.filter(|x| x.0 <= cap).map(|x| 2.0 * w / (k + x.0 as f64));
        let t = t.filter(|x| x.0 <= cap).map(|x| 2.0 * (1.0 - w) / (k + x.0 as f64));
        if v.is_none() && t.is_none() { None } else { Some(v.unwrap_or(0.0) + t.unwrap_or(0.0)) }
    }
}

/// Min-max normalise the scores of the top `cap` of a list in place.
fn minmax(list: &[(String, f64)], cap: usize) -> Vec<(String, f64)> {
    let top = &list[..cap.min(list.len())];
    let lo = top.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
    let hi = top.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    top.iter().map(|(d, s)| (d.clone(), (s - lo) / span)).collect()
}

/// `α·minmax(cosine) + (1−α)·minmax(bm25)` over the top 50 of each list.
fn score_fusion(l: &Lists, alpha: f64) -> Vec<String> {
    let n = Lists { vector: minmax(&l.vector, 50), text: minmax(&l.text, 50) };
    fuse(&n, &|v, t| {
        if v.is_none() && t.is_none() {
            return None;
        }
        Some(alpha * v.map_or(0.0, |x| x.1) + (1.0 - alpha) * t.map_or(0.0, |x| x.1))
    })
}

fn evaluate(
    queries: &[(&Query, Lists)],
    rank: &dyn Fn(&Lists) -> Vec<String>,
) -> (Recall, [f64; 4]) {
    let mut r = Recall::default();
    for (q, l) in queries {
        r.add(q, &rank(l));
    }
    let o = r.overall();
    (r, o)
}

fn variant(group: &'static str, name: String, r: &Recall) -> Variant {
    let rows = r.rows();
    Variant {
        group,
        name,
        recall: r.overall(),
        r10_by_category: rows[..rows.len() - 1].iter().map(|(c, _, v)| (c.clone(), v[2])).collect(),
    }
}

pub async fn run(
    ctx: &Ctx<'_>,
    candidates: usize,
    dump: Option<&std::path::Path>,
) -> anyhow::Result<Diagnosis> {
    let cfg = EngineConfig { candidates, max_limit: 2 * candidates, ..ctx.cfg.clone() };
    let mut questions: Vec<(&Query, Lists)> = Vec::new();
    for (c, pristine) in ctx.convs.iter().zip(ctx.pristine) {
        let (_tmp, engine) = pristine.open_copy(ctx.scratch, ctx.embedder, cfg.clone()).await?;
        let user = UserId::parse(c.sample_id.clone())?;
        for q in &c.queries {
            let input = SearchInput {
                query: q.text.clone(),
                user_id: Some(user.clone()),
                limit: 2 * candidates,
                explain: true,
                mode: SearchMode::Hybrid,
                // Every candidate of both lists, whatever its relevance.
                min_score: Some(0.0),
                ..Default::default()
            };
            let hits = engine.search(&principal(), input).await?;
            let mut vector: Vec<(usize, String, f64)> = Vec::new();
            let mut text: Vec<(usize, String, f64)> = Vec::new();
            for h in &hits {
                let (Hit::Memory { explain, .. }, Some(d)) = (h, dia_id(h)) else { continue };
                if let (Some(r), Some(s)) = (explain.vector_rank, explain.vector_similarity) {
                    vector.push((r, d.clone(), f64::from(s)));
                }
                if let (Some(r), Some(s)) = (explain.text_rank, explain.text_coverage) {
                    text.push((r, d, s));
                }
            }
            vector.sort_by_key(|x| x.0);
            text.sort_by_key(|x| x.0);
            let lists = Lists {
                vector: vector.into_iter().map(|x| (x.1, x.2)).collect(),
                text: text.into_iter().map(|x| (x.1, x.2)).collect(),
            };
            questions.push((q, lists));
        }
    }
    if let Some(path) = dump {
        write_lists(path, ctx, &questions)?;
    }

    let mut variants = Vec::new();
    let (r, _) = evaluate(&questions, &|l| fuse(l, &|v, _| v.map(|x| -(x.0 as f64))));
    variants.push(variant("list", "vector list alone".into(), &r));
    let (r, _) = evaluate(&questions, &|l| fuse(l, &|_, t| t.map(|x| -(x.0 as f64))));
    variants.push(variant("list", "text (BM25) list alone".into(), &r));
    for cap in [10usize, 20, 50, 100, 200].into_iter().filter(|&c| c <= candidates) {
        // A set, not a ranking: the same share in every column.
        let mut r = Recall::default();
        for (q, l) in &questions {
            let mut found: Vec<String> = l.vector.iter().take(cap).map(|x| x.0.clone()).collect();
            found.extend(l.text.iter().take(cap).map(|x| x.0.clone()));
            found.retain(|d| q.evidence.contains(d));
            found.sort();
            found.dedup();
            // Only evidence turns in the list (at most a handful): its R@20 is the coverage.
            r.add(q, &found);
        }
        let mut v = variant("coverage", format!("evidence in either top-{cap}"), &r);
        v.recall = [v.recall[3]; 4];
        variants.push(v);
    }
    for cap in [10usize, 20, 30, 50, 100, 200].into_iter().filter(|&c| c <= candidates) {
        let f = rrf(cap, 60.0, 0.5);
        let (r, _) = evaluate(&questions, &|l| fuse(l, &f));
        let engine = if cap == ctx.cfg.candidates { " (engine)" } else { "" };
        let name = format!("k=60, {cap} candidates/list{engine}");
        variants.push(variant("RRF", name, &r));
    }
    for k in [1.0, 5.0, 10.0, 20.0, 30.0, 120.0] {
        let f = rrf(50, k, 0.5);
        let (r, _) = evaluate(&questions, &|l| fuse(l, &f));
        variants.push(variant("RRF", format!("k={k}, 50/list"), &r));
    }
    for (k, cap) in [(5.0, 20usize), (10.0, 20), (5.0, 30), (10.0, 30)] {
        let f = rrf(cap, k, 0.5);
        let (r, _) = evaluate(&questions, &|l| fuse(l, &f));
        variants.push(variant("RRF", format!("k={k}, {cap}/list"), &r));
    }
    for w in [0.3, 0.4, 0.6, 0.7] {
        let f = rrf(50, 60.0, w);
        let (r, _) = evaluate(&questions, &|l| fuse(l, &f));
        variants.push(variant("RRF", format!("k=60, 50/list, vector weight {w}"), &r));
    }
    for alpha in [0.3, 0.4, 0.5, 0.6, 0.7] {
        let rank = |l: &Lists| score_fusion(l, alpha);
        let (r, _) = evaluate(&questions, &rank);
        variants.push(variant(
            "score fusion",
            format!("{alpha}·minmax(cos) + {:.1}·minmax(bm25), 50/list", 1.0 - alpha),
            &r,
        ));
    }

    let mut porter: Vec<Vec<(String, f64)>> = Vec::new();
    for v in fts::VARIANTS {
        let lists = fts::text_lists(ctx.convs, v, candidates).await?;
        if v.tokenize.starts_with("porter") && !v.drop_clitics {
            porter.clone_from(&lists);
        }
        let swapped: Vec<(&Query, Lists)> = questions
            .iter()
            .zip(lists)
            .map(|((q, l), text)| (*q, Lists { vector: l.vector.clone(), text }))
            .collect();
        let (r, _) = evaluate(&swapped, &|l| fuse(l, &|_, t| t.map(|x| -(x.0 as f64))));
        variants.push(variant("full text", format!("{}: text list alone", v.name), &r));
        let grid: Vec<(f64, usize)> = if v.grid {
            vec![(60.0, 50), (60.0, 20), (10.0, 50), (5.0, 50), (1.0, 50), (5.0, 20), (10.0, 20)]
        } else {
            vec![(60.0, ctx.cfg.candidates)]
        };
        for (k, cap) in grid {
            let f = rrf(cap, k, 0.5);
            let (r, _) = evaluate(&swapped, &|l| fuse(l, &f));
            let name = format!("{}: RRF k={k}, {cap}/list with the vector list", v.name);
            variants.push(variant("full text", name, &r));
        }
        if v.grid {
            for alpha in [0.3, 0.4, 0.5] {
                let rank = |l: &Lists| score_fusion(l, alpha);
                let (r, _) = evaluate(&swapped, &rank);
                let name = format!(
                    "{}: {alpha}·minmax(cos) + {:.1}·minmax(bm25) with the vector list",
                    v.name,
                    1.0 - alpha
                );
                variants.push(variant("full text", name, &r));
            }
        }
    }
    // The vector list with other document texts (brute force over the embedder's vectors).
    for doc in &DOCS {
        let name = doc.name;
        let lists = vector_lists(ctx, doc, candidates).await?;
        let with = |text: &dyn Fn(usize) -> Vec<(String, f64)>| -> Vec<(&Query, Lists)> {
            questions
                .iter()
                .zip(&lists)
                .enumerate()
                .map(|(i, ((q, _), v))| (*q, Lists { vector: v.clone(), text: text(i) }))
                .collect()
        };
        let engine_text = with(&|i| questions[i].1.text.clone());
        let (r, _) = evaluate(&engine_text, &|l| fuse(l, &|v, _| v.map(|x| -(x.0 as f64))));
        variants.push(variant("vector documents", format!("{name}: vector list alone"), &r));
        let ec = ctx.cfg.candidates;
        let f = rrf(ec, 60.0, 0.5);
        let (r, _) = evaluate(&engine_text, &|l| fuse(l, &f));
        let label = format!("{name}: RRF k=60, {ec}/list with the store's text list");
        variants.push(variant("vector documents", label, &r));
        if !porter.is_empty() {
            let porter_text = with(&|i| porter[i].clone());
            let f = rrf(50, 5.0, 0.5);
            let (r, _) = evaluate(&porter_text, &|l| fuse(l, &f));
            let label = format!("{name}: RRF k=5, 50/list with the porter text list");
            variants.push(variant("vector documents", label, &r));
        }
    }
    Ok(Diagnosis { candidates, variants })
}

/// One JSON line per question: its conversation, text, category, evidence and both raw lists.
fn write_lists(
    path: &std::path::Path,
    ctx: &Ctx<'_>,
    questions: &[(&Query, Lists)],
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut it = questions.iter();
    for c in ctx.convs {
        for _ in &c.queries {
            let Some((q, l)) = it.next() else { break };
            let line = serde_json::json!({
                "sample_id": c.sample_id,
                "question": q.text,
                "category": q.category,
                "evidence": q.evidence,
                "vector": l.vector,
                "text": l.text,
            });
            writeln!(w, "{line}")?;
        }
    }
    w.flush()?;
    Ok(())
}

/// `"(1:56 pm on 8 May, 2023) Caroline: Hi"` → `"Caroline: Hi"`.
fn strip_date(d: &str) -> &str {
    match d.strip_prefix('(').and_then(|r| r.split_once(") ")) {
        Some((_, rest)) => rest,
        None => d,
    }
}

/// Per question, the top `k` turns by cosine between the question and `document(turn)`.
async fn vector_lists(
    ctx: &Ctx<'_>,
    doc: &DocText,
    k: usize,
) -> anyhow::Result<Vec<Vec<(String, f64)>>> {
    let mut out = Vec::new();
    for c in ctx.convs {
        let texts: Vec<String> = (0..c.turns.len()).map(|i| document(&c.turns, i, doc)).collect();
        let mut dv = Vec::new();
        for chunk in texts.chunks(256) {
            dv.extend(ctx.embedder.embed(chunk).await?);
        }
        let qs: Vec<String> = c.queries.iter().map(|q| q.text.clone()).collect();
        let mut qv = Vec::new();
        for chunk in qs.chunks(256) {
            qv.extend(ctx.embedder.embed(chunk).await?);
        }
        for q in &qv {
            let mut scored: Vec<(f64, usize)> = dv
                .iter()
                .enumerate()
                .map(|(i, d)| (f64::from(engram_core::embed::dot(d, q)), i))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            out.push(scored.iter().take(k).map(|&(s, i)| (c.turns[i].0.clone(), s)).collect());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_take_neighbours_of_the_same_session_only() {
        let turns: Vec<(String, String)> = [
            ("D1:1", "(d1) A: a"),
            ("D1:2", "(d1) B: b"),
            ("D1:3", "(d1) A: c"),
            ("D2:1", "(d2) B: d"),
        ]
        .iter()
        .map(|(d, t)| (d.to_string(), t.to_string()))
        .collect();
        let doc = |i, name: &str| {
            let d = DOCS.iter().find(|d| d.name.contains(name)).unwrap();
            document(&turns, i, d)
        };
        assert_eq!(doc(1, "as stored"), "(d1) B: b");
        assert_eq!(doc(1, "without"), "B: b");
        assert_eq!(doc(0, "previous turn + the turn"), "(d1) A: a");
        assert_eq!(doc(1, "previous turn + the turn"), "A: a\n(d1) B: b");
        assert_eq!(doc(2, "the turn + next"), "(d1) A: c");
        assert_eq!(doc(1, "previous + the turn + next"), "A: a\n(d1) B: b\nA: c");
        assert_eq!(doc(2, "two previous"), "A: a\nB: b\n(d1) A: c");
        assert_eq!(doc(3, "two previous"), "(d2) B: d");
        assert_eq!(doc(2, "without speakers: two previous"), "a\nb\n(d1) A: c");
    }
}
