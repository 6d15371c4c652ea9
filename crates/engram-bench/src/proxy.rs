//! `proxy`: what the memory proxy adds to a chat call (issue 15).
//!
//! Starts the scripted LLM of `testkit` and the real `engram serve` with the scripted LLM as
//! both its extraction LLM and the proxy's OpenAI upstream, gives the user `--facts` facts,
//! then alternates, call by call, the same chat request sent straight to the scripted LLM
//! and through engram's `/v1/chat/completions`: non-streaming (time to the whole answer)
//! and streaming (time to the first content chunk). Side by side in one run, so both see
//! the same machine load. The proxied call includes what the proxy really does: the context
//! block (search of the user's facts with the last user message, builtin embedder unless
//! `--embedder` is given to the server), the forward, and the append of the turn afterwards
//! (with extraction running in the background).

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use testkit::{Rule, ScriptedLlm};

use crate::ScratchArgs;
use crate::http::{self, Server};
use crate::report::{self, Latency};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Calls of each kind (direct and proxied), after 20 warm-up calls.
    #[arg(long, default_value_t = 300)]
    pub calls: usize,
    /// Facts the user has (the context block is built from them on every call).
    #[arg(long, default_value_t = 200)]
    pub facts: usize,
    /// The `engram` server binary (default: next to this one).
    #[arg(long)]
    pub server_bin: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub scratch: ScratchArgs,
}

#[derive(Debug, Serialize)]
struct Report {
    environment: String,
    calls: usize,
    facts: usize,
    whole_direct: Latency,
    whole_proxied: Latency,
    first_chunk_direct: Latency,
    first_chunk_proxied: Latency,
}

const TOPICS: &[&str] = &[
    "hiking in the Alps",
    "green tea",
    "a sister called Maya",
    "Rust programming",
    "the violin",
    "a flat in Lisbon",
    "vegetarian cooking",
    "chess on Sundays",
];

/// Time to the whole answer of a non-streaming call.
async fn whole(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let r = client.post(url).json(body).send().await?;
    anyhow::ensure!(r.status().is_success(), "{url}: {}", r.status());
    let _ = r.bytes().await?;
    Ok(t.elapsed())
}

/// Time to the first chunk with content of a streaming call (the rest is read too).
async fn first_chunk(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let mut r = client.post(url).json(body).send().await?;
    anyhow::ensure!(r.status().is_success(), "{url}: {}", r.status());
    let mut seen = String::new();
    let mut first = None;
    while let Some(chunk) = r.chunk().await? {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        // The scripted answer's first piece is "The".
        if first.is_none() && seen.contains("\"content\":\"The") {
            first = Some(t.elapsed());
        }
    }
    first.ok_or_else(|| anyhow::anyhow!("{url}: no content chunk in {seen}"))
}

pub async fn run(args: Args, json_out: bool) -> anyhow::Result<()> {
    let client = http::client()?;
    let llm = ScriptedLlm::start().await;
    llm.set_default(Rule::any().reply("The answer takes the user's facts into account."));
    llm.on(Rule::system_contains("memory extraction").reply("[]"));
    let tmp = args.scratch.tempdir()?;
    let bin = args.server_bin.clone().unwrap_or_else(http::default_server_bin);
    let mut extra = http::llm_args(&llm.base_url());
    extra.extend(["--proxy-openai-url".to_string(), llm.base_url()]);
    let s = Server::start(&bin, &tmp.path().join("data"), &extra, &client, Duration::from_secs(60))
        .await?;
    let memories: Vec<Value> = (0..args.facts)
        .map(|i| {
            let topic = TOPICS[i % TOPICS.len()];
            json!({ "content": format!("The user mentioned {topic} (note {i})."), "user_id": "bench" })
        })
        .collect();
    let batch = json!({ "memories": memories, "dedup": false });
    http::post_json(&client, &format!("{}/v1/memories/batch", s.base), &batch).await?;

    let direct = llm.url("/v1/chat/completions");
    let proxied = format!("{}/v1/chat/completions", s.base);
    let ask = |i: usize, stream: bool| {
        let topic = TOPICS[i % TOPICS.len()];
        json!({ "model": "bench", "user": "bench", "stream": stream,
                "messages": [{ "role": "system", "content": "You are a helpful assistant." },
                             { "role": "user", "content": format!("What do you know about {topic}?") }] })
    };
    for i in 0..20 {
        whole(&client, &direct, &ask(i, false)).await?;
        whole(&client, &proxied, &ask(i, false)).await?;
        first_chunk(&client, &proxied, &ask(i, true)).await?;
    }
    let (mut wd, mut wp, mut fd, mut fp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.calls {
        wd.push(whole(&client, &direct, &ask(i, false)).await?);
        wp.push(whole(&client, &proxied, &ask(i, false)).await?);
        fd.push(first_chunk(&client, &direct, &ask(i, true)).await?);
        fp.push(first_chunk(&client, &proxied, &ask(i, true)).await?);
    }
    let r = Report {
        environment: report::environment(),
        calls: args.calls,
        facts: args.facts,
        whole_direct: Latency::of(&wd),
        whole_proxied: Latency::of(&wp),
        first_chunk_direct: Latency::of(&fd),
        first_chunk_proxied: Latency::of(&fp),
    };
    if json_out {
        return report::print_json(&r);
    }
    println!("{} · {} calls of each kind · {} facts", r.environment, r.calls, r.facts);
    let row = |name: &str, d: &Latency, p: &Latency| {
        vec![
            name.to_string(),
            format!("{:.2}", d.p50_ms),
            format!("{:.2}", d.p95_ms),
            format!("{:.2}", p.p50_ms),
            format!("{:.2}", p.p95_ms),
            format!("{:+.2}", p.p95_ms - d.p95_ms),
        ]
    };
    print!(
        "{}",
        report::table(
            &[
                "call",
                "direct p50 ms",
                "direct p95 ms",
                "proxied p50 ms",
                "proxied p95 ms",
                "added p95 ms"
            ],
            &[
                row("non-streaming, whole answer", &r.whole_direct, &r.whole_proxied),
                row("streaming, first chunk", &r.first_chunk_direct, &r.first_chunk_proxied),
            ]
        )
    );
    Ok(())
}
