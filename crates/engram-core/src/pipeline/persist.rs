//! Stage 5 of extraction: the decision becomes rows and events ([`batch`], pure), written
//! with the new cursor in one transaction (`Store::apply_extraction`): a window is applied
//! exactly once, or not at all.

use std::time::Instant;

use time::OffsetDateTime;

use super::judge::Decision;
use super::parse::Candidate;
use super::stage::staged;
use crate::metrics::ExtractionReport;
use crate::model::{
    AgentId, ConversationId, EventKind, Memory, MemoryEvent, MemoryId, MessageId, Source,
    SourceKind, TenantId, UserId,
};
use crate::services::Services;
use crate::store::{ExtractionBatch, NewMemory};

/// Where a window's facts come from and who writes them.
pub(super) struct Origin<'a> {
    pub tenant: &'a TenantId,
    pub user: &'a UserId,
    pub agent: Option<&'a AgentId>,
    pub pool: Option<&'a str>,
    pub conversation: &'a ConversationId,
    /// The window's messages, the facts' source.
    pub messages: Vec<MessageId>,
    /// When the window's last message was said.
    pub observed_at: OffsetDateTime,
    /// The embedding model of the vectors.
    pub model: &'a str,
    /// The actor named in the events.
    pub actor: String,
    pub now: OffsetDateTime,
}

impl Origin<'_> {
    fn memory(&self, c: &Candidate) -> Memory {
        Memory {
            agent_id: self.agent.cloned(),
            pool: self.pool.map(str::to_string),
            category: c.category,
            importance: c.importance,
            observed_at: self.observed_at,
            embedding_model: Some(self.model.to_string()),
            ..Memory::new(
                self.tenant.clone(),
                self.user.clone(),
                c.content.clone(),
                Source {
                    kind: SourceKind::Conversation,
                    conversation_id: Some(self.conversation.clone()),
                    message_ids: self.messages.clone(),
                },
                self.now,
            )
        }
    }

    fn event(&self, id: MemoryId, kind: EventKind, related: Option<MemoryId>) -> MemoryEvent {
        MemoryEvent {
            memory_id: id,
            event: kind,
            related_id: related,
            actor: self.actor.clone(),
            detail: serde_json::json!({ "conversation_id": self.conversation.as_str() }),
            at: self.now,
        }
    }
}

/// The rows and events of a decision, with the cursor that follows the window; counts what
/// it does into `report`.
pub(super) fn batch(
    origin: &Origin<'_>,
    cursor: String,
    decision: Decision,
    kept: &[Candidate],
    vectors: &[Vec<f32>],
    report: &mut ExtractionReport,
) -> ExtractionBatch {
    let mut batch = ExtractionBatch { cursor, ..Default::default() };
    let plan = decision.plan;
    for id in decision.restated.into_iter().chain(plan.confirms) {
        batch.confirms.push((id, origin.event(id, EventKind::Confirmed, None)));
        report.confirmed += 1;
    }
    for i in plan.adds {
        let m = origin.memory(&kept[i]);
        let ev = origin.event(m.id, EventKind::Created, None);
        batch.adds.push(NewMemory {
            memory: m,
            vector: Some(vectors[i].clone()),
            events: vec![ev],
            unique: true,
        });
        report.added += 1;
    }
    for (i, old) in plan.updates {
        let m = origin.memory(&kept[i]);
        let new_ev = origin.event(m.id, EventKind::Created, Some(old));
        let old_ev = origin.event(old, EventKind::Superseded, Some(m.id));
        let successor = NewMemory {
            memory: m,
            vector: Some(vectors[i].clone()),
            events: vec![new_ev],
            unique: false,
        };
        batch.supersedes.push((old, Some(successor), old_ev));
        report.updated += 1;
    }
    for old in plan.deletes {
        batch.supersedes.push((old, None, origin.event(old, EventKind::Forgotten, None)));
        report.deleted += 1;
    }
    batch
}

impl Services {
    /// Write a window's batch and cursor in one transaction. `Conflict`: a racing write
    /// of another process added one of the facts or superseded one the batch supersedes.
    pub(super) async fn persist(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> crate::error::Result<()> {
        let t = Instant::now();
        let res =
            staged("persist", self.store().apply_extraction(tenant, conversation, user, batch))
                .await;
        self.metrics().observe_stage("persist", t.elapsed(), res.is_ok());
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Category, Importance, Kind};
    use crate::pipeline::consolidate::Plan;

    fn candidate(text: &str) -> Candidate {
        Candidate {
            content: text.into(),
            category: Category::default(),
            importance: Importance::clamped(7),
        }
    }

    #[test]
    fn a_decision_becomes_rows_events_and_counts() {
        let tenant = TenantId::default_tenant();
        let user = UserId::parse("u").unwrap();
        let agent = AgentId::parse("a").unwrap();
        let conv = ConversationId::parse("c").unwrap();
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(1);
        let origin = Origin {
            tenant: &tenant,
            user: &user,
            agent: Some(&agent),
            pool: Some("agent:a"),
            conversation: &conv,
            messages: vec![MessageId::new()],
            observed_at: OffsetDateTime::UNIX_EPOCH,
            model: "m",
            actor: "system".into(),
            now,
        };
        let (old1, old2, old3, old4) =
            (MemoryId::new(), MemoryId::new(), MemoryId::new(), MemoryId::new());
        let decision = Decision {
            restated: vec![old1],
            plan: Plan {
                adds: vec![0],
                updates: vec![(1, old2)],
                deletes: vec![old3],
                confirms: vec![old4],
            },
        };
        let kept = [candidate("The user plays the cello."), candidate("The user lives in Porto.")];
        let vectors = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        let mut report = ExtractionReport::default();
        let b = batch(&origin, "7:abc".into(), decision, &kept, &vectors, &mut report);
        assert_eq!(b.cursor, "7:abc");
        assert_eq!((report.added, report.updated, report.deleted, report.confirmed), (1, 1, 1, 2));
        assert_eq!(b.confirms.iter().map(|c| c.0).collect::<Vec<_>>(), vec![old1, old4]);
        let added = &b.adds[0].memory;
        assert_eq!(added.content, "The user plays the cello.");
        assert_eq!((added.kind, added.pool.as_deref()), (Kind::Knowledge, Some("agent:a")));
        assert_eq!(added.source.conversation_id.as_ref(), Some(&conv));
        assert_eq!((added.observed_at, added.created_at), (OffsetDateTime::UNIX_EPOCH, now));
        assert_eq!(b.adds[0].vector.as_deref(), Some(&[1.0, 0.0][..]));
        let (old, successor, ev) = &b.supersedes[0];
        let successor = successor.as_ref().expect("an update has a successor");
        assert_eq!(
            (*old, ev.event, ev.related_id),
            (old2, EventKind::Superseded, Some(successor.memory.id))
        );
        assert_eq!(successor.events[0].related_id, Some(old2));
        assert_eq!(successor.memory.content, "The user lives in Porto.");
        let (forgotten, none, ev) = &b.supersedes[1];
        assert_eq!((*forgotten, none.is_none(), ev.event), (old3, true, EventKind::Forgotten));
        assert_eq!(ev.detail["conversation_id"], "c");
    }
}
