//! `engram`: the one binary. Parses the command line, starts logging, dispatches.
//!
//! Modules: [`settings`] (layered configuration), [`app`] (wiring and server life cycle),
//! [`http`] (REST API), [`mcp`] (MCP tools over stdio and HTTP), [`cli`] (commands),
//! [`keys`] (API keys), [`migrate`] (SQLite → PostgreSQL), [`telemetry`] (logs, OTLP traces).

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
mod telemetry;
mod ui;

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    telemetry::init_logging();
    let cli = cli::Cli::parse();
    // A command asked for JSON reports its failure as JSON too (on stderr, as any error).
    let json = std::env::args().any(|a| a == "--json");
    match cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if json => {
            let code = e
                .chain()
                .find_map(|c| c.downcast_ref::<api::error::CliError>())
                .map_or("error", |c| c.code);
            // The code is a field of its own: not repeated at the end of the message.
            let message = format!("{e:#}");
            let message = message.strip_suffix(&format!(" ({code})")).unwrap_or(&message);
            let body = serde_json::json!({ "error": { "code": code, "message": message } });
            eprintln!("{body}");
            std::process::ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
