//! The memory proxy (issue 15, items 1–3), driven over HTTP against a real `engram serve`
//! whose upstream is the scripted LLM: the upstream gets the known facts in its system
//! prompt and every other field as sent; the client gets the upstream's answer unchanged
//! (the content, and a stream event for event); the turn is appended and its facts
//! extracted; a user key cannot reach another user's facts; upstream errors and timeouts
//! reach the client as documented; and the official OpenAI and Anthropic Python SDKs work
//! through it (`scripts/sdk/check.py`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Match, Rule, ScriptedLlm};

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Db, Server, create_key};

const EXTRACT: &str = "memory extraction system";
const CONSOLIDATE: &str = "memory consolidation system";
const UPSTREAM_KEY: &str = "sk-upstream-secret";

fn start(db: &Db, llm: &ScriptedLlm, extra: &[&str]) -> Server {
    let base = llm.base_url();
    let mut args = vec![
        "--proxy-openai-url",
        &base,
        "--proxy-openai-api-key",
        UPSTREAM_KEY,
        "--proxy-anthropic-url",
        &base,
        "--proxy-anthropic-api-key",
        UPSTREAM_KEY,
        "--llm-provider",
        "openai",
        "--llm-base-url",
        &base,
        "--llm-api-key",
        UPSTREAM_KEY,
        "--llm-model",
        "main-model",
        "--job-backoff-ms",
        "200",
    ];
    args.extend_from_slice(extra);
    db.serve(&args)
}

/// POST a raw JSON body with headers; returns status, headers and the body text.
async fn call(
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut r = reqwest::Client::new().post(url).json(body);
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    let resp = r.send().await.unwrap();
    let (status, h) = (resp.status(), resp.headers().clone());
    (status, h, resp.text().await.unwrap())
}

/// The events of an SSE body, with the fields that differ per call (`id`, `created`,
/// usage) taken out.
fn events(sse: &str) -> Vec<String> {
    sse.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.lines()
                .map(|l| match l.strip_prefix("data: ").map(serde_json::from_str::<Value>) {
                    Some(Ok(mut v)) => {
                        for p in ["id", "created", "usage"] {
                            v.as_object_mut().map(|o| o.remove(p));
                        }
                        if let Some(m) = v.get_mut("message").and_then(Value::as_object_mut) {
                            m.remove("id");
                            m.remove("usage");
                        }
                        format!("data: {v}")
                    }
                    _ => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

async fn wait_for_facts(s: &Server, user: &str, n: usize) -> Vec<String> {
    for _ in 0..1200 {
        let (_, b) = s.get(&format!("/v1/memories?user_id={user}")).await;
        let facts: Vec<String> = b["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect();
        if facts.len() >= n {
            return facts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{user}'s facts were never extracted");
}

async fn the_openai_proxy_adds_memory_and_passes_everything_else(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.require_api_key(UPSTREAM_KEY);
    llm.on(Rule::system_contains("Be brief").reply("Green tea, as every morning."));
    llm.set_default(Rule::system_contains(EXTRACT).reply("[]"));
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("oolong")).reply(
        r#"[{"content":"The user is trying oolong tea.","category":"preference","importance":5}]"#,
    ));
    llm.on(Rule::system_contains(CONSOLIDATE).reply(r#"[{"fact": 1, "decision": "ADD"}]"#));
    let s = start(&db, &llm, &[]);
    let (st, _) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user drinks green tea every morning.",
            "user_id": "alice" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);

    // Non-streaming, with fields engram does not know: all of them reach the upstream.
    let request = json!({
        "model": "gpt-test", "user": "alice", "n": 1,
        "messages": [{ "role": "system", "content": "Be brief." },
                     { "role": "user", "content": "What should I drink this morning?" }],
        "tools": [{ "type": "function", "function": { "name": "order", "parameters": {} } }],
        "response_format": { "type": "text" },
        "some_future_field": { "x": [1, 2] },
    });
    let url = format!("{}/v1/chat/completions", s.base);
    let (st, headers, body) = call(&url, &[], &request).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(headers.get("engram-memory").is_none());
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["choices"][0]["message"]["content"], "Green tea, as every morning.");
    let sent = llm.calls_matching(&Match::any().system_contains("Be brief"));
    assert_eq!(sent.len(), 1);
    let up = &sent[0];
    assert_eq!(up.api_key(), Some(UPSTREAM_KEY), "engram's key never goes upstream");
    let system = up.body["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("Be brief."), "{system}");
    assert!(system.contains("The user drinks green tea every morning."), "{system}");
    for field in ["tools", "response_format", "some_future_field", "n", "user", "model"] {
        assert_eq!(up.body[field], request[field], "{field}");
    }
    assert_eq!(up.body["messages"][1], request["messages"][1]);

    // Streaming: the client gets the upstream's events, event for event.
    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    streamed["messages"][1]["content"] = json!("I am trying oolong today, what goes with it?");
    let (st, headers, through) = call(&url, &[], &streamed).await;
    assert_eq!(st, StatusCode::OK, "{through}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let direct = llm.url("/v1/chat/completions");
    let (_, _, straight) =
        call(&direct, &[("authorization", &format!("Bearer {UPSTREAM_KEY}"))], &streamed).await;
    assert_eq!(events(&through), events(&straight));
    assert!(events(&through).len() > 4);

    // The turns were appended; the second one's fact is extracted as for any append.
    let facts = wait_for_facts(&s, "alice", 2).await;
    assert!(facts.contains(&"The user is trying oolong tea.".to_string()), "{facts:?}");
    let (_, msgs) = s.get("/v1/conversations/proxy:alice:-/messages").await;
    let texts: Vec<(&str, &str)> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        texts,
        [
            ("user", "What should I drink this morning?"),
            ("assistant", "Green tea, as every morning."),
            ("user", "I am trying oolong today, what goes with it?"),
            ("assistant", "Green tea, as every morning."),
        ]
    );

    // GET /v1/models and /v1/models/{id} are passed through.
    let (st, models) = s.get("/v1/models").await;
    assert_eq!((st, &models["data"][0]["id"]), (StatusCode::OK, &json!("scripted")));
    let (st, model) = s.get("/v1/models/scripted").await;
    assert_eq!((st, &model["id"]), (StatusCode::OK, &json!("scripted")));
    let (st, missing) = s.get("/v1/models/gpt-none").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{missing}");
    assert!(missing["error"]["message"].as_str().unwrap().contains("gpt-none"), "{missing}");

    // A pasted document longer than a search query may be: the call still goes through,
    // with memory (the query is the message's end), not a 413.
    let pasted = format!("{}\nWhat should I drink with it?", "Quarterly figures. ".repeat(600));
    let long = json!({ "model": "gpt-test", "user": "alice",
        "messages": [{ "role": "system", "content": "Be brief." }, { "role": "user", "content": pasted }] });
    let (st, headers, body) = call(&url, &[("x-engram-conversation-id", "report-1")], &long).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(headers.get("engram-memory").is_none(), "with memory");
    let sent = llm.calls_matching(&Match::any().user_contains("Quarterly figures"));
    let system = sent[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("The user drinks green tea every morning."), "{system}");
    // The turn is kept whole: the document as consecutive messages within the limit.
    let mut saved = json!(null);
    for _ in 0..100 {
        (_, saved) = s.get("/v1/conversations/report-1/messages").await;
        if saved["messages"].as_array().is_some_and(|m| m.len() == 3) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let saved = saved["messages"].as_array().unwrap();
    assert_eq!(saved.len(), 3, "{saved:?}");
    let user: String = saved[..2].iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(user, pasted);
    assert_eq!(
        (&saved[1]["role"], &saved[1]["metadata"]),
        (&json!("user"), &json!({ "part": 2, "parts": 2 }))
    );
    assert_eq!(saved[2]["content"], "Green tea, as every morning.");
}

async fn the_proxy_keeps_users_apart_and_passes_upstream_faults(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("ok"));
    // Tried first (newest first): extraction finds nothing in these turns.
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    let admin = create_key(&db, &["--tenant", "acme", "--role", "admin"]);
    let bob = create_key(&db, &["--tenant", "acme", "--role", "user", "--user", "bob"]);
    let s = start(&db, &llm, &["--proxy-timeout-secs", "1"]);
    let (st, _) = s
        .with_key(&admin)
        .post("/v1/memories", json!({ "content": "The user's PIN is 4921.", "user_id": "alice" }))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let url = format!("{}/v1/chat/completions", s.base);
    let ask = |user: &str| json!({ "model": "m", "user": user, "messages": [{ "role": "user", "content": "my PIN?" }] });
    let bearer = |k: &str| format!("Bearer {k}");

    // Bob's key cannot reach alice's facts, by header or by the `user` field.
    let before = llm.request_count();
    for (headers, body) in [
        (
            vec![("authorization", bearer(&bob)), ("x-engram-user-id", "alice".to_string())],
            ask("bob"),
        ),
        (vec![("authorization", bearer(&bob))], ask("alice")),
    ] {
        let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (st, _, body) = call(&url, &h, &body).await;
        assert_eq!(st, StatusCode::FORBIDDEN, "{body}");
        assert!(!body.contains("4921"), "{body}");
    }
    assert_eq!(llm.request_count(), before, "nothing went upstream");
    // His own call goes through, without her facts; no key at all is refused.
    let (st, _, _) = call(&url, &[("authorization", &bearer(&bob))], &ask("bob")).await;
    assert_eq!(st, StatusCode::OK);
    let last = llm.requests().pop().unwrap();
    assert!(!last.full_text().contains("4921"), "{}", last.full_text());
    assert_eq!(call(&url, &[], &ask("bob")).await.0, StatusCode::UNAUTHORIZED);
    // No user named by an admin key: a clear 400.
    let mut nobody = ask("x");
    nobody.as_object_mut().unwrap().remove("user");
    let (st, _, body) = call(&url, &[("authorization", &bearer(&admin))], &nobody).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("x-engram-user-id"), "{body}");

    // Upstream errors reach the client as the upstream sent them.
    let limited = llm.on(Rule::user_contains("limit me").status(429).retry_after(7).times(1));
    let failing =
        llm.on(Rule::user_contains("break").status(500).message("upstream broke").times(1));
    let slow = llm.on(Rule::user_contains("slowly").reply("late").delay(Duration::from_secs(3)));
    let with =
        |text: &str| json!({ "model": "m", "messages": [{ "role": "user", "content": text }] });
    let auth = [("authorization", bearer(&admin)), ("x-engram-user-id", "alice".to_string())];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let (st, h, body) = call(&url, &auth, &with("limit me")).await;
    assert_eq!(
        (st, h.get("retry-after").map(|v| v.to_str().unwrap())),
        (StatusCode::TOO_MANY_REQUESTS, Some("7"))
    );
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"]["code"], "rate_limit_exceeded", "the upstream's own body: {body}");
    let (st, _, body) = call(&url, &auth, &with("break")).await;
    assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["message"], "upstream broke");
    let (st, _, body) = call(&url, &auth, &with("slowly")).await;
    assert_eq!(st, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["code"], "upstream_timeout");
    assert_eq!((limited.hits(), failing.hits(), slow.hits()), (1, 1, 1));

    // The operator sees each outcome per route on /metrics.
    let (st, metrics) = s.with_key(&admin).get("/metrics").await;
    assert_eq!(st, StatusCode::OK);
    let metrics = metrics.as_str().unwrap().to_string();
    let route = r#"method="POST",route="/v1/chat/completions""#;
    for (status, n) in [(200, 1), (400, 1), (401, 1), (403, 2), (429, 1), (500, 1), (504, 1)] {
        let line = format!("engram_http_requests_total{{{route},status=\"{status}\"}} {n}\n");
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }
    assert!(
        metrics.contains(&format!("engram_http_request_seconds_count{{{route}}} 8\n")),
        "{metrics}"
    );

    // Bob cannot start the proxy's conversation of carol (it would silently keep the proxy
    // from saving her turns); carol's proxied turns are saved in it.
    let (st, b) = s
        .with_key(&bob)
        .post(
            "/v1/conversations/proxy:carol:-/messages",
            json!({ "user_id": "bob", "messages": [{ "role": "user", "content": "mine now" }] }),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("proxy:<user>:<agent>"), "{b}");
    let carol = [("authorization", bearer(&admin)), ("x-engram-user-id", "carol".to_string())];
    let carol: Vec<(&str, &str)> = carol.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(call(&url, &carol, &with("hello from carol")).await.0, StatusCode::OK);
    let mut saved = Value::Null;
    for _ in 0..100 {
        saved = s.with_key(&admin).get("/v1/conversations/proxy:carol:-/messages").await.1;
        if saved["messages"].as_array().is_some_and(|m| m.len() == 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(saved["messages"][0]["content"], "hello from carol", "{saved}");
    assert_eq!(saved["messages"][0]["user_id"], "carol", "{saved}");

    // A conversation of another user is refused before the upstream is called (its turn
    // could not be saved there).
    let (st, b) = s
        .with_key(&bob)
        .post(
            "/v1/conversations/bob-notes/messages",
            json!({ "user_id": "bob", "messages": [{ "role": "user", "content": "private" }] }),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let mut theirs = carol.clone();
    theirs.push(("x-engram-conversation-id", "bob-notes"));
    let (st, _, body) = call(&url, &theirs, &with("adding to bob's")).await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("belongs to another user") && !body.contains("private"), "{body}");
    let called = llm.calls_matching(&Match::any().user_contains("adding to bob's"));
    assert!(called.is_empty(), "the upstream was not called");

    // A body over the server's limit is refused in engram's error format on both routes.
    let huge = with(&"x".repeat(5 * 1024 * 1024));
    for route in ["/v1/chat/completions", "/v1/messages"] {
        let (st, _, body) = call(&format!("{}{route}", s.base), &carol, &huge).await;
        assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{route}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{route}: {body}"));
        assert_eq!(e["error"]["code"], "payload_too_large", "{route}: {body}");
        assert!(body.contains("limit of 4194304 bytes (--max-body-bytes)"), "{route}: {body}");
    }
}

async fn the_anthropic_proxy_adds_memory_and_streams_events(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.require_api_key(UPSTREAM_KEY);
    llm.set_default(Rule::system_contains(EXTRACT).reply("[]"));
    llm.on(Rule::system_contains("You help").reply("Mysuru it is: enjoy the new home."));
    let key = create_key(&db, &["--tenant", "acme", "--role", "admin"]);
    let s = start(&db, &llm, &[]);
    let (st, _) = s
        .with_key(&key)
        .post("/v1/memories", json!({ "content": "The user moved to Mysuru.", "user_id": "carol" }))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let url = format!("{}/v1/messages", s.base);
    // As the Anthropic SDK sends it: the key as x-api-key, the user in metadata.
    let headers = [("x-api-key", key.as_str()), ("anthropic-version", "2023-06-01")];
    let request = json!({ "model": "claude-test", "max_tokens": 200,
        "system": [{ "type": "text", "text": "You help with travel." }],
        "metadata": { "user_id": "carol" },
        "messages": [{ "role": "user", "content": "Where do I live now?" }] });
    let (st, _, body) = call(&url, &headers, &request).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["content"][0]["text"], "Mysuru it is: enjoy the new home.");
    let up = llm.calls_matching(&Match::any().system_contains("You help")).pop().unwrap();
    assert_eq!(up.api_key(), Some(UPSTREAM_KEY));
    assert_eq!(up.body["system"][0], request["system"][0]);
    assert!(up.system.contains("The user moved to Mysuru."), "{}", up.system);

    let mut streamed = request.clone();
    streamed["stream"] = json!(true);
    let (st, h, through) = call(&url, &headers, &streamed).await;
    assert_eq!((st, &h["content-type"]), (StatusCode::OK, &"text/event-stream".parse().unwrap()));
    let direct = [("x-api-key", UPSTREAM_KEY), ("anthropic-version", "2023-06-01")];
    let (_, _, straight) = call(&llm.url("/v1/messages"), &direct, &streamed).await;
    assert_eq!(events(&through), events(&straight));
    assert!(through.contains("event: message_stop"));

    // Both turns appended to carol's proxy conversation.
    for _ in 0..2400 {
        let (_, msgs) = s.with_key(&key).get("/v1/conversations/proxy:carol:-/messages").await;
        if msgs["messages"].as_array().is_some_and(|m| m.len() == 4) {
            assert_eq!(msgs["messages"][3]["content"], "Mysuru it is: enjoy the new home.");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the proxied turns were not appended");
}

/// An upstream that refuses connections is a 502 `upstream_unavailable` in engram's error
/// format, whose message names no address; nothing is appended.
async fn an_unreachable_upstream_is_a_502(backend: Backend) {
    let db = Db::new(backend).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let upstream = format!("http://127.0.0.1:{port}");
    let s = db.serve(&["--proxy-openai-url", &upstream]);
    let ask = json!({ "model": "m", "user": "alice",
        "messages": [{ "role": "user", "content": "hello" }] });
    let (st, _, body) = call(&format!("{}/v1/chat/completions", s.base), &[], &ask).await;
    assert_eq!(st, StatusCode::BAD_GATEWAY, "{body}");
    let err: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"]["code"], "upstream_unavailable", "{body}");
    assert!(!body.contains(&port.to_string()), "the upstream's address leaked: {body}");
    assert_eq!(s.get("/v1/models").await.0, StatusCode::BAD_GATEWAY);
    let (st, _) = s.get("/v1/conversations/proxy:alice:-/messages").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "nothing appended");
}

/// The official SDKs (`openai`, `anthropic` from PyPI, in the venv of `scripts/sdk-venv.sh`,
/// named by `ENGRAM_SDK_PYTHON`) run `scripts/sdk/check.py`, the README's snippets: answers,
/// streams, `models.list()`, and upstream errors raised as the SDKs' own exceptions.
async fn the_official_sdks_work_through_the_proxy(backend: Backend) {
    #[allow(clippy::disallowed_methods)] // tests read their fixture location from the environment
    let python = std::env::var("ENGRAM_SDK_PYTHON").unwrap_or_else(|_| {
        panic!(
            "ENGRAM_SDK_PYTHON is not set: run `bash scripts/sdk-venv.sh` and export its last line"
        )
    });
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.require_api_key(UPSTREAM_KEY);
    llm.on(Rule::any().reply("unused"));
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    llm.on(Rule::system_contains("Be brief").reply("Green tea, as every morning."));
    llm.on(Rule::system_contains("You help").reply("In Mysuru, since last week."));
    llm.on(Rule::user_contains("limit me").status(429).retry_after(3));
    llm.on(Rule::user_contains("break").status(500).message("upstream broke"));
    let key = create_key(&db, &["--tenant", "acme", "--role", "admin"]);
    let s = start(&db, &llm, &[]);
    for fact in ["The user drinks green tea every morning.", "The user moved to Mysuru."] {
        let (st, _) = s
            .with_key(&key)
            .post("/v1/memories", json!({ "content": fact, "user_id": "alice" }))
            .await;
        assert_eq!(st, StatusCode::CREATED);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/sdk/check.py");
    // Blocking is fine: the server and the scripted LLM run outside this test's runtime.
    let out = std::process::Command::new(&python)
        .arg(script)
        .env("ENGRAM_URL", &s.base)
        .env("ENGRAM_KEY", &key)
        .output_bounded()
        .expect("run the SDK script");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the SDK script failed:\n{stderr}");
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["openai"], "Green tea, as every morning.");
    assert_eq!(got["openai_stream"], "Green tea, as every morning.");
    assert!(got["openai_stream_chunks"].as_u64().unwrap() > 1, "{got}");
    assert_eq!(got["models"], json!(["scripted"]));
    assert_eq!(got["openai_429"], json!({ "status": 429, "retry_after": "3" }));
    assert_eq!(got["anthropic"], "In Mysuru, since last week.");
    assert_eq!(got["anthropic_stream"], "In Mysuru, since last week.");
    assert_eq!(got["anthropic_500"], json!({ "status": 500, "message": "upstream broke" }));
    // Every chat call that reached the upstream carried alice's facts.
    for (system, fact) in [("Be brief", "green tea"), ("You help", "Mysuru")] {
        let calls = llm.calls_matching(&Match::any().system_contains(system));
        assert_eq!(calls.len(), 2, "{system}");
        assert!(calls.iter().all(|c| c.system.contains(fact)), "{system}: {calls:?}");
        assert!(calls.iter().all(|c| c.api_key() == Some(UPSTREAM_KEY)));
    }
}

/// Images (OpenAI `image_url` parts, Anthropic `image` blocks) reach the upstream as sent;
/// the turn appended is the message's text, and the facts come from that text.
async fn images_pass_through_untouched(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.set_default(Rule::system_contains(EXTRACT).reply("[]"));
    llm.on(Rule::system_contains("Look closely").reply("A small red boat."));
    let s = start(&db, &llm, &[]);
    let (st, _) = s
        .post("/v1/memories", json!({ "content": "The user sails on weekends.", "user_id": "dan" }))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
    let openai_user = json!({ "role": "user", "content": [
        { "type": "text", "text": "What boat is in this picture?" },
        { "type": "image_url", "image_url": { "url": format!("data:image/png;base64,{png}"), "detail": "low" } },
    ] });
    let anthropic_user = json!({ "role": "user", "content": [
        { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": png } },
        { "type": "text", "text": "Which sail does the boat have?" },
    ] });
    let (st, _, body) = call(
        &format!("{}/v1/chat/completions", s.base),
        &[("x-engram-conversation-id", "pics")],
        &json!({ "model": "gpt-test", "user": "dan",
            "messages": [{ "role": "system", "content": "Look closely." }, openai_user] }),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let (st, _, body) = call(
        &format!("{}/v1/messages", s.base),
        &[("anthropic-version", "2023-06-01"), ("x-engram-conversation-id", "pics")],
        &json!({ "model": "claude-test", "max_tokens": 100, "system": "Look closely.",
            "metadata": { "user_id": "dan" }, "messages": [anthropic_user] }),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let sent = llm.calls_matching(&Match::any().system_contains("Look closely"));
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["messages"][1], openai_user, "the image part as sent");
    assert_eq!(sent[1].body["messages"][0], anthropic_user, "the image block as sent");
    assert!(sent.iter().all(|c| c.system.contains("The user sails on weekends.")));
    let mut said = Vec::new();
    for _ in 0..2400 {
        let (_, msgs) = s.get("/v1/conversations/pics/messages").await;
        said = msgs["messages"].as_array().unwrap().iter().map(|m| m["content"].clone()).collect();
        if said.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        said,
        [
            json!("What boat is in this picture?"),
            json!("A small red boat."),
            json!("Which sail does the boat have?"),
            json!("A small red boat."),
        ]
    );
}

/// The system prompt of the upstream's last chat call (not extraction's), if it has one.
fn last_system(llm: &ScriptedLlm, marker: &str) -> Option<String> {
    let call = llm.calls_matching(&Match::any().user_contains(marker)).pop()?;
    let first = &call.body["messages"][0];
    (first["role"] == "system").then(|| first["content"].as_str().unwrap_or_default().to_string())
}

/// The messages of a conversation once it holds `n` (the proxy appends after answering).
async fn saved(s: &Server, conversation: &str, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    for _ in 0..400 {
        let (_, b) = s.get(&format!("/v1/conversations/{conversation}/messages")).await;
        got = b["messages"].as_array().cloned().unwrap_or_default();
        if got.len() >= n {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{conversation} holds {} messages, not {n}: {got:?}", got.len());
}

/// The block follows its conversation (the default one of a client that names none): a
/// fact learned after the conversation began reaches it once a question makes it relevant;
/// the system prompt stays byte for byte the same while nothing new is relevant; facts
/// unrelated to the questions stay out, and with none relevant there is no block at all;
/// the client's own messages are not repeated in it.
async fn the_proxy_block_follows_the_conversation(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("Noted."));
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    let s = start(&db, &llm, &[]);
    for fact in [
        "The user drinks green tea every morning.",
        "The user's cousin collects stamps from Peru.",
        "The user repaired a vintage motorcycle last winter.",
    ] {
        let (st, b) = s.post("/v1/memories", json!({ "content": fact, "user_id": "dana" })).await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
    }
    // More facts than the proxy's budget holds: only the relevant ones go in.
    let many: Vec<Value> = (0..100)
        .map(|i| json!({ "content": format!("The user visited lighthouse number {i} on the northern coast."), "user_id": "dana" }))
        .collect();
    let (st, b) = s.post("/v1/memories/batch", json!({ "memories": many, "dedup": false })).await;
    assert!(st.is_success(), "{b}");
    let url = format!("{}/v1/chat/completions", s.base);
    let mut history: Vec<Value> = Vec::new();
    let ask = async |history: &mut Vec<Value>, user: &str, text: &str| {
        history.push(json!({ "role": "user", "content": text }));
        let body = json!({ "model": "m", "user": user, "messages": history });
        let (st, _, b) = call(&url, &[], &body).await;
        assert_eq!(st, StatusCode::OK, "{b}");
        history.push(json!({ "role": "assistant", "content": "Noted." }));
        last_system(&llm, text)
    };
    let first = ask(&mut history, "dana", "Which tea should I drink this morning?").await.unwrap();
    assert!(first.contains("green tea"), "{first}");
    assert!(!first.contains("stamps") && !first.contains("motorcycle"), "unrelated: {first}");
    let second = ask(&mut history, "dana", "And tomorrow morning, tea again?").await.unwrap();
    assert_eq!(second, first, "the system prompt changed with nothing new to say");
    assert!(!second.contains("Recent messages") && !second.contains("Noted."), "{second}");

    // Learned after the conversation began: in the block once a question is about it.
    let (st, _) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user is allergic to peanuts.", "user_id": "dana" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let third =
        ask(&mut history, "dana", "Can you suggest a snack without peanuts?").await.unwrap();
    assert!(third.contains("allergic to peanuts"), "{third}");
    assert!(third.contains("green tea"), "what the conversation had is kept: {third}");
    // ... in its place: the new fact comes after it, so a prompt cache keeps the prefix.
    assert!(third.starts_with(&first), "{third}");
    let fourth = ask(&mut history, "dana", "Another snack without peanuts, please?").await.unwrap();
    assert_eq!(fourth, third);

    // Forgetting a fact of the block takes that fact out, and only that one.
    let (_, list) = s.get("/v1/memories?user_id=dana").await;
    let peanuts = list["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"].as_str().unwrap().contains("peanuts"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, _) = s.req("DELETE", &format!("/v1/memories/{peanuts}"), None).await;
    assert_eq!(st, StatusCode::OK);
    let fifth = ask(&mut history, "dana", "Tell me a joke.").await.unwrap();
    assert!(fifth.contains("green tea") && !fifth.contains("peanuts"), "{fifth}");

    // A turn without text (an image alone) starts no block of every fact.
    let image = json!({ "model": "m", "user": "dana", "messages": [{ "role": "user", "content": [
        { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } }] }] });
    let (st, _, b) = call(&url, &[("x-engram-conversation-id", "pictures")], &image).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let sent = llm
        .requests()
        .into_iter()
        .rev()
        .map(|r| r.body.to_string())
        .find(|b| b.contains("iVBORw0KGgo"))
        .unwrap();
    assert!(!sent.contains("Known facts"), "{sent}");

    // Nothing relevant in a new conversation: no block, no empty header.
    let france = json!({ "model": "m", "user": "dana",
        "messages": [{ "role": "user", "content": "What is the capital of France?" }] });
    let (st, _, b) = call(&url, &[("x-engram-conversation-id", "geo")], &france).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(last_system(&llm, "capital of France"), None, "a system prompt was added");
    let sent = llm.calls_matching(&Match::any().user_contains("capital of France")).pop().unwrap();
    assert!(!sent.full_text().contains("Known facts"), "{}", sent.full_text());

    // A user whose facts fit the budget gets them all, whatever the question: the allergy
    // matters to "What should I cook tonight?" without a word in common.
    let (st, _) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user is allergic to shellfish.", "user_id": "erin" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let cook = json!({ "model": "m", "user": "erin",
        "messages": [{ "role": "user", "content": "What should I cook tonight?" }] });
    assert_eq!(call(&url, &[], &cook).await.0, StatusCode::OK);
    let system = last_system(&llm, "cook tonight").unwrap_or_default();
    assert!(system.contains("allergic to shellfish"), "{system}");
}

/// An agent's tool loop is saved once: the user's question with the first call, the tool's
/// call and result with the call that sends the result back, then the answer (OpenAI and
/// Anthropic). A streamed step that only calls a tool still saves the question; an answer
/// cut by the output limit is marked; a stream that ends with an error event saves nothing.
async fn the_proxy_saves_tool_loops_once_and_marks_cut_answers(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("It is 4 °C and raining in Oslo."));
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    let call_tool = r#"{"id":"x1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}"#;
    llm.on(Rule::user_contains("Weather in Oslo?").raw(200, call_tool).times(1));
    let s = start(&db, &llm, &[]);
    let url = format!("{}/v1/chat/completions", s.base);
    let conv = |c: &'static str| {
        [
            ("x-engram-user-id", "finn"),
            ("x-engram-conversation-id", c),
            ("anthropic-version", "2023-06-01"),
        ]
    };
    let mut messages = vec![json!({ "role": "user", "content": "Weather in Oslo?" })];
    let (st, _, first) =
        call(&url, &conv("trip-1"), &json!({ "model": "m", "messages": messages })).await;
    assert_eq!(st, StatusCode::OK, "{first}");
    let first: Value = serde_json::from_str(&first).unwrap();
    messages.push(first["choices"][0]["message"].clone());
    messages.push(json!({ "role": "tool", "tool_call_id": "c1", "content": "4 °C, rain" }));
    let (st, _, b) =
        call(&url, &conv("trip-1"), &json!({ "model": "m", "messages": messages })).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let got = saved(&s, "trip-1", 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got_again = saved(&s, "trip-1", 3).await;
    assert_eq!(got_again.len(), 3, "the question was saved twice: {got_again:?}");
    assert_eq!((&got[0]["role"], &got[0]["content"]), (&json!("user"), &json!("Weather in Oslo?")));
    assert_eq!(got[1]["role"], "tool");
    assert_eq!(got[1]["tool_name"], "weather");
    assert_eq!(got[1]["tool_args"], json!({ "city": "Oslo" }));
    assert_eq!(got[1]["tool_result"], "4 °C, rain");
    assert_eq!(got[2]["content"], "It is 4 °C and raining in Oslo.");
    // A loop whose first call engram never saw (a client that turned the proxy on midway):
    // its question is saved before the tool rows (found by a tester: it was lost).
    let (st, _, b) =
        call(&url, &conv("trip-1b"), &json!({ "model": "m", "messages": messages })).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let got = saved(&s, "trip-1b", 3).await;
    let roles: Vec<&str> = got.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "tool", "assistant"], "{got:?}");
    assert_eq!(got[0]["content"], "Weather in Oslo?");

    // Anthropic: the result comes back as a user message of tool_result blocks.
    let anthropic = format!("{}/v1/messages", s.base);
    let body = json!({ "model": "c", "max_tokens": 100, "messages": [
        { "role": "user", "content": "Weather in Bergen?" },
        { "role": "assistant", "content": [{ "type": "tool_use", "id": "t1", "name": "weather",
            "input": { "city": "Bergen" } }] },
        { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t1",
            "content": "9 °C, wind" }] }] });
    let (st, _, b) = call(&anthropic, &conv("trip-2"), &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let got = saved(&s, "trip-2", 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        (&got[0]["role"], &got[0]["content"]),
        (&json!("user"), &json!("Weather in Bergen?"))
    );
    assert_eq!(
        (&got[1]["tool_name"], &got[1]["tool_result"]),
        (&json!("weather"), &json!("9 °C, wind"))
    );
    assert_eq!(got[1]["tool_args"], json!({ "city": "Bergen" }));
    assert_eq!(got[2]["role"], "assistant");

    // A streamed step that only calls a tool: the question is saved.
    let sse_tool = "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{}\"}}]}}]}\n\n\
                    data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    llm.on(Rule::user_contains("Weather in Tromsø?").raw(200, sse_tool).times(1));
    let body = json!({ "model": "m", "stream": true,
        "messages": [{ "role": "user", "content": "Weather in Tromsø?" }] });
    let (st, _, b) = call(&url, &conv("trip-3"), &body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let got = saved(&s, "trip-3", 1).await;
    assert_eq!(got[0]["content"], "Weather in Tromsø?");

    // Cut by the output limit: saved, and marked.
    let cut = r#"{"id":"x2","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The history of Oslo begins"},"finish_reason":"length"}]}"#;
    llm.on(Rule::user_contains("history of Oslo").raw(200, cut).times(1));
    let body = json!({ "model": "m", "messages": [{ "role": "user", "content": "Tell me the history of Oslo." }] });
    assert_eq!(call(&url, &conv("trip-4"), &body).await.0, StatusCode::OK);
    let got = saved(&s, "trip-4", 2).await;
    assert_eq!(got[1]["content"], "The history of Oslo begins");
    assert_eq!(got[1]["metadata"], json!({ "truncated": true }));

    // A stream that breaks off with an error event: nothing saved (the client retries).
    let broken = "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Half an ans\"}}]}\n\n\
                  data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\ndata: [DONE]\n\n";
    llm.on(Rule::user_contains("first try").raw(200, broken).times(1));
    let body = |t: &str| json!({ "model": "m", "stream": true, "messages": [{ "role": "user", "content": t }] });
    assert_eq!(call(&url, &conv("trip-5"), &body("first try")).await.0, StatusCode::OK);
    assert_eq!(call(&url, &conv("trip-5"), &body("second try")).await.0, StatusCode::OK);
    let got = saved(&s, "trip-5", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = saved(&s, "trip-5", got.len()).await;
    let texts: Vec<&str> = got.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(texts, ["second try", "It is 4 °C and raining in Oslo."]);

    // A request that asks nothing (a system prompt alone) is answered, and its answer alone
    // is not saved as a turn (found by a tester: a lone assistant message).
    let body = json!({ "model": "m", "messages": [{ "role": "system", "content": "Say hi." }] });
    assert_eq!(call(&url, &conv("trip-6"), &body).await.0, StatusCode::OK);
    let body = json!({ "model": "m", "messages": [{ "role": "user", "content": "Marker." }] });
    assert_eq!(call(&url, &conv("trip-6"), &body).await.0, StatusCode::OK);
    let got = saved(&s, "trip-6", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = saved(&s, "trip-6", got.len()).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["content"], "Marker.");

    // A compressed body is named as such, not "not JSON".
    let r = reqwest::Client::new()
        .post(&url)
        .header("x-engram-user-id", "finn")
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(vec![0x1f, 0x8b, 0x08, 0x00])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("Content-Encoding 'gzip'"));
}

/// A store that does not answer (a long write lock on SQLite, a table lock on PostgreSQL)
/// does not hold a proxied call for the store's own timeouts: after the proxy's memory
/// deadline the call goes through without memory and says so.
async fn a_locked_store_does_not_hold_a_proxied_call(backend: Backend) {
    use sqlx::Connection;
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("Hello."));
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    let s = start(&db, &llm, &[]);
    let (st, _) = s
        .post("/v1/memories", json!({ "content": "The user likes jazz.", "user_id": "gus" }))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    // Held until the end of the test.
    let mut lock: Box<dyn std::any::Any> = match db.url() {
        None => {
            let url = format!("sqlite://{}", db.dir().join("engram.db").display());
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query("BEGIN IMMEDIATE").execute(&mut c).await.unwrap();
            Box::new(c)
        }
        Some(url) => {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::query("BEGIN").execute(&mut c).await.unwrap();
            sqlx::query("LOCK TABLE context_sessions, conversations IN ACCESS EXCLUSIVE MODE")
                .execute(&mut c)
                .await
                .unwrap();
            Box::new(c)
        }
    };
    let body = json!({ "model": "m", "user": "gus",
        "messages": [{ "role": "user", "content": "Play me some jazz?" }] });
    let started = std::time::Instant::now();
    let (st, h, b) = call(&format!("{}/v1/chat/completions", s.base), &[], &body).await;
    let took = started.elapsed();
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(h["engram-memory"], "unavailable");
    // The store's own waits are 10 s (SQLite's busy timeout) or unbounded (a PostgreSQL lock).
    assert!(took < Duration::from_secs(8), "the call waited {took:?}");
    drop(std::mem::replace(&mut lock, Box::new(())));
}

/// A turn answered while the server is stopping is still saved: SIGTERM waits for it.
async fn a_turn_answered_during_a_stop_is_saved(backend: Backend) {
    let db = Db::new(backend).await;
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("Slowly, but here.").delay(Duration::from_secs(2)));
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    let mut s = start(&db, &llm, &[]);
    let url = format!("{}/v1/chat/completions", s.base);
    let body = json!({ "model": "m", "user": "ivy", "messages": [{ "role": "user", "content": "Are you there?" }] });
    let asked = tokio::spawn(async move {
        call(&url, &[("x-engram-conversation-id", "stopping")], &body).await.0
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(s.terminate_async().await, "engram serve exits cleanly");
    assert_eq!(asked.await.unwrap(), StatusCode::OK);
    drop(s);
    let s = start(&db, &llm, &[]);
    let got = saved(&s, "stopping", 2).await;
    assert_eq!(got[1]["content"], "Slowly, but here.");
}

on_both_backends!(
    the_openai_proxy_adds_memory_and_passes_everything_else,
    the_proxy_keeps_users_apart_and_passes_upstream_faults,
    the_anthropic_proxy_adds_memory_and_streams_events,
    the_official_sdks_work_through_the_proxy,
    an_unreachable_upstream_is_a_502,
    images_pass_through_untouched,
    the_proxy_block_follows_the_conversation,
    the_proxy_saves_tool_loops_once_and_marks_cut_answers,
    a_locked_store_does_not_hold_a_proxied_call,
    a_turn_answered_during_a_stop_is_saved,
);
