//! Explicit writes: `remember` (one fact, a batch, a keyed profile fact) with validation,
//! the PII filter, and deduplication against the caller's active rows.

use std::collections::HashMap;

use time::OffsetDateTime;

use crate::error::{Error, Result};
use crate::model::{
    Agent, Content, EventKind, Kind, Memory, MemoryEvent, MemoryId, Principal, Source, SourceKind,
};
use crate::pipeline::pii::{self, Filtered, PiiKind};
use crate::pipeline::policy::MemoryPolicy;
use crate::store::NewMemory;

use super::{
    Decision, Engine, RememberInput, Remembered, View, ViewKey, actor_name, note_redactions,
    prefix_batch_error,
};

impl Engine {
    /// The writer agent's dedup threshold (the default without settings).
    pub(super) fn dedup_threshold(&self, v: &View) -> f32 {
        v.settings.as_ref().map_or(self.svc.cfg.dedup_threshold, |a| a.dedup_threshold)
    }

    /// The stored active fact in `v`'s scope that `content` (embedded as `vector`) repeats:
    /// cosine ≥ `threshold` and [`crate::dedup::same_fact`]; the most similar such fact among
    /// the nearest few.
    pub(super) async fn duplicate_of(
        &self,
        v: &View,
        vector: &[f32],
        content: &str,
        threshold: f32,
    ) -> Result<Option<(MemoryId, f32)>> {
        const NEIGHBOURS: usize = 5;
        let filter = self.filter(v);
        let hits = self.svc.store.vector_search(&v.tenant, &filter, vector, NEIGHBOURS).await?;
        let close: Vec<(MemoryId, f32)> =
            hits.into_iter().filter(|(_, sim)| *sim >= threshold).collect();
        if close.is_empty() {
            return Ok(None);
        }
        let ids: Vec<MemoryId> = close.iter().map(|h| h.0).collect();
        let rows = self.svc.store.get_memories(&v.tenant, &ids).await?;
        Ok(close.into_iter().find(|(id, _)| {
            rows.iter().any(|m| m.id == *id && crate::dedup::same_fact(&m.content, content))
        }))
    }

    pub(super) async fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        let mut v = self.svc.embedder.embed(&[text.to_string()]).await?;
        v.pop().ok_or_else(|| Error::internal("embedder returned no vector"))
    }

    // ------------------------------------------------------------------ writes

    /// Explicit writes go through the writer agent's PII policy (default: redact); returns
    /// the row to store and what was redacted. A redaction is recorded in the row's first
    /// event (`detail.redacted`), so the audit trail says the text is not as given.
    pub(super) fn apply_pii(
        &self,
        writer: Option<&Agent>,
        mut m: Memory,
    ) -> Result<(Memory, Vec<PiiKind>)> {
        let policy = MemoryPolicy::of(writer, self.svc.cfg.dedup_threshold).pii;
        match pii::filter(&m.content, policy) {
            Filtered::Keep { text, redacted } => {
                m.content = text;
                Ok((m, redacted))
            }
            Filtered::Rejected(kinds) => {
                let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
                Err(Error::Unprocessable(format!(
                    "the content holds personal data ({}) and the agent's PII policy is reject",
                    kinds.join(", ")
                )))
            }
        }
    }

    pub(super) fn build_memory(
        &self,
        v: &View,
        input: &RememberInput,
        now: OffsetDateTime,
    ) -> Result<Memory> {
        let content = Content::parse(&input.content, self.svc.cfg.max_content_bytes)?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        let key = match (input.kind, &input.key) {
            (Kind::Profile, Some(k)) if !k.trim().is_empty() => Some(k.trim().to_string()),
            (Kind::Profile, _) => {
                return Err(Error::invalid("key", "a profile memory needs a non-empty key"));
            }
            (Kind::Knowledge | Kind::Shared, Some(_)) => {
                return Err(Error::invalid("key", "only profile memories have a key"));
            }
            (Kind::Knowledge | Kind::Shared, None) => None,
        };
        let metadata = input.metadata.clone().unwrap_or_else(|| serde_json::json!({}));
        if !metadata.is_object() {
            return Err(Error::invalid("metadata", "metadata must be a JSON object"));
        }
        if metadata.to_string().contains("\\u0000") {
            return Err(Error::invalid("metadata", "metadata must not contain NUL characters"));
        }
        if let Some(e) = input.expires_at
            && e <= now
        {
            return Err(Error::invalid("expires_at", "expires_at must be in the future"));
        }
        let source_kind = input.source_kind.unwrap_or(if input.source_conversation_id.is_some() {
            SourceKind::Conversation
        } else {
            SourceKind::Manual
        });
        Ok(Memory {
            agent_id: v.agent.clone(),
            pool: v.pool.clone(),
            kind: input.kind,
            key,
            category: input.category,
            importance: input.importance,
            observed_at: input.observed_at.map_or(now, crate::model::micros),
            expires_at: input.expires_at,
            metadata,
            ..Memory::new(
                v.tenant.clone(),
                user,
                content.into_string(),
                Source {
                    kind: source_kind,
                    conversation_id: input.source_conversation_id.clone(),
                    message_ids: vec![],
                },
                now,
            )
        })
    }

    pub(super) fn event(
        id: MemoryId,
        kind: EventKind,
        related: Option<MemoryId>,
        p: &Principal,
        at: OffsetDateTime,
    ) -> MemoryEvent {
        MemoryEvent {
            memory_id: id,
            event: kind,
            related_id: related,
            actor: actor_name(p),
            detail: serde_json::json!({}),
            at,
        }
    }

    /// Explicit remember: PII-free content is embedded, deduplicated against the active facts
    /// the caller can see (cosine ≥ threshold → `NONE`, the existing fact confirmed), and
    /// stored. Profile facts upsert by key instead (`UPDATE` supersedes the old value).
    pub async fn remember(&self, p: &Principal, input: RememberInput) -> Result<Remembered> {
        let _busy = crate::priority::RequestsInFlight::enter(&self.svc.requests);
        let mut out = self.remember_batch(p, vec![input], true).await?;
        out.pop().ok_or_else(|| Error::internal("empty batch result"))
    }

    /// Bulk remember in one transaction. With `dedup`, every item is checked against the
    /// store and against the earlier items of the same batch; without, every item is stored
    /// as given. All items are validated before anything is written: one bad item fails
    /// the whole batch and nothing is stored.
    pub async fn remember_batch(
        &self,
        p: &Principal,
        inputs: Vec<RememberInput>,
        dedup: bool,
    ) -> Result<Vec<Remembered>> {
        let _busy = crate::priority::RequestsInFlight::enter(&self.svc.requests);
        let now = crate::model::now();
        // Validate and scope everything first.
        let mut prepared = Vec::with_capacity(inputs.len());
        let mut views: HashMap<ViewKey, View> = HashMap::new();
        for (i, input) in inputs.iter().enumerate() {
            let key = (input.user_id.clone(), input.agent_id.clone());
            if !views.contains_key(&key) {
                let v = self.view(p, input.user_id.as_ref(), input.agent_id.as_ref(), true).await?;
                views.insert(key.clone(), v);
            }
            let v = &views[&key];
            let m = self
                .build_memory(v, input, now)
                .map_err(|e| prefix_batch_error(e, i, inputs.len()))?;
            let (m, redacted) = self
                .apply_pii(v.settings.as_ref(), m)
                .map_err(|e| prefix_batch_error(e, i, inputs.len()))?;
            prepared.push((key, m, redacted));
        }
        // Embed every non-profile item in one call.
        let texts: Vec<String> = prepared
            .iter()
            .filter(|(_, m, _)| m.kind != Kind::Profile)
            .map(|(_, m, _)| m.content.clone())
            .collect();
        let mut vectors =
            if texts.is_empty() { vec![] } else { self.svc.embedder.embed(&texts).await? }
                .into_iter();
        if !texts.is_empty() {
            self.svc.ensure_space().await?;
        }

        let mut results = Vec::with_capacity(prepared.len());
        let mut rows: Vec<NewMemory> = Vec::new();
        // Items of this batch already accepted, per view, for in-batch dedup.
        let mut batch_vecs: HashMap<ViewKey, Vec<(usize, Vec<f32>)>> = HashMap::new();
        for (key, mut m, redacted) in prepared {
            let v = &views[&key];
            if m.kind == Kind::Profile {
                let mut r = self.remember_profile(p, v, m, &redacted, now).await?;
                r.redacted = redacted;
                results.push(r);
                continue;
            }
            let vector = vectors
                .next()
                .ok_or_else(|| Error::internal("embedder returned too few vectors"))?;
            m.embedding_model = Some(self.svc.embedder.model_id().to_string());
            if dedup {
                let threshold = self.dedup_threshold(v);
                // Against earlier items of this batch: similar enough and the same words.
                let earlier = batch_vecs.get(&key).and_then(|list| {
                    list.iter()
                        .map(|(i, vec)| (*i, crate::embed::dot(vec, &vector)))
                        .filter(|(i, sim)| {
                            *sim >= threshold
                                && crate::dedup::same_fact(&results[*i].memory.content, &m.content)
                        })
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                });
                if let Some((idx, sim)) = earlier {
                    let existing = results[idx].memory.clone();
                    results.push(Remembered {
                        decision: Decision::None,
                        memory: existing,
                        similarity: Some(sim),
                        redacted,
                    });
                    continue;
                }
                // Against the store: the most similar fact that passes the word check.
                if let Some((id, sim)) =
                    self.duplicate_of(v, &vector, &m.content, threshold).await?
                {
                    let ev = Self::event(id, EventKind::Confirmed, None, p, now);
                    self.svc.store.confirm_memory(&v.tenant, id, ev).await?;
                    let existing = self
                        .svc
                        .store
                        .get_memory(&v.tenant, id)
                        .await?
                        .ok_or_else(|| Error::internal("confirmed memory vanished"))?;
                    results.push(Remembered {
                        decision: Decision::None,
                        memory: existing,
                        similarity: Some(sim),
                        redacted,
                    });
                    continue;
                }
                batch_vecs.entry(key.clone()).or_default().push((results.len(), vector.clone()));
            }
            let kind = if m.source.kind == SourceKind::Import {
                EventKind::Imported
            } else {
                EventKind::Created
            };
            let mut event = Self::event(m.id, kind, None, p, now);
            note_redactions(&mut event, &redacted);
            rows.push(NewMemory { memory: m.clone(), vector: Some(vector), events: vec![event] });
            results.push(Remembered {
                decision: Decision::Add,
                memory: m,
                similarity: None,
                redacted,
            });
        }
        if !rows.is_empty() {
            self.svc.store.insert_memories(&p.tenant, rows).await?;
        }
        Ok(results)
    }

    pub(super) async fn remember_profile(
        &self,
        p: &Principal,
        v: &View,
        m: Memory,
        redacted: &[PiiKind],
        now: OffsetDateTime,
    ) -> Result<Remembered> {
        let key = m.key.clone().unwrap_or_default();
        let existing =
            self.svc.store.find_profile(&v.tenant, &m.user_id, v.pool.as_deref(), &key).await?;
        match existing {
            Some(old) if old.content == m.content => {
                let ev = Self::event(old.id, EventKind::Confirmed, None, p, now);
                self.svc.store.confirm_memory(&v.tenant, old.id, ev).await?;
                let old = self.svc.store.get_memory(&v.tenant, old.id).await?.unwrap_or(old);
                Ok(Remembered {
                    decision: Decision::None,
                    memory: old,
                    similarity: Some(1.0),
                    redacted: vec![],
                })
            }
            Some(old) => {
                let mut new_ev = Self::event(m.id, EventKind::Created, Some(old.id), p, now);
                note_redactions(&mut new_ev, redacted);
                let old_ev = Self::event(old.id, EventKind::Superseded, Some(m.id), p, now);
                let row = NewMemory { memory: m.clone(), vector: None, events: vec![new_ev] };
                self.svc.store.supersede(&v.tenant, old.id, Some(row), old_ev).await?;
                Ok(Remembered {
                    decision: Decision::Update,
                    memory: m,
                    similarity: None,
                    redacted: vec![],
                })
            }
            None => {
                let mut ev = Self::event(m.id, EventKind::Created, None, p, now);
                note_redactions(&mut ev, redacted);
                self.svc
                    .store
                    .insert_memories(
                        &v.tenant,
                        vec![NewMemory { memory: m.clone(), vector: None, events: vec![ev] }],
                    )
                    .await?;
                Ok(Remembered {
                    decision: Decision::Add,
                    memory: m,
                    similarity: None,
                    redacted: vec![],
                })
            }
        }
    }
}
