//! `search`: search latency with one user's scope filled with N memories.
//!
//! For each `--scope` N a fresh data dir is filled with N synthetic facts for one user
//! (`remember_batch`, `dedup = false`, batches of `--fill-batch`), then `--queries`
//! recall-style questions ([`crate::corpus::queries`]) are timed one after the other:
//!
//! - **engine**: `Engine::search` in this process (hybrid, limit 10): the server-side cost
//!   (query embedding, exact vector scan, FTS5 BM25, fusion, loading the hits, and the
//!   access-count update every search does);
//! - **HTTP** (`--http`): the real `engram serve` on the same data dir, `POST /v1/search`
//!   through a keep-alive reqwest client, timed from send to the parsed JSON answer.
//!
//! Each phase first runs `--warmup` untimed queries (the first search of a process loads the
//! user's vectors into its in-memory index).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use engram_core::engine::{Engine, EngineConfig, RememberInput, SearchInput, SearchMode};
use engram_core::model::{KeyRole, MemoryId, Principal, TenantId, UserId};
use engram_core::store::MemoryFilter;
use serde::Serialize;
use time::OffsetDateTime;

use crate::embedder::EmbedderChoice;
use crate::http::{self, Server};
use crate::report::{self, Latency};
use crate::{ScratchArgs, corpus};

/// The one user whose scope is filled.
const USER: &str = "bench-user";

/// Where the memories are written from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fill {
    /// `Engine::remember_batch` in this process (then the server opens the same data dir).
    Engine,
    /// `POST /v1/memories/batch` to the running server (needs `--http`).
    Http,
}

/// Search mode of the timed queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
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
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "builtin")]
    embedder: EmbedderChoice,
    /// Memories in the user's scope; one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    scope: Vec<usize>,
    /// Timed queries per phase.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Untimed queries before each timed phase.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// `limit` of each search.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Engine search mode (the HTTP phase always uses the server's default, hybrid).
    #[arg(long, value_enum, default_value = "hybrid")]
    mode: Mode,
    /// Memories per fill batch.
    #[arg(long, default_value_t = 1000)]
    fill_batch: usize,
    /// Also measure through the real HTTP server.
    #[arg(long)]
    http: bool,
    /// Also time each step of a hybrid search separately (embed the query, vector search,
    /// text search, load the candidates, touch the hits), calling the store directly.
    #[arg(long)]
    breakdown: bool,
    /// Also time the keyword-search SQL with the planner's join order against the FTS-first
    /// order the store uses (see `text_sql.rs`).
    #[arg(long)]
    text_sql: bool,
    /// How the scope is filled.
    #[arg(long, value_enum, default_value = "engine")]
    fill: Fill,
    /// The `engram` binary (default: next to this one, i.e. `target/release/engram`).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Extra argument for `engram serve` (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    server_arg: Vec<String>,
    /// Seconds to wait for the server's /healthz.
    #[arg(long, default_value_t = 120)]
    server_timeout: u64,
    /// Seed of the synthetic facts and queries.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    scratch: ScratchArgs,
}

#[derive(Debug, Serialize)]
struct ScopeResult {
    scope: usize,
    fill_via: Fill,
    fill_seconds: f64,
    fill_per_s: f64,
    engine: Option<Latency>,
    engine_mean_hits: Option<f64>,
    http: Option<Latency>,
    http_mean_hits: Option<f64>,
    breakdown: Option<Vec<(String, Latency)>>,
    text_sql: Option<crate::text_sql::TextSql>,
    /// The HTTP p95 target for this scope, if the brief sets one (ms).
    http_p95_target_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    embedder: EmbedderChoice,
    model_id: String,
    mode: Mode,
    limit: usize,
    queries: usize,
    warmup: usize,
    results: Vec<ScopeResult>,
}

/// HTTP p95 targets: ≤ 15 ms at 10k memories, ≤ 60 ms at 100k (builtin embedder).
fn target(scope: usize) -> Option<f64> {
    match scope {
        10_000 => Some(15.0),
        100_000 => Some(60.0),
        _ => None,
    }
}

fn principal() -> Principal {
    Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin }
}

async fn fill_engine(engine: &Engine, facts: &[String], batch: usize) -> anyhow::Result<f64> {
    let p = principal();
    let user = UserId::parse(USER)?;
    let t = Instant::now();
    for c in facts.chunks(batch) {
        let inputs = c
            .iter()
            .map(|content| RememberInput {
                user_id: Some(user.clone()),
                content: content.clone(),
                ..Default::default()
            })
            .collect();
        engine.remember_batch(&p, inputs, false).await?;
    }
    Ok(t.elapsed().as_secs_f64())
}

async fn fill_http(
    client: &reqwest::Client,
    base: &str,
    facts: &[String],
    batch: usize,
) -> anyhow::Result<f64> {
    let url = format!("{base}/v1/memories/batch");
    let t = Instant::now();
    for c in facts.chunks(batch) {
        let memories: Vec<serde_json::Value> = c
            .iter()
            .map(|content| serde_json::json!({ "content": content, "user_id": USER }))
            .collect();
        http::post_json(client, &url, &serde_json::json!({ "memories": memories, "dedup": false }))
            .await?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Run `warmup` untimed then every query timed; returns the latencies and the mean hit count.
async fn measure_engine(
    engine: &Engine,
    queries: &[String],
    warmup: usize,
    limit: usize,
    mode: Mode,
) -> anyhow::Result<(Latency, f64)> {
    let p = principal();
    let user = UserId::parse(USER)?;
    let input = |q: &String| SearchInput {
        query: q.clone(),
        user_id: Some(user.clone()),
        limit,
        mode: mode.engine(),
        ..Default::default()
    };
    for q in queries.iter().cycle().take(warmup) {
        engine.search(&p, input(q)).await?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let mut hits = 0usize;
    for q in queries {
        let i = input(q);
        let t = Instant::now();
        let h = engine.search(&p, i).await?;
        times.push(t.elapsed());
        hits += h.len();
    }
    Ok((Latency::of(&times), hits as f64 / queries.len() as f64))
}

/// Time the steps of a hybrid search one by one, through the engine's store and embedder.
async fn breakdown(
    engine: &Engine,
    queries: &[String],
    limit: usize,
) -> anyhow::Result<Vec<(String, Latency)>> {
    let tenant = TenantId::default_tenant();
    let filter = MemoryFilter { user_id: Some(UserId::parse(USER)?), ..Default::default() };
    let n = engine.config().candidates.max(limit);
    let (store, embedder) = (engine.store(), engine.embedder());
    let names = ["embed query", "vector search", "text search", "load candidates", "touch hits"];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for q in queries {
        let t = Instant::now();
        let qv = embedder.embed(std::slice::from_ref(q)).await?.pop().unwrap_or_default();
        times[0].push(t.elapsed());
        let t = Instant::now();
        let vec_list = store.vector_search(&tenant, &filter, &qv, n).await?;
        times[1].push(t.elapsed());
        let t = Instant::now();
        let text_list = store.text_search(&tenant, &filter, q, n).await?;
        times[2].push(t.elapsed());
        let mut ids: Vec<MemoryId> = vec_list.iter().map(|x| x.0).collect();
        ids.extend(text_list.iter().map(|x| x.0).filter(|id| !vec_list.iter().any(|v| v.0 == *id)));
        let t = Instant::now();
        let rows = store.get_memories(&tenant, &ids).await?;
        times[3].push(t.elapsed());
        let top: Vec<MemoryId> = rows.iter().take(limit).map(|m| m.id).collect();
        let t = Instant::now();
        store.touch_memories(&tenant, &top, OffsetDateTime::now_utc()).await?;
        times[4].push(t.elapsed());
    }
    Ok(names.iter().zip(&times).map(|(n, t)| ((*n).to_string(), Latency::of(t))).collect())
}

async fn measure_http(
    client: &reqwest::Client,
    base: &str,
    queries: &[String],
    warmup: usize,
    limit: usize,
) -> anyhow::Result<(Latency, f64)> {
    let url = format!("{base}/v1/search");
    let body = |q: &String| serde_json::json!({ "query": q, "user_id": USER, "limit": limit });
    for q in queries.iter().cycle().take(warmup) {
        http::post_json(client, &url, &body(q)).await?;
    }
    let mut times: Vec<Duration> = Vec::with_capacity(queries.len());
    let mut hits = 0usize;
    for q in queries {
        let b = body(q);
        let t = Instant::now();
        let v = http::post_json(client, &url, &b).await?;
        times.push(t.elapsed());
        let results = v
            .get("results")
            .and_then(|r| r.as_array())
            .ok_or_else(|| anyhow::anyhow!("POST /v1/search answer has no results array: {v}"))?;
        hits += results.len();
    }
    Ok((Latency::of(&times), hits as f64 / queries.len() as f64))
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(a.queries > 0, "--queries must be positive");
    anyhow::ensure!(a.fill == Fill::Engine || a.http, "--fill http needs --http");
    let embedder = a.embedder.build()?;
    let queries = corpus::queries(a.queries, a.seed);
    let server_bin = a.server_bin.clone().unwrap_or_else(http::default_server_bin);
    let client = http::client()?;
    let mut results = Vec::new();
    for &n in &a.scope {
        eprintln!("scope {n}: generating and filling…");
        let facts = corpus::facts(n, a.seed);
        let dir = a.scratch.tempdir()?;
        let data = dir.path().join("data");
        let timeout = Duration::from_secs(a.server_timeout);
        let mut r = ScopeResult {
            scope: n,
            fill_via: a.fill,
            fill_seconds: 0.0,
            fill_per_s: 0.0,
            engine: None,
            engine_mean_hits: None,
            http: None,
            http_mean_hits: None,
            breakdown: None,
            text_sql: None,
            http_p95_target_ms: target(n),
        };
        if a.fill == Fill::Http {
            let server = Server::start(&server_bin, &data, &a.server_arg, &client, timeout).await?;
            r.fill_seconds = fill_http(&client, &server.base, &facts, a.fill_batch).await?;
            eprintln!("scope {n}: filled through HTTP in {:.1} s; HTTP search…", r.fill_seconds);
            let (l, h) = measure_http(&client, &server.base, &queries, a.warmup, a.limit).await?;
            (r.http, r.http_mean_hits) = (Some(l), Some(h));
            drop(server);
        }
        {
            let store = engram_store::open_sqlite(&data).await?;
            let engine = Engine::new(store, embedder.clone(), EngineConfig::default()).await?;
            if a.fill == Fill::Engine {
                r.fill_seconds = fill_engine(&engine, &facts, a.fill_batch).await?;
                eprintln!("scope {n}: filled in {:.1} s; engine search…", r.fill_seconds);
            }
            let (l, h) = measure_engine(&engine, &queries, a.warmup, a.limit, a.mode).await?;
            (r.engine, r.engine_mean_hits) = (Some(l), Some(h));
            if a.breakdown {
                r.breakdown = Some(breakdown(&engine, &queries, a.limit).await?);
            }
        }
        if a.text_sql {
            r.text_sql = Some(crate::text_sql::compare(&data, USER, &queries, 50).await?);
        }
        if a.http && a.fill == Fill::Engine {
            eprintln!("scope {n}: HTTP search…");
            let server = Server::start(&server_bin, &data, &a.server_arg, &client, timeout).await?;
            let (l, h) = measure_http(&client, &server.base, &queries, a.warmup, a.limit).await?;
            (r.http, r.http_mean_hits) = (Some(l), Some(h));
            drop(server);
        }
        r.fill_per_s = n as f64 / r.fill_seconds;
        results.push(r);
    }

    let out = Output {
        environment: report::environment(),
        embedder: a.embedder,
        model_id: embedder.model_id().to_string(),
        mode: a.mode,
        limit: a.limit,
        queries: a.queries,
        warmup: a.warmup,
        results,
    };
    if json {
        return report::print_json(&out);
    }
    println!(
        "search latency, {} embedder, {:?} mode, limit {}, {} timed queries after {} warm-up ({})\n",
        out.embedder.name(),
        out.mode,
        out.limit,
        out.queries,
        out.warmup,
        out.environment
    );
    let ms = |l: &Option<Latency>, f: fn(&Latency) -> f64| {
        l.as_ref().map_or_else(|| "-".to_string(), |l| format!("{:.2}", f(l)))
    };
    let rows: Vec<Vec<String>> = out
        .results
        .iter()
        .map(|r| {
            let verdict = match (&r.http, r.http_p95_target_ms) {
                (Some(l), Some(t)) if l.p95_ms <= t => format!("≤ {t} ms: met"),
                (Some(_), Some(t)) => format!("≤ {t} ms: **missed**"),
                (None, Some(t)) => format!("≤ {t} ms: not measured"),
                (_, None) => "-".to_string(),
            };
            vec![
                r.scope.to_string(),
                format!("{:.0} ({:?})", r.fill_per_s, r.fill_via).to_lowercase(),
                ms(&r.engine, |l| l.p50_ms),
                ms(&r.engine, |l| l.p95_ms),
                ms(&r.engine, |l| l.p99_ms),
                ms(&r.http, |l| l.p50_ms),
                ms(&r.http, |l| l.p95_ms),
                ms(&r.http, |l| l.p99_ms),
                verdict,
            ]
        })
        .collect();
    let breakdown: Vec<Vec<String>> = out
        .results
        .iter()
        .flat_map(|r| {
            r.breakdown.iter().flatten().map(|(step, l)| {
                vec![
                    r.scope.to_string(),
                    step.clone(),
                    format!("{:.2}", l.p50_ms),
                    format!("{:.2}", l.p95_ms),
                    format!("{:.2}", l.p99_ms),
                ]
            })
        })
        .collect();
    print!(
        "{}",
        report::table(
            &[
                "memories in scope",
                "fill (memories/s)",
                "engine p50 (ms)",
                "engine p95",
                "engine p99",
                "HTTP p50 (ms)",
                "HTTP p95",
                "HTTP p99",
                "HTTP p95 target",
            ],
            &rows
        )
    );
    let sql_rows: Vec<Vec<String>> = out
        .results
        .iter()
        .filter_map(|r| {
            let t = r.text_sql.as_ref()?;
            Some(vec![
                r.scope.to_string(),
                format!("{:.2} / {:.2}", t.planner_join.p50_ms, t.planner_join.p95_ms),
                format!("{:.2} / {:.2}", t.fts_first.p50_ms, t.fts_first.p95_ms),
                format!(
                    "{:.2} / {:.2}",
                    t.fts_first_no_clitics.p50_ms, t.fts_first_no_clitics.p95_ms
                ),
                format!("{} of {}", t.same_results, t.queries),
            ])
        })
        .collect();
    if !sql_rows.is_empty() {
        println!("\nfull-text SQL alone, 50 rows (p50 / p95 ms):\n");
        print!(
            "{}",
            report::table(
                &[
                    "memories in scope",
                    "planner's order (JOIN)",
                    "FTS first (CROSS JOIN)",
                    "FTS first, clitics dropped",
                    "same ids"
                ],
                &sql_rows
            )
        );
        if let Some(t) = out.results.iter().find_map(|r| r.text_sql.as_ref()) {
            println!("\nplan, JOIN: {}", t.plan_planner_join.join("; "));
            println!("plan, CROSS JOIN: {}", t.plan_fts_first.join("; "));
        }
    }
    if !breakdown.is_empty() {
        println!("\nsteps of a hybrid search, timed one by one:\n");
        print!(
            "{}",
            report::table(
                &["memories in scope", "step", "p50 (ms)", "p95 (ms)", "p99 (ms)"],
                &breakdown
            )
        );
    }
    Ok(())
}
