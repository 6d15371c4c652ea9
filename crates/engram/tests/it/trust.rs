//! Issue 10, "Trust under fire": one regression test per defect found by trying to break
//! engram as an attacker and as a careless operator would, each on both backends where the
//! defect can happen on both.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Db, assert_error, bin, create_key};

/// Issue 10 #1: another agent's private version of a fact never shows through history, the
/// `superseded_by` of a row the caller can see, or a 409 message; in both directions.
async fn r10_history_shows_only_what_the_caller_may_see(backend: Backend) {
    let db = Db::new(backend).await;
    let a3 = create_key(&db, &["--tenant", "t", "--role", "agent", "--agent", "a3"]);
    let a2 = create_key(&db, &["--tenant", "t", "--role", "agent", "--agent", "a2"]);
    let s = db.serve(&[]);
    let (a3, a2) = (s.with_key(&a3), s.with_key(&a2));

    // Shared → private: A3 edits its shared fact into a knowledge (private) fact.
    let (st, b) = a3
        .post(
            "/v1/memories",
            json!({ "content": "The user's team uses Jira.", "user_id": "u", "kind": "shared" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let old = b["memory"]["id"].as_str().unwrap().to_string();
    let (st, b) = a3
        .req(
            "PATCH",
            &format!("/v1/memories/{old}"),
            Some(json!({ "content": "PRIVATE: the user is leaving the company in May.", "kind": "knowledge" })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let new = b["id"].as_str().unwrap().to_string();
    assert_error(&a2.get(&format!("/v1/memories/{new}")).await, 404, "not_found");
    let (st, h) = a2.get(&format!("/v1/memories/{old}/history")).await;
    assert_eq!(st, StatusCode::OK, "{h}");
    let text = h.to_string();
    assert!(!text.contains("PRIVATE") && !text.contains(&new), "history leaks: {h}");
    assert_eq!(h["chain"].as_array().unwrap().len(), 1, "{h}");
    assert_eq!(h["chain"][0]["superseded_by"], Value::Null);
    let (_, one) = a2.get(&format!("/v1/memories/{old}")).await;
    assert_eq!(one["superseded_by"], Value::Null, "{one}");
    assert!(one["superseded_at"].is_string(), "still shown as superseded: {one}");
    let (_, l) = a2.get("/v1/memories?user_id=u&include_superseded=true").await;
    assert!(!l.to_string().contains(&new) && !l.to_string().contains("PRIVATE"), "{l}");
    let r = a2.req("PATCH", &format!("/v1/memories/{old}"), Some(json!({ "importance": 9 }))).await;
    assert_error(&r, 409, "conflict");
    assert!(!r.1.to_string().contains(&new), "409 names the private successor: {}", r.1);
    // The writer still sees its whole history, with the link.
    let (_, h) = a3.get(&format!("/v1/memories/{new}/history")).await;
    assert_eq!(h["chain"].as_array().unwrap().len(), 2, "{h}");
    assert_eq!(h["chain"][0]["superseded_by"], new.as_str());
    let r = a3.req("PATCH", &format!("/v1/memories/{old}"), Some(json!({ "importance": 9 }))).await;
    assert!(r.1.to_string().contains(&new), "the owner is told the successor: {}", r.1);

    // Private → shared: the private original never shows through the later shared version.
    let (_, b) = a3
        .post(
            "/v1/memories",
            json!({ "content": "PRIVATE: the user's salary is 95k.", "user_id": "u" }),
        )
        .await;
    let private = b["memory"]["id"].as_str().unwrap().to_string();
    let (st, b) = a3
        .req(
            "PATCH",
            &format!("/v1/memories/{private}"),
            Some(json!({ "content": "The user works in finance.", "kind": "shared" })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let shared = b["id"].as_str().unwrap().to_string();
    let (st, h) = a2.get(&format!("/v1/memories/{shared}/history")).await;
    assert_eq!(st, StatusCode::OK, "{h}");
    let text = h.to_string();
    assert!(!text.contains("PRIVATE") && !text.contains(&private), "history leaks: {h}");
    assert_eq!(h["chain"].as_array().unwrap().len(), 1);
    assert!(
        h["events"].as_array().unwrap().iter().all(|e| e["memory_id"] == shared.as_str()),
        "{h}"
    );
    assert_error(&a2.get(&format!("/v1/memories/{private}/history")).await, 404, "not_found");

    // Found by the tenancy property test: A2 may edit A3's shared fact, but not turn it
    // into a private fact of A3's pool (a write into another agent's memory, answered with a
    // row A2 could not see).
    let r = a2
        .req("PATCH", &format!("/v1/memories/{shared}"), Some(json!({ "kind": "knowledge" })))
        .await;
    assert_error(&r, 403, "forbidden");
    let (st, b) = a2
        .req(
            "PATCH",
            &format!("/v1/memories/{shared}"),
            Some(json!({ "content": "The user works in banking." })),
        )
        .await;
    assert_eq!((st, b["kind"].as_str()), (StatusCode::OK, Some("shared")), "{b}");
}

/// Issue 10 #2: local mode answers only requests addressed to a loopback name, and not
/// requests of web pages of other sites (DNS rebinding, cross-site requests).
async fn r10_local_mode_refuses_foreign_host_and_origin(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&[]);
    s.remember("alice", "The user's diary password hint is a cat's name.").await;
    let port = s.base.rsplit(':').next().unwrap().to_string();
    let send = |method: &str, path: &str, host: &str, origin: Option<&str>| {
        let mut r = s
            .client
            .request(method.parse().unwrap(), format!("{}{path}", s.base))
            .header("host", host.to_string());
        if let Some(o) = origin {
            r = r.header("origin", o.to_string());
        }
        async move {
            let resp = r.send().await.unwrap();
            let status = resp.status();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let evil = format!("attacker.example:{port}");
    for (method, path) in [("GET", "/v1/memories?user_id=alice"), ("DELETE", "/v1/users/alice")] {
        let r = send(method, path, &evil, None).await;
        assert_error(&r, 403, "forbidden");
        assert!(!r.1.to_string().contains("diary"), "{}", r.1);
    }
    let r = send(
        "GET",
        "/v1/memories?user_id=alice",
        &format!("127.0.0.1:{port}"),
        Some("http://attacker.example"),
    )
    .await;
    assert_error(&r, 403, "forbidden");
    // Nothing was erased, and loopback names still work.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")]
    {
        let (st, b) = send("GET", "/v1/memories?user_id=alice", &host, None).await;
        assert_eq!(st, StatusCode::OK, "{host}: {b}");
        assert_eq!(b["memories"].as_array().unwrap().len(), 1, "{b}");
    }
    let (st, _) = send(
        "GET",
        "/v1/memories?user_id=alice",
        &format!("localhost:{port}"),
        Some(&format!("http://localhost:{port}")),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    // With a key the Host does not matter (a reverse proxy may name the server otherwise).
    let admin = create_key(&db, &["--tenant", "default", "--role", "admin"]);
    let (st, _) = s
        .client
        .get(format!("{}/v1/memories?user_id=alice", s.base))
        .header("host", evil.clone())
        .bearer_auth(&admin)
        .send()
        .await
        .map(|r| (r.status(), ()))
        .unwrap();
    assert_eq!(st, StatusCode::OK);
}

/// Issue 10 #3: a conversation belongs to the agent that started it.
async fn r10_agents_cannot_write_into_each_others_conversations(backend: Backend) {
    let db = Db::new(backend).await;
    let a3k = create_key(&db, &["--tenant", "t", "--role", "agent", "--agent", "a3"]);
    let a2k = create_key(&db, &["--tenant", "t", "--role", "agent", "--agent", "a2"]);
    let admin = create_key(&db, &["--tenant", "t", "--role", "admin"]);
    let s = db.serve(&[]);
    let (a3, a2, admin) = (s.with_key(&a3k), s.with_key(&a2k), s.with_key(&admin));
    let msg =
        |text: &str| json!({ "user_id": "u", "messages": [{ "role": "user", "content": text }] });
    let (st, b) = a3.post("/v1/conversations/conv-a3/messages", msg("Hello from a3")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    assert_error(
        &a2.post("/v1/conversations/conv-a3/messages", msg("INJECTED by a2")).await,
        409,
        "conflict",
    );
    let mut as_a2 = msg("INJECTED by admin as a2");
    as_a2["agent_id"] = json!("a2");
    assert_error(&admin.post("/v1/conversations/conv-a3/messages", as_a2).await, 409, "conflict");
    // An admin naming no agent continues the conversation as its agent.
    let (st, b) = admin.post("/v1/conversations/conv-a3/messages", msg("Admin note")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let (_, page) = a3.get("/v1/conversations/conv-a3/messages").await;
    let rows: Vec<(&str, &str)> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["content"].as_str().unwrap(), m["agent_id"].as_str().unwrap_or("-")))
        .collect();
    assert_eq!(rows, [("Hello from a3", "a3"), ("Admin note", "a3")]);
}

/// Issue 10 #4: a data dir that cannot be written is refused at start with the reason,
/// instead of a server that answers 500 to every write. (SQLite only: PostgreSQL has no
/// data dir.)
fn r10_read_only_data_dir_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let run = |args: &[&str], as_nobody: bool| {
        let mut c = if as_nobody {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(bin());
            c
        } else {
            std::process::Command::new(bin())
        };
        c.arg("--data-dir").arg(&dir).args(["--embedder", "builtin"]).args(args);
        c.env("ENGRAM_LOG", "warn").output_bounded().unwrap()
    };
    let out = run(&["remember", "The user likes tea.", "--user", "u"], false);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Readable by everyone, writable by nobody but its owner; run as another user when the
    // test runs as root (root writes anywhere).
    let root =
        std::process::Command::new("id").arg("-u").output_bounded().unwrap().stdout == b"0\n";
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    mode(tmp.path(), 0o755);
    mode(&dir, 0o555);
    for f in std::fs::read_dir(&dir).unwrap() {
        mode(&f.unwrap().path(), 0o444);
    }
    let out = run(&["serve", "--addr", "127.0.0.1:0"], root);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started on a read-only data dir: {err}");
    assert!(err.contains("cannot be written") && err.contains("--data-dir"), "{err}");
    mode(&dir, 0o755);
}

/// Issue 10 #5: explicit writes are not altered behind the caller's back: order numbers are
/// not phone numbers, a plain word after "secret is" is not a secret, and what is redacted
/// is reported (response, PATCH header, history).
async fn r10_pii_filter_is_precise_and_reports_what_it_redacts(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&[]);
    for text in ["The user's order number is 482913456.", "The user secret is localmode."] {
        let (st, b) = s.post("/v1/memories", json!({ "content": text, "user_id": "u" })).await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
        assert_eq!(b["memory"]["content"], text);
        assert_eq!(b["redacted"], json!([]));
    }
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user's mobile is +39 347 123 4567 and e-mail a@b.io.", "user_id": "u" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    assert_eq!(
        b["memory"]["content"],
        "The user's mobile is [REDACTED:phone] and e-mail [REDACTED:email]."
    );
    assert_eq!(b["redacted"], json!(["phone", "email"]));
    let id = b["memory"]["id"].as_str().unwrap();
    let (_, h) = s.get(&format!("/v1/memories/{id}/history")).await;
    assert_eq!(h["events"][0]["detail"]["redacted"], json!(["phone", "email"]), "{h}");
    // An edit goes through the filter too, and says so.
    let resp = s
        .client
        .patch(format!("{}/v1/memories/{id}", s.base))
        .json(&json!({ "content": "Call the user at 347 123 4567." }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["engram-redacted"], "phone");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["content"], "Call the user at [REDACTED:phone].");
    let (_, b) = s
        .post(
            "/v1/memories/batch",
            json!({ "memories": [{ "content": "Plain fact about tea.", "user_id": "u" }] }),
        )
        .await;
    assert_eq!(b["results"][0]["redacted"], json!([]));
}

/// Issue 10 #7: every error has the one format, also for path ids that are not UTF-8.
async fn r10_path_errors_use_the_error_format(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&[]);
    for path in [
        "/v1/memories/%FF",
        "/v1/memories/%FF/history",
        "/v1/memories/%C0%AF/rating",
        "/v1/conversations/%FE/messages",
        "/v1/messages/%FF/rating",
        "/v1/agents/%FF",
        "/v1/users/%FF/export",
        "/v1/memories/%3Cid%3E",
    ] {
        let method = if path.ends_with("rating") { "POST" } else { "GET" };
        let r = s
            .req(method, path, if method == "POST" { Some(json!({ "value": 1 })) } else { None })
            .await;
        assert_error(&r, 400, "invalid_input");
    }
}

/// Issue 10 #11: the smaller ones.
async fn r10_smaller_defects(backend: Backend) {
    let db = Db::new(backend).await;
    // A bad `addr` in engram.toml only matters to the commands that listen.
    let toml = db.dir().join("engram.toml");
    std::fs::write(&toml, "addr = \"not an address\"\n").unwrap();
    let cfg = toml.to_str().unwrap().to_string();
    let mut a = vec![
        "--config",
        cfg.as_str(),
        "keys",
        "create",
        "--json",
        "--tenant",
        "t",
        "--role",
        "admin",
    ];
    let (ok, out, err) = db.cli(&a);
    assert!(ok, "keys create with a bad addr in engram.toml: {err}");
    let admin = serde_json::from_str::<Value>(&out).unwrap()["key"].as_str().unwrap().to_string();
    a.truncate(2);
    a.extend(["serve"]);
    let (ok, _, err) = db.cli(&a);
    assert!(!ok && err.contains("not an address"), "{err}");
    let user = create_key(&db, &["--tenant", "t", "--role", "user", "--user", "u"]);
    let agent = create_key(&db, &["--tenant", "t", "--role", "agent", "--agent", "bot"]);
    let s = db.serve(&[]);
    // The bearer scheme is case-insensitive.
    let resp = s
        .client
        .get(format!("{}/v1/memories?user_id=u", s.base))
        .header("authorization", format!("bearer {admin}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // /metrics needs an admin key once keys exist.
    assert_error(&s.anon().get("/metrics").await, 401, "unauthorized");
    assert_error(&s.with_key(&agent).get("/metrics").await, 403, "forbidden");
    let (st, body) = s.with_key(&admin).get("/metrics").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.as_str().unwrap().contains("engram_llm_configured"));
    // A user key does not read agent settings.
    let (st, _) = s
        .with_key(&admin)
        .req("PUT", "/v1/agents/bot", Some(json!({ "memory_enabled": true })))
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_error(&s.with_key(&user).get("/v1/agents/bot").await, 403, "forbidden");
    assert_eq!(s.with_key(&agent).get("/v1/agents/bot").await.0, StatusCode::OK);
    // A mistyped --data-dir is an error, not a new empty store (the embedded store only:
    // PostgreSQL is named by its URL).
    if backend == Backend::Sqlite {
        let typo = db.dir().join("engram-dta");
        for cmd in
            [vec!["list", "--user", "u"], vec!["recall", "tea", "--user", "u"], vec!["export"]]
        {
            let out = crate::helpers::engram(&typo).args(&cmd).output_bounded().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.contains("no engram store"), "{cmd:?}: {err}");
            assert!(!typo.exists(), "{cmd:?} created {}", typo.display());
        }
    }
}

/// Issue 10 #11: logs written to a file carry no colour codes, and a job that needs an LLM
/// waits for a worker that has one instead of failing in a server that has none.
async fn r10_plain_logs_and_llm_jobs_wait_for_an_llm(backend: Backend) {
    let db = Db::new(backend).await;
    let (ok, _, err) = db.cli(&["remember", "The user likes tea.", "--user", "u"]);
    assert!(ok, "{err}");
    let (_, b) = {
        let s = db.serve(&[]);
        s.post(
            "/v1/conversations/c/messages",
            json!({ "user_id": "u", "messages": [{ "role": "assistant", "content": "", "tool_name": "weather", "tool_args": { "city": "Porto" } }] }),
        )
        .await
    };
    assert!(b["messages"].is_array(), "{b}");
    // The CLI has an LLM configured (it enqueues for the workers that have one).
    let (ok, out, err) = db.cli(&[
        "--llm-provider",
        "openai",
        "--llm-base-url",
        "http://127.0.0.1:9",
        "--llm-model",
        "m",
        "backfill",
        "tool-calls",
    ]);
    assert!(ok, "{out}{err}");
    let log = db.dir().join("serve.log");
    let mut args = db.store_args();
    args.extend(["serve".into(), "--addr".into(), "127.0.0.1:0".into()]);
    let mut child = crate::helpers::engram(db.dir())
        .args(&args)
        .env("ENGRAM_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("INFO"), "{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in a log file: {text}");
    let (ok, out, _) = db.cli(&["jobs", "list", "--json"]);
    assert!(ok);
    let jobs: Vec<Value> = serde_json::from_str(&out).unwrap();
    let synth: Vec<&Value> = jobs.iter().filter(|j| j["kind"] == "synthesize_tool_call").collect();
    assert!(!synth.is_empty(), "{jobs:?}");
    assert!(synth.iter().all(|j| j["status"] == "pending" && j["attempts"] == 0), "{synth:?}");
}

on_both_backends!(
    r10_history_shows_only_what_the_caller_may_see,
    r10_local_mode_refuses_foreign_host_and_origin,
    r10_agents_cannot_write_into_each_others_conversations,
    r10_pii_filter_is_precise_and_reports_what_it_redacts,
    r10_path_errors_use_the_error_format,
    r10_smaller_defects,
    r10_plain_logs_and_llm_jobs_wait_for_an_llm,
    r10_rate_limits_and_overload,
    r10_cli_progress_only_on_a_terminal,
    a_stalled_body_is_refused_and_does_not_hold_a_shutdown,
);

mod r10_read_only_data_dir {
    #[test]
    fn sqlite() {
        let _w = crate::helpers::watchdog(concat!(module_path!(), "::sqlite"));
        super::r10_read_only_data_dir_is_refused_at_start()
    }
}

/// A request body that stops arriving is refused with 408 after `--body-timeout-secs`
/// (found by a tester: three stalled bodies held every slot, `/healthz` included, for
/// good); headers that never finish and a silent connection are closed after the same
/// time; and a connection that keeps a request open does not keep a stopped server up:
/// SIGTERM ends it after the shutdown grace.
async fn a_stalled_body_is_refused_and_does_not_hold_a_shutdown(backend: Backend) {
    use std::io::{Read, Write};
    let db = Db::new(backend).await;
    let key = create_key(&db, &["--tenant", "t", "--role", "admin"]);
    let mut s = db.serve(&["--max-concurrent-requests", "1", "--body-timeout-secs", "1"]);
    let addr = s.base.trim_start_matches("http://").to_string();
    let body = r#"{"content": "The user rows a boat.", "user_id": "u"}"#;
    let head = format!(
        "POST /v1/memories HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    stalled.write_all(head.as_bytes()).unwrap();
    stalled.write_all(&body.as_bytes()[..10]).unwrap();
    stalled.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let mut answer = vec![0u8; 1024];
    let n = stalled.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
    assert!(answer.contains("--body-timeout-secs"), "{answer}");
    // The slot is free again; nothing was stored.
    let (st, b) = s.with_key(&key).get("/v1/memories?user_id=u").await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(b["memories"], json!([]));

    // Headers that never finish, and a connection that sends nothing, are closed after the
    // same timeout: neither holds a socket and a task for good.
    for opening in [&b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n"[..], &b""[..]] {
        let mut slow = std::net::TcpStream::connect(&addr).unwrap();
        slow.write_all(opening).unwrap();
        slow.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        let started = std::time::Instant::now();
        let mut rest = vec![];
        let read = slow.read_to_end(&mut rest);
        assert!(read.is_ok(), "closed, not timed out on our side: {read:?}");
        assert!(
            !String::from_utf8_lossy(&rest).contains("200 OK"),
            "{}",
            String::from_utf8_lossy(&rest)
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }

    // A body that trickles in (never idle for a second) holds a request open; SIGTERM still
    // ends the server, after the grace.
    let trickle = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(&addr).unwrap();
        let long = format!(
            "POST /v1/memories HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
        );
        c.write_all(long.as_bytes()).unwrap();
        for _ in 0..600 {
            if c.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let stopped = std::time::Instant::now();
    assert!(s.terminate(), "engram serve exits cleanly after the grace");
    assert!(stopped.elapsed() < std::time::Duration::from_secs(25), "{:?}", stopped.elapsed());
    trickle.join().unwrap();
}

/// Issue 10 #11: per-key request limits with 429 and Retry-After (made-up keys are charged
/// to the client address), and requests over the concurrency limit shed with 503 at once.
async fn r10_rate_limits_and_overload(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let db = Db::new(backend).await;
    let a = create_key(&db, &["--tenant", "t", "--role", "admin"]);
    let b = create_key(&db, &["--tenant", "t", "--role", "admin"]);
    let s = db.serve(&[
        "--rate-limit",
        "1",
        "--rate-limit-burst",
        "3",
        "--max-concurrent-requests",
        "1",
    ]);
    let get = |key: String| {
        let r = s.client.get(format!("{}/v1/memories?user_id=u", s.base)).bearer_auth(key).send();
        async move { r.await.unwrap() }
    };
    for _ in 0..3 {
        assert_eq!(get(a.clone()).await.status(), StatusCode::OK);
    }
    let over = get(a.clone()).await;
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = over.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let body: Value = over.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(get(b.clone()).await.status(), StatusCode::OK, "another key has its own budget");
    // Made-up keys: 401 until the address's budget is spent, then 429.
    let mut statuses = vec![];
    for i in 0..6 {
        statuses.push(get(format!("engram_made_up_key_{i}")).await.status().as_u16());
    }
    assert_eq!(&statuses[..3], [401, 401, 401], "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(get(a.clone()).await.status(), StatusCode::OK, "the budget refills");

    // A request whose body is still arriving holds the only slot: the next one is shed.
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = r#"{"content": "The user rows a boat.", "user_id": "u"}"#;
    let head = format!(
        "POST /v1/memories HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {b}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    slow.write_all(&body.as_bytes()[..10]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let shed = get(b.clone()).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["retry-after"], "1");
    assert_eq!(shed.json::<Value>().await.unwrap()["error"]["code"], "overloaded");
    slow.write_all(&body.as_bytes()[10..]).await.unwrap();
    let mut answer = vec![0u8; 64];
    let n = slow.read(&mut answer).await.unwrap();
    assert!(
        String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 201"),
        "{}",
        String::from_utf8_lossy(&answer[..n])
    );
}

/// Issue 10: long CLI work shows progress on a terminal and stays quiet with `--json` or
/// when stderr is not a terminal (a pipe, a log file).
async fn r10_cli_progress_only_on_a_terminal(backend: Backend) {
    let db = Db::new(backend).await;
    for i in 0..20 {
        let (ok, _, err) =
            db.cli(&["remember", &format!("The user owns lamp number {i}."), "--user", "u"]);
        assert!(ok, "{err}");
    }
    let file = db.dir().join("backup.jsonl");
    let file_s = file.to_str().unwrap().to_string();
    let (ok, _, err) = db.cli(&["export", "--out", &file_s]);
    assert!(ok, "{err}");
    assert!(!err.contains("exporting"), "progress on a pipe: {err}");
    let other = Db::new(backend).await;
    let (ok, out, err) = other.cli(&["import", &file_s, "--json"]);
    assert!(ok, "{err}");
    assert!(!err.contains("importing"), "progress with --json: {err}");
    let report = serde_json::from_str::<Value>(&out).unwrap();
    assert_eq!(report["tables"]["memories"], 20, "{report}");
    // On a terminal (a pseudo-terminal from `script`), the bar is drawn.
    let third = Db::new(backend).await;
    let mut cmd =
        vec![bin().display().to_string(), "--data-dir".into(), third.dir().display().to_string()];
    cmd.extend(third.store_args());
    cmd.extend([
        "--embedder".into(),
        crate::helpers::minilm_embedder(),
        "import".into(),
        file_s.clone(),
    ]);
    let line = cmd.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" ");
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output_bounded()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("importing"), "no progress on a terminal: {text}");
    assert!(text.contains("imported 40 rows (memories 20, memory_events 20)"), "{text}");
}
