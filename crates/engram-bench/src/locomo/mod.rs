//! `locomo`: retrieval quality on the public LoCoMo conversations, through the real engine.
//!
//! The metric is the one of `/work/shared/eval/locomo/README.md`:
//!
//! - one corpus per conversation: each turn is remembered (`remember_batch`, `dedup = false`)
//!   as `(<session date>) <speaker>: <text>`, plus ` [shares <blip_caption>]` when present,
//!   into a store of its own, for a user of its own (`user_id` = the sample id), with its
//!   `dia_id` in `metadata`;
//! - one query per question of categories 1–4 with usable evidence: every `D<s>:<t>` of
//!   every evidence string is parsed (also in malformed strings such as `"D8:6; D9:17"`; a
//!   stray colon as in `"D:11:26"` is tolerated and read as `D11:26`), ids that name no turn
//!   are dropped, and a question left without evidence is skipped;
//! - turn Recall@k = fraction of the question's evidence turns among the top k hits of
//!   `Engine::search` (limit 20), averaged over questions, per category and overall.
//!
//! `--corpus messages` instead ingests each session of a conversation as a conversation of
//! transcript messages (`append_messages`: the same turn text as content, the session date
//! also as `created_at`, the first speaker as `user` and the other as `assistant`, the
//! `dia_id` in `metadata`), embeds them as the background job does
//! (`Engine::embed_conversation`: each message with the two before it), and searches with
//! `sources: ["messages"]`: how an agent platform that sends its transcripts searches them.
//!
//! **Isolation.** Every search bumps the access count of what it returns, and the ranking
//! boosts often-accessed memories, so a question's ranking depends on the questions asked
//! before it. By default every question is therefore asked of a pristine copy of its
//! conversation's store (the data dir as it was right after ingestion), which makes the
//! metric independent of question order. `--sequential` instead asks all questions of a
//! conversation one after the other against one store, as a deployed engram would see them.
//!
//! `--diagnose` adds an analysis of the hybrid ranking ([`diagnose`]) and of alternative
//! full-text set-ups ([`fts`]).

mod abstain;
mod corpus_dump;
mod diagnose;
mod fts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use engram_core::embed::Embedder;
use engram_core::engine::{
    Engine, EngineConfig, Hit, MessageInput, RememberInput, SearchInput, SearchMode, SearchSource,
};
use engram_core::model::{ConversationId, KeyRole, MessageRole, Principal, TenantId, UserId};
use serde::Serialize;

use crate::ScratchArgs;
use crate::embedder::EmbedderChoice;
use crate::report::{self, Latency};

/// Default location of the public LoCoMo file.
pub const DEFAULT_DATA: &str = "/work/shared/eval/locomo/locomo_public.json";

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

/// `--corpus` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Corpus {
    Memories,
    Messages,
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
    /// What the turns become: explicit memories, or transcript messages of one
    /// conversation per session (searched with `sources: ["messages"]`).
    #[arg(long, value_enum, default_value = "memories")]
    corpus: Corpus,
    /// The LoCoMo JSON file.
    #[arg(long, default_value = DEFAULT_DATA)]
    data: PathBuf,
    /// Candidates taken from each list before fusion (`EngineConfig::candidates`; default:
    /// the engine's default).
    #[arg(long)]
    candidates: Option<usize>,
    /// Ask the questions of a conversation one after the other against one store (access
    /// counts accumulate), instead of each against a pristine copy.
    #[arg(long)]
    sequential: bool,
    /// Also analyse the hybrid ranking (candidate counts, RRF constants, list weights,
    /// score fusion) and alternative full-text set-ups (stemming).
    #[arg(long)]
    diagnose: bool,
    /// With `--corpus messages`: write the session date into each message's text, as the
    /// metric's turn text does (`(<date>) <speaker>: <text>`), instead of sending it only as
    /// `created_at` the way a client does (the default, the realistic figure).
    #[arg(long)]
    date_in_text: bool,
    /// Also measure abstention: how often a search returns nothing at each `min_score`
    /// (adversarial questions, queries on unrelated topics) against how often an answerable
    /// question loses its evidence from the top 10.
    #[arg(long)]
    abstention: bool,
    /// Rank by relevance instead of by the fused rank (`EngineConfig::rank_by_relevance`).
    #[arg(long)]
    rank_by_relevance: bool,
    /// Candidates per list for `--diagnose`.
    #[arg(long, default_value_t = 200)]
    diagnose_candidates: usize,
    /// With `--diagnose`: also write the raw lists of every question (JSON lines:
    /// `sample_id`, `question`, `category`, `evidence`, `vector` and `text` as
    /// `[dia_id, score]` best first) to this file, for offline analysis.
    #[arg(long)]
    dump_lists: Option<PathBuf>,
    /// Also write every question's fused candidates, with their ranks in each list, to this
    /// file (JSON lines), for offline re-ranking (`benches/locomo_rerank.py`).
    #[arg(long)]
    dump_hits: Option<PathBuf>,
    /// With `--corpus messages`: write every turn (text and vectors) and every question
    /// (query vector, keyword list 200 deep) to this file (JSON lines), for offline
    /// experiments on candidate generation.
    #[arg(long)]
    dump_corpus: Option<PathBuf>,
    #[command(flatten)]
    scratch: ScratchArgs,
}

// ---------------------------------------------------------------------------------- data

/// One conversation: its turns and its questions.
pub struct Conversation {
    pub sample_id: String,
    /// `(dia_id, content)` in session order.
    pub turns: Vec<(String, String)>,
    /// What each turn of `turns` (same index) needs to become a transcript message.
    pub messages: Vec<TurnMessage>,
    pub queries: Vec<Query>,
    /// The adversarial questions (category 5): their answers are not in the conversation.
    pub adversarial: Vec<String>,
}

/// The session facts of a turn that make it a transcript message (its dia_id and text are
/// those of `Conversation::turns`).
pub struct TurnMessage {
    /// Session number (one conversation per session).
    pub session: u32,
    /// The session's date as written in the data (`"1:56 pm on 8 May, 2023"`).
    pub date: String,
    /// The conversation's first speaker is the `user`.
    pub first_speaker: bool,
    /// `<speaker>: <text>` plus the caption: the turn without its date, as a client sends it.
    pub plain: String,
}

/// `"1:56 pm on 8 May, 2023"` → that UTC time.
pub fn parse_session_date(s: &str) -> Option<time::OffsetDateTime> {
    let (clock, day) = s.trim().split_once(" on ")?;
    let (hm, ampm) = clock.trim().split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let (mut h, m): (u8, u8) = (h.parse().ok()?, m.parse().ok()?);
    match ampm.to_ascii_lowercase().as_str() {
        "am" if h == 12 => h = 0,
        "am" => {}
        "pm" if h != 12 => h += 12,
        "pm" => {}
        _ => return None,
    }
    let mut parts = day.split_whitespace();
    let d: u8 = parts.next()?.parse().ok()?;
    let month = parts.next()?.trim_end_matches(',');
    let y: i32 = parts.next()?.parse().ok()?;
    let month = time::Month::try_from(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ]
        .iter()
        .position(|n| n.eq_ignore_ascii_case(month))? as u8
            + 1,
    )
    .ok()?;
    let date = time::Date::from_calendar_date(y, month, d).ok()?;
    Some(date.with_hms(h, m, 0).ok()?.assume_utc())
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
pub fn load(path: &Path) -> anyhow::Result<Vec<Conversation>> {
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
        let mut messages = Vec::new();
        let mut first: Option<String> = None;
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
                let speaker = t["speaker"].as_str().unwrap_or_default().to_string();
                let mut plain = format!("{speaker}: {}", t["text"].as_str().unwrap_or_default());
                if let Some(c) = t.get("blip_caption").and_then(|c| c.as_str()) {
                    content.push_str(&format!(" [shares {c}]"));
                    plain.push_str(&format!(" [shares {c}]"));
                }
                let dia_id = t["dia_id"].as_str().context("dia_id")?.to_string();
                let first_speaker = *first.get_or_insert_with(|| speaker.clone()) == speaker;
                messages.push(TurnMessage {
                    session: n,
                    date: date.to_string(),
                    first_speaker,
                    plain,
                });
                turns.push((dia_id, content));
            }
        }
        let ids: std::collections::HashSet<&str> = turns.iter().map(|(d, _)| d.as_str()).collect();
        let mut queries = Vec::new();
        let mut adversarial = Vec::new();
        for qa in sample["qa"].as_array().context("qa")? {
            let category = qa["category"].as_u64().unwrap_or(0) as u8;
            if category == 5
                && let Some(q) = qa["question"].as_str()
            {
                adversarial.push(q.to_string());
            }
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
            let text =
                qa["question"].as_str().map_or_else(|| qa["question"].to_string(), str::to_string);
            queries.push(Query { text, category, evidence });
        }
        out.push(Conversation { sample_id, turns, messages, queries, adversarial });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------- metric

/// Sums of Recall@k per category.
#[derive(Debug, Clone, Default)]
pub struct Recall {
    /// category → (questions, Σ recall@k for each k of [`KS`]).
    by_cat: BTreeMap<u8, (usize, [f64; 4])>,
    /// The questions that name a date or month ("on October 13, 2023", "in July 2023"),
    /// whatever their category: a row of their own (issue 13's "questions that name a
    /// date"), counted in their categories too.
    dated: (usize, [f64; 4]),
}

impl Recall {
    /// Add one question: `ranked` are the returned dia_ids, best first.
    pub fn add(&mut self, q: &Query, ranked: &[String]) {
        let recall = |k: usize| {
            let top = &ranked[..k.min(ranked.len())];
            let found = q.evidence.iter().filter(|d| top.contains(d)).count();
            found as f64 / q.evidence.len() as f64
        };
        let e = self.by_cat.entry(q.category).or_default();
        e.0 += 1;
        for (s, &k) in e.1.iter_mut().zip(&KS) {
            *s += recall(k);
        }
        if engram_core::when::query_span(&q.text, None).is_some() {
            self.dated.0 += 1;
            for (s, &k) in self.dated.1.iter_mut().zip(&KS) {
                *s += recall(k);
            }
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
        let (n, s) = self.dated;
        if n > 0 {
            out.push(("naming a date (any category)".to_string(), n, s.map(|x| x / n as f64)));
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
    /// `Engine::search` call only (with `isolated`, the first search of a fresh store).
    search_latency: Latency,
    categories: Vec<CategoryRow>,
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    embedder: EmbedderChoice,
    model_id: String,
    corpus: Corpus,
    data: String,
    conversations: usize,
    turns: usize,
    questions: usize,
    candidates: usize,
    /// `isolated` (each question against a pristine store) or `sequential`.
    protocol: &'static str,
    ingest_seconds: f64,
    modes: Vec<ModeResult>,
    diagnosis: Option<diagnose::Diagnosis>,
    abstention: Option<abstain::Abstention>,
    /// Messages carry their date in their text (`--date-in-text`).
    date_in_text: bool,
}

// ---------------------------------------------------------------------------------- stores

pub fn principal() -> Principal {
    Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin }
}

/// A conversation ingested into its own data dir. The engine stays open (and idle) for as
/// long as copies are taken, so no checkpoint rewrites the files meanwhile.
pub struct Pristine {
    dir: tempfile::TempDir,
    _engine: Engine,
}

impl Pristine {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Open an engine on a fresh copy of this store (the database and its write-ahead log;
    /// SQLite rebuilds the shared-memory index from the log).
    pub async fn open_copy(
        &self,
        scratch: &ScratchArgs,
        embedder: &Arc<dyn Embedder>,
        cfg: EngineConfig,
    ) -> anyhow::Result<(tempfile::TempDir, Engine)> {
        let tmp = scratch.tempdir()?;
        let dst = tmp.path().join("data");
        std::fs::create_dir_all(&dst)?;
        for e in std::fs::read_dir(self.data())? {
            let e = e?;
            let name = e.file_name();
            if e.file_type()?.is_file() && !name.to_string_lossy().ends_with("-shm") {
                std::fs::copy(e.path(), dst.join(&name))?;
            }
        }
        let store = engram_store::open_sqlite(&dst).await?;
        let engine = Engine::new(store, embedder.clone(), cfg).await?;
        Ok((tmp, engine))
    }
}

/// Remember every turn of `c` into a new store (its own data dir, its own user), as
/// memories or as transcript messages.
async fn ingest(
    scratch: &ScratchArgs,
    embedder: &Arc<dyn Embedder>,
    c: &Conversation,
    corpus: Corpus,
    date_in_text: bool,
) -> anyhow::Result<Pristine> {
    let dir = scratch.tempdir()?;
    let store = engram_store::open_sqlite(&dir.path().join("data")).await?;
    let engine = Engine::new(store, embedder.clone(), EngineConfig::default()).await?;
    let p = principal();
    let user = UserId::parse(c.sample_id.clone())?;
    if corpus == Corpus::Messages {
        // Turn indexes per session, in order.
        let mut sessions: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, m) in c.messages.iter().enumerate() {
            sessions.entry(m.session).or_default().push(i);
        }
        for (n, turns) in sessions {
            let conv = ConversationId::parse(format!("{}-session-{n}", c.sample_id))?;
            let inputs = turns
                .iter()
                .map(|&i| {
                    let ((dia_id, content), m) = (&c.turns[i], &c.messages[i]);
                    MessageInput {
                        role: if m.first_speaker {
                            MessageRole::User
                        } else {
                            MessageRole::Assistant
                        },
                        content: if date_in_text { content.clone() } else { m.plain.clone() },
                        created_at: parse_session_date(&m.date),
                        metadata: Some(serde_json::json!({ "dia_id": dia_id })),
                        ..Default::default()
                    }
                })
                .collect();
            engine.append_messages(&p, conv.clone(), Some(user.clone()), None, inputs).await?;
            // What the background job does (the bench runs no workers).
            engine.services().embed_conversation(&p.tenant, &conv).await?;
        }
        return Ok(Pristine { dir, _engine: engine });
    }
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
    Ok(Pristine { dir, _engine: engine })
}

/// The dia_id a hit carries in its metadata.
pub fn dia_id(h: &Hit) -> Option<String> {
    match h {
        Hit::Memory { memory, .. } => memory.metadata.get("dia_id")?.as_str().map(str::to_string),
        Hit::Message { message, .. } => {
            message.metadata.get("dia_id")?.as_str().map(str::to_string)
        }
        // The bench ingests no LLM summaries: a summary carries no turn.
        Hit::Summary { .. } => None,
    }
}

/// Appends question `q`'s fused candidates to `path` (JSON lines: `sample`, `q`, `cat`, `ev`,
/// and `hits` best first, each with its dia_id `d`, `score`, the ranks `v`/`t`/`dr` in the
/// vector, keyword and date lists, `vs` the cosine, `tc` the keyword coverage and `rank` the
/// rank score), searched as `input` but with `explain` and no score floor, for offline
/// re-ranking experiments (`benches/locomo_rerank.py`).
async fn dump_hits(
    engine: &Engine,
    c: &Conversation,
    q: &Query,
    input: &SearchInput,
    path: &Path,
) -> anyhow::Result<()> {
    use std::io::Write;
    let deep = SearchInput { explain: true, min_score: Some(0.0), ..input.clone() };
    let hits = engine.search(&principal(), deep).await?;
    let rows: Vec<serde_json::Value> = hits
        .iter()
        .map(|h| {
            let e = h.explain();
            serde_json::json!({"d": dia_id(h), "score": h.score(), "v": e.vector_rank,
                "vs": e.vector_similarity, "t": e.text_rank, "tc": e.text_coverage,
                "dr": e.date_rank, "rank": e.rank_score})
        })
        .collect();
    let line = serde_json::json!({"sample": c.sample_id, "q": q.text, "cat": q.category,
        "ev": q.evidence, "hits": rows});
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{line}")?;
    Ok(())
}

/// One search of question `q` of conversation `c`: the dia_ids, best first.
async fn ask(
    engine: &Engine,
    c: &Conversation,
    q: &Query,
    mode: Mode,
    corpus: Corpus,
    times: &mut Vec<Duration>,
    dump: Option<&Path>,
) -> anyhow::Result<Vec<String>> {
    let input = SearchInput {
        query: q.text.clone(),
        user_id: Some(UserId::parse(c.sample_id.clone())?),
        limit: KS[KS.len() - 1],
        mode: mode.engine(),
        sources: vec![match corpus {
            Corpus::Memories => SearchSource::Memories,
            Corpus::Messages => SearchSource::Messages,
        }],
        ..Default::default()
    };
    if let Some(path) = dump {
        dump_hits(engine, c, q, &input, path).await?;
    }
    let t = Instant::now();
    let hits = engine.search(&principal(), input).await?;
    times.push(t.elapsed());
    Ok(hits.iter().filter_map(dia_id).collect())
}

struct Ctx<'a> {
    scratch: &'a ScratchArgs,
    embedder: &'a Arc<dyn Embedder>,
    cfg: EngineConfig,
    corpus: Corpus,
    convs: &'a [Conversation],
    pristine: &'a [Pristine],
    dump_hits: Option<&'a Path>,
}

async fn eval_mode(ctx: &Ctx<'_>, mode: Mode, sequential: bool) -> anyhow::Result<ModeResult> {
    let mut recall = Recall::default();
    let mut times: Vec<Duration> = Vec::new();
    for (c, pristine) in ctx.convs.iter().zip(ctx.pristine) {
        if sequential {
            let (_tmp, engine) =
                pristine.open_copy(ctx.scratch, ctx.embedder, ctx.cfg.clone()).await?;
            for q in &c.queries {
                recall.add(
                    q,
                    &ask(&engine, c, q, mode, ctx.corpus, &mut times, ctx.dump_hits).await?,
                );
            }
        } else {
            for q in &c.queries {
                let (_tmp, engine) =
                    pristine.open_copy(ctx.scratch, ctx.embedder, ctx.cfg.clone()).await?;
                recall.add(
                    q,
                    &ask(&engine, c, q, mode, ctx.corpus, &mut times, ctx.dump_hits).await?,
                );
            }
        }
    }
    Ok(ModeResult { mode, search_latency: Latency::of(&times), categories: category_rows(&recall) })
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
    let cfg =
        EngineConfig { candidates, rank_by_relevance: a.rank_by_relevance, ..defaults.clone() };

    eprintln!("locomo: ingesting {} conversations with {}…", convs.len(), a.embedder.name());
    let t = Instant::now();
    let mut pristine = Vec::new();
    for c in &convs {
        pristine.push(ingest(&a.scratch, &embedder, c, a.corpus, a.date_in_text).await?);
    }
    let ingest_seconds = t.elapsed().as_secs_f64();
    let ctx = Ctx {
        scratch: &a.scratch,
        embedder: &embedder,
        cfg,
        corpus: a.corpus,
        convs: &convs,
        pristine: &pristine,
        dump_hits: a.dump_hits.as_deref(),
    };

    if let Some(path) = &a.dump_corpus {
        anyhow::ensure!(a.corpus == Corpus::Messages, "--dump-corpus needs --corpus messages");
        corpus_dump::run(&ctx, path).await?;
    }
    let mut results = Vec::new();
    for mode in modes {
        eprintln!("locomo: {} mode…", mode.name());
        results.push(eval_mode(&ctx, mode, a.sequential).await?);
    }
    let diagnosis = if a.diagnose && a.corpus == Corpus::Messages {
        anyhow::bail!("--diagnose analyses the memories corpus only");
    } else if a.diagnose {
        eprintln!("locomo: diagnosis with {} candidates per list…", a.diagnose_candidates);
        Some(diagnose::run(&ctx, a.diagnose_candidates, a.dump_lists.as_deref()).await?)
    } else {
        None
    };

    let abstention = if a.abstention {
        eprintln!("locomo: abstention…");
        Some(abstain::run(&ctx).await?)
    } else {
        None
    };
    let out = Output {
        environment: report::environment(),
        embedder: a.embedder,
        model_id: embedder.model_id().to_string(),
        corpus: a.corpus,
        data: a.data.display().to_string(),
        conversations: convs.len(),
        turns: convs.iter().map(|c| c.turns.len()).sum(),
        questions: convs.iter().map(|c| c.queries.len()).sum(),
        candidates,
        protocol: if a.sequential { "sequential" } else { "isolated" },
        ingest_seconds,
        modes: results,
        diagnosis,
        abstention,
        date_in_text: a.date_in_text,
    };
    if json {
        return report::print_json(&out);
    }
    println!(
        "LoCoMo turn recall, {} embedder ({}), turns as {}, {} conversations, {} turns, {} \
         questions (categories 1-4), {} candidates per list, {} questions ({}); ingestion {:.1} s\n",
        out.embedder.name(),
        out.model_id,
        match (out.corpus, out.date_in_text) {
            (Corpus::Memories, _) => "memories",
            (Corpus::Messages, false) =>
                "messages (one conversation per session, date as created_at only)",
            (Corpus::Messages, true) =>
                "messages (one conversation per session, date also in the text)",
        },
        out.conversations,
        out.turns,
        out.questions,
        out.candidates,
        out.protocol,
        out.environment,
        out.ingest_seconds,
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
                format!("{:.2}", m.search_latency.p50_ms),
                format!("{:.2}", m.search_latency.p95_ms),
            ]
        })
        .collect();
    print!("{}", report::table(&["mode", "search p50 (ms)", "search p95 (ms)"], &rows));
    if let Some(d) = &out.diagnosis {
        println!();
        print!("{}", d.markdown());
    }
    if let Some(a) = &out.abstention {
        println!();
        print!("{}", a.markdown());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_dates_parse() {
        let d = parse_session_date("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(d.to_string(), "2023-05-08 13:56:00.0 +00:00:00");
        let d = parse_session_date("12:09 am on 13 September, 2023").unwrap();
        assert_eq!((d.hour(), d.minute(), d.day()), (0, 9, 13));
        assert!(parse_session_date("sometime").is_none());
    }

    #[test]
    fn evidence_parsing_tolerates_malformed_strings() {
        assert_eq!(parse_evidence("D1:3"), vec!["D1:3"]);
        assert_eq!(parse_evidence("D8:6; D9:17"), vec!["D8:6", "D9:17"]);
        assert_eq!(parse_evidence("D:11:26"), vec!["D11:26"]);
        assert!(parse_evidence("D").is_empty());
        assert!(parse_evidence("").is_empty());
    }

    #[test]
    fn recall_is_the_share_of_evidence_in_the_top_k() {
        let q =
            Query { text: "?".into(), category: 4, evidence: vec!["D1:1".into(), "D1:2".into()] };
        let mut r = Recall::default();
        let ranked: Vec<String> = ["D1:1", "D9:9", "D9:8", "D9:7", "D9:6", "D1:2"]
            .iter()
            .map(ToString::to_string)
            .collect();
        r.add(&q, &ranked);
        assert_eq!(r.overall(), [0.5, 0.5, 1.0, 1.0]);
    }
}
