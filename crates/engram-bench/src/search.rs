//! `search`: search latency with one user's scope filled with N memories, on SQLite or
//! PostgreSQL, alone in the table or among other users' memories.
//!
//! For each `--scope` N a fresh data dir (or, with `--database-url`, a fresh PostgreSQL
//! database) is filled with N synthetic facts for one user (`remember_batch`,
//! `dedup = false`, batches of `--fill-batch`). With `--rows R` the table holds R memories
//! instead: one user per `--scope` value plus filler users of `--filler-scope` memories
//! each, the rows of all users interleaved in a seeded random order (as a long-lived
//! multi-user store has them), and every `--scope` user is searched in the same table.
//! Then `--queries` recall-style questions ([`crate::corpus::queries`]) are timed one after
//! the other:
//!
//! - **engine**: `Engine::search` in this process (hybrid, limit 10): the server-side cost
//!   (query embedding, exact vector scan, BM25, fusion, loading the hits, and the
//!   access-count update every search does);
//! - **HTTP** (`--http`): the real `engram serve` on the same data dir or database,
//!   `POST /v1/search` through a keep-alive reqwest client, timed from send to the parsed
//!   JSON answer.
//!
//! Each phase first runs `--warmup` untimed queries (the first search of a process loads the
//! user's vectors into its in-memory index).
//!
//! `--recall` (PostgreSQL) compares the store's vector search (top 10) with the exact top 10
//! of the same scope filter: as served (exact up to the store's switch-over, the scope's own
//! HNSW index above), and through the scope's HNSW index (built for the measurement).
//!
//! `--reuse` keeps a filled store under `--data-root` (SQLite) or as a database named after
//! the table (PostgreSQL) and reuses it when it was filled completely before: large tables
//! are loaded once. On PostgreSQL the store keeps no HNSW index until a scope passes the
//! exact-search limit; the fill then builds the index of each searched scope over the limit
//! at the end (as its first search would, in the background).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_core::engine::{Engine, EngineConfig, RememberInput, SearchInput, SearchMode};
use engram_core::model::{KeyRole, MemoryId, Principal, TenantId, UserId};
use engram_core::store::MemoryFilter;
use engram_core::store::prelude::*;
use serde::Serialize;
use time::OffsetDateTime;

use crate::backend::{self, Backend, PgDatabase};
use crate::embedder::EmbedderChoice;
use crate::http::{self, Server};
use crate::report::{self, Latency};
use crate::{ScratchArgs, corpus};

/// Where the memories are written from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fill {
    /// `Engine::remember_batch` in this process (then the server opens the same store).
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
    /// Memories in the searched user's scope; one run per value (with `--rows`: one
    /// searched user per value, all in the same table).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    scope: Vec<usize>,
    /// Memories in the whole table; one table per value, holding the `--scope` users plus
    /// filler users (default: each scope alone in its table).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<usize>,
    /// Memories per filler user with `--rows`.
    #[arg(long, default_value_t = 10_000)]
    filler_scope: usize,
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
    /// order the store uses (see `text_sql.rs`; SQLite only).
    #[arg(long)]
    text_sql: bool,
    /// Recall@10 of the vector search against the exact top 10 of the same scope, as
    /// served and with the HNSW path forced (PostgreSQL only).
    #[arg(long)]
    recall: bool,
    /// `--recall`: `hnsw.ef_search` of the index path measured (default: the store's).
    #[arg(long)]
    ef_search: Option<usize>,
    /// How the scope is filled.
    #[arg(long, value_enum, default_value = "engine")]
    fill: Fill,
    /// PostgreSQL server (`postgres://…`) instead of SQLite: each table is a database of its
    /// own on it (dropped afterwards unless `--keep-data` or `--reuse`).
    #[arg(long)]
    database_url: Option<String>,
    /// Keep each filled store and reuse it on the next run with the same table (rows,
    /// scopes, filler, embedder, seed): SQLite data dirs under `--data-root`, PostgreSQL
    /// databases `engram_bench_<table>`.
    #[arg(long)]
    reuse: bool,
    /// Where `--reuse` keeps SQLite data dirs.
    #[arg(long, default_value = "target/bench-data")]
    data_root: PathBuf,
    /// PostgreSQL: keep a table-wide HNSW index an older store made (default: drop it).
    #[arg(long)]
    keep_index: bool,
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

/// One table: its users (the searched ones first) and the searched scopes.
#[derive(Debug, Clone)]
struct Table {
    rows: usize,
    /// `(user, memories)`, searched users first.
    users: Vec<(String, usize)>,
    /// `(scope, user)` of the searched users.
    searched: Vec<(usize, String)>,
    /// Name of the table for `--reuse` (identifier-safe).
    key: String,
}

fn user_of(scope: usize) -> String {
    format!("bench-user-{scope}")
}

fn tables(a: &Args) -> anyhow::Result<Vec<Table>> {
    let key = |rows: usize, scopes: &[usize]| {
        let s: Vec<String> = scopes.iter().map(ToString::to_string).collect();
        format!("r{rows}_s{}_f{}_{}_{}", s.join("_"), a.filler_scope, a.embedder.name(), a.seed)
    };
    if a.rows.is_empty() {
        return Ok(a
            .scope
            .iter()
            .map(|&n| Table {
                rows: n,
                users: vec![(user_of(n), n)],
                searched: vec![(n, user_of(n))],
                key: key(n, &[n]),
            })
            .collect());
    }
    anyhow::ensure!(a.filler_scope > 0, "--filler-scope must be positive");
    let mut out = Vec::new();
    for &rows in &a.rows {
        let searched_rows: usize = a.scope.iter().sum();
        anyhow::ensure!(
            searched_rows <= rows,
            "--rows {rows} cannot hold the --scope users ({searched_rows} memories)"
        );
        let mut users: Vec<(String, usize)> = a.scope.iter().map(|&s| (user_of(s), s)).collect();
        let mut left = rows - searched_rows;
        while left > 0 {
            let n = left.min(a.filler_scope);
            users.push((format!("bench-filler-{}", users.len() - a.scope.len()), n));
            left -= n;
        }
        out.push(Table {
            rows,
            users,
            searched: a.scope.iter().map(|&s| (s, user_of(s))).collect(),
            key: key(rows, &a.scope),
        });
    }
    Ok(out)
}

/// The user of each row, in a seeded random order (every user's rows spread over the
/// table, as in a store that many users write to over time).
fn row_users(t: &Table, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = Vec::with_capacity(t.rows);
    for (i, (_, n)) in t.users.iter().enumerate() {
        v.extend(std::iter::repeat_n(i as u32, *n));
    }
    if t.users.len() > 1 {
        let mut r = corpus::Rng::new(seed ^ 0x0055_E125);
        for i in (1..v.len()).rev() {
            v.swap(i, r.below(i + 1));
        }
    }
    v
}

#[derive(Debug, Serialize)]
struct Recall {
    queries: usize,
    k: usize,
    /// Active vectors in the scope; the store searches exactly up to its switch-over.
    scope: usize,
    /// The store's default path (exact up to the switch-over, HNSW above).
    served: f64,
    served_latency: Latency,
    /// The HNSW path forced (`set_exact_scan_limit(0)`).
    hnsw: f64,
    hnsw_latency: Latency,
    /// The exact path forced: the reference.
    exact_latency: Latency,
}

#[derive(Debug, Serialize)]
struct ScopeResult {
    rows: usize,
    scope: usize,
    engine: Option<Latency>,
    engine_mean_hits: Option<f64>,
    http: Option<Latency>,
    http_mean_hits: Option<f64>,
    breakdown: Option<Vec<(String, Latency)>>,
    text_sql: Option<crate::text_sql::TextSql>,
    recall: Option<Recall>,
    /// The HTTP p95 target for this scope, if the brief sets one (ms).
    http_p95_target_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
struct TableResult {
    rows: usize,
    users: usize,
    fill_via: Fill,
    /// Seconds of the fill (of the earlier run that filled it, when reused).
    fill_seconds: f64,
    fill_per_s: f64,
    /// PostgreSQL: seconds of the HNSW index build after the fill (part of `fill_seconds`).
    index_build_seconds: Option<f64>,
    reused: bool,
    /// 1-minute load average before and after the timed phases.
    load: (f64, f64),
    scopes: Vec<ScopeResult>,
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    backend: Backend,
    embedder: EmbedderChoice,
    model_id: String,
    mode: Mode,
    limit: usize,
    queries: usize,
    warmup: usize,
    tables: Vec<TableResult>,
}

/// HTTP p95 targets: ≤ 15 ms at 10k memories, ≤ 60 ms at 100k (builtin embedder, the scope
/// alone in the table); ≤ 25 ms at 1M rows with 10k per scope (issue 4).
fn target(rows: usize, scope: usize) -> Option<f64> {
    match (rows, scope) {
        (10_000, 10_000) => Some(15.0),
        (100_000, 100_000) => Some(60.0),
        (1_000_000, 10_000) => Some(25.0),
        _ => None,
    }
}

/// The 1-minute load average.
fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn principal() -> Principal {
    Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin }
}

async fn fill_engine(
    engine: &Engine,
    facts: &[String],
    users: &[UserId],
    row_users: &[u32],
    batch: usize,
) -> anyhow::Result<f64> {
    let p = principal();
    let t = Instant::now();
    let mut done = 0;
    for (c, u) in facts.chunks(batch).zip(row_users.chunks(batch)) {
        let inputs = c
            .iter()
            .zip(u)
            .map(|(content, &u)| RememberInput {
                user_id: Some(users[u as usize].clone()),
                content: content.clone(),
                ..Default::default()
            })
            .collect();
        engine.remember_batch(&p, inputs, false).await?;
        done += c.len();
        if done % 100_000 < batch && facts.len() >= 200_000 {
            eprintln!("  {done} rows in {:.1} s", t.elapsed().as_secs_f64());
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

async fn fill_http(
    client: &reqwest::Client,
    base: &str,
    facts: &[String],
    users: &[UserId],
    row_users: &[u32],
    batch: usize,
) -> anyhow::Result<f64> {
    let url = format!("{base}/v1/memories/batch");
    let t = Instant::now();
    for (c, u) in facts.chunks(batch).zip(row_users.chunks(batch)) {
        let memories: Vec<serde_json::Value> = c
            .iter()
            .zip(u)
            .map(|(content, &u)| {
                serde_json::json!({ "content": content, "user_id": users[u as usize].as_str() })
            })
            .collect();
        http::post_json(client, &url, &serde_json::json!({ "memories": memories, "dedup": false }))
            .await?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Run `warmup` untimed then every query timed; returns the latencies and the mean hit count.
async fn measure_engine(
    engine: &Engine,
    user: &UserId,
    queries: &[String],
    warmup: usize,
    limit: usize,
    mode: Mode,
) -> anyhow::Result<(Latency, f64)> {
    let p = principal();
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
    user: &UserId,
    queries: &[String],
    limit: usize,
) -> anyhow::Result<Vec<(String, Latency)>> {
    let tenant = TenantId::default_tenant();
    let filter = MemoryFilter { user_id: Some(user.clone()), ..Default::default() };
    let n = engine.config().candidates.max(limit);
    let (store, embedder) = (engine.services().store(), engine.embedder());
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

/// Share of the exact top `k` found, a hit with a score equal to the exact k-th (a tie)
/// counting as found.
fn recall_of(found: &[(MemoryId, f32)], exact: &[(MemoryId, f32)]) -> f64 {
    if exact.is_empty() {
        return 1.0;
    }
    let kth = exact.last().map_or(f32::NEG_INFINITY, |x| x.1);
    let ok = found
        .iter()
        .filter(|(id, s)| exact.iter().any(|(e, _)| e == id) || *s >= kth - 1e-6)
        .count()
        .min(exact.len());
    ok as f64 / exact.len() as f64
}

/// Recall@k of the PostgreSQL vector search as served and through the scope's own HNSW
/// index, against the exact path, on separate store handles of the same database. A scope
/// within the exact limit gets its index only for this measurement (built here, dropped
/// afterwards, so that it is served exactly again).
async fn recall(
    url: &str,
    engine: &Engine,
    user: &UserId,
    scope: usize,
    queries: &[String],
    k: usize,
    ef_search: Option<usize>,
) -> anyhow::Result<Recall> {
    let exact = engram_store::open_postgres(url).await?;
    exact.set_exact_scan_limit(usize::MAX);
    let hnsw = engram_store::open_postgres(url).await?;
    hnsw.set_exact_scan_limit(0);
    if let Some(ef) = ef_search {
        hnsw.set_hnsw_ef_search(ef);
    }
    let served = engine.services().store();
    let tenant = TenantId::default_tenant();
    let filter = MemoryFilter { user_id: Some(user.clone()), ..Default::default() };
    let (mut rs, mut rh) = (0.0, 0.0);
    let (mut ts, mut th, mut te) = (Vec::new(), Vec::new(), Vec::new());
    let mut vectors = Vec::new();
    let mut exacts = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let v = engine.embedder().embed(std::slice::from_ref(q)).await?.pop().unwrap_or_default();
        let t = Instant::now();
        let e = exact.vector_search(&tenant, &filter, &v, k).await?;
        te.push(t.elapsed());
        let t = Instant::now();
        let s = served.vector_search(&tenant, &filter, &v, k).await?;
        ts.push(t.elapsed());
        rs += recall_of(&s, &e);
        if i == 0 {
            anyhow::ensure!(e.len() == k.min(scope), "exact path returned {} rows", e.len());
        }
        vectors.push(v);
        exacts.push(e);
    }
    let temporary = scope <= engram_store::postgres::search::EXACT_SCAN_LIMIT;
    anyhow::ensure!(hnsw.build_scope_index(&tenant, user).await?, "no HNSW index built");
    for (v, e) in vectors.iter().zip(&exacts) {
        let t = Instant::now();
        let h = hnsw.vector_search(&tenant, &filter, v, k).await?;
        th.push(t.elapsed());
        rh += recall_of(&h, e);
    }
    if temporary {
        let ix: String = sqlx::query_scalar(
            "SELECT 'memories_hnsw_' || (SELECT value FROM meta WHERE key = 'embedding_dims') \
             || '_' || left(md5($1 || chr(31) || $2), 16)",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .fetch_one(hnsw.pool())
        .await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP INDEX IF EXISTS \"{ix}\"")))
            .execute(hnsw.pool())
            .await?;
    }
    let n = queries.len() as f64;
    Ok(Recall {
        queries: queries.len(),
        k,
        scope,
        served: rs / n,
        served_latency: Latency::of(&ts),
        hnsw: rh / n,
        hnsw_latency: Latency::of(&th),
        exact_latency: Latency::of(&te),
    })
}

async fn measure_http(
    client: &reqwest::Client,
    base: &str,
    user: &str,
    queries: &[String],
    warmup: usize,
    limit: usize,
) -> anyhow::Result<(Latency, f64)> {
    let url = format!("{base}/v1/search");
    let body = |q: &String| serde_json::json!({ "query": q, "user_id": user, "limit": limit });
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

/// Where a table lives: a data dir (SQLite; also the server's data dir with PostgreSQL)
/// and, on PostgreSQL, its database.
struct Place {
    data: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    db: Option<PgDatabase>,
    /// The fill seconds and index-build seconds of a complete earlier fill (`--reuse`).
    reused: Option<(f64, Option<f64>)>,
    /// `--reuse`: the marker file of a complete SQLite fill.
    marker: Option<PathBuf>,
    /// `--reuse`: mark the database complete after the fill.
    reusable: bool,
}

const MARKER: &str = "engram-bench complete";

fn parse_marker(s: &str) -> (f64, Option<f64>) {
    let field = |name: &str| {
        s.split_whitespace().find_map(|w| w.strip_prefix(name).and_then(|v| v.parse::<f64>().ok()))
    };
    (field("fill_seconds=").unwrap_or(f64::NAN), field("index_seconds="))
}

fn marker_text(key: &str, fill: f64, index: Option<f64>) -> String {
    let index = index.map(|i| format!(" index_seconds={i:.3}")).unwrap_or_default();
    format!("{MARKER} {key} fill_seconds={fill:.3}{index}")
}

async fn place(a: &Args, t: &Table) -> anyhow::Result<Place> {
    if !a.reuse {
        let tmp = a.scratch.tempdir()?;
        let data = tmp.path().join("data");
        let db = match &a.database_url {
            Some(url) => Some(PgDatabase::fresh(url, "search", a.scratch.keep_data).await?),
            None => None,
        };
        return Ok(Place {
            data,
            _tmp: Some(tmp),
            db,
            reused: None,
            marker: None,
            reusable: false,
        });
    }
    let dir = a.data_root.join(format!(
        "{}_{}",
        if a.database_url.is_some() { "pg" } else { "sqlite" },
        t.key
    ));
    let marker = dir.join("COMPLETE");
    let data = dir.join("data");
    let marked = format!("{MARKER} {} ", t.key);
    match &a.database_url {
        Some(url) => {
            let name = format!("engram_bench_{}", t.key);
            std::fs::create_dir_all(&dir)?;
            if let Some((db, comment)) = PgDatabase::existing(url, &name, &marked).await? {
                eprintln!("reusing the filled database {}", db.url);
                return Ok(Place {
                    data,
                    _tmp: None,
                    db: Some(db),
                    reused: Some(parse_marker(&comment)),
                    marker: None,
                    reusable: true,
                });
            }
            let db = PgDatabase::create(url, &name, true).await?;
            Ok(Place { data, _tmp: None, db: Some(db), reused: None, marker: None, reusable: true })
        }
        None => {
            if let Ok(m) = std::fs::read_to_string(&marker)
                && m.starts_with(&marked)
            {
                eprintln!("reusing the filled data dir {}", data.display());
                return Ok(Place {
                    data,
                    _tmp: None,
                    db: None,
                    reused: Some(parse_marker(&m)),
                    marker: None,
                    reusable: true,
                });
            }
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            eprintln!("data dir kept for --reuse: {}", data.display());
            Ok(Place {
                data,
                _tmp: None,
                db: None,
                reused: None,
                marker: Some(marker),
                reusable: true,
            })
        }
    }
}

impl Place {
    fn url(&self) -> Option<&str> {
        self.db.as_ref().map(|d| d.url.as_str())
    }

    async fn mark(&self, key: &str, fill: f64, index: Option<f64>) -> anyhow::Result<()> {
        let text = marker_text(key, fill, index);
        if let Some(m) = &self.marker {
            std::fs::write(m, &text)?;
        }
        if let Some(db) = &self.db
            && self.reusable
        {
            db.mark(&text).await?;
        }
        Ok(())
    }

    /// Server arguments for this store.
    fn server_args(&self, extra: &[String]) -> Vec<String> {
        let mut v = extra.to_vec();
        if let Some(url) = self.url() {
            v.push("--database-url".into());
            v.push(url.to_string());
        }
        v
    }
}

/// The HNSW indexes of `memories` (PostgreSQL).
async fn hnsw_indexes(pool: &sqlx::PgPool) -> anyhow::Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = 'memories' \
         AND indexname LIKE 'memories\\_hnsw\\_%'",
    )
    .fetch_all(pool)
    .await?)
}

/// Fill a table through the engine. On PostgreSQL the store builds HNSW indexes only for
/// scopes over its exact-search limit (lazily, at their first search): the fill writes
/// without one (an older store's table-wide index is dropped first unless `--keep-index`),
/// then builds the index of every searched scope over the limit, timed (returns the fill
/// and the build seconds).
async fn fill_table(
    a: &Args,
    place: &Place,
    engine: &Engine,
    facts: &[String],
    users: &[UserId],
    row_users: &[u32],
) -> anyhow::Result<(f64, Option<f64>)> {
    let Some(url) = place.url() else {
        return Ok((fill_engine(engine, facts, users, row_users, a.fill_batch).await?, None));
    };
    let pool = sqlx::PgPool::connect(url).await?;
    engine.services().ensure_space().await?;
    let t = Instant::now();
    if !a.keep_index {
        for ix in hnsw_indexes(&pool).await? {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP INDEX {ix}"))).execute(&pool).await?;
        }
    }
    fill_engine(engine, facts, users, row_users, a.fill_batch).await?;
    eprintln!(
        "  rows in {:.1} s; building the HNSW indexes of large scopes…",
        t.elapsed().as_secs_f64()
    );
    sqlx::query("ANALYZE memories").execute(&pool).await?;
    let ti = Instant::now();
    let s = engram_store::open_postgres(url).await?;
    let tenant = TenantId::default_tenant();
    let mut built = false;
    for (scope, user) in a.scope.iter().map(|&s| (s, user_of(s))) {
        if scope > engram_store::postgres::search::EXACT_SCAN_LIMIT {
            built |= s.build_scope_index(&tenant, &UserId::parse(user)?).await?;
        }
    }
    let index = ti.elapsed().as_secs_f64();
    if built {
        eprintln!("  HNSW indexes built in {index:.1} s");
    }
    pool.close().await;
    Ok((t.elapsed().as_secs_f64(), built.then_some(index)))
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(a.queries > 0, "--queries must be positive");
    anyhow::ensure!(a.fill == Fill::Engine || a.http, "--fill http needs --http");
    anyhow::ensure!(
        !(a.text_sql && a.database_url.is_some()),
        "--text-sql times SQLite statements; it cannot run with --database-url"
    );
    anyhow::ensure!(a.database_url.is_some() || !a.recall, "--recall needs --database-url");
    let embedder = a.embedder.build()?;
    let queries = corpus::queries(a.queries, a.seed);
    let server_bin = a.server_bin.clone().unwrap_or_else(http::default_server_bin);
    let client = http::client()?;
    let timeout = Duration::from_secs(a.server_timeout);
    let mut results = Vec::new();
    for t in tables(&a)? {
        let place = place(&a, &t).await?;
        let users: Vec<UserId> =
            t.users.iter().map(|(u, _)| UserId::parse(u)).collect::<Result<_, _>>()?;
        let mut r = TableResult {
            rows: t.rows,
            users: t.users.len(),
            fill_via: a.fill,
            fill_seconds: 0.0,
            fill_per_s: 0.0,
            index_build_seconds: None,
            reused: place.reused.is_some(),
            load: (0.0, 0.0),
            scopes: t
                .searched
                .iter()
                .map(|(s, _)| ScopeResult {
                    rows: t.rows,
                    scope: *s,
                    engine: None,
                    engine_mean_hits: None,
                    http: None,
                    http_mean_hits: None,
                    breakdown: None,
                    text_sql: None,
                    recall: None,
                    http_p95_target_ms: target(t.rows, *s),
                })
                .collect(),
        };
        let server_args = place.server_args(&a.server_arg);
        if let Some((fill, index)) = place.reused {
            (r.fill_seconds, r.index_build_seconds) = (fill, index);
        }
        if a.fill == Fill::Http && place.reused.is_none() {
            eprintln!("{} rows: generating and filling through HTTP…", t.rows);
            let facts = corpus::facts(t.rows, a.seed);
            let ru = row_users(&t, a.seed);
            let server =
                Server::start(&server_bin, &place.data, &server_args, &client, timeout).await?;
            r.fill_seconds =
                fill_http(&client, &server.base, &facts, &users, &ru, a.fill_batch).await?;
            drop(server);
            place.mark(&t.key, r.fill_seconds, None).await?;
        }
        r.load.0 = load1();
        {
            let store: Arc<dyn Store> = backend::open(place.url(), &place.data).await?;
            let engine = Engine::new(store, embedder.clone(), EngineConfig::default()).await?;
            if a.fill == Fill::Engine && place.reused.is_none() {
                eprintln!("{} rows: generating and filling…", t.rows);
                let facts = corpus::facts(t.rows, a.seed);
                let ru = row_users(&t, a.seed);
                (r.fill_seconds, r.index_build_seconds) =
                    fill_table(&a, &place, &engine, &facts, &users, &ru).await?;
                eprintln!("{} rows: filled in {:.1} s", t.rows, r.fill_seconds);
                place.mark(&t.key, r.fill_seconds, r.index_build_seconds).await?;
                r.load.0 = load1();
            }
            for (sr, (_, user)) in r.scopes.iter_mut().zip(&t.searched) {
                let uid = UserId::parse(user)?;
                // Recall first: every search bumps its hits' access counts, and on
                // PostgreSQL an update that cannot stay on its page adds the row's new
                // version to every index, the HNSW graph too (a duplicate vector).
                if a.recall
                    && let Some(url) = place.url()
                {
                    eprintln!("{} rows, scope {}: recall…", t.rows, sr.scope);
                    sr.recall = Some(
                        recall(url, &engine, &uid, sr.scope, &queries, 10, a.ef_search).await?,
                    );
                }
                eprintln!("{} rows, scope {}: engine search…", t.rows, sr.scope);
                let (l, h) =
                    measure_engine(&engine, &uid, &queries, a.warmup, a.limit, a.mode).await?;
                (sr.engine, sr.engine_mean_hits) = (Some(l), Some(h));
                if a.breakdown {
                    sr.breakdown = Some(breakdown(&engine, &uid, &queries, a.limit).await?);
                }
            }
        }
        if a.text_sql {
            for (sr, (_, user)) in r.scopes.iter_mut().zip(&t.searched) {
                sr.text_sql =
                    Some(crate::text_sql::compare(&place.data, user, &queries, 50).await?);
            }
        }
        if a.http {
            let server =
                Server::start(&server_bin, &place.data, &server_args, &client, timeout).await?;
            for (sr, (_, user)) in r.scopes.iter_mut().zip(&t.searched) {
                eprintln!("{} rows, scope {}: HTTP search…", t.rows, sr.scope);
                let (l, h) =
                    measure_http(&client, &server.base, user, &queries, a.warmup, a.limit).await?;
                (sr.http, sr.http_mean_hits) = (Some(l), Some(h));
            }
            drop(server);
        }
        r.load.1 = load1();
        r.fill_per_s = t.rows as f64 / r.fill_seconds;
        if let Some(db) = place.db {
            db.cleanup().await?;
        }
        results.push(r);
    }

    let out = Output {
        environment: report::environment(),
        backend: Backend::of(a.database_url.as_deref()),
        embedder: a.embedder,
        model_id: embedder.model_id().to_string(),
        mode: a.mode,
        limit: a.limit,
        queries: a.queries,
        warmup: a.warmup,
        tables: results,
    };
    if json {
        return report::print_json(&out);
    }
    print_markdown(&out);
    Ok(())
}

fn print_markdown(out: &Output) {
    println!(
        "search latency on {}, {} embedder, {:?} mode, limit {}, {} timed queries after {} warm-up ({})\n",
        out.backend.name(),
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
    let fill = |t: &TableResult| {
        let mut s = format!("{:.0} ({:?})", t.fill_per_s, t.fill_via).to_lowercase();
        if let Some(i) = t.index_build_seconds {
            s.push_str(&format!(", incl. {i:.0} s HNSW build"));
        }
        if t.reused {
            s.push_str(", reused");
        }
        s
    };
    let scopes = || out.tables.iter().flat_map(|t| t.scopes.iter().map(move |s| (t, s)));
    let rows: Vec<Vec<String>> = scopes()
        .map(|(t, r)| {
            let verdict = match (&r.http, r.http_p95_target_ms) {
                (Some(l), Some(t)) if l.p95_ms <= t => format!("≤ {t} ms: met"),
                (Some(_), Some(t)) => format!("≤ {t} ms: **missed**"),
                (None, Some(t)) => format!("≤ {t} ms: not measured"),
                (_, None) => "-".to_string(),
            };
            vec![
                out.backend.name().to_string(),
                r.rows.to_string(),
                r.scope.to_string(),
                fill(t),
                ms(&r.engine, |l| l.p50_ms),
                ms(&r.engine, |l| l.p95_ms),
                ms(&r.engine, |l| l.p99_ms),
                ms(&r.http, |l| l.p50_ms),
                ms(&r.http, |l| l.p95_ms),
                ms(&r.http, |l| l.p99_ms),
                verdict,
                format!("{:.2} – {:.2}", t.load.0, t.load.1),
            ]
        })
        .collect();
    print!(
        "{}",
        report::table(
            &[
                "store",
                "memories in table",
                "memories in scope",
                "fill (memories/s)",
                "engine p50 (ms)",
                "engine p95",
                "engine p99",
                "HTTP p50 (ms)",
                "HTTP p95",
                "HTTP p99",
                "HTTP p95 target",
                "load (1 min, before – after)",
            ],
            &rows
        )
    );
    let recall_rows: Vec<Vec<String>> = scopes()
        .filter_map(|(_, r)| {
            let c = r.recall.as_ref()?;
            let lat = |l: &Latency| format!("{:.2} / {:.2}", l.p50_ms, l.p95_ms);
            Some(vec![
                r.rows.to_string(),
                c.scope.to_string(),
                c.queries.to_string(),
                format!("{:.4}", c.served),
                lat(&c.served_latency),
                format!("{:.4}", c.hnsw),
                lat(&c.hnsw_latency),
                lat(&c.exact_latency),
            ])
        })
        .collect();
    if !recall_rows.is_empty() {
        println!(
            "\nvector search recall@10 against the exact top 10 of the same scope (latency p50 / p95 ms):\n"
        );
        print!(
            "{}",
            report::table(
                &[
                    "memories in table",
                    "memories in scope",
                    "queries",
                    "recall@10 as served",
                    "as served",
                    "recall@10 HNSW forced",
                    "HNSW forced",
                    "exact forced",
                ],
                &recall_rows
            )
        );
    }
    let sql_rows: Vec<Vec<String>> = scopes()
        .filter_map(|(_, r)| {
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
        if let Some(t) = scopes().find_map(|(_, r)| r.text_sql.as_ref()) {
            println!("\nplan, JOIN: {}", t.plan_planner_join.join("; "));
            println!("plan, CROSS JOIN: {}", t.plan_fts_first.join("; "));
        }
    }
    let breakdown: Vec<Vec<String>> = scopes()
        .flat_map(|(_, r)| {
            r.breakdown.iter().flatten().map(|(step, l)| {
                vec![
                    r.rows.to_string(),
                    r.scope.to_string(),
                    step.clone(),
                    format!("{:.2}", l.p50_ms),
                    format!("{:.2}", l.p95_ms),
                    format!("{:.2}", l.p99_ms),
                ]
            })
        })
        .collect();
    if !breakdown.is_empty() {
        println!("\nsteps of a hybrid search, timed one by one:\n");
        print!(
            "{}",
            report::table(
                &[
                    "memories in table",
                    "memories in scope",
                    "step",
                    "p50 (ms)",
                    "p95 (ms)",
                    "p99 (ms)"
                ],
                &breakdown
            )
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_counts_ties_as_found() {
        let ids: Vec<MemoryId> = (0..6).map(|_| MemoryId::new()).collect();
        let id = |i: usize| ids[i];
        let exact = vec![(id(1), 0.9), (id(2), 0.8), (id(3), 0.5)];
        assert_eq!(recall_of(&exact, &exact), 1.0);
        let missed = vec![(id(1), 0.9), (id(2), 0.8), (id(4), 0.4)];
        assert!((recall_of(&missed, &exact) - 2.0 / 3.0).abs() < 1e-9);
        let tie = vec![(id(1), 0.9), (id(2), 0.8), (id(5), 0.5)];
        assert_eq!(recall_of(&tie, &exact), 1.0);
    }

    #[test]
    fn rows_spread_users_and_keep_counts() {
        let t = Table {
            rows: 30,
            users: vec![("a".into(), 10), ("b".into(), 20)],
            searched: vec![(10, "a".into())],
            key: "k".into(),
        };
        let v = row_users(&t, 1);
        assert_eq!(v.len(), 30);
        assert_eq!(v.iter().filter(|&&u| u == 0).count(), 10);
        assert_ne!(&v[..10], &[0; 10][..]);
    }
}
