//! Wiring: settings → store + embedder (+ LLM) → [`Engine`]; and the life cycle of the
//! server and the workers (bind, serve, run jobs, graceful shutdown on ctrl-c / SIGTERM:
//! the listener stops, workers stop claiming, in-flight jobs get their grace period).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use engram_core::embed::Embedder;
use engram_core::engine::{Engine, EngineConfig};
use engram_core::jobs::{WorkerConfig, run_workers};
use engram_core::llm::Llm;
use engram_core::store::prelude::*;
use engram_providers::LlmConfig;
use engram_providers::llm::HttpPolicy;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::{AppState, router};
use crate::settings::Settings;

/// Open the store named by the settings: PostgreSQL with `--database-url`, else the
/// embedded store in the data dir.
pub async fn store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match &settings.database_url {
        Some(url) => engram_store::open_postgres_with(
            url,
            engram_store::postgres::PgOptions { max_connections: settings.database_pool_size },
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the PostgreSQL store: {e}"))?,
        None => {
            let new = !settings.data_dir.join("engram.db").exists();
            let store = engram_store::open_sqlite(&settings.data_dir).await.map_err(|e| {
                anyhow::anyhow!("cannot open the store in {}: {e}", settings.data_dir.display())
            })?;
            if new {
                // On stderr, so that a mistyped `--data-dir` is seen (stdout may be a protocol).
                eprintln!(
                    "engram: created a new, empty store in {} (no engram.db was there)",
                    settings.data_dir.display()
                );
            }
            store
        }
    })
}

/// Open the store and the embedder named by the settings.
pub async fn parts(settings: &Settings) -> anyhow::Result<(Arc<dyn Store>, Arc<dyn Embedder>)> {
    let store = store(settings).await?;
    // `local:` picks its runtime by the vectors the store already holds.
    let mut recorded = None;
    if let engram_providers::EmbedderConfig::LocalAuto { .. } = &settings.embedder {
        recorded =
            store.embedding_space().await.map_err(|e| anyhow::anyhow!("{}", e.public_message()))?;
    }
    let cfg = settings.embedder.for_store(recorded.as_ref().map(|(id, _)| id.as_str()));
    let embedder = tokio::task::spawn_blocking(move || engram_providers::build_embedder(&cfg))
        .await
        .context("embedder start-up panicked")?
        .map_err(|e| anyhow::anyhow!("cannot start the embedder: {}", e.message))?;
    Ok((store, embedder))
}

/// Fail unless the embedded store of the settings already exists (PostgreSQL: always fine;
/// its URL names the database).
pub fn require_existing_store(settings: &Settings) -> anyhow::Result<()> {
    if settings.database_url.is_some() {
        return Ok(());
    }
    let db = settings.data_dir.join("engram.db");
    if !db.is_file() {
        bail!(
            "there is no engram store in {} (no engram.db): check --data-dir (or ENGRAM_DATA_DIR / data_dir in engram.toml); `engram serve`, `engram remember` or `engram import` create a store",
            settings.data_dir.display()
        );
    }
    Ok(())
}

/// The LLM named by the settings (None: extraction off).
pub fn llm(settings: &Settings) -> anyhow::Result<Option<Arc<dyn Llm>>> {
    let Some(l) = &settings.llm else { return Ok(None) };
    let cfg = match l.provider.as_str() {
        "anthropic" => LlmConfig::Anthropic {
            base_url: l.base_url.clone(),
            api_key: l.api_key.clone().unwrap_or_default(),
            model: l.model.clone(),
            fast_model: l.fast_model.clone(),
        },
        _ => LlmConfig::OpenAi {
            base_url: l.base_url.clone(),
            api_key: l.api_key.clone(),
            model: l.model.clone(),
            fast_model: l.fast_model.clone(),
        },
    };
    let policy =
        HttpPolicy { timeout: Duration::from_secs(l.timeout_secs), ..HttpPolicy::default() };
    let llm = engram_providers::llm::build_llm_with(&cfg, policy)
        .map_err(|e| anyhow::anyhow!("cannot set up the LLM: {}", e.message))?;
    Ok(Some(llm))
}

/// Build the engine named by the settings.
pub async fn engine(settings: &Settings) -> anyhow::Result<Engine> {
    let (store, embedder) = parts(settings).await?;
    let engine_cfg =
        EngineConfig { max_content_bytes: settings.max_content_bytes, ..EngineConfig::default() };
    let engine = Engine::new(store, embedder, engine_cfg)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.public_message()))?;
    Ok(match llm(settings)? {
        Some(l) => engine.with_llm(l),
        None => engine,
    })
}

/// The memory proxy's upstreams named by the settings.
fn upstreams(settings: &Settings) -> anyhow::Result<crate::http::proxy::Upstreams> {
    use engram_providers::upstream::{Upstream, UpstreamAuth, UpstreamConfig};
    let p = &settings.proxy;
    let one = |url: &Option<String>,
               key: &Option<String>,
               auth,
               flag: &str|
     -> anyhow::Result<Option<Upstream>> {
        let Some(base_url) = url.clone() else { return Ok(None) };
        if key.is_none() {
            // The client's engram key is never forwarded: without one of its own the
            // proxy calls the upstream unauthenticated, which only a local model accepts.
            tracing::warn!(
                upstream = %base_url,
                "memory proxy: {flag} is not set, so calls go to the upstream without a key \
                 (a hosted upstream answers 401)"
            );
        }
        let cfg = UpstreamConfig { base_url, api_key: key.clone(), auth, timeout: p.timeout };
        Upstream::new(cfg).map(Some).map_err(|e| anyhow::anyhow!(e))
    };
    Ok(crate::http::proxy::Upstreams {
        openai: one(
            &p.openai_url,
            &p.openai_api_key,
            UpstreamAuth::Bearer,
            "--proxy-openai-api-key",
        )?,
        anthropic: one(
            &p.anthropic_url,
            &p.anthropic_api_key,
            UpstreamAuth::XApiKey,
            "--proxy-anthropic-api-key",
        )?,
        saves: tokio_util::task::TaskTracker::new(),
    })
}

fn worker_config(settings: &Settings) -> WorkerConfig {
    WorkerConfig {
        concurrency: settings.workers,
        lease: settings.job_lease,
        backoff: settings.job_backoff,
        job_retention: settings.job_retention,
        ..WorkerConfig::default()
    }
}

/// Trace export, when `--otlp-endpoint` names a collector.
fn export_traces(settings: &Settings) -> anyhow::Result<Option<crate::telemetry::Traces>> {
    settings
        .otlp_endpoint
        .as_deref()
        .map(|e| crate::telemetry::export_traces(e, "engram"))
        .transpose()
}

/// Run background workers alone (`engram worker`) until ctrl-c or SIGTERM.
pub async fn worker(settings: Settings) -> anyhow::Result<()> {
    let engine = engine(&settings).await?;
    let traces = export_traces(&settings)?;
    if engine.llm().is_none() {
        tracing::warn!(
            "no LLM configured: extraction, summary and tool-call jobs fail with a configuration error"
        );
    }
    let shutdown = CancellationToken::new();
    let workers = tokio::spawn(run_workers(
        engine.services().clone(),
        worker_config(&settings),
        shutdown.clone(),
    ));
    println!("engram worker running ({} at once)", settings.workers);
    shutdown_signal().await;
    tracing::info!("stopping workers");
    shutdown.cancel();
    workers.await.context("worker task panicked")?;
    if let Some(t) = traces {
        t.shutdown().await;
    }
    Ok(())
}

/// Run the HTTP server (and, unless `--no-workers`, the workers) until ctrl-c or SIGTERM.
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    let listen = settings.listen_addr()?;
    let engine = engine(&settings).await?;
    let traces = export_traces(&settings)?;
    let loopback = listen.ip().is_loopback();
    let keys_exist = engine.keys_exist().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    if !loopback && !keys_exist {
        bail!(
            "refusing to listen on {listen} without API keys: local mode (no keys) is for loopback only. \
             Create a key with `engram keys create --tenant <t> --role admin`, or listen on 127.0.0.1"
        );
    }
    let listener =
        TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        store = %settings.database_url.as_ref().map_or_else(|| settings.data_dir.display().to_string(), |_| "postgres".to_string()),
        embedder = engine.embedder().model_id(),
        llm = engine.llm().map_or_else(|| "none (extraction off)".to_string(), |l| l.describe()),
        mode = if !keys_exist { "local (no API keys: tenant 'default', loopback only)" } else { "API keys" },
        "engram listening"
    );
    if let Ok(Some(import)) = engine.import_mark().await {
        tracing::warn!(
            import = %import,
            "an engram import into this store did not finish: its rows so far are served; \
             run it again to complete it"
        );
    }
    let shutdown = CancellationToken::new();
    let workers = settings.run_workers.then(|| {
        tokio::spawn(run_workers(
            engine.services().clone(),
            worker_config(&settings),
            shutdown.clone(),
        ))
    });
    // Machine-readable readiness line for scripts and tests.
    println!("engram listening on http://{addr}");
    let limits =
        Arc::new(crate::http::limits::Limits::new(settings.rate_limit, settings.rate_limit_burst));
    let proxy = upstreams(&settings)?;
    let proxy_saves = proxy.saves.clone();
    let app = router(
        AppState { engine, loopback, shutdown: shutdown.clone(), limits, proxy },
        crate::http::limits::BodyRules {
            max_bytes: settings.max_body_bytes,
            idle: settings.body_timeout,
        },
        settings.max_concurrent_requests,
        crate::ui::router,
    );
    let stopping = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stopping.cancel();
    });
    let serving = crate::http::serve::serve(listener, app, settings.body_timeout, shutdown.clone());
    let stopping = shutdown.clone();
    // After the signal, requests in flight get SHUTDOWN_GRACE to finish; a connection that
    // still holds on (a stalled upload, a stream without end) does not keep the process up.
    tokio::select! {
        () = serving => {},
        () = async {
            stopping.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!(
                grace_secs = SHUTDOWN_GRACE.as_secs(),
                "connections still open after the shutdown grace: closing them"
            );
        }
    };
    shutdown.cancel();
    // Proxied turns answered but not yet appended are saved before the process ends.
    proxy_saves.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, proxy_saves.wait()).await.is_err() {
        tracing::warn!("proxied turns still being saved after the shutdown grace");
    }
    if let Some(w) = workers {
        let _ = w.await;
    }
    if let Some(t) = traces {
        t.shutdown().await;
    }
    tracing::info!("engram stopped");
    Ok(())
}

/// How long `serve` waits, after SIGTERM or Ctrl-C, for requests in flight to finish.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
