//! Search over transcript messages: messages are embedded in the background with the
//! messages before them, found by meaning as well as by keyword, and `engram reembed`
//! embeds messages that have no vector.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Backend, Db, Server, append_turns};

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
        // The backlog is visible: in the stats, in /metrics, and in an explained search.
        assert_eq!(st["backlog"]["embedding"]["messages"], 2, "{st}");
        assert!(st["backlog"]["embedding"]["oldest_seconds"].as_f64().unwrap() >= 0.0, "{st}");
        let metrics = s.get_text("/metrics").await;
        assert!(metrics.contains("\nengram_embedding_backlog_messages 2\n"), "{metrics}");
        let (_, r) = s
            .post(
                "/v1/search",
                json!({ "query": "tax return", "user_id": "u", "sources": ["messages"],
                        "explain": true }),
            )
            .await;
        assert_eq!(r["results"][0]["explain"]["unembedded_messages"], 2, "{r}");
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
    assert!(out.contains("re-embedded 0 memories, 2 messages and 0 summaries"), "{out}");
    let (_, out, _) = db.cli(&["reembed"]);
    assert!(out.contains("re-embedded 0 memories, 0 messages and 0 summaries"), "{out}");
    let s = db.serve(&["--no-workers"]);
    let (_, st) = s.get("/v1/stats").await;
    assert_eq!(st["messages_with_vector"], 2, "{st}");
    assert_eq!(st["backlog"]["embedding"]["messages"], 0, "{st}");
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "tax return", "user_id": "u", "sources": ["messages"],
                    "explain": true }),
        )
        .await;
    assert_eq!(r["results"][0]["explain"]["unembedded_messages"], 0, "{r}");
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "new dog at home", "user_id": "u", "sources": ["messages"] }),
        )
        .await;
    assert_eq!(r["results"][0]["message"]["content"], "We adopted a puppy called Biscuit.", "{r}");
}

async fn substring_and_regex_modes_find_literal_text_newest_first(backend: Backend) {
    let s = Server::on(backend).await;
    let day = |d: u32| format!("2024-03-{d:02}T10:00:00Z");
    let (st, b) = s
        .post(
            "/v1/conversations/ops/messages",
            json!({ "user_id": "u", "messages": [
                { "role": "user", "content": "Deploy of PROJ-1201 failed on staging.", "created_at": day(1) },
                { "role": "assistant", "content": "Rolled back proj-1201; logs attached.", "created_at": day(2) },
                { "role": "user", "content": "PROJ-77 is unrelated, ignore it.", "created_at": day(3) },
                { "role": "user", "content": "Retry PROJ-1305 after lunch (a+b)*c.", "created_at": day(4) }
            ]}),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    // Another user's identical text is never found.
    s.post(
        "/v1/conversations/other/messages",
        json!({ "user_id": "w", "messages": [{ "role": "user", "content": "PROJ-1201 again" }] }),
    )
    .await;
    let s = &s;
    let search = |body: Value| async move { s.post("/v1/search", body).await };
    let contents = |r: &Value| -> Vec<String> {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["message"]["content"].as_str().unwrap().to_string())
            .collect()
    };
    // substring: as written, case-insensitive, newest first, special characters literal.
    let (st, r) = search(json!({ "user_id": "u", "query": "proj-1201", "sources": ["messages"], "mode": "substring" })).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        contents(&r),
        ["Rolled back proj-1201; logs attached.", "Deploy of PROJ-1201 failed on staging."]
    );
    assert_eq!(r["results"][0]["score"], 1.0);
    let (_, r) = search(
        json!({ "user_id": "u", "query": "(a+b)*c", "sources": ["messages"], "mode": "substring" }),
    )
    .await;
    assert_eq!(contents(&r), ["Retry PROJ-1305 after lunch (a+b)*c."]);
    // regex: four-digit tickets only; with a window and a limit.
    let (_, r) = search(json!({ "user_id": "u", "query": r"proj-\d{4}\b", "sources": ["messages"], "mode": "regex" })).await;
    assert_eq!(contents(&r).len(), 3, "{r}");
    let (_, r) = search(json!({ "user_id": "u", "query": r"proj-\d{4}", "sources": ["messages"], "mode": "regex", "until": "2024-03-02", "limit": 1 })).await;
    assert_eq!(contents(&r), ["Rolled back proj-1201; logs attached."]);
    // Bad input: a pattern that does not compile, a mode for other sources, an unknown mode.
    let (st, r) = search(
        json!({ "user_id": "u", "query": "(unclosed", "sources": ["messages"], "mode": "regex" }),
    )
    .await;
    assert_eq!(st, 400, "{r}");
    assert_eq!(r["error"]["code"], "invalid_input");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("not a valid regular expression"),
        "{r}"
    );
    let (st, r) = search(json!({ "user_id": "u", "query": "x", "mode": "regex" })).await;
    assert_eq!(st, 400, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("messages only"), "{r}");
    let (st, r) =
        search(json!({ "user_id": "u", "query": "x", "sources": ["messages"], "mode": "grep" }))
            .await;
    assert_eq!(st, 400, "{r}");
    let long = "a".repeat(600);
    let (st, _) = search(
        json!({ "user_id": "u", "query": long, "sources": ["messages"], "mode": "substring" }),
    )
    .await;
    assert_eq!(st, 400);
    // fts is the ranked search.
    let (st, r) = search(json!({ "user_id": "u", "query": "staging deploy", "sources": ["messages"], "mode": "fts" })).await;
    assert_eq!(st, 200);
    assert_eq!(contents(&r)[0], "Deploy of PROJ-1201 failed on staging.");
}

/// `POST /v1/search` of `user`'s messages with `explain`: the response body.
async fn explained_messages(s: &Server, user: &str, query: &str) -> Value {
    let body = json!({ "query": query, "user_id": user, "sources": ["messages"], "explain": true });
    s.post("/v1/search", body).await.1
}

/// A transcript of several people names its speakers (`Name: text`); a question about one of
/// them ranks what that person said ahead of what others said about the same thing.
async fn a_query_naming_a_speaker_ranks_what_they_said_first(backend: Backend) {
    let s = Server::on(backend).await;
    let turns = [
        "John: Maria, hiking is my favourite thing: I went hiking on a mountain trail, what a hike.",
        "Maria: After the bake sale and the school meeting, we also went hiking for an hour.",
        "John: The bake sale raised a lot for the school.",
        "Maria: The meeting ran late, as always.",
        "John: Next week I start my new job at the bank.",
        "Maria: Good luck with the new job, John!",
    ];
    append_turns(&s, "u", &turns).await;
    wait_for_message_vectors(&s, 6).await;
    let search = |query: &'static str| explained_messages(&s, "u", query);
    // Nobody named: John's message says more about hiking (and even names Maria) and comes
    // first.
    let r = search("Who went hiking?").await;
    assert_eq!(r["results"][0]["message"]["content"], turns[0], "{r:#}");
    assert_eq!(r["results"][0]["explain"]["speaker_weight"], 1.0, "{r:#}");
    // Maria named: her message leads, and explain says why; also when the query names a
    // time, whose words leave the keyword query.
    for q in ["Did Maria go hiking?", "Did Maria go hiking last week?"] {
        let r = search(q).await;
        assert_eq!(r["results"][0]["message"]["content"], turns[1], "{q}: {r:#}");
        assert_eq!(r["results"][0]["explain"]["speaker_weight"], 2.0, "{q}: {r:#}");
    }
    let r = search("Did Maria go hiking?").await;
    let john = message_hit(&r, turns[0]).unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(john["explain"]["speaker_weight"], 1.0, "{r:#}");
    // The order is the fused rank times the speaker's weight; the relevance (`score`, what
    // `min_score` reads) does not depend on it.
    let e = &r["results"][0]["explain"];
    let f = |k: &str| e[k].as_f64().unwrap();
    let expected =
        f("rrf") * f("temporal_weight") * f("importance_weight") * f("rating_weight") * 2.0;
    assert!((f("rank_score") - expected).abs() < 1e-12, "{r:#}");
    assert_eq!(r["results"][0]["score"], e["relevance"], "{r:#}");
}

/// A name in a query says whom it asks about, not what: the transcript's vectors are searched
/// mostly without the names of the user's speakers, and `explain.speakers` says so. Names
/// that are nobody's speaker stay in the query.
async fn a_query_naming_speakers_searches_by_meaning_without_the_names(backend: Backend) {
    let s = Server::on(backend).await;
    let turns = [
        "Maria: Where was I? Maria went out, Maria is back now.",
        "John: Welcome back!",
        "Maria: I finally climbed the big mountain trail last weekend.",
        "John: Wow, how long did it take you?",
    ];
    append_turns(&s, "u", &turns).await;
    // Another user's transcript has no speakers.
    let plain = json!({ "user_id": "v", "messages": [
        { "role": "user", "content": "I finally climbed the big mountain trail last weekend." } ]});
    s.post("/v1/conversations/solo/messages", plain).await;
    wait_for_message_vectors(&s, 5).await;
    let r = explained_messages(&s, "u", "Where did Maria go hiking?").await;
    // By meaning, the hike leads: the message that only names Maria three times does not.
    // (Fused, the two tie at worst: that one leads the keyword list on the name, when the
    // name is rare enough in the store to stay in the keyword query.)
    let results = r["results"].as_array().unwrap();
    let hike = results.iter().find(|h| h["message"]["content"] == turns[2]).expect("the hike");
    assert_eq!(hike["explain"]["vector_rank"], 1, "{r:#}");
    let best = results[0]["explain"]["rank_score"].as_f64().unwrap();
    assert_eq!(hike["explain"]["rank_score"].as_f64(), Some(best), "{r:#}");
    for hit in results {
        let how = hit["explain"]["speakers"].as_str().unwrap_or_else(|| panic!("{r:#}"));
        assert!(how.contains("\"Where did go hiking?\""), "{how}");
    }
    // A name is written with a capital: in lower case, "maria" is a word like any other.
    let r = explained_messages(&s, "u", "where did maria go hiking?").await;
    assert!(r["results"][0]["explain"].get("speakers").is_none(), "{r:#}");
    assert_eq!(r["results"][0]["explain"]["speaker_weight"], 1.0, "{r:#}");
    // Not a speaker of this user: the name stays, and nothing is said.
    let r = explained_messages(&s, "u", "Where did Lisa go hiking?").await;
    assert!(!r["results"].as_array().unwrap().is_empty(), "{r:#}");
    assert!(r["results"][0]["explain"].get("speakers").is_none(), "{r:#}");
    // Maria is u's speaker, not v's.
    let r = explained_messages(&s, "v", "Where did Maria go hiking?").await;
    assert_eq!(r["results"][0]["message"]["content"], turns[2].trim_start_matches("Maria: "));
    assert!(r["results"][0]["explain"].get("speakers").is_none(), "{r:#}");
    // Memories are searched with the query as written.
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "Where did Maria go hiking?", "user_id": "u", "explain": true }),
        )
        .await;
    assert!(
        r["results"].as_array().unwrap().iter().all(|h| h["explain"].get("speakers").is_none())
    );
}

/// The speakers search reads come from every conversation of the user; an agent key that
/// may read only its pool's conversations searches with the query as written, so nothing of
/// another pool's transcript (whose names are speakers there) shows through.
async fn speaker_names_of_other_pools_stay_out_of_an_agents_search(backend: Backend) {
    let db = Db::new(backend).await;
    let key = |args: &[&str]| crate::helpers::create_key(&db, args);
    let admin = key(&["--tenant", "acme", "--role", "admin"]);
    let a1 = key(&["--tenant", "acme", "--role", "agent", "--agent", "a1"]);
    let s = db.serve(&[]);
    let adm = s.with_key(&admin);
    for a in ["a1", "a2"] {
        let (st, r) = adm.req("PUT", &format!("/v1/agents/{a}"), Some(json!({}))).await;
        assert_eq!(st.as_u16(), 200, "{r}");
    }
    for (conv, agent, text, at) in [
        (
            "mine",
            "a1",
            "I finally climbed the big mountain trail last weekend.",
            "2024-09-08T10:00:00Z",
        ),
        (
            "theirs",
            "a2",
            "Lisa: the hiking club meets on Sundays for a trail climb.",
            "2024-09-10T10:00:00Z",
        ),
    ] {
        let b = json!({ "user_id": "u", "agent_id": agent,
            "messages": [{ "role": "user", "content": text, "created_at": at }] });
        let (st, r) = adm.post(&format!("/v1/conversations/{conv}/messages"), b).await;
        assert_eq!(st.as_u16(), 202, "{r}");
    }
    let start = Instant::now();
    while adm.get("/v1/stats").await.1["messages_with_vector"] != 2 {
        assert!(start.elapsed() < Duration::from_secs(60), "messages not embedded in 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let q = json!({ "user_id": "u", "query": "Where did Lisa go hiking?", "sources": ["messages"], "explain": true });
    // The admin sees both conversations: Lisa is a speaker, and explain says so.
    let (_, r) = adm.post("/v1/search", q.clone()).await;
    assert!(r["results"][0]["explain"]["speakers"].is_string(), "{r:#}");
    // a1 sees only its own conversation: the query is searched as written.
    let (st, r) = s.with_key(&a1).post("/v1/search", q).await;
    assert_eq!(st.as_u16(), 200, "{r}");
    let results = r["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{r:#}");
    for h in results {
        assert_eq!(h["message"]["conversation_id"], "mine", "{r:#}");
        assert!(h["explain"].get("speakers").is_none(), "{r:#}");
    }
    assert!(!r.to_string().contains("Lisa:"), "{r}");
    // Nor does another pool's transcript count in a rank explain shows (a tester read the
    // ranks to test words against it), or name the "now" of a relative time.
    let q = json!({ "user_id": "u", "query": "trail climb hiking club", "sources": ["messages"],
        "explain": true, "min_score": 0 });
    let (_, r) = s.with_key(&a1).post("/v1/search", q).await;
    assert_eq!(r["results"].as_array().unwrap().len(), 1, "{r:#}");
    let e = &r["results"][0]["explain"];
    assert_eq!((&e["vector_rank"], &e["text_rank"]), (&json!(1), &json!(1)), "{r:#}");
    let q = json!({ "user_id": "u", "query": "what did I climb last week?", "sources": ["messages"],
        "explain": true, "min_score": 0 });
    let (_, r) = s.with_key(&a1).post("/v1/search", q.clone()).await;
    let time = r["results"][0]["explain"]["time"].as_str().unwrap_or_default().to_string();
    assert!(time.contains("2024-09-08") && !time.contains("2024-09-10"), "{r:#}");
    let (_, r) = adm.post("/v1/search", q).await;
    let time = r["results"][0]["explain"]["time"].as_str().unwrap_or_default().to_string();
    assert!(time.contains("latest message, 2024-09-10"), "the admin's now is the user's: {r:#}");
}

on_both_backends!(
    substring_and_regex_modes_find_literal_text_newest_first,
    messages_are_found_by_meaning_with_their_context,
    reembed_embeds_messages_that_have_no_vector,
    a_query_naming_a_speaker_ranks_what_they_said_first,
    a_query_naming_speakers_searches_by_meaning_without_the_names,
    speaker_names_of_other_pools_stay_out_of_an_agents_search,
);
