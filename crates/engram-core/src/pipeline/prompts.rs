//! The prompts, kept as text files next to this module so they read as prose and diff well,
//! and the transcript form in which messages are shown to the LLM.

use crate::model::{Message, MessageRole};

/// Pass 1 (fast tier). `{date}` and `{weekday}` are the observation date.
pub const EXTRACT: &str = include_str!("prompts/extract.txt");
/// Pass 2 (main tier).
pub const CONSOLIDATE: &str = include_str!("prompts/consolidate.txt");
/// Rolling summary (main tier).
pub const SUMMARY: &str = include_str!("prompts/summary.txt");
/// A search's optional answer (main tier).
pub const SYNTHESIZE: &str = include_str!("prompts/synthesize.txt");
/// Tool-call synthesis (fast tier).
pub const TOOL_CALL: &str = include_str!("prompts/tool_call.txt");

/// The extraction prompt for an observation date.
pub fn extraction(custom: Option<&str>, date: time::Date) -> String {
    let d = format!("{:04}-{:02}-{:02}", date.year(), u8::from(date.month()), date.day());
    custom
        .unwrap_or(EXTRACT)
        .replace("{date}", &d)
        .replace("{weekday}", &date.weekday().to_string())
}

/// Compaction (main tier): the rules every level shares, and each level's task.
pub const COMPACT_RULES: &str = include_str!("prompts/compact_rules.txt");
pub const COMPACT_LEAF: &str = include_str!("prompts/compact_leaf.txt");
pub const COMPACT_BRANCH: &str = include_str!("prompts/compact_branch.txt");
pub const COMPACT_ROOT: &str = include_str!("prompts/compact_root.txt");

/// A message as the LLM reads it: its text, and for a tool call what was called, with what
/// and what came back (the synthesized sentence, once written, is its content).
pub fn message_text(m: &Message) -> String {
    let mut text = m.content.trim().to_string();
    if let Some(tool) = &m.tool_name {
        let args = m.tool_args.as_ref().map(ToString::to_string).unwrap_or_default();
        text = format!("[called {tool} {args}] {text}").trim().to_string();
        if let Some(r) = &m.tool_result {
            text.push_str(&format!(" → {r}"));
        }
    }
    text
}

/// `User:` / `Assistant:` lines for the extractor.
pub fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            MessageRole::User => "User",
            MessageRole::Assistant => "Assistant",
            MessageRole::System => "System",
            MessageRole::Tool => "Tool",
        };
        let text = message_text(m);
        if text.is_empty() {
            continue;
        }
        out.push_str(&format!("{who}: {text}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: MessageRole, content: &str) -> Message {
        Message::sample(role, content)
    }

    #[test]
    fn transcript_prefixes_roles_and_describes_tool_calls() {
        let mut tool = msg(MessageRole::Assistant, "");
        tool.tool_name = Some("weather".into());
        tool.tool_args = Some(serde_json::json!({ "city": "Porto" }));
        let t = transcript(&[
            msg(MessageRole::User, "Hi, I live in Porto."),
            tool,
            msg(MessageRole::Assistant, "  "),
        ]);
        assert_eq!(
            t,
            "User: Hi, I live in Porto.\nAssistant: [called weather {\"city\":\"Porto\"}]\n"
        );
    }
}
