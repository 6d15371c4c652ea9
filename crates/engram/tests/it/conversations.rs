//! Conversations: append (202, durable), browse, ownership, and the rating cascade from a
//! reply to the memories recalled for its turn.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{Backend, Server, assert_error};

async fn append_browse_and_ownership(backend: Backend) {
    let s = Server::on(backend).await;
    let (st, b) = s
        .post("/v1/conversations/c1/messages", json!({ "user_id": "u", "messages": [
            { "role": "user", "content": "I just moved to Porto." },
            { "role": "assistant", "content": "Welcome to Porto!" },
            { "role": "assistant", "content": "", "tool_name": "weather", "tool_args": { "city": "Porto" } }
        ]}))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let seqs: Vec<i64> =
        b["messages"].as_array().unwrap().iter().map(|m| m["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    // An imported history starts when its first message was written, not when it was stored.
    let old = json!({ "user_id": "u", "messages": [
        { "role": "user", "content": "Hello from 2023.", "created_at": "2023-05-08T13:56:00Z" },
        { "role": "assistant", "content": "Hi!", "created_at": "2023-05-08T13:57:00Z" },
    ]});
    s.post("/v1/conversations/old/messages", old).await;
    let (_, c) = s.get("/v1/conversations/old").await;
    assert_eq!(c["created_at"], "2023-05-08T13:56:00Z", "{c}");
    let (st, _) = s.post("/v1/conversations/c1/messages", json!({ "user_id": "u", "messages": [{ "role": "user", "content": "Any good bakeries?" }] })).await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let (_, page) = s.get("/v1/conversations/c1/messages?limit=2").await;
    let got: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["I just moved to Porto.", "Welcome to Porto!"]);
    let after = page["next_after"].as_i64().unwrap();
    let (_, page) = s.get(&format!("/v1/conversations/c1/messages?after={after}&limit=10")).await;
    let msgs = page["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["tool_name"], "weather");
    assert_eq!(msgs[0]["tool_args"]["city"], "Porto");
    assert!(page["next_after"].is_null());
    // The conversation belongs to its user.
    assert_error(
        &s.post(
            "/v1/conversations/c1/messages",
            json!({ "user_id": "intruder", "messages": [{ "role": "user", "content": "hi" }] }),
        )
        .await,
        409,
        "conflict",
    );
    assert_error(&s.get("/v1/conversations/nope/messages").await, 404, "not_found");
    assert_error(
        &s.post("/v1/conversations/c1/messages", json!({ "user_id": "u", "messages": [] })).await,
        400,
        "invalid_input",
    );
    assert_error(
        &s.post(
            "/v1/conversations/c1/messages",
            json!({ "user_id": "u", "messages": [{ "role": "robot", "content": "x" }] }),
        )
        .await,
        400,
        "invalid_input",
    );
    // Messages are searchable by keyword.
    let (_, r) = s
        .post("/v1/search", json!({ "query": "bakeries", "user_id": "u", "sources": ["messages"] }))
        .await;
    assert_eq!(r["results"][0]["type"], "message");
    assert_eq!(r["results"][0]["message"]["content"], "Any good bakeries?");
}

async fn rating_a_reply_cascades_to_the_memories_recalled_for_its_turn(backend: Backend) {
    let s = Server::on(backend).await;
    let hallucinated = s.remember("u", "The user is vegetarian.").await;
    let other = s.remember("u", "The user works as a nurse.").await;
    // The agent recalls memories for turn t-42 …
    let (_, r) = s.post("/v1/search", json!({ "query": "what food does the user eat", "user_id": "u", "limit": 1, "turn_id": "t-42" })).await;
    assert_eq!(r["results"][0]["memory"]["id"], hallucinated.as_str());
    // … replies in that turn, and the user thumbs the reply down.
    let (_, b) = s
        .post("/v1/conversations/c/messages", json!({ "user_id": "u", "messages": [
            { "role": "assistant", "content": "Here is a vegetarian recipe.", "turn_id": "t-42" } ] }))
        .await;
    let msg = b["messages"][0]["id"].as_str().unwrap();
    let (st, rated) = s.post(&format!("/v1/messages/{msg}/rating"), json!({ "value": -1 })).await;
    assert_eq!(st, StatusCode::OK, "{rated}");
    assert_eq!(rated["rated_memories"], json!([hallucinated]));
    assert_eq!(rated["message"]["rating"], -1);
    let (_, m) = s.get(&format!("/v1/memories/{hallucinated}")).await;
    assert_eq!(m["rating"], -1);
    let (_, m) = s.get(&format!("/v1/memories/{other}")).await;
    assert_eq!(m["rating"], 0, "memories not recalled for the turn keep their rating");
    let (_, h) = s.get(&format!("/v1/memories/{hallucinated}/history")).await;
    assert!(
        h["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "rated" && e["detail"]["via_message"] == msg)
    );
    // A fact forgotten since its turn keeps its rating: the cascade skips it (found by a
    // tester, as for a direct rating of a forgotten fact).
    let (_, r) = s.post("/v1/search", json!({ "query": "what is the user's job", "user_id": "u", "limit": 1, "turn_id": "t-43" })).await;
    assert_eq!(r["results"][0]["memory"]["id"], other.as_str());
    let (_, b) = s
        .post(
            "/v1/conversations/c/messages",
            json!({ "user_id": "u", "messages": [
            { "role": "assistant", "content": "Night shifts again?", "turn_id": "t-43" } ] }),
        )
        .await;
    let reply = b["messages"][0]["id"].as_str().unwrap().to_string();
    let (st, _) = s.req("DELETE", &format!("/v1/memories/{other}"), None).await;
    assert!(st.is_success());
    let (st, rated) = s.post(&format!("/v1/messages/{reply}/rating"), json!({ "value": 1 })).await;
    assert_eq!(st, StatusCode::OK, "{rated}");
    assert_eq!(rated["rated_memories"], json!([]), "{rated}");
    let (_, m) = s.get(&format!("/v1/memories/{other}")).await;
    assert_eq!(m["rating"], 0, "{m}");
}

on_both_backends!(
    append_browse_and_ownership,
    rating_a_reply_cascades_to_the_memories_recalled_for_its_turn,
);
