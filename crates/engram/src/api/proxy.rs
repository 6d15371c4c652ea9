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
    engram_core::model::proxy_conversation(user, agent)
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

/// The text of the last user message that has text: the question of the turn, also when
/// the turn ends with tool results (an Anthropic `tool_result` message has none) or an image.
/// The query for the context block.
pub fn last_user_text(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    messages
        .iter()
        .rev()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .find(|t| !t.trim().is_empty())
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

/// A tool the model called and what it returned, read from the request that sends the
/// result back (an agent's tool loop).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    pub name: String,
    pub args: Value,
    pub result: String,
}

/// What a request brings to its conversation besides the answer: the user's new message,
/// and in a tool loop (a request that ends with tool results) the calls with their results.
/// A loop's user message came with its first request: it is not brought again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asked {
    pub question: Option<String>,
    pub tools: Vec<ToolUse>,
    /// In a tool loop, the user message that started it: saved only when the conversation
    /// is new to engram (its first call already carried the loop).
    pub loop_question: Option<String>,
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or_default()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// What the request's last turn says (see [`Asked`]). Assistant messages at the end are a
/// prefill of the answer, not a turn, and are passed over.
pub fn asked(vendor: Vendor, body: &Value) -> Asked {
    let Some(all) = body.get("messages").and_then(Value::as_array) else {
        return Asked::default();
    };
    let end = all.iter().rposition(|m| role(m) != "assistant").map_or(0, |i| i + 1);
    let messages = &all[..end];
    let Some(last) = messages.last() else { return Asked::default() };
    let text = |m: &Value| {
        let content = m.get("content").unwrap_or(&Value::Null);
        let t = text_of(content);
        if !t.trim().is_empty() {
            return Some(t);
        }
        // A turn of images or files alone is kept as what it held.
        let parts: Vec<String> = content
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| str_at(p, "/type"))
            .filter(|t| !matches!(*t, "text" | "tool_result" | "tool_use"))
            .map(|t| match t {
                "image_url" | "image" | "input_image" => "[image]".to_string(),
                other => format!("[{other}]"),
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    };
    match vendor {
        Vendor::OpenAi if role(last) == "tool" => {
            let start = messages.iter().rposition(|m| role(m) != "tool").map_or(0, |i| i + 1);
            let calls = messages[..start]
                .last()
                .filter(|m| role(m) == "assistant")
                .and_then(|m| m.get("tool_calls"))
                .and_then(Value::as_array);
            let tools = messages[start..]
                .iter()
                .map(|t| {
                    let id = t.get("tool_call_id").and_then(Value::as_str);
                    let call = calls.and_then(|cs| {
                        cs.iter()
                            .find(|c| id.is_some() && c.get("id").and_then(Value::as_str) == id)
                    });
                    let name = call
                        .and_then(|c| str_at(c, "/function/name"))
                        .or_else(|| str_at(t, "/name"))
                        .unwrap_or("tool");
                    // Arguments travel as a JSON string.
                    let args = match call.and_then(|c| c.pointer("/function/arguments")) {
                        Some(Value::String(a)) => {
                            serde_json::from_str(a).unwrap_or_else(|_| Value::String(a.clone()))
                        }
                        Some(other) => other.clone(),
                        None => Value::Null,
                    };
                    ToolUse {
                        name: name.to_string(),
                        args,
                        result: text_of(t.get("content").unwrap_or(&Value::Null)),
                    }
                })
                .collect();
            let loop_question =
                messages[..start].iter().rev().filter(|m| role(m) == "user").find_map(text);
            Asked { question: None, tools, loop_question }
        }
        Vendor::OpenAi => Asked {
            question: (role(last) == "user").then(|| text(last)).flatten(),
            tools: Vec::new(),
            loop_question: None,
        },
        Vendor::Anthropic => {
            if role(last) != "user" {
                return Asked::default();
            }
            let blocks = last.get("content").and_then(Value::as_array);
            let uses: Vec<&Value> = messages[..messages.len() - 1]
                .last()
                .filter(|m| role(m) == "assistant")
                .and_then(|m| m.get("content"))
                .and_then(Value::as_array)
                .map(|c| c.iter().filter(|b| str_at(b, "/type") == Some("tool_use")).collect())
                .unwrap_or_default();
            let tools = blocks
                .into_iter()
                .flatten()
                .filter(|b| str_at(b, "/type") == Some("tool_result"))
                .map(|r| {
                    let id = str_at(r, "/tool_use_id");
                    let call = uses.iter().find(|u| id.is_some() && str_at(u, "/id") == id);
                    ToolUse {
                        name: call.and_then(|c| str_at(c, "/name")).unwrap_or("tool").to_string(),
                        args: call.and_then(|c| c.get("input")).cloned().unwrap_or(Value::Null),
                        result: text_of(r.get("content").unwrap_or(&Value::Null)),
                    }
                })
                .collect::<Vec<_>>();
            let question = text(last);
            let loop_question = (question.is_none() && !tools.is_empty())
                .then(|| {
                    messages[..messages.len() - 1]
                        .iter()
                        .rev()
                        .filter(|m| role(m) == "user")
                        .find_map(text)
                })
                .flatten();
            Asked { question, tools, loop_question }
        }
    }
}

/// An answer as the upstream gave it: its text, if any (a tool call alone has none), and
/// whether it was cut by the output limit (OpenAI's `finish_reason: "length"`, Anthropic's
/// `stop_reason: "max_tokens"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    pub text: Option<String>,
    pub truncated: bool,
}

fn cut_short(vendor: Vendor, reason: Option<&str>) -> bool {
    match vendor {
        Vendor::OpenAi => reason == Some("length"),
        Vendor::Anthropic => reason == Some("max_tokens"),
    }
}

/// A complete (non-streamed) answer.
pub fn answer_of(vendor: Vendor, body: &Value) -> Answer {
    let (text, reason) = match vendor {
        Vendor::OpenAi => (
            body.pointer("/choices/0/message/content").map(text_of),
            str_at(body, "/choices/0/finish_reason"),
        ),
        Vendor::Anthropic => (body.get("content").map(text_of), str_at(body, "/stop_reason")),
    };
    Answer { text: text.filter(|t| !t.trim().is_empty()), truncated: cut_short(vendor, reason) }
}

/// Reads a streamed answer as it passes: server-sent events, cut anywhere into chunks,
/// whose `data:` lines carry the text deltas (OpenAI: `choices[0].delta.content`;
/// Anthropic: `content_block_delta` events with a `text_delta`), the reason it stopped, and
/// an `error` event, after which the stream is a failure whatever it said before.
#[derive(Debug)]
pub struct StreamReader {
    vendor: Vendor,
    line: Vec<u8>,
    text: String,
    /// The stream said it is complete (`[DONE]` / `message_stop`).
    finished: bool,
    /// It sent an error event.
    failed: bool,
    truncated: bool,
}

impl StreamReader {
    pub fn new(vendor: Vendor) -> Self {
        StreamReader {
            vendor,
            line: Vec::new(),
            text: String::new(),
            finished: false,
            failed: false,
            truncated: false,
        }
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
        if event.get("error").is_some_and(|e| !e.is_null())
            || str_at(&event, "/type") == Some("error")
        {
            self.failed = true;
            return;
        }
        match self.vendor {
            Vendor::OpenAi => {
                if let Some(t) = str_at(&event, "/choices/0/delta/content") {
                    self.text.push_str(t);
                }
                self.truncated |=
                    cut_short(self.vendor, str_at(&event, "/choices/0/finish_reason"));
            }
            Vendor::Anthropic => match str_at(&event, "/type") {
                Some("content_block_delta") => {
                    if let Some(t) = str_at(&event, "/delta/text") {
                        self.text.push_str(t);
                    }
                }
                Some("message_delta") => {
                    self.truncated |= cut_short(self.vendor, str_at(&event, "/delta/stop_reason"));
                }
                Some("message_stop") => self.finished = true,
                _ => {}
            },
        }
    }

    /// The answer, once the stream said it is complete without an error.
    pub fn answer(&self) -> Option<Answer> {
        (self.finished && !self.failed).then(|| Answer {
            text: Some(self.text.clone()).filter(|t| !t.trim().is_empty()),
            truncated: self.truncated,
        })
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
    fn default_conversations_of_different_scopes_never_meet() {
        assert_eq!(default_conversation("alice", None), "proxy:alice:-");
        assert_eq!(default_conversation("alice", Some("bot")), "proxy:alice:bot");
        assert_ne!(default_conversation("x:y", Some("z")), default_conversation("x", Some("y:z")));
        assert_ne!(default_conversation("alice", Some("-")), default_conversation("alice", None));
        assert_ne!(
            default_conversation("a%3Ab", None),
            default_conversation("a:b", None),
            "the escape itself is escaped"
        );
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
        assert_eq!(answer_of(Vendor::Anthropic, &a).text.as_deref(), Some("Hello"));
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
            let a = r.answer().unwrap_or_else(|| panic!("chunks of {cut}: no answer"));
            assert_eq!(a.text.as_deref(), Some("Hello é"), "chunks of {cut}");
        }
        let mut r = StreamReader::new(Vendor::OpenAi);
        r.feed(&sse.as_bytes()[..60]);
        assert_eq!(r.answer(), None, "an unfinished stream has no answer");
    }

    #[test]
    fn a_tool_loop_brings_its_calls_and_results_not_its_question_again() {
        let first = json!({ "messages": [{ "role": "user", "content": "Weather in Oslo?" }] });
        assert_eq!(
            asked(Vendor::OpenAi, &first),
            Asked { question: Some("Weather in Oslo?".into()), tools: vec![], loop_question: None }
        );
        let loop_ = json!({ "messages": [
            { "role": "user", "content": "Weather in Oslo?" },
            { "role": "assistant", "content": null, "tool_calls": [{ "id": "c1", "type": "function",
                "function": { "name": "weather", "arguments": "{\"city\":\"Oslo\"}" } }] },
            { "role": "tool", "tool_call_id": "c1", "content": "4 °C, rain" }] });
        assert_eq!(
            asked(Vendor::OpenAi, &loop_),
            Asked {
                question: None,
                tools: vec![ToolUse {
                    name: "weather".into(),
                    args: json!({ "city": "Oslo" }),
                    result: "4 °C, rain".into()
                }],
                loop_question: Some("Weather in Oslo?".into()),
            }
        );
        // The query for memory is still the user's question.
        assert_eq!(last_user_text(&loop_).as_deref(), Some("Weather in Oslo?"));
        let anthropic = json!({ "messages": [
            { "role": "user", "content": "Weather in Oslo?" },
            { "role": "assistant", "content": [{ "type": "tool_use", "id": "t1", "name": "weather",
                "input": { "city": "Oslo" } }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "t1",
                "content": [{ "type": "text", "text": "4 °C, rain" }] }] }] });
        assert_eq!(last_user_text(&anthropic).as_deref(), Some("Weather in Oslo?"));
        assert_eq!(
            asked(Vendor::Anthropic, &anthropic),
            Asked {
                question: None,
                tools: vec![ToolUse {
                    name: "weather".into(),
                    args: json!({ "city": "Oslo" }),
                    result: "4 °C, rain".into()
                }],
                loop_question: Some("Weather in Oslo?".into()),
            }
        );
        // A turn of an image alone is kept as such.
        let image = json!({ "messages": [{ "role": "user", "content": [
            { "type": "image_url", "image_url": { "url": "data:," } }] }] });
        assert_eq!(asked(Vendor::OpenAi, &image).question.as_deref(), Some("[image]"));
        // A prefilled answer is not a turn: the question before it is.
        let prefill = json!({ "messages": [{ "role": "user", "content": "Name a colour." },
            { "role": "assistant", "content": "The colour is" }] });
        assert_eq!(asked(Vendor::Anthropic, &prefill).question.as_deref(), Some("Name a colour."));
    }

    #[test]
    fn a_stream_with_an_error_event_has_no_answer_and_a_cut_one_says_so() {
        let err = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
                   data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n";
        let mut r = StreamReader::new(Vendor::OpenAi);
        r.feed(err.as_bytes());
        assert_eq!(r.answer(), None);
        let err = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n\
                   event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut r = StreamReader::new(Vendor::Anthropic);
        r.feed(err.as_bytes());
        assert_eq!(r.answer(), None);
        let cut = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
                   data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
        let mut r = StreamReader::new(Vendor::OpenAi);
        r.feed(cut.as_bytes());
        assert_eq!(r.answer(), Some(Answer { text: Some("Hel".into()), truncated: true }));
        let whole =
            json!({ "content": [{ "type": "text", "text": "Hel" }], "stop_reason": "max_tokens" });
        assert!(answer_of(Vendor::Anthropic, &whole).truncated);
        // A tool call alone completes the stream with no text.
        let tool = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\ndata: [DONE]\n\n";
        let mut r = StreamReader::new(Vendor::OpenAi);
        r.feed(tool.as_bytes());
        assert_eq!(r.answer(), Some(Answer { text: None, truncated: false }));
    }
}
