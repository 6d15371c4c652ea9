//! Logs and traces: the log lines on stderr (always), and OpenTelemetry trace export over
//! OTLP (off unless `--otlp-endpoint` is set).
//!
//! Logging starts in `main`, before the command line's settings are resolved; the OTLP layer
//! sits in the subscriber from the start as an empty [`reload`] slot, which `serve` and
//! `worker` fill once their settings name a collector ([`export_traces`]). The spans are the
//! ones the logs already have (HTTP requests, job runs, pipeline stages): engram's own, at
//! `info` and above, whatever `ENGRAM_LOG` lets into the log.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

type OtelLayer = tracing_opentelemetry::OpenTelemetryLayer<Registry, SdkTracer>;

/// The empty slot the OTLP layer goes into.
static OTLP_SLOT: OnceLock<reload::Handle<Option<OtelLayer>, Registry>> = OnceLock::new();

/// Whether spans are exported: the export layer's filter reads it, so an engram without a
/// collector does not even build the spans the log filter leaves out.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Starts the log lines on stderr, filtered by `ENGRAM_LOG` (default `info`).
pub fn init_logging() {
    let (slot, handle) = reload::Layer::new(None::<OtelLayer>);
    // engram's own spans at `info` and above, whatever `ENGRAM_LOG` says: the log level of a
    // quiet deployment must not blind its traces.
    let exported = filter_fn(|meta| {
        EXPORTING.load(Ordering::Relaxed)
            && meta.target().starts_with("engram")
            && *meta.level() <= tracing::Level::INFO
    });
    let logged = EnvFilter::try_from_env("ENGRAM_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        // Pipeline stages (extract, embed, consolidate, persist, summary) are spans: their
        // close line carries the duration and the recorded outcome.
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log redirected to a file stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // The request span is for traces; the log is not an access log.
        .with_filter(
            logged
                .and(filter_fn(|meta| meta.target() != crate::http::observe::REQUEST_SPAN_TARGET)),
        );
    tracing_subscriber::registry().with(slot.with_filter(exported)).with(fmt).init();
    let _ = OTLP_SLOT.set(handle);
}

/// Trace export while it lives; dropping it (or [`Traces::shutdown`]) sends what is left.
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Sends the spans still in the batch and stops the exporter (waits at most a few
    /// seconds for the collector).
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(e) = provider.shutdown_with_timeout(std::time::Duration::from_secs(5)) {
                    tracing::warn!(error = %e, "trace export: the last spans were not sent");
                }
            })
            .await;
        }
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown_with_timeout(std::time::Duration::from_secs(5));
        }
    }
}

/// The URL spans are posted to: the collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// takes it) plus `/v1/traces`, unless it already names that path.
pub fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let endpoint = endpoint.trim();
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        anyhow::bail!(
            "--otlp-endpoint must be an http:// or https:// URL (an OTLP/HTTP collector, e.g. http://localhost:4318), got {endpoint:?}"
        );
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") })
}

/// Exports the spans to the OTLP/HTTP (protobuf) collector at `endpoint` from now on, as
/// service `service_name`. Headers, batch sizes and delays follow the standard
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_BSP_*` variables.
pub fn export_traces(endpoint: &str, service_name: &str) -> anyhow::Result<Traces> {
    let url = traces_url(endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .build()
        .with_context(|| format!("OTLP trace exporter for {url}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service_name.to_string())
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("engram"));
    let slot = OTLP_SLOT.get().context("logging was not started")?;
    EXPORTING.store(true, Ordering::Relaxed);
    // Reloading also makes every callsite ask the filters again.
    slot.reload(Some(layer)).context("installing the trace exporter")?;
    tracing::info!(%url, "exporting traces over OTLP");
    Ok(Traces { provider: Some(provider) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_collector_base_url() {
        assert_eq!(traces_url("http://localhost:4318").unwrap(), "http://localhost:4318/v1/traces");
        assert_eq!(
            traces_url("https://c.example/otlp/").unwrap(),
            "https://c.example/otlp/v1/traces"
        );
        assert_eq!(traces_url("http://c:4318/v1/traces").unwrap(), "http://c:4318/v1/traces");
        let e = traces_url("localhost:4317").unwrap_err().to_string();
        assert!(e.contains("--otlp-endpoint") && e.contains("localhost:4317"), "{e}");
    }
}
