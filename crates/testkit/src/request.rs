//! What the scripted server received: [`RecordedRequest`], one per HTTP request.
//!
//! The raw parts (path, headers, body) are kept as received; the protocol-specific parts
//! (model, system prompt, messages, JSON mode) are parsed into one protocol-neutral view so
//! that rules and assertions read the same for OpenAI and Anthropic:
//!
//! - OpenAI: `system` (and `developer`) messages are joined into [`RecordedRequest::system`];
//!   the others go to [`RecordedRequest::messages`]. JSON mode is `response_format.type`
//!   `json_object` or `json_schema`.
//! - Anthropic: the `system` field (a string or text blocks) is the system prompt. There is
//!   no JSON mode, so `json_mode` is always false.
//!
//! Message content given as an array of parts (`[{"type":"text","text":…}]`) is flattened to
//! its text parts joined by newlines.

use std::time::{Duration, SystemTime};

use serde_json::Value;

/// Which API a request was sent to (by its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `POST /v1/chat/completions` or `POST /chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
    /// Any other path (answered 404).
    Unknown,
}

/// One message of a recorded request (system messages excluded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// As sent: `user`, `assistant`, `tool`, …
    pub role: String,
    /// The text (parts flattened).
    pub content: String,
}

/// One request the server received, with what it was answered.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Arrival order, from 0.
    pub seq: usize,
    pub protocol: Protocol,
    pub method: String,
    pub path: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as received.
    pub raw_body: String,
    /// The body parsed as JSON, or `Value::Null` when it is not JSON.
    pub body: Value,
    /// Wall-clock arrival time.
    pub received_at: SystemTime,
    /// Arrival time since the server started (monotonic): subtract two of these to measure
    /// the gap between attempts.
    pub since_start: Duration,
    /// The `model` field (empty when missing).
    pub model: String,
    /// The system prompt (see the module doc for where it comes from).
    pub system: String,
    /// The non-system messages, in order.
    pub messages: Vec<Message>,
    /// The content of every `user` message, joined by `\n`.
    pub user: String,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    /// The request asked for JSON output (OpenAI `response_format`).
    pub json_mode: bool,
    /// The label of the rule that answered, `None` when the request was rejected by
    /// validation or no rule matched.
    pub rule: Option<String>,
    /// The HTTP status it was (or will be, after a delay) answered with; `None` for a
    /// request left hanging.
    pub status: Option<u16>,
}

impl RecordedRequest {
    /// Parse a request. `rule` and `status` are filled in later by the server.
    pub(crate) fn parse(
        seq: usize,
        protocol: Protocol,
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        raw_body: String,
        since_start: Duration,
    ) -> Self {
        let body: Value = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
        let model = body.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
        let max_tokens = body
            .get("max_tokens")
            .or_else(|| body.get("max_completion_tokens"))
            .and_then(Value::as_u64);
        let temperature = body.get("temperature").and_then(Value::as_f64);
        let mut system_parts: Vec<String> = Vec::new();
        let mut messages = Vec::new();
        if protocol == Protocol::Anthropic
            && let Some(system) = body.get("system")
        {
            system_parts.push(flatten_content(system));
        }
        for m in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default().to_owned();
            let content = m.get("content").map(flatten_content).unwrap_or_default();
            if protocol == Protocol::OpenAi && (role == "system" || role == "developer") {
                system_parts.push(content);
            } else {
                messages.push(Message { role, content });
            }
        }
        let user = messages
            .iter()
            .filter(|m| m.role == "user")
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let json_mode = protocol == Protocol::OpenAi
            && matches!(
                body.pointer("/response_format/type").and_then(Value::as_str),
                Some("json_object" | "json_schema")
            );
        Self {
            seq,
            protocol,
            method,
            path,
            headers,
            raw_body,
            body,
            received_at: SystemTime::now(),
            since_start,
            model,
            system: system_parts.join("\n"),
            messages,
            user,
            max_tokens,
            temperature,
            json_mode,
            rule: None,
            status: None,
        }
    }

    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The key the client sent: `x-api-key`, else the token of `Authorization: Bearer`.
    pub fn api_key(&self) -> Option<&str> {
        self.header("x-api-key").or_else(|| {
            self.header("authorization").and_then(|v| v.strip_prefix("Bearer ")).map(str::trim)
        })
    }

    /// The system prompt and every message, joined by `\n` (what "the prompt" means for
    /// [`crate::Match::text_contains`] and for token counting).
    pub fn full_text(&self) -> String {
        let mut parts = vec![self.system.as_str()];
        parts.extend(self.messages.iter().map(|m| m.content.as_str()));
        parts.join("\n")
    }

    /// A one-line summary for diagnostics: path, model and the start of the prompts.
    pub fn summary(&self) -> String {
        format!(
            "#{} {} {} model={:?} system={:?} user={:?}",
            self.seq,
            self.method,
            self.path,
            self.model,
            preview(&self.system, 80),
            preview(&self.user, 120)
        )
    }
}

/// `s` cut to `max` characters, with `…` when cut.
pub(crate) fn preview(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// A content value as text: a string as is; an array of parts as its text parts joined by
/// newlines; anything else as its JSON.
fn flatten_content(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_owned),
                Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        Value::Bool(_) | Value::Number(_) | Value::Object(_) => v.to_string(),
    }
}
