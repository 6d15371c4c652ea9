//! The summary DAG through the REST API with a scripted LLM (issue 13): a long conversation
//! compacts into leaves, branches and a root that link their sources and keep their
//! timestamps; summaries are searched, a root hit expands to the right messages; extraction
//! goes on after its cursor message was summarized; a compaction killed mid-job leaves no
//! duplicate; erasure removes summaries; with no LLM nothing is compacted and stats say so;
//! a failed extraction holds its conversation's compaction back, and stats say that too.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use testkit::{Match, Rule, ScriptedLlm};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::helpers::{Backend, Db, Server, create_key};

const EXTRACT: &str = "memory extraction system";
const LEAF: &str = "stretch of a conversation";
const MERGE: &str = "You merge";

/// A server whose LLM is the scripted one (as extraction's tests start it).
fn start(db: &Db, llm: &ScriptedLlm) -> Server {
    crate::extraction::start(db, llm, &[])
}

/// A scripted LLM that extracts nothing and "summarizes" by echoing its input: so every
/// level holds the words of the messages it covers, and a search finds each level.
async fn echoing_llm() -> ScriptedLlm {
    let llm = ScriptedLlm::start().await;
    llm.set_default(Rule::any().reply("A short summary."));
    llm.on(Rule::system_contains(EXTRACT).reply("[]"));
    llm.on(Rule::system_contains(LEAF).reply_with(|r| format!("Summary of: {}", r.user)));
    llm.on(Rule::system_contains(MERGE).reply_with(|r| format!("Merged: {}", r.user)));
    llm
}

fn at(minute: i64) -> OffsetDateTime {
    time::macros::datetime!(2023-05-01 09:00 UTC) + time::Duration::minutes(minute)
}

fn iso_minute(t: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    )
}

/// The text of message `i` (1-based): one with a word nobody else uses.
fn text_of(i: i64) -> String {
    if i == 137 {
        "We adopted a greyhound named Biscuit from the shelter.".to_string()
    } else {
        format!("Note {i}: the weather was mild and I read a chapter.")
    }
}

/// Append messages `from..=to` of conversation `conv` (one a minute), as `agent` if any.
async fn append(s: &Server, conv: &str, agent: Option<&str>, from: i64, to: i64) {
    let msgs: Vec<Value> = (from..=to)
        .map(|i| {
            let role = if i % 2 == 1 { "user" } else { "assistant" };
            json!({ "role": role, "content": text_of(i), "created_at": at(i).format(&Rfc3339).unwrap() })
        })
        .collect();
    let mut body = json!({ "user_id": "u", "messages": msgs });
    if let Some(a) = agent {
        body["agent_id"] = json!(a);
    }
    let (st, b) = s.post(&format!("/v1/conversations/{conv}/messages"), body).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
}

/// Wait until the job queue of the tenant is drained (no pending or running jobs).
async fn drained(s: &Server) -> Value {
    crate::helpers::drained(&s.as_client()).await
}

fn of_depth(summaries: &[Value], depth: i64) -> Vec<Value> {
    summaries.iter().filter(|x| x["depth"] == depth).cloned().collect()
}

async fn a_long_conversation_compacts_into_a_dag_that_search_expands(backend: Backend) {
    let llm = echoing_llm().await;
    let db = Db::new(backend).await;
    let s = start(&db, &llm);
    for batch in 0..10 {
        append(&s, "long", None, batch * 50 + 1, batch * 50 + 50).await;
    }
    let stats = drained(&s).await;

    // 500 messages, threshold 100 (the default): the oldest 400 in 20 leaves of 20, every
    // 4 leaves a branch (5), every 4 branches a root (1).
    let (st, conv) = s.get("/v1/conversations/long").await;
    assert_eq!(st, StatusCode::OK, "{conv}");
    assert_eq!(conv["summarized_through"], 400, "{conv}");
    let all = conv["summaries"].as_array().unwrap().clone();
    let (leaves, branches, roots) = (of_depth(&all, 0), of_depth(&all, 1), of_depth(&all, 2));
    assert_eq!((leaves.len(), branches.len(), roots.len(), all.len()), (20, 5, 1, 26));
    assert!(roots.iter().all(|r| r["kind"] == "root" && r["message_count"] == 320));
    assert!(branches.iter().all(|b| b["kind"] == "branch" && b["message_count"] == 80));
    assert_eq!(stats["compaction"]["tree_depth"], 3, "{stats}");
    assert_eq!(stats["compaction"]["unsummarized_messages"], 100, "{stats}");
    assert_eq!(stats["compaction"]["summaries"], 26, "{stats}");
    assert_eq!(stats["compaction"]["summary_embedding_coverage"], 1.0, "{stats}");
    assert_eq!(stats["compaction"]["status"], "idle", "{stats}");
    assert_eq!(stats["compaction"]["failed"], 0, "{stats}");

    // Every leaf links its 20 messages in order, and keeps their span and timestamps.
    let mut next = 1;
    for leaf in &leaves {
        let (st, v) = s.get(&format!("/v1/summaries/{}", leaf["id"].as_str().unwrap())).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let seqs: Vec<i64> =
            v["messages"].as_array().unwrap().iter().map(|m| m["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, (next..next + 20).collect::<Vec<_>>());
        let (first, last) = (at(next), at(next + 19));
        assert_eq!(leaf["earliest_at"], v["messages"][0]["created_at"]);
        assert_eq!(leaf["latest_at"], v["messages"][19]["created_at"]);
        assert_eq!(
            OffsetDateTime::parse(leaf["earliest_at"].as_str().unwrap(), &Rfc3339).unwrap(),
            first
        );
        let content = leaf["content"].as_str().unwrap();
        assert!(content.starts_with("[leaf summary, 1 May 2023, "), "{content}");
        // The header and every message line carry ISO-minute timestamps and speakers.
        for t in [first, last] {
            assert!(content.contains(&iso_minute(t)), "{content}");
        }
        assert!(content.contains(&format!("-/user] {}", text_of(next))), "{content}");
        assert_eq!(leaf["model"], "main-model");
        assert!(leaf["parent_id"].is_string(), "every leaf is in a branch");
        next += 20;
    }
    // A branch lists its 4 leaves, which name it as their parent.
    let b0 = branches[0]["id"].as_str().unwrap();
    let (_, v) = s.get(&format!("/v1/summaries/{b0}")).await;
    let children = v["children"].as_array().unwrap();
    assert_eq!(children.len(), 4);
    assert!(children.iter().all(|c| c["parent_id"] == b0 && c["depth"] == 0));
    assert_eq!(v["messages"], json!([]));

    // The leaf prompt carried the rules and ISO-minute lines.
    let leaf_calls = llm.calls_matching(&Match::any().system_contains(LEAF));
    assert_eq!(leaf_calls.len(), 20, "one LLM call per leaf");
    assert!(leaf_calls[0].system.contains("Keep identifiers verbatim"));
    assert!(
        leaf_calls[0].user.starts_with("[#01 2023-05-01T09:01Z -/user] Note 1:"),
        "{}",
        leaf_calls[0].user
    );

    // Search: summaries by keyword; a root hit expands to the message that holds the words.
    let (st, r) = s
        .post(
            "/v1/search",
            json!({ "user_id": "u", "query": "greyhound Biscuit", "sources": ["summaries"], "expand": true, "limit": 10 }),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let results = r["results"].as_array().unwrap();
    let kinds: Vec<&str> = results.iter().map(|h| h["summary"]["kind"].as_str().unwrap()).collect();
    assert!(results.iter().all(|h| h["type"] == "summary"), "{r}");
    assert_eq!(kinds.len(), 3, "the leaf, branch and root that cover it: {kinds:?}");
    let root = results.iter().find(|h| h["summary"]["kind"] == "root").expect("the root is found");
    let expanded = root["expanded"].as_array().unwrap();
    let seqs: Vec<&Value> = expanded.iter().map(|e| &e["message"]["seq"]).collect();
    assert_eq!(expanded[0]["message"]["seq"], 137, "{seqs:?}");
    assert!(expanded[0]["score"].as_f64().unwrap() > 0.0);
    // No message without support of its own pads it (found by a tester).
    assert!(expanded.iter().all(|e| e["score"].as_f64().unwrap() > 0.0), "{seqs:?}");
    // An expansion keeps to the search's own time window too.
    let since = at(138).format(&Rfc3339).unwrap();
    let q = json!({ "user_id": "u", "query": "greyhound Biscuit", "sources": ["summaries"], "expand": true, "since": since });
    let (_, r) = s.post("/v1/search", q).await;
    let root = r["results"].as_array().unwrap().iter().find(|h| h["summary"]["kind"] == "root");
    let expanded =
        root.expect("the root still overlaps the window")["expanded"].as_array().unwrap();
    assert!(!expanded.is_empty(), "{r}");
    assert!(expanded.iter().all(|e| e["message"]["seq"].as_i64() >= Some(138)), "{r}");
    // Without `expand`, no expansion; with `sources` left out, no summaries (REST default).
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "user_id": "u", "query": "greyhound Biscuit", "sources": ["summaries"] }),
        )
        .await;
    assert!(r["results"][0].get("expanded").is_none(), "{r}");
    let (_, r) =
        s.post("/v1/search", json!({ "user_id": "u", "query": "greyhound Biscuit" })).await;
    assert_eq!(r["results"], json!([]));
    // A time window keeps the summaries whose span overlaps it.
    let (_, r) = s
        .post(
            "/v1/search",
            json!({ "user_id": "u", "query": "greyhound Biscuit", "sources": ["summaries"], "until": "2023-05-01T11:00:00Z" }),
        )
        .await;
    assert_eq!(r["results"].as_array().unwrap().len(), 2, "the leaf after 11:00 is out: {r}");

    // A bad summary id is a 400; an unknown one a 404; another user's key sees none.
    let (st, _) = s.get("/v1/summaries/not-a-uuid").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, _) = s.get(&format!("/v1/summaries/{}", uuid::Uuid::now_v7())).await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // Short-term context: after the facts, the newest tops of the DAG and the last
    // messages, within the budget, oldest first.
    s.remember("u", "The user's dog is a greyhound.").await;
    let (st, c) = s
        .post(
            "/v1/context",
            json!({ "user_id": "u", "conversation_id": "long", "token_budget": 1500 }),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{c}");
    let text = c["text"].as_str().unwrap();
    assert!(text.starts_with("Known facts about the user:\n- The user's dog is a greyhound.\n\nEarlier in this conversation:\n- ["), "{text}");
    assert!(text.contains("\n\nRecent messages:\n["), "{text}");
    assert!(
        text.ends_with(&format!("[{}] assistant: {}", iso_minute(at(500)), text_of(500))),
        "{text}"
    );
    assert!(c["token_estimate"].as_u64().unwrap() <= 1500, "{c}");
    let newest_top = branches.last().unwrap()["id"].clone();
    assert_eq!(c["summary_ids"].as_array().unwrap().last(), Some(&newest_top), "{c}");
    let n = c["message_ids"].as_array().unwrap().len();
    assert!((10..100).contains(&n), "the newest messages that fit: {n}");
    // A bigger budget holds more of both; a conversation of another user adds nothing, like
    // one that does not exist (yet).
    let (_, big) = s
        .post(
            "/v1/context",
            json!({ "user_id": "u", "conversation_id": "long", "token_budget": 20000 }),
        )
        .await;
    assert_eq!(big["message_ids"].as_array().unwrap().len(), 50, "the last 50 messages");
    assert_eq!(big["summary_ids"].as_array().unwrap().len(), 2, "the root and the open branch");
    for conversation in ["long", "not-started-yet"] {
        let (st, other) = s
            .post(
                "/v1/context",
                json!({ "user_id": "someone-else", "conversation_id": conversation }),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{other}");
        assert_eq!(other["message_ids"], json!([]), "{other}");
        assert_eq!(other["summary_ids"], json!([]), "{other}");
        assert!(!other["text"].as_str().unwrap().contains("Recent messages"), "{other}");
    }

    // The user's export carries the summaries; erasure removes them.
    let (_, export) = s.get("/v1/users/u/export").await;
    assert_eq!(export["summaries"].as_array().unwrap().len(), 26);
    let (st, erased) = s.req("DELETE", "/v1/users/u", None).await;
    assert_eq!(st, StatusCode::OK, "{erased}");
    assert_eq!(erased["erased"]["summaries"], 26, "{erased}");
    let (st, _) = s.get(&format!("/v1/summaries/{b0}")).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (_, stats) = s.get("/v1/stats").await;
    assert_eq!(stats["compaction"]["summaries"], 0);
}

async fn extraction_goes_on_after_its_cursor_is_summarized_and_a_killed_compaction_reruns_once(
    backend: Backend,
) {
    let llm = echoing_llm().await;
    let db = Db::new(backend).await;
    let mut s = start(&db, &llm);
    // A low threshold: 40 messages, all extracted, compact to 10 or fewer unsummarized —
    // the whole of them, cursor message included.
    let (st, b) = s
        .req(
            "PUT",
            "/v1/agents/a",
            Some(json!({ "settings": { "compaction": { "threshold": 10 } } })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let (st, b) = s
        .req(
            "PUT",
            "/v1/agents/bad",
            Some(json!({ "settings": { "compaction": { "threshold": 3 } } })),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().contains("threshold"), "{b}");

    // The first leaf's LLM call hangs: the server is killed in it.
    let hang = llm.on(Rule::system_contains(LEAF).hang());
    append(&s, "c", Some("a"), 1, 40).await;
    llm.wait_for(&Match::any().system_contains(LEAF), 1, Duration::from_secs(30)).await;
    s.kill9();
    drop(s);
    llm.remove(&hang);
    let s = start(&db, &llm);
    // The lease (3 s) expires and the job runs again: each message in exactly one leaf.
    let mut conv = Value::Null;
    for _ in 0..1200 {
        conv = s.get("/v1/conversations/c").await.1;
        if conv["summarized_through"] == 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drained(&s).await;
    let conv =
        if conv["summarized_through"] == 40 { s.get("/v1/conversations/c").await.1 } else { conv };
    assert_eq!(conv["summarized_through"], 40, "{conv}");
    let leaves = of_depth(conv["summaries"].as_array().unwrap(), 0);
    assert_eq!(leaves.len(), 2, "no duplicate leaf: {leaves:?}");
    let covered: i64 = leaves.iter().map(|l| l["message_count"].as_i64().unwrap()).sum();
    assert_eq!(covered, 40);

    // The extraction cursor's message is now summarized: the next extraction finds it
    // gone and reads every unsummarized message — only the new one.
    llm.on(Rule::system_contains(EXTRACT).and(Match::any().user_contains("Miso")).reply(
        r#"[{"content": "The user has a cat named Miso.", "category": "fact", "importance": 6}]"#,
    ));
    let before = llm.calls_matching(&Match::any().system_contains(EXTRACT)).len();
    let (st, b) = s
        .post(
            "/v1/conversations/c/messages",
            json!({ "user_id": "u", "agent_id": "a", "messages": [{ "role": "user", "content": "My cat Miso turned three today." }] }),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    drained(&s).await;
    let calls = llm.calls_matching(&Match::any().system_contains(EXTRACT));
    assert_eq!(calls.len(), before + 1, "one extraction call for the new message");
    let last = calls.last().unwrap();
    assert!(last.user.contains("Miso"), "{}", last.user);
    assert!(!last.user.contains("Note 1:") && !last.user.contains("Note 40"), "{}", last.user);
    let (_, m) = s.get("/v1/memories?user_id=u").await;
    assert_eq!(m["memories"][0]["content"], "The user has a cat named Miso.", "{m}");
}

async fn without_an_llm_nothing_is_compacted_and_stats_say_so(backend: Backend) {
    let db = Db::new(backend).await;
    let s = db.serve(&[]);
    for batch in 0..3 {
        append(&s, "quiet", None, batch * 50 + 1, batch * 50 + 50).await;
    }
    let (_, st) = s.get("/v1/stats").await;
    assert_eq!(st["compaction"]["enabled"], false, "{st}");
    assert_eq!(st["compaction"]["status"], "off: no LLM configured", "{st}");
    assert_eq!(st["compaction"]["unsummarized_messages"], 150, "{st}");
    assert_eq!(st["compaction"]["summaries"], 0, "{st}");
    let (_, conv) = s.get("/v1/conversations/quiet").await;
    assert_eq!(
        (conv["summarized_through"].clone(), conv["summaries"].clone()),
        (json!(0), json!([]))
    );
    // Searching summaries is valid and finds nothing.
    let (st, r) = s
        .post("/v1/search", json!({ "user_id": "u", "query": "weather", "sources": ["summaries"] }))
        .await;
    assert_eq!((st, r["results"].clone()), (StatusCode::OK, json!([])));
    let (st, r) = s
        .post("/v1/search", json!({ "user_id": "u", "query": "weather", "sources": ["digests"] }))
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("summaries"), "{r}");
}

/// An agent's compaction threshold set after its conversations grew applies to them at
/// once, not at their next append; other agents' conversations are left as they are.
/// Found by a session: lowering the threshold to 20 left a conversation of 120 messages at
/// 100 unsummarized, compaction "idle".
async fn a_lowered_threshold_compacts_the_agents_conversations(backend: Backend) {
    let llm = echoing_llm().await;
    let db = Db::new(backend).await;
    let s = start(&db, &llm);
    append(&s, "mine", Some("slow"), 1, 60).await;
    append(&s, "theirs", Some("other"), 1, 60).await;
    let stats = drained(&s).await;
    assert_eq!(stats["compaction"]["summaries"], 0, "under the default threshold: {stats}");

    let settings = json!({ "settings": { "compaction": { "threshold": 20 } } });
    let (st, b) = s.req("PUT", "/v1/agents/slow", Some(settings)).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let stats = drained(&s).await;
    let (_, mine) = s.get("/v1/conversations/mine").await;
    // 60 messages over a threshold of 20: the oldest 40 in two leaves.
    assert_eq!(mine["summarized_through"], 40, "{mine}");
    assert_eq!(of_depth(mine["summaries"].as_array().unwrap(), 0).len(), 2, "{mine}");
    let (_, theirs) = s.get("/v1/conversations/theirs").await;
    assert_eq!(
        (theirs["summarized_through"].clone(), theirs["summaries"].clone()),
        (json!(0), json!([]))
    );
    assert_eq!(stats["compaction"]["unsummarized_messages"], 80, "{stats}");
    assert_eq!(stats["compaction"]["failed"], 0, "{stats}");
}

/// A conversation is summarized only as far as extraction has read it: when its extraction
/// failed for good, stats say compaction waits for extraction (not "idle"), and retrying the
/// failed job compacts it. Found by a session: stats said "idle" with 120 messages waiting.
async fn a_failed_extraction_holds_compaction_back_and_stats_say_so(backend: Backend) {
    let llm = echoing_llm().await;
    let broken = llm.on(Rule::system_contains(EXTRACT).reply("I cannot do JSON today"));
    let db = Db::new(backend).await;
    let s = start(&db, &llm);
    let settings = json!({ "settings": { "compaction": { "threshold": 10 } } });
    let (st, b) = s.req("PUT", "/v1/agents/a", Some(settings)).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    append(&s, "held", Some("a"), 1, 40).await;
    let stats = drained(&s).await;
    assert_eq!(stats["extraction"]["failed"], 1, "{stats}");
    assert_eq!(stats["compaction"]["status"], "waiting for extraction", "{stats}");
    assert_eq!(stats["compaction"]["unsummarized_messages"], 40, "{stats}");
    assert_eq!(stats["compaction"]["summaries"], 0, "{stats}");

    // The LLM answers now: the failed job is retried from the shell, and the conversation
    // is extracted, then compacted.
    llm.remove(&broken);
    let (ok, out, err) = db.cli(&["jobs", "list", "--status", "failed", "--json"]);
    assert!(ok, "{err}");
    let jobs: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let (ok, _, err) = db.cli(&["jobs", "retry", jobs[0]["id"].as_str().unwrap()]);
    assert!(ok, "{err}");
    let mut stats = Value::Null;
    for _ in 0..600 {
        stats = drained(&s).await;
        if stats["compaction"]["summaries"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stats["compaction"]["summaries"], 2, "two leaves of 20: {stats}");
    assert_eq!(stats["compaction"]["status"], "idle", "{stats}");
    assert_eq!(stats["compaction"]["unsummarized_messages"], 0, "{stats}");
}

/// Compaction jobs that failed for good (an LLM that answers empty summaries) are reported:
/// stats say `failed`, not `idle`, and the health page warns. Found by a black-box tester.
async fn a_failed_compaction_is_reported_not_idle(backend: Backend) {
    let llm = echoing_llm().await;
    let broken = llm.on(Rule::system_contains(LEAF).reply(""));
    let db = Db::new(backend).await;
    let s = start(&db, &llm);
    let settings = json!({ "settings": { "compaction": { "threshold": 10 } } });
    s.req("PUT", "/v1/agents/a", Some(settings)).await;
    append(&s, "k1", Some("a"), 1, 25).await;
    let stats = drained(&s).await;
    assert_eq!(stats["compaction"]["failed"], 1, "{stats}");
    assert_eq!(stats["compaction"]["status"], "failed", "{stats}");
    let page = s.get_text("/health").await;
    assert!(page.contains("Compaction failed: 1 compaction job(s) failed for good"), "{page}");
    llm.remove(&broken);
    let (_, out, _) = db.cli(&["jobs", "list", "--status", "failed", "--json"]);
    let jobs: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert!(db.cli(&["jobs", "retry", jobs[0]["id"].as_str().unwrap()]).0);
    let mut stats = Value::Null;
    for _ in 0..600 {
        stats = drained(&s).await;
        if stats["compaction"]["summaries"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stats["compaction"]["status"], "idle", "{stats}");
}

/// A query that names a day finds the summaries covering it, the leaf of that stretch
/// before the branch above it (found by a session: "on April 5, 2023" ranked the leaf of
/// April 3-6 13th among summaries, after others that only shared the month).
async fn a_query_that_names_a_day_finds_the_summaries_covering_it(backend: Backend) {
    let llm = echoing_llm().await;
    let db = Db::new(backend).await;
    let s = start(&db, &llm);
    let settings = json!({ "settings": { "compaction": { "threshold": 10 } } });
    let (st, b) = s.req("PUT", "/v1/agents/diary", Some(settings)).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    // One message a day from 1 March 2023: five leaves of 20 days, a branch over four.
    let day = |i: i64| time::macros::datetime!(2023-03-01 20:00 UTC) + time::Duration::days(i - 1);
    let msgs: Vec<Value> = (1..=100)
        .map(|i| json!({ "role": "user", "content": text_of(i), "created_at": day(i).format(&Rfc3339).unwrap() }))
        .collect();
    let body = json!({ "user_id": "u", "agent_id": "diary", "messages": msgs });
    let (st, b) = s.post("/v1/conversations/diary/messages", body).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let stats = drained(&s).await;
    assert_eq!(stats["compaction"]["summaries"], 6, "{stats}");
    let (st, r) = s
        .post(
            "/v1/search",
            json!({ "user_id": "u", "query": "What happened on April 5, 2023?", "sources": ["summaries"], "explain": true }),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let hits = r["results"].as_array().unwrap();
    let brief = |h: &Value| {
        let x = &h["summary"];
        (
            x["earliest_at"].as_str().unwrap()[..10].to_string(),
            x["depth"].clone(),
            h["explain"]["date_rank"].clone(),
        )
    };
    let got: Vec<_> = hits.iter().map(brief).collect();
    // Leaf 2 covers 21 March to 9 April (date rank 1), the branch 1 March to 19 May (date
    // rank 2): the top two, in either order; no other leaf has date support.
    let mut top: Vec<_> = got.iter().take(2).cloned().collect();
    top.sort_by_key(|x| x.1.as_i64());
    assert_eq!(
        top,
        [
            ("2023-03-21".to_string(), json!(0), json!(1)),
            ("2023-03-01".to_string(), json!(1), json!(2))
        ],
        "{got:?}"
    );
    assert!(got.iter().skip(2).all(|x| x.2.is_null()), "{got:?}");
}

on_both_backends!(
    a_long_conversation_compacts_into_a_dag_that_search_expands,
    a_query_that_names_a_day_finds_the_summaries_covering_it,
    a_failed_extraction_holds_compaction_back_and_stats_say_so,
    a_failed_compaction_is_reported_not_idle,
    extraction_goes_on_after_its_cursor_is_summarized_and_a_killed_compaction_reruns_once,
    without_an_llm_nothing_is_compacted_and_stats_say_so,
    a_lowered_threshold_compacts_the_agents_conversations,
);

async fn synthesis_answers_from_the_results_and_cites_them(backend: Backend) {
    let llm = echoing_llm().await;
    llm.on(Rule::system_contains("memory records below").reply(
        "They adopted a greyhound named Biscuit [1], a rescue [ 1 ][12]. Nothing else [x].",
    ));
    let db = Db::new(backend).await;
    let s = start(&db, &llm);
    s.remember("u", "The user adopted a greyhound named Biscuit.").await;
    s.remember("u", "The user drinks green tea every morning.").await;
    let ask =
        json!({ "user_id": "u", "query": "Which dog did the user adopt?", "synthesize": true });
    let (st, r) = s.post("/v1/search", ask.clone()).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    assert_eq!(
        r["answer"]["text"],
        "They adopted a greyhound named Biscuit [1], a rescue [1]. Nothing else [x]."
    );
    let first = r["results"][0]["memory"]["id"].clone();
    assert_eq!(r["answer"]["citations"], json!([{ "label": 1, "type": "memory", "id": first }]));
    // The LLM read the question and every result under its label, never a stored id.
    let call =
        llm.calls_matching(&Match::any().system_contains("memory records below")).pop().unwrap();
    assert!(call.user.starts_with("Question: Which dog did the user adopt?"), "{}", call.user);
    assert!(call.user.contains("[1] (fact, observed "), "{}", call.user);
    assert!(!call.user.contains(first.as_str().unwrap()), "{}", call.user);
    // Without `synthesize`: no answer and no LLM call.
    let calls = llm.calls_matching(&Match::any().system_contains("memory records below")).len();
    let (_, r) = s.post("/v1/search", json!({ "user_id": "u", "query": "greyhound" })).await;
    assert!(r.get("answer").is_none(), "{r}");
    // Nothing found: the answer says so without asking the LLM.
    let (_, r) = s
        .post("/v1/search", json!({ "user_id": "u", "query": "quantum chromodynamics lattice", "synthesize": true }))
        .await;
    assert_eq!(
        (r["results"].clone(), r["answer"]["text"].clone()),
        (json!([]), json!("Nothing relevant is known."))
    );
    assert_eq!(
        llm.calls_matching(&Match::any().system_contains("memory records below")).len(),
        calls
    );
    // A failing LLM is a 503 in the error format.
    llm.on(Rule::system_contains("memory records below").status(500));
    let (st, r) = s.post("/v1/search", ask.clone()).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{r}");
    assert_eq!(r["error"]["code"], "llm_unavailable", "{r}");
    // Its address and answer stay in the server log (found by a tester with a user key).
    assert!(!r.to_string().contains("127.0.0.1") && !r.to_string().contains("http"), "{r}");
    // With no LLM configured, synthesis is refused plainly, never silently skipped.
    drop(s);
    let s = db.serve(&[]);
    let (st, r) = s.post("/v1/search", ask).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("needs an LLM"), "{r}");
}

async fn summaries_are_seen_only_by_who_may_read_their_conversation(backend: Backend) {
    let llm = echoing_llm().await;
    let db = Db::new(backend).await;
    let key = |args: &[&str]| create_key(&db, args);
    let admin = key(&["--tenant", "acme", "--role", "admin"]);
    let a1 = key(&["--tenant", "acme", "--role", "agent", "--agent", "a1"]);
    let a2 = key(&["--tenant", "acme", "--role", "agent", "--agent", "a2"]);
    let u = key(&["--tenant", "acme", "--role", "user", "--user", "u"]);
    let w = key(&["--tenant", "acme", "--role", "user", "--user", "w"]);
    let other = key(&["--tenant", "globex", "--role", "admin"]);
    let s = start(&db, &llm);
    let adm = s.with_key(&admin);
    for a in ["a1", "a2"] {
        let b = json!({ "settings": { "compaction": { "threshold": 10 } } });
        let (st, r) = adm.req("PUT", &format!("/v1/agents/{a}"), Some(b)).await;
        assert_eq!(st, StatusCode::OK, "{r}");
    }
    for (conv, agent) in [("c1", "a1"), ("c2", "a2")] {
        let msgs: Vec<Value> = (1..=30)
            .map(|i| json!({ "role": "user", "content": format!("{conv} note {i}: the zebra quilt") }))
            .collect();
        let b = json!({ "user_id": "u", "agent_id": agent, "messages": msgs });
        let (st, r) = adm.post(&format!("/v1/conversations/{conv}/messages"), b).await;
        assert_eq!(st, StatusCode::ACCEPTED, "{r}");
    }
    crate::helpers::drained(&adm).await;
    let leaf_of = |conv: &'static str| {
        let adm = &adm;
        async move {
            let (_, c) = adm.get(&format!("/v1/conversations/{conv}")).await;
            c["summaries"][0]["id"].as_str().expect("a summary").to_string()
        }
    };
    let (l1, l2) = (leaf_of("c1").await, leaf_of("c2").await);

    // GET /v1/summaries/{id}: the same visibility as the conversation's transcript.
    for (k, id, want) in [
        (&admin, &l1, 200),
        (&a1, &l1, 200),
        (&a2, &l1, 404),
        (&a2, &l2, 200),
        (&u, &l1, 200),
        (&w, &l1, 404),
        (&other, &l1, 404),
    ] {
        let (st, r) = s.with_key(k).get(&format!("/v1/summaries/{id}")).await;
        assert_eq!(st.as_u16(), want, "{r}");
        if want == 404 {
            assert!(!r.to_string().contains("zebra"), "{r}");
        }
    }
    // Search and expansion: an agent sees its own conversations' summaries and messages.
    let q = json!({ "user_id": "u", "query": "zebra quilt", "sources": ["summaries"], "expand": true, "limit": 50 });
    let (st, r) = s.with_key(&a2).post("/v1/search", q.clone()).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    let results = r["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{r}");
    for h in results {
        assert_eq!(h["summary"]["conversation_id"], "c2", "{h}");
        for e in h["expanded"].as_array().unwrap() {
            assert_eq!(e["message"]["conversation_id"], "c2", "{e}");
        }
    }
    assert!(!r.to_string().contains("c1 note"), "{r}");
    let (_, r) = s.with_key(&admin).post("/v1/search", q.clone()).await;
    let convs: std::collections::BTreeSet<String> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["summary"]["conversation_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(convs.len(), 2, "the admin sees both: {r}");
    let (st, r) = s.with_key(&w).post("/v1/search", q).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "another user's key: {r}");
    // Short-term context: another agent's conversation adds nothing, as an unknown one.
    let c = json!({ "user_id": "u", "conversation_id": "c1" });
    let (st, r) = s.with_key(&a2).post("/v1/context", c.clone()).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    assert!(!r["text"].as_str().unwrap().contains("c1 note"), "{r}");
    assert_eq!(r["message_ids"], json!([]), "{r}");
    assert_eq!(r["summary_ids"], json!([]), "{r}");
    let (st, r) = s.with_key(&a1).post("/v1/context", c).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    assert!(r["text"].as_str().unwrap().contains("c1 note 30"), "{r}");
}

on_both_backends!(
    synthesis_answers_from_the_results_and_cites_them,
    summaries_are_seen_only_by_who_may_read_their_conversation,
);
