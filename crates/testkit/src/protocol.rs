//! Wire shapes of the two protocols: answers, errors, request validation, token counts.
//!
//! Shapes follow the public API references:
//! - OpenAI: `{"id","object":"chat.completion","created","model","choices":[{"index":0,
//!   "message":{"role":"assistant","content"},"finish_reason":"stop"}],"usage":{
//!   "prompt_tokens","completion_tokens","total_tokens"}}`; errors
//!   `{"error":{"message","type","param","code"}}`.
//! - Anthropic: `{"id","type":"message","role":"assistant","model","content":[{"type":"text",
//!   "text"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens",
//!   "output_tokens"}}`; errors `{"type":"error","error":{"type","message"}}`.
//!
//! Streams (`"stream": true`) are server-sent events in each vendor's shape ([`stream`]):
//! OpenAI `chat.completion.chunk` objects on `data:` lines ending with `data: [DONE]`;
//! Anthropic's named events `message_start`, `content_block_start`, `ping`,
//! `content_block_delta` (`text_delta`), `content_block_stop`, `message_delta`,
//! `message_stop`.
//!
//! Token counts are estimates (characters / 4, at least 1), plausible and non-zero.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::request::{Protocol, RecordedRequest};

/// Rough token count of a text: characters / 4, rounded up, at least 1.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

/// A successful completion with `text`, in the protocol's shape.
pub fn completion(r: &RecordedRequest, text: &str, usage: Option<(u64, u64)>) -> Value {
    let (prompt, completion) =
        usage.unwrap_or_else(|| (estimate_tokens(&r.full_text()), estimate_tokens(text)));
    match r.protocol {
        Protocol::Anthropic => json!({
            "id": format!("msg_scripted_{}", r.seq),
            "type": "message",
            "role": "assistant",
            "model": r.model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }),
        Protocol::OpenAi | Protocol::Unknown => {
            let created = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            json!({
                "id": format!("chatcmpl-scripted-{}", r.seq),
                "object": "chat.completion",
                "created": created,
                "model": r.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            })
        }
    }
}

/// An error body in the protocol's shape, with the vendor's error type for `status`.
pub fn error_body(protocol: Protocol, status: u16, message: &str) -> Value {
    match protocol {
        Protocol::Anthropic => {
            let kind = match status {
                400 => "invalid_request_error",
                401 => "authentication_error",
                403 => "permission_error",
                404 => "not_found_error",
                413 => "request_too_large",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                s if s >= 500 => "api_error",
                _ => "invalid_request_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Protocol::OpenAi | Protocol::Unknown => {
            let (kind, code) = match status {
                401 => ("invalid_request_error", Some("invalid_api_key")),
                404 => ("invalid_request_error", Some("model_not_found")),
                429 => ("requests", Some("rate_limit_exceeded")),
                s if s >= 500 => ("server_error", None),
                _ => ("invalid_request_error", None),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
    }
}

/// Why the real API would refuse this request, as (status, message); `None` when it is
/// acceptable. `required_key` is the key set with [`crate::ScriptedLlm::require_api_key`].
pub fn validate(r: &RecordedRequest, required_key: Option<&str>) -> Option<(u16, String)> {
    let key_problem = match (r.protocol, required_key, r.api_key()) {
        (Protocol::Anthropic, _, None) => Some("x-api-key header is required".to_owned()),
        (_, Some(_), None) => Some("no API key provided".to_owned()),
        (_, Some(want), Some(got)) if got != want => {
            Some(format!("invalid API key {:?}", crate::request::preview(got, 8)))
        }
        _ => None,
    };
    if let Some(m) = key_problem {
        return Some((401, m));
    }
    let Some(obj) = r.body.as_object() else {
        return Some((400, "the request body is not a JSON object".to_owned()));
    };
    if !obj.get("model").is_some_and(Value::is_string) {
        return Some((400, "model: a string is required".to_owned()));
    }
    match obj.get("messages").and_then(Value::as_array) {
        None => return Some((400, "messages: an array is required".to_owned())),
        Some(m) if m.is_empty() => {
            return Some((400, "messages: at least one message is required".to_owned()));
        }
        Some(_) => {}
    }
    if obj.get("stream").is_some_and(|v| !v.is_boolean()) {
        return Some((400, "stream: a boolean is required".to_owned()));
    }
    if r.protocol == Protocol::Anthropic {
        if r.header("anthropic-version").is_none() {
            return Some((400, "anthropic-version: header is required".to_owned()));
        }
        if !obj.get("max_tokens").is_some_and(Value::is_u64) {
            return Some((400, "max_tokens: Field required".to_owned()));
        }
        if let Some(bad) = r.messages.iter().find(|m| m.role != "user" && m.role != "assistant") {
            return Some((
                400,
                format!(
                    "messages: Unexpected role {:?}. Allowed roles are \"user\" or \"assistant\"; \
                     the system prompt goes in the top-level `system` field",
                    bad.role
                ),
            ));
        }
    }
    None
}

/// Whether the request asks for a stream.
pub fn wants_stream(r: &RecordedRequest) -> bool {
    r.body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The pieces a streamed `text` is cut into: words with the space before them, so that
/// joining the pieces gives the text back exactly.
pub fn pieces(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c == ' ' && !current.trim().is_empty() {
            out.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}

/// The server-sent events of a streamed completion with `text`, in the protocol's shape;
/// each string is one event (with its blank-line terminator).
pub fn stream(r: &RecordedRequest, text: &str, usage: Option<(u64, u64)>) -> Vec<String> {
    let (prompt, completion) =
        usage.unwrap_or_else(|| (estimate_tokens(&r.full_text()), estimate_tokens(text)));
    match r.protocol {
        Protocol::Anthropic => {
            let named = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
            let mut out = vec![
                named(
                    "message_start",
                    json!({"type": "message_start", "message": {
                        "id": format!("msg_scripted_{}", r.seq), "type": "message",
                        "role": "assistant", "model": r.model, "content": [],
                        "stop_reason": null, "stop_sequence": null,
                        "usage": {"input_tokens": prompt, "output_tokens": 1}}}),
                ),
                named(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}}),
                ),
                named("ping", json!({"type": "ping"})),
            ];
            for p in pieces(text) {
                out.push(named(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": p}}),
                ));
            }
            out.push(named(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            out.push(named(
                "message_delta",
                json!({"type": "message_delta",
                       "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                       "usage": {"output_tokens": completion}}),
            ));
            out.push(named("message_stop", json!({"type": "message_stop"})));
            out
        }
        Protocol::OpenAi | Protocol::Unknown => {
            let created = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            let id = format!("chatcmpl-scripted-{}", r.seq);
            let chunk = |delta: Value, finish: Value| {
                let c = json!({"id": id, "object": "chat.completion.chunk", "created": created,
                    "model": r.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                format!("data: {c}\n\n")
            };
            let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
            for p in pieces(text) {
                out.push(chunk(json!({"content": p}), Value::Null));
            }
            out.push(chunk(json!({}), json!("stop")));
            let usage = r.body.pointer("/stream_options/include_usage").and_then(Value::as_bool);
            if usage == Some(true) {
                let c = json!({"id": id, "object": "chat.completion.chunk", "created": created,
                    "model": r.model, "choices": [],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}});
                out.push(format!("data: {c}\n\n"));
            }
            out.push("data: [DONE]\n\n".to_owned());
            out
        }
    }
}
