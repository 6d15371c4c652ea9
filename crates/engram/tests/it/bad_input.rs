//! SPEC §7 "bad input gets a clear error and loses nothing", table-driven over every endpoint:
//! malformed JSON, wrong content type, unknown and missing fields, empty and oversized
//! content, out-of-range and unknown values, bad and unknown ids, bad limits, unknown
//! endpoints. Every error is `{"error": {"code", "message"}}` with the right status, and after
//! each bad request everything stored is exactly as before.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, Db, Server, assert_error};

/// A well-formed UUID that names nothing.
const UNKNOWN: &str = "01a20297-0000-7000-8000-000000000000";

/// One request of the table.
struct Req {
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    auth: Option<&'static str>,
    body: Option<Vec<u8>>,
}

/// A bad request and the error it must get.
struct Case {
    req: Req,
    status: u16,
    code: &'static str,
    /// Words the message must contain (the field or value at fault).
    mentions: Vec<&'static str>,
}

async fn send(s: &Server, r: &Req) -> (StatusCode, Value) {
    if let (None, Some(ct), Some(body)) = (r.auth, r.content_type, &r.body) {
        return s.anon().raw(r.method, &r.path, ct, body.clone()).await;
    }
    let m = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap();
    let mut b = s.client.request(m, format!("{}{}", s.base, r.path));
    if let Some(ct) = r.content_type {
        b = b.header("content-type", ct);
    }
    if let Some(a) = r.auth {
        b = b.header("authorization", a);
    }
    if let Some(body) = &r.body {
        b = b.body(body.clone());
    }
    let resp = b.send().await.expect("request");
    let status = resp.status();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A JSON body case.
fn js(method: &'static str, path: &str, body: Value, status: u16, code: &'static str) -> Case {
    raw(method, path, Some("application/json"), body.to_string().into_bytes(), status, code)
}

/// A raw body case.
fn raw(
    method: &'static str,
    path: &str,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        req: Req { method, path: path.to_string(), content_type, auth: None, body: Some(body) },
        status,
        code,
        mentions: vec![],
    }
}

/// A body-less case.
fn nobody(method: &'static str, path: &str, status: u16, code: &'static str) -> Case {
    Case {
        req: Req { method, path: path.to_string(), content_type: None, auth: None, body: None },
        status,
        code,
        mentions: vec![],
    }
}

impl Case {
    fn says(mut self, words: &[&'static str]) -> Case {
        self.mentions.extend_from_slice(words);
        self
    }
    fn auth(mut self, a: &'static str) -> Case {
        self.req.auth = Some(a);
        self
    }
}

/// Everything stored that a bad request could touch.
async fn snapshot(s: &Server) -> Value {
    let mut out = serde_json::Map::new();
    for path in [
        "/v1/users/u/export",
        "/v1/users/other/export",
        "/v1/memories?include_superseded=true&limit=200",
        "/v1/conversations/c1/messages",
        "/v1/agents/a1",
    ] {
        let (st, b) = s.get(path).await;
        assert_eq!(st, StatusCode::OK, "snapshot {path}: {b}");
        out.insert(path.to_string(), b);
    }
    Value::Object(out)
}

/// A store with some history: facts of two users, an edit, a rating, a forget, a profile
/// fact, a conversation and an agent. Returns (active id, superseded id, message id).
async fn seed(s: &Server) -> (String, String, String) {
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user lives in Bengaluru.", "user_id": "u", "category": "fact",
                    "importance": 7, "metadata": { "origin": "seed" } }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let home = b["memory"]["id"].as_str().unwrap().to_string();
    let tea = s.remember("u", "The user likes green tea.").await;
    let (st, b) = s
        .req(
            "PATCH",
            &format!("/v1/memories/{tea}"),
            Some(json!({ "content": "The user likes oolong tea." })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let cat = s.remember("u", "The user owns a cat named Miso.").await;
    let (st, _) = s.req("DELETE", &format!("/v1/memories/{cat}"), None).await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = s.post(&format!("/v1/memories/{home}/rating"), json!({ "value": 1 })).await;
    assert_eq!(st, StatusCode::OK);
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user's timezone is IST.", "user_id": "u", "kind": "profile", "key": "timezone" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    s.remember("other", "The user has a dog named Rex.").await;
    let (st, b) = s
        .post(
            "/v1/conversations/c1/messages",
            json!({ "user_id": "u", "messages": [
                { "role": "user", "content": "I moved to Bengaluru." },
                { "role": "assistant", "content": "Noted!", "turn_id": "t1" } ] }),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let msg = b["messages"][1]["id"].as_str().unwrap().to_string();
    let (st, b) = s
        .req(
            "PUT",
            "/v1/agents/a1",
            Some(json!({ "dedup_threshold": 0.92, "settings": { "pii_policy": "redact" } })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    (home, tea, msg)
}

/// What changed between two snapshots (the paths whose content differs).
fn changed(before: &Value, after: &Value) -> Vec<String> {
    let (Some(b), Some(a)) = (before.as_object(), after.as_object()) else {
        return vec!["snapshot".into()];
    };
    b.iter()
        .filter(|(k, v)| a.get(*k) != Some(*v))
        .map(|(k, v)| {
            let now = a.get(k).map(Value::to_string).unwrap_or_default();
            let cut = |t: String| t.chars().take(400).collect::<String>();
            format!("{k}\n      before {}\n      after  {}", cut(v.to_string()), cut(now))
        })
        .collect()
}

/// Run every case against `s`, checking the error and that nothing stored changed.
async fn run_table(s: &Server, cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in &cases {
        let before = snapshot(s).await;
        let got = send(s, &c.req).await;
        let after = snapshot(s).await;
        let what = format!(
            "{} {} {}",
            c.req.method,
            c.req.path,
            c.req
                .body
                .as_deref()
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(120)]).into_owned())
                .unwrap_or_default()
        );
        let diff = changed(&before, &after);
        if !diff.is_empty() {
            failures.push(format!("{what}\n    changed the store: {}", diff.join("\n    ")));
        }
        let ok_shape = got.0.as_u16() == c.status
            && got.1["error"]["code"] == c.code
            && got.1["error"]["message"].as_str().is_some_and(|m| !m.trim().is_empty())
            && got.1.as_object().is_some_and(|o| o.len() == 1);
        if !ok_shape {
            let body: String = got.1.to_string().chars().take(300).collect();
            failures.push(format!(
                "{what}\n    expected {} {}, got {} {body}",
                c.status,
                c.code,
                got.0.as_u16()
            ));
            continue;
        }
        let msg = got.1["error"]["message"].as_str().unwrap();
        for w in &c.mentions {
            if !msg.contains(w) {
                failures.push(format!("{what}\n    message does not mention {w:?}: {msg}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} problems with {} bad requests:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Copies of `v` with a NUL character put into one of its strings, and the path of that string.
fn with_nul_in_each_string(v: &Value) -> Vec<(String, Value)> {
    fn paths(v: &Value, path: String, out: &mut Vec<String>) {
        match v {
            Value::String(_) => out.push(path),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    paths(x, format!("{path}[{i}]"), out);
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    paths(x, if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    fn poison(v: &mut Value, path: &str, here: String) {
        match v {
            Value::String(s) if here == path => s.push('\u{0}'),
            Value::Array(a) => {
                for (i, x) in a.iter_mut().enumerate() {
                    poison(x, path, format!("{here}[{i}]"));
                }
            }
            Value::Object(o) => {
                for (k, x) in o.iter_mut() {
                    let p = if here.is_empty() { k.clone() } else { format!("{here}.{k}") };
                    poison(x, path, p);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    let mut all = Vec::new();
    paths(v, String::new(), &mut all);
    all.into_iter()
        .map(|p| {
            let mut bad = v.clone();
            poison(&mut bad, &p, String::new());
            (p, bad)
        })
        .collect()
}

/// Bodies every JSON endpoint accepts (used to show that only the defect is refused).
fn valid_bodies(home: &str, msg: &str) -> Vec<(&'static str, String, Value)> {
    vec![
        (
            "POST",
            "/v1/memories".into(),
            json!({ "content": "The user plays the cello.", "user_id": "u" }),
        ),
        (
            "POST",
            "/v1/memories/batch".into(),
            json!({ "memories": [{ "content": "The user plays the cello.", "user_id": "u" }] }),
        ),
        ("PATCH", format!("/v1/memories/{home}"), json!({ "importance": 9 })),
        ("POST", format!("/v1/memories/{home}/rating"), json!({ "value": 1 })),
        ("POST", "/v1/search".into(), json!({ "query": "cello", "user_id": "u" })),
        ("POST", "/v1/context".into(), json!({ "user_id": "u", "query": "music" })),
        (
            "POST",
            "/v1/conversations/c1/messages".into(),
            json!({ "user_id": "u", "messages": [{ "role": "user", "content": "hello" }] }),
        ),
        ("POST", format!("/v1/messages/{msg}/rating"), json!({ "value": 1 })),
        ("PUT", "/v1/agents/a1".into(), json!({ "memory_enabled": false })),
    ]
}

async fn every_bad_request_gets_a_clear_error_and_changes_nothing(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&["--max-content-bytes", "64", "--max-body-bytes", "2048"]);
    let (home, old, msg) = seed(&s).await;
    let big = "b".repeat(65);
    let accents = "é".repeat(33); // 33 characters, 66 bytes
    let huge_meta = json!({ "blob": "z".repeat(3000) });
    let mut cases = Vec::new();

    // --- Shape of the body, for every JSON endpoint.
    for (method, path, valid) in valid_bodies(&home, &msg) {
        let text = valid.to_string();
        // Malformed JSON: broken before any field could be judged.
        let truncated = text.as_bytes()[..text.len() - 1].to_vec();
        for bad in [
            b"{\"".to_vec(),
            b"{,}".to_vec(),
            b"{'a': 1}".to_vec(),
            b"not json".to_vec(),
            b"\xff\xfe{}".to_vec(),
            Vec::new(),
            truncated,
            format!("{text} {{}}").into_bytes(),
        ] {
            cases.push(raw(method, &path, Some("application/json"), bad, 400, "invalid_json"));
        }
        cases.push(
            raw(method, &path, Some("text/plain"), text.clone().into_bytes(), 400, "invalid_json")
                .says(&["Content-Type"]),
        );
        cases.push(raw(
            method,
            &path,
            Some("application/x-www-form-urlencoded"),
            b"content=x&user_id=u".to_vec(),
            400,
            "invalid_json",
        ));
        cases.push(raw(method, &path, None, text.clone().into_bytes(), 400, "invalid_json"));
        cases.push(js(method, &path, json!(null), 400, "invalid_input"));
        cases.push(js(method, &path, json!([valid.clone()]), 400, "invalid_input"));
        cases.push(js(method, &path, json!("text"), 400, "invalid_input"));
        let mut unknown = valid.clone();
        unknown["colour"] = json!("blue");
        cases.push(js(method, &path, unknown, 400, "invalid_input").says(&["colour"]));
        let mut too_big = valid.clone();
        too_big["metadata"] = huge_meta.clone();
        cases.push(js(method, &path, too_big, 413, "payload_too_large"));
        // A valid body with a bad key: refused, nothing written.
        cases.push(
            js(method, &path, valid.clone(), 401, "unauthorized").auth("Bearer engram_not_a_key"),
        );
        cases.push(js(method, &path, valid, 401, "unauthorized").auth("Basic dTpw"));
    }

    // --- POST /v1/memories
    let m = |extra: Value| {
        let mut b = json!({ "content": "The user plays the cello.", "user_id": "u" });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        js("POST", "/v1/memories", b, 400, "invalid_input")
    };
    cases.extend([
        m(json!({ "content": null })).says(&["content"]),
        m(json!({ "user_id": null })).says(&["user_id"]),
        m(json!({ "content": "" })).says(&["content"]),
        m(json!({ "content": "   \n\t  " })).says(&["content"]),
        m(json!({ "content": 42 })).says(&["content"]),
        m(json!({ "user_id": "" })).says(&["user_id"]),
        m(json!({ "user_id": " u" })).says(&["user_id"]),
        m(json!({ "user_id": "x".repeat(300) })).says(&["user_id"]),
        m(json!({ "agent_id": "" })).says(&["agent_id"]),
        m(json!({ "importance": 0 })).says(&["importance", "1 to 10"]),
        m(json!({ "importance": 11 })).says(&["importance", "1 to 10"]),
        m(json!({ "importance": -3 })).says(&["importance"]),
        m(json!({ "importance": "high" })).says(&["importance", "expected a whole number"]),
        m(json!({ "importance": 5.5 })).says(&["importance"]),
        m(json!({ "category": "hobby" })).says(&["category", "hobby", "preference"]),
        m(json!({ "category": "Fact" })).says(&["category"]),
        m(json!({ "kind": "secret" })).says(&["kind", "secret"]),
        m(json!({ "kind": "profile" })).says(&["key"]),
        m(json!({ "kind": "profile", "key": "   " })).says(&["key"]),
        m(json!({ "key": "instrument" })).says(&["key"]),
        m(json!({ "metadata": [1, 2] })).says(&["metadata"]),
        m(json!({ "metadata": "note" })).says(&["metadata"]),
        m(json!({ "expires_at": "2001-01-01T00:00:00Z" })).says(&["expires_at"]),
        m(json!({ "expires_at": "next tuesday" })).says(&["expires_at", "RFC 3339"]),
        m(json!({ "expires_at": "2099-01-01" })).says(&["expires_at"]),
        m(json!({ "observed_at": "yesterday" })).says(&["observed_at"]),
        // Years both stores can hold (SQLite: signed 64-bit nanoseconds since 1970).
        m(json!({ "observed_at": "0001-01-01T00:00:00Z" })).says(&["observed_at", "1678"]),
        m(json!({ "observed_at": "1677-12-31T23:59:59Z" })).says(&["observed_at", "2261"]),
        m(json!({ "observed_at": "9999-12-31T23:59:59Z" })).says(&["observed_at"]),
        m(json!({ "expires_at": "2262-06-01T00:00:00Z" })).says(&["expires_at"]),
        m(json!({ "source_conversation_id": "" })).says(&["conversation_id"]),
        m(json!({ "source": "manual" })).says(&["source"]),
        m(json!({ "id": UNKNOWN })).says(&["id"]),
        raw(
            "POST",
            "/v1/memories",
            Some("application/json"),
            br#"{"content":"The user plays the cello.","user_id":"u","user_id":"v"}"#.to_vec(),
            400,
            "invalid_input",
        )
        .says(&["user_id"]),
        raw(
            "POST",
            "/v1/memories",
            Some("application/json"),
            b"{\"content\":\"The user \xff\xfe plays.\",\"user_id\":\"u\"}".to_vec(),
            400,
            "invalid_json",
        ),
        raw(
            "POST",
            "/v1/memories",
            Some("application/json"),
            format!(
                r#"{{"content":"x","user_id":"u","metadata":{}{}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
            .into_bytes(),
            400,
            "invalid_json",
        ),
        js(
            "POST",
            "/v1/memories",
            json!({ "content": big, "user_id": "u" }),
            413,
            "payload_too_large",
        )
        .says(&["65", "64"]),
        js(
            "POST",
            "/v1/memories",
            json!({ "content": accents, "user_id": "u" }),
            413,
            "payload_too_large",
        )
        .says(&["66"]),
    ]);

    // --- POST /v1/memories/batch: one bad item fails the batch, naming it.
    let good = json!({ "content": "The user plays the cello.", "user_id": "u" });
    let batch = |bad: Value| json!({ "memories": [good.clone(), bad] });
    cases.extend([
        js("POST", "/v1/memories/batch", json!({}), 400, "invalid_input").says(&["memories"]),
        js("POST", "/v1/memories/batch", json!({ "memories": [] }), 400, "invalid_input")
            .says(&["memories"]),
        js("POST", "/v1/memories/batch", json!({ "memories": good }), 400, "invalid_input"),
        js(
            "POST",
            "/v1/memories/batch",
            json!({ "memories": [good], "dedup": "yes" }),
            400,
            "invalid_input",
        )
        .says(&["dedup"]),
        js(
            "POST",
            "/v1/memories/batch",
            batch(json!({ "content": "x y", "user_id": "u", "importance": 11 })),
            400,
            "invalid_input",
        )
        .says(&["memories[1]", "importance"]),
        js(
            "POST",
            "/v1/memories/batch",
            batch(json!({ "content": "x y", "user_id": "u", "category": "hobby" })),
            400,
            "invalid_input",
        )
        .says(&["memories[1]", "category"]),
        js(
            "POST",
            "/v1/memories/batch",
            batch(json!({ "content": "  ", "user_id": "u" })),
            400,
            "invalid_input",
        )
        .says(&["memories[1]", "content"]),
        js(
            "POST",
            "/v1/memories/batch",
            batch(json!({ "content": "x y", "user_id": "u", "colour": 1 })),
            400,
            "invalid_input",
        )
        .says(&["colour"]),
        js("POST", "/v1/memories/batch", batch(json!({ "user_id": "u" })), 400, "invalid_input")
            .says(&["content"]),
        // A batch of one names its item too (a single write names the field alone).
        js(
            "POST",
            "/v1/memories/batch",
            json!({ "memories": [{ "content": "x y", "user_id": "u", "importance": 0 }] }),
            400,
            "invalid_input",
        )
        .says(&["memories[0]", "importance"]),
        js(
            "POST",
            "/v1/memories/batch",
            batch(json!({ "content": "x y", "user_id": "u", "kind": "profile" })),
            400,
            "invalid_input",
        )
        .says(&["memories[1]", "key"]),
        js(
            "POST",
            "/v1/memories/batch",
            batch(json!({ "content": big, "user_id": "u" })),
            413,
            "payload_too_large",
        )
        .says(&["memories[1]"]),
    ]);

    // --- GET /v1/memories: query string.
    for (q, word) in [
        ("limit=0", "limit"),
        ("limit=10000", "limit"),
        ("limit=-1", "limit"),
        ("limit=abc", "limit"),
        ("category=hobby", "category"),
        ("kind=secret", "kind"),
        ("include_superseded=maybe", "include_superseded"),
        ("cursor=not-a-cursor", "cursor"),
        ("colour=blue", "colour"),
        ("user_id=", "user_id"),
    ] {
        cases.push(nobody("GET", &format!("/v1/memories?{q}"), 400, "invalid_input").says(&[word]));
    }

    // --- /v1/memories/{id}: bad ids (400), unknown ids (404), superseded (409), bad bodies.
    for path in [
        "not-a-uuid",
        "1234",
        "01a20297-0000-7000-8000-00000000000",
        "01a20297-0000-7000-8000-00000000000g",
    ] {
        cases.push(
            nobody("GET", &format!("/v1/memories/{path}"), 400, "invalid_input")
                .says(&[path, "UUID"]),
        );
        cases.push(
            nobody("DELETE", &format!("/v1/memories/{path}"), 400, "invalid_input").says(&[path]),
        );
        cases.push(
            nobody("DELETE", &format!("/v1/memories/{path}?purge=true"), 400, "invalid_input")
                .says(&[path]),
        );
        cases.push(
            nobody("GET", &format!("/v1/memories/{path}/history"), 400, "invalid_input")
                .says(&[path]),
        );
        cases.push(
            js(
                "PATCH",
                &format!("/v1/memories/{path}"),
                json!({ "importance": 9 }),
                400,
                "invalid_input",
            )
            .says(&[path]),
        );
        cases.push(
            js(
                "POST",
                &format!("/v1/memories/{path}/rating"),
                json!({ "value": 1 }),
                400,
                "invalid_input",
            )
            .says(&[path]),
        );
    }
    cases.extend([
        nobody("GET", &format!("/v1/memories/{UNKNOWN}"), 404, "not_found").says(&[UNKNOWN]),
        nobody("GET", &format!("/v1/memories/{UNKNOWN}/history"), 404, "not_found"),
        nobody("DELETE", &format!("/v1/memories/{UNKNOWN}"), 404, "not_found"),
        nobody("DELETE", &format!("/v1/memories/{UNKNOWN}?purge=true"), 404, "not_found"),
        js(
            "PATCH",
            &format!("/v1/memories/{UNKNOWN}"),
            json!({ "importance": 9 }),
            404,
            "not_found",
        ),
        js(
            "POST",
            &format!("/v1/memories/{UNKNOWN}/rating"),
            json!({ "value": 1 }),
            404,
            "not_found",
        ),
        nobody("DELETE", &format!("/v1/memories/{home}?purge=yes"), 400, "invalid_input")
            .says(&["purge"]),
        nobody("DELETE", &format!("/v1/memories/{home}?hard=true"), 400, "invalid_input")
            .says(&["hard"]),
        js(
            "PATCH",
            &format!("/v1/memories/{old}"),
            json!({ "content": "The user likes black tea." }),
            409,
            "conflict",
        ),
        nobody("DELETE", &format!("/v1/memories/{old}"), 409, "conflict"),
    ]);
    let p = |body: Value| js("PATCH", &format!("/v1/memories/{home}"), body, 400, "invalid_input");
    cases.extend([
        p(json!({})).says(&["nothing to change"]),
        p(json!({ "content": "" })).says(&["content"]),
        p(json!({ "content": " \n " })).says(&["content"]),
        p(json!({ "importance": 0 })).says(&["importance"]),
        p(json!({ "importance": 11 })).says(&["importance"]),
        p(json!({ "importance": "high" })).says(&["importance"]),
        p(json!({ "category": "hobby" })).says(&["category"]),
        p(json!({ "kind": "secret" })).says(&["kind"]),
        p(json!({ "kind": "profile" })).says(&["profile"]),
        p(json!({ "metadata": 3 })).says(&["metadata"]),
        p(json!({ "expires_at": "2001-01-01T00:00:00Z" })).says(&["expires_at"]),
        p(json!({ "expires_at": "soon" })).says(&["expires_at"]),
        p(json!({ "user_id": "other" })).says(&["user_id"]),
        js(
            "PATCH",
            &format!("/v1/memories/{home}"),
            json!({ "content": big }),
            413,
            "payload_too_large",
        ),
    ]);
    let r = |v: Value| {
        js(
            "POST",
            &format!("/v1/memories/{home}/rating"),
            json!({ "value": v }),
            400,
            "invalid_input",
        )
    };
    cases.extend([
        r(json!(2)).says(&["-1 or 1"]),
        r(json!(0)).says(&["-1 or 1"]),
        r(json!(-2)).says(&["-1 or 1"]),
        r(json!("up")).says(&["value"]),
        r(json!(1.0)).says(&["value"]),
        js("POST", &format!("/v1/memories/{home}/rating"), json!({}), 400, "invalid_input")
            .says(&["value"]),
    ]);

    // --- POST /v1/search
    let q = |extra: Value| {
        let mut b = json!({ "query": "where does the user live", "user_id": "u" });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        js("POST", "/v1/search", b, 400, "invalid_input")
    };
    cases.extend([
        q(json!({ "query": null })).says(&["query"]),
        q(json!({ "user_id": null })).says(&["user_id"]),
        q(json!({ "query": "" })).says(&["query"]),
        q(json!({ "query": "   " })).says(&["query"]),
        q(json!({ "limit": 0 })).says(&["limit"]),
        q(json!({ "limit": 10000 })).says(&["limit"]),
        q(json!({ "limit": -1 })).says(&["limit"]),
        q(json!({ "categories": ["hobby"] })).says(&["category", "hobby"]),
        q(json!({ "categories": "fact" })).says(&["categories"]),
        q(json!({ "kinds": ["secret"] })).says(&["kind", "secret"]),
        q(json!({ "sources": ["files"] })).says(&["source", "files"]),
        q(json!({ "sources": [] })).says(&["sources"]),
        q(json!({ "mode": "fuzzy" })).says(&["mode", "fuzzy"]),
        q(json!({ "since": "last week" })).says(&["since"]),
        q(json!({ "until": "2020-13-45T00:00:00Z" })).says(&["until"]),
        q(json!({ "explain": "yes" })).says(&["explain"]),
        js("POST", "/v1/search", json!({ "query": big, "user_id": "u" }), 413, "payload_too_large")
            .says(&["query"]),
    ]);

    // --- POST /v1/context
    let c = |body: Value| js("POST", "/v1/context", body, 400, "invalid_input");
    cases.extend([
        c(json!({})).says(&["user_id"]),
        c(json!({ "user_id": "" })).says(&["user_id"]),
        c(json!({ "user_id": "u", "token_budget": 0 })).says(&["token_budget"]),
        c(json!({ "user_id": "u", "token_budget": -5 })).says(&["token_budget"]),
        c(json!({ "user_id": "u", "session_id": "" })).says(&["session_id"]),
        c(json!({ "user_id": "u", "refresh": "now" })).says(&["refresh"]),
    ]);

    // --- /v1/conversations/{id}/messages
    let msgs =
        |body: Value| js("POST", "/v1/conversations/c1/messages", body, 400, "invalid_input");
    let one = |m: Value| json!({ "user_id": "u", "messages": [{ "role": "user", "content": "fine" }, m] });
    cases.extend([
        msgs(json!({ "messages": [{ "role": "user", "content": "hi" }] })).says(&["user_id"]),
        msgs(json!({ "user_id": "u" })).says(&["messages"]),
        msgs(json!({ "user_id": "u", "messages": [] })).says(&["messages"]),
        msgs(json!({ "user_id": "u", "messages": { "role": "user" } })).says(&["messages"]),
        msgs(one(json!({ "role": "robot", "content": "hi" }))).says(&["messages[1].role", "robot"]),
        msgs(one(json!({ "content": "hi" }))).says(&["role"]),
        msgs(one(json!({ "role": "user" }))).says(&["content"]),
        msgs(one(json!({ "role": "user", "content": "" }))).says(&["messages[1]", "content"]),
        msgs(one(json!({ "role": "user", "content": " \t " }))).says(&["messages[1]", "content"]),
        msgs(one(json!({ "role": "user", "content": "hi", "created_at": "now" })))
            .says(&["created_at"]),
        msgs(one(json!({ "role": "user", "content": "hi", "metadata": [1] }))).says(&["metadata"]),
        msgs(one(json!({ "role": "user", "content": "hi", "colour": 1 }))).says(&["colour"]),
        js(
            "POST",
            "/v1/conversations/c1/messages",
            one(json!({ "role": "user", "content": big })),
            413,
            "payload_too_large",
        )
        .says(&["messages[1]"]),
        js(
            "POST",
            "/v1/conversations/c1/messages",
            json!({ "user_id": "other", "messages": [{ "role": "user", "content": "hi" }] }),
            409,
            "conflict",
        ),
        js(
            "POST",
            "/v1/conversations/%20c1/messages",
            json!({ "user_id": "u", "messages": [{ "role": "user", "content": "hi" }] }),
            400,
            "invalid_input",
        )
        .says(&["conversation_id"]),
        nobody("GET", "/v1/conversations/nope/messages", 404, "not_found").says(&["nope"]),
        nobody("GET", "/v1/conversations/c1/messages?limit=0", 400, "invalid_input")
            .says(&["limit"]),
        nobody("GET", "/v1/conversations/c1/messages?limit=5000", 400, "invalid_input")
            .says(&["limit"]),
        nobody("GET", "/v1/conversations/c1/messages?after=x", 400, "invalid_input")
            .says(&["after"]),
        nobody("GET", "/v1/conversations/c1/messages?after=-1", 400, "invalid_input")
            .says(&["after", "0 or more"]),
        nobody("GET", "/v1/conversations/c1/messages?colour=1", 400, "invalid_input")
            .says(&["colour"]),
    ]);

    // --- POST /v1/messages/{id}/rating
    cases.extend([
        js(
            "POST",
            &format!("/v1/messages/{msg}/rating"),
            json!({ "value": 2 }),
            400,
            "invalid_input",
        )
        .says(&["-1 or 1"]),
        js("POST", &format!("/v1/messages/{msg}/rating"), json!({}), 400, "invalid_input")
            .says(&["value"]),
        js("POST", "/v1/messages/not-a-uuid/rating", json!({ "value": 1 }), 400, "invalid_input")
            .says(&["not-a-uuid"]),
        js(
            "POST",
            &format!("/v1/messages/{UNKNOWN}/rating"),
            json!({ "value": 1 }),
            404,
            "not_found",
        ),
        // A memory id is not a message id.
        js("POST", &format!("/v1/messages/{home}/rating"), json!({ "value": 1 }), 404, "not_found"),
    ]);

    // --- /v1/agents/{id}
    let a = |body: Value| js("PUT", "/v1/agents/a1", body, 400, "invalid_input");
    cases.extend([
        a(json!({ "dedup_threshold": 2 })).says(&["dedup_threshold"]),
        a(json!({ "dedup_threshold": 0.1 })).says(&["dedup_threshold"]),
        a(json!({ "dedup_threshold": "high" })).says(&["dedup_threshold"]),
        a(json!({ "settings": [1] })).says(&["settings"]),
        a(json!({ "memory_enabled": "yes" })).says(&["memory_enabled"]),
        a(json!({ "cluster_id": "" })).says(&["cluster_id"]),
        a(json!({ "cluster_id": "  spaced  " })).says(&["cluster_id", "spaces"]),
        a(json!({ "cluster_id": "a\tb" })).says(&["cluster_id", "control"]),
        // Misspelled or mistyped settings are refused, never stored without effect.
        a(json!({ "settings": { "compaction": { "thresh": 3 } } }))
            .says(&["settings.compaction.thresh", "threshold"]),
        a(json!({ "settings": { "extraction": { "min_turn": 3 } } }))
            .says(&["settings.extraction.min_turn", "min_turns"]),
        a(json!({ "settings": { "extraction": { "min_turns": "4" } } })).says(&["min_turns"]),
        a(json!({ "settings": { "extraction": { "mode": "off", "min_turns": 0 } } }))
            .says(&["min_turns"]),
        a(json!({ "settings": { "extraction": { "max_tokens_per_extraction": "lots" } } }))
            .says(&["max_tokens_per_extraction"]),
        a(json!({ "settings": { "extraction": { "mode": 5 } } })).says(&["mode"]),
        js("PUT", "/v1/agents/%20a1", json!({}), 400, "invalid_input").says(&["agent_id"]),
        nobody("GET", "/v1/agents/nobody", 404, "not_found").says(&["nobody"]),
    ]);

    // --- /v1/users/{id}
    cases.extend([
        nobody("GET", "/v1/users/%20u/export", 400, "invalid_input").says(&["user_id"]),
        nobody("DELETE", "/v1/users/%20u", 400, "invalid_input").says(&["user_id"]),
        nobody("DELETE", "/v1/users/u", 401, "unauthorized").auth("Bearer engram_not_a_key"),
    ]);

    // --- Unknown endpoints: 404 with the error body.
    for (method, path) in [
        ("GET", "/v1/nope"),
        ("POST", "/v1/memory"),
        ("GET", "/v2/memories"),
        ("GET", "/v1/memories/batch/extra"),
        ("GET", &*format!("/v1/memories/{home}/nope")),
        ("DELETE", "/v1/users"),
        ("GET", "/v1"),
    ] {
        cases.push(nobody(method, path, 404, "not_found"));
    }
    cases.push(js(
        "POST",
        "/v1/remember",
        json!({ "content": "The user plays the cello.", "user_id": "u" }),
        404,
        "not_found",
    ));

    // --- Text with the NUL character, which PostgreSQL cannot store, is refused on both
    // backends in every field (SQLite used to keep it in tool fields, turn and session ids,
    // agent settings and profile keys, while PostgreSQL answered with a vague error).
    let nul = "a\u{0}b";
    for (method, path, body, field) in [
        (
            "POST",
            "/v1/conversations/c1/messages".to_string(),
            json!({ "user_id": "u", "messages": [{ "role": "tool", "content": "x", "tool_name": nul }] }),
            "messages[0].tool_name",
        ),
        (
            "POST",
            "/v1/conversations/c1/messages".to_string(),
            json!({ "user_id": "u", "messages": [{ "role": "tool", "content": "x", "tool_name": "t", "tool_result": nul }] }),
            "messages[0].tool_result",
        ),
        (
            "POST",
            "/v1/conversations/c1/messages".to_string(),
            json!({ "user_id": "u", "messages": [{ "role": "tool", "content": "x", "tool_name": "t", "tool_args": { "q": [nul] } }] }),
            "messages[0].tool_args.q[0]",
        ),
        (
            "POST",
            "/v1/conversations/c1/messages".to_string(),
            json!({ "user_id": "u", "messages": [{ "role": "user", "content": "x", "turn_id": nul }] }),
            "messages[0].turn_id",
        ),
        (
            "PUT",
            "/v1/agents/a1".to_string(),
            json!({ "memory_enabled": true, "settings": { "note": nul } }),
            "settings.note",
        ),
        (
            "PUT",
            "/v1/agents/a1".to_string(),
            json!({ "memory_enabled": true, "cluster_id": nul }),
            "cluster_id",
        ),
        (
            "POST",
            "/v1/memories".to_string(),
            json!({ "content": "The user's timezone is UTC.", "user_id": "u", "kind": "profile", "key": nul }),
            "key",
        ),
        (
            "POST",
            "/v1/memories".to_string(),
            json!({ "content": "The user plays the cello.", "user_id": "u", "metadata": { nul: 1 } }),
            "metadata",
        ),
        (
            "POST",
            "/v1/search".to_string(),
            json!({ "query": "cello", "user_id": "u", "turn_id": nul }),
            "turn_id",
        ),
        (
            "POST",
            "/v1/context".to_string(),
            json!({ "user_id": "u", "session_id": nul }),
            "session_id",
        ),
    ] {
        cases.push(js(method, &path, body, 400, "invalid_input").says(&[field, "NUL"]));
    }
    // And in any string of any valid body.
    for (method, path, valid) in valid_bodies(&home, &msg) {
        for (field, bad) in with_nul_in_each_string(&valid) {
            let field: &'static str = Box::leak(field.into_boxed_str());
            cases.push(js(method, &path, bad, 400, "invalid_input").says(&[field]));
        }
    }

    run_table(&s, cases).await;

    // The server still works, and the limit is the limit: 64 bytes are accepted.
    let exact = "c".repeat(64);
    let (st, b) = s.post("/v1/memories", json!({ "content": exact, "user_id": "u" })).await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let (st, b) =
        s.post("/v1/memories", json!({ "content": format!("  {exact}  "), "user_id": "u2" })).await;
    assert_eq!(st, StatusCode::CREATED, "surrounding whitespace counted against the limit: {b}");
}

/// Request bodies are JSON objects with named fields. serde also reads a struct from a
/// positional array, so `[1]` rated a memory and an 11-item array created one: a mistaken
/// body must be refused like any other shape error, and change nothing.
async fn positional_array_bodies_are_refused(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&[]);
    let (home, _, msg) = seed(&s).await;
    let mut positional = vec![json!("The user plays the cello."), json!("u")];
    positional.resize(11, Value::Null);
    let cases = vec![
        js("POST", &format!("/v1/memories/{home}/rating"), json!([1]), 400, "invalid_input"),
        js("POST", &format!("/v1/messages/{msg}/rating"), json!([-1]), 400, "invalid_input"),
        js("POST", "/v1/memories", Value::Array(positional), 400, "invalid_input"),
        js("POST", "/v1/context", json!(["u"]), 400, "invalid_input"),
    ];
    run_table(&s, cases).await;
}

/// Headers a client gets wrong: a compressed body is named as such (not "malformed JSON"),
/// and two Authorization headers are refused rather than the first silently counting
/// (found by a tester), and a very long bad id is not echoed whole. Nothing is stored.
async fn compressed_bodies_doubled_keys_and_long_ids_are_named(backend: Backend) {
    let db = Db::new(backend).await;
    let key = crate::helpers::create_key(&db, &["--tenant", "t", "--role", "admin"]);
    let s = db.serve(&[]);
    let url = format!("{}/v1/memories", s.base);
    let body = json!({ "content": "The user rows.", "user_id": "u" }).to_string();
    let r = s
        .client
        .post(&url)
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let (st, b): (StatusCode, Value) = (r.status(), r.json().await.unwrap());
    assert_eq!((st, &b["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_json")), "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("Content-Encoding 'gzip'"), "{b}");
    let r = s
        .client
        .post(&url)
        .header("authorization", format!("Bearer {key}"))
        .header("authorization", "Bearer engram_someone_else")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let (st, b): (StatusCode, Value) = (r.status(), r.json().await.unwrap());
    assert_eq!(st, StatusCode::BAD_REQUEST, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("one API key header"), "{b}");
    let (_, list) = s.with_key(&key).get("/v1/memories?user_id=u").await;
    assert_eq!(list["memories"], json!([]), "{list}");
    // A very long bad id is quoted by its start, not echoed whole.
    let got = s.with_key(&key).get(&format!("/v1/memories/{}", "x".repeat(5000))).await;
    assert_error(&got, 400, "invalid_input");
    let message = got.1["error"]["message"].as_str().unwrap();
    assert!(message.len() < 200 && message.contains("xxxx…"), "{message}");
    // Nor is any other long value, and numbers are named in words, not Rust's.
    let body = json!({ "content": "The user rows.", "user_id": "u", "category": "c".repeat(5000) });
    let got = s.with_key(&key).post("/v1/memories", body).await;
    assert_error(&got, 400, "invalid_input");
    assert!(got.1["error"]["message"].as_str().unwrap().chars().count() <= 401, "{}", got.1);
    let got = s.with_key(&key).get("/v1/memories?user_id=u&limit=-1").await;
    assert_error(&got, 400, "invalid_input");
    let message = got.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("not a whole number") && !message.contains("digit"), "{message}");
}

/// A route that exists but not for this method: an error body too (SPEC §4: errors are
/// `{"error": {"code", "message"}}` with the right status).
async fn a_wrong_method_gets_405_with_an_error_body(backend: Backend) {
    let s = Server::on(backend).await;
    let id = s.remember("u", "The user lives in Bengaluru.").await;
    let before = snapshot_memories(&s).await;
    for (method, path) in [
        ("PUT", "/v1/memories".to_string()),
        ("DELETE", "/v1/search".to_string()),
        ("GET", "/v1/search".to_string()),
        ("POST", format!("/v1/memories/{id}")),
        ("GET", "/v1/memories/batch".to_string()),
        ("PATCH", "/v1/users/u/export".to_string()),
    ] {
        let got = s.req(method, &path, Some(json!({ "content": "x y", "user_id": "u" }))).await;
        assert_eq!(got.0, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {}", got.1);
        assert!(
            got.1["error"]["code"].as_str().is_some_and(|c| !c.is_empty())
                && got.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{method} {path}: 405 without an error body: {:?}",
            got.1
        );
    }
    assert_eq!(snapshot_memories(&s).await, before);
}

async fn snapshot_memories(s: &Server) -> Value {
    let (st, b) = s.get("/v1/memories?include_superseded=true").await;
    assert_eq!(st, StatusCode::OK);
    b
}

/// The defaults apply without flags: 8 KiB of content, 4 MiB of body.
async fn default_limits_refuse_oversized_content_and_bodies(backend: Backend) {
    let s = Server::on(backend).await;
    s.remember("u", "The user lives in Bengaluru.").await;
    let before = snapshot_memories(&s).await;
    let r = s
        .post("/v1/memories", json!({ "content": "a".repeat(8 * 1024 + 1), "user_id": "u" }))
        .await;
    assert_error(&r, 413, "payload_too_large");
    let r = s
        .post(
            "/v1/memories",
            json!({ "content": "The user likes tea.", "user_id": "u", "metadata": { "blob": "z".repeat(4 * 1024 * 1024) } }),
        )
        .await;
    assert_error(&r, 413, "payload_too_large");
    let r = s
        .post("/v1/conversations/c9/messages", json!({ "user_id": "u", "messages": [{ "role": "user", "content": "m".repeat(8 * 1024 + 1) }] }))
        .await;
    assert_error(&r, 413, "payload_too_large");
    assert_eq!(snapshot_memories(&s).await, before);
    let (st, _) = s.get("/v1/conversations/c9/messages").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "the refused message opened a conversation");
    // Exactly at the limit is fine.
    let (st, b) =
        s.post("/v1/memories", json!({ "content": "a".repeat(8 * 1024), "user_id": "u" })).await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
}

/// What `/openapi.json` documents for a search is what the server takes: every source and
/// mode it lists, and every form of bound (found by a session: the document listed neither
/// `summaries` nor `substring` / `regex`, and declared `since` a timestamp only).
async fn the_documented_search_values_are_accepted(backend: Backend) {
    let s = Server::on(backend).await;
    s.remember("u", "The user lives in Bengaluru.").await;
    let (st, doc) = s.get("/openapi.json").await;
    assert_eq!(st, StatusCode::OK);
    let props = &doc["components"]["schemas"]["SearchRequest"]["properties"];
    // The rule of an optional field sits in an `anyOf` beside `null`.
    let rule = |field: &str| props[field]["anyOf"][0].clone();
    let listed = |v: &Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
    };
    let sources = listed(&rule("sources")["items"]["enum"]);
    assert_eq!(sources, ["memories", "messages", "summaries"]);
    let modes = listed(&rule("mode")["enum"]);
    assert_eq!(modes.len(), 6, "{modes:?}");
    for source in &sources {
        for mode in &modes {
            // Literal modes read messages only, as the field's description says.
            let literal = mode == "substring" || mode == "regex";
            if literal && source != "messages" {
                continue;
            }
            let body =
                json!({ "user_id": "u", "query": "Bengaluru", "sources": [source], "mode": mode });
            let (st, b) = s.post("/v1/search", body).await;
            assert_eq!(st, StatusCode::OK, "{source} {mode}: {b}");
        }
    }
    let forms = rule("since")["anyOf"].as_array().unwrap().len();
    assert_eq!(forms, 2, "a timestamp or a date: {}", props["since"]);
    for bound in ["2023", "2023-05", "2023-05-08"] {
        let body = json!({ "user_id": "u", "query": "Bengaluru", "since": bound, "until": "2260" });
        let (st, b) = s.post("/v1/search", body).await;
        assert_eq!(st, StatusCode::OK, "{bound}: {b}");
    }
}

on_both_backends!(
    the_documented_search_values_are_accepted,
    every_bad_request_gets_a_clear_error_and_changes_nothing,
    positional_array_bodies_are_refused,
    compressed_bodies_doubled_keys_and_long_ids_are_named,
    a_wrong_method_gets_405_with_an_error_body,
    default_limits_refuse_oversized_content_and_bodies,
);
