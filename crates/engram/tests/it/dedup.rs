//! Dedup keeps what is new: a fact that embeds close to a stored one but says something else
//! (a changed number, a negation, other words) is added, never swallowed as a confirmation.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, Server};

async fn a_similar_fact_with_a_new_value_or_a_negation_is_added(backend: Backend) {
    let s = Server::on(backend).await;
    let budget = s.remember("u", "The user's grocery budget is 440 euros per month.").await;
    s.remember("u", "The user likes coffee.").await;
    for (content, why) in [
        ("The user's grocery budget is 1060 euros per month.", "a new amount"),
        ("The user does not like coffee.", "a negation"),
    ] {
        let (st, b) = s.post("/v1/memories", json!({ "content": content, "user_id": "u" })).await;
        assert_eq!((st, b["decision"].as_str()), (StatusCode::CREATED, Some("ADD")), "{why}: {b}");
    }
    // The restated original is still confirmed.
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "content": "The user's grocery budget is 440 euros per month", "user_id": "u" }),
        )
        .await;
    assert_eq!((st, b["decision"].as_str()), (StatusCode::OK, Some("NONE")), "{b}");
    assert_eq!(b["memory"]["id"], budget.as_str());
    let (_, list) = s.get("/v1/memories?user_id=u").await;
    assert_eq!(list["memories"].as_array().unwrap().len(), 4, "{list}");
}

on_both_backends!(a_similar_fact_with_a_new_value_or_a_negation_is_added);

/// Writes that race: parallel upserts of one profile key leave one active value (the others
/// superseded, in its history), parallel identical facts leave one fact mentioned once per
/// write, and a repeat inside one batch counts as a mention too.
async fn racing_writes_of_one_key_or_one_fact_store_one(backend: Backend) {
    use futures_util::future::join_all;
    let s = Server::on(backend).await;
    let upserts = (0..10).map(|i| {
        s.post(
            "/v1/memories",
            json!({ "content": format!("timezone UTC+{i}"), "user_id": "u", "kind": "profile", "key": "tz" }),
        )
    });
    for (st, b) in join_all(upserts).await {
        assert!(st.is_success(), "{st} {b}");
    }
    let (_, list) = s.get("/v1/memories?user_id=u").await;
    let active: Vec<&serde_json::Value> =
        list["memories"].as_array().unwrap().iter().filter(|m| m["key"] == "tz").collect();
    assert_eq!(active.len(), 1, "one active tz: {list}");
    let (_, all) = s.get("/v1/memories?user_id=u&include_superseded=true").await;
    assert_eq!(all["memories"].as_array().unwrap().len(), 10, "every value kept: {all}");

    let same = (0..8).map(|_| {
        s.post(
            "/v1/memories",
            json!({ "content": "The user keeps bees in the garden.", "user_id": "v" }),
        )
    });
    let answers = join_all(same).await;
    let added = answers.iter().filter(|(_, b)| b["decision"] == "ADD").count();
    assert_eq!(added, 1, "{answers:?}");
    let id = &answers.iter().find(|(_, b)| b["decision"] == "ADD").unwrap().1["memory"]["id"];
    assert!(answers.iter().all(|(_, b)| &b["memory"]["id"] == id), "{answers:?}");
    let (_, list) = s.get("/v1/memories?user_id=v").await;
    assert_eq!(list["memories"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["memories"][0]["mention_count"], 8, "{list}");

    let (st, b) = s
        .post(
            "/v1/memories/batch",
            json!({ "memories": [
                { "content": "The user plays the cello.", "user_id": "w" },
                { "content": "The user plays the cello.", "user_id": "w" },
            ] }),
        )
        .await;
    assert!(st.is_success(), "{b}");
    let (_, list) = s.get("/v1/memories?user_id=w").await;
    assert_eq!(list["memories"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["memories"][0]["mention_count"], 2, "{list}");
}

on_both_backends!(racing_writes_of_one_key_or_one_fact_store_one);

/// An expired fact is gone for writes too: the same profile value sent again after it
/// expired is stored again (not confirmed invisibly), and an edit of an expired fact must
/// say when the new version expires.
async fn an_expired_fact_is_written_again_not_confirmed(backend: Backend) {
    let s = Server::on(backend).await;
    let soon = (time::OffsetDateTime::now_utc() + time::Duration::seconds(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let profile = json!({ "content": "on call this week", "user_id": "u", "kind": "profile", "key": "duty", "expires_at": soon });
    let (st, first) = s.post("/v1/memories", profile).await;
    assert_eq!(st, StatusCode::CREATED, "{first}");
    let (st, fact) = s
        .post("/v1/memories", json!({ "content": "The user is travelling to Oslo.", "user_id": "u", "expires_at": soon }))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{fact}");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (st, again) = s
        .post("/v1/memories", json!({ "content": "on call this week", "user_id": "u", "kind": "profile", "key": "duty" }))
        .await;
    assert_eq!((st, again["decision"].as_str()), (StatusCode::CREATED, Some("UPDATE")), "{again}");
    let (_, list) = s.get("/v1/memories?user_id=u").await;
    let listed: Vec<&str> = list["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["on call this week"], "{list}");

    let path = format!("/v1/memories/{}", fact["memory"]["id"].as_str().unwrap());
    let got = s
        .req("PATCH", &path, Some(json!({ "content": "The user is travelling to Bergen." })))
        .await;
    crate::helpers::assert_error(&got, 409, "conflict");
    assert!(got.1["error"]["message"].as_str().unwrap().contains("expired"), "{got:?}");
    let (st, b) = s
        .req(
            "PATCH",
            &path,
            Some(json!({ "content": "The user is travelling to Bergen.", "expires_at": null })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(s.search("u", "Bergen").await, ["The user is travelling to Bergen."]);
}

on_both_backends!(an_expired_fact_is_written_again_not_confirmed);

/// A fact for the whole user that repeats one an agent keeps to itself is stored for the
/// whole user (found by a tester: it was "confirmed" into the agent's private copy, and no
/// other agent ever saw it); one agent repeating a user-wide fact confirms it.
async fn a_user_wide_fact_is_not_merged_into_an_agents_private_one(backend: Backend) {
    let s = Server::on(backend).await;
    let content = "The user has a premium support contract number PSC-991.";
    let (st, b) = s
        .post("/v1/memories", json!({ "content": content, "user_id": "u", "agent_id": "support" }))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    let private = b["memory"]["id"].clone();
    let (st, b) = s.post("/v1/memories", json!({ "content": content, "user_id": "u" })).await;
    assert_eq!((st, b["decision"].as_str()), (StatusCode::CREATED, Some("ADD")), "{b}");
    assert!(b["memory"]["agent_id"].is_null(), "{b}");
    let wide = b["memory"]["id"].clone();
    assert_ne!(wide, private);
    let (_, block) = s.post("/v1/context", json!({ "user_id": "u", "agent_id": "billing" })).await;
    assert!(block["text"].as_str().unwrap().contains("PSC-991"), "{block}");
    // Whoever sees both copies (the agent that keeps one, an admin) reads the fact once,
    // in a context block and in search results.
    for agent in [json!("support"), Value::Null] {
        let (_, block) =
            s.post("/v1/context", json!({ "user_id": "u", "agent_id": agent.clone() })).await;
        assert_eq!(block["text"].as_str().unwrap().matches("PSC-991").count(), 1, "{block}");
        let (_, r) = s
            .post(
                "/v1/search",
                json!({ "user_id": "u", "agent_id": agent, "query": "PSC-991 contract" }),
            )
            .await;
        let n = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["memory"]["content"] == content)
            .count();
        assert_eq!(n, 1, "{r}");
    }
    // Another agent's copy of it now confirms the user-wide fact, which it sees.
    let (st, b) = s
        .post("/v1/memories", json!({ "content": content, "user_id": "u", "agent_id": "sales" }))
        .await;
    assert_eq!((st, b["decision"].as_str()), (StatusCode::OK, Some("NONE")), "{b}");
    assert_eq!(b["memory"]["id"], wide, "{b}");
}

on_both_backends!(a_user_wide_fact_is_not_merged_into_an_agents_private_one);
