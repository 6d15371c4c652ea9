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

/// The store a test runs against. Every HTTP test runs once per backend (see
/// [`on_both_backends`]): where the two behave differently, the contract is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store in a temp data dir.
    Sqlite,
    /// A fresh database on the PostgreSQL server of `ENGRAM_TEST_DATABASE_URL`.
    Postgres,
}

/// The admin URL of the test PostgreSQL server; without it the PostgreSQL half of the suite
/// fails (never silently passes) and says how to start one.
pub fn test_database_url() -> String {
    #[allow(clippy::disallowed_methods)] // tests read their fixture location from the environment
    let url = std::env::var("ENGRAM_TEST_DATABASE_URL");
    match url {
        Ok(u) if !u.trim().is_empty() => u,
        _ => panic!(
            "ENGRAM_TEST_DATABASE_URL is not set: the PostgreSQL half of the HTTP suite needs a \
             PostgreSQL server with pgvector. Start one with\n\
             \n    export ENGRAM_TEST_DATABASE_URL=\"$(bash scripts/pg.sh start | tail -n 1)\"\n\
             \n(scripts/test.sh does this itself)."
        ),
    }
}

static DB_COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A new, empty database on the test PostgreSQL server; returns (its name, its URL).
pub async fn create_database() -> (String, String) {
    use sqlx::Connection;
    let admin = test_database_url();
    let name = format!(
        "engram_it_{}_{}_{}",
        std::process::id(),
        DB_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        uuid::Uuid::now_v7().simple().to_string().split_at(24).1
    );
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
        panic!("cannot connect to the test PostgreSQL (ENGRAM_TEST_DATABASE_URL): {e}")
    });
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create database");
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b).to_string();
    (name.clone(), format!("{base}/{name}"))
}

/// One fresh store for one test: a temp data dir (the store itself on SQLite; on PostgreSQL
/// only the processes' data dir, which stays empty) and, on PostgreSQL, a new database, dropped
/// when the test passes (kept for inspection when it fails).
pub struct Db {
    tmp: tempfile::TempDir,
    /// PostgreSQL: (database name, URL).
    pg: Option<(String, String)>,
}

impl Db {
    pub async fn new(backend: Backend) -> Db {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pg = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(create_database().await),
        };
        Db { tmp, pg }
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// PostgreSQL: the database URL.
    pub fn url(&self) -> Option<&str> {
        self.pg.as_ref().map(|p| p.1.as_str())
    }

    /// The flags that name this store (`--database-url` on PostgreSQL).
    pub fn store_args(&self) -> Vec<String> {
        match &self.pg {
            Some((_, url)) => vec!["--database-url".into(), url.clone()],
            None => vec![],
        }
    }

    /// An `engram` command on this store, with the test embedder.
    pub fn engram(&self) -> Command {
        let mut c = engram(self.dir());
        c.args(self.store_args());
        c
    }

    /// Run an engram CLI command on this store; returns (exit success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = output_within(self.engram().args(args), CHILD_LIMIT);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A server on this store, with extra `serve` flags.
    pub fn serve(&self, extra: &[&str]) -> Server {
        let mut args: Vec<String> = self.store_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_on(self.dir(), &args)
    }

    /// PostgreSQL: a connection to this test's database (to look inside it).
    pub async fn pg(&self) -> sqlx::PgConnection {
        use sqlx::Connection;
        let url = self.url().expect("a PostgreSQL test database");
        sqlx::PgConnection::connect(url).await.expect("connect to the test database")
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let Some((name, _)) = self.pg.take() else { return };
        if std::thread::panicking() {
            eprintln!("test failed: its PostgreSQL database {name} is kept for inspection");
            return;
        }
        // Drop may run inside the test's runtime: use a thread with its own.
        let admin = test_database_url();
        let _ = std::thread::spawn(move || {
            use sqlx::Connection;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async {
                let mut c = sqlx::PgConnection::connect(&admin).await.ok()?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut c)
                .await
                .ok()
            })
        })
        .join();
    }
}

/// How long one CLI command of a test may run before it is killed and the test fails with
/// its arguments (no command of the suite comes near; a hang must name itself, not hold the
/// run until CI's limit).
pub const CHILD_LIMIT: Duration = Duration::from_secs(300);

/// How long a test's HTTP request to its server may take.
pub const REQUEST_LIMIT: Duration = Duration::from_secs(300);

/// How long one test may run before [`watchdog`] ends the whole run (the slowest test takes
/// about two minutes on the 2-core CI machine); `ENGRAM_TEST_LIMIT_SECS` changes it.
pub fn test_limit() -> Duration {
    #[allow(clippy::disallowed_methods)] // a knob of the test run, not of the product
    let secs = std::env::var("ENGRAM_TEST_LIMIT_SECS").ok().and_then(|s| s.parse().ok());
    Duration::from_secs(secs.unwrap_or(15 * 60))
}

/// `cmd.output()`, killed after `limit`: panics with the command line when it does not end
/// (stdin is closed, as `output()` does).
pub fn output_within(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    let read = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = read(child.stdout.take().map(|r| Box::new(r) as _));
    let err = read(child.stderr.take().map(|r| Box::new(r) as _));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the command") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {} s: killed", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// [`output_within`] [`CHILD_LIMIT`] for every command a test runs to its end.
pub trait Bounded {
    /// `output()` that cannot hang the test run.
    fn output_bounded(&mut self) -> std::io::Result<std::process::Output>;
}

impl Bounded for Command {
    fn output_bounded(&mut self) -> std::io::Result<std::process::Output> {
        Ok(output_within(self, CHILD_LIMIT))
    }
}

/// Held by a test for as long as it runs: past [`test_limit`] the test is named on stderr,
/// the processes it started are killed (they share the run's output: left alive, they would
/// hold it open) and the run exits with a failure. A hang then costs minutes and says where
/// it is, instead of holding CI until its time limit with nothing printed.
pub struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

/// Start the [`Watchdog`] of the test `name`.
pub fn watchdog(name: &'static str) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let limit = test_limit();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            // Straight to the file descriptor: the test harness captures `eprintln!` of
            // the test's threads, and would drop it with the process.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "test {name} is still running after {} s: a hang; stopping the run",
                limit.as_secs()
            );
            kill_descendants();
            std::process::exit(101);
        }
    });
    Watchdog(tx)
}

/// SIGKILL every process this test binary started, and theirs (read from `/proc`).
fn kill_descendants() {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) {
            parent_of.push((pid, ppid));
        }
    }
    let mut ours = vec![std::process::id()];
    let mut i = 0;
    while i < ours.len() {
        let p = ours[i];
        ours.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    let pids: Vec<String> = ours[1..].iter().map(u32::to_string).collect();
    if !pids.is_empty() {
        let _ = Command::new("kill").arg("-9").args(&pids).status();
    }
}

/// Run each listed test body, an `async fn name(backend: Backend)`, once per backend: as the
/// tests `name::sqlite` and `name::postgres` (`cargo test -p engram --test it postgres` runs
/// the PostgreSQL half), each under a [`watchdog`].
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    let _w = crate::helpers::watchdog(concat!(module_path!(), "::sqlite"));
                    super::$name(crate::helpers::Backend::Sqlite).await
                }
                #[tokio::test]
                async fn postgres() {
                    let _w = crate::helpers::watchdog(concat!(module_path!(), "::postgres"));
                    super::$name(crate::helpers::Backend::Postgres).await
                }
            }
        )*
    };
}

/// A running server.
pub struct Server {
    pub base: String,
    child: Child,
    pub client: reqwest::Client,
    /// Bearer key sent with every request (None: local mode).
    pub key: Option<String>,
    /// The store, when the server owns it (dropped after the process is killed).
    db: Option<Db>,
}

impl Server {
    /// A server on a fresh store of `backend`.
    pub async fn on(backend: Backend) -> Server {
        let db = Db::new(backend).await;
        let mut s = db.serve(&[]);
        s.db = Some(db);
        s
    }

    /// The store of a server made by [`Server::on`].
    pub fn db(&self) -> &Db {
        self.db.as_ref().expect("a server made by Server::on")
    }

    /// A server on `dir` (kept by the caller) with extra `serve` flags.
    pub fn start_on(dir: &Path, extra: &[&str]) -> Server {
        Server::spawn(engram(dir), extra)
    }

    /// `engram serve` from `cmd` (an [`engram`] command, with the caller's environment) with
    /// extra flags.
    pub fn spawn(mut cmd: Command, extra: &[&str]) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut child = cmd
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
        // A request that gets no answer fails the test with its path instead of hanging it.
        let client =
            reqwest::Client::builder().timeout(REQUEST_LIMIT).build().expect("an HTTP client");
        Server { base, child, client, key: None, db: None }
    }

    /// Stop the process as an operator would (SIGTERM) and wait for it to exit; true if it
    /// exited successfully.
    pub fn terminate(&mut self) -> bool {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        for _ in 0..300 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("engram serve did not stop within 30 s of SIGTERM");
    }

    /// [`Server::terminate`] that lets this test's own runtime go on meanwhile (a scripted
    /// LLM the server is still talking to).
    pub async fn terminate_async(&mut self) -> bool {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        for _ in 0..300 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("engram serve did not stop within 30 s of SIGTERM");
    }

    /// Stop the process without a chance to clean up (kill -9).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A client of this server with its own key.
    pub fn as_client(&self) -> Client {
        Client { base: self.base.clone(), client: self.client.clone(), key: self.key.clone() }
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
        self.as_client().req(method, path, body).await
    }
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.req("GET", path, None).await
    }
    /// A GET whose body is text (`/metrics`); panics unless 200.
    pub async fn get_text(&self, path: &str) -> String {
        let mut r = self.client.get(format!("{}{path}", self.base));
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        let resp = r.send().await.expect("request");
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        resp.text().await.expect("body")
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

/// Wait until the job queue seen by `c` (`/v1/stats`) is drained; returns the last stats.
///
/// Bounded by progress, not by the wall clock: it fails only when for a whole minute no job
/// has started, ended or failed and no row has been embedded or summarized (a hung queue),
/// so a slow machine that keeps working passes.
pub async fn drained(c: &Client) -> Value {
    let state = |st: &Value| {
        [
            "jobs_pending",
            "jobs_running",
            "jobs_done",
            "jobs_failed",
            "messages_with_vector",
            "memories_with_vector",
            "summaries",
            "extractions_done",
        ]
        .map(|k| st[k].clone())
    };
    let (mut last, mut since) = (None, std::time::Instant::now());
    loop {
        let (status, st) = c.get("/v1/stats").await;
        assert_eq!(status, StatusCode::OK, "{st}");
        if st["jobs_pending"] == 0 && st["jobs_running"] == 0 {
            return st;
        }
        let now = Some(state(&st));
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
        assert!(since.elapsed() < Duration::from_secs(60), "jobs made no progress for 60 s: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Create an API key with `engram keys create --json <args>` on `db`; returns the secret.
pub fn create_key(db: &Db, args: &[&str]) -> String {
    let mut a = vec!["keys", "create", "--json"];
    a.extend_from_slice(args);
    let (ok, out, err) = db.cli(&a);
    assert!(ok, "keys create failed: {err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    v["key"].as_str().expect("a key").to_string()
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

/// Append `turns` as one conversation of `user`, speakers taking turns as user and assistant.
pub async fn append_turns(s: &Server, user: &str, turns: &[&str]) {
    let messages: Vec<Value> = turns
        .iter()
        .enumerate()
        .map(
            |(i, t)| json!({ "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t }),
        )
        .collect();
    let body = json!({ "user_id": user, "messages": messages });
    let (st, b) = s.post("/v1/conversations/chat/messages", body).await;
    assert_eq!(st, 202, "{b}");
}
