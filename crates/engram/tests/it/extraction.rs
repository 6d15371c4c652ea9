//! Automatic extraction through the REST API with a scripted LLM (SPEC §2): supersession,
//! the rolling summary, language, absolute dates, dedup without an LLM call, PII, the
//! memory switch, the cursor, and faults (LLM down, 429, 500, malformed output, invented
//! ids, kill -9 in the middle of a batch).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Match, Rule, ScriptedLlm};

use crate::helpers::{Backend, Db, Server, contents};

const EXTRACT: &str = "memory extraction system";
const CONSOLIDATE: &str = "memory consolidation system";

/// A server whose LLM is the scripted one; short leases and backoff so faults resolve fast.
pub(crate) fn start(db: &Db, llm: &ScriptedLlm, extra: &[&str]) -> Server {
    let mut args = llm_flags(llm);
    args.extend(extra.iter().map(|a| a.to_string()));
    db.serve(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The `serve` flags that make `llm` engram's LLM, with short leases and backoff.
pub(crate) fn llm_flags(llm: &ScriptedLlm) -> Vec<String> {
    let base = llm.base_url();
    [
        "--llm-provider",
        "openai",
        "--llm-base-url",
        &base,
        "--llm-model",
        "main-model",
        "--llm-fast-model",
        "fast-model",
        "--llm-timeout-secs",
        "5",
        "--job-backoff-ms",
        "200",
        "--job-lease-secs",
        "3",
    ]
    .map(str::to_string)
    .to_vec()
}

async fn append(s: &Server, conv: &str, user: &str, msgs: Value) -> StatusCode {
    let (st, b) = s
        .post(
            &format!("/v1/conversations/{conv}/messages"),
            json!({ "user_id": user, "messages": msgs }),
        )
        .await;
    assert!(st == StatusCode::ACCEPTED || st.is_client_error(), "{b}");
    st
}

/// Wait until the job queue of the tenant is drained (no pending or running jobs).
async fn drained(s: &Server) -> Value {
    crate::helpers::drained(&s.as_client()).await
}

async fn active(s: &Server, user: &str) -> Vec<Value> {
    let (_, b) = s.get(&format!("/v1/memories?user_id={user}")).await;
    b["memories"].as_array().unwrap().clone()
}

fn facts(v: &[Value]) -> Vec<String> {
    let mut f: Vec<String> = v.iter().map(|m| m["content"].as_str().unwrap().to_string()).collect();
    f.sort();
    f
}

async fn a_changed_fact_supersedes_the_old_one_across_sessions(backend: Backend) {
    // Rules are tried newest first; catch-alls go in `set_default`.
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("I use Postgres")).reply(
        r#"[{"content": "The user uses Postgres for their projects.", "category": "fact", "importance": 6}]"#,
    ));
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("switched to SQLite")).reply(
        r#"[{"content": "The user switched from Postgres to SQLite for their projects.", "category": "decision", "importance": 7}]"#,
    ));
    llm.on(
        Rule::system_contains(CONSOLIDATE).reply(r#"[{"fact": 1, "decision": "UPDATE", "id": 1}]"#)
    );
    let db = Db::new(backend).await;
    let s = start(&db, &llm, &[]);
    append(&s, "session-1", "dev", json!([{ "role": "user", "content": "I use Postgres for all my projects." }, { "role": "assistant", "content": "Great choice." }])).await;
    drained(&s).await;
    let first = active(&s, "dev").await;
    assert_eq!(facts(&first), ["The user uses Postgres for their projects."]);
    assert_eq!(first[0]["source"]["kind"], "conversation");
    assert_eq!(first[0]["source"]["conversation_id"], "session-1");

    append(
        &s,
        "session-2",
        "dev",
        json!([{ "role": "user", "content": "By the way, we switched to SQLite last month." }]),
    )
    .await;
    drained(&s).await;
    let now = active(&s, "dev").await;
    assert_eq!(facts(&now), ["The user switched from Postgres to SQLite for their projects."]);
    let new_id = now[0]["id"].as_str().unwrap();
    let old_id = first[0]["id"].as_str().unwrap();
    let (_, old) = s.get(&format!("/v1/memories/{old_id}")).await;
    assert_eq!(old["superseded_by"], new_id);
    let (_, h) = s.get(&format!("/v1/memories/{new_id}/history")).await;
    assert_eq!(h["chain"].as_array().unwrap().len(), 2);
    // The consolidator saw short ids, never real ones.
    let c = llm.calls_matching(&Match::any().system_contains(CONSOLIDATE));
    assert_eq!(c.len(), 1);
    let prompt = c[0].full_text();
    assert!(prompt.contains("[1] The user uses Postgres for their projects."), "{prompt}");
    assert!(!prompt.contains(old_id), "real ids must not reach the LLM");
    // Models per tier.
    assert!(
        llm.calls_matching(&Match::any().system_contains(EXTRACT))
            .iter()
            .all(|r| r.body["model"] == "fast-model")
    );
    assert_eq!(c[0].body["model"], "main-model");
}

async fn prompts_carry_the_date_the_rules_and_only_the_new_slice(backend: Backend) {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("dentist tomorrow")).reply(
        r#"[{"content": "The user has a dentist appointment on 2026-02-23.", "category": "event", "importance": 5}]"#,
    ));
    llm.set_default(Rule::system_contains(EXTRACT).reply("[]"));
    let db = Db::new(backend).await;
    let s = start(&db, &llm, &[]);
    append(&s, "c", "u", json!([{ "role": "user", "content": "I have the dentist tomorrow at 9.", "created_at": "2026-02-22T08:00:00Z" },
                                { "role": "assistant", "content": "Good luck!", "created_at": "2026-02-22T08:00:01Z" }])).await;
    drained(&s).await;
    let m = active(&s, "u").await;
    assert_eq!(facts(&m), ["The user has a dentist appointment on 2026-02-23."]);
    assert_eq!(m[0]["observed_at"], "2026-02-22T08:00:01Z");
    let calls = llm.calls_matching(&Match::any().system_contains(EXTRACT));
    let sys = calls[0].system.clone();
    assert!(sys.contains("TODAY'S DATE: 2026-02-22 (Sunday)"), "{sys}");
    assert!(
        sys.contains("SAME LANGUAGE") && sys.contains("relative dates to absolute dates"),
        "{sys}"
    );
    let user = calls[0].full_text();
    assert!(
        user.contains("User: I have the dentist tomorrow at 9.")
            && user.contains("Assistant: Good luck!"),
        "{user}"
    );

    // The next turn: only what follows the cursor is sent.
    append(&s, "c", "u", json!([{ "role": "user", "content": "Also, my cat is called Miso." }]))
        .await;
    drained(&s).await;
    let calls = llm.calls_matching(&Match::any().system_contains(EXTRACT));
    assert_eq!(calls.len(), 2);
    let second = calls[1].full_text();
    assert!(second.contains("my cat is called Miso") && !second.contains("dentist"), "{second}");
    // Only assistant text after the cursor: no extraction call at all.
    append(&s, "c", "u", json!([{ "role": "assistant", "content": "Miso is a lovely name." }]))
        .await;
    drained(&s).await;
    assert_eq!(llm.calls_matching(&Match::any().system_contains(EXTRACT)).len(), 2);
}

async fn restated_facts_cost_no_consolidation_call_and_pii_is_redacted(backend: Backend) {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("card")).reply(
        r#"[{"content": "The user's card number is 4111 1111 1111 1111.", "category": "fact", "importance": 3}]"#,
    ));
    llm.set_default(Rule::system_contains(EXTRACT).reply(
        r#"```json
[{"content": "The user is allergic to peanuts.", "category": "fact", "importance": "9"}]
```"#,
    ));
    let db = Db::new(backend).await;
    let s = start(&db, &llm, &[]);
    append(&s, "c1", "u", json!([{ "role": "user", "content": "I'm allergic to peanuts." }])).await;
    drained(&s).await;
    append(
        &s,
        "c2",
        "u",
        json!([{ "role": "user", "content": "Remember, peanuts are a no-go for me." }]),
    )
    .await;
    drained(&s).await;
    let m = active(&s, "u").await;
    assert_eq!(facts(&m), ["The user is allergic to peanuts."]);
    assert_eq!(m[0]["mention_count"], 2);
    assert_eq!(m[0]["importance"], 9);
    assert_eq!(
        llm.calls_matching(&Match::any().system_contains(CONSOLIDATE)).len(),
        0,
        "a near-duplicate needs no LLM judgement"
    );
    llm.on(Rule::system_contains(CONSOLIDATE).reply(r#"[{"fact": 1, "decision": "ADD"}]"#));
    append(
        &s,
        "c3",
        "u",
        json!([{ "role": "user", "content": "Pay with my card 4111 1111 1111 1111 please." }]),
    )
    .await;
    drained(&s).await;
    let all = facts(&active(&s, "u").await);
    assert!(all.contains(&"The user's card number is [REDACTED:card].".to_string()), "{all:?}");
    assert!(!all.iter().any(|f| f.contains("4111")));
}

/// Several conversations of one user, extracted at the same time by the server's workers,
/// that all state one fact: it is added once and mentioned once per conversation (each
/// worker judged against the neighbours the one before it had written).
async fn concurrent_conversations_of_one_user_add_a_fact_once(backend: Backend) {
    let llm = ScriptedLlm::start().await;
    llm.set_default(Rule::system_contains(EXTRACT).delay(Duration::from_millis(300)).reply(
        r#"[{"content": "The user is allergic to peanuts.", "category": "fact", "importance": 9}]"#,
    ));
    llm.on(Rule::system_contains(CONSOLIDATE).reply(r#"[{"fact": 1, "decision": "ADD"}]"#));
    let db = Db::new(backend).await;
    let s = start(&db, &llm, &[]);
    let appends = (0..6).map(|i| {
        let msgs = json!([{ "role": "user", "content": format!("Peanuts make me ill ({i}).") }]);
        append(&s, Box::leak(format!("c{i}").into_boxed_str()), "u", msgs)
    });
    futures_util::future::join_all(appends).await;
    drained(&s).await;
    let m = active(&s, "u").await;
    assert_eq!(facts(&m), ["The user is allergic to peanuts."], "{m:?}");
    assert_eq!(m[0]["mention_count"], 6, "{m:?}");
}

async fn italian_conversations_and_the_rolling_summary(backend: Backend) {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains("rolling summary").reply(
        "The assistant offered two plans: the Basic plan at 10 EUR per month (the earlier option) and the Pro plan at 25 EUR per month.",
    ));
    llm.on(Rule::system_contains(EXTRACT)
        .and(Match::any().user_contains("Basic plan at 10 EUR"))
        .and(Match::any().user_contains("the earlier option"))
        .reply(r#"[{"content": "The user chose the Basic plan at 10 EUR per month.", "category": "decision", "importance": 6}]"#));
    llm.on(Rule::system_contains(EXTRACT)
        .and(Match::any().user_contains("Vivo a Milano"))
        .reply(r#"[{"content": "L'utente vive a Milano.", "category": "fact", "importance": 6}]"#));
    llm.set_default(Rule::system_contains(EXTRACT).reply("[]"));
    let db = Db::new(backend).await;
    let s = start(&db, &llm, &[]);
    append(
        &s,
        "it",
        "giulia",
        json!([{ "role": "user", "content": "Ciao! Vivo a Milano da tre anni." }]),
    )
    .await;
    drained(&s).await;
    assert_eq!(facts(&active(&s, "giulia").await), ["L'utente vive a Milano."]);
    let (_, r) = s
        .post("/v1/search", json!({ "query": "dove vive l'utente? Milano", "user_id": "giulia" }))
        .await;
    assert_eq!(contents(&r), ["L'utente vive a Milano."]);

    // Ten user turns → a rolling summary is made; the short reply is resolved through it.
    let mut turns = Vec::new();
    for i in 0..10 {
        turns.push(json!({ "role": "user", "content": format!("Question {i} about the plans.") }));
        turns.push(
            json!({ "role": "assistant", "content": "We have Basic at 10 EUR and Pro at 25 EUR." }),
        );
    }
    append(&s, "plans", "bob", json!(turns)).await;
    drained(&s).await;
    assert_eq!(llm.calls_matching(&Match::any().system_contains("rolling summary")).len(), 1);
    // The rolling summary is readable with the conversation.
    let (st, c) = s.get("/v1/conversations/plans").await;
    assert_eq!(st, StatusCode::OK, "{c}");
    assert_eq!(c["user_id"], "bob");
    assert_eq!(c["message_count"], 20);
    assert_eq!(c["summarized_user_turns"], 10, "{c}");
    assert!(c["rolling_summary"].as_str().unwrap().contains("Basic plan at 10 EUR"), "{c}");
    // ... and in the user's GDPR export (found by a tester: it was left out).
    let (_, x) = s.get("/v1/users/bob/export").await;
    let plans = x["conversations"].as_array().unwrap().iter().find(|c| c["id"] == "plans");
    let plans = plans.unwrap_or_else(|| panic!("{x}"));
    assert_eq!(plans["rolling_summary"], c["rolling_summary"], "{x}");
    assert_eq!(plans["message_count"], 20);
    let (_, c) = s.get("/v1/conversations/it").await;
    assert_eq!((c["message_count"].as_i64(), c["rolling_summary"].is_null()), (Some(1), true));
    crate::helpers::assert_error(&s.get("/v1/conversations/nope").await, 404, "not_found");
    append(
        &s,
        "plans",
        "bob",
        json!([{ "role": "user", "content": "Yes, that one — the earlier option." }]),
    )
    .await;
    drained(&s).await;
    assert_eq!(
        facts(&active(&s, "bob").await),
        ["The user chose the Basic plan at 10 EUR per month."]
    );
    // Session end: a final extraction and a fresh summary.
    let (st, b) = s.post("/v1/conversations/plans/end", json!({})).await;
    assert_eq!((st, b["queued"].as_bool()), (StatusCode::ACCEPTED, Some(true)), "{b}");
    drained(&s).await;
    assert_eq!(llm.calls_matching(&Match::any().system_contains("rolling summary")).len(), 2);
    crate::helpers::assert_error(
        &s.post("/v1/conversations/nope/end", json!({})).await,
        404,
        "not_found",
    );
    let last =
        llm.calls_matching(&Match::any().system_contains(EXTRACT)).pop().unwrap().full_text();
    assert!(last.contains("Conversation summary so far:"), "{last}");
}

async fn memory_disabled_makes_no_llm_call_and_tool_calls_get_described(backend: Backend) {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains("ONE short past-tense sentence")
        .reply("Looked up the weather in Porto with the weather tool."));
    llm.set_default(Rule::system_contains(EXTRACT).reply("[]"));
    let db = Db::new(backend).await;
    let s = start(&db, &llm, &[]);
    let (st, _) = s.req("PUT", "/v1/agents/quiet", Some(json!({ "memory_enabled": false }))).await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = s
        .post("/v1/conversations/q/messages", json!({ "user_id": "u", "agent_id": "quiet", "messages": [{ "role": "user", "content": "I love sailing." }] }))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let stats = drained(&s).await;
    // No extraction job; the transcript is still embedded for message search.
    assert_eq!(stats["extractions_done"], 0, "{stats}");
    assert_eq!(stats["jobs_done"], 1, "only the message embedding: {stats}");
    assert_eq!(stats["messages_with_vector"], 1, "{stats}");
    assert_eq!(llm.request_count(), 0);

    let (_, b) = s
        .post("/v1/conversations/t/messages", json!({ "user_id": "u", "messages": [
            { "role": "assistant", "content": "", "tool_name": "weather", "tool_args": { "city": "Porto" } } ] }))
        .await;
    let id = b["messages"][0]["id"].as_str().unwrap().to_string();
    drained(&s).await;
    let (_, page) = s.get("/v1/conversations/t/messages").await;
    assert_eq!(page["messages"][0]["id"], id.as_str());
    assert_eq!(
        page["messages"][0]["content"],
        "Looked up the weather in Porto with the weather tool."
    );
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "query": "weather Porto", "user_id": "u", "sources": ["messages"] }),
        )
        .await;
    assert_eq!(r["results"][0]["message"]["id"], id.as_str());
    // Per-agent models: this agent's extraction uses its own fast model.
    let (st, b) = s
        .req(
            "PUT",
            "/v1/agents/own",
            Some(json!({ "settings": { "llm": { "fast_model": "agent-fast" } } })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let r = s
        .req("PUT", "/v1/agents/bad", Some(json!({ "settings": { "llm": { "model": 7 } } })))
        .await;
    crate::helpers::assert_error(&r, 400, "invalid_input");
    s.post("/v1/conversations/o/messages", json!({ "user_id": "u", "agent_id": "own", "messages": [{ "role": "user", "content": "I own a kayak." }] })).await;
    drained(&s).await;
    let calls = llm.calls_matching(&Match::any().system_contains(EXTRACT));
    assert_eq!(calls.last().unwrap().body["model"], "agent-fast");
    let (_, st) = s.get("/v1/stats").await;
    assert_eq!(st["extraction"]["enabled"], true);
}

async fn faults_retry_then_fail_visibly_and_write_nothing(backend: Backend) {
    let llm = ScriptedLlm::start().await;
    // Malformed output every time.
    llm.on(Rule::system_contains(EXTRACT)
        .and(Match::any().user_contains("garbage"))
        .reply("I think the user likes {{ cheese"));
    // An invented id in consolidation.
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("invent")).reply(
        r#"[{"content": "The user moved to Berlin in 2025.", "category": "event", "importance": 6}]"#,
    ));
    llm.on(Rule::system_contains(CONSOLIDATE)
        .and(Match::any().user_contains("Berlin"))
        .reply(r#"[{"fact": 1, "decision": "UPDATE", "id": 42}]"#));
    llm.on(Rule::system_contains(CONSOLIDATE)
        .and(Match::any().user_contains("drums"))
        .reply(r#"[{"fact": 1, "decision": "ADD"}]"#));
    // Issue 10: prose whose only JSON is `[1]` is garbage, never "add everything".
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("Hamburg")).reply(
        r#"[{"content": "The user moved from Munich to Hamburg in 2026.", "category": "event", "importance": 6}]"#,
    ));
    llm.on(Rule::system_contains(CONSOLIDATE)
        .and(Match::any().user_contains("Hamburg"))
        .reply("I think fact 1 is an UPDATE of [1]"));
    // Transient trouble, then an answer.
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("flaky")).reply(
        r#"[{"content": "The user plays the drums.", "category": "fact", "importance": 4}]"#,
    ));
    llm.on(Rule::system_contains(EXTRACT)
        .and(Match::any().user_contains("flaky"))
        .status(429)
        .retry_after(1)
        .times(1));
    llm.on(Rule::system_contains(EXTRACT)
        .and(Match::any().user_contains("flaky"))
        .status(500)
        .times(1));
    let db = Db::new(backend).await;
    let mut s = start(&db, &llm, &[]);
    s.remember("u", "The user lives in Munich.").await;

    append(&s, "g", "u", json!([{ "role": "user", "content": "garbage please" }])).await;
    append(
        &s,
        "i",
        "u",
        json!([{ "role": "user", "content": "invent an id: I moved to Berlin in 2025" }]),
    )
    .await;
    append(&s, "f", "u", json!([{ "role": "user", "content": "flaky: I play the drums" }])).await;
    append(&s, "h", "u", json!([{ "role": "user", "content": "I moved from Munich to Hamburg" }]))
        .await;
    let stats = drained(&s).await;
    assert_eq!(stats["extraction"]["failed"], 3, "{stats}");
    assert_eq!(
        facts(&active(&s, "u").await),
        ["The user lives in Munich.", "The user plays the drums."]
    );
    // Each failed job was tried three times.
    assert_eq!(llm.calls_matching(&Match::any().user_contains("garbage")).len(), 3);
    for city in ["Berlin", "Hamburg"] {
        assert_eq!(
            llm.calls_matching(&Match::any().system_contains(CONSOLIDATE).user_contains(city))
                .len(),
            3,
            "{city}"
        );
    }
    // The failures are listed with their reason, and can be re-run.
    let (ok, out, _) = db.cli(&["jobs", "list", "--status", "failed", "--json"]);
    assert!(ok);
    let jobs: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(
        jobs.iter().any(|j| j["last_error"].as_str().unwrap().contains("never shown")),
        "{jobs:?}"
    );
    assert!(
        jobs.iter().any(|j| j["last_error"].as_str().unwrap().contains("not a list of decisions")),
        "{jobs:?}"
    );
    assert!(jobs.iter().all(|j| j["attempts"] == 3));

    // Finished jobs are deleted once they are older than the retention window
    // (`--job-retention-secs`, 0 keeps them); the failed ones stay, whatever their age.
    let done = stats["jobs_done"].as_u64().unwrap();
    assert!(done >= 5, "an extraction and an embedding per conversation at least: {stats}");
    assert!(stats["extraction"]["last_success_at"].is_string(), "{stats}");
    assert!(s.terminate());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut kept = start(&db, &llm, &["--job-retention-secs", "0"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(drained(&kept).await["jobs_done"], done, "0 keeps finished jobs");
    assert!(kept.terminate());
    let s = start(&db, &llm, &["--job-retention-secs", "1"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let stats = drained(&s).await;
        if stats["jobs_done"] == 0 {
            break stats;
        }
        assert!(std::time::Instant::now() < deadline, "finished jobs never deleted: {stats}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (stats["jobs_failed"].as_u64(), stats["extraction"]["failed"].as_u64()),
        (Some(3), Some(3))
    );
    assert!(stats["extraction"]["last_success_at"].is_null(), "none on record: {stats}");
    let (ok, out, _) = db.cli(&["jobs", "list", "--json"]);
    assert!(ok);
    let jobs: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(jobs.len(), 3, "only the failed jobs are left: {jobs:?}");
    assert!(jobs.iter().all(|j| j["status"] == "failed"), "{jobs:?}");
    // What the jobs did stays: the facts, and the messages they made searchable.
    assert_eq!(
        facts(&active(&s, "u").await),
        ["The user lives in Munich.", "The user plays the drums."]
    );
    let (_, found) = s
        .post("/v1/search", json!({"user_id": "u", "query": "drums", "sources": ["messages"]}))
        .await;
    let said = |r: &Value| r["message"]["content"].as_str().map(str::to_string);
    assert!(
        found["results"].as_array().unwrap().iter().filter_map(said).any(|c| c.contains("drums")),
        "the message is still searchable: {found}"
    );
}

async fn the_client_never_waits_for_a_hanging_llm_and_kill_9_mid_batch_reruns_once(
    backend: Backend,
) {
    let llm = ScriptedLlm::start().await;
    let hang = llm.on(Rule::system_contains(EXTRACT).hang());
    let db = Db::new(backend).await;
    let mut s = start(&db, &llm, &[]);
    let t = std::time::Instant::now();
    append(
        &s,
        "k",
        "u",
        json!([{ "role": "user", "content": "I work as a pilot for a small airline." }]),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(3), "append waited for the LLM: {:?}", t.elapsed());
    llm.wait_for(&Match::any().system_contains(EXTRACT), 1, Duration::from_secs(20)).await;
    // Kill the server while the job is in the LLM call.
    s.kill9();
    drop(s);
    llm.remove(&hang);
    llm.on(Rule::system_contains(EXTRACT).reply(
        r#"[{"content": "The user works as a pilot.", "category": "fact", "importance": 7}]"#,
    ));
    let s = start(&db, &llm, &[]);
    // The lease (3 s) expires, the job runs again and its facts exist exactly once.
    for _ in 0..1200 {
        if !active(&s, "u").await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drained(&s).await;
    assert_eq!(facts(&active(&s, "u").await), ["The user works as a pilot."]);
    let (_, st) = s.get("/v1/stats").await;
    assert_eq!(st["memories_active"], 1);
}

async fn backfill_describes_old_tool_calls_once(backend: Backend) {
    let db = Db::new(backend).await;
    // Stored while no LLM was configured: nothing is queued.
    {
        let s = db.serve(&[]);
        let (st, _) = s
            .post("/v1/conversations/old/messages", json!({ "user_id": "u", "messages": [
                { "role": "assistant", "content": "", "tool_name": "calendar", "tool_args": { "day": "2026-03-01" } },
                { "role": "assistant", "content": "", "tool_name": "search", "tool_args": { "q": "flights to Oslo" } } ] }))
            .await;
        assert_eq!(st, StatusCode::ACCEPTED);
        let (_, stats) = s.get("/v1/stats").await;
        assert_eq!(
            (stats["jobs_pending"].as_u64(), stats["extraction"]["enabled"].as_bool()),
            (Some(0), Some(false))
        );
    }
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("calendar").reply("Checked the calendar for 2026-03-01."));
    llm.on(Rule::user_contains("search").reply("Searched for flights to Oslo."));
    let base = llm.base_url();
    let llm_args = ["--llm-provider", "openai", "--llm-base-url", &base, "--llm-model", "m"];
    let mut args = vec!["backfill", "tool-calls"];
    args.extend_from_slice(&llm_args);
    let (ok, out, err) = db.cli(&args);
    assert!(ok, "{err}");
    assert!(out.contains("enqueued 2"), "{out}");
    // Idempotent while pending.
    let (_, out, _) = db.cli(&args);
    assert!(out.contains("enqueued 0"), "{out}");
    let s = start(&db, &llm, &[]);
    drained(&s).await;
    let (_, page) = s.get("/v1/conversations/old/messages").await;
    let got: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["Checked the calendar for 2026-03-01.", "Searched for flights to Oslo."]);
    // Done messages are not queued again.
    let (_, out, _) = db.cli(&args);
    assert!(out.contains("enqueued 0"), "{out}");
}

async fn an_unreachable_llm_never_affects_the_client_and_fails_visibly(backend: Backend) {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let db = Db::new(backend).await;
    let s = db.serve(&[
        "--llm-provider",
        "openai",
        "--llm-base-url",
        &base,
        "--llm-model",
        "m",
        "--job-backoff-ms",
        "100",
    ]);
    let t = std::time::Instant::now();
    append(&s, "down", "u", json!([{ "role": "user", "content": "I teach yoga on Tuesdays." }]))
        .await;
    assert!(t.elapsed() < Duration::from_secs(3));
    s.remember("u", "The user teaches yoga.").await;
    let stats = drained(&s).await;
    assert_eq!(stats["extraction"]["failed"], 1, "{stats}");
    assert_eq!(stats["memories_active"], 1, "only the explicit memory: {stats}");
}

on_both_backends!(
    a_changed_fact_supersedes_the_old_one_across_sessions,
    prompts_carry_the_date_the_rules_and_only_the_new_slice,
    restated_facts_cost_no_consolidation_call_and_pii_is_redacted,
    concurrent_conversations_of_one_user_add_a_fact_once,
    italian_conversations_and_the_rolling_summary,
    memory_disabled_makes_no_llm_call_and_tool_calls_get_described,
    faults_retry_then_fail_visibly_and_write_nothing,
    the_client_never_waits_for_a_hanging_llm_and_kill_9_mid_batch_reruns_once,
    backfill_describes_old_tool_calls_once,
    an_unreachable_llm_never_affects_the_client_and_fails_visibly,
);
