//! Message embeddings (SPEC §1: every transcript message is "embedded in the background").
//!
//! An append enqueues one `embed_messages` job per conversation (at most one pending); the
//! job embeds every message of the conversation that has no vector of the engine's model
//! yet, in conversation order, and stores the vectors beside the messages. Search over
//! messages (`sources: ["messages"]`) then fuses an exact vector list over the user's
//! messages with the full-text list, like memories.
//!
//! **What is embedded.** A message alone often means little ("Yes! We went last Friday"),
//! so each message is embedded *with the [`CONTEXT_MESSAGES`] messages before it* in its
//! conversation, one per line, oldest first, the message itself last. The keyword index
//! keeps the bare message, and the ranking unit stays the message. Measured on LoCoMo with
//! all-MiniLM-L6-v2 (benches/README.md, "LoCoMo: turns embedded with their neighbours"):
//! hybrid turn Recall@10 0.684 with each turn alone, 0.715 with one previous turn, 0.741
//! with two, 0.704 with three; the following turn does not help.
//!
//! Encoders truncate long inputs at the end (MiniLM: 256 tokens), which would cut the
//! message itself, so the context gets at most [`DOCUMENT_CHARS`] minus the message's own
//! length, nearest message first, each cut to its last characters (the part closest to the
//! message). A long message is embedded alone.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::JobError;
use crate::error::{Error, Result};
use crate::model::{ConversationId, Job, Message, TenantId, UserId};
use crate::services::Services;
use crate::store::Store;

/// Messages before each message that are embedded with it.
pub const CONTEXT_MESSAGES: usize = 2;

/// Characters of a document (context + message) beyond which context is left out: about
/// 200 tokens, under MiniLM's 256-token window.
pub const DOCUMENT_CHARS: usize = 800;

/// Messages embedded per store round trip.
const BATCH: usize = 64;

/// The text embedded for `message`, given the messages before it in its conversation
/// (`before`, oldest first; only the last [`CONTEXT_MESSAGES`] are used).
pub fn document(before: &[Message], message: &Message) -> String {
    let before: Vec<&str> = before.iter().map(|m| m.content.as_str()).collect();
    document_of(&before, &message.content)
}

/// [`document`] on the contents alone.
pub fn document_of(before: &[&str], message: &str) -> String {
    let own = message.chars().count();
    let mut budget = DOCUMENT_CHARS.saturating_sub(own);
    let mut lines: Vec<&str> = Vec::new();
    for m in before.iter().rev().take(CONTEXT_MESSAGES) {
        let text = m.trim();
        if text.is_empty() || budget == 0 {
            continue;
        }
        let n = text.chars().count();
        let keep = n.min(budget);
        let start = text.char_indices().nth(n - keep).map_or(0, |(i, _)| i);
        lines.push(&text[start..]);
        budget -= keep;
    }
    lines.reverse();
    lines.push(message);
    lines.join("\n")
}

/// Embed every message of the conversation that has no vector of `embedder`'s model (the
/// `embed_messages` job; also `engram reembed`). Idempotent and resumable: each batch is
/// stored in one transaction, and a message already embedded is skipped. Returns the number
/// of messages embedded.
pub async fn embed_conversation(
    store: &Arc<dyn Store>,
    embedder: &Arc<dyn Embedder>,
    tenant: &TenantId,
    conversation: &ConversationId,
) -> Result<usize> {
    let model = embedder.model_id().to_string();
    let mut done = 0;
    loop {
        let needed = store.messages_needing_vectors(tenant, conversation, &model, BATCH).await?;
        let (Some(first), Some(last)) = (needed.first(), needed.last()) else { break };
        // The needed messages and the context before the first of them (capped: messages
        // past the cap are embedded by a later round; the first one always is, so every
        // round makes progress).
        let from = first.1 - CONTEXT_MESSAGES as i64;
        let span = usize::try_from(last.1 - from + 1).unwrap_or(usize::MAX).min(10_000);
        let loaded = store.list_messages(tenant, conversation, from - 1, span).await?;
        let mut ids = Vec::with_capacity(needed.len());
        let mut texts = Vec::with_capacity(needed.len());
        for (id, _) in &needed {
            let Some(i) = loaded.iter().position(|m| m.id == *id) else { continue };
            ids.push(*id);
            texts.push(document(&loaded[..i], &loaded[i]));
        }
        if ids.is_empty() {
            break; // erased meanwhile
        }
        let vectors = embedder.embed_background(&texts).await?;
        if vectors.len() != ids.len() || vectors.iter().any(|v| v.len() != embedder.dims()) {
            return Err(Error::internal(
                "embedder returned vectors of the wrong count or dimension",
            ));
        }
        done += ids.len();
        store.set_message_vectors(tenant, &model, ids.into_iter().zip(vectors).collect()).await?;
        if needed.len() < BATCH {
            break;
        }
    }
    Ok(done)
}

impl Services {
    /// Enqueue the embedding of a conversation's new messages (at most one pending job per
    /// conversation; one running at a time).
    pub(crate) async fn enqueue_message_embedding(
        &self,
        tenant: &TenantId,
        user: &UserId,
        conversation: &ConversationId,
    ) -> Result<()> {
        self.store.enqueue_job(&Job::embed_messages(tenant, user, conversation)).await?;
        Ok(())
    }

    /// [`embed_conversation`] with this engine's store and embedder.
    pub async fn embed_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<usize> {
        let e = self.embedder();
        // The first vectors of a store (a user who only appends messages) record its space.
        self.store().ensure_embedding_space(e.model_id(), e.dims()).await?;
        embed_conversation(self.store(), e, tenant, conversation).await
    }

    /// The `embed_messages` job.
    pub(crate) async fn run_embed_messages(&self, job: &Job) -> Result<(), JobError> {
        let c = job.payload.get("conversation_id").and_then(|v| v.as_str()).unwrap_or_default();
        let conversation = ConversationId::parse(c).map_err(|e| {
            JobError::bug(format!("job {} has no valid conversation_id: {e}", job.id))
        })?;
        let n = self.embed_conversation(&job.tenant_id, &conversation).await?;
        tracing::debug!(job = %job.id, conversation = %conversation, embedded = n, "messages embedded");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageId, MessageRole, UserId};

    fn msg(content: &str) -> Message {
        Message {
            id: MessageId::new(),
            tenant_id: TenantId::parse("t").unwrap(),
            conversation_id: ConversationId::parse("c").unwrap(),
            user_id: UserId::parse("u").unwrap(),
            agent_id: None,
            seq: 0,
            role: MessageRole::User,
            content: content.to_string(),
            tool_name: None,
            tool_args: None,
            tool_result: None,
            turn_id: None,
            metadata: serde_json::json!({}),
            created_at: crate::model::now(),
            rating: 0,
            access_count: 0,
            last_accessed_at: None,
        }
    }

    #[test]
    fn a_message_is_embedded_after_its_two_previous_messages() {
        let (a, b, c, d) = (msg("a"), msg("b"), msg("c"), msg("Yes, last Friday"));
        assert_eq!(document(&[], &d), "Yes, last Friday");
        assert_eq!(document(std::slice::from_ref(&c), &d), "c\nYes, last Friday");
        assert_eq!(document(&[a, b.clone(), c], &d), "b\nc\nYes, last Friday");
        // Empty tool calls add nothing.
        assert_eq!(document(&[b, msg("")], &d), "b\nYes, last Friday");
    }

    #[test]
    fn context_never_pushes_the_message_out_of_the_window() {
        let long_context = msg(&format!("start {} end", "x".repeat(2000)));
        let m = msg("Where did we go?");
        let doc = document(&[long_context], &m);
        assert_eq!(doc.chars().count(), DOCUMENT_CHARS + 1);
        assert!(doc.ends_with("x end\nWhere did we go?"), "{doc}");
        let long = msg(&"é".repeat(DOCUMENT_CHARS + 5));
        assert_eq!(document(&[m], &long), long.content, "a long message is embedded alone");
    }
}
