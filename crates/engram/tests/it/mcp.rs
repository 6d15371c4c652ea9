//! MCP (SPEC §4), end to end: JSON-RPC over streamable HTTP to a real `engram serve` at
//! `/mcp` (handshake, the eight tools, tool errors, the REST API's keys, roles and tenants),
//! and over the stdin/stdout of a real `engram mcp` child process.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Db, Server, create_key};

const PROTOCOL: &str = "2025-06-18";

/// An MCP client over streamable HTTP (SSE-framed answers), with one session.
pub(crate) struct Mcp {
    url: String,
    key: Option<String>,
    client: reqwest::Client,
    session: Option<String>,
    next_id: i64,
}

impl Mcp {
    pub(crate) fn new(base: &str, key: Option<&str>) -> Mcp {
        Mcp {
            url: format!("{base}/mcp"),
            key: key.map(str::to_string),
            client: reqwest::Client::new(),
            session: None,
            next_id: 1,
        }
    }

    /// POST one JSON-RPC message; returns the status, the headers and the body as sent.
    pub(crate) async fn post(
        &self,
        msg: &Value,
    ) -> (StatusCode, reqwest::header::HeaderMap, String) {
        let mut r = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(msg);
        if let Some(k) = &self.key {
            r = r.bearer_auth(k);
        }
        if let Some(s) = &self.session {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", PROTOCOL);
        }
        let resp = tokio::time::timeout(Duration::from_secs(120), r.send())
            .await
            .expect("MCP request timed out")
            .expect("MCP request");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = tokio::time::timeout(Duration::from_secs(120), resp.text())
            .await
            .expect("MCP answer timed out")
            .expect("MCP body");
        (status, headers, body)
    }

    /// A request; returns the JSON-RPC message that answers it (result or error).
    pub(crate) async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let (status, headers, body) = self
            .post(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        assert_eq!(status, StatusCode::OK, "{method}: {body}");
        if let Some(s) = headers.get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap().to_string());
        }
        answer_in(&body, id).unwrap_or_else(|| panic!("{method}: no answer to id {id} in {body}"))
    }

    /// initialize + notifications/initialized; returns the initialize result.
    pub(crate) async fn connect(&mut self) -> Value {
        let init = self
            .request(
                "initialize",
                json!({ "protocolVersion": PROTOCOL, "capabilities": {},
                        "clientInfo": { "name": "engram-it", "version": "1" } }),
            )
            .await;
        assert!(self.session.is_some(), "initialize gives a session id");
        let (status, _, body) =
            self.post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "initialized: {body}");
        init["result"].clone()
    }

    /// tools/call; returns the result (`content`, `structuredContent`, `isError`).
    pub(crate) async fn call(&mut self, tool: &str, args: Value) -> Value {
        let a = self.request("tools/call", json!({ "name": tool, "arguments": args })).await;
        assert!(a.get("error").is_none(), "{tool}: protocol error {a}");
        a["result"].clone()
    }

    /// A call that must succeed; returns its structured content.
    pub(crate) async fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone()).await;
        assert_eq!(r["isError"], false, "{tool} {args} failed: {r}");
        let text = r["content"][0]["text"].as_str().expect("a text content");
        assert!(!text.is_empty());
        r["structuredContent"].clone()
    }
}

/// The JSON-RPC message with `id` in an SSE stream (`data: {...}` lines) or a JSON body.
fn answer_in(body: &str, id: i64) -> Option<Value> {
    let is_it = |v: &Value| v["id"] == id;
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return is_it(&v).then_some(v);
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(is_it)
}

/// Assert a tool error with the engine's code, in the text and in the structured content.
#[track_caller]
pub(crate) fn assert_tool_error(r: &Value, code: &str) {
    assert_eq!(r["isError"], true, "expected a tool error {code}: {r}");
    assert_eq!(r["structuredContent"]["error"]["code"], code, "{r}");
    let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["error"]["code"], code, "{r}");
    assert!(text["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
}

fn contents_of(results: &Value) -> Vec<String> {
    results
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|r| r["memory"]["content"].as_str().or(r["content"].as_str()))
        .map(str::to_string)
        .collect()
}

const TOOLS: [&str; 12] = [
    "remember",
    "recall",
    "forget",
    "list_memories",
    "relate",
    "memory_search",
    "memory_browse",
    "memory_stats",
    "working_memory_set",
    "working_memory_get",
    "working_memory_delete",
    "working_memory_list",
];

async fn mcp_http_tools_end_to_end(backend: Backend) {
    let s = Server::on(backend).await;
    let mut m = Mcp::new(&s.base, None);
    let info = m.connect().await;
    assert_eq!(info["serverInfo"]["name"], "engram");
    assert_eq!(info["protocolVersion"], PROTOCOL);
    assert!(info["capabilities"]["tools"].is_object());
    // A body that is not JSON gets JSON-RPC's parse error, as JSON.
    let raw = reqwest::Client::new()
        .post(format!("{}/mcp", s.base))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let v: Value = raw.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    // A compressed body is named as such, not as "not JSON".
    let gz = reqwest::Client::new()
        .post(format!("{}/mcp", s.base))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .header("accept", "application/json, text/event-stream")
        .body(vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0])
        .send()
        .await
        .unwrap();
    assert_eq!(gz.status(), 400);
    let v: Value = gz.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("Content-Encoding 'gzip'") && !msg.contains("not JSON"), "{v}");

    // tools/list: the eight tools, each with a description and an object schema.
    let list = m.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOLS);
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 40), "{t}");
    }
    let schema =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
    // `user_id` may be left out by a user key (its own user).
    assert_eq!(schema("remember")["required"], json!(["content"]));
    assert_eq!(schema("memory_search")["required"], json!(["query"]));
    assert!(schema("recall")["properties"]["user_id"].is_object());
    assert_eq!(schema("memory_browse")["required"], json!(["conversation_id"]));
    assert!(schema("memory_search")["properties"]["sources"].is_object());

    // remember → recall / memory_search find it.
    let r = m
        .ok("remember", json!({ "user_id": "u1", "content": "The user lives in Bengaluru.", "importance": 7, "category": "fact" }))
        .await;
    assert_eq!(r["decision"], "ADD");
    assert_eq!(r["memory"]["importance"], 7);
    let bengaluru = r["memory"]["id"].as_str().unwrap().to_string();
    let r = m
        .ok(
            "remember",
            json!({ "user_id": "u1", "content": "The user plays the cello every Sunday." }),
        )
        .await;
    assert_eq!(r["decision"], "ADD");
    // The same fact again is confirmed, not stored twice.
    let r = m
        .ok("remember", json!({ "user_id": "u1", "content": "The user lives in Bengaluru." }))
        .await;
    assert_eq!(r["decision"], "NONE");
    assert_eq!(r["memory"]["id"], bengaluru.as_str());

    let r = m
        .call("recall", json!({ "user_id": "u1", "query": "Which city is the user's home?" }))
        .await;
    assert_eq!(r["isError"], false, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("- The user lives in Bengaluru."), "{text}");
    assert!(text.contains(&bengaluru), "recall shows ids for forget: {text}");
    assert_eq!(contents_of(&r["structuredContent"]["results"])[0], "The user lives in Bengaluru.");

    let r = m.call("recall", json!({ "user_id": "u1" })).await;
    let block = r["content"][0]["text"].as_str().unwrap();
    assert!(block.starts_with("Known facts about the user:"), "{block}");
    assert!(block.contains("Bengaluru") && block.contains("cello"), "{block}");
    assert_eq!(r["structuredContent"]["memory_ids"].as_array().unwrap().len(), 2);

    let r =
        m.ok("memory_search", json!({ "user_id": "u1", "query": "cello", "explain": true })).await;
    assert_eq!(contents_of(&r["results"])[0], "The user plays the cello every Sunday.");
    assert_eq!(r["results"][0]["type"], "memory");
    assert!(r["results"][0]["explain"]["text_rank"].is_number(), "{r}");

    let r = m.ok("list_memories", json!({ "user_id": "u1" })).await;
    assert_eq!(r["memories"].as_array().unwrap().len(), 2);
    let r = m.ok("list_memories", json!({ "user_id": "u1", "category": "fact" })).await;
    assert_eq!(contents_of(&r["memories"]), ["The user lives in Bengaluru."]);
    let r = m.ok("list_memories", json!({ "user_id": "u1", "limit": 1 })).await;
    let cursor = r["next_cursor"].as_str().expect("a next page").to_string();
    let r = m.ok("list_memories", json!({ "user_id": "u1", "limit": 1, "cursor": cursor })).await;
    assert_eq!(r["memories"].as_array().unwrap().len(), 1);

    // relate: a relationship fact, found by search; and the facts related to a memory.
    let r = m
        .ok("relate", json!({ "user_id": "u1", "from": "Anna", "label": "is the sister of", "to": "the user" }))
        .await;
    assert_eq!(r["decision"], "ADD");
    assert_eq!(r["memory"]["content"], "Anna is the sister of the user.");
    assert_eq!(r["memory"]["category"], "relationship");
    assert_eq!(r["memory"]["metadata"]["relation"]["label"], "is the sister of");
    let anna = r["memory"]["id"].as_str().unwrap().to_string();
    let r = m.ok("memory_search", json!({ "user_id": "u1", "query": "Who is Anna?" })).await;
    assert_eq!(contents_of(&r["results"])[0], "Anna is the sister of the user.");
    m.ok(
        "remember",
        json!({ "user_id": "u1", "content": "Anna lives in Mysuru with her two cats." }),
    )
    .await;
    // The fact about Anna, not itself, not the cello, and not a fact that shares nothing
    // with it but "the user": what a search for it finds at the default threshold.
    let r = m.ok("relate", json!({ "memory_id": anna, "limit": 2 })).await;
    assert_eq!(r["memory"]["id"], anna.as_str());
    let related = contents_of(&r["related"]);
    assert_eq!(related, ["Anna lives in Mysuru with her two cats."], "{related:?}");
    assert!(
        !related.iter().any(|c| c.starts_with("Anna is the sister") || c.contains("cello")),
        "{related:?}"
    );
    assert_tool_error(
        &m.call("relate", json!({ "user_id": "u1", "from": "Anna" })).await,
        "invalid_input",
    );
    assert_tool_error(&m.call("relate", json!({})).await, "invalid_input");
    assert_tool_error(
        &m.call("relate", json!({ "memory_id": anna, "limit": 0 })).await,
        "invalid_input",
    );
    // A part written over several lines is one line in the fact (the block's bullets hold).
    let r = m
        .ok("relate", json!({ "user_id": "u1", "from": "Omar", "label": "is the\nbrother of", "to": "the user" }))
        .await;
    assert_eq!(r["memory"]["content"], "Omar is the brother of the user.");

    // memory_browse: a conversation appended through REST, read back through MCP.
    let (st, b) = s
        .post(
            "/v1/conversations/trip-1/messages",
            json!({ "user_id": "u1", "messages": [
                { "role": "user", "content": "We went hiking in Coorg last weekend." },
                { "role": "assistant", "content": "That sounds lovely! How was the weather?" },
                { "role": "user", "content": "Rainy, but the waterfalls were worth it." }
            ] }),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let r = m.ok("memory_browse", json!({ "conversation_id": "trip-1", "limit": 2 })).await;
    let msgs = r["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["content"], "We went hiking in Coorg last weekend.");
    let after = r["next_after"].as_i64().expect("a next page");
    let r = m.ok("memory_browse", json!({ "conversation_id": "trip-1", "after": after })).await;
    assert_eq!(r["messages"][0]["content"], "Rainy, but the waterfalls were worth it.");
    assert_eq!(r["next_after"], Value::Null);
    let r = m
        .ok(
            "memory_search",
            json!({ "user_id": "u1", "query": "hiking in Coorg", "sources": ["messages"] }),
        )
        .await;
    assert_eq!(r["results"][0]["type"], "message");
    assert_eq!(r["results"][0]["message"]["content"], "We went hiking in Coorg last weekend.");
    assert_eq!(r["results"][0]["message"]["conversation_id"], "trip-1");
    assert_tool_error(
        &m.call("memory_browse", json!({ "conversation_id": "nope" })).await,
        "not_found",
    );

    // memory_stats counts; forget removes a fact from search and recall, and stats see it.
    let r = m.ok("memory_stats", json!({})).await;
    assert_eq!(r["memories_active"], 5, "{r}");
    assert_eq!(r["messages"], 3, "{r}");
    assert_eq!(r["conversations"], 1, "{r}");
    let r = m.ok("forget", json!({ "memory_id": bengaluru })).await;
    assert_eq!(r["status"], "forgotten");
    let r = m.ok("memory_search", json!({ "user_id": "u1", "query": "Bengaluru" })).await;
    assert!(!contents_of(&r["results"]).iter().any(|c| c.contains("Bengaluru")), "{r}");
    let r = m.call("recall", json!({ "user_id": "u1" })).await;
    assert!(!r["content"][0]["text"].as_str().unwrap().contains("Bengaluru"), "{r}");
    let r = m.ok("memory_stats", json!({})).await;
    assert_eq!(r["memories_active"], 4, "{r}");
    assert_eq!(r["memories_superseded"], 1, "{r}");
    // History keeps it.
    let r = m.ok("list_memories", json!({ "user_id": "u1", "include_superseded": true })).await;
    assert_eq!(r["memories"].as_array().unwrap().len(), 5);
    assert_tool_error(&m.call("forget", json!({ "memory_id": bengaluru })).await, "conflict");

    // Bad arguments: tool errors with the engine's code, nothing stored, the session goes on.
    for (tool, args, code) in [
        ("remember", json!({ "content": "The user likes tea." }), "invalid_input"),
        ("remember", json!({ "user_id": "u1", "content": "   " }), "invalid_input"),
        (
            "remember",
            json!({ "user_id": "u1", "content": "The user likes tea.", "importance": 11 }),
            "invalid_input",
        ),
        (
            "remember",
            json!({ "user_id": "u1", "content": "The user likes tea.", "importance": "high" }),
            "invalid_input",
        ),
        (
            "remember",
            json!({ "user_id": "u1", "content": "The user likes tea.", "category": "gossip" }),
            "invalid_input",
        ),
        (
            "remember",
            json!({ "user_id": "u1", "content": "The user likes tea.", "colour": "red" }),
            "invalid_input",
        ),
        (
            "remember",
            json!({ "user_id": "u1", "content": "The user likes\u{0} tea." }),
            "invalid_input",
        ),
        ("recall", json!({ "query": "tea" }), "invalid_input"),
        ("memory_search", json!({ "user_id": "u1", "query": "" }), "invalid_input"),
        (
            "memory_search",
            json!({ "user_id": "u1", "query": "tea", "sources": ["web"] }),
            "invalid_input",
        ),
        ("memory_search", json!({ "user_id": "u1", "query": "tea", "limit": 0 }), "invalid_input"),
        ("forget", json!({ "memory_id": "not-an-id" }), "invalid_input"),
        ("forget", json!({ "memory_id": "01890a5d-ac96-774b-bcce-b302099a8057" }), "not_found"),
        ("memory_stats", json!({ "verbose": true }), "invalid_input"),
    ] {
        let r = m.call(tool, args.clone()).await;
        assert_tool_error(&r, code);
        let msg = r["structuredContent"]["error"]["message"].as_str().unwrap();
        if args.get("user_id").is_none() && tool != "forget" && tool != "memory_stats" {
            assert!(msg.contains("user_id"), "{tool} {args}: {msg}");
        }
    }
    let r = m.ok("memory_search", json!({ "user_id": "u1", "query": "tea" })).await;
    assert!(!contents_of(&r["results"]).iter().any(|c| c.contains("tea")), "nothing stored: {r}");
    // An unknown tool is a protocol error.
    let a = m.request("tools/call", json!({ "name": "teleport", "arguments": {} })).await;
    assert!(a["error"]["message"].as_str().unwrap().contains("teleport"), "{a}");
}

async fn mcp_http_keys_roles_and_tenants(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&[]);
    let admin_a = create_key(&db, &["--tenant", "acme", "--role", "admin"]);
    let alice = create_key(&db, &["--tenant", "acme", "--role", "user", "--user", "alice"]);
    let admin_b = create_key(&db, &["--tenant", "globex", "--role", "admin"]);

    // With keys in the store, no key or a wrong key is refused before any MCP message.
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": { "name": "x", "version": "1" } } });
    for key in [None, Some("engram_not_a_real_key")] {
        let (status, headers, body) = Mcp::new(&s.base, key).post(&init).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(headers["www-authenticate"], "Bearer");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "unauthorized", "{body}");
    }

    let mut a = Mcp::new(&s.base, Some(&admin_a));
    a.connect().await;
    let secret = a
        .ok("remember", json!({ "user_id": "alice", "content": "Alice's secret project is called Nightingale." }))
        .await["memory"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    a.ok("remember", json!({ "user_id": "bob", "content": "Bob is allergic to peanuts." })).await;

    // A user key sees its user only; it cannot act for another user; stats need an admin.
    let mut u = Mcp::new(&s.base, Some(&alice));
    u.connect().await;
    let r = u.ok("recall", json!({ "user_id": "alice", "query": "secret project name" })).await;
    assert_eq!(contents_of(&r["results"]), ["Alice's secret project is called Nightingale."]);
    // A user key need not name its user.
    let r = u.ok("memory_search", json!({ "query": "secret project name" })).await;
    assert_eq!(contents_of(&r["results"]), ["Alice's secret project is called Nightingale."]);
    assert_tool_error(
        &u.call("memory_search", json!({ "user_id": "bob", "query": "peanuts" })).await,
        "forbidden",
    );
    assert_tool_error(
        &u.call("remember", json!({ "user_id": "bob", "content": "Bob likes pears." })).await,
        "forbidden",
    );
    let r = u.ok("list_memories", json!({})).await;
    assert_eq!(contents_of(&r["memories"]), ["Alice's secret project is called Nightingale."]);
    assert_tool_error(&u.call("memory_stats", json!({})).await, "forbidden");

    // Another tenant's admin never sees acme's data, not even by id.
    let mut b = Mcp::new(&s.base, Some(&admin_b));
    b.connect().await;
    let r = b
        .ok("memory_search", json!({ "user_id": "alice", "query": "Nightingale secret project" }))
        .await;
    assert_eq!(r["results"], json!([]));
    let r = b.ok("list_memories", json!({})).await;
    assert_eq!(r["memories"], json!([]));
    let r = b.call("recall", json!({ "user_id": "alice" })).await;
    assert_eq!(r["content"][0]["text"], "Nothing is known about this user yet.", "{r}");
    assert_tool_error(&b.call("forget", json!({ "memory_id": secret })).await, "not_found");
    assert_tool_error(&b.call("relate", json!({ "memory_id": secret })).await, "not_found");
    assert_eq!(b.ok("memory_stats", json!({})).await["memories_active"], 0);

    // A session belongs to the key that opened it: globex's key cannot ride alice's session.
    let mut hijack = Mcp::new(&s.base, Some(&admin_b));
    hijack.session = u.session.clone();
    let call = json!({ "jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": { "name": "list_memories", "arguments": { "user_id": "alice" } } });
    let (status, _, body) = hijack.post(&call).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["code"], "forbidden");
    assert!(!body.contains("Nightingale"), "{body}");
    // Issue 10: bound at `initialize`, not at the first tool call. A session that has only
    // been opened cannot be taken over (any request of another key is refused, listings
    // too), and its owner is not locked out by the attempt.
    let mut fresh = Mcp::new(&s.base, Some(&alice));
    fresh.connect().await;
    hijack.session = fresh.session.clone();
    for msg in
        [call.clone(), json!({ "jsonrpc": "2.0", "id": 100, "method": "tools/list", "params": {} })]
    {
        let (status, _, body) = hijack.post(&msg).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    let r = fresh.ok("list_memories", json!({})).await;
    assert_eq!(contents_of(&r["memories"]), ["Alice's secret project is called Nightingale."]);
    // Nothing was changed by the refused calls.
    let r = a.ok("list_memories", json!({})).await;
    assert_eq!(r["memories"].as_array().unwrap().len(), 2);
    let r = a.ok("memory_search", json!({ "user_id": "alice", "query": "Nightingale" })).await;
    assert_eq!(contents_of(&r["results"]), ["Alice's secret project is called Nightingale."]);
}

/// `engram mcp` as a child process: JSON-RPC lines over its stdin and stdout.
pub(crate) struct StdioClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

impl StdioClient {
    fn spawn(db: &Db, extra: &[&str]) -> StdioClient {
        let mut cmd = db.engram();
        cmd.arg("mcp").args(extra);
        StdioClient::start(cmd)
    }

    /// An MCP client on the stdin/stdout of `cmd` (an `engram … mcp` command).
    pub(crate) fn start(mut cmd: std::process::Command) -> StdioClient {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn engram mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        StdioClient { stdin: child.stdin.take(), child, lines, next_id: 1 }
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").expect("write to engram mcp");
        stdin.flush().unwrap();
    }

    /// A request, answered before the next is sent (the server handles requests concurrently).
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("engram mcp did not answer {method} within 120 s"));
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {e}: {line}"));
            if v["id"] == id {
                return v;
            }
        }
    }

    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({ "name": tool, "arguments": args }))["result"].clone()
    }

    pub(crate) fn connect(&mut self) -> Value {
        let init = self.request(
            "initialize",
            json!({ "protocolVersion": PROTOCOL, "capabilities": {},
                    "clientInfo": { "name": "engram-it", "version": "1" } }),
        );
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        init["result"].clone()
    }

    /// Close stdin: the server ends by itself, successfully.
    pub(crate) fn close(mut self) {
        drop(self.stdin.take());
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "engram mcp exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("engram mcp did not stop when its stdin closed");
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn mcp_stdio_child_process(backend: Backend) {
    let db = Db::new(backend).await;
    let mut c = StdioClient::spawn(&db, &[]);
    let info = c.connect();
    assert_eq!(info["serverInfo"]["name"], "engram");
    let tools = c.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, TOOLS);

    let r = c.call(
        "remember",
        json!({ "user_id": "u1", "content": "The user's dog is called Biscuit." }),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["decision"], "ADD");
    let r = c.call(
        "memory_search",
        json!({ "user_id": "u1", "query": "What is the name of the user's pet?" }),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(
        contents_of(&r["structuredContent"]["results"])[0],
        "The user's dog is called Biscuit."
    );
    assert_tool_error(
        &c.call(
            "remember",
            json!({ "user_id": "u1", "content": "The user likes tea.", "importance": 11 }),
        ),
        "invalid_input",
    );
    assert_tool_error(
        &c.call("remember", json!({ "user_id": "u1", "content": "" })),
        "invalid_input",
    );
    c.close();

    // The CLI and REST see what the stdio server wrote (tenant `default`).
    let (ok, out, err) = db.cli(&["recall", "Biscuit", "--user", "u1", "--json"]);
    assert!(ok, "{err}");
    assert!(out.contains("The user's dog is called Biscuit."), "{out}");

    // --key: the stdio server acts as that key (here a user key bound to u2).
    let u2 = create_key(&db, &["--tenant", "default", "--role", "user", "--user", "u2"]);
    let mut c = StdioClient::spawn(&db, &["--key", &u2]);
    c.connect();
    assert_tool_error(
        &c.call("memory_search", json!({ "user_id": "u1", "query": "Biscuit" })),
        "forbidden",
    );
    let r = c.call("list_memories", json!({}));
    assert_eq!(r["structuredContent"]["memories"], json!([]), "{r}");
    // Revoking the key stops the running server's calls (found by a tester: a revoked key
    // kept reading and writing until the client restarted engram).
    let (ok, out, _) = db.cli(&["keys", "list", "--json"]);
    assert!(ok);
    let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(db.cli(&["keys", "revoke", &id]).0);
    for (tool, args) in
        [("list_memories", json!({})), ("remember", json!({ "content": "The user likes tea." }))]
    {
        assert_tool_error(&c.call(tool, args), "unauthorized");
    }
    c.close();
    let (ok, out, err) = db.cli(&["list", "--user", "u2", "--json"]);
    assert!(ok, "{err}");
    assert!(!out.contains("likes tea"), "{out}");
    // An unknown key is refused at start.
    let out = db
        .engram()
        .args(["mcp", "--key", "engram_not_a_real_key"])
        .stdin(Stdio::null())
        .output_bounded()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown or revoked API key"));
    // A key names its tenant: another --tenant beside it is refused, not ignored.
    let out = db
        .engram()
        .args(["mcp", "--key", &u2, "--tenant", "t2"])
        .stdin(Stdio::null())
        .output_bounded()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

on_both_backends!(
    mcp_http_tools_end_to_end,
    mcp_http_keys_roles_and_tenants,
    mcp_stdio_child_process,
);
