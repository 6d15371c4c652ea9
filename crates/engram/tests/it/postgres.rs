//! The server on PostgreSQL + pgvector (`--database-url`), and several processes on one
//! database: two servers writing at once, a separate worker processing their extraction
//! jobs exactly once, and a killed worker's job taken over after its lease.
//!
//! Needs `ENGRAM_TEST_DATABASE_URL` (scripts/test.sh starts a throwaway server with
//! scripts/pg.sh); each test makes its own database.

use std::process::{Child, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Match, Rule, ScriptedLlm};

use crate::helpers::{Backend, Db, Server, contents, engram};

/// A fresh database on the test server (dropped when the test passes) and its URL.
async fn fresh_database() -> (Db, String) {
    let db = Db::new(Backend::Postgres).await;
    let url = db.url().expect("a PostgreSQL database").to_string();
    (db, url)
}

fn llm_args(llm: &ScriptedLlm) -> Vec<String> {
    [
        "--llm-provider",
        "openai",
        "--llm-base-url",
        &llm.base_url(),
        "--llm-model",
        "m",
        "--job-backoff-ms",
        "200",
        "--job-lease-secs",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn serve(url: &str, extra: &[String]) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut args: Vec<&str> = vec!["--database-url", url];
    args.extend(extra.iter().map(String::as_str));
    (Server::start_on(tmp.path(), &args), tmp)
}

struct Worker(Child);

impl Worker {
    fn start(url: &str, extra: &[String]) -> Worker {
        let tmp = std::env::temp_dir();
        let child = engram(&tmp)
            .args(["worker", "--database-url", url])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn engram worker");
        Worker(child)
    }
    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

async fn wait_until(mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..1200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("condition not reached in 120 s");
}

#[tokio::test]
async fn the_memory_story_on_postgres() {
    let _w = crate::helpers::watchdog(concat!(module_path!(), "::the_memory_story_on_postgres"));
    let (_db, url) = fresh_database().await;
    let (s, _tmp) = serve(&url, &[]);
    let id = s.remember("alice", "The user lives in Bengaluru.").await;
    s.remember("alice", "The user's daughter Maya plays the violin.").await;
    s.remember("bob", "The user lives in Lisbon.").await;
    assert_eq!(
        s.search("alice", "which city is her home?").await[0],
        "The user lives in Bengaluru."
    );
    assert_eq!(s.search("alice", "violin").await[0], "The user's daughter Maya plays the violin.");
    let (st, dup) = s
        .post(
            "/v1/memories",
            json!({ "content": "the user lives in Bengaluru", "user_id": "alice" }),
        )
        .await;
    assert_eq!((st, dup["decision"].as_str()), (StatusCode::OK, Some("NONE")));
    let (_, edited) = s
        .req(
            "PATCH",
            &format!("/v1/memories/{id}"),
            Some(json!({ "content": "The user lives in Mysuru." })),
        )
        .await;
    let new_id = edited["id"].as_str().unwrap().to_string();
    let (_, h) = s.get(&format!("/v1/memories/{new_id}/history")).await;
    assert_eq!(h["chain"].as_array().unwrap().len(), 2);
    assert!(
        !s.search("alice", "where does the user live")
            .await
            .iter()
            .any(|c| c.contains("Bengaluru"))
    );
    let (st, er) = s.req("DELETE", "/v1/users/alice", None).await;
    assert_eq!((st, er["erased"]["memories"].as_u64()), (StatusCode::OK, Some(3)), "{er}");
    assert!(s.search("alice", "violin").await.is_empty());
    assert_eq!(s.search("bob", "Lisbon").await, ["The user lives in Lisbon."]);
}

#[tokio::test]
async fn two_servers_and_a_worker_share_one_database() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::two_servers_and_a_worker_share_one_database"
    ));
    let (_db, url) = fresh_database().await;
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains("memory extraction").reply_with(|r| {
        let text = r.full_text();
        let what = text
            .split("I collect ")
            .nth(1)
            .and_then(|t| t.split('.').next())
            .unwrap_or("?")
            .to_string();
        format!(
            r#"[{{"content": "The user collects {what}.", "category": "fact", "importance": 4}}]"#
        )
    }));
    llm.on(
        Rule::system_contains("memory consolidation").reply(r#"[{"fact": 1, "decision": "ADD"}]"#)
    );
    let mut extra = llm_args(&llm);
    extra.push("--no-workers".into());
    let (a, _ta) = serve(&url, &extra);
    let (b, _tb) = serve(&url, &extra);
    // Concurrent writes from both servers.
    let writes = (0..20).map(|i| {
        let s = if i % 2 == 0 { &a } else { &b };
        s.post("/v1/memories", json!({ "content": format!("Shared fact {i}: the user visited city {i} with friend {i}."), "user_id": "u", "importance": 1 + i % 10 }))
    });
    for (st, body) in futures_join(writes).await {
        assert!(st == StatusCode::CREATED || st == StatusCode::OK, "{body}");
    }
    let (_, la) = a.get("/v1/memories?user_id=u&limit=100").await;
    let (_, lb) = b.get("/v1/memories?user_id=u&limit=100").await;
    assert_eq!(la["memories"], lb["memories"], "both servers see the same rows");
    // Extraction jobs enqueued through both servers, processed by one worker, once each.
    let hobbies = [
        "postage stamps",
        "vinyl records",
        "fountain pens",
        "antique maps",
        "seashells",
        "comic books",
    ];
    for (i, h) in hobbies.iter().enumerate() {
        let s = if i % 2 == 0 { &a } else { &b };
        let (st, _) = s.post(&format!("/v1/conversations/c{i}/messages"), json!({ "user_id": "w", "messages": [{ "role": "user", "content": format!("I collect {h}.") }] })).await;
        assert_eq!(st, StatusCode::ACCEPTED);
    }
    let _w = Worker::start(&url, &llm_args(&llm));
    wait_until(async || {
        let (_, st) = a.get("/v1/stats").await;
        st["jobs_pending"] == 0 && st["jobs_running"] == 0 && st["jobs_done"].as_u64() >= Some(6)
    })
    .await;
    let (_, l) = b.get("/v1/memories?user_id=w&limit=100").await;
    let mut got: Vec<String> = l["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    let mut want: Vec<String> = hobbies.iter().map(|h| format!("The user collects {h}.")).collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        llm.calls_matching(&Match::any().system_contains("memory extraction")).len(),
        6,
        "each job ran once"
    );
}

#[tokio::test]
async fn a_killed_workers_job_is_taken_over_after_its_lease() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::a_killed_workers_job_is_taken_over_after_its_lease"
    ));
    let (_db, url) = fresh_database().await;
    let llm = ScriptedLlm::start().await;
    let hang = llm.on(Rule::system_contains("memory extraction").hang());
    let mut extra = llm_args(&llm);
    extra.push("--no-workers".into());
    let (s, _t) = serve(&url, &extra);
    let (st, _) = s.post("/v1/conversations/k/messages", json!({ "user_id": "u", "messages": [{ "role": "user", "content": "I fly gliders on weekends." }] })).await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let mut first = Worker::start(&url, &llm_args(&llm));
    llm.wait_for(&Match::any().system_contains("memory extraction"), 1, Duration::from_secs(30))
        .await;
    first.kill9();
    llm.remove(&hang);
    llm.on(Rule::system_contains("memory extraction").reply(r#"[{"content": "The user flies gliders on weekends.", "category": "fact", "importance": 5}]"#));
    let _second = Worker::start(&url, &llm_args(&llm));
    wait_until(async || {
        !contents(&s.post("/v1/search", json!({ "query": "gliders", "user_id": "u" })).await.1)
            .is_empty()
    })
    .await;
    wait_until(async || {
        let (_, st) = s.get("/v1/stats").await;
        st["jobs_pending"] == 0 && st["jobs_running"] == 0
    })
    .await;
    let (_, l) = s.get("/v1/memories?user_id=u").await;
    let facts: Vec<&Value> = l["memories"].as_array().unwrap().iter().collect();
    assert_eq!(facts.len(), 1, "{l}");
    assert_eq!(facts[0]["content"], "The user flies gliders on weekends.");
}

/// Run futures concurrently on the current task.
async fn futures_join<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futs.collect();
    let mut out = Vec::with_capacity(handles.len());
    // Poll all at once: join by spawning would need 'static; a simple join_all is enough.
    for r in join_all(handles).await {
        out.push(r);
    }
    out
}

async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if results[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => results[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    results.into_iter().map(|r| r.expect("ready")).collect()
}
