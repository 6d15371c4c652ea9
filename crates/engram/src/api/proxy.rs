//! The memory proxy's wire logic, for both vendors and independent of the transport: whom a
//! chat request is for, what its user asked, where the context block goes in it, and what
//! the answer said (whole, or read from the stream as it passes).
//!
//! The proxy changes a request in one place only: the system prompt gets the context block
//! (OpenAI: the first `system`/`developer` message, or a new first `system` message;
//! Anthropic: the top-level `system`, string or text blocks). Every other field — tools,
//! images, `n`, `response_format`, unknown ones — is sent on as it came, and the answer
//! comes back as the upstream sent it.

use serde_json::{Value, json};

/// The two chat protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

impl Vendor {
    /// The upstream path of a chat call.
    pub fn path(self) -> &'static str {
        match self {
            Vendor::OpenAi => "/v1/chat/completions",
            Vendor::Anthropic => "/v1/messages",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Vendor::OpenAi => "openai",
            Vendor::Anthropic => "anthropic",
        }
    }
}

/// Headers that name the scope of a proxied call (they are not forwarded upstream).
pub const USER_HEADER: &str = "x-engram-user-id";
pub const AGENT_HEADER: &str = "x-engram-agent-id";
pub const CONVERSATION_HEADER: &str = "x-engram-conversation-id";
/// Response header set when engram could not add memory (its store failed): the call went
/// through without it.
pub const MEMORY_HEADER: &str = "engram-memory";

/// Whom a call is for, from the headers first, then the request: OpenAI's `user` field,
/// Anthropic's `metadata.user_id`.
pub fn user_of(vendor: Vendor, header: Option<&str>, body: &Value) -> Option<String> {
    if let Some(h) = header.filter(|h| !h.trim().is_empty()) {
        return Some(h.to_string());
    }
    let field = match vendor {
        Vendor::OpenAi => body.get("user"),
        Vendor::Anthropic => body.pointer("/metadata/user_id"),
    };
    field.and_then(Value::as_str).filter(|u| !u.trim().is_empty()).map(str::to_string)
}

/// The conversation a call belongs to when the client names none: one per user and agent.
pub fn default_conversation(user: &str, agent: Option<&str>) -> String {
    format!("proxy:{user}:{}", agent.unwrap_or("-"))
}

/// Whether the request asks for a stream.
pub fn streams(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The text of a message's `content`: a string, or the text parts of an array.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => String::new(),
    }
}

/// The text of the last user message (the query for the context block and the user turn
/// appended afterwards); None when it has no text.
pub fn last_user_text(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    let last =
        messages.iter().rev().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let text = text_of(last.get("content")?);
    (!text.trim().is_empty()).then_some(text)
}

/// Put `block` into the request's system prompt (after what the client wrote there).
pub fn inject(vendor: Vendor, body: &mut Value, block: &str) {
    match vendor {
        Vendor::OpenAi => {
            let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
                return;
            };
            let first_is_system = messages.first().is_some_and(|m| {
                matches!(m.get("role").and_then(Value::as_str), Some("system" | "developer"))
            });
            if first_is_system {
                append_to(&mut messages[0]["content"], block);
            } else {
                messages.insert(0, json!({ "role": "system", "content": block }));
            }
        }
        Vendor::Anthropic => match body.get_mut("system") {
            Some(system) if !system.is_null() => append_to(system, block),
            _ => body["system"] = json!(block),
        },
    }
}

/// Add `block` after a string or an array of text blocks.
fn append_to(target: &mut Value, block: &str) {
    match target {
        Value::String(s) if s.trim().is_empty() => *s = block.to_string(),
        Value::String(s) => {
            s.push_str("\n\n");
            s.push_str(block);
        }
        Value::Array(parts) => parts.push(json!({ "type": "text", "text": block })),
        other @ (Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_)) => {
            *other = json!(block);
        }
    }
}

/// The text of a complete (non-streamed) answer.
pub fn answer_of(vendor: Vendor, body: &Value) -> Option<String> {
    let text = match vendor {
        Vendor::OpenAi => text_of(body.pointer("/choices/0/message/content")?),
        Vendor::Anthropic => text_of(body.get("content")?),
    };
    (!text.trim().is_empty()).then_some(text)
}

/// Reads a streamed answer as it passes: server-sent events, cut anywhere into chunks,
/// whose `data:` lines carry the text deltas (OpenAI: `choices[0].delta.content`;
/// Anthropic: `content_block_delta` events with a `text_delta`).
#[derive(Debug)]
pub struct StreamReader {
    vendor: Vendor,
    line: Vec<u8>,
    text: String,
    /// The stream said it is complete (`[DONE]` / `message_stop`).
    finished: bool,
}

impl StreamReader {
    pub fn new(vendor: Vendor) -> Self {
        StreamReader { vendor, line: Vec::new(), text: String::new(), finished: false }
    }

    /// Read a chunk of the stream.
    pub fn feed(&mut self, chunk: &[u8]) {
        for &b in chunk {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.line_done(&line);
            } else {
                self.line.push(b);
            }
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let Some(data) = line.trim_end_matches('\r').strip_prefix("data:") else { return };
        let data = data.trim();
        if data == "[DONE]" {
            self.finished = true;
            return;
        }
        let Ok(event) = serde_json::from_str::<Value>(data) else { return };
        match self.vendor {
            Vendor::OpenAi => {
                if let Some(t) = event.pointer("/choices/0/delta/content").and_then(Value::as_str) {
                    self.text.push_str(t);
                }
            }
            Vendor::Anthropic => match event.get("type").and_then(Value::as_str) {
                Some("content_block_delta") => {
                    if let Some(t) = event.pointer("/delta/text").and_then(Value::as_str) {
                        self.text.push_str(t);
                    }
                }
                Some("message_stop") => self.finished = true,
                _ => {}
            },
        }
    }

    /// The answer's text, once the stream said it is complete.
    pub fn answer(&self) -> Option<&str> {
        (self.finished && !self.text.trim().is_empty()).then_some(self.text.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_goes_after_the_clients_system_prompt() {
        let mut b = json!({ "messages": [{ "role": "user", "content": "hi" }] });
        inject(Vendor::OpenAi, &mut b, "Known facts");
        assert_eq!(b["messages"][0], json!({ "role": "system", "content": "Known facts" }));
        assert_eq!(b["messages"][1]["content"], "hi");
        let mut b = json!({ "messages": [{ "role": "developer", "content": [{ "type": "text",
            "text": "Be brief." }] }, { "role": "user", "content": "hi" }] });
        inject(Vendor::OpenAi, &mut b, "Known facts");
        assert_eq!(
            b["messages"][0]["content"][1],
            json!({ "type": "text", "text": "Known facts" })
        );
        let mut b = json!({ "system": "Be brief.", "messages": [] });
        inject(Vendor::Anthropic, &mut b, "Known facts");
        assert_eq!(b["system"], "Be brief.\n\nKnown facts");
        let mut b = json!({ "messages": [] });
        inject(Vendor::Anthropic, &mut b, "Known facts");
        assert_eq!(b["system"], "Known facts");
    }

    #[test]
    fn scope_and_texts_are_read_from_either_protocol() {
        let o = json!({ "user": "alice", "messages": [
            { "role": "user", "content": "first" }, { "role": "assistant", "content": "ok" },
            { "role": "user", "content": [{ "type": "text", "text": "second" },
                { "type": "image_url", "image_url": { "url": "data:," } }] }] });
        assert_eq!(user_of(Vendor::OpenAi, None, &o).as_deref(), Some("alice"));
        assert_eq!(user_of(Vendor::OpenAi, Some("bob"), &o).as_deref(), Some("bob"));
        assert_eq!(last_user_text(&o).as_deref(), Some("second"));
        let a = json!({ "metadata": { "user_id": "carol" }, "content": [
            { "type": "text", "text": "Hello" }, { "type": "tool_use", "id": "t" }] });
        assert_eq!(user_of(Vendor::Anthropic, None, &a).as_deref(), Some("carol"));
        assert_eq!(answer_of(Vendor::Anthropic, &a).as_deref(), Some("Hello"));
    }

    #[test]
    fn a_stream_is_read_whatever_its_chunks() {
        let sse = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
                   data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
                   data: {\"choices\":[{\"delta\":{\"content\":\"lo é\"}}]}\n\ndata: [DONE]\n\n";
        for cut in [1, 2, 7, 1000] {
            let mut r = StreamReader::new(Vendor::OpenAi);
            for chunk in sse.as_bytes().chunks(cut) {
                r.feed(chunk);
            }
            assert_eq!(r.answer(), Some("Hello é"), "chunks of {cut}");
        }
        let mut r = StreamReader::new(Vendor::OpenAi);
        r.feed(&sse.as_bytes()[..60]);
        assert_eq!(r.answer(), None, "an unfinished stream has no answer");
    }
}
