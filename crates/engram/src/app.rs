//! Wiring: settings → store + embedder → [`Engine`]; and the server's life cycle (bind,
//! serve, graceful shutdown on ctrl-c / SIGTERM).

use std::sync::Arc;

use anyhow::{Context, bail};
use engram_core::embed::Embedder;
use engram_core::engine::{Engine, EngineConfig};
use engram_core::store::Store;
use tokio::net::TcpListener;

use crate::http::{AppState, router};
use crate::settings::Settings;

/// Open the store and the embedder named by the settings.
pub async fn parts(settings: &Settings) -> anyhow::Result<(Arc<dyn Store>, Arc<dyn Embedder>)> {
    let store = engram_store::open_sqlite(&settings.data_dir).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot open the store in {}: {}",
            settings.data_dir.display(),
            e.public_message()
        )
    })?;
    let cfg = settings.embedder.clone();
    let embedder = tokio::task::spawn_blocking(move || engram_providers::build_embedder(&cfg))
        .await
        .context("embedder start-up panicked")?
        .map_err(|e| anyhow::anyhow!("cannot start the embedder: {}", e.message))?;
    Ok((store, embedder))
}

/// Build the engine named by the settings.
pub async fn engine(settings: &Settings) -> anyhow::Result<Engine> {
    let (store, embedder) = parts(settings).await?;
    let engine_cfg =
        EngineConfig { max_content_bytes: settings.max_content_bytes, ..EngineConfig::default() };
    Engine::new(store, embedder, engine_cfg)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.public_message()))
}

/// Run the HTTP server until ctrl-c or SIGTERM.
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    let engine = engine(&settings).await?;
    let loopback = settings.addr.ip().is_loopback();
    let keys = engine.store().count_active_api_keys().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    if !loopback && keys == 0 {
        bail!(
            "refusing to listen on {} without API keys: local mode (no keys) is for loopback only. \
             Create a key with `engram keys create --tenant <t> --role admin`, or listen on 127.0.0.1",
            settings.addr
        );
    }
    let listener = TcpListener::bind(settings.addr)
        .await
        .with_context(|| format!("cannot listen on {}", settings.addr))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        data_dir = %settings.data_dir.display(),
        embedder = engine.embedder().model_id(),
        mode = if keys == 0 { "local (no API keys: tenant 'default', loopback only)" } else { "API keys" },
        "engram listening"
    );
    // Machine-readable readiness line for scripts and tests.
    println!("engram listening on http://{addr}");
    let app = router(AppState { engine, loopback }, settings.max_body_bytes);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("server error")?;
    tracing::info!("engram stopped");
    Ok(())
}

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
