//! `locomo`: retrieval quality on the public LoCoMo conversations, through the real engine.
//!
//! The metric is the one of `/work/shared/eval/locomo/README.md`:
//!
//! - one corpus per conversation: each turn is remembered (`remember_batch`, `dedup = false`)
//!   as `(<session date>) <speaker>: <text>`, plus ` [shares <blip_caption>]` when present,
//!   for a user of its own (`user_id` = the sample id), with its `dia_id` in `metadata`;
//! - one query per question of categories 1–4 with usable evidence: every `D<s>:<t>` of
//!   every evidence string is parsed (also in malformed strings such as `"D8:6; D9:17"`; a
//!   stray colon as in `"D:11:26"` is tolerated and read as `D11:26`), ids that name no turn
//!   are dropped, and a question left without evidence is skipped;
//! - turn Recall@k = fraction of the question's evidence turns among the top k hits of
//!   `Engine::search` (limit 20), averaged over questions, per category and overall.
//!
//! Each mode gets a fresh store, because a search bumps the access count of what it returns
//! and so (slightly) changes later rankings, exactly as in production.
//!
//! `--diagnose` adds a separate analysis of the hybrid ranking: one search per question
//! with a large candidate count, `explain: true` and a limit that returns every candidate,
//! whose per-list ranks are then re-fused offline (other candidate counts, RRF constants,
//! list weights). See [`diagnose`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use engram_core::embed::Embedder;
use engram_core::engine::{Engine, EngineConfig, Hit, RememberInput, SearchInput, SearchMode};
use engram_core::model::{KeyRole, Principal, TenantId, UserId};
use serde::Serialize;

use crate::ScratchArgs;
use crate::embedder::EmbedderChoice;
use crate::report::{self, Latency};

/// Default location of the public LoCoMo file.
const DEFAULT_DATA: &str = "/work/shared/eval/locomo/locomo_public.json";

/// The k of Recall@k.
pub const KS: [usize; 4] = [1, 5, 10, 20];

/// Category names of the README.
fn category_name(c: u8) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}

/// `--mode` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Hybrid,
    Vector,
    Text,
    All,
}

/// One evaluated search mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Hybrid,
    Vector,
    Text,
}

impl Mode {
    fn engine(self) -> SearchMode {
        match self {
            Mode::Hybrid => SearchMode::Hybrid,
            Mode::Vector => SearchMode::VectorOnly,
            Mode::Text => SearchMode::TextOnly,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Vector => "vector",
            Mode::Text => "text",
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "builtin")]
    embedder: EmbedderChoice,
    #[arg(long, value_enum, default_value = "all")]
    mode: ModeArg,
    /// The LoCoMo JSON file.
    #[arg(long, default_value = DEFAULT_DATA)]
    data: PathBuf,
    /// Candidates taken from each list before fusion (`EngineConfig::candidates`; default:
    /// the engine's default).
    #[arg(long)]
    candidates: Option<usize>,
    /// Also analyse the hybrid ranking (candidate counts, RRF constants, list weights).
    #[arg(long)]
    diagnose: bool,
    /// Candidates per list for `--diagnose`.
    #[arg(long, default_value_t = 200)]
    diagnose_candidates: usize,
    #[command(flatten)]
    scratch: ScratchArgs,
}

// ---------------------------------------------------------------------------------- data

/// One conversation: its turns and its questions.
pub struct Conversation {
    pub sample_id: String,
    /// `(dia_id, content)` in session order.
    pub turns: Vec<(String, String)>,
    pub queries: Vec<Query>,
}

/// One question with its (deduplicated, existing) evidence turn ids.
pub struct Query {
    pub text: String,
    pub category: u8,
    pub evidence: Vec<String>,
}

/// Every `D<s>:<t>` in an evidence string, as `D<s>:<t>` (`"D:11:26"` reads as `D11:26`).
pub fn parse_evidence(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let digits = |mut j: usize| {
        let start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        (start, j)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'D' {
            let mut j = i + 1;
            if b.get(j) == Some(&b':') {
                j += 1;
            }
            let (s0, s1) = digits(j);
            if s1 > s0 && b.get(s1) == Some(&b':') {
                let (t0, t1) = digits(s1 + 1);
                if t1 > t0 {
                    out.push(format!("D{}:{}", &s[s0..s1], &s[t0..t1]));
                    i = t1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// Load and prepare every conversation of a LoCoMo file.
pub fn load(path: &std::path::Path) -> anyhow::Result<Vec<Conversation>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let samples: Vec<serde_json::Value> = serde_json::from_str(&text)?;
    let mut out = Vec::new();
    for sample in samples {
        let sample_id = sample["sample_id"].as_str().context("sample_id")?.to_string();
        let conv = sample["conversation"].as_object().context("conversation")?;
        let mut sessions: Vec<(u32, &Vec<serde_json::Value>)> = conv
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("session_")?.parse().ok()?, v.as_array()?)))
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        let mut turns = Vec::new();
        for (n, list) in sessions {
            let date = conv
                .get(&format!("session_{n}_date_time"))
                .and_then(|d| d.as_str())
                .unwrap_or_default();
            for t in list {
                let mut content = format!(
                    "({date}) {}: {}",
                    t["speaker"].as_str().unwrap_or_default(),
                    t["text"].as_str().unwrap_or_default()
                );
                if let Some(c) = t.get("blip_caption").and_then(|c| c.as_str()) {
                    content.push_str(&format!(" [shares {c}]"));
                }
                turns.push((t["dia_id"].as_str().context("dia_id")?.to_string(), content));
            }
        }
        let ids: std::collections::HashSet<&str> = turns.iter().map(|(d, _)| d.as_str()).collect();
        let mut queries = Vec::new();
        for qa in sample["qa"].as_array().context("qa")? {
            let category = qa["category"].as_u64().unwrap_or(0) as u8;
            if !(1..=4).contains(&category) {
                continue;
            }
            let mut evidence: Vec<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.as_str())
                .flat_map(parse_evidence)
                .filter(|d| ids.contains(d.as_str()))
                .collect();
            evidence.sort();
            evidence.dedup();
            if evidence.is_empty() {
                continue;
            }
            let text = match &qa["question"] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            queries.push(Query { text, category, evidence });
        }
        out.push(Conversation { sample_id, turns, queries });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------- metric

/// Sums of Recall@k per category.
#[derive(Debug, Clone, Default)]
pub struct Recall {
    /// category → (questions, Σ recall@k for each k of [`KS`]).
    by_cat: BTreeMap<u8, (usize, [f64; 4])>,
}

impl Recall {
    /// Add one question: `ranked` are the returned dia_ids, best first.
    pub fn add(&mut self, q: &Query, ranked: &[String]) {
        let e = self.by_cat.entry(q.category).or_default();
        e.0 += 1;
        for (s, &k) in e.1.iter_mut().zip(&KS) {
            let top = &ranked[..k.min(ranked.len())];
            let found = q.evidence.iter().filter(|d| top.contains(d)).count();
            *s += found as f64 / q.evidence.len() as f64;
        }
    }

    /// `(label, questions, mean recall@k)` per category, then overall.
    pub fn rows(&self) -> Vec<(String, usize, [f64; 4])> {
        let mut out = Vec::new();
        let mut n_all = 0;
        let mut s_all = [0f64; 4];
        for (c, (n, s)) in &self.by_cat {
            out.push((format!("{c} {}", category_name(*c)), *n, s.map(|x| x / *n as f64)));
            n_all += n;
            for (a, b) in s_all.iter_mut().zip(s) {
                *a += b;
            }
        }
        out.push(("overall".to_string(), n_all, s_all.map(|x| x / n_all.max(1) as f64)));
        out
    }

    pub fn overall(&self) -> [f64; 4] {
        self.rows().last().map_or([0.0; 4], |r| r.2)
    }
}

#[derive(Debug, Serialize)]
struct CategoryRow {
    category: String,
    questions: usize,
    recall_at_1: f64,
    recall_at_5: f64,
    recall_at_10: f64,
    recall_at_20: f64,
}

fn category_rows(r: &Recall) -> Vec<CategoryRow> {
    r.rows()
        .into_iter()
        .map(|(category, questions, v)| CategoryRow {
            category,
            questions,
            recall_at_1: v[0],
            recall_at_5: v[1],
            recall_at_10: v[2],
            recall_at_20: v[3],
        })
        .collect()
}

#[derive(Debug, Serialize)]
struct ModeResult {
    mode: Mode,
    ingest_seconds: f64,
    search_latency: Latency,
    categories: Vec<CategoryRow>,
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    embedder: EmbedderChoice,
    model_id: String,
    data: String,
    conversations: usize,
    turns: usize,
    questions: usize,
    candidates: usize,
    modes: Vec<ModeResult>,
    diagnosis: Option<diagnose::Diagnosis>,
}

// ---------------------------------------------------------------------------------- runs

fn principal() -> Principal {
    Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin }
}

/// A fresh store holding every conversation, one user per conversation.
async fn ingest(
    embedder: &Arc<dyn Embedder>,
    cfg: EngineConfig,
    convs: &[Conversation],
    dir: &std::path::Path,
) -> anyhow::Result<(Engine, f64)> {
    let store = engram_store::open_sqlite(dir).await?;
    let engine = Engine::new(store, embedder.clone(), cfg).await?;
    let p = principal();
    let t = Instant::now();
    for c in convs {
        let user = UserId::parse(c.sample_id.clone())?;
        for chunk in c.turns.chunks(256) {
            let inputs = chunk
                .iter()
                .map(|(dia, content)| RememberInput {
                    user_id: Some(user.clone()),
                    content: content.clone(),
                    metadata: Some(serde_json::json!({ "dia_id": dia })),
                    ..Default::default()
                })
                .collect();
            engine.remember_batch(&p, inputs, false).await?;
        }
    }
    Ok((engine, t.elapsed().as_secs_f64()))
}

/// The dia_id a hit carries in its metadata.
pub fn dia_id(h: &Hit) -> Option<String> {
    match h {
        Hit::Memory { memory, .. } => memory.metadata.get("dia_id")?.as_str().map(str::to_string),
        Hit::Message { .. } => None,
    }
}

async fn eval_mode(
    engine: &Engine,
    convs: &[Conversation],
    mode: Mode,
) -> anyhow::Result<(Recall, Latency)> {
    let p = principal();
    let mut recall = Recall::default();
    let mut times: Vec<Duration> = Vec::new();
    for c in convs {
        let user = UserId::parse(c.sample_id.clone())?;
        for q in &c.queries {
            let input = SearchInput {
                query: q.text.clone(),
                user_id: Some(user.clone()),
                limit: KS[KS.len() - 1],
                mode: mode.engine(),
                ..Default::default()
            };
            let t = Instant::now();
            let hits = engine.search(&p, input).await?;
            times.push(t.elapsed());
            let ranked: Vec<String> = hits.iter().filter_map(dia_id).collect();
            recall.add(q, &ranked);
        }
    }
    Ok((recall, Latency::of(&times)))
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    let convs = load(&a.data)?;
    let embedder = a.embedder.build()?;
    let modes = match a.mode {
        ModeArg::Hybrid => vec![Mode::Hybrid],
        ModeArg::Vector => vec![Mode::Vector],
        ModeArg::Text => vec![Mode::Text],
        ModeArg::All => vec![Mode::Hybrid, Mode::Vector, Mode::Text],
    };
    let defaults = EngineConfig::default();
    let candidates = a.candidates.unwrap_or(defaults.candidates);
    let cfg = EngineConfig { candidates, ..defaults.clone() };
    let mut results = Vec::new();
    for mode in modes {
        eprintln!("locomo: {} embedder, {} mode…", a.embedder.name(), mode.name());
        let dir = a.scratch.tempdir()?;
        let (engine, ingest_seconds) = ingest(&embedder, cfg.clone(), &convs, dir.path()).await?;
        let (recall, search_latency) = eval_mode(&engine, &convs, mode).await?;
        results.push(ModeResult {
            mode,
            ingest_seconds,
            search_latency,
            categories: category_rows(&recall),
        });
    }
    let diagnosis = if a.diagnose {
        eprintln!("locomo: diagnosis with {} candidates per list…", a.diagnose_candidates);
        let c = a.diagnose_candidates;
        let cfg = EngineConfig { candidates: c, max_limit: 2 * c, ..defaults };
        let dir = a.scratch.tempdir()?;
        let (engine, _) = ingest(&embedder, cfg, &convs, dir.path()).await?;
        Some(diagnose::run(&engine, &convs, c).await?)
    } else {
        None
    };

    let out = Output {
        environment: report::environment(),
        embedder: a.embedder,
        model_id: embedder.model_id().to_string(),
        data: a.data.display().to_string(),
        conversations: convs.len(),
        turns: convs.iter().map(|c| c.turns.len()).sum(),
        questions: convs.iter().map(|c| c.queries.len()).sum(),
        candidates,
        modes: results,
        diagnosis,
    };
    if json {
        return report::print_json(&out);
    }
    println!(
        "LoCoMo turn recall, {} embedder ({}), {} conversations, {} turns, {} questions \
         (categories 1-4), {} candidates per list ({})\n",
        out.embedder.name(),
        out.model_id,
        out.conversations,
        out.turns,
        out.questions,
        out.candidates,
        out.environment
    );
    let mut rows = Vec::new();
    for m in &out.modes {
        for c in &m.categories {
            rows.push(vec![
                m.mode.name().to_string(),
                if c.category == "overall" {
                    "**overall**".to_string()
                } else {
                    c.category.clone()
                },
                c.questions.to_string(),
                format!("{:.3}", c.recall_at_1),
                format!("{:.3}", c.recall_at_5),
                format!("{:.3}", c.recall_at_10),
                format!("{:.3}", c.recall_at_20),
            ]);
        }
    }
    print!(
        "{}",
        report::table(&["mode", "category", "questions", "R@1", "R@5", "R@10", "R@20"], &rows)
    );
    println!();
    let rows: Vec<Vec<String>> = out
        .modes
        .iter()
        .map(|m| {
            vec![
                m.mode.name().to_string(),
                format!("{:.1}", m.ingest_seconds),
                format!("{:.2}", m.search_latency.p50_ms),
                format!("{:.2}", m.search_latency.p95_ms),
            ]
        })
        .collect();
    print!(
        "{}",
        report::table(&["mode", "ingest (s)", "search p50 (ms)", "search p95 (ms)"], &rows)
    );
    if let Some(d) = &out.diagnosis {
        println!();
        print!("{}", d.markdown());
    }
    Ok(())
}

pub mod diagnose {
    //! Offline re-fusion of the hybrid candidate lists.
    //!
    //! One hybrid search per question with `candidates = C` and `limit = 2C` returns every
    //! candidate of both lists with its `explain` (vector rank, text rank). Since ranks do
    //! not depend on access counts, they are the raw lists the engine fuses; from them this
    //! module recomputes the ranking under other settings:
    //!
    //! - each list alone (what the vector-only / text-only modes return);
    //! - `coverage@c`: the share of evidence found anywhere in either list's top c (the
    //!   ceiling of any fusion of c candidates per list);
    //! - plain RRF (no decay/importance/rating factors) for candidate counts c, RRF
    //!   constants k and list weights w (score = w·1/(k+r_vec) + (1−w)·1/(k+r_text), ×2 so
    //!   w = 0.5 is the engine's formula).
    //!
    //! Ties are broken by the better vector rank, then the better text rank (the engine
    //! breaks them arbitrarily).

    use serde::Serialize;

    use super::{Conversation, Recall, dia_id, principal};
    use crate::report;
    use engram_core::engine::{Engine, Hit, SearchInput, SearchMode};
    use engram_core::model::UserId;

    /// One candidate: its dia_id and 1-based ranks in each list.
    #[derive(Debug, Clone)]
    struct Cand {
        dia: String,
        vec: Option<usize>,
        text: Option<usize>,
    }

    #[derive(Debug, Serialize)]
    pub struct Variant {
        pub name: String,
        pub recall: [f64; 4],
    }

    #[derive(Debug, Serialize)]
    pub struct Diagnosis {
        pub candidates: usize,
        pub variants: Vec<Variant>,
        /// Per category, R@10 of the best RRF variant found vs the engine's setting.
        pub notes: Vec<String>,
    }

    impl Diagnosis {
        pub fn markdown(&self) -> String {
            let rows: Vec<Vec<String>> = self
                .variants
                .iter()
                .map(|v| {
                    let mut r = vec![v.name.clone()];
                    r.extend(v.recall.iter().map(|x| format!("{x:.3}")));
                    r
                })
                .collect();
            let mut s = format!(
                "Hybrid diagnosis (raw lists of {} candidates each, re-fused offline; overall)\n\n",
                self.candidates
            );
            s.push_str(&report::table(&["variant", "R@1", "R@5", "R@10", "R@20"], &rows));
            for n in &self.notes {
                s.push_str(&format!("\n{n}\n"));
            }
            s
        }
    }

    fn rank_by(cands: &[Cand], score: impl Fn(&Cand) -> Option<f64>) -> Vec<String> {
        let mut scored: Vec<(f64, usize, usize, &str)> = cands
            .iter()
            .filter_map(|c| {
                score(c).map(|s| {
                    (s, c.vec.unwrap_or(usize::MAX), c.text.unwrap_or(usize::MAX), c.dia.as_str())
                })
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        scored.into_iter().map(|x| x.3.to_string()).collect()
    }

    fn rrf(c: &Cand, cap: usize, k: f64, w_vec: f64) -> Option<f64> {
        let v = c.vec.filter(|&r| r <= cap).map(|r| 2.0 * w_vec / (k + r as f64));
        let t = c.text.filter(|&r| r <= cap).map(|r| 2.0 * (1.0 - w_vec) / (k + r as f64));
        match (v, t) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        }
    }

    pub async fn run(
        engine: &Engine,
        convs: &[Conversation],
        candidates: usize,
    ) -> anyhow::Result<Diagnosis> {
        let p = principal();
        // Per question: (its conversation index, query index, candidates).
        let mut all: Vec<(usize, usize, Vec<Cand>)> = Vec::new();
        for (ci, c) in convs.iter().enumerate() {
            let user = UserId::parse(c.sample_id.clone())?;
            for (qi, q) in c.queries.iter().enumerate() {
                let input = SearchInput {
                    query: q.text.clone(),
                    user_id: Some(user.clone()),
                    limit: 2 * candidates,
                    explain: true,
                    mode: SearchMode::Hybrid,
                    ..Default::default()
                };
                let hits = engine.search(&p, input).await?;
                let cands = hits
                    .iter()
                    .filter_map(|h| {
                        let Hit::Memory { explain, .. } = h else { return None };
                        Some(Cand {
                            dia: dia_id(h)?,
                            vec: explain.vector_rank,
                            text: explain.text_rank,
                        })
                    })
                    .collect();
                all.push((ci, qi, cands));
            }
        }
        let eval = |f: &dyn Fn(&Cand) -> Option<f64>| {
            let mut r = Recall::default();
            for (ci, qi, cands) in &all {
                r.add(&convs[*ci].queries[*qi], &rank_by(cands, f));
            }
            r
        };
        let mut variants = Vec::new();
        let mut push = |name: String, r: &Recall| {
            variants.push(Variant { name, recall: r.overall() });
        };
        push("vector list alone".into(), &eval(&|c| c.vec.map(|r| -(r as f64))));
        push("text (BM25) list alone".into(), &eval(&|c| c.text.map(|r| -(r as f64))));
        // Coverage: any candidate within the top c of either list counts as found (reported
        // in every R@k column, since it is a set, not a ranking).
        for cap in [10usize, 20, 50, 100, 200].into_iter().filter(|&c| c <= candidates) {
            let mut found = 0f64;
            for (ci, qi, cands) in &all {
                let q = &convs[*ci].queries[*qi];
                let hit = q
                    .evidence
                    .iter()
                    .filter(|e| {
                        cands.iter().any(|c| {
                            &&c.dia == e
                                && (c.vec.is_some_and(|r| r <= cap)
                                    || c.text.is_some_and(|r| r <= cap))
                        })
                    })
                    .count();
                found += hit as f64 / q.evidence.len() as f64;
            }
            let v = found / all.len().max(1) as f64;
            variants.push(Variant {
                name: format!("coverage: evidence in either top-{cap}"),
                recall: [v; 4],
            });
        }
        let mut best: Option<(String, f64)> = None;
        let mut consider = |name: String, r: Recall, variants: &mut Vec<Variant>| {
            let r10 = r.overall()[2];
            if best.as_ref().is_none_or(|b| r10 > b.1) {
                best = Some((name.clone(), r10));
            }
            variants.push(Variant { name, recall: r.overall() });
        };
        for cap in [10usize, 20, 30, 50, 100, 200].into_iter().filter(|&c| c <= candidates) {
            let r = eval(&|c| rrf(c, cap, 60.0, 0.5));
            consider(format!("RRF k=60, {cap} candidates/list"), r, &mut variants);
        }
        for k in [1.0, 5.0, 10.0, 20.0, 30.0, 120.0] {
            let r = eval(&|c| rrf(c, 50, k, 0.5));
            consider(format!("RRF k={k}, 50 candidates/list"), r, &mut variants);
        }
        for w in [0.3, 0.4, 0.6, 0.7, 0.8] {
            let r = eval(&|c| rrf(c, 50, 60.0, w));
            consider(format!("RRF k=60, 50/list, vector weight {w}"), r, &mut variants);
        }
        for (k, w) in [(10.0, 0.6), (10.0, 0.7), (20.0, 0.6), (20.0, 0.7), (5.0, 0.6)] {
            let r = eval(&|c| rrf(c, 50, k, w));
            consider(format!("RRF k={k}, 50/list, vector weight {w}"), r, &mut variants);
        }
        let mut notes = Vec::new();
        if let Some((name, r10)) = best {
            notes.push(format!("Best R@10 among the RRF variants above: {r10:.3} ({name})."));
        }
        Ok(Diagnosis { candidates, variants, notes })
    }
}
