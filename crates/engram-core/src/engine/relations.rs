//! Relations between things the user mentions, and facts related to a fact. There is no
//! graph yet: a relation is stored as a `relationship` fact ("Maya is the sister of the
//! user.") with `metadata.relation = {from, label, to}`, and the facts related to one are
//! those a search for its text finds.

use crate::error::{Error, Result};
use crate::model::{Category, Memory, MemoryId, Principal};

use super::{Engine, Hit, RelateInput, RememberInput, Remembered, SearchInput};

impl Engine {
    /// Record `from label to` as a relationship fact of the user.
    pub async fn relate(&self, p: &Principal, input: RelateInput) -> Result<Remembered> {
        // One line: a newline in a part would break the context block's bullets.
        let part = |v: &str, field: &str| -> Result<String> {
            let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
            if v.is_empty() {
                return Err(Error::invalid(
                    field,
                    format!("{field} is required to record a relation"),
                ));
            }
            Ok(v)
        };
        let from = part(&input.from, "from")?;
        let label = part(&input.label, "label")?;
        let to = part(&input.to, "to")?;
        let mut content = format!("{from} {label} {to}");
        if !content.ends_with(['.', '!', '?']) {
            content.push('.');
        }
        // The user as for any write: a user key's own, else `user_id`.
        let remember = RememberInput {
            user_id: input.user_id,
            agent_id: input.agent_id,
            category: Category::Relationship,
            importance: input.importance.unwrap_or_default(),
            content,
            metadata: Some(
                serde_json::json!({ "relation": { "from": from, "label": label, "to": to } }),
            ),
            ..Default::default()
        };
        self.remember(p, remember).await
    }

    /// A fact the caller may see and up to `limit` (1 to 200) others related to it (best
    /// first; the fact itself left out): those a search for its text finds at the default
    /// `min_score`, so a fact with nothing in common is not called related.
    pub async fn related(
        &self,
        p: &Principal,
        id: MemoryId,
        limit: usize,
    ) -> Result<(Memory, Vec<Hit>)> {
        if !(1..=200).contains(&limit) {
            return Err(Error::invalid("limit", "limit must be 1 to 200"));
        }
        let m = self.get(p, id).await?;
        let input = SearchInput {
            query: m.content.clone(),
            user_id: Some(m.user_id.clone()),
            limit: limit.saturating_add(1),
            ..Default::default()
        };
        let mut hits: Vec<Hit> = self
            .search(p, input)
            .await?
            .into_iter()
            .filter(|h| !matches!(h, Hit::Memory { memory, .. } if memory.id == m.id))
            .collect();
        hits.truncate(limit);
        Ok((m, hits))
    }
}
