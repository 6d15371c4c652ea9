//! The OpenAI chat-completions protocol.

use serde_json::json;
use testkit::{Match, Protocol, Rule, ScriptedLlm};

use crate::{ask_openai, openai_text, post};

#[tokio::test]
async fn answers_in_the_chat_completion_shape_with_plausible_usage() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("Postgres").reply("The user uses Postgres."));
    let body = json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Extract facts."},
            {"role": "user", "content": "I run Postgres 16 at work."}
        ],
        "max_tokens": 300,
        "temperature": 0.0
    });
    let a = post(&llm.url("/v1/chat/completions"), &[], &body).await;
    assert_eq!(a.status, 200, "{a:?}");
    let v = &a.json;
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-test");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["index"], 0);
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "The user uses Postgres.");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    // "Extract facts.\nI run Postgres 16 at work." is 41 chars → 11 tokens; the reply 23 → 6.
    assert_eq!((prompt, completion), (11, 6));
    assert_eq!(v["usage"]["total_tokens"].as_u64().unwrap(), prompt + completion);
}

#[tokio::test]
async fn is_reachable_without_the_v1_prefix() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("ok"));
    let a = post(&llm.url("/chat/completions"), &[], &crate::openai_body("hi")).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(openai_text(&a), "ok");
    let r = &llm.requests()[0];
    assert_eq!((r.protocol, r.path.as_str()), (Protocol::OpenAi, "/chat/completions"));
}

#[tokio::test]
async fn parses_system_messages_parts_and_json_mode() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::when(Match::any().json_mode(true)).reply("{}"));
    let body = json!({
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You extract."},
            {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": "last"}
        ],
        "max_tokens": 50,
        "temperature": 0.5,
        "response_format": {"type": "json_object"}
    });
    let a =
        post(&llm.url("/v1/chat/completions"), &[("authorization", "Bearer sk-1")], &body).await;
    assert_eq!(openai_text(&a), "{}");
    let r = &llm.requests()[0];
    assert_eq!(r.system, "You extract.");
    assert_eq!(r.user, "part one\npart two\nlast");
    assert_eq!(r.messages.len(), 3);
    assert_eq!(r.messages[1].role, "assistant");
    assert_eq!((r.max_tokens, r.temperature, r.json_mode), (Some(50), Some(0.5), true));
    assert_eq!(r.api_key(), Some("sk-1"));

    // Without response_format the JSON-mode rule does not match: no rule → 500.
    let a = ask_openai(&llm.base_url(), "plain").await;
    assert_eq!(a.status, 500);
}

#[tokio::test]
async fn refuses_what_the_real_api_refuses() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("never"));
    let url = llm.url("/v1/chat/completions");
    let cases = [
        (json!({"messages": [{"role": "user", "content": "x"}]}), "model"),
        (json!({"model": "m"}), "messages"),
        (json!({"model": "m", "messages": []}), "messages"),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
            "stream",
        ),
        (json!(["not", "an", "object"]), "JSON object"),
    ];
    for (body, needle) in cases {
        let a = post(&url, &[], &body).await;
        assert_eq!(a.status, 400, "{body}: {a:?}");
        assert_eq!(a.json["error"]["type"], "invalid_request_error", "{a:?}");
        let msg = a.json["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    assert_eq!(llm.unmatched().len(), 5);
}

#[tokio::test]
async fn error_statuses_use_the_openai_error_shape() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("limit").status(429).retry_after(7));
    llm.on(Rule::user_contains("key").status(401).message("Incorrect API key provided"));
    let a = ask_openai(&llm.base_url(), "rate limit me").await;
    assert_eq!(a.status, 429);
    assert_eq!(a.retry_after.as_deref(), Some("7"));
    assert_eq!(a.json["error"]["code"], "rate_limit_exceeded");
    let a = ask_openai(&llm.base_url(), "bad key").await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.json,
        json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
    );
}

/// `"stream": true`: server-sent `chat.completion.chunk` events whose deltas join into the
/// scripted text, a finish chunk, the usage chunk when asked for, and `[DONE]`.
#[tokio::test]
async fn streams_chunks_in_the_openai_shape() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("The user plays chess on Sundays."));
    let body = json!({"model": "gpt-test", "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}]});
    let a = post(&llm.url("/v1/chat/completions"), &[], &body).await;
    assert_eq!(a.status, 200, "{a:?}");
    let events: Vec<&str> = a.text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let chunks: Vec<serde_json::Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "The user plays chess on Sundays.");
    assert!(chunks.len() > 4, "cut into several chunks: {}", chunks.len());
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(chunks[chunks.len() - 1]["usage"]["total_tokens"].as_u64().unwrap() > 0);
}
