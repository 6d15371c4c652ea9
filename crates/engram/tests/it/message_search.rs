//! Search over transcript messages: messages are embedded in the background with the
//! messages before them, found by meaning as well as by keyword, and `engram reembed`
//! embeds messages that have no vector.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Backend, Db, Server};

/// Wait until the background jobs have embedded every message of the tenant.
async fn wait_for_message_vectors(s: &Server, expected: u64) -> Value {
    let start = Instant::now();
    loop {
        let (_, st) = s.get("/v1/stats").await;
        if st["messages_with_vector"] == expected {
            return st;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "messages not embedded in 60 s: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The message hit with this content, if any.
fn message_hit<'a>(r: &'a Value, content: &str) -> Option<&'a Value> {
    r["results"].as_array().unwrap().iter().find(|h| h["message"]["content"] == content)
}

async fn messages_are_found_by_meaning_with_their_context(backend: Backend) {
    let s = Server::on(backend).await;
    let (st, b) = s
        .post(
            "/v1/conversations/trip/messages",
            json!({ "user_id": "u", "messages": [
                { "role": "assistant", "content": "Do you like hiking in the mountains?" },
                { "role": "user", "content": "Yes, definitely." },
                { "role": "assistant", "content": "Noted. Anything else?" },
                { "role": "user", "content": "My sister is visiting from Lisbon next week." }
            ]}),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    s.post(
        "/v1/conversations/other/messages",
        json!({ "user_id": "someone-else", "messages": [
            { "role": "user", "content": "I love long walks in the Alps." } ]}),
    )
    .await;
    let stats = wait_for_message_vectors(&s, 5).await;
    assert_eq!(stats["message_embedding_coverage"], 1.0, "{stats}");

    // No word in common: found by the vector list alone.
    let (st, r) = s
        .post(
            "/v1/search",
            json!({ "query": "family coming to stay", "user_id": "u", "sources": ["messages"], "explain": true }),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["results"][0]["type"], "message", "{r}");
    assert_eq!(
        r["results"][0]["message"]["content"],
        "My sister is visiting from Lisbon next week."
    );
    assert!(r["results"][0]["explain"]["vector_rank"].is_number(), "{r}");
    assert!(r["results"][0]["explain"]["text_rank"].is_null(), "{r}");

    // "Yes, definitely." alone means nothing; embedded after the question it answers, it is
    // about mountain hiking.
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "enjoys trekking in the mountains", "user_id": "u", "sources": ["messages"], "explain": true, "limit": 10 }),
        )
        .await;
    let yes = message_hit(&r, "Yes, definitely.").unwrap_or_else(|| panic!("{r:#}"));
    let sim = yes["explain"]["vector_similarity"].as_f64().unwrap();
    assert!(sim > 0.35, "similarity {sim}: the answer was embedded without its question");
    // Another user's messages are never searched.
    assert!(message_hit(&r, "I love long walks in the Alps.").is_none(), "{r}");

    // A keyword still finds its message.
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "Lisbon", "user_id": "u", "sources": ["messages"], "explain": true }),
        )
        .await;
    assert_eq!(
        r["results"][0]["message"]["content"],
        "My sister is visiting from Lisbon next week."
    );
    assert!(r["results"][0]["explain"]["text_rank"].is_number(), "{r}");

    // Erasing the user removes the messages, and so their vectors.
    let (st, _) = s.req("DELETE", "/v1/users/u", None).await;
    assert_eq!(st, 200);
    let (_, st) = s.get("/v1/stats").await;
    assert_eq!(st["messages_with_vector"], 1, "{st}");
}

async fn reembed_embeds_messages_that_have_no_vector(backend: Backend) {
    let db = Db::new(backend).await;
    {
        // No workers: the messages stay without vectors, as in a store written before
        // message embeddings existed.
        let s = db.serve(&["--no-workers"]);
        s.post(
            "/v1/conversations/c/messages",
            json!({ "user_id": "u", "messages": [
                { "role": "user", "content": "We adopted a puppy called Biscuit." },
                { "role": "user", "content": "The tax return is due in April." } ]}),
        )
        .await;
        let (_, st) = s.get("/v1/stats").await;
        assert_eq!(st["messages_with_vector"], 0, "{st}");
        assert_eq!(st["message_embedding_coverage"], 0.0, "{st}");
        // Found by keyword only meanwhile.
        let (_, r) = s
            .post(
                "/v1/search",
                json!({ "query": "new dog at home", "user_id": "u", "sources": ["messages"] }),
            )
            .await;
        assert!(message_hit(&r, "We adopted a puppy called Biscuit.").is_none(), "{r}");
    }
    let (ok, out, err) = db.cli(&["reembed"]);
    assert!(ok, "{err}");
    assert!(out.contains("re-embedded 0 memories and 2 messages"), "{out}");
    let (_, out, _) = db.cli(&["reembed"]);
    assert!(out.contains("re-embedded 0 memories and 0 messages"), "{out}");
    let s = db.serve(&["--no-workers"]);
    let (_, st) = s.get("/v1/stats").await;
    assert_eq!(st["messages_with_vector"], 2, "{st}");
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "new dog at home", "user_id": "u", "sources": ["messages"] }),
        )
        .await;
    assert_eq!(r["results"][0]["message"]["content"], "We adopted a puppy called Biscuit.", "{r}");
}

on_both_backends!(
    messages_are_found_by_meaning_with_their_context,
    reembed_embeds_messages_that_have_no_vector,
);
