//! LoCoMo vector-only retrieval metric, shared by the examples.
//!
//! Implements the definition of `/work/shared/eval/locomo/README.md`: one corpus per
//! conversation, each turn stored as `(<session date>) <speaker>: <text>` plus
//! ` [shares <blip_caption>]` when present; one query per question of categories 1–4 with
//! usable evidence (at least one evidence turn that exists in the corpus; every `D<s>:<t>` of
//! an evidence string is parsed, also in malformed strings like `"D8:6; D9:17"` and
//! `"D:11:26"`); turn Recall@k = fraction of the question's evidence turns in the top k,
//! averaged over questions.

use std::collections::HashMap;
use std::path::Path;

/// Default location of the public LoCoMo file.
pub const DEFAULT_DATA: &str = "/work/shared/eval/locomo/locomo_public.json";

/// The k of Recall@k reported.
pub const KS: [usize; 4] = [1, 5, 10, 20];

/// One conversation: its turns (the corpus) and its questions.
pub struct Conversation {
    pub docs: Vec<String>,
    pub queries: Vec<Query>,
}

/// One question and the indices (into `docs`) of its evidence turns.
pub struct Query {
    pub text: String,
    pub evidence: Vec<usize>,
}

/// Every `D<s>:<t>` in an evidence string (a stray `:` after the `D` is tolerated).
pub fn parse_evidence(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let digits = |mut j: usize| {
        let start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        (start, j)
    };
    while i < b.len() {
        if b[i] == b'D' {
            let mut j = i + 1;
            if j < b.len() && b[j] == b':' {
                j += 1;
            }
            let (s0, s1) = digits(j);
            if s1 > s0 && s1 < b.len() && b[s1] == b':' {
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

/// Load the conversations of a LoCoMo JSON file.
pub fn load(path: &Path) -> Vec<Conversation> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let samples: Vec<serde_json::Value> = serde_json::from_str(&text).expect("LoCoMo JSON");
    let mut out = Vec::new();
    for sample in samples {
        let conv = sample["conversation"].as_object().expect("conversation");
        let mut sessions: Vec<(u32, &serde_json::Value)> = conv
            .iter()
            .filter_map(|(k, v)| {
                let n = k.strip_prefix("session_")?.parse::<u32>().ok()?;
                v.is_array().then_some((n, v))
            })
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        let mut docs = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for (n, turns) in sessions {
            let date = conv
                .get(&format!("session_{n}_date_time"))
                .and_then(|d| d.as_str())
                .unwrap_or_default();
            for turn in turns.as_array().unwrap() {
                let mut doc = format!(
                    "({date}) {}: {}",
                    turn["speaker"].as_str().unwrap_or_default(),
                    turn["text"].as_str().unwrap_or_default()
                );
                if let Some(caption) = turn.get("blip_caption").and_then(|c| c.as_str()) {
                    doc.push_str(&format!(" [shares {caption}]"));
                }
                index.insert(turn["dia_id"].as_str().unwrap_or_default().to_owned(), docs.len());
                docs.push(doc);
            }
        }
        let mut queries = Vec::new();
        for qa in sample["qa"].as_array().expect("qa") {
            let category = qa["category"].as_u64().unwrap_or(0);
            if !(1..=4).contains(&category) {
                continue;
            }
            let mut evidence: Vec<usize> = qa["evidence"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e.as_str()).flat_map(parse_evidence).collect())
                .unwrap_or_else(Vec::<String>::new)
                .iter()
                .filter_map(|id| index.get(id).copied())
                .collect();
            evidence.sort_unstable();
            evidence.dedup();
            if evidence.is_empty() {
                continue;
            }
            let text =
                qa["question"].as_str().map_or_else(|| qa["question"].to_string(), str::to_owned);
            queries.push(Query { text, evidence });
        }
        out.push(Conversation { docs, queries });
    }
    out
}

/// Mean turn Recall@k for each k of [`KS`], given the vectors of every doc and query (same
/// nesting as `convs`; vectors unit length, so the dot product ranks).
pub fn recall(
    convs: &[Conversation],
    doc_vecs: &[Vec<Vec<f32>>],
    query_vecs: &[Vec<Vec<f32>>],
) -> [f64; 4] {
    let mut sums = [0f64; 4];
    let mut n = 0usize;
    for ((conv, docs), queries) in convs.iter().zip(doc_vecs).zip(query_vecs) {
        for (q, qv) in conv.queries.iter().zip(queries) {
            let mut scored: Vec<(f32, usize)> = docs
                .iter()
                .enumerate()
                .map(|(i, d)| (d.iter().zip(qv).map(|(a, b)| a * b).sum::<f32>(), i))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for (s, &k) in sums.iter_mut().zip(&KS) {
                let top: Vec<usize> = scored.iter().take(k).map(|x| x.1).collect();
                let hit = q.evidence.iter().filter(|e| top.contains(e)).count();
                *s += hit as f64 / q.evidence.len() as f64;
            }
            n += 1;
        }
    }
    sums.map(|s| s / n.max(1) as f64)
}

/// Vectors of each conversation's texts.
pub type Vectors = Vec<Vec<Vec<f32>>>;

/// Embed every doc and query of `convs` with `embed` (called once per conversation and
/// kind, with all its texts).
pub fn embed_all(
    convs: &[Conversation],
    mut embed: impl FnMut(&[String]) -> Vec<Vec<f32>>,
) -> (Vectors, Vectors) {
    let docs = convs.iter().map(|c| embed(&c.docs)).collect();
    let queries = convs
        .iter()
        .map(|c| embed(&c.queries.iter().map(|q| q.text.clone()).collect::<Vec<_>>()))
        .collect();
    (docs, queries)
}

/// `| name | R@1 | R@5 | R@10 | R@20 |` row.
pub fn row(name: &str, r: [f64; 4]) -> String {
    format!("| {name} | {:.3} | {:.3} | {:.3} | {:.3} |", r[0], r[1], r[2], r[3])
}
