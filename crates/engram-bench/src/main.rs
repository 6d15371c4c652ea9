//! `engram-bench`: throughput, latency and retrieval-quality measurements of engram.
//!
//! Subcommands, each printing a Markdown table (or JSON with `--json`):
//!
//! - `remember`: batch remember throughput through `Engine::remember_batch` into a fresh
//!   SQLite store, with or without dedup ([`remember`]).
//! - `search`: `Engine::search` latency percentiles with one user's scope filled with N
//!   memories, and optionally the same through the real HTTP server ([`search`], [`http`]).
//! - `locomo`: turn Recall@k on the public LoCoMo conversations ([`locomo`]).
//! - `extraction`: append latency with a fast, slow and dead LLM, and the cost per extracted
//!   turn ([`extraction`]).
//! - `embedding`: the embedder alone, idle and while background batches run
//!   ([`embedding`]).
//! - `compaction`: LLM calls and tokens per 100 summarized messages of the summary DAG
//!   ([`compaction`]).
//! - `proxy`: what the memory proxy adds to a chat call, against the upstream called
//!   directly ([`proxy`]).
//!
//! Results and the exact commands that produced them are in `benches/README.md`.

mod backend;
mod backlog;
mod compaction;
mod corpus;
mod embedder;
mod embedding;
mod extraction;
mod http;
mod locomo;
mod proxy;
mod remember;
mod report;
mod requests;
mod search;
mod text_sql;
mod ui;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Benchmarks and retrieval-quality evaluation of engram.
#[derive(Debug, Parser)]
#[command(name = "engram-bench", version)]
struct Cli {
    /// Print the results as JSON instead of Markdown.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Batch remember throughput (memories/s) into a fresh temp-dir SQLite store (or a fresh
    /// PostgreSQL database with `--database-url`).
    Remember(remember::Args),
    /// Search latency (p50/p95/p99) with one user's scope filled with N memories.
    Search(search::Args),
    /// Retrieval quality on LoCoMo: turn Recall@1/5/10/20 per category.
    Locomo(locomo::Args),
    /// The LLM write path: append latency with a fast, slow and dead LLM, and the cost
    /// per extracted turn (LLM calls, tokens, stage times).
    Extraction(extraction::Args),
    /// What the summary DAG costs: LLM calls and tokens per 100 summarized messages of the
    /// LoCoMo conversations, through the real server and the scripted LLM.
    Compaction(compaction::Args),
    /// Single-request latency on the request path: one `remember` at a time, and a search
    /// of one user's messages.
    Requests(requests::Args),
    /// The embedder alone: query embedding latency idle and during background embedding,
    /// and background messages/s.
    Embedding(embedding::Args),
    /// Message searches through the engine while a backlog of messages is embedded by the
    /// embedding lane (SQLite or PostgreSQL), the lane's messages/s, and append → searchable.
    Backlog(backlog::Args),
    /// What the memory proxy adds to a chat call: direct and proxied calls side by side,
    /// whole answers and first streamed chunks.
    Proxy(proxy::Args),
    /// Web UI page latency (the memory screen with 10k facts in the tenant, 1k shown) from
    /// the real server.
    Ui(ui::Args),
}

/// Common option: where scratch data dirs go (default: the system temp dir).
#[derive(Debug, Clone, clap::Args)]
pub struct ScratchArgs {
    /// Parent directory of the temporary data dirs (removed afterwards).
    #[arg(long)]
    pub tmp_dir: Option<PathBuf>,
    /// Keep the data dirs (their paths are printed on stderr) for inspection.
    #[arg(long)]
    pub keep_data: bool,
}

impl ScratchArgs {
    /// A fresh temporary directory, removed when the returned guard drops (unless
    /// `--keep-data`).
    pub fn tempdir(&self) -> anyhow::Result<tempfile::TempDir> {
        let parent = self.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
        let mut b = tempfile::Builder::new();
        b.prefix("engram-bench-").disable_cleanup(self.keep_data);
        let dir = b.tempdir_in(parent)?;
        if self.keep_data {
            eprintln!("data dir kept: {}", dir.path().display());
        }
        Ok(dir)
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // reqwest is built without a default crypto provider (plain http is all we need, but the
    // client builder still wants one installed).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        match cli.cmd {
            Cmd::Remember(a) => remember::run(a, cli.json).await,
            Cmd::Search(a) => search::run(a, cli.json).await,
            Cmd::Locomo(a) => locomo::run(a, cli.json).await,
            Cmd::Extraction(a) => extraction::run(a, cli.json).await,
            Cmd::Compaction(a) => compaction::run(a, cli.json).await,
            Cmd::Requests(a) => requests::run(a, cli.json).await,
            Cmd::Ui(a) => ui::run(a, cli.json).await,
            Cmd::Proxy(a) => proxy::run(a, cli.json).await,
            Cmd::Embedding(a) => embedding::run(a, cli.json).await,
            Cmd::Backlog(a) => backlog::run(a, cli.json).await,
        }
    })
}
