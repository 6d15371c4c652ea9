//! The LLM providers (OpenAI-compatible and Anthropic) against `testkit::ScriptedLlm`, a
//! real local server speaking both protocols: answers, request shape, retries, and how
//! each failure is classified.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_core::FaultSource;
use engram_core::llm::{ChatMessage, ChatRequest, ChatRole, Llm, LlmError, Tier};
use engram_providers::llm::{HttpPolicy, build_llm_with};
use engram_providers::{LlmConfig, build_llm};
use serde_json::json;
use testkit::{Protocol, Rule, ScriptedLlm};

/// Short waits so retries do not slow the suite; a generous timeout for a loaded machine.
fn policy() -> HttpPolicy {
    HttpPolicy {
        timeout: Duration::from_secs(20),
        max_attempts: 3,
        backoff: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(30),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Proto {
    OpenAi,
    Anthropic,
}

const BOTH: [Proto; 2] = [Proto::OpenAi, Proto::Anthropic];

fn config(proto: Proto, base_url: String) -> LlmConfig {
    match proto {
        Proto::OpenAi => LlmConfig::OpenAi {
            base_url,
            api_key: Some("sk-test-openai".to_owned()),
            model: "main-model".to_owned(),
            fast_model: Some("fast-model".to_owned()),
        },
        Proto::Anthropic => LlmConfig::Anthropic {
            base_url,
            api_key: "sk-ant-test".to_owned(),
            model: "main-model".to_owned(),
            fast_model: Some("fast-model".to_owned()),
        },
    }
}

fn client(proto: Proto, server: &ScriptedLlm, policy: HttpPolicy) -> Arc<dyn Llm> {
    build_llm_with(&config(proto, server.base_url()), policy).unwrap()
}

fn request(tier: Tier, json: bool) -> ChatRequest {
    ChatRequest {
        tier,
        model: None,
        system: "Extract facts about the user as a JSON array.".to_owned(),
        messages: vec![
            ChatMessage { role: ChatRole::User, content: "I moved to Lyon.".to_owned() },
            ChatMessage { role: ChatRole::Assistant, content: "Nice!".to_owned() },
            ChatMessage { role: ChatRole::User, content: "I run Postgres at work.".to_owned() },
        ],
        max_tokens: 400,
        json,
        temperature: 0.2,
    }
}

async fn chat(llm: &Arc<dyn Llm>) -> Result<engram_core::llm::ChatResponse, LlmError> {
    llm.chat(&request(Tier::Fast, true)).await
}

#[tokio::test]
async fn answers_with_content_model_and_usage() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        let facts = r#"[{"content":"The user uses Postgres.","category":"fact","importance":6}]"#;
        server.on(Rule::user_contains("Postgres").reply(facts));
        let llm = client(proto, &server, policy());
        let resp = chat(&llm).await.unwrap();
        assert_eq!(resp.content, facts, "{proto:?}");
        assert_eq!(resp.model, "fast-model", "{proto:?}");
        let sent = &server.requests()[0];
        let want_prompt = testkit::protocol::estimate_tokens(&sent.full_text());
        assert!(want_prompt > 10, "{want_prompt}");
        assert_eq!(resp.prompt_tokens, want_prompt, "{proto:?}");
        assert_eq!(resp.completion_tokens, testkit::protocol::estimate_tokens(facts), "{proto:?}");
    }
}

#[tokio::test]
async fn openai_request_shape() {
    let server = ScriptedLlm::start().await;
    server.require_api_key("sk-test-openai");
    server.on(Rule::any().reply("ok"));
    // A base URL ending in /v1 is not doubled.
    let llm =
        build_llm_with(&config(Proto::OpenAi, format!("{}/v1/", server.base_url())), policy())
            .unwrap();
    assert_eq!(llm.model(Tier::Fast), "fast-model");
    assert_eq!(llm.model(Tier::Main), "main-model");
    assert_eq!(llm.describe(), "openai:fast-model (fast) / main-model (main)");
    llm.chat(&request(Tier::Fast, true)).await.unwrap();
    llm.chat(&request(Tier::Main, false)).await.unwrap();

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let (fast, main) = (&reqs[0], &reqs[1]);
    assert_eq!(fast.path, "/v1/chat/completions");
    assert_eq!(fast.protocol, Protocol::OpenAi);
    assert_eq!(fast.header("authorization"), Some("Bearer sk-test-openai"));
    assert_eq!(
        fast.body,
        json!({
            "model": "fast-model",
            "messages": [
                {"role": "system", "content": "Extract facts about the user as a JSON array."},
                {"role": "user", "content": "I moved to Lyon."},
                {"role": "assistant", "content": "Nice!"},
                {"role": "user", "content": "I run Postgres at work."}
            ],
            "max_tokens": 400,
            "temperature": fast.body["temperature"],
            "response_format": {"type": "json_object"}
        })
    );
    assert!((fast.temperature.unwrap() - 0.2).abs() < 1e-6);
    assert!(fast.json_mode);
    assert_eq!(main.model, "main-model");
    assert!(!main.json_mode);
    assert!(main.body.get("response_format").is_none(), "{}", main.body);
}

#[tokio::test]
async fn openai_without_key_sends_no_authorization_and_one_model_serves_both_tiers() {
    let server = ScriptedLlm::start().await;
    server.on(Rule::any().reply("ok"));
    let cfg = LlmConfig::OpenAi {
        base_url: server.base_url(),
        api_key: None,
        model: "llama3".to_owned(),
        fast_model: Some(String::new()),
    };
    let llm = build_llm_with(&cfg, policy()).unwrap();
    assert_eq!(llm.describe(), "openai:llama3");
    let resp = llm.chat(&request(Tier::Fast, false)).await.unwrap();
    assert_eq!(resp.model, "llama3");
    let sent = &server.requests()[0];
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.model, "llama3");
}

#[tokio::test]
async fn anthropic_request_shape() {
    let server = ScriptedLlm::start().await;
    server.require_api_key("sk-ant-test");
    server.on(Rule::any().reply("ok"));
    let llm = client(Proto::Anthropic, &server, policy());
    assert_eq!(llm.describe(), "anthropic:fast-model (fast) / main-model (main)");
    llm.chat(&request(Tier::Fast, true)).await.unwrap();
    let mut hot = request(Tier::Main, false);
    hot.temperature = 1.5;
    llm.chat(&hot).await.unwrap();

    let reqs = server.requests();
    let (fast, main) = (&reqs[0], &reqs[1]);
    assert_eq!(fast.path, "/v1/messages");
    assert_eq!(fast.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(fast.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(fast.header("authorization"), None);
    // No JSON mode on the wire; the system prompt is top-level.
    assert_eq!(
        fast.body,
        json!({
            "model": "fast-model",
            "max_tokens": 400,
            "system": "Extract facts about the user as a JSON array.",
            "messages": [
                {"role": "user", "content": "I moved to Lyon."},
                {"role": "assistant", "content": "Nice!"},
                {"role": "user", "content": "I run Postgres at work."}
            ],
            "temperature": fast.body["temperature"]
        })
    );
    assert_eq!(main.model, "main-model");
    // Anthropic's temperature range is 0..=1.
    assert_eq!(main.temperature, Some(1.0));
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_waited_for_then_succeeds() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().reply("after the limit"));
        server.on(Rule::any().status(429).retry_after(1).times(1));
        let llm = client(proto, &server, policy());
        let started = Instant::now();
        let resp = chat(&llm).await.unwrap();
        let took = started.elapsed();
        assert_eq!(resp.content, "after the limit", "{proto:?}");
        let reqs = server.requests();
        assert_eq!(reqs.iter().map(|r| r.status).collect::<Vec<_>>(), [Some(429), Some(200)]);
        // Waited the server's 1 s, not the 20 ms backoff (loose bounds for a loaded machine).
        let gap = reqs[1].since_start - reqs[0].since_start;
        assert!(gap >= Duration::from_millis(900), "{proto:?}: retried after {gap:?}");
        assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(20), "{took:?}");
    }
}

#[tokio::test]
async fn a_transient_503_without_retry_after_is_retried_with_backoff() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().reply("fine"));
        server.on(Rule::any().status(503).once());
        let llm = client(proto, &server, policy());
        assert_eq!(chat(&llm).await.unwrap().content, "fine", "{proto:?}");
        assert_eq!(server.request_count(), 2, "{proto:?}");
    }
}

#[tokio::test]
async fn persistent_500_is_a_runtime_error_after_three_attempts() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().status(500).message("the model crashed"));
        let llm = client(proto, &server, policy());
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?}: {err}");
        assert!(err.message.contains("500") && err.message.contains("the model crashed"), "{err}");
        assert!(err.message.contains("3 attempts"), "{err}");
        assert_eq!(err.retry_after, None);
        assert_eq!(server.request_count(), 3, "{proto:?}");
    }
}

#[tokio::test]
async fn persistent_429_hands_the_last_retry_after_to_the_caller() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().status(429).retry_after(0));
        server.on(Rule::any().status(429).retry_after(2).times(1));
        let llm = client(proto, &server, HttpPolicy { max_attempts: 2, ..policy() });
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?}: {err}");
        assert_eq!(err.retry_after, Some(Duration::ZERO), "{proto:?}: the last one counts");
        assert_eq!(server.request_count(), 2);
    }
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_fails_at_once_with_retry_after() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().status(429).retry_after(120));
        let llm = client(proto, &server, policy());
        let started = Instant::now();
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?}: {err}");
        assert_eq!(err.retry_after, Some(Duration::from_secs(120)));
        assert_eq!(server.request_count(), 1, "{proto:?}: not waited for in the call");
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}

#[tokio::test]
async fn unauthorized_is_a_user_error_without_retry() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().status(401).message("Incorrect API key provided"));
        let llm = client(proto, &server, policy());
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::User, "{proto:?}: {err}");
        assert!(err.message.contains("Incorrect API key provided"), "{err}");
        assert!(!err.message.contains("sk-"), "the key is never in a message: {err}");
        assert_eq!(server.request_count(), 1, "{proto:?}: exactly one request");
    }
}

#[tokio::test]
async fn other_client_errors_are_user_errors_without_retry() {
    for status in [400, 403, 404, 422] {
        for proto in BOTH {
            let server = ScriptedLlm::start().await;
            server.on(Rule::any().status(status).message(format!("refused with {status}")));
            let llm = client(proto, &server, policy());
            let err = chat(&llm).await.unwrap_err();
            assert_eq!(err.fault, FaultSource::User, "{proto:?} {status}: {err}");
            assert!(err.message.contains(&format!("refused with {status}")), "{err}");
            assert_eq!(server.request_count(), 1, "{proto:?} {status}");
        }
    }
}

#[tokio::test]
async fn a_malformed_body_is_a_runtime_error() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().malformed());
        let llm = client(proto, &server, policy());
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?}: {err}");
        assert!(err.message.contains("malformed"), "{err}");
        assert_eq!(server.request_count(), 1);
    }
}

#[tokio::test]
async fn an_answer_without_content_is_a_runtime_error() {
    let cases = [
        (Proto::OpenAi, r#"{"id":"x","object":"chat.completion","model":"m","choices":[]}"#),
        (
            Proto::OpenAi,
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't"},"finish_reason":"stop"}]}"#,
        ),
        (
            Proto::Anthropic,
            r#"{"id":"x","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"refusal","usage":{"input_tokens":1,"output_tokens":0}}"#,
        ),
    ];
    for (proto, body) in cases {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().raw(200, body));
        let llm = client(proto, &server, policy());
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?} {body}: {err}");
        assert!(err.message.contains("no "), "{err}");
    }
}

#[tokio::test]
async fn a_slow_server_times_out_as_a_runtime_error() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().delay(Duration::from_secs(30)).reply("too late"));
        let short = HttpPolicy { timeout: Duration::from_millis(300), ..policy() };
        let llm = client(proto, &server, short);
        let started = Instant::now();
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?}: {err}");
        assert!(err.message.contains("timed out"), "{err}");
        assert_eq!(server.request_count(), 3, "{proto:?}: timeouts are retried");
        // Three 0.3 s attempts, far from the 30 s the server would take.
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_runtime_error() {
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for proto in BOTH {
        let llm =
            build_llm_with(&config(proto, format!("http://127.0.0.1:{port}")), policy()).unwrap();
        let err = chat(&llm).await.unwrap_err();
        assert_eq!(err.fault, FaultSource::Runtime, "{proto:?}: {err}");
    }
}

#[tokio::test]
async fn impossible_requests_are_bugs_and_reach_no_server() {
    for proto in BOTH {
        let server = ScriptedLlm::start().await;
        server.on(Rule::any().reply("x"));
        let llm = client(proto, &server, policy());
        let mut empty = request(Tier::Main, false);
        empty.messages.clear();
        assert_eq!(llm.chat(&empty).await.unwrap_err().fault, FaultSource::Bug);
        let mut zero = request(Tier::Main, false);
        zero.max_tokens = 0;
        assert_eq!(llm.chat(&zero).await.unwrap_err().fault, FaultSource::Bug);
        assert_eq!(server.request_count(), 0);
    }
}

#[test]
fn build_checks_settings_without_network_and_debug_hides_keys() {
    // Nothing listens on port 9: building still succeeds (no network at build).
    for proto in BOTH {
        assert!(build_llm(&config(proto, "http://127.0.0.1:9".to_owned())).is_ok());
    }
    let bad = [
        LlmConfig::OpenAi {
            base_url: "api.openai.com".to_owned(),
            api_key: None,
            model: "m".to_owned(),
            fast_model: None,
        },
        LlmConfig::OpenAi {
            base_url: "http://x".to_owned(),
            api_key: None,
            model: "  ".to_owned(),
            fast_model: None,
        },
        LlmConfig::Anthropic {
            base_url: "https://api.anthropic.com".to_owned(),
            api_key: String::new(),
            model: "m".to_owned(),
            fast_model: None,
        },
    ];
    for cfg in bad {
        let err = build_llm(&cfg).err().unwrap_or_else(|| panic!("accepted {cfg:?}"));
        assert_eq!(err.fault, FaultSource::User, "{cfg:?}: {err}");
    }
    for proto in BOTH {
        let shown = format!("{:?}", config(proto, "http://h".to_owned()));
        assert!(!shown.contains("sk-") && shown.contains("<redacted>"), "{shown}");
        let built = build_llm(&config(proto, "http://h".to_owned())).unwrap();
        assert!(!built.describe().contains("sk-"));
    }
}
