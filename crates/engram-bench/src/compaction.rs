//! `compaction`: what the summary DAG costs (issue 13).
//!
//! Starts the real `engram serve` with the scripted OpenAI-compatible LLM of `testkit`,
//! appends the public LoCoMo conversations as a client would (each conversation one engram
//! conversation, each turn `<speaker>: <text>` with its session's date as `created_at`), lets
//! extraction (scripted to find nothing) and compaction run, and reports per 100 summarized
//! messages: LLM calls per level, prompt tokens (what engram sends: the prompts and the
//! transcript lines, counted as the scripted server counts them, ~4 characters a token),
//! completion tokens (of the scripted summaries, sized like a real one: a fifth of the input
//! words, at most 400 words), and the wall time of the compaction jobs without the LLM's.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use testkit::{Match, Rule, ScriptedLlm};

use crate::ScratchArgs;
use crate::http::{self, Server};
use crate::locomo;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The LoCoMo JSON file.
    #[arg(long, default_value = "/work/shared/eval/locomo/locomo_public.json")]
    pub data: std::path::PathBuf,
    /// The agent's compaction threshold (unsummarized messages kept raw).
    #[arg(long, default_value_t = 100)]
    pub threshold: i64,
    /// The `engram` server binary (default: next to this one).
    #[arg(long)]
    pub server_bin: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub scratch: ScratchArgs,
}

#[derive(Debug, Serialize, Default)]
struct Cost {
    messages: usize,
    summarized: i64,
    leaves: usize,
    branches: usize,
    roots: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    wall_s: f64,
}

const LEAF: &str = "stretch of a conversation";
const MERGE: &str = "You merge";

/// A summary sized like a real one: the first fifth of the input's words, at most 400.
fn summary_of(input: &str) -> String {
    let words: Vec<&str> = input.split_whitespace().collect();
    let n = (words.len() / 5).clamp(20, 400).min(words.len());
    words[..n].join(" ")
}

fn tokens(s: &str) -> u64 {
    testkit::protocol::estimate_tokens(s)
}

pub async fn run(args: Args, json_out: bool) -> anyhow::Result<()> {
    let convs = locomo::load(&args.data)?;
    let client = http::client()?;
    let llm = ScriptedLlm::start().await;
    llm.set_default(Rule::any().reply("A short summary."));
    llm.on(Rule::system_contains("memory extraction").reply("[]"));
    llm.on(Rule::system_contains(LEAF).reply_with(|r| summary_of(&r.user)));
    llm.on(Rule::system_contains(MERGE).reply_with(|r| summary_of(&r.user)));
    let tmp = args.scratch.tempdir()?;
    let bin = args.server_bin.clone().unwrap_or_else(http::default_server_bin);
    let extra = http::llm_args(&llm.base_url());
    let s = Server::start(&bin, &tmp.path().join("data"), &extra, &client, Duration::from_secs(60))
        .await?;
    let settings = json!({ "settings": { "compaction": { "threshold": args.threshold } } });
    client.put(format!("{}/v1/agents/bench", s.base)).json(&settings).send().await?;
    let started = Instant::now();
    let mut cost = Cost::default();
    for c in &convs {
        let msgs: Vec<serde_json::Value> = c
            .messages
            .iter()
            .map(|m| {
                let at = locomo::parse_session_date(&m.date)
                    .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok());
                let role = if m.first_speaker { "user" } else { "assistant" };
                json!({ "role": role, "content": m.plain, "created_at": at })
            })
            .collect();
        cost.messages += msgs.len();
        // In turns of 20 messages, as a chat arrives.
        for chunk in msgs.chunks(20) {
            let url = format!("{}/v1/conversations/{}/messages", s.base, c.sample_id);
            let body = json!({ "user_id": "bench", "agent_id": "bench", "messages": chunk });
            http::post_json(&client, &url, &body).await?;
        }
    }
    for _ in 0..12_000 {
        let st: serde_json::Value =
            client.get(format!("{}/v1/stats", s.base)).send().await?.json().await?;
        if st["jobs_pending"] == 0 && st["jobs_running"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cost.wall_s = started.elapsed().as_secs_f64();
    for c in &convs {
        let v: serde_json::Value = client
            .get(format!("{}/v1/conversations/{}", s.base, c.sample_id))
            .send()
            .await?
            .json()
            .await?;
        cost.summarized += v["summarized_through"].as_i64().unwrap_or(0);
        for x in v["summaries"].as_array().into_iter().flatten() {
            match x["depth"].as_i64() {
                Some(0) => cost.leaves += 1,
                Some(1) => cost.branches += 1,
                _ => cost.roots += 1,
            }
        }
    }
    for r in llm
        .calls_matching(&Match::any().system_contains(LEAF))
        .iter()
        .chain(llm.calls_matching(&Match::any().system_contains(MERGE)).iter())
    {
        cost.prompt_tokens += tokens(&r.full_text());
        cost.completion_tokens += tokens(&summary_of(&r.user));
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&cost)?);
        return Ok(());
    }
    let per = |x: f64| x * 100.0 / cost.summarized.max(1) as f64;
    println!(
        "Compaction of the {} LoCoMo conversations ({} messages, threshold {}): {} messages \
         summarized into {} leaves, {} branches, {} roots; {:.1} s until the queue drained \
         (scripted LLM answering at once).\n",
        convs.len(),
        cost.messages,
        args.threshold,
        cost.summarized,
        cost.leaves,
        cost.branches,
        cost.roots,
        cost.wall_s
    );
    println!("| per 100 summarized messages | value |\n| --- | --- |");
    let calls = (cost.leaves + cost.branches + cost.roots) as f64;
    println!("| LLM calls | {:.2} |", per(calls));
    println!(
        "| of which leaves / branches / roots | {:.2} / {:.2} / {:.2} |",
        per(cost.leaves as f64),
        per(cost.branches as f64),
        per(cost.roots as f64)
    );
    println!("| prompt tokens | {:.0} |", per(cost.prompt_tokens as f64));
    println!("| completion tokens | {:.0} |", per(cost.completion_tokens as f64));
    Ok(())
}
