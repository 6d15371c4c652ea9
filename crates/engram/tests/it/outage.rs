//! The database goes away under a running server: requests fail fast with `503
//! store_unavailable` (and `/healthz` says so, for load balancers), nothing half-written is
//! left, and when the database is back the same process serves again without a restart.
//!
//! The outage is a relay between the server and the test PostgreSQL that the test cuts
//! (every live connection dropped, new ones refused) and restores. Also here: the pool size
//! that keeps N servers + M workers under the database's connection limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use sqlx::Connection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::helpers::Bounded as _;
use crate::helpers::{Server, assert_error, engram};

/// A TCP relay to `upstream` that can be cut and restored.
struct Relay {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let (cuts, _) = watch::channel(0u64);
        let (up2, cuts2) = (up.clone(), cuts.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped at once: the database is "down"
                }
                let mut cut = cuts2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay { addr, up, cuts }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// A fresh database on the test server: (its URL, the server's address).
async fn fresh_database() -> (String, SocketAddr) {
    #[allow(clippy::disallowed_methods)] // tests read their fixture location from the environment
    let admin = std::env::var("ENGRAM_TEST_DATABASE_URL").expect(
        "ENGRAM_TEST_DATABASE_URL is not set: run `bash scripts/pg.sh start` and export the URL it prints",
    );
    let name = format!("engram_outage_{}", uuid::Uuid::now_v7().simple());
    let mut conn =
        sqlx::PgConnection::connect(&admin).await.expect("connect to the test PostgreSQL");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create database");
    let opts: sqlx::postgres::PgConnectOptions = admin.parse().unwrap();
    let upstream = format!("{}:{}", opts.get_host(), opts.get_port()).parse().unwrap();
    (format!("postgres://{}@HOST/{name}", opts.get_username()), upstream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_a_fast_503_and_the_server_recovers() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::a_database_outage_is_a_fast_503_and_the_server_recovers"
    ));
    let (url, upstream) = fresh_database().await;
    let relay = Relay::start(upstream).await;
    let url = url.replace("HOST", &relay.addr.to_string());
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_on(tmp.path(), &["--database-url", &url, "--no-workers"]);
    let kept = s.remember("u", "The user keeps bees on the roof.").await;

    relay.cut();
    let t = Instant::now();
    let r =
        s.post("/v1/memories", json!({ "content": "The user sells honey.", "user_id": "u" })).await;
    assert_error(&r, 503, "store_unavailable");
    assert!(
        r.1["error"]["message"].as_str().unwrap().contains("database is unavailable"),
        "{}",
        r.1
    );
    assert!(
        !r.1.to_string().contains(&relay.addr.to_string()),
        "connection details leaked: {}",
        r.1
    );
    assert_error(
        &s.post("/v1/search", json!({ "query": "bees", "user_id": "u" })).await,
        503,
        "store_unavailable",
    );
    assert_error(&s.get("/healthz").await, 503, "store_unavailable");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "an outage must fail fast, took {:?}",
        t.elapsed()
    );

    relay.restore();
    let mut healthy = false;
    for _ in 0..1200 {
        if s.get("/healthz").await.0 == StatusCode::OK {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healthy, "the server did not recover after the database came back");
    // Everything written before is there, the failed write is not, and writes work again.
    let (_, list) = s.get("/v1/memories?user_id=u").await;
    let rows = list["memories"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["id"], kept.as_str());
    s.remember("u", "The user sells honey at the Saturday market.").await;
    assert_eq!(s.search("u", "honey").await[0], "The user sells honey at the Saturday market.");
}

/// Issue 15: engram's own failure never blocks a chat through the memory proxy. With the
/// database gone, the call goes to the upstream without memory and the answer says so
/// (`engram-memory: unavailable`); once it is back, memory is added again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_chats_without_memory_while_the_database_is_down() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::the_proxy_chats_without_memory_while_the_database_is_down"
    ));
    use testkit::{Match, Rule, ScriptedLlm};
    let (url, upstream) = fresh_database().await;
    let relay = Relay::start(upstream).await;
    let url = url.replace("HOST", &relay.addr.to_string());
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("Here is my answer."));
    let tmp = tempfile::tempdir().unwrap();
    let base = llm.base_url();
    let s = Server::start_on(
        tmp.path(),
        &["--database-url", &url, "--no-workers", "--proxy-openai-url", &base],
    );
    s.remember("u", "The user keeps bees on the roof.").await;
    let ask = json!({ "model": "m", "user": "u",
        "messages": [{ "role": "user", "content": "What do I keep on the roof?" }] });
    let chat = format!("{}/v1/chat/completions", s.base);
    let call = || async {
        let r = s.client.post(&chat).json(&ask).send().await.unwrap();
        let memory = r.headers().get("engram-memory").map(|v| v.to_str().unwrap().to_string());
        (r.status(), memory, r.text().await.unwrap())
    };
    let (st, memory, _) = call().await;
    assert_eq!((st, memory), (StatusCode::OK, None));
    assert!(llm.requests().last().unwrap().full_text().contains("bees on the roof"));

    relay.cut();
    let (st, memory, body) = call().await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(memory.as_deref(), Some("unavailable"));
    assert!(body.contains("Here is my answer."), "{body}");
    let last = llm.requests().last().unwrap().clone();
    assert!(!last.full_text().contains("bees"), "no memory while the store is down");
    assert_eq!(llm.calls_matching(&Match::any().user_contains("roof")).len(), 2);

    relay.restore();
    for _ in 0..1200 {
        if s.get("/healthz").await.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (st, memory, _) = call().await;
    assert_eq!((st, memory), (StatusCode::OK, None));
    assert!(llm.requests().last().unwrap().full_text().contains("bees on the roof"));

    // With keys: a key the store confirmed keeps working through an outage; a key it never
    // confirmed is not let in (the store cannot say whether it is valid).
    let out = engram(tmp.path())
        .args(["--database-url", &url, "keys", "create", "--json"])
        .args(["--tenant", "default", "--role", "user", "--user", "u"])
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = key["key"].as_str().unwrap().to_string();
    let keyed = |k: String| {
        let (client, chat, ask) = (s.client.clone(), chat.clone(), ask.clone());
        async move {
            let r = client.post(&chat).bearer_auth(k).json(&ask).send().await.unwrap();
            let memory = r.headers().get("engram-memory").map(|v| v.to_str().unwrap().to_string());
            (r.status(), memory)
        }
    };
    assert_eq!(keyed(key.clone()).await, (StatusCode::OK, None));
    relay.cut();
    assert_eq!(keyed(key.clone()).await, (StatusCode::OK, Some("unavailable".to_string())));
    let (st, _) = keyed("engram_never_seen_by_the_store".to_string()).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    relay.restore();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_size_caps_the_connections_of_a_process() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::the_pool_size_caps_the_connections_of_a_process"
    ));
    let (url, upstream) = fresh_database().await;
    let url = url.replace("HOST", &upstream.to_string());
    let db = url.rsplit('/').next().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start_on(
        tmp.path(),
        &["--database-url", &url, "--no-workers", "--database-pool-size", "2"],
    );
    s.remember("u", "The user keeps bees on the roof.").await;
    // 24 requests at once: they queue for the 2 connections instead of opening more.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24 {
        let (client, base) = (s.client.clone(), s.base.clone());
        tasks.spawn(async move {
            let body = json!({ "query": format!("bees {i}"), "user_id": "u" });
            client.post(format!("{base}/v1/search")).json(&body).send().await.unwrap().status()
        });
    }
    while let Some(st) = tasks.join_next().await {
        assert_eq!(st.unwrap(), StatusCode::OK);
    }
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'engram'",
    )
    .bind(&db)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!((1..=2).contains(&open), "{open} connections open with a pool of 2");

    // A pool of 0 (or too many) is refused before anything starts.
    for bad in ["0", "1001", "many"] {
        let out = engram(tmp.path())
            .args(["list", "--user", "u", "--database-url", &url, "--database-pool-size", bad])
            .output_bounded()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "pool size {bad} was accepted");
        assert!(err.contains("database-pool-size") || err.contains("database_pool_size"), "{err}");
    }
}
