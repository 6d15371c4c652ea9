//! The context block: header and bullets, budget, profile facts first, relevance when not
//! everything fits, and stability per session id.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{Backend, Server, assert_error};

async fn all_facts_in_observation_order_with_profile_first(backend: Backend) {
    let s = Server::on(backend).await;
    for (c, at) in [
        ("The user adopted a cat in 2021.", "2021-06-01T00:00:00Z"),
        ("The user started learning Japanese in 2019.", "2019-03-01T00:00:00Z"),
        ("The user moved to Lyon in 2023.", "2023-09-01T00:00:00Z"),
    ] {
        let (st, b) = s
            .post("/v1/memories", json!({ "content": c, "user_id": "u", "observed_at": at }))
            .await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
    }
    let (st, b) = s.post("/v1/memories", json!({ "content": "The user's name is Camille.", "user_id": "u", "kind": "profile", "key": "name" })).await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let (st, ctx) = s.post("/v1/context", json!({ "user_id": "u" })).await;
    assert_eq!(st, StatusCode::OK, "{ctx}");
    assert_eq!(
        ctx["text"],
        "Known facts about the user:\n- The user's name is Camille.\n- The user started learning Japanese in 2019.\n- The user adopted a cat in 2021.\n- The user moved to Lyon in 2023."
    );
    assert_eq!(ctx["truncated"], false);
    assert_eq!(ctx["memory_ids"].as_array().unwrap().len(), 4);
    // A profile key upserts: the old value is superseded.
    let (_, b) = s.post("/v1/memories", json!({ "content": "The user's name is Camille Roux.", "user_id": "u", "kind": "profile", "key": "name" })).await;
    assert_eq!(b["decision"], "UPDATE");
    let (_, ctx) = s.post("/v1/context", json!({ "user_id": "u" })).await;
    assert!(
        ctx["text"]
            .as_str()
            .unwrap()
            .starts_with("Known facts about the user:\n- The user's name is Camille Roux.\n")
    );
    assert!(!ctx["text"].as_str().unwrap().contains("Camille.\n"));
}

async fn a_small_budget_keeps_the_most_relevant_and_sessions_are_stable(backend: Backend) {
    let s = Server::on(backend).await;
    let facts = [
        "The user is allergic to shellfish.",
        "The user plays tennis on Saturdays.",
        "The user's brother lives in Montreal.",
        "The user drives an electric car.",
        "The user is learning to bake sourdough bread.",
        "The user works night shifts at a hospital.",
    ];
    for f in facts {
        s.remember("u", f).await;
    }
    let (_, ctx) = s.post("/v1/context", json!({ "user_id": "u", "query": "what should I cook for dinner with seafood?", "token_budget": 25 })).await;
    let text = ctx["text"].as_str().unwrap();
    assert_eq!(ctx["truncated"], true);
    assert!(text.contains("shellfish"), "the most relevant fact must be kept: {text}");
    assert!(ctx["token_estimate"].as_u64().unwrap() <= 25, "{ctx}");
    assert!(text.lines().count() < facts.len() + 1);

    // Same session → same text, even after a new fact; refresh picks it up.
    let (_, first) = s.post("/v1/context", json!({ "user_id": "u", "session_id": "s-1" })).await;
    assert_eq!(first["cached"], false);
    s.remember("u", "The user bought a sailboat last week.").await;
    let (_, again) = s.post("/v1/context", json!({ "user_id": "u", "session_id": "s-1" })).await;
    assert_eq!(again["text"], first["text"]);
    assert_eq!(again["cached"], true);
    let (_, other) = s.post("/v1/context", json!({ "user_id": "u", "session_id": "s-2" })).await;
    assert!(other["text"].as_str().unwrap().contains("sailboat"));
    let (_, refreshed) = s
        .post("/v1/context", json!({ "user_id": "u", "session_id": "s-1", "refresh": true }))
        .await;
    assert!(refreshed["text"].as_str().unwrap().contains("sailboat"));
    // A fact purged since is never served from a session's cache: the block is chosen again.
    let (_, m) = s.get("/v1/memories?user_id=u").await;
    let boat = m["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"].as_str().unwrap().contains("sailboat"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, _) = s.req("DELETE", &format!("/v1/memories/{boat}?purge=true"), None).await;
    assert_eq!(st.as_u16(), 200);
    let (_, after) = s.post("/v1/context", json!({ "user_id": "u", "session_id": "s-1" })).await;
    assert!(!after["text"].as_str().unwrap().contains("sailboat"), "{after}");
    assert_eq!(after["cached"], false, "{after}");
    let (_, next) = s.post("/v1/context", json!({ "user_id": "u", "session_id": "s-1" })).await;
    assert_eq!((&next["cached"], &next["text"]), (&json!(true), &after["text"]), "stable again");
    // A call with another budget or threshold under the same session is chosen for its own
    // terms, not served the block made for others; its terms are then the session's.
    let (_, small) = s
        .post("/v1/context", json!({ "user_id": "u", "session_id": "s-1", "token_budget": 12 }))
        .await;
    assert_eq!(small["cached"], false, "{small}");
    assert!(small["token_estimate"].as_u64().unwrap() <= 12, "{small}");
    let (_, small_again) = s
        .post("/v1/context", json!({ "user_id": "u", "session_id": "s-1", "token_budget": 12 }))
        .await;
    assert_eq!((&small_again["cached"], &small_again["text"]), (&json!(true), &small["text"]));
    let (_, strict) = s
        .post(
            "/v1/context",
            json!({ "user_id": "u", "session_id": "s-1", "query": "tennis on Saturdays",
                "min_score": 0.3 }),
        )
        .await;
    assert_eq!(strict["cached"], false, "{strict}");
    assert!(strict["text"].as_str().unwrap().contains("tennis"), "{strict}");
    assert!(!strict["text"].as_str().unwrap().contains("Montreal"), "{strict}");
    // A budget too small for the header itself: no block, not a header over the budget.
    let (_, tiny) = s.post("/v1/context", json!({ "user_id": "u", "token_budget": 3 })).await;
    assert_eq!((&tiny["text"], &tiny["token_estimate"]), (&json!(""), &json!(0)), "{tiny}");
    assert_error(
        &s.post("/v1/context", json!({ "user_id": "u", "token_budget": 0 })).await,
        400,
        "invalid_input",
    );
    // A user without facts gets no block (a header over nothing only cost tokens); one
    // whose facts do not fit gets the header, which says there are some.
    let (_, empty) = s.post("/v1/context", json!({ "user_id": "nobody" })).await;
    assert_eq!((&empty["text"], &empty["token_estimate"]), (&json!(""), &json!(0)), "{empty}");
    let (_, full) = s.post("/v1/context", json!({ "user_id": "u", "token_budget": 8 })).await;
    assert_eq!(full["text"], "Known facts about the user:", "{full}");
    assert_eq!(full["truncated"], true, "{full}");
    // A session opened before the user's first fact picks the fact up (found by a tester:
    // the empty block stayed cached).
    let ask = json!({ "user_id": "newcomer", "session_id": "s-new" });
    assert_eq!(s.post("/v1/context", ask.clone()).await.1["text"], "");
    s.remember("newcomer", "The user is learning Portuguese.").await;
    let (_, after) = s.post("/v1/context", ask).await;
    assert!(after["text"].as_str().unwrap().contains("learning Portuguese"), "{after}");
}

on_both_backends!(
    all_facts_in_observation_order_with_profile_first,
    a_small_budget_keeps_the_most_relevant_and_sessions_are_stable,
);
