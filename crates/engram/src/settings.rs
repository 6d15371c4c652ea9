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
    /// PostgreSQL + pgvector instead of the embedded store: `postgres://user@host:port/db`.
    #[arg(long, env = "ENGRAM_DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Most connections this process opens to PostgreSQL (default 16).
    #[arg(long, env = "ENGRAM_DATABASE_POOL_SIZE", global = true)]
    pub database_pool_size: Option<u32>,
    /// Embedder: `builtin`, `local:<model dir>`, `local-exact:<model dir>`,
    /// `local-int8:<model dir>` or `openai`.
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
    /// LLM protocol for automatic extraction: `openai` (any OpenAI-compatible endpoint) or
    /// `anthropic`. Unset: extraction is off.
    #[arg(long, env = "ENGRAM_LLM_PROVIDER", global = true)]
    pub llm_provider: Option<String>,
    /// Base URL of the LLM endpoint (default: the provider's public API).
    #[arg(long, env = "ENGRAM_LLM_BASE_URL", global = true)]
    pub llm_base_url: Option<String>,
    /// API key of the LLM endpoint.
    #[arg(long, env = "ENGRAM_LLM_API_KEY", global = true, hide_env_values = true)]
    pub llm_api_key: Option<String>,
    /// Main model (consolidation, summaries).
    #[arg(long, env = "ENGRAM_LLM_MODEL", global = true)]
    pub llm_model: Option<String>,
    /// Fast model (extraction); default: the main model.
    #[arg(long, env = "ENGRAM_LLM_FAST_MODEL", global = true)]
    pub llm_fast_model: Option<String>,
    /// LLM request timeout in seconds.
    #[arg(long, env = "ENGRAM_LLM_TIMEOUT_SECS", global = true)]
    pub llm_timeout_secs: Option<u64>,
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
    rate_limit: Option<u32>,
    rate_limit_burst: Option<u32>,
    max_concurrent_requests: Option<usize>,
    body_timeout_secs: Option<u64>,
    database_url: Option<String>,
    database_pool_size: Option<u32>,
    llm_provider: Option<String>,
    llm_base_url: Option<String>,
    llm_api_key: Option<String>,
    llm_model: Option<String>,
    llm_fast_model: Option<String>,
    llm_timeout_secs: Option<u64>,
    workers: Option<usize>,
    job_lease_secs: Option<u64>,
    job_backoff_ms: Option<u64>,
    job_retention_secs: Option<u64>,
    proxy_openai_url: Option<String>,
    proxy_openai_api_key: Option<String>,
    proxy_anthropic_url: Option<String>,
    proxy_anthropic_api_key: Option<String>,
    proxy_timeout_secs: Option<u64>,
    otlp_endpoint: Option<String>,
}

/// Where the memory proxy forwards (`serve` only).
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    /// The OpenAI-compatible upstream of `/v1/chat/completions` and `/v1/models`.
    pub openai_url: Option<String>,
    pub openai_api_key: Option<String>,
    /// The Anthropic-compatible upstream of `/v1/messages`.
    pub anthropic_url: Option<String>,
    pub anthropic_api_key: Option<String>,
    /// Longest wait for the upstream's answer to start, and for each next chunk.
    pub timeout: std::time::Duration,
}

/// Fully resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The listen address as configured (`--addr`, `ENGRAM_ADDR`, `addr` in engram.toml).
    pub addr: String,
    pub data_dir: PathBuf,
    /// PostgreSQL instead of the embedded store in `data_dir`.
    pub database_url: Option<String>,
    /// Connections per process to PostgreSQL.
    pub database_pool_size: u32,
    pub embedder: EmbedderConfig,
    pub max_content_bytes: usize,
    pub max_body_bytes: usize,
    /// Requests per second per API key (per client address without a valid key); 0: off.
    pub rate_limit: u32,
    /// Requests a key may send at once before the per-second rate applies.
    pub rate_limit_burst: u32,
    /// Requests handled at once; more are answered 503 at once instead of queueing.
    pub max_concurrent_requests: usize,
    /// How long a request body may send nothing before it is refused (408).
    pub body_timeout: std::time::Duration,
    /// None: no LLM, automatic extraction off.
    pub llm: Option<LlmSettings>,
    /// Background jobs run at once by this process.
    pub workers: usize,
    /// Run background workers in this process (`serve` without `--no-workers`).
    pub run_workers: bool,
    pub job_lease: std::time::Duration,
    pub job_backoff: std::time::Duration,
    /// How long finished jobs are kept (`None`: forever).
    pub job_retention: Option<std::time::Duration>,
    /// The memory proxy's upstreams.
    pub proxy: ProxySettings,
    /// The OTLP/HTTP collector spans are exported to (`serve` and `worker`); None: off.
    pub otlp_endpoint: Option<String>,
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
    /// Requests per second per API key, and per client address for requests without a valid
    /// key (default 100; 0 turns the limit off). Over it: 429 with Retry-After.
    #[arg(long, env = "ENGRAM_RATE_LIMIT")]
    pub rate_limit: Option<u32>,
    /// Requests a key may send in a burst before the rate applies (default 2 × --rate-limit).
    #[arg(long, env = "ENGRAM_RATE_LIMIT_BURST")]
    pub rate_limit_burst: Option<u32>,
    /// Requests handled at once (default 512); more are answered 503 at once.
    #[arg(long, env = "ENGRAM_MAX_CONCURRENT_REQUESTS")]
    pub max_concurrent_requests: Option<usize>,
    /// Seconds a request body may send nothing before it is refused with 408 (default 30),
    /// so a stalled upload holds no request slot. A connection whose request headers take
    /// longer, or that is idle this long between requests, is closed.
    #[arg(long, env = "ENGRAM_BODY_TIMEOUT_SECS")]
    pub body_timeout_secs: Option<u64>,
    /// Do not run background workers in this process.
    #[arg(long)]
    pub no_workers: bool,
    /// The workers' own flags, which `engram worker` takes too.
    #[command(flatten)]
    pub jobs: WorkerArgs,
    /// The memory proxy's OpenAI-compatible upstream (`https://api.openai.com`, a vLLM or
    /// Ollama server…): serves `POST /v1/chat/completions` and `GET /v1/models`.
    #[arg(long, env = "ENGRAM_PROXY_OPENAI_URL")]
    pub proxy_openai_url: Option<String>,
    /// The key engram sends to the OpenAI upstream.
    #[arg(long, env = "ENGRAM_PROXY_OPENAI_API_KEY", hide_env_values = true)]
    pub proxy_openai_api_key: Option<String>,
    /// The memory proxy's Anthropic-compatible upstream (`https://api.anthropic.com`):
    /// serves `POST /v1/messages`.
    #[arg(long, env = "ENGRAM_PROXY_ANTHROPIC_URL")]
    pub proxy_anthropic_url: Option<String>,
    /// The key engram sends to the Anthropic upstream.
    #[arg(long, env = "ENGRAM_PROXY_ANTHROPIC_API_KEY", hide_env_values = true)]
    pub proxy_anthropic_api_key: Option<String>,
    /// Seconds the proxy waits for the upstream's answer to start, and for each next chunk
    /// of a stream (default 300; then 504).
    #[arg(long, env = "ENGRAM_PROXY_TIMEOUT_SECS")]
    pub proxy_timeout_secs: Option<u64>,
}

/// The workers' flags, `engram worker`'s only ones (`engram serve` takes them too). The listener's (`--addr`, rate limits, the
/// proxy's upstreams, …) are `engram serve`'s only, refused here on the command line and not
/// read from the environment, so one environment can serve both commands.
#[derive(Debug, Clone, Default, Args)]
pub struct WorkerArgs {
    /// Background jobs run at once.
    #[arg(long, env = "ENGRAM_WORKERS")]
    pub workers: Option<usize>,
    /// Lease of a claimed job in seconds: after a crash its job runs again this much later.
    #[arg(long, env = "ENGRAM_JOB_LEASE_SECS")]
    pub job_lease_secs: Option<u64>,
    /// First retry delay of a failed job in milliseconds (doubles per attempt).
    #[arg(long, env = "ENGRAM_JOB_BACKOFF_MS")]
    pub job_backoff_ms: Option<u64>,
    /// Seconds a finished job is kept before the workers delete it; 0 keeps them forever.
    /// Default 604800 (a week). Failed jobs are always kept.
    #[arg(long, env = "ENGRAM_JOB_RETENTION_SECS")]
    pub job_retention_secs: Option<u64>,
    /// Export traces (the spans of requests, jobs and pipeline stages) to this OpenTelemetry
    /// collector over OTLP/HTTP, e.g. `http://localhost:4318`. Unset: no export.
    #[arg(long, env = "ENGRAM_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

/// The LLM endpoint.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    pub provider: String,
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    pub fast_model: Option<String>,
    pub timeout_secs: u64,
}

pub const DEFAULT_ADDR: &str = "127.0.0.1:8420";

impl Settings {
    pub fn resolve(common: &CommonArgs, serve: &ServeArgs) -> anyhow::Result<Settings> {
        let file = load_file(common.config.as_deref())?;
        let mut warnings = Vec::new();
        // Parsed only by the commands that listen ([`Settings::listen_addr`]): a bad `addr`
        // in engram.toml must not break `engram keys create` or `engram list`.
        let addr = serve.addr.clone().or(file.addr).unwrap_or_else(|| DEFAULT_ADDR.to_string());
        let database_url = common.database_url.clone().or(file.database_url);
        if let Some(u) = &database_url
            && !(u.starts_with("postgres://") || u.starts_with("postgresql://"))
        {
            bail!("--database-url must be a postgres:// URL");
        }
        if database_url.is_some() && (common.data_dir.is_some() || file.data_dir.is_some()) {
            // Both name a store; PostgreSQL wins. Said on stderr by every command (stdout
            // may be a script's JSON), so that a command meant for the data dir does not act
            // on PostgreSQL without a word.
            eprintln!(
                "engram: warning: the data dir (--data-dir, ENGRAM_DATA_DIR or engram.toml) is \
                 not used: --database-url / ENGRAM_DATABASE_URL selects PostgreSQL"
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
        let rate_limit = serve.rate_limit.or(file.rate_limit).unwrap_or(100);
        if rate_limit > 1_000_000 {
            bail!("rate_limit must be 0 (off) to 1000000 requests per second, got {rate_limit}");
        }
        let rate_limit_burst = serve
            .rate_limit_burst
            .or(file.rate_limit_burst)
            .unwrap_or_else(|| rate_limit.saturating_mul(2));
        if rate_limit > 0 && !(1..=10_000_000).contains(&rate_limit_burst) {
            bail!("rate_limit_burst must be 1 to 10000000, got {rate_limit_burst}");
        }
        let max_concurrent_requests =
            serve.max_concurrent_requests.or(file.max_concurrent_requests).unwrap_or(512);
        if !(1..=100_000).contains(&max_concurrent_requests) {
            bail!("max_concurrent_requests must be 1 to 100000, got {max_concurrent_requests}");
        }
        let body_timeout_secs = serve.body_timeout_secs.or(file.body_timeout_secs).unwrap_or(30);
        if !(1..=3600).contains(&body_timeout_secs) {
            bail!("body_timeout_secs must be 1 to 3600, got {body_timeout_secs}");
        }
        let llm = match common.llm_provider.clone().or(file.llm_provider) {
            None => {
                if common.llm_model.is_some() || file.llm_model.is_some() {
                    warnings.push("an LLM model is set but no LLM provider (ENGRAM_LLM_PROVIDER): extraction is off".to_string());
                }
                None
            }
            Some(provider) => {
                let default_url = match provider.as_str() {
                    "openai" => "https://api.openai.com/v1",
                    "anthropic" => "https://api.anthropic.com",
                    other => bail!("unknown LLM provider '{other}'; expected openai or anthropic"),
                };
                let model = common.llm_model.clone().or(file.llm_model).context(
                    "an LLM provider is set but no model: set ENGRAM_LLM_MODEL (or --llm-model)",
                )?;
                let timeout_secs = common.llm_timeout_secs.or(file.llm_timeout_secs).unwrap_or(60);
                if !(1..=600).contains(&timeout_secs) {
                    bail!("llm_timeout_secs must be 1 to 600, got {timeout_secs}");
                }
                Some(LlmSettings {
                    base_url: common
                        .llm_base_url
                        .clone()
                        .or(file.llm_base_url)
                        .unwrap_or_else(|| default_url.to_string()),
                    api_key: common.llm_api_key.clone().or(file.llm_api_key),
                    model,
                    fast_model: common.llm_fast_model.clone().or(file.llm_fast_model),
                    timeout_secs,
                    provider,
                })
            }
        };
        let job_lease_secs = serve.jobs.job_lease_secs.or(file.job_lease_secs).unwrap_or(300);
        if !(1..=86_400).contains(&job_lease_secs) {
            bail!("job_lease_secs must be 1 to 86400, got {job_lease_secs}");
        }
        let job_backoff_ms = serve.jobs.job_backoff_ms.or(file.job_backoff_ms).unwrap_or(2000);
        if job_backoff_ms > 3_600_000 {
            bail!("job_backoff_ms must be at most 3600000, got {job_backoff_ms}");
        }
        let job_retention_secs = serve
            .jobs
            .job_retention_secs
            .or(file.job_retention_secs)
            .unwrap_or(engram_core::jobs::DEFAULT_JOB_RETENTION.as_secs());
        if job_retention_secs > 100 * 365 * 86_400 {
            bail!(
                "job_retention_secs must be at most 3153600000 (100 years), got {job_retention_secs}"
            );
        }
        let database_pool_size =
            common.database_pool_size.or(file.database_pool_size).unwrap_or(16);
        if !(1..=1000).contains(&database_pool_size) {
            bail!("database_pool_size must be 1 to 1000, got {database_pool_size}");
        }
        let workers = serve.jobs.workers.or(file.workers).unwrap_or(2);
        if !(1..=64).contains(&workers) {
            bail!("workers must be 1 to 64, got {workers}");
        }
        let proxy_timeout_secs =
            serve.proxy_timeout_secs.or(file.proxy_timeout_secs).unwrap_or(300);
        if !(1..=3600).contains(&proxy_timeout_secs) {
            bail!("proxy_timeout_secs must be 1 to 3600, got {proxy_timeout_secs}");
        }
        let url = |flag: &Option<String>, file: Option<String>, name: &str| {
            let u = flag.clone().or(file);
            match &u {
                Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                    bail!("{name} must be an http:// or https:// URL, got '{u}'")
                }
                _ => Ok(u),
            }
        };
        let proxy = ProxySettings {
            openai_url: url(&serve.proxy_openai_url, file.proxy_openai_url, "proxy_openai_url")?,
            // An empty key (`ENGRAM_PROXY_OPENAI_API_KEY=`) is no key: not `Bearer ` upstream.
            openai_api_key: serve
                .proxy_openai_api_key
                .clone()
                .or(file.proxy_openai_api_key)
                .filter(|k| !k.trim().is_empty()),
            anthropic_url: url(
                &serve.proxy_anthropic_url,
                file.proxy_anthropic_url,
                "proxy_anthropic_url",
            )?,
            anthropic_api_key: serve
                .proxy_anthropic_api_key
                .clone()
                .or(file.proxy_anthropic_api_key)
                .filter(|k| !k.trim().is_empty()),
            timeout: std::time::Duration::from_secs(proxy_timeout_secs),
        };
        let otlp_endpoint = serve.jobs.otlp_endpoint.clone().or(file.otlp_endpoint);
        if let Some(e) = &otlp_endpoint {
            crate::telemetry::traces_url(e)?;
        }
        Ok(Settings {
            addr,
            data_dir,
            database_url,
            database_pool_size,
            embedder,
            max_content_bytes,
            max_body_bytes,
            rate_limit,
            rate_limit_burst,
            max_concurrent_requests,
            body_timeout: std::time::Duration::from_secs(body_timeout_secs),
            llm,
            workers,
            run_workers: !serve.no_workers,
            job_lease: std::time::Duration::from_secs(job_lease_secs),
            job_backoff: std::time::Duration::from_millis(job_backoff_ms),
            job_retention: (job_retention_secs > 0)
                .then(|| std::time::Duration::from_secs(job_retention_secs)),
            proxy,
            otlp_endpoint,
            warnings,
        })
    }
}

impl Settings {
    /// The address to listen on (an IP address, or a host name resolved here, the first of
    /// its addresses: `localhost:8420`), or why the configured one is not an address.
    pub fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        if let Ok(a) = self.addr.parse() {
            return Ok(a);
        }
        let bad = || format!("--addr '{}' is not an address like 127.0.0.1:8420", self.addr);
        std::net::ToSocketAddrs::to_socket_addrs(&self.addr)
            .with_context(bad)?
            .next()
            .with_context(bad)
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

/// Parse `builtin`, `local:<model dir>`, `local-exact:<model dir>`, `local-int8:<model dir>`
/// or `openai`.
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
        return Ok(EmbedderConfig::LocalAuto { dir: PathBuf::from(dir) });
    }
    if let Some(dir) = s.strip_prefix("local-exact:") {
        if dir.is_empty() {
            bail!("--embedder local-exact:<model dir> needs a directory");
        }
        return Ok(EmbedderConfig::Local { dir: PathBuf::from(dir) });
    }
    if let Some(dir) = s.strip_prefix("local-int8:") {
        if dir.is_empty() {
            bail!("--embedder local-int8:<model dir> needs a directory");
        }
        return Ok(EmbedderConfig::LocalInt8 { dir: PathBuf::from(dir) });
    }
    if s == "openai" {
        let base_url = base_url
            .context("--embedder openai needs ENGRAM_EMBED_BASE_URL (or --embed-base-url)")?;
        let model =
            model.context("--embedder openai needs ENGRAM_EMBED_MODEL (or --embed-model)")?;
        return Ok(EmbedderConfig::OpenAi { base_url, model, api_key, dims: None });
    }
    bail!(
        "unknown embedder '{s}'; expected builtin, local:<model dir>, local-exact:<model dir>, \
         local-int8:<model dir> or openai"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedder_names_parse_to_their_configs() {
        assert!(matches!(parse_embedder("builtin", None, None, None), Ok(EmbedderConfig::Builtin)));
        let local = parse_embedder("local:/m", None, None, None).unwrap();
        assert!(matches!(local, EmbedderConfig::LocalAuto { dir } if dir == Path::new("/m")));
        let exact = parse_embedder("local-exact:/m", None, None, None).unwrap();
        assert!(matches!(exact, EmbedderConfig::Local { dir } if dir == Path::new("/m")));
        let int8 = parse_embedder("local-int8:/m", None, None, None).unwrap();
        assert!(matches!(int8, EmbedderConfig::LocalInt8 { dir } if dir == Path::new("/m")));
        for bad in ["local:", "local-exact:", "local-int8:", "onnx:/m"] {
            let err = parse_embedder(bad, None, None, None).unwrap_err().to_string();
            assert!(err.contains("local"), "{bad}: {err}");
        }
    }
}
