//! `engram-bench embedding`: the embedder alone, idle and under background load.
//!
//! The documents are those the `embed_messages` job embeds for the LoCoMo conversations
//! (each session a conversation, each turn `<speaker>: <text>` with the two turns before it,
//! `engram_core::pipeline::messages::document_of`); the queries are LoCoMo's questions.
//! Three phases, one process, side by side:
//!
//! 1. **idle**: each query embedded alone ([`Embedder::embed`], the request path);
//! 2. **background alone**: every document embedded by `--workers` loops, `--batch`
//!    documents per call ([`Embedder::embed_background`], as the job calls it): messages/s;
//! 3. **queries during background**: the same background loops run without end while the
//!    queries are embedded one after the other: query p50/p95 and the background rate meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engram_core::embed::Embedder;
use engram_core::pipeline::messages::document_of;
use serde::Serialize;

use crate::embedder::EmbedderChoice;
use crate::locomo;
use crate::report::Latency;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "minilm")]
    embedder: EmbedderChoice,
    /// The LoCoMo JSON file.
    #[arg(long, default_value = locomo::DEFAULT_DATA)]
    data: std::path::PathBuf,
    /// MiniLM only: padded tokens per background forward pass (default: the embedder's).
    #[arg(long)]
    batch_tokens: Option<usize>,
    /// MiniLM only: background threads (default: one per core).
    #[arg(long)]
    background_threads: Option<usize>,
    /// Queries embedded per phase.
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Background loops at once (the job workers of one process).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Documents per background call.
    #[arg(long, default_value_t = 64)]
    batch: usize,
}

#[derive(Debug, Serialize)]
struct Row {
    phase: &'static str,
    query: Option<Latency>,
    background_per_s: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Output {
    embedder: String,
    documents: usize,
    rows: Vec<Row>,
}

fn build(a: &Args) -> anyhow::Result<Arc<dyn Embedder>> {
    let d = engram_providers::BertOptions::default();
    a.embedder.build_with(engram_providers::BertOptions {
        batch_tokens: a.batch_tokens.unwrap_or(d.batch_tokens),
        background_threads: a.background_threads.unwrap_or(d.background_threads),
        runtime: d.runtime,
    })
}

/// Every turn's document, conversation by conversation, and every question.
fn corpus(path: &std::path::Path) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut docs = Vec::new();
    let mut queries = Vec::new();
    for c in locomo::load(path)? {
        let mut session: Vec<&str> = Vec::new();
        let mut current = None;
        for m in &c.messages {
            if current != Some(m.session) {
                session.clear();
                current = Some(m.session);
            }
            docs.push(document_of(&session, &m.plain));
            session.push(&m.plain);
        }
        queries.extend(c.queries.iter().map(|q| q.text.clone()));
    }
    Ok((docs, queries))
}

async fn queries(e: &Arc<dyn Embedder>, qs: &[String]) -> anyhow::Result<Latency> {
    let mut times = Vec::with_capacity(qs.len());
    for q in qs {
        let t = Instant::now();
        e.embed(std::slice::from_ref(q)).await?;
        times.push(t.elapsed());
    }
    Ok(Latency::of(&times))
}

/// `workers` loops over the documents, `batch` per call, until `stop` (or, with `once`, until
/// every document was embedded once). Returns the documents embedded.
async fn background(
    e: &Arc<dyn Embedder>,
    docs: &Arc<Vec<String>>,
    workers: usize,
    batch: usize,
    once: bool,
    stop: &Arc<AtomicBool>,
    done: &Arc<AtomicUsize>,
) -> anyhow::Result<usize> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..workers.max(1) {
        let (e, docs, next, done, stop) =
            (e.clone(), docs.clone(), next.clone(), done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let start = next.fetch_add(batch, Ordering::SeqCst);
                if once && start >= docs.len() {
                    break;
                }
                let start = start % docs.len();
                let chunk = &docs[start..(start + batch).min(docs.len())];
                e.embed_background(chunk).await?;
                done.fetch_add(chunk.len(), Ordering::SeqCst);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(done.load(Ordering::SeqCst))
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    let e = build(&a)?;
    let (docs, qs) = corpus(&a.data)?;
    let docs = Arc::new(docs);
    let qs: Vec<String> = qs.into_iter().take(a.queries).collect();
    eprintln!("embedding: {} documents, {} queries, {}", docs.len(), qs.len(), e.model_id());
    // Warm up (first passes allocate).
    e.embed(&qs[..qs.len().min(8)]).await?;

    let idle = queries(&e, &qs).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let n = background(&e, &docs, a.workers, a.batch, true, &stop, &Arc::default()).await?;
    let alone = n as f64 / t.elapsed().as_secs_f64();

    let done = Arc::new(AtomicUsize::new(0));
    let bg = {
        let (e, docs, stop, done) = (e.clone(), docs.clone(), stop.clone(), done.clone());
        let (workers, batch) = (a.workers, a.batch);
        tokio::spawn(
            async move { background(&e, &docs, workers, batch, false, &stop, &done).await },
        )
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (t, before) = (Instant::now(), done.load(Ordering::SeqCst));
    let loaded = queries(&e, &qs).await?;
    // Documents whose calls ended while the queries ran (not those still in flight).
    let during = (done.load(Ordering::SeqCst) - before) as f64 / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    bg.await??;

    let out = Output {
        embedder: e.model_id().to_string(),
        documents: docs.len(),
        rows: vec![
            Row { phase: "idle", query: Some(idle), background_per_s: None },
            Row { phase: "background alone", query: None, background_per_s: Some(alone) },
            Row {
                phase: "queries during background",
                query: Some(loaded),
                background_per_s: Some(during),
            },
        ],
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} ({} documents, {} workers × {} per call)\n",
        out.embedder, out.documents, a.workers, a.batch
    );
    println!(
        "| phase | query p50 (ms) | query p95 (ms) | query max (ms) | background messages/s |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for r in &out.rows {
        let q =
            |f: fn(&Latency) -> f64| r.query.as_ref().map_or("".into(), |l| format!("{:.1}", f(l)));
        println!(
            "| {} | {} | {} | {} | {} |",
            r.phase,
            q(|l| l.p50_ms),
            q(|l| l.p95_ms),
            q(|l| l.max_ms),
            r.background_per_s.map_or("".into(), |x| format!("{x:.1}"))
        );
    }
    Ok(())
}
