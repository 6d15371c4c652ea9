//! Recording: what is kept of each request, queries, waiting for background calls.

use std::time::Duration;

use testkit::{Match, Protocol, Rule, ScriptedLlm};

use crate::{ANTHROPIC_HEADERS, ask_openai, post};

#[tokio::test]
async fn every_request_is_recorded_in_order_with_headers_and_body() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::system_contains("extract").named("extraction").reply("[]"));
    llm.on(Rule::system_contains("summar").reply("summary"));
    let body = |system: &str, user: &str| {
        serde_json::json!({"model": "m", "max_tokens": 10,
            "system": system, "messages": [{"role": "user", "content": user}]})
    };
    let url = llm.url("/v1/messages");
    post(&url, ANTHROPIC_HEADERS, &body("extract facts", "a")).await;
    post(&url, ANTHROPIC_HEADERS, &body("summarize", "b")).await;
    post(&url, ANTHROPIC_HEADERS, &body("extract facts", "c")).await;

    let all = llm.requests();
    assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(all.iter().map(|r| r.user.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(all.windows(2).all(|w| w[0].since_start <= w[1].since_start));
    let first = &all[0];
    assert_eq!((first.method.as_str(), first.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(first.header("X-API-KEY"), Some("sk-ant-test"));
    assert_eq!(first.body["max_tokens"], 10);
    assert_eq!(first.rule.as_deref(), Some("extraction"));
    assert_eq!(first.status, Some(200));

    let extractions = llm.calls_matching(&Match::any().system_contains("extract"));
    assert_eq!(extractions.iter().map(|r| r.user.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    assert!(llm.calls_matching(&Match::any().protocol(Protocol::OpenAi)).is_empty());
    assert!(llm.unmatched().is_empty());
    llm.clear_requests();
    assert_eq!(llm.request_count(), 0);
}

#[tokio::test]
async fn wait_for_sees_calls_made_in_the_background() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("ok"));
    let base = llm.base_url();
    tokio::spawn(async move {
        for i in 0..3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            ask_openai(&base, &format!("job {i}")).await;
        }
    });
    let got = llm.wait_for(&Match::any().user_contains("job"), 3, Duration::from_secs(20)).await;
    assert_eq!(got.len(), 3);
}

#[tokio::test]
async fn wait_for_panics_with_what_arrived() {
    let llm = ScriptedLlm::start().await;
    llm.on(Rule::any().reply("ok"));
    ask_openai(&llm.base_url(), "only one").await;
    let waited = tokio::spawn(async move {
        llm.wait_for(&Match::any(), 2, Duration::from_millis(200)).await;
    })
    .await;
    let panic = waited.unwrap_err().into_panic();
    let msg = panic.downcast_ref::<String>().unwrap();
    assert!(msg.contains("got 1") && msg.contains("only one"), "{msg}");
}

#[test]
fn start_blocking_works_without_a_runtime() {
    let llm = ScriptedLlm::start_blocking();
    llm.on(Rule::any().reply("sync"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let a = rt.block_on(ask_openai(&llm.base_url(), "x"));
    assert_eq!(crate::openai_text(&a), "sync");
    drop(llm);
}
