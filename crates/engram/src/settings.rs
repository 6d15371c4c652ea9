//! Configuration: compiled-in defaults < `engram.toml` < `ENGRAM_*` environment < flags.
//!
//! clap reads flags and their `ENGRAM_*` variables into [`CommonArgs`] (every field optional);
//! [`Settings::resolve`] then fills what is still unset from the TOML file (`--config`, or
//! `./engram.toml` when present) and finally from the defaults. Nothing else in the program
//! reads the environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use engram_providers::EmbedderConfig;
use serde::Deserialize;

/// Flags shared by every command that opens a store.
#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// Configuration file (default: ./engram.toml if it exists).
    #[arg(long, env = "ENGRAM_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Data directory of the embedded store.
    #[arg(long, env = "ENGRAM_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Embedder: `builtin`, `local:<model dir>` or `openai`.
    #[arg(long, env = "ENGRAM_EMBEDDER", global = true)]
    pub embedder: Option<String>,
    /// Base URL of an OpenAI-compatible embeddings endpoint (with `--embedder openai`).
    #[arg(long, env = "ENGRAM_EMBED_BASE_URL", global = true)]
    pub embed_base_url: Option<String>,
    /// Model name for the OpenAI-compatible embedder.
    #[arg(long, env = "ENGRAM_EMBED_MODEL", global = true)]
    pub embed_model: Option<String>,
    /// API key for the OpenAI-compatible embedder.
    #[arg(long, env = "ENGRAM_EMBED_API_KEY", global = true, hide_env_values = true)]
    pub embed_api_key: Option<String>,
    /// Largest memory or message content, in bytes.
    #[arg(long, env = "ENGRAM_MAX_CONTENT_BYTES", global = true)]
    pub max_content_bytes: Option<usize>,
}

/// The `[engram]`-less flat TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    addr: Option<String>,
    data_dir: Option<PathBuf>,
    embedder: Option<String>,
    embed_base_url: Option<String>,
    embed_model: Option<String>,
    embed_api_key: Option<String>,
    max_content_bytes: Option<usize>,
    max_body_bytes: Option<usize>,
    database_url: Option<String>,
    llm_provider: Option<String>,
    llm_base_url: Option<String>,
    llm_api_key: Option<String>,
    llm_model: Option<String>,
    llm_fast_model: Option<String>,
}

/// Fully resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub embedder: EmbedderConfig,
    pub max_content_bytes: usize,
    pub max_body_bytes: usize,
    /// Problems found while loading that did not stop start-up (reported after logging starts).
    pub warnings: Vec<String>,
}

/// Server-only flags.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "ENGRAM_ADDR")]
    pub addr: Option<String>,
    /// Largest request body, in bytes.
    #[arg(long, env = "ENGRAM_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// PostgreSQL URL (not available yet in this build).
    #[arg(long, env = "ENGRAM_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Do not run background workers in this process.
    #[arg(long)]
    pub no_workers: bool,
}

pub const DEFAULT_ADDR: &str = "127.0.0.1:8420";

impl Settings {
    pub fn resolve(common: &CommonArgs, serve: &ServeArgs) -> anyhow::Result<Settings> {
        let file = load_file(common.config.as_deref())?;
        let mut warnings = Vec::new();
        let addr_s = serve.addr.clone().or(file.addr).unwrap_or_else(|| DEFAULT_ADDR.to_string());
        let addr: SocketAddr = addr_s
            .parse()
            .with_context(|| format!("--addr '{addr_s}' is not an address like 127.0.0.1:8420"))?;
        if serve.database_url.is_some() || file.database_url.is_some() {
            bail!(
                "--database-url (PostgreSQL) is not available in this build yet; use the embedded store (--data-dir)"
            );
        }
        let data_dir = common
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("./engram-data"));
        let embedder_s =
            common.embedder.clone().or(file.embedder).unwrap_or_else(|| "builtin".to_string());
        let embedder = parse_embedder(
            &embedder_s,
            common.embed_base_url.clone().or(file.embed_base_url),
            common.embed_model.clone().or(file.embed_model),
            common.embed_api_key.clone().or(file.embed_api_key),
        )?;
        let max_content_bytes =
            common.max_content_bytes.or(file.max_content_bytes).unwrap_or(8 * 1024);
        if !(16..=1024 * 1024).contains(&max_content_bytes) {
            bail!("max_content_bytes must be between 16 and 1048576, got {max_content_bytes}");
        }
        let max_body_bytes =
            serve.max_body_bytes.or(file.max_body_bytes).unwrap_or(4 * 1024 * 1024);
        if max_body_bytes < 1024 {
            bail!("max_body_bytes must be at least 1024, got {max_body_bytes}");
        }
        if file.llm_provider.is_some() || file.llm_base_url.is_some() || file.llm_model.is_some() {
            warnings.push(
                "LLM settings are present but automatic extraction is not available in this build; \
                 explicit memories, transcripts and search work without it"
                    .to_string(),
            );
        }
        let _ = (file.llm_api_key, file.llm_fast_model);
        Ok(Settings { addr, data_dir, embedder, max_content_bytes, max_body_bytes, warnings })
    }
}

fn load_file(path: Option<&Path>) -> anyhow::Result<FileConfig> {
    let (path, required) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from("engram.toml"), false),
    };
    if !path.exists() {
        if required {
            bail!("config file {} does not exist", path.display());
        }
        return Ok(FileConfig::default());
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

/// Parse `builtin`, `local:<dir>` or `openai`.
pub fn parse_embedder(
    s: &str,
    base_url: Option<String>,
    model: Option<String>,
    api_key: Option<String>,
) -> anyhow::Result<EmbedderConfig> {
    if s == "builtin" {
        return Ok(EmbedderConfig::Builtin);
    }
    if let Some(dir) = s.strip_prefix("local:") {
        if dir.is_empty() {
            bail!("--embedder local:<model dir> needs a directory");
        }
        return Ok(EmbedderConfig::Local { dir: PathBuf::from(dir) });
    }
    if s == "openai" {
        let base_url = base_url
            .context("--embedder openai needs ENGRAM_EMBED_BASE_URL (or --embed-base-url)")?;
        let model =
            model.context("--embedder openai needs ENGRAM_EMBED_MODEL (or --embed-model)")?;
        return Ok(EmbedderConfig::OpenAi { base_url, model, api_key, dims: None });
    }
    bail!("unknown embedder '{s}'; expected builtin, local:<model dir> or openai")
}
