//! `remember`: batch remember throughput through `Engine::remember_batch`.
//!
//! N synthetic facts ([`crate::corpus::facts`]) for one user go in batches of `--batch` into a
//! fresh SQLite store in a temp dir (or, with `--database-url`, a fresh PostgreSQL database on
//! that server), with or without dedup. The clock covers
//! `remember_batch` only (validation, embedding, dedup, the insert transaction). An
//! "embed only" pass over the same batches, timed separately, shows how much of it is the
//! embedder.

use std::time::{Duration, Instant};

use engram_core::engine::{Decision, Engine, EngineConfig, RememberInput};
use engram_core::model::{
    EventKind, KeyRole, Memory, MemoryEvent, MemoryId, Principal, TenantId, UserId,
};
use engram_core::store::NewMemory;
use engram_core::store::prelude::*;
use serde::Serialize;

use crate::backend::{self, Backend, PgDatabase};
use crate::embedder::EmbedderChoice;
use crate::report::{self, Latency};
use crate::{ScratchArgs, corpus};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "builtin")]
    embedder: EmbedderChoice,
    /// Number of memories to remember.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// Memories per `remember_batch` call.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Deduplicate (each item checked against the store and the earlier items of its batch).
    #[arg(long)]
    dedup: bool,
    /// Skip the embed-only baseline pass.
    #[arg(long)]
    no_baseline: bool,
    /// Facts sampled for the nearest-neighbour cosine statistics (0: skip).
    #[arg(long, default_value_t = 1000)]
    nn_sample: usize,
    /// Seed of the synthetic facts.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// PostgreSQL server (`postgres://…`) instead of SQLite: each store is a fresh database
    /// on it, dropped afterwards (kept with `--keep-data`).
    #[arg(long)]
    database_url: Option<String>,
    /// PostgreSQL: give the written user's scope its HNSW index before the timed batches, as
    /// a scope over the store's exact-search limit has (shows what maintaining the index on
    /// every insert costs; without it, the default, no index exists: the scope is small).
    #[arg(long)]
    with_hnsw: bool,
    #[command(flatten)]
    scratch: ScratchArgs,
}

/// The user every memory of the benchmark belongs to.
const BENCH_USER: &str = "bench-user";

/// A fresh store: a SQLite data dir in a temp dir, or a fresh PostgreSQL database.
struct Fresh {
    store: std::sync::Arc<dyn Store>,
    _dir: Option<tempfile::TempDir>,
    db: Option<PgDatabase>,
}

impl Fresh {
    async fn new(database_url: Option<&str>, scratch: &ScratchArgs) -> anyhow::Result<Self> {
        match database_url {
            Some(url) => {
                let db = PgDatabase::fresh(url, "remember", scratch.keep_data).await?;
                let store = backend::open(Some(&db.url), std::path::Path::new("")).await?;
                Ok(Self { store, _dir: None, db: Some(db) })
            }
            None => {
                let dir = scratch.tempdir()?;
                let store = backend::open(None, dir.path()).await?;
                Ok(Self { store, _dir: Some(dir), db: None })
            }
        }
    }

    /// Build the HNSW index of the bench user's scope (PostgreSQL).
    async fn build_hnsw(&self) -> anyhow::Result<()> {
        let Some(db) = &self.db else { anyhow::bail!("--with-hnsw needs --database-url") };
        let pg = engram_store::open_postgres(&db.url).await?;
        let built =
            pg.build_scope_index(&TenantId::default_tenant(), &UserId::parse(BENCH_USER)?).await?;
        anyhow::ensure!(built, "no HNSW index built");
        pg.pool().close().await;
        Ok(())
    }

    async fn cleanup(self) -> anyhow::Result<()> {
        drop(self.store);
        if let Some(db) = self.db {
            db.cleanup().await?;
        }
        Ok(())
    }
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    backend: Backend,
    /// PostgreSQL with the user's HNSW index maintained (`--with-hnsw`).
    with_hnsw: bool,
    embedder: EmbedderChoice,
    model_id: String,
    n: usize,
    batch: usize,
    dedup: bool,
    seconds: f64,
    memories_per_s: f64,
    added: usize,
    deduplicated: usize,
    batch_latency: Latency,
    embed_only_seconds: Option<f64>,
    embed_only_per_s: Option<f64>,
    /// A few deduplicated items: `(new text, the stored fact it was merged into, cosine)`.
    dedup_examples: Vec<(String, String, f32)>,
    /// Without dedup: the same rows and vectors inserted again with `Store::insert_memories`
    /// alone (new ids, one `created` event each, one call per batch), into another fresh
    /// store: the share of the store in the batch time.
    store_insert_only: Option<Latency>,
    /// Cosine of each sampled fact to its nearest other sampled fact: percentiles and the
    /// share at or above the default dedup threshold (0.90).
    nn_cosine: Option<NnCosine>,
}

#[derive(Debug, Serialize)]
struct NnCosine {
    sample: usize,
    p50: f32,
    p90: f32,
    p99: f32,
    max: f32,
    at_or_above_0_90: f64,
}

/// Nearest-neighbour cosine among the first `n` facts (all distinct texts).
/// Insert `batches` again (new ids) with the store alone; per-batch latencies.
async fn store_only(
    batches: &[Vec<Memory>],
    vectors: Vec<Vec<Vec<f32>>>,
    embedder: &dyn engram_core::embed::Embedder,
    database_url: Option<&str>,
    with_hnsw: bool,
    scratch: &ScratchArgs,
) -> anyhow::Result<Latency> {
    let fresh = Fresh::new(database_url, scratch).await?;
    let store = fresh.store.clone();
    store.ensure_embedding_space(embedder.model_id(), embedder.dims()).await?;
    if with_hnsw {
        fresh.build_hnsw().await?;
    }
    let tenant = TenantId::default_tenant();
    let mut times = Vec::with_capacity(batches.len());
    for (rows, vecs) in batches.iter().zip(vectors) {
        let rows: Vec<NewMemory> = rows
            .iter()
            .zip(vecs)
            .map(|(m, v)| {
                let id = MemoryId::new();
                let event = MemoryEvent {
                    memory_id: id,
                    event: EventKind::Created,
                    related_id: None,
                    actor: "admin".into(),
                    detail: serde_json::json!({}),
                    at: m.created_at,
                };
                NewMemory {
                    memory: Memory { id, ..m.clone() },
                    vector: Some(v),
                    events: vec![event],
                    unique: false,
                }
            })
            .collect();
        let t = Instant::now();
        store.insert_memories(&tenant, rows).await?;
        times.push(t.elapsed());
    }
    drop(store);
    fresh.cleanup().await?;
    Ok(Latency::of(&times))
}

async fn nn_cosine(
    embedder: &std::sync::Arc<dyn engram_core::embed::Embedder>,
    facts: &[String],
    n: usize,
) -> anyhow::Result<NnCosine> {
    let sample = &facts[..n.min(facts.len())];
    let mut vecs = Vec::new();
    for c in sample.chunks(256) {
        vecs.extend(embedder.embed(c).await?);
    }
    let mut nn: Vec<f32> = (0..vecs.len())
        .map(|i| {
            (0..vecs.len())
                .filter(|&j| j != i)
                .map(|j| engram_core::embed::dot(&vecs[i], &vecs[j]))
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect();
    nn.sort_by(f32::total_cmp);
    let pct = |p: f64| nn[(((p / 100.0) * nn.len() as f64).ceil() as usize).clamp(1, nn.len()) - 1];
    Ok(NnCosine {
        sample: nn.len(),
        p50: pct(50.0),
        p90: pct(90.0),
        p99: pct(99.0),
        max: nn.last().copied().unwrap_or(f32::NAN),
        at_or_above_0_90: nn.iter().filter(|&&c| c >= 0.90).count() as f64 / nn.len() as f64,
    })
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(a.n > 0 && a.batch > 0, "--n and --batch must be positive");
    let embedder = a.embedder.build()?;
    let facts = corpus::facts(a.n, a.seed);
    let chunks: Vec<&[String]> = facts.chunks(a.batch).collect();

    let mut embed_only = None;
    let mut baseline_vectors: Vec<Vec<Vec<f32>>> = Vec::new();
    if !a.no_baseline {
        let t = Instant::now();
        for c in &chunks {
            let v = embedder.embed(c).await?;
            anyhow::ensure!(v.len() == c.len(), "embedder returned {} vectors", v.len());
            baseline_vectors.push(v);
        }
        embed_only = Some(t.elapsed().as_secs_f64());
    }

    let fresh = Fresh::new(a.database_url.as_deref(), &a.scratch).await?;
    let engine =
        Engine::new(fresh.store.clone(), embedder.clone(), EngineConfig::default()).await?;
    if a.with_hnsw {
        fresh.store.ensure_embedding_space(embedder.model_id(), embedder.dims()).await?;
        fresh.build_hnsw().await?;
    }
    let p = Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin };
    let user = UserId::parse(BENCH_USER)?;

    let mut added = 0;
    let mut deduplicated = 0;
    let mut dedup_examples = Vec::new();
    let mut batch_times: Vec<Duration> = Vec::with_capacity(chunks.len());
    let mut stored: Vec<Vec<Memory>> = Vec::with_capacity(chunks.len());
    let total = Instant::now();
    for c in &chunks {
        let inputs: Vec<RememberInput> = c
            .iter()
            .map(|content| RememberInput {
                user_id: Some(user.clone()),
                content: content.clone(),
                ..Default::default()
            })
            .collect();
        let t = Instant::now();
        let out = engine.remember_batch(&p, inputs, a.dedup).await?;
        batch_times.push(t.elapsed());
        let mut rows = Vec::new();
        for (r, text) in out.into_iter().zip(c.iter()) {
            match r.decision {
                Decision::Add | Decision::Update => {
                    added += 1;
                    rows.push(r.memory);
                }
                Decision::None => {
                    deduplicated += 1;
                    if dedup_examples.len() < 8 {
                        let sim = r.similarity.unwrap_or(f32::NAN);
                        dedup_examples.push((text.clone(), r.memory.content, sim));
                    }
                }
            }
        }
        stored.push(rows);
    }
    let seconds = total.elapsed().as_secs_f64();
    let store_insert = if a.dedup || baseline_vectors.is_empty() {
        None
    } else {
        Some(
            store_only(
                &stored,
                baseline_vectors,
                embedder.as_ref(),
                a.database_url.as_deref(),
                a.with_hnsw,
                &a.scratch,
            )
            .await?,
        )
    };
    drop(engine);
    fresh.cleanup().await?;

    let out = Output {
        environment: report::environment(),
        backend: Backend::of(a.database_url.as_deref()),
        with_hnsw: a.with_hnsw,
        embedder: a.embedder,
        model_id: embedder.model_id().to_string(),
        n: a.n,
        batch: a.batch,
        dedup: a.dedup,
        seconds,
        memories_per_s: a.n as f64 / seconds,
        added,
        deduplicated,
        batch_latency: Latency::of(&batch_times),
        embed_only_seconds: embed_only,
        embed_only_per_s: embed_only.map(|s| a.n as f64 / s),
        dedup_examples,
        store_insert_only: store_insert,
        nn_cosine: if a.nn_sample > 1 {
            Some(nn_cosine(&embedder, &facts, a.nn_sample).await?)
        } else {
            None
        },
    };
    if json {
        return report::print_json(&out);
    }
    println!("remember_batch throughput ({})\n", out.environment);
    let rows = vec![vec![
        if out.with_hnsw {
            format!("{} (scope with its HNSW index)", out.backend.name())
        } else {
            out.backend.name().to_string()
        },
        out.embedder.name().to_string(),
        out.n.to_string(),
        out.batch.to_string(),
        if out.dedup { "yes" } else { "no" }.to_string(),
        format!("{:.2}", out.seconds),
        format!("{:.0}", out.memories_per_s),
        format!("{:.1} / {:.1}", out.batch_latency.p50_ms, out.batch_latency.p95_ms),
        format!("{} / {}", out.added, out.deduplicated),
        out.embed_only_per_s.map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
    ]];
    print!(
        "{}",
        report::table(
            &[
                "store",
                "embedder",
                "n",
                "batch",
                "dedup",
                "seconds",
                "memories/s",
                "batch p50 / p95 (ms)",
                "added / deduplicated",
                "embed only (texts/s)",
            ],
            &rows
        )
    );
    if let Some(l) = &out.store_insert_only {
        println!(
            "\nthe same rows through Store::insert_memories alone: {:.1} / {:.1} ms per batch \
             (p50 / p95)",
            l.p50_ms, l.p95_ms
        );
    }
    if let Some(nn) = &out.nn_cosine {
        println!(
            "\nnearest-neighbour cosine among {} distinct facts: p50 {:.3}, p90 {:.3}, p99 {:.3}, \
             max {:.3}; {:.1} % at or above 0.90 (the default dedup threshold)",
            nn.sample,
            nn.p50,
            nn.p90,
            nn.p99,
            nn.max,
            100.0 * nn.at_or_above_0_90
        );
    }
    if !out.dedup_examples.is_empty() {
        println!("\nfirst deduplicated items (new text → the stored fact it was merged into):\n");
        let rows: Vec<Vec<String>> = out
            .dedup_examples
            .iter()
            .map(|(new, old, sim)| vec![new.clone(), old.clone(), format!("{sim:.3}")])
            .collect();
        print!("{}", report::table(&["new", "merged into", "cosine"], &rows));
    }
    Ok(())
}
