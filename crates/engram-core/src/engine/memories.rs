//! Reading and changing stored facts: edit (a new version supersedes), forget and purge,
//! get, history (the supersession chain and its events), rating, listing; and counting
//! what a search returned as accessed.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::model::{Content, EventKind, KeyRole, Kind, Memory, MemoryId, Principal};
use crate::pipeline::pii::PiiKind;
use crate::store::{MemoryPage, NewMemory};

use super::{EditInput, Engine, History, Hit, ListInput, clamp_limit, note_redactions};

impl Engine {
    /// Edit: a new row with the changes supersedes the old one (its history keeps both).
    /// New content goes through the PII filter of the row's agent, as any explicit write.
    pub async fn edit(&self, p: &Principal, id: MemoryId, input: EditInput) -> Result<Memory> {
        Ok(self.edit_reporting(p, id, input).await?.0)
    }

    /// [`Engine::edit`], also returning what the PII filter redacted in the new content.
    pub async fn edit_reporting(
        &self,
        p: &Principal,
        id: MemoryId,
        input: EditInput,
    ) -> Result<(Memory, Vec<PiiKind>)> {
        let old = self.load_visible(p, id).await?;
        self.require_current(p, &old, "edit").await?;
        let now = crate::model::now();
        let content = match &input.content {
            Some(c) => Content::parse(c, self.svc.cfg.max_content_bytes)?.into_string(),
            None => old.content.clone(),
        };
        let kind = input.kind.unwrap_or(old.kind);
        if kind == Kind::Profile && old.kind != Kind::Profile {
            return Err(Error::invalid(
                "kind",
                "a memory cannot become a profile fact; create one with a key",
            ));
        }
        if kind != Kind::Profile && old.kind == Kind::Profile {
            return Err(Error::invalid("kind", "a profile fact cannot change kind"));
        }
        // A new version stays in the old one's pool: an agent that sees another pool's
        // shared fact may edit it, but not turn it into a private fact of that pool (it
        // would write into another agent's memory and get back a row it cannot see).
        if let KeyRole::Agent(a) = &p.role
            && kind != Kind::Shared
            && let Some(pool) = &old.pool
            && *pool != self.pool_of(&p.tenant, a).await?
        {
            return Err(Error::Forbidden(format!(
                "memory {id} is a shared fact of another agent's memory pool: keep it shared \
                 or ask an admin key to change its kind"
            )));
        }
        if let Some(md) = &input.metadata
            && !md.is_object()
        {
            return Err(Error::invalid("metadata", "metadata must be a JSON object"));
        }
        let expires_at = match input.expires_at {
            Some(Some(e)) if e <= now => {
                return Err(Error::invalid("expires_at", "expires_at must be in the future"));
            }
            Some(e) => e,
            None => match old.expires_at {
                Some(e) if e <= now => {
                    return Err(Error::Conflict(format!(
                        "memory {id} has expired; give expires_at (a later time, or null) to \
                         bring it back"
                    )));
                }
                e => e,
            },
        };
        let mut new = Memory {
            id: MemoryId::new(),
            content,
            kind,
            category: input.category.unwrap_or(old.category),
            importance: input.importance.unwrap_or(old.importance),
            metadata: input.metadata.clone().unwrap_or_else(|| old.metadata.clone()),
            expires_at,
            created_at: now,
            updated_at: now,
            superseded_at: None,
            superseded_by: None,
            last_accessed_at: None,
            access_count: 0,
            ..old.clone()
        };
        let mut redacted = vec![];
        if input.content.is_some() {
            let writer = match &new.agent_id {
                Some(a) => self.svc.store.get_agent(&p.tenant, a).await?,
                None => None,
            };
            (new, redacted) = self.apply_pii(writer.as_ref(), new)?;
        }
        // An edit that changes nothing makes no new version (its history would fill with
        // copies): the fact as it is.
        if (&new.content, new.kind, new.category, new.importance, &new.metadata, new.expires_at)
            == (&old.content, old.kind, old.category, old.importance, &old.metadata, old.expires_at)
        {
            return Ok((old, redacted));
        }
        let vector = if new.kind == Kind::Profile {
            None
        } else {
            self.svc.ensure_space().await?;
            new.embedding_model = Some(self.svc.embedder.model_id().to_string());
            Some(self.embed_one(&new.content).await?)
        };
        let mut new_ev = Self::event(new.id, EventKind::Created, Some(old.id), p, now);
        note_redactions(&mut new_ev, &redacted);
        let old_ev = Self::event(old.id, EventKind::Superseded, Some(new.id), p, now);
        self.svc
            .store
            .supersede(
                &p.tenant,
                old.id,
                Some(NewMemory {
                    memory: new.clone(),
                    vector,
                    events: vec![new_ev],
                    unique: false,
                }),
                old_ev,
            )
            .await?;
        Ok((new, redacted))
    }

    /// Forget: supersede with no successor (kept for audit), or purge physically.
    pub async fn forget(&self, p: &Principal, id: MemoryId, purge: bool) -> Result<()> {
        let old = self.load_visible(p, id).await?;
        if purge {
            if let KeyRole::Agent(_) = p.role {
                return Err(Error::Forbidden("purge needs an admin or user key".into()));
            }
            return self.svc.store.purge_memory(&p.tenant, old.id).await;
        }
        if old.superseded_at.is_some() {
            return Err(Error::Conflict(format!("memory {id} is already superseded or forgotten")));
        }
        let ev = Self::event(old.id, EventKind::Forgotten, None, p, crate::model::now());
        self.svc.store.supersede(&p.tenant, old.id, None, ev).await
    }

    pub async fn get(&self, p: &Principal, id: MemoryId) -> Result<Memory> {
        let mut m = [self.load_visible(p, id).await?];
        self.hide_invisible_successors(p, &mut m).await?;
        let [m] = m;
        Ok(m)
    }

    /// The supersession chain through `id` and its events, as far as the caller may see:
    /// versions the caller cannot see (another agent's private edit of a shared fact, or
    /// the private original of a shared one) are left out with their events, and ids of
    /// left-out versions are cleared from `superseded_by` and from the events.
    pub async fn history(&self, p: &Principal, id: MemoryId) -> Result<History> {
        let _ = self.load_visible(p, id).await?;
        let (chain, events) = self.svc.store.history(&p.tenant, id).await?;
        let pool = self.caller_pool(p).await?;
        let mut kept: Vec<Memory> =
            chain.into_iter().filter(|m| Self::sees(p, pool.as_deref(), m)).collect();
        let ids: HashSet<MemoryId> = kept.iter().map(|m| m.id).collect();
        for m in &mut kept {
            if m.superseded_by.is_some_and(|s| !ids.contains(&s)) {
                m.superseded_by = None;
            }
        }
        let mut shown = Vec::with_capacity(events.len());
        for mut e in events.into_iter().filter(|e| ids.contains(&e.memory_id)) {
            if e.related_id.is_some_and(|r| !ids.contains(&r)) {
                e.related_id = None;
            }
            let via = e.detail.get("via_message").and_then(|v| v.as_str()).map(str::to_string);
            if let Some(msg) = via
                && !self.message_visible(p, &msg).await?
                && let Some(d) = e.detail.as_object_mut()
            {
                d.remove("via_message");
            }
            shown.push(e);
        }
        Ok(History { chain: kept, events: shown })
    }

    /// `Conflict` unless `m` is its fact's current version, naming the one to `verb` instead
    /// (when the caller may see it).
    async fn require_current(&self, p: &Principal, m: &Memory, verb: &str) -> Result<()> {
        if m.superseded_at.is_none() {
            return Ok(());
        }
        let id = m.id;
        Err(Error::Conflict(match m.superseded_by {
            Some(s) if self.id_visible(p, s).await? => {
                format!("memory {id} is superseded by {s}; {verb} the current version")
            }
            Some(_) => format!("memory {id} is superseded; {verb} the current version"),
            // Forgotten: no version is current.
            None => format!("memory {id} was forgotten; remember it again to restore it"),
        }))
    }

    /// Rate a memory −1 or +1 (its current version).
    pub async fn rate(&self, p: &Principal, id: MemoryId, value: i64) -> Result<Memory> {
        if value != 1 && value != -1 {
            return Err(Error::invalid("value", "a rating is -1 or 1"));
        }
        let m = self.load_visible(p, id).await?;
        // History is not rewritten: a past version keeps the rating it had.
        self.require_current(p, &m, "rate").await?;
        let mut ev = Self::event(m.id, EventKind::Rated, None, p, crate::model::now());
        ev.detail = serde_json::json!({ "value": value });
        self.svc.store.rate_memory(&p.tenant, m.id, value, ev).await?;
        self.get(p, id).await
    }

    pub async fn list(&self, p: &Principal, input: ListInput) -> Result<MemoryPage> {
        let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), false).await?;
        let mut f = self.filter(&v);
        f.kinds = input.kinds;
        f.categories = input.categories;
        f.include_superseded = input.include_superseded;
        f.since = input.since;
        f.until = input.until;
        f.source_conversation = input.source_conversation;
        f.rating = input.rating;
        let limit = clamp_limit(input.limit, self.svc.cfg.max_limit)?;
        let mut page = self.svc.store.list_memories(&p.tenant, &f, input.cursor, limit).await?;
        self.hide_invisible_successors(p, &mut page.memories).await?;
        Ok(page)
    }

    /// A list, or with a query, one page of the best active matches (the MCP
    /// `list_memories` tool): a query takes neither a cursor nor superseded rows.
    pub async fn find(
        &self,
        p: &Principal,
        input: ListInput,
        query: Option<String>,
    ) -> Result<MemoryPage> {
        let Some(query) = query.filter(|q| !q.trim().is_empty()) else {
            return self.list(p, input).await;
        };
        if input.cursor.is_some() || input.include_superseded {
            return Err(Error::invalid(
                "query",
                "query gives one page of the best active matches: it takes neither cursor nor include_superseded",
            ));
        }
        let search = super::SearchInput {
            query,
            user_id: input.user_id,
            agent_id: input.agent_id,
            kinds: input.kinds,
            categories: input.categories,
            since: input.since,
            until: input.until,
            limit: input.limit,
            ..Default::default()
        };
        let memories = self
            .search(p, search)
            .await?
            .into_iter()
            .filter_map(|h| match h {
                super::Hit::Memory { memory, .. } => Some(memory),
                super::Hit::Message { .. } | super::Hit::Summary { .. } => None,
            })
            .collect();
        Ok(MemoryPage { memories, next_cursor: None })
    }

    // ------------------------------------------------------------------ reads
}

impl Engine {
    /// Count the hits as accessed (SPEC §3: returned rows get their `access_count` and
    /// `last_accessed_at` bumped), and record the facts as recalled for `turn_id`.
    pub(super) async fn count_access(
        &self,
        v: &super::scope::View,
        hits: &[Hit],
        turn_id: Option<&str>,
        now: time::OffsetDateTime,
    ) -> Result<()> {
        let ids: Vec<MemoryId> = hits
            .iter()
            .filter_map(|h| match h {
                Hit::Memory { memory, .. } => Some(memory.id),
                Hit::Message { .. } | Hit::Summary { .. } => None,
            })
            .collect();
        let (mut messages, mut summaries) = (Vec::new(), Vec::new());
        for h in hits {
            match h {
                Hit::Message { message, .. } => messages.push(message.id),
                Hit::Summary { summary, expanded, .. } => {
                    summaries.push(summary.id);
                    messages.extend(expanded.iter().map(|(m, _)| m.id));
                }
                Hit::Memory { .. } => {}
            }
        }
        if !messages.is_empty() || !summaries.is_empty() {
            self.svc.store.touch_transcript(&v.tenant, &messages, &summaries, now).await?;
        }
        if !ids.is_empty() {
            self.svc.store.touch_memories(&v.tenant, &ids, now).await?;
            if let Some(t) = turn_id {
                self.svc.store.record_recall(&v.tenant, t, &ids).await?;
            }
        }
        Ok(())
    }
}
