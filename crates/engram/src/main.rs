//! `engram`: the one binary. Parses the command line, starts logging, dispatches.
//!
//! Modules: [`settings`] (layered configuration), [`app`] (wiring and server life cycle),
//! [`http`] (REST API), [`mcp`] (MCP tools over stdio and HTTP), [`cli`] (commands),
//! [`keys`] (API keys), [`migrate`] (SQLite → PostgreSQL).

mod api;
mod app;
mod backup;
mod cli;
mod http;
mod keys;
mod mcp;
mod migrate;
mod progress;
mod settings;
mod ui;

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        // Pipeline stages (extract, embed, consolidate, persist, summary) are spans: their
        // close line carries the duration and the recorded outcome.
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_env_filter(
            EnvFilter::try_from_env("ENGRAM_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log redirected to a file stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = cli::Cli::parse();
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
