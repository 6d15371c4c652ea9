//! Short-term context (seed 004): with a `conversation_id`, the context block adds, after
//! the known facts and within the same token budget, the conversation's latest summaries and
//! its last messages, recency-weighted: the newest messages first take up to
//! [`MESSAGE_SHARE`] of what the facts left, then the newest summaries no other summary
//! covers (the tops of the conversation's DAG) the rest. Both are shown oldest first:
//!
//! ```text
//! Known facts about the user:
//! - …
//!
//! Earlier in this conversation:
//! - [2023-05-01T09:01Z to 2023-05-01T14:20Z] …
//!
//! Recent messages:
//! [2023-05-01T15:58Z] user: …
//! ```
//!
//! The facts part is what a session caches; the short-term part is rebuilt on every call,
//! since the conversation moves on between turns.

use crate::error::Result;
use crate::model::{ConversationId, Message, MessageId, Summary, SummaryId, UserId};
use crate::pipeline::compact::iso_minute;
use crate::pipeline::prompts::message_text;
use crate::retrieval::TextSize;

use super::Engine;
use super::scope::View;

/// Share of the budget left after the facts that the last messages may take.
pub const MESSAGE_SHARE: f64 = 0.6;

/// Messages read from the end of the conversation at most.
const RECENT_MESSAGES: usize = 50;

/// Characters of one message or summary shown at most.
const ITEM_CHARS: usize = 2_000;

/// The short-term part of a context block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShortTerm {
    pub text: String,
    pub message_ids: Vec<MessageId>,
    pub summary_ids: Vec<SummaryId>,
}

fn cut(text: &str) -> String {
    let t = text.trim();
    if t.chars().count() <= ITEM_CHARS {
        return t.to_string();
    }
    let mut s: String = t.chars().take(ITEM_CHARS).collect();
    s.push('…');
    s
}

fn message_line(m: &Message) -> String {
    format!("[{}] {}: {}", iso_minute(m.created_at), m.role.as_str(), cut(&message_text(m)))
}

fn summary_line(s: &Summary) -> String {
    // The stored header line names the span already in words; the line names it in minutes.
    let body = s.content.split_once('\n').map_or(s.content.as_str(), |(_, b)| b);
    format!("- [{} to {}] {}", iso_minute(s.earliest_at), iso_minute(s.latest_at), cut(body))
}

/// Pack the newest `messages` and then the newest `tops` (both oldest first as given) into
/// `budget` tokens: messages up to [`MESSAGE_SHARE`] of it (the newest always tried first),
/// summaries in what is left, then older messages in what the summaries did not take (all
/// of it when there is no summary: a tester saw 40 % of the budget unused). Pure.
pub fn pack<'a>(messages: &'a [Message], tops: &[Summary], budget: usize) -> ShortTerm {
    let recent_title = "Recent messages:";
    let earlier_title = "Earlier in this conversation:";
    // The size of the text so far, kept exactly: the messages' part and the summaries'
    // part (each with its heading, None while empty), a blank line between them.
    let size = |msgs: Option<TextSize>, sums: Option<TextSize>| match (sums, msgs) {
        (Some(s), Some(m)) => s.joined(m).tokens(),
        (Some(x), None) | (None, Some(x)) => x.tokens(),
        (None, None) => 0,
    };
    let add = |part: Option<TextSize>, title: &str, line: &str| {
        part.unwrap_or_else(|| TextSize::of(title)).then_line(line)
    };
    // The next older messages while the whole stays within `limit` (contiguous, newest
    // first, after those already chosen).
    let more_messages = |chosen: &mut Vec<(&'a Message, String)>,
                         msgs: &mut Option<TextSize>,
                         sums: Option<TextSize>,
                         limit: usize| {
        for m in messages.iter().rev().skip(chosen.len()) {
            let line = message_line(m);
            let grown = add(*msgs, recent_title, &line);
            if size(Some(grown), sums) > limit {
                break;
            }
            *msgs = Some(grown);
            chosen.push((m, line));
        }
    };
    let (mut msgs, mut sums) = (None, None);
    let mut chosen_msgs: Vec<(&'a Message, String)> = Vec::new();
    let share = if tops.is_empty() { budget } else { ((budget as f64) * MESSAGE_SHARE) as usize };
    more_messages(&mut chosen_msgs, &mut msgs, None, share);
    let mut chosen_sums: Vec<(&Summary, String)> = Vec::new();
    for s in tops.iter().rev() {
        let line = summary_line(s);
        let grown = add(sums, earlier_title, &line);
        if size(msgs, Some(grown)) > budget {
            break;
        }
        sums = Some(grown);
        chosen_sums.push((s, line));
    }
    more_messages(&mut chosen_msgs, &mut msgs, sums, budget);
    // The window never starts in the middle of a message kept as parts (a long turn the
    // proxy split): a part whose first is not in it is left out.
    while let Some((m, _)) = chosen_msgs.last()
        && m.metadata.get("part").and_then(serde_json::Value::as_i64).is_some_and(|p| p > 1)
    {
        chosen_msgs.pop();
    }
    chosen_msgs.reverse();
    chosen_sums.reverse();
    let mut text = String::new();
    if !chosen_sums.is_empty() {
        text.push_str(earlier_title);
        for (_, l) in &chosen_sums {
            text.push('\n');
            text.push_str(l);
        }
    }
    if !chosen_msgs.is_empty() {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(recent_title);
        for (_, l) in &chosen_msgs {
            text.push('\n');
            text.push_str(l);
        }
    }
    ShortTerm {
        text,
        message_ids: chosen_msgs.iter().map(|(m, _)| m.id).collect(),
        summary_ids: chosen_sums.iter().map(|(s, _)| s.id).collect(),
    }
}

impl Engine {
    /// The short-term part for conversation `id` of `user`, in `budget` tokens. A
    /// conversation that does not exist yet (an agent's first turn asks for its context
    /// before appending) has none; one of another user, or that the caller may not read,
    /// has none either, exactly like an unknown one, so the answer tells nothing about it.
    pub(super) async fn short_term(
        &self,
        v: &View,
        p: &crate::model::Principal,
        user: &UserId,
        id: &ConversationId,
        budget: usize,
        summaries_only: bool,
    ) -> Result<ShortTerm> {
        let Some(info) = self.svc.store.get_conversation(&v.tenant, id).await? else {
            return Ok(ShortTerm::default());
        };
        if &info.user_id != user
            || !self.may_read_conversation(p, &info.user_id, info.agent_id.as_ref()).await?
        {
            return Ok(ShortTerm::default());
        }
        if budget == 0 {
            return Ok(ShortTerm::default());
        }
        let messages = if summaries_only {
            Vec::new()
        } else {
            let from =
                info.messages.saturating_sub(RECENT_MESSAGES as i64).max(info.summarized_seq);
            self.svc.store.list_messages(&v.tenant, id, from, RECENT_MESSAGES).await?
        };
        let tops = self.svc.store.conversation_summaries(&v.tenant, id, None, true).await?;
        Ok(pack(&messages, &tops, budget))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageRole, SummaryKind, TenantId};
    use crate::retrieval::estimate_tokens;
    use time::macros::datetime;

    fn msg(i: i64, text: &str) -> Message {
        let mut m = Message::sample(
            if i % 2 == 1 { MessageRole::User } else { MessageRole::Assistant },
            text,
        );
        m.seq = i;
        m.created_at = datetime!(2023-05-01 09:00 UTC) + time::Duration::minutes(i);
        m
    }

    fn top(h: i64, text: &str) -> Summary {
        let at = datetime!(2023-05-01 00:00 UTC) + time::Duration::hours(h);
        Summary {
            id: SummaryId::new(),
            tenant_id: TenantId::default_tenant(),
            user_id: UserId::parse("u").unwrap(),
            conversation_id: ConversationId::parse("c").unwrap(),
            parent_id: None,
            depth: 1,
            kind: SummaryKind::Branch,
            content: format!("[branch summary, …]\n{text}"),
            message_count: 80,
            earliest_at: at,
            latest_at: at + time::Duration::minutes(59),
            model: None,
            created_at: at,
            access_count: 0,
            last_accessed_at: None,
        }
    }

    #[test]
    fn newest_first_within_the_budget_shown_oldest_first() {
        let messages: Vec<Message> =
            (1..=30).map(|i| msg(i, &format!("message number {i} about the garden"))).collect();
        let tops =
            vec![top(1, "first stretch: moving house"), top(5, "second stretch: the new job")];
        let all = pack(&messages, &tops, 10_000);
        assert_eq!(all.message_ids.len(), 30);
        assert_eq!(all.summary_ids.len(), 2);
        assert!(all.text.starts_with(
            "Earlier in this conversation:\n- [2023-05-01T01:00Z to 2023-05-01T01:59Z] first stretch: moving house\n- [2023-05-01T05:00Z"
        ), "{}", all.text);
        assert!(
            all.text
                .contains("\n\nRecent messages:\n[2023-05-01T09:01Z] user: message number 1 about"),
            "{}",
            all.text
        );
        assert!(
            all.text.ends_with("[2023-05-01T09:30Z] assistant: message number 30 about the garden")
        );

        // A small budget keeps the newest messages, then the newest summary that fits.
        let small = pack(&messages, &tops, 150);
        assert!(small.message_ids.len() < 30 && !small.message_ids.is_empty());
        assert_eq!(small.message_ids.last(), Some(&messages[29].id), "the newest message stays");
        assert!(estimate_tokens(&small.text) <= 150, "{}", estimate_tokens(&small.text));
        // Only one longer summary fits beside the messages: the newer one.
        let long = |h, t: &str| top(h, &format!("{t} {}", "and so on ".repeat(9)));
        let tops = vec![long(1, "moving house"), long(5, "the new job")];
        let tight = pack(&messages, &tops, 125);
        assert_eq!(tight.summary_ids, [tops[1].id], "{}", tight.text);
        assert_eq!(pack(&messages, &tops, 3), ShortTerm::default());
        assert_eq!(pack(&[], &[], 1000), ShortTerm::default());
    }

    #[test]
    fn what_the_summaries_leave_goes_to_older_messages() {
        let messages: Vec<Message> =
            (1..=30).map(|i| msg(i, &format!("message number {i} about the garden"))).collect();
        let line = estimate_tokens(&message_line(&messages[0])) + 1;
        // No summary: the messages take the whole budget, not MESSAGE_SHARE of it.
        let alone = pack(&messages, &[], 200);
        let used = estimate_tokens(&alone.text);
        assert!(200 - used < line + 1, "{used} used, {line} a line: {}", alone.text);
        // One short summary: it and then older messages fill what the newest left.
        let tops = vec![top(1, "moving house")];
        let both = pack(&messages, &tops, 200);
        assert_eq!(both.summary_ids.len(), 1);
        assert!(both.message_ids.len() > (alone.message_ids.len() * 3) / 4, "{}", both.text);
        assert!(estimate_tokens(&both.text) <= 200);
        assert_eq!(both.message_ids.last(), Some(&messages[29].id));
        let ids: Vec<_> =
            messages.iter().rev().take(both.message_ids.len()).rev().map(|m| m.id).collect();
        assert_eq!(both.message_ids, ids, "the newest, contiguous");
    }

    #[test]
    fn the_window_never_starts_inside_a_message_kept_as_parts() {
        let mut messages = vec![msg(1, "a short question")];
        for part in 1..=2 {
            let mut m = msg(1 + part, &"a long pasted document line. ".repeat(30));
            m.metadata = serde_json::json!({ "part": part, "parts": 2 });
            messages.push(m);
        }
        let (first, second) = (messages[1].id, messages[2].id);
        let mut saw_whole = false;
        for budget in 1..2_000 {
            let st = pack(&messages, &[], budget);
            assert!(
                !st.message_ids.contains(&second) || st.message_ids.contains(&first),
                "budget {budget}: the second part without the first: {}",
                st.text
            );
            saw_whole |= st.message_ids.len() == 3;
        }
        assert!(saw_whole, "no budget took every message");
    }
}
