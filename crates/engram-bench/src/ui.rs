//! `ui`: how long the web UI's pages take, served by the real `engram serve` (local mode:
//! the browser is the local admin) over a data dir holding `--memories` facts in the tenant,
//! `--shown` of them for the user the memory screen shows. Facts go in through
//! `POST /v1/memories/batch`; then each page is fetched `--requests` times after a warm-up.
//! The clock covers the whole request on loopback (rendering, the store reads, HTTP), so it
//! bounds the server-side render from above.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::report::{self, Latency};
use crate::{ScratchArgs, corpus, http};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Facts in the tenant.
    #[arg(long, default_value_t = 10_000)]
    memories: usize,
    /// Of them, facts of the user the memory screen shows (the rest spread over other users).
    #[arg(long, default_value_t = 1_000)]
    shown: usize,
    /// Timed requests per page.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// The `engram` binary (default: next to this one).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    #[command(flatten)]
    scratch: ScratchArgs,
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    memories: usize,
    shown: usize,
    pages: Vec<(String, Latency)>,
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.shown <= a.memories && a.requests > 0,
        "--shown ≤ --memories, --requests > 0"
    );
    let dir = a.scratch.tempdir()?;
    let data = dir.path().join("data");
    let client = http::client()?;
    let bin = a.server_bin.clone().unwrap_or_else(http::default_server_bin);
    let server = http::Server::start(&bin, &data, &[], &client, Duration::from_secs(60)).await?;
    let facts = corpus::facts(a.memories, 7);
    let others = 9;
    let user_of = |i: usize| {
        if i < a.shown { "shown-user".to_string() } else { format!("user-{}", i % others) }
    };
    let t = Instant::now();
    for (n, chunk) in facts.chunks(500).enumerate() {
        let memories: Vec<serde_json::Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, f)| serde_json::json!({ "content": f, "user_id": user_of(n * 500 + i) }))
            .collect();
        let body = serde_json::json!({ "memories": memories, "dedup": false });
        http::post_json(&client, &format!("{}/v1/memories/batch", server.base), &body).await?;
    }
    eprintln!("{} facts in {:.1} s", facts.len(), t.elapsed().as_secs_f64());
    let pages = [
        ("memory screen, one user (first page)", "/?user=shown-user".to_string()),
        ("memory screen, whole tenant (first page)", "/".to_string()),
        ("memory screen, one user, a search", "/?user=shown-user&q=sister+moved".to_string()),
        ("conversations", "/conversations".to_string()),
        ("health and charts", "/health".to_string()),
    ];
    let mut out = Vec::new();
    for (name, path) in pages {
        let url = format!("{}{path}", server.base);
        let mut samples = Vec::with_capacity(a.requests);
        for i in 0..a.requests + 20 {
            let t = Instant::now();
            let r = client.get(&url).send().await?;
            anyhow::ensure!(r.status().is_success(), "{path}: {}", r.status());
            let body = r.text().await?;
            anyhow::ensure!(body.contains("</html>"), "{path}: not a whole page");
            if i >= 20 {
                samples.push(t.elapsed());
            }
        }
        out.push((name.to_string(), Latency::of(&samples)));
    }
    let o = Output {
        environment: report::environment(),
        memories: a.memories,
        shown: a.shown,
        pages: out,
    };
    if json {
        return report::print_json(&o);
    }
    println!(
        "{} · SQLite · {} facts in the tenant, {} of the shown user",
        o.environment, o.memories, o.shown
    );
    let rows: Vec<Vec<String>> = o
        .pages
        .iter()
        .map(|(n, l)| {
            vec![
                n.clone(),
                l.n.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
            ]
        })
        .collect();
    print!("{}", report::table(&["page", "n", "p50 ms", "p95 ms", "p99 ms"], &rows));
    Ok(())
}
