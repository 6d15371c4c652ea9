//! `extraction`: the write path with an LLM (issue "Automatic extraction").
//!
//! Starts the real `engram serve` against the scripted OpenAI-compatible server of `testkit`
//! and measures:
//!
//! 1. **Append latency** (`POST /v1/conversations/{id}/messages`, HTTP p50/p95/max) while
//!    the LLM answers after 10 ms, after 30 s, or never: the client must never wait for
//!    extraction, so the three rows should match.
//! 2. **Cost per extracted turn** with the fast LLM: LLM calls, prompt and completion
//!    tokens, and the wall time of each stage (extract, embed, consolidate, persist) read
//!    from `/metrics`, with the scripted latency subtracted from the LLM stages. The corpus
//!    mixes turns with a new fact, restatements of known facts (near-duplicates: no
//!    consolidation call) and assistant-only turns (nothing new after the cursor: no call).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use testkit::{Match, Rule, ScriptedLlm};

use crate::ScratchArgs;
use crate::http::{self, Server};
use crate::report::{self, Latency};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// User turns appended per LLM setting.
    #[arg(long, default_value_t = 60)]
    pub turns: usize,
    /// Scripted LLM latency of the fast run, in milliseconds.
    #[arg(long, default_value_t = 10)]
    pub fast_ms: u64,
    /// Scripted LLM latency of the slow run, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub slow_ms: u64,
    /// The `engram` server binary (default: next to this one).
    #[arg(long)]
    pub server_bin: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub scratch: ScratchArgs,
}

#[derive(Debug, Serialize)]
struct AppendRow {
    llm: String,
    latency: Latency,
}

#[derive(Debug, Serialize, Default)]
struct Cost {
    user_turns: usize,
    extraction_jobs: u64,
    llm_calls: u64,
    extract_calls: u64,
    consolidate_calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    facts_added: u64,
    facts_confirmed: u64,
    /// Mean wall time per stage run, ms (LLM stages without the scripted latency).
    stage_ms: BTreeMap<String, f64>,
}

/// The facts users state: distinct topics, so new ones are not near-duplicates.
const TOPICS: &[&str] = &[
    "plays the cello in an orchestra",
    "is allergic to shellfish",
    "drives an electric van",
    "keeps bees on the roof",
    "studies Japanese on weekends",
    "works night shifts as a nurse",
    "collects vintage fountain pens",
    "is training for a marathon",
    "grows chillies on the balcony",
    "volunteers at an animal shelter",
    "builds mechanical keyboards",
    "owns a sailboat named Aurora",
    "reads science fiction every night",
    "teaches chess to children",
    "brews beer at home",
    "restores old motorbikes",
    "speaks Portuguese with her mother",
    "climbs indoor walls twice a week",
    "runs a small bakery",
    "paints watercolour landscapes",
];

fn scripted(latency: Option<Duration>, llm: &ScriptedLlm) {
    let extract = Rule::system_contains("memory extraction").reply_with(|r| {
        let text = r.full_text();
        // The last "User: I ..." line of the slice is the fact; assistant-only slices never get here.
        // Every "User: I ..." line of the slice is a fact (assistant lines never are).
        let facts: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("User: I "))
            .map(|f| {
                format!(
                    r#"{{"content": "The user {}.", "category": "fact", "importance": 5}}"#,
                    f.trim_end_matches('.')
                )
            })
            .collect();
        format!("[{}]", facts.join(", "))
    });
    let consolidate =
        Rule::system_contains("memory consolidation").reply(r#"[{"fact": 1, "decision": "ADD"}]"#);
    match latency {
        Some(d) => {
            llm.set_default(extract.delay(d));
            llm.on(consolidate.delay(d));
        }
        None => {
            llm.set_default(Rule::any().hang());
        }
    }
}

async fn start(
    args: &Args,
    llm: &ScriptedLlm,
    dir: &std::path::Path,
    client: &reqwest::Client,
) -> anyhow::Result<Server> {
    let bin = args.server_bin.clone().unwrap_or_else(http::default_server_bin);
    let mut extra = http::llm_args(&llm.base_url());
    extra.extend(["--workers".to_string(), "2".to_string()]);
    Server::start(&bin, dir, &extra, client, Duration::from_secs(60)).await
}

/// The turns: (conversation, messages) — new facts, restatements, assistant-only turns.
fn corpus(turns: usize) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for i in 0..turns {
        let conv = format!("conv-{}", i % 10);
        let topic = TOPICS[i % TOPICS.len()];
        let msgs = match i % 3 {
            // A new fact (or, after the first round of topics, a restatement).
            0 | 1 => {
                json!([{ "role": "user", "content": format!("I {topic}.") }, { "role": "assistant", "content": "Noted, thanks!" }])
            }
            // Nothing new from the user.
            _ => {
                json!([{ "role": "assistant", "content": "Is there anything else I can help with?" }])
            }
        };
        out.push((conv, msgs));
    }
    out
}

/// Append every turn; with `pace`, wait for the job queue to drain after each one.
async fn append_all(
    s: &Server,
    client: &reqwest::Client,
    turns: usize,
    pace: Option<&Server>,
) -> anyhow::Result<Vec<Duration>> {
    let mut lat = Vec::new();
    for (conv, msgs) in corpus(turns) {
        let t = Instant::now();
        let url = format!("{}/v1/conversations/{conv}/messages", s.base);
        http::post_json(client, &url, &json!({ "user_id": "bench", "messages": msgs })).await?;
        lat.push(t.elapsed());
        if let Some(p) = pace {
            drained(p, client).await?;
        }
    }
    Ok(lat)
}

async fn drained(s: &Server, client: &reqwest::Client) -> anyhow::Result<()> {
    for _ in 0..6000 {
        let st: serde_json::Value =
            client.get(format!("{}/v1/stats", s.base)).send().await?.json().await?;
        if st["jobs_pending"] == 0 && st["jobs_running"] == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("jobs did not drain")
}

/// `name{labels} value` lines of the Prometheus text.
fn metric(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && (label.is_empty() || l.contains(label)))
        .filter(|l| {
            !l.starts_with(&format!("{name}_"))
                || name.ends_with("_sum")
                || name.ends_with("_count")
        })
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

pub async fn run(args: Args, json_out: bool) -> anyhow::Result<()> {
    let client = http::client()?;
    let mut rows = Vec::new();
    let mut cost = Cost::default();
    for (label, latency) in [
        (format!("answers in {} ms", args.fast_ms), Some(Duration::from_millis(args.fast_ms))),
        (
            format!("answers in {} s", args.slow_ms / 1000),
            Some(Duration::from_millis(args.slow_ms)),
        ),
        ("never answers".to_string(), None),
    ] {
        let llm = ScriptedLlm::start().await;
        scripted(latency, &llm);
        let tmp = args.scratch.tempdir()?;
        let dir = tmp.path().join("data");
        let s = start(&args, &llm, &dir, &client).await?;
        let lat = append_all(&s, &client, args.turns, None).await?;
        rows.push(AppendRow { llm: label, latency: Latency::of(&lat) });
        drop(s);
        if latency == Some(Duration::from_millis(args.fast_ms)) {
            // The cost run: a fresh store, each turn extracted before the next is sent (as in
            // a live chat), so every user turn is its own batch.
            let llm = ScriptedLlm::start().await;
            scripted(latency, &llm);
            let tmp = args.scratch.tempdir()?;
            let s = start(&args, &llm, &tmp.path().join("data"), &client).await?;
            append_all(&s, &client, args.turns, Some(&s)).await?;
            drained(&s, &client).await?;
            let m = client.get(format!("{}/metrics", s.base)).send().await?.text().await?;
            let extract_calls =
                llm.calls_matching(&Match::any().system_contains("memory extraction")).len() as u64;
            let consolidate_calls = llm
                .calls_matching(&Match::any().system_contains("memory consolidation"))
                .len() as u64;
            let st: serde_json::Value =
                client.get(format!("{}/v1/stats", s.base)).send().await?.json().await?;
            cost.user_turns = corpus(args.turns)
                .iter()
                .filter(|(_, m)| m.to_string().contains("\"user\""))
                .count();
            cost.extraction_jobs = st["extractions_done"].as_u64().unwrap_or(0);
            cost.extract_calls = extract_calls;
            cost.consolidate_calls = consolidate_calls;
            cost.llm_calls = extract_calls + consolidate_calls;
            cost.prompt_tokens = metric(&m, "engram_llm_tokens_total", "kind=\"prompt\"") as u64;
            cost.completion_tokens =
                metric(&m, "engram_llm_tokens_total", "kind=\"completion\"") as u64;
            cost.facts_added =
                metric(&m, "engram_extracted_facts_total", "decision=\"ADD\"") as u64;
            cost.facts_confirmed =
                metric(&m, "engram_extracted_facts_total", "decision=\"NONE\"") as u64;
            let delay_s = args.fast_ms as f64 / 1000.0;
            for stage in ["extract", "embed", "consolidate", "persist"] {
                let label = format!("stage=\"{stage}\"");
                let sum = metric(&m, "engram_stage_seconds_sum", &label);
                let count = metric(&m, "engram_stage_seconds_count", &label);
                if count > 0.0 {
                    let calls = match stage {
                        "extract" => extract_calls as f64,
                        "consolidate" => consolidate_calls as f64,
                        _ => 0.0,
                    };
                    cost.stage_ms.insert(
                        stage.to_string(),
                        ((sum - calls * delay_s) / count * 1000.0).max(0.0),
                    );
                }
            }
        }
    }
    if json_out {
        return report::print_json(
            &json!({ "append": rows, "cost": cost, "environment": report::environment() }),
        );
    }
    println!(
        "Append latency through HTTP ({} turns per row; {}):\n",
        args.turns,
        report::environment()
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.llm.clone(),
                format!("{:.2}", r.latency.p50_ms),
                format!("{:.2}", r.latency.p95_ms),
                format!("{:.2}", r.latency.max_ms),
            ]
        })
        .collect();
    println!("{}", report::table(&["LLM", "append p50 ms", "append p95 ms", "max ms"], &table));
    let per = |x: u64| x as f64 / cost.user_turns.max(1) as f64;
    println!(
        "Cost with the fast LLM ({} user turns, {} extraction jobs):\n",
        cost.user_turns, cost.extraction_jobs
    );
    let mut t = vec![
        vec!["LLM calls per user turn".into(), format!("{:.2}", per(cost.llm_calls))],
        vec!["  extraction calls".into(), cost.extract_calls.to_string()],
        vec!["  consolidation calls".into(), cost.consolidate_calls.to_string()],
        vec!["prompt tokens per user turn".into(), format!("{:.0}", per(cost.prompt_tokens))],
        vec![
            "completion tokens per user turn".into(),
            format!("{:.0}", per(cost.completion_tokens)),
        ],
        vec![
            "facts added / confirmed".into(),
            format!("{} / {}", cost.facts_added, cost.facts_confirmed),
        ],
    ];
    for (stage, ms) in &cost.stage_ms {
        t.push(vec![
            format!("{stage} stage, ms per run (LLM latency subtracted)"),
            format!("{ms:.2}"),
        ]);
    }
    println!("{}", report::table(&["measure", "value"], &t));
    Ok(())
}
