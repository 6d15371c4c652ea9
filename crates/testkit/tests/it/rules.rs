//! Rules: matching, order, `times`, default, delays, hangs, raw and malformed bodies.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::{Match, Rule, ScriptedLlm};

use crate::{ask_openai, client, openai_body, openai_text, post};

#[tokio::test]
async fn newest_rule_first_and_times_falls_through() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("Postgres").reply("facts"));
    let flaky = llm.on(Rule::any().status(429).retry_after(1).times(2));
    let base = llm.base_url();
    assert_eq!(ask_openai(&base, "Postgres").await.status, 429);
    assert_eq!(ask_openai(&base, "Postgres").await.status, 429);
    let a = ask_openai(&base, "Postgres").await;
    assert_eq!((a.status, openai_text(&a)), (200, "facts"));
    assert_eq!(flaky.hits(), 2);
    // A later rule overrides an earlier one for the requests it matches.
    llm.on(Rule::user_contains("Postgres 17").reply("newer"));
    assert_eq!(openai_text(&ask_openai(&base, "Postgres 17").await), "newer");
    assert_eq!(openai_text(&ask_openai(&base, "Postgres 16").await), "facts");
}

#[tokio::test]
async fn no_matching_rule_is_a_500_that_says_so() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("Postgres").named("postgres facts").reply("x"));
    let a = ask_openai(&llm.base_url(), "something else").await;
    assert_eq!(a.status, 500);
    let msg = a.json["error"]["message"].as_str().unwrap();
    assert!(msg.contains("no rule matched"), "{msg}");
    assert!(msg.contains("something else"), "the request is described: {msg}");
    assert!(msg.contains("postgres facts"), "the rules are listed: {msg}");
    assert_eq!(llm.unmatched().len(), 1);
    assert_eq!(llm.requests()[0].status, Some(500));
}

#[tokio::test]
async fn the_default_rule_answers_last_and_can_be_replaced() {
    let llm = ScriptedLlm::start().await;
    llm.set_default(Rule::any().reply("default one"));
    llm.on(Rule::user_contains("special").reply("special"));
    let base = llm.base_url();
    assert_eq!(openai_text(&ask_openai(&base, "special").await), "special");
    assert_eq!(openai_text(&ask_openai(&base, "other").await), "default one");
    llm.set_default(Rule::any().reply("default two"));
    assert_eq!(openai_text(&ask_openai(&base, "other").await), "default two");
    llm.clear_rules();
    assert_eq!(ask_openai(&base, "special").await.status, 500);
}

#[tokio::test]
async fn regex_model_and_custom_conditions() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_matches(r"(?i)\bpostgres(ql)?\b")
        .and(Match::any().model("gpt-test"))
        .reply("re"));
    llm.on(Rule::model("other-model").reply("by model"));
    llm.on(Rule::when(Match::any().when(|r| r.messages.len() == 2)).reply("two messages"));
    let base = llm.base_url();
    assert_eq!(openai_text(&ask_openai(&base, "I use POSTGRESQL").await), "re");
    let mut b = openai_body("hi");
    b["model"] = json!("other-model");
    let a = post(&format!("{base}/v1/chat/completions"), &[], &b).await;
    assert_eq!(openai_text(&a), "by model");
    let mut b = openai_body("one");
    b["messages"].as_array_mut().unwrap().push(json!({"role": "assistant", "content": "two"}));
    let a = post(&format!("{base}/v1/chat/completions"), &[], &b).await;
    assert_eq!(openai_text(&a), "two messages");
    // "postgresify" is not the word.
    assert_eq!(ask_openai(&base, "postgresify").await.status, 500);
}

#[tokio::test]
async fn reply_with_computes_from_the_request_and_usage_can_be_fixed() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply_with(|r| r.user.to_uppercase()).usage(100, 20));
    let a = ask_openai(&llm.base_url(), "shout").await;
    assert_eq!(openai_text(&a), "SHOUT");
    assert_eq!(
        a.json["usage"],
        json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120})
    );
    llm.clear_rules();
    llm.on(Rule::any().reply_json(&json!([{"content": "x", "importance": 3}])));
    let a = ask_openai(&llm.base_url(), "json").await;
    let inner: Value = serde_json::from_str(openai_text(&a)).unwrap();
    assert_eq!(inner[0]["importance"], 3);
}

#[tokio::test]
async fn malformed_raw_and_custom_error_bodies() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::user_contains("broken").malformed());
    llm.on(Rule::user_contains("empty").raw(200, r#"{"choices": []}"#));
    llm.on(Rule::user_contains("html").status(502).body("<html>Bad Gateway</html>"));
    let base = llm.base_url();
    let a = ask_openai(&base, "broken").await;
    assert_eq!(a.status, 200);
    assert!(serde_json::from_str::<Value>(&a.text).is_err(), "not JSON: {}", a.text);
    let a = ask_openai(&base, "empty").await;
    assert_eq!((a.status, a.json.clone()), (200, json!({"choices": []})));
    let a = ask_openai(&base, "html").await;
    assert_eq!((a.status, a.text.as_str()), (502, "<html>Bad Gateway</html>"));
}

#[tokio::test]
async fn delay_holds_the_answer() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().delay(Duration::from_millis(400)).reply("late"));
    let t = Instant::now();
    let a = ask_openai(&llm.base_url(), "x").await;
    assert_eq!(openai_text(&a), "late");
    assert!(t.elapsed() >= Duration::from_millis(400), "{:?}", t.elapsed());
}

#[tokio::test]
async fn hang_never_answers_and_is_still_recorded() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().hang());
    let err = client()
        .post(llm.url("/v1/chat/completions"))
        .timeout(Duration::from_millis(300))
        .json(&openai_body("x"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let r = &llm.requests()[0];
    assert_eq!(r.status, None);
    assert!(r.rule.as_deref().unwrap().contains("hang"), "{:?}", r.rule);
}

#[tokio::test]
async fn removed_rules_stop_answering_and_keys_can_be_required() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("base"));
    let over = llm.on(Rule::any().reply("override"));
    let base = llm.base_url();
    assert_eq!(openai_text(&ask_openai(&base, "x").await), "override");
    llm.remove(&over);
    assert_eq!(openai_text(&ask_openai(&base, "x").await), "base");

    llm.require_api_key("sk-right");
    let url = llm.url("/v1/chat/completions");
    assert_eq!(post(&url, &[], &openai_body("x")).await.status, 401);
    assert_eq!(
        post(&url, &[("authorization", "Bearer sk-wrong")], &openai_body("x")).await.status,
        401
    );
    let a = post(&url, &[("authorization", "Bearer sk-right")], &openai_body("x")).await;
    assert_eq!(openai_text(&a), "base");
}

#[tokio::test]
async fn unknown_paths_and_methods_are_refused_and_recorded() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("x"));
    let a = post(&llm.url("/v1/completions"), &[], &openai_body("x")).await;
    assert_eq!(a.status, 404);
    assert!(a.json["error"]["message"].as_str().unwrap().contains("/v1/chat/completions"));
    let resp = client().get(llm.url("/v1/chat/completions")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(llm.request_count(), 2);
    assert_eq!(llm.unmatched().len(), 2);
}
