//! Message embeddings (SPEC §1: every transcript message is "embedded in the background").
//!
//! An append enqueues one `embed_messages` job per conversation (at most one pending); the
//! embedding lane (`crate::jobs`) claims such jobs many at a time and embeds every message
//! of their conversations that has no vector of the engine's model yet, all conversations'
//! documents in one background call per round ([`embed_conversations`]), and stores the
//! vectors beside the messages, one transaction per tenant. Search over
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
//! The context stays within one encoder window (MiniLM: 256 tokens; longer texts are read in
//! several windows and averaged, which would let context outweigh the message), so it gets
//! at most [`DOCUMENT_CHARS`] minus the message's own length, nearest message first, each
//! cut to its last characters (the part closest to the message). A long message is embedded
//! alone, whole.

use std::sync::Arc;

use crate::embed::{Embedder, normalize};
use crate::error::JobError;
use crate::error::{Error, Result};
use crate::model::{ConversationId, Job, Message, MessageId, TenantId, UserId};
use crate::priority::RequestsInFlight;
use crate::services::Services;
use crate::store::Store;

/// Messages before each message that are embedded with it.
pub const CONTEXT_MESSAGES: usize = 2;

/// How long before a message its context may have been sent and still support it: an
/// answer to a question asked the same day. A message sent days or months after the last
/// one starts a new talk, whatever the conversation id (found by a tester: "Last summer I
/// hiked the Dolomites.", sent nine months after a message about a wedding, was found by
/// "wedding").
pub const CONTEXT_MAX_GAP: time::Duration = time::Duration::hours(24);

/// Whether a message sent at `before` is context of one sent at `at`: sent before it (or at
/// the same time), by at most [`CONTEXT_MAX_GAP`]. A message earlier in the conversation but
/// sent later (appended with an older `created_at`) is not: a tester's message of 2020 drew
/// support from one of 2024 before it.
pub fn within_context_gap(before: time::OffsetDateTime, at: time::OffsetDateTime) -> bool {
    let gap = at - before;
    gap >= time::Duration::ZERO && gap <= CONTEXT_MAX_GAP
}

/// Characters of a document (context + message) beyond which context is left out: about
/// 200 tokens, within MiniLM's 256-token window.
pub const DOCUMENT_CHARS: usize = 800;

/// Documents embedded per round, over all the conversations of the round: each gets an equal
/// share, between [`MIN_SHARE`] and [`MAX_SHARE`] of its messages (a longer backlog takes
/// more rounds, so no conversation waits long behind another's). The encoder cuts the
/// round's batch into passes sized for it.
const ROUND_DOCUMENTS: usize = 512;
const MIN_SHARE: usize = 32;
const MAX_SHARE: usize = 256;

/// Vectors stored per transaction.
const WRITE_ROWS: usize = 64;

/// Longest a background step waits for requests to end (`crate::priority`).
pub const YIELD: std::time::Duration = std::time::Duration::from_secs(1);

/// The text embedded for `message`, given the messages before it in its conversation
/// (`before`, oldest first; only the last [`CONTEXT_MESSAGES`] are used, and only those sent
/// at most [`CONTEXT_MAX_GAP`] before it, [`within_context_gap`]: a message sent months later
/// starts a new talk, and read with the old one it was found by what that one said).
pub fn document(before: &[Message], message: &Message) -> String {
    let before: Vec<&str> = before
        .iter()
        .filter(|m| within_context_gap(m.created_at, message.created_at))
        .map(|m| m.content.as_str())
        .collect();
    document_of(&before, &message.content)
}

/// [`document`] on the contents alone. The message ends the document, whole.
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

/// The background vectors of `documents`, checked for count and dimension.
async fn embedded(embedder: &Arc<dyn Embedder>, documents: &[String]) -> Result<Vec<Vec<f32>>> {
    let vectors = embedder.embed_background(documents).await?;
    if vectors.len() != documents.len() || vectors.iter().any(|v| v.len() != embedder.dims()) {
        return Err(Error::internal("embedder returned vectors of the wrong count or dimension"));
    }
    Ok(vectors)
}

/// The vectors of a round's messages, in one background call: each document's, and when the
/// embedder adds the message alone ([`Embedder::adds_message_alone`]) and the document has
/// context, the sum of the document's vector and the message's own, normalised.
/// A document ends with its message, whose length in bytes is `own`: a document longer than
/// that has context.
async fn message_vectors(
    embedder: &Arc<dyn Embedder>,
    documents: Vec<String>,
    own: &[usize],
) -> Result<Vec<Vec<f32>>> {
    if !embedder.adds_message_alone() {
        return embedded(embedder, &documents).await;
    }
    let n = documents.len();
    let mut texts = documents;
    let mut slots = Vec::with_capacity(n);
    for (i, len) in own.iter().enumerate() {
        let doc = &texts[i];
        let message = (*len < doc.len()).then(|| doc[doc.len() - len..].to_string());
        slots.push(message.map(|m| {
            texts.push(m);
            texts.len() - 1
        }));
    }
    let mut vectors = embedded(embedder, &texts).await?;
    let own = vectors.split_off(n);
    for (v, slot) in vectors.iter_mut().zip(slots) {
        if let Some(j) = slot {
            for (x, y) in v.iter_mut().zip(&own[j - n]) {
                *x += y;
            }
            normalize(v);
        }
    }
    Ok(vectors)
}

/// One conversation's next round: the messages without a vector (at most `limit`, in
/// conversation order) and their documents, read in two queries (the ids, then the span
/// from the context of the first to the last). `more` is true when the limit was reached.
struct Round {
    ids: Vec<MessageId>,
    documents: Vec<String>,
    /// Per document, the length in bytes of its message, which ends it.
    own: Vec<usize>,
    more: bool,
}

/// One round of a conversation: its next `limit` messages without a vector of `model`, as
/// documents. `tail` holds the last messages the conversation's previous round read: when
/// they end right before this round's first message they are its context, and only the new
/// messages are read (a round never re-reads what the one before it read).
async fn next_round(
    store: &Arc<dyn Store>,
    (tenant, conversation): (&TenantId, &ConversationId),
    model: &str,
    limit: usize,
    tail: &mut Vec<Message>,
) -> Result<Round> {
    let needed = store.messages_needing_vectors(tenant, conversation, model, limit).await?;
    let (Some(first), Some(last)) = (needed.first(), needed.last()) else {
        return Ok(Round { ids: Vec::new(), documents: Vec::new(), own: Vec::new(), more: false });
    };
    // The needed messages and the context before the first of them (capped: messages past
    // the cap are embedded by a later round; the first one always is, so every round makes
    // progress).
    let from = first.1 - CONTEXT_MESSAGES as i64;
    let carried = tail.last().is_some_and(|m| m.seq == first.1 - 1);
    // Seqs start at 1: a window that starts before the first message would otherwise count
    // rows past the last needed one.
    let start = if carried { first.1 } else { from.max(1) };
    let span = usize::try_from(last.1 - start + 1).unwrap_or(usize::MAX).min(10_000);
    let read = store.list_messages(tenant, conversation, start - 1, span).await?;
    let mut loaded: Vec<Message> = Vec::with_capacity(CONTEXT_MESSAGES + read.len());
    if carried {
        // The previous round read every message of its window, which ends at `first - 1`.
        loaded.extend(tail.drain(..).filter(|m| m.seq >= from));
    }
    loaded.extend(read);
    let mut ids = Vec::with_capacity(needed.len());
    let mut documents = Vec::with_capacity(needed.len());
    let mut own = Vec::with_capacity(needed.len());
    for (id, _) in &needed {
        let Some(i) = loaded.iter().position(|m| m.id == *id) else { continue };
        ids.push(*id);
        documents.push(document(&loaded[..i], &loaded[i]));
        own.push(loaded[i].content.len());
    }
    *tail = loaded.split_off(loaded.len().saturating_sub(CONTEXT_MESSAGES));
    // Erased meanwhile: nothing more to do.
    let more = needed.len() == limit && !ids.is_empty();
    Ok(Round { ids, documents, own, more })
}

/// Store `rows` in transactions of at most [`WRITE_ROWS`], each after a moment with no
/// request: a request's own write (a search records its hits' access) waits at most for one
/// short transaction on a one-writer store.
async fn write_vectors(
    store: &Arc<dyn Store>,
    yield_to: &RequestsInFlight,
    tenant: &TenantId,
    model: &str,
    mut rows: Vec<(MessageId, Vec<f32>)>,
) -> Result<()> {
    while !rows.is_empty() {
        let rest = rows.split_off(rows.len().min(WRITE_ROWS));
        yield_to.idle_within(YIELD).await;
        store.set_message_vectors(tenant, model, rows).await?;
        rows = rest;
    }
    Ok(())
}

/// One tenant's vectors of a round: `members` are (conversation index, messages embedded).
struct TenantWrite<'a> {
    tenant: &'a TenantId,
    members: Vec<(usize, usize)>,
    rows: Vec<(MessageId, Vec<f32>)>,
}

/// Embed every message of the given conversations that has no vector of `embedder`'s model
/// (the `embed_messages` jobs, run as one batch by the embedding lane; also `engram
/// reembed`). The conversations may belong to different users and tenants: each round reads
/// every conversation's next messages, embeds all their documents in one background call
/// and stores each tenant's vectors in one transaction. Idempotent and resumable: a message
/// already embedded is skipped. Returns, per conversation, the number of messages embedded
/// or why it failed (a failed read fails only its conversation; a failed embedding every
/// conversation of its round). Each store step first waits for a moment with no request in
/// `yield_to` (at most [`YIELD`]): requests first.
pub async fn embed_conversations(
    store: &Arc<dyn Store>,
    embedder: &Arc<dyn Embedder>,
    yield_to: &RequestsInFlight,
    conversations: &[(TenantId, ConversationId)],
) -> Vec<Result<usize>> {
    let model = embedder.model_id().to_string();
    let mut results: Vec<Result<usize>> = vec![Ok(0); conversations.len()];
    let mut pending: Vec<usize> = (0..conversations.len()).collect();
    let mut tails: Vec<Vec<Message>> = vec![Vec::new(); conversations.len()];
    while !pending.is_empty() {
        let mut next = Vec::new();
        // (conversation index, message ids) per conversation of this round, and the
        // documents of all of them, in the same order.
        let mut owners: Vec<(usize, Vec<MessageId>)> = Vec::new();
        let mut documents = Vec::new();
        let mut own = Vec::new();
        let share = (ROUND_DOCUMENTS / pending.len()).clamp(MIN_SHARE, MAX_SHARE);
        for &i in &pending {
            let (tenant, conversation) = &conversations[i];
            yield_to.idle_within(YIELD).await;
            match next_round(store, (tenant, conversation), &model, share, &mut tails[i]).await {
                Ok(round) if round.ids.is_empty() => {}
                Ok(round) => {
                    if round.more {
                        next.push(i);
                    }
                    documents.extend(round.documents);
                    own.extend(round.own);
                    owners.push((i, round.ids));
                }
                Err(e) => results[i] = Err(e),
            }
        }
        if documents.is_empty() {
            break;
        }
        let vectors = match message_vectors(embedder, documents, &own).await {
            Ok(v) => v,
            Err(e) => {
                for (i, _) in &owners {
                    results[*i] = Err(e.clone());
                }
                next.retain(|i| results[*i].is_ok());
                pending = next;
                continue;
            }
        };
        // Each tenant's vectors in one transaction.
        let mut vectors = vectors.into_iter();
        let mut writes: Vec<TenantWrite<'_>> = Vec::new();
        for (i, ids) in owners {
            let tenant = &conversations[i].0;
            let n = ids.len();
            let rows: Vec<_> = ids.into_iter().zip(vectors.by_ref()).collect();
            match writes.iter_mut().find(|w| w.tenant == tenant) {
                Some(w) => {
                    w.members.push((i, n));
                    w.rows.extend(rows);
                }
                None => writes.push(TenantWrite { tenant, members: vec![(i, n)], rows }),
            }
        }
        for w in writes {
            let stored = write_vectors(store, yield_to, w.tenant, &model, w.rows).await;
            for (i, n) in w.members {
                match (&stored, &mut results[i]) {
                    (Ok(()), Ok(done)) => *done += n,
                    (Ok(()), Err(_)) => {}
                    (Err(e), r) => *r = Err(e.clone()),
                }
            }
        }
        next.retain(|i| results[*i].is_ok());
        pending = next;
    }
    results
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
        self.embedding_wanted.notify_one();
        Ok(())
    }

    /// [`embed_conversations`] for one conversation, with this engine's store and embedder.
    pub async fn embed_conversation(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<usize> {
        let e = self.embedder();
        // The first vectors of a store (a user who only appends messages) record its space.
        self.store().ensure_embedding_space(e.model_id(), e.dims()).await?;
        let all = [(tenant.clone(), conversation.clone())];
        embed_conversations(self.store(), e, &self.requests, &all).await.pop().unwrap_or(Ok(0))
    }

    /// `embed_messages` jobs, as one batch; one result per job.
    pub(crate) async fn run_embed_messages(&self, jobs: &[Job]) -> Vec<Result<(), JobError>> {
        let e = self.embedder();
        if let Err(err) = self.store().ensure_embedding_space(e.model_id(), e.dims()).await {
            let err = JobError::from(err);
            return jobs.iter().map(|_| Err(err.clone())).collect();
        }
        let mut results: Vec<Result<(), JobError>> = Vec::with_capacity(jobs.len());
        let mut conversations = Vec::new();
        let mut slots = Vec::new();
        for job in jobs {
            match super::job_conversation(job) {
                Ok(c) => {
                    slots.push(results.len());
                    conversations.push((job.tenant_id.clone(), c));
                    results.push(Ok(()));
                }
                Err(err) => results.push(Err(err)),
            }
        }
        let done = embed_conversations(self.store(), e, &self.requests, &conversations).await;
        for ((slot, r), (_, c)) in slots.into_iter().zip(done).zip(&conversations) {
            match r {
                Ok(n) => tracing::debug!(conversation = %c, embedded = n, "messages embedded"),
                Err(err) => results[slot] = Err(err.into()),
            }
        }
        results
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
        // Context sent over a day before is another talk.
        let mut old = msg("Which painting, the first or the second?");
        old.created_at = d.created_at - time::Duration::days(120);
        assert_eq!(document(&[old], &d), "Yes, last Friday");
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
