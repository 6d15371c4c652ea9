//! Memories through the REST API: the new-user story (remember, find by paraphrase and by
//! keyword, edit with history, forget, erase), dedup, listing, rating, purge, restart.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{Backend, Db, Server, assert_error, contents};

async fn remember_find_edit_forget_erase_as_a_new_user_would(backend: Backend) {
    let s = Server::on(backend).await;
    let bengaluru = s.remember("alice", "The user lives in Bengaluru.").await;
    s.remember("alice", "The user prefers dark mode in every code editor.").await;
    s.remember("alice", "The user's daughter Maya plays the violin.").await;
    s.remember("bob", "The user lives in Lisbon.").await;

    // A paraphrase finds the fact first.
    let hits = s.search("alice", "which city is her home?").await;
    assert_eq!(hits[0], "The user lives in Bengaluru.", "paraphrase search: {hits:?}");
    // A keyword finds it too.
    let hits = s.search("alice", "violin").await;
    assert_eq!(hits[0], "The user's daughter Maya plays the violin.");
    // Bob's facts never show for Alice.
    assert!(!s.search("alice", "Lisbon").await.iter().any(|c| c.contains("Lisbon")));

    // Edit: a new version supersedes the old, both in history.
    let (st, edited) = s
        .req(
            "PATCH",
            &format!("/v1/memories/{bengaluru}"),
            Some(json!({ "content": "The user lives in Mysuru." })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{edited}");
    let new_id = edited["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, bengaluru);
    let (_, old) = s.get(&format!("/v1/memories/{bengaluru}")).await;
    assert_eq!(old["superseded_by"], new_id.as_str());
    assert!(old["superseded_at"].is_string());
    let (st, hist) = s.get(&format!("/v1/memories/{new_id}/history")).await;
    assert_eq!(st, StatusCode::OK);
    let chain: Vec<&str> =
        hist["chain"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(chain, ["The user lives in Bengaluru.", "The user lives in Mysuru."]);
    let events: Vec<&str> =
        hist["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert!(events.contains(&"created") && events.contains(&"superseded"), "{events:?}");
    // Search sees only the active version.
    let hits = s.search("alice", "where does the user live").await;
    assert_eq!(hits[0], "The user lives in Mysuru.");
    assert!(!hits.iter().any(|c| c.contains("Bengaluru")), "superseded fact returned: {hits:?}");
    // Editing the superseded version is a conflict.
    let r = s
        .req("PATCH", &format!("/v1/memories/{bengaluru}"), Some(json!({ "content": "x y z" })))
        .await;
    assert_error(&r, 409, "conflict");
    // An edit that changes nothing makes no version: the fact as it is, history unchanged.
    let same =
        json!({ "content": "The user lives in Mysuru.", "importance": edited["importance"] });
    let (st, again) = s.req("PATCH", &format!("/v1/memories/{new_id}"), Some(same)).await;
    assert_eq!((st, again["id"].as_str()), (StatusCode::OK, Some(new_id.as_str())), "{again}");
    let (_, hist) = s.get(&format!("/v1/memories/{new_id}/history")).await;
    assert_eq!(hist["chain"].as_array().unwrap().len(), 2, "{hist}");

    // Forget: gone from search and list, kept in history.
    let (st, b) = s.req("DELETE", &format!("/v1/memories/{new_id}"), None).await;
    assert_eq!((st, b["status"].as_str()), (StatusCode::OK, Some("forgotten")));
    assert!(!s.search("alice", "Mysuru").await.iter().any(|c| c.contains("Mysuru")));
    let (_, list) = s.get("/v1/memories?user_id=alice").await;
    assert_eq!(list["memories"].as_array().unwrap().len(), 2);
    let (_, hist) = s.get(&format!("/v1/memories/{new_id}/history")).await;
    assert!(hist["events"].as_array().unwrap().iter().any(|e| e["event"] == "forgotten"));
    // Editing a forgotten fact says so (not "superseded").
    let r = s
        .req("PATCH", &format!("/v1/memories/{new_id}"), Some(json!({ "content": "x y z" })))
        .await;
    assert_error(&r, 409, "conflict");
    assert!(r.1["error"]["message"].as_str().unwrap().contains("was forgotten"), "{}", r.1);

    // Erase Alice: counts returned, nothing of hers left; Bob untouched.
    let (st, er) = s.req("DELETE", "/v1/users/alice", None).await;
    assert_eq!(st, StatusCode::OK, "{er}");
    assert_eq!(er["erased"]["memories"], 4, "{er}");
    assert!(er["erased"]["memory_events"].as_u64().unwrap() >= 6, "{er}");
    let (_, list) = s.get("/v1/memories?user_id=alice&include_superseded=true").await;
    assert_eq!(list["memories"], json!([]));
    assert!(s.search("alice", "violin").await.is_empty());
    let (st, _) = s.get(&format!("/v1/memories/{bengaluru}")).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert_eq!(s.search("bob", "Lisbon").await, ["The user lives in Lisbon."]);
}

async fn a_restated_fact_is_confirmed_not_duplicated(backend: Backend) {
    let s = Server::on(backend).await;
    let id = s.remember("u1", "The user is allergic to peanuts.").await;
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "the user is allergic to peanuts", "user_id": "u1" }),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(b["decision"], "NONE");
    assert_eq!(b["memory"]["id"], id.as_str());
    assert_eq!(b["memory"]["mention_count"], 2);
    assert!(b["similarity"].as_f64().unwrap() >= 0.90);
    // A different fact is added.
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user is allergic to cats.", "user_id": "u1" }),
        )
        .await;
    assert_eq!((st, b["decision"].as_str()), (StatusCode::CREATED, Some("ADD")), "{b}");
    // Another user may hold the same sentence.
    let (st, _) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user is allergic to peanuts.", "user_id": "u2" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let (_, list) = s.get("/v1/memories?user_id=u1").await;
    assert_eq!(list["memories"].as_array().unwrap().len(), 2);
}

async fn batch_dedups_within_and_against_the_store_and_is_all_or_nothing(backend: Backend) {
    let s = Server::on(backend).await;
    s.remember("u", "The user drives a red bicycle to work.").await;
    let body = json!({ "memories": [
        { "content": "The user's favourite food is ramen.", "user_id": "u", "category": "preference" },
        { "content": "The user's favorite food is ramen", "user_id": "u" },
        { "content": "The user drives a red bicycle to work", "user_id": "u" },
        { "content": "The user has two cats named Miso and Tofu.", "user_id": "u", "importance": 8 }
    ]});
    let (st, b) = s.post("/v1/memories/batch", body).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let d: Vec<&str> =
        b["results"].as_array().unwrap().iter().map(|r| r["decision"].as_str().unwrap()).collect();
    assert_eq!(d, ["ADD", "NONE", "NONE", "ADD"]);
    // One bad item: nothing of the batch is stored.
    let bad = json!({ "memories": [
        { "content": "The user plays chess on Sundays.", "user_id": "u" },
        { "content": "x", "user_id": "u", "importance": 0 }
    ]});
    let r = s.post("/v1/memories/batch", bad).await;
    assert_error(&r, 400, "invalid_input");
    assert!(r.1["error"]["message"].as_str().unwrap().contains("memories[1]"), "{}", r.1);
    assert!(!s.search("u", "chess").await.iter().any(|c| c.contains("chess")));
    // dedup: false stores every item as given.
    let (_, b) = s.post("/v1/memories/batch", json!({ "dedup": false, "memories": [
        { "content": "Same sentence.", "user_id": "v" }, { "content": "Same sentence.", "user_id": "v" } ] })).await;
    let d: Vec<&str> =
        b["results"].as_array().unwrap().iter().map(|r| r["decision"].as_str().unwrap()).collect();
    assert_eq!(d, ["ADD", "ADD"]);
}

async fn list_paginates_filters_and_rating_reorders(backend: Backend) {
    let s = Server::on(backend).await;
    let facts = [
        "The user was born in Porto.",
        "The user owns a Labrador named Rex.",
        "The user studied chemistry at university.",
        "The user plays bass guitar in a band.",
        "The user is training for a triathlon.",
        "The user's sister lives in Chicago.",
        "The user collects vintage fountain pens.",
    ];
    for (i, f) in facts.iter().enumerate() {
        let cat = if i % 2 == 0 { "event" } else { "fact" };
        let (st, b) =
            s.post("/v1/memories", json!({ "content": f, "user_id": "p", "category": cat })).await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("/v1/memories?user_id=p&limit=3&cursor={c}"),
            None => "/v1/memories?user_id=p&limit=3".into(),
        };
        let (st, b) = s.get(&q).await;
        assert_eq!(st, StatusCode::OK, "{b}");
        for m in b["memories"].as_array().unwrap() {
            seen.push(m["content"].as_str().unwrap().to_string());
        }
        match b["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7);
    assert!(
        seen[0].contains("fountain pens") && seen[6].contains("Porto"),
        "newest first: {seen:?}"
    );
    let (_, b) = s.get("/v1/memories?user_id=p&category=event").await;
    assert_eq!(b["memories"].as_array().unwrap().len(), 4);

    // Two facts, rating flips their order for a query matching both equally.
    let a = s.remember("r", "The user likes green tea in the morning.").await;
    let b_id = s.remember("r", "The user likes black tea in the morning.").await;
    let first = s.search("r", "tea in the morning").await[0].clone();
    // The second gets +1, the first -1.
    let (winner, loser) = if first.contains("green") { (&a, &b_id) } else { (&b_id, &a) };
    let (st, m) = s.post(&format!("/v1/memories/{loser}/rating"), json!({ "value": 1 })).await;
    assert_eq!((st, m["rating"].as_i64()), (StatusCode::OK, Some(1)), "{m}");
    s.post(&format!("/v1/memories/{winner}/rating"), json!({ "value": -1 })).await;
    let now_first = s.search("r", "tea in the morning").await[0].clone();
    assert_ne!(first, now_first, "rating did not reorder");
    assert_error(
        &s.post(&format!("/v1/memories/{a}/rating"), json!({ "value": 2 })).await,
        400,
        "invalid_input",
    );
    // A forgotten fact keeps its history: rating it is a conflict, as editing it is (found
    // by a tester: its rating and updated_at changed).
    let (st, _) = s.req("DELETE", &format!("/v1/memories/{winner}"), None).await;
    assert!(st.is_success(), "{st}");
    let before = s.get(&format!("/v1/memories/{winner}")).await.1;
    let r = s.post(&format!("/v1/memories/{winner}/rating"), json!({ "value": 1 })).await;
    assert_error(&r, 409, "conflict");
    assert!(r.1["error"]["message"].as_str().unwrap().contains("was forgotten"), "{}", r.1);
    assert_eq!(s.get(&format!("/v1/memories/{winner}")).await.1, before);
}

async fn search_explains_bumps_access_and_filters(backend: Backend) {
    let s = Server::on(backend).await;
    let (_, b) = s
        .post("/v1/memories", json!({ "content": "The user has a meeting with Acme on 2026-05-12.", "user_id": "e", "category": "event", "importance": 9 }))
        .await;
    let id = b["memory"]["id"].as_str().unwrap().to_string();
    s.post("/v1/memories", json!({ "content": "The user prefers meetings before noon.", "user_id": "e", "category": "preference" })).await;
    let (st, r) = s
        .post("/v1/search", json!({ "query": "Acme meeting", "user_id": "e", "explain": true }))
        .await;
    assert_eq!(st, StatusCode::OK);
    let top = &r["results"][0];
    assert_eq!(top["type"], "memory");
    assert_eq!(top["memory"]["id"], id.as_str());
    let e = &top["explain"];
    assert_eq!(e["vector_rank"], 1);
    assert_eq!(e["text_rank"], 1);
    let rrf = 2.0 / 61.0;
    assert!((e["rrf"].as_f64().unwrap() - rrf).abs() < 1e-9, "{e}");
    assert!((e["importance_weight"].as_f64().unwrap() - 1.04).abs() < 1e-9);
    assert!((top["score"].as_f64().unwrap() - e["score"].as_f64().unwrap()).abs() < 1e-12);
    // The hit was counted.
    let (_, m) = s.get(&format!("/v1/memories/{id}")).await;
    assert_eq!(m["access_count"], 1);
    assert!(m["last_accessed_at"].is_string());
    // Category filter.
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "meeting", "user_id": "e", "categories": ["preference"] }),
        )
        .await;
    assert_eq!(contents(&r), ["The user prefers meetings before noon."]);
    // Time filter on observed_at.
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "meeting", "user_id": "e", "since": "2999-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(r["results"], json!([]));
}

async fn purge_removes_the_row_and_restart_keeps_everything_else(backend: Backend) {
    let db = Db::new(backend).await;
    let mut s = db.serve(&[]);
    let keep = s.remember("k", "The user runs a marathon every October.").await;
    let first = s.remember("k", "The user's locker code is stored elsewhere.").await;
    // An edited fact: its new version is purged (found by a tester: the log kept it).
    let edit = json!({ "content": "The user's locker code is stored elsewhere: xq7731." });
    let (_, v2) = s.req("PATCH", &format!("/v1/memories/{first}"), Some(edit)).await;
    let gone = v2["id"].as_str().unwrap().to_string();
    let (st, b) = s.req("DELETE", &format!("/v1/memories/{gone}?purge=true"), None).await;
    assert_eq!((st, b["status"].as_str()), (StatusCode::OK, Some("purged")));
    if backend == Backend::Sqlite {
        // Not even the keyword index's pages or the write-ahead log keep the purged words.
        for file in ["engram.db", "engram.db-wal"] {
            let bytes = std::fs::read(db.dir().join(file)).unwrap_or_default();
            assert!(!bytes.windows(6).any(|w| w == b"xq7731"), "{file} holds the purged word");
        }
    }
    let (st, _) = s.get(&format!("/v1/memories/{gone}/history")).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    s.kill9();
    drop(s);
    let s = db.serve(&[]);
    let (st, m) = s.get(&format!("/v1/memories/{keep}")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(m["content"], "The user runs a marathon every October.");
    assert_eq!(s.search("k", "marathon").await, ["The user runs a marathon every October."]);
    let (st, _) = s.get(&format!("/v1/memories/{gone}")).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

/// Timestamps have microsecond precision on both backends (PostgreSQL's `timestamptz`
/// keeps microseconds; SQLite used to give nanoseconds back, so the same request answered
/// differently and a `since` filter cut at another instant), and dates far from 1970 that
/// both stores hold round-trip exactly.
async fn timestamps_have_microseconds_on_both_backends(backend: Backend) {
    let s = Server::on(backend).await;
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user adopted a dog named Biscuit.", "user_id": "t",
                    "observed_at": "2026-01-02T03:04:05.123456789Z" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    assert_eq!(b["memory"]["observed_at"], "2026-01-02T03:04:05.123456Z", "{b}");
    let id = b["memory"]["id"].as_str().unwrap().to_string();
    let (_, m) = s.get(&format!("/v1/memories/{id}")).await;
    assert_eq!(m["observed_at"], "2026-01-02T03:04:05.123456Z", "{m}");
    for field in ["created_at", "updated_at"] {
        let t = m[field].as_str().unwrap();
        let frac = t.split('.').nth(1).map_or(0, |f| f.trim_end_matches('Z').len());
        assert!(frac <= 6, "{field} has more than microseconds: {t}");
    }
    // A bound inside the same microsecond admits the row on both backends.
    let (_, page) = s
        .post(
            "/v1/search",
            json!({ "query": "dog", "user_id": "t", "since": "2026-01-02T03:04:05.1234569Z" }),
        )
        .await;
    assert_eq!(contents(&page), ["The user adopted a dog named Biscuit."], "{page}");
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user's grandmother was born in Porto.", "user_id": "t",
                    "observed_at": "1901-03-04T05:06:07.000001Z" }),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    assert_eq!(b["memory"]["observed_at"], "1901-03-04T05:06:07.000001Z");
    // Search bounds beyond the years both stores hold mean the same on both: `until` year 1
    // admits nothing (SQLite used to overflow it into year 2262 and admit everything).
    for (bounds, want) in [
        (json!({ "until": "0001-01-01T00:00:00Z" }), 0),
        (json!({ "since": "0001-01-01T00:00:00Z" }), 2),
        (json!({ "until": "9999-12-31T23:59:59Z" }), 2),
        (json!({ "since": "9999-12-31T23:59:59Z" }), 0),
    ] {
        let mut q = json!({ "query": "the user", "user_id": "t" });
        q.as_object_mut().unwrap().extend(bounds.as_object().unwrap().clone());
        let (st, r) = s.post("/v1/search", q.clone()).await;
        assert_eq!(st, StatusCode::OK, "{r}");
        assert_eq!(contents(&r).len(), want, "{q}: {r}");
    }
    let (_, x) = s.get("/v1/users/t/export").await;
    let mut observed: Vec<&str> = x["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["observed_at"].as_str().unwrap())
        .collect();
    observed.sort();
    assert_eq!(observed, ["1901-03-04T05:06:07.000001Z", "2026-01-02T03:04:05.123456Z"]);
}

/// The rating and source-conversation filters the web UI has, over REST (search and list)
/// and MCP (`memory_search`, `list_memories`); a bad value is a 400 naming the field.
async fn rating_and_source_conversation_filter_search_list_and_mcp(backend: Backend) {
    let s = Server::on(backend).await;
    let mut ids = Vec::new();
    for (content, conv) in [
        ("The user likes green tea in the morning.", "c1"),
        ("The user likes black coffee after lunch.", "c2"),
        ("The user likes herbal tea before bed.", "c2"),
    ] {
        let (st, b) = s
            .post(
                "/v1/memories",
                json!({ "content": content, "user_id": "u", "source_conversation_id": conv }),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
        ids.push(b["memory"]["id"].as_str().unwrap().to_string());
    }
    for (id, value) in [(&ids[0], 1), (&ids[1], -1)] {
        let (st, b) = s.post(&format!("/v1/memories/{id}/rating"), json!({ "value": value })).await;
        assert_eq!(st, StatusCode::OK, "{b}");
    }
    let search = |extra: serde_json::Value| {
        let s = &s;
        async move {
            let mut q = json!({ "query": "what does the user like to drink?", "user_id": "u",
                                "min_score": 0 });
            q.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let (st, r) = s.post("/v1/search", q).await;
            assert_eq!(st, StatusCode::OK, "{r}");
            let mut c = contents(&r);
            c.sort();
            c
        }
    };
    let (green, coffee, herbal) = (
        "The user likes green tea in the morning.",
        "The user likes black coffee after lunch.",
        "The user likes herbal tea before bed.",
    );
    assert_eq!(search(json!({ "rating": "up" })).await, [green]);
    assert_eq!(search(json!({ "rating": "down" })).await, [coffee]);
    assert_eq!(search(json!({ "rating": "none" })).await, [herbal]);
    assert_eq!(search(json!({ "source_conversation_id": "c2" })).await, [coffee, herbal]);
    assert_eq!(search(json!({ "source_conversation_id": "c2", "rating": "none" })).await, [herbal]);
    let list = |q: &'static str| {
        let s = &s;
        async move {
            let (st, b) = s.get(&format!("/v1/memories?user_id=u&{q}")).await;
            assert_eq!(st, StatusCode::OK, "{b}");
            let mut c: Vec<String> = b["memories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].as_str().unwrap().to_string())
                .collect();
            c.sort();
            c
        }
    };
    assert_eq!(list("rating=down").await, [coffee]);
    assert_eq!(list("source_conversation_id=c1").await, [green]);
    // Bad values name the field.
    let bad =
        s.post("/v1/search", json!({ "query": "tea", "user_id": "u", "rating": "sideways" })).await;
    assert_error(&bad, 400, "invalid_input");
    assert!(bad.1["error"]["message"].as_str().unwrap().contains("rating"), "{}", bad.1);
    assert_error(&s.get("/v1/memories?user_id=u&rating=5").await, 400, "invalid_input");
    // MCP.
    let mut m = crate::mcp::Mcp::new(&s.base, None);
    m.connect().await;
    let r = m
        .ok(
            "memory_search",
            json!({ "query": "what does the user like to drink?", "user_id": "u",
            "sources": ["memories"], "rating": "up", "min_score": 0 }),
        )
        .await;
    assert_eq!(r["results"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["results"][0]["memory"]["content"], green, "{r}");
    let r = m
        .ok(
            "list_memories",
            json!({ "user_id": "u", "source_conversation_id": "c2", "rating": "down" }),
        )
        .await;
    assert_eq!(r["memories"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["memories"][0]["content"], coffee, "{r}");
    crate::mcp::assert_tool_error(
        &m.call("list_memories", json!({ "user_id": "u", "rating": "sideways" })).await,
        "invalid_input",
    );
}

on_both_backends!(
    remember_find_edit_forget_erase_as_a_new_user_would,
    a_restated_fact_is_confirmed_not_duplicated,
    batch_dedups_within_and_against_the_store_and_is_all_or_nothing,
    list_paginates_filters_and_rating_reorders,
    search_explains_bumps_access_and_filters,
    purge_removes_the_row_and_restart_keeps_everything_else,
    timestamps_have_microseconds_on_both_backends,
    rating_and_source_conversation_filter_search_list_and_mcp,
);
