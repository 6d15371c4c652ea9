//! Stage 1 of extraction: where it resumes. The cursor is the `<seq>:<content hash>` of
//! the last message an extraction batch processed, stored in the same transaction as the
//! batch (`Store::apply_extraction`), so a batch is applied exactly once. Extraction reads
//! the messages no leaf of the summary DAG covers yet; a cursor whose message a leaf now
//! covers is not among them (the conversation was compacted) and means "from the start" of
//! what is left — the compactor never summarizes past the cursor ([`super::compact`]).

use sha2::{Digest, Sha256};

use crate::model::Message;

/// `sha256(role + ":" + content)`: the content-hash cursor of a message.
pub fn message_hash(m: &Message) -> String {
    hex::encode(Sha256::digest(format!("{}:{}", m.role.as_str(), m.content).as_bytes()))
}

/// The cursor stored after a batch: `<seq>:<content hash>` of the last processed message.
/// The sequence number tells apart messages with the same text (a repeated "Noted, thanks!"
/// would otherwise make every later turn look already processed); the hash proves the
/// message at that position is still the one that was processed.
pub fn cursor_of(m: &Message) -> String {
    format!("{}:{}", m.seq, message_hash(m))
}

/// The message number a cursor names (`<seq>:<hash>`; cursors of old stores have none).
pub fn cursor_seq(cursor: &str) -> Option<i64> {
    cursor.split_once(':').and_then(|(s, _)| s.parse().ok())
}

/// Where extraction resumes: after the cursor message; from the start when there is no
/// cursor, or when the cursor message is gone (the conversation was summarized).
pub fn resume_index(messages: &[Message], cursor: Option<&str>) -> usize {
    let Some(c) = cursor else { return 0 };
    let (seq, hash) = match c.split_once(':') {
        Some((s, h)) => (s.parse::<i64>().ok(), h),
        None => (None, c),
    };
    if let Some(seq) = seq
        && let Some(i) = messages.iter().position(|m| m.seq == seq)
        && message_hash(&messages[i]) == hash
    {
        return i + 1;
    }
    // The message moved or is gone: find its content; not found → summarized → everything.
    messages.iter().rposition(|m| message_hash(m) == hash).map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MessageRole;

    fn msg(role: MessageRole, content: &str) -> Message {
        Message::sample(role, content)
    }

    #[test]
    fn cursor_three_cases() {
        let conv = vec![
            msg(MessageRole::User, "a"),
            msg(MessageRole::Assistant, "b"),
            msg(MessageRole::User, "c"),
        ];
        // No cursor: everything.
        assert_eq!(resume_index(&conv, None), 0);
        // Cursor found: what follows it.
        assert_eq!(resume_index(&conv, Some(&message_hash(&conv[1]))), 2);
        assert_eq!(resume_index(&conv, Some(&message_hash(&conv[2]))), 3);
        let mut seqd = conv.clone();
        for (i, m) in seqd.iter_mut().enumerate() {
            m.seq = i as i64 + 1;
        }
        assert_eq!(resume_index(&seqd, Some(&cursor_of(&seqd[1]))), 2);
        // A later message with the same text as the cursor message is still new.
        seqd.push(Message { seq: 4, ..msg(MessageRole::User, "d") });
        seqd.push(Message { seq: 5, ..msg(MessageRole::Assistant, "b") });
        assert_eq!(resume_index(&seqd, Some(&cursor_of(&seqd[1]))), 2);
        // Cursor gone (the conversation was summarized): the whole current conversation.
        let summarized = vec![
            msg(MessageRole::System, "[Previous conversation summary] …"),
            msg(MessageRole::User, "c"),
        ];
        assert_eq!(resume_index(&summarized, Some(&message_hash(&conv[1]))), 0);
        // The hash is over role and content: the same text from another role is another message.
        assert_ne!(message_hash(&msg(MessageRole::User, "b")), message_hash(&conv[1]));
        assert_eq!(message_hash(&conv[0]), hex::encode(Sha256::digest(b"user:a")));
    }
}
