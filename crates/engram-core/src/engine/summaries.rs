//! Reading the summary DAG: one summary with what it covers (`GET /v1/summaries/{id}`).
//! Summaries are searched with the rest (`search`), and listed with their conversation
//! (`Engine::conversation`).

use crate::error::{Error, Result};
use crate::model::{MessageId, Principal, SummaryId};

use super::{Engine, SummaryView};

impl Engine {
    /// A summary the caller may read (one of a conversation it may read), with its children
    /// (a branch, a root) or its source messages (a leaf), in order.
    pub async fn summary(&self, p: &Principal, id: SummaryId) -> Result<SummaryView> {
        let not_found = || Error::not_found(format!("summary {id}"));
        let summary = self.svc.store.get_summary(&p.tenant, id).await?.ok_or_else(not_found)?;
        if !self.conversation_visible(p, &summary.conversation_id).await? {
            return Err(not_found());
        }
        let sources = self.svc.store.summary_sources(&p.tenant, id).await?;
        let (mut children, mut messages) = (vec![], vec![]);
        if summary.depth == 0 {
            let ids: Vec<MessageId> = sources.iter().copied().map(MessageId).collect();
            messages = self.svc.store.get_messages(&p.tenant, &ids).await?;
            messages.sort_by_key(|m| m.seq);
        } else {
            let ids: Vec<SummaryId> = sources.iter().copied().map(SummaryId).collect();
            children = self.svc.store.get_summaries(&p.tenant, &ids).await?;
            children.sort_by_key(|c| (c.earliest_at, c.id));
        }
        Ok(SummaryView { summary, children, messages })
    }
}
