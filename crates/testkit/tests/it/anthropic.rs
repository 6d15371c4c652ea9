//! The Anthropic Messages protocol.

use serde_json::json;
use testkit::{Match, Protocol, Rule, ScriptedLlm};

use crate::{ANTHROPIC_HEADERS, post};

fn body(user: &str) -> serde_json::Value {
    json!({
        "model": "claude-test",
        "system": "Extract facts.",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": user}]
    })
}

#[tokio::test]
async fn answers_in_the_message_shape_with_plausible_usage() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains("Extract")
        .and(Match::any().protocol(Protocol::Anthropic))
        .reply("[]"));
    let a = post(&llm.url("/v1/messages"), ANTHROPIC_HEADERS, &body("I like tea.")).await;
    assert_eq!(a.status, 200, "{a:?}");
    let v = &a.json;
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-test");
    assert_eq!(v["content"], json!([{"type": "text", "text": "[]"}]));
    assert_eq!(v["stop_reason"], "end_turn");
    // "Extract facts.\nI like tea." = 26 chars → 7 tokens; "[]" → 1.
    assert_eq!(v["usage"], json!({"input_tokens": 7, "output_tokens": 1}));

    let r = &llm.requests()[0];
    assert_eq!(r.protocol, Protocol::Anthropic);
    assert_eq!((r.system.as_str(), r.user.as_str()), ("Extract facts.", "I like tea."));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.api_key(), Some("sk-ant-test"));
    assert!(!r.json_mode);
}

#[tokio::test]
async fn system_given_as_text_blocks_is_parsed() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains("block two").reply("ok"));
    let mut b = body("hi");
    b["system"] =
        json!([{"type": "text", "text": "block one"}, {"type": "text", "text": "block two"}]);
    let a = post(&llm.url("/v1/messages"), ANTHROPIC_HEADERS, &b).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(llm.requests()[0].system, "block one\nblock two");
}

#[tokio::test]
async fn refuses_what_the_real_api_refuses_in_its_error_shape() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("never"));
    let url = llm.url("/v1/messages");

    let a = post(&url, &[("anthropic-version", "2023-06-01")], &body("x")).await;
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(a.json["type"], "error");
    assert_eq!(a.json["error"]["type"], "authentication_error");

    let a = post(&url, &[("x-api-key", "k")], &body("x")).await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(a.json["error"]["message"].as_str().unwrap().contains("anthropic-version"));

    let mut no_max = body("x");
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let a = post(&url, ANTHROPIC_HEADERS, &no_max).await;
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(a.json["error"]["type"], "invalid_request_error");
    assert!(a.json["error"]["message"].as_str().unwrap().contains("max_tokens"));

    let mut system_role = body("x");
    system_role["messages"] =
        json!([{"role": "system", "content": "s"}, {"role": "user", "content": "x"}]);
    let a = post(&url, ANTHROPIC_HEADERS, &system_role).await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(a.json["error"]["message"].as_str().unwrap().contains("system"));

    assert_eq!(llm.unmatched().len(), 4);
    assert!(llm.requests().iter().all(|r| r.rule.is_none()));
}

#[tokio::test]
async fn error_statuses_use_the_anthropic_error_shape() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("busy").status(529).message("Overloaded"));
    llm.on(Rule::user_contains("slow down").status(429).retry_after(3));
    let url = llm.url("/v1/messages");
    let a = post(&url, ANTHROPIC_HEADERS, &body("busy?")).await;
    assert_eq!(a.status, 529);
    assert_eq!(
        a.json,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
    let a = post(&url, ANTHROPIC_HEADERS, &body("slow down")).await;
    assert_eq!((a.status, a.retry_after.as_deref()), (429, Some("3")));
    assert_eq!(a.json["error"]["type"], "rate_limit_error");
}

/// `"stream": true`: Anthropic's named events in order, text deltas that join into the
/// scripted text, and the stop reason in `message_delta`.
#[tokio::test]
async fn streams_named_events_in_the_anthropic_shape() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("Noted: you moved to Mysuru."));
    let body = json!({"model": "claude-test", "max_tokens": 100, "stream": true,
        "messages": [{"role": "user", "content": "We moved."}]});
    let a = post(&llm.url("/v1/messages"), ANTHROPIC_HEADERS, &body).await;
    assert_eq!(a.status, 200, "{a:?}");
    let events: Vec<(String, serde_json::Value)> = a
        .text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').unwrap();
            let name = name.strip_prefix("event: ").unwrap().to_string();
            (name, serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap())
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    assert!(events.iter().all(|(n, d)| d["type"] == n.as_str()));
    let text: String = events
        .iter()
        .filter(|e| e.0 == "content_block_delta")
        .map(|e| e.1["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Noted: you moved to Mysuru.");
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
}
