//! The real `engram serve` process, started on a free loopback port over a data dir, and a
//! keep-alive HTTP client for it.
//!
//! The server runs in local mode (no API keys: tenant `default`, loopback only), which is
//! why the engine-side fill uses the `default` tenant too: a data dir filled through the
//! engine is exactly what the server reads.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// A running server; killed (and reaped) on drop.
pub struct Server {
    child: Child,
    pub base: String,
    log: PathBuf,
}

/// The `engram` binary next to this one (`target/release/engram` for a release build).
pub fn default_server_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("engram")))
        .unwrap_or_else(|| PathBuf::from("target/release/engram"))
}

/// The `engram serve` flags of an OpenAI-compatible LLM at `base_url` (the scripted one of
/// `testkit`): models `main` and `fast`, a timeout long enough for slow scripted answers.
pub fn llm_args(base_url: &str) -> Vec<String> {
    [
        "--llm-provider",
        "openai",
        "--llm-base-url",
        base_url,
        "--llm-model",
        "main",
        "--llm-fast-model",
        "fast",
        "--llm-timeout-secs",
        "600",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A loopback port that was free a moment ago (bind port 0, read it, release it).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Server {
    /// Start `bin serve --addr 127.0.0.1:<port> --data-dir <dir> <extra…>` and wait until
    /// `GET /healthz` answers 200 (at most `timeout`).
    pub async fn start(
        bin: &Path,
        data_dir: &Path,
        extra: &[String],
        client: &reqwest::Client,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            bin.is_file(),
            "server binary {} not found: build it with `cargo build --release -p engram` or pass --server-bin",
            bin.display()
        );
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        // Next to the data dir (both live in the benchmark's temp dir).
        let log = data_dir.parent().unwrap_or(data_dir).join(format!("server-{port}.log"));
        let log_file = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .arg("serve")
            .arg("--addr")
            .arg(&addr)
            // Benchmarks measure the server, not its per-key request limit.
            .args(["--rate-limit", "0"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut server = Server { child, base: format!("http://{addr}"), log };
        let t = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait()? {
                anyhow::bail!(
                    "the server exited with {status} before it was ready; its log:\n{}",
                    server.log_tail()
                );
            }
            if let Ok(r) = client.get(format!("{}/healthz", server.base)).send().await
                && r.status().is_success()
            {
                return Ok(server);
            }
            if t.elapsed() > timeout {
                anyhow::bail!(
                    "the server did not answer /healthz within {timeout:?}; its log:\n{}",
                    server.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last lines the server wrote.
    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A keep-alive client (one connection reused across requests).
pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// POST JSON, require a 2xx answer, return its body as JSON.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let r = client.post(url).json(body).send().await.with_context(|| format!("POST {url}"))?;
    let status = r.status();
    let text = r.text().await?;
    anyhow::ensure!(status.is_success(), "POST {url} answered {status}: {text}");
    serde_json::from_str(&text).with_context(|| format!("POST {url}: answer is not JSON: {text}"))
}
