//! Test harness: start/stop the real `engram` binary and talk to it over HTTP.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

/// The `engram` binary built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_engram"))
}

/// `--embedder` value used by tests: the real all-MiniLM-L6-v2.
pub fn minilm_embedder() -> String {
    format!("local:{}", engram_providers::testing::minilm_dir().display())
}

/// An `engram` command on a data dir, with the test embedder.
pub fn engram(data_dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.arg("--data-dir")
        .arg(data_dir)
        .arg("--embedder")
        .arg(minilm_embedder())
        .env("ENGRAM_LOG", "warn");
    c
}

/// Run an engram CLI command; returns (exit success, stdout, stderr).
pub fn run_cli(data_dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = engram(data_dir).args(args).output().expect("run engram");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A running server.
pub struct Server {
    pub base: String,
    pub dir: PathBuf,
    child: Child,
    pub client: reqwest::Client,
    /// Bearer key sent with every request (None: local mode).
    pub key: Option<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// A server on a fresh temp data dir.
    pub fn start() -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::start_on(&dir, &[]);
        s._tmp = Some(tmp);
        s
    }

    /// A server on `dir` (kept by the caller) with extra `serve` flags.
    pub fn start_on(dir: &Path, extra: &[&str]) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut child = engram(dir)
            .arg("serve")
            .arg("--addr")
            .arg("127.0.0.1:0")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn engram serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("engram listening on ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let Ok(base) = rx.recv_timeout(Duration::from_secs(120)) else {
            let _ = child.kill();
            panic!("engram serve did not start within 120 s");
        };
        Server {
            base,
            dir: dir.to_path_buf(),
            child,
            client: reqwest::Client::new(),
            key: None,
            _tmp: None,
        }
    }

    /// Stop the process without a chance to clean up (kill -9).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The same server with another key.
    pub fn with_key(&self, key: &str) -> Client {
        Client { base: self.base.clone(), client: self.client.clone(), key: Some(key.to_string()) }
    }

    /// A client of this server without a key.
    pub fn anon(&self) -> Client {
        Client { base: self.base.clone(), client: self.client.clone(), key: None }
    }

    pub async fn req(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        Client { base: self.base.clone(), client: self.client.clone(), key: self.key.clone() }
            .req(method, path, body)
            .await
    }
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.req("GET", path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.req("POST", path, Some(body)).await
    }

    /// Remember a fact for `user`; returns the memory id (panics unless 201 ADD).
    pub async fn remember(&self, user: &str, content: &str) -> String {
        let (s, b) =
            self.post("/v1/memories", json!({ "content": content, "user_id": user })).await;
        assert_eq!(s, StatusCode::CREATED, "remember failed: {b}");
        b["memory"]["id"].as_str().expect("id").to_string()
    }

    /// Contents of a search, best first.
    pub async fn search(&self, user: &str, query: &str) -> Vec<String> {
        let (s, b) = self.post("/v1/search", json!({ "query": query, "user_id": user })).await;
        assert_eq!(s, StatusCode::OK, "search failed: {b}");
        contents(&b)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Contents of the memory results of a search response.
pub fn contents(b: &Value) -> Vec<String> {
    b["results"]
        .as_array()
        .map(|a| {
            a.iter().filter_map(|r| r["memory"]["content"].as_str().map(str::to_string)).collect()
        })
        .unwrap_or_default()
}

/// An HTTP client of a server, with or without a key.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub client: reqwest::Client,
    pub key: Option<String>,
}

impl Client {
    pub async fn req(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut r = self.client.request(m, format!("{}{}", self.base, path));
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        let v = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, v)
    }
    /// Send a raw body with a content type.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut r = self
            .client
            .request(m, format!("{}{}", self.base, path))
            .header("content-type", content_type)
            .body(body);
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.req("GET", path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.req("POST", path, Some(body)).await
    }
}

/// Assert an error response: status and code.
#[track_caller]
pub fn assert_error(got: &(StatusCode, Value), status: u16, code: &str) {
    assert_eq!(got.0.as_u16(), status, "unexpected status; body: {}", got.1);
    assert_eq!(got.1["error"]["code"], code, "unexpected error code; body: {}", got.1);
    assert!(
        got.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "error without message: {}",
        got.1
    );
}
