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

/// How many times a write is tried again after a racing write to the same user committed
/// first (each round, one of the racers wins).
const RACE_RETRIES: usize = 16;

/// Await `write` (an expression making a future) again while the store refuses it with
/// `Conflict` (a racing write to the same key or of the same fact committed after our read),
/// at most [`RACE_RETRIES`] more times. A macro, not a function over an async closure: the
/// closure's borrows would make the handlers' futures not `Send`.
macro_rules! retry_races {
    ($write:expr) => {{
        let mut attempt = 0;
        loop {
            match $write.await {
                Err(Error::Conflict(_)) if attempt < RACE_RETRIES => attempt += 1,
                done => break done,
            }
        }
    }};
}

/// A non-profile fact of a batch, validated and embedded: its place in the batch, its view.
struct Fact {
    index: usize,
    key: ViewKey,
    memory: Memory,
    redacted: Vec<PiiKind>,
    vector: Vec<f32>,
}

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
            rows.iter().any(|m| {
                m.id == *id
                    && crate::dedup::seen_wherever(m, v.pool.as_deref())
                    && crate::dedup::same_fact(&m.content, content)
            })
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
        let mut out = self.store_facts(p, vec![input], true, false).await?;
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
        self.store_facts(p, inputs, dedup, true).await
    }

    /// [`Self::remember_batch`]; a `batch` call's errors name their item.
    async fn store_facts(
        &self,
        p: &Principal,
        inputs: Vec<RememberInput>,
        dedup: bool,
        batch: bool,
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
            let m =
                self.build_memory(v, input, now).map_err(|e| prefix_batch_error(e, i, batch))?;
            let (m, redacted) = self
                .apply_pii(v.settings.as_ref(), m)
                .map_err(|e| prefix_batch_error(e, i, batch))?;
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

        // Profile facts upsert one by one; the rest are placed together.
        let mut results: Vec<Option<Remembered>> = vec![None; prepared.len()];
        let mut facts = Vec::new();
        for (index, (key, mut m, redacted)) in prepared.into_iter().enumerate() {
            if m.kind == Kind::Profile {
                let v = &views[&key];
                let mut r = retry_races!(self.upsert_profile(p, v, m.clone(), &redacted, now))?;
                r.redacted = redacted;
                results[index] = Some(r);
                continue;
            }
            let vector = vectors
                .next()
                .ok_or_else(|| Error::internal("embedder returned too few vectors"))?;
            m.embedding_model = Some(self.svc.embedder.model_id().to_string());
            facts.push(Fact { index, key, memory: m, redacted, vector });
        }
        // A racing identical write stored first: the store refuses ours (`Conflict`), and the
        // facts are deduplicated again against what it now holds.
        let placed = retry_races!(self.place_facts(p, &views, &facts, dedup, now))?;
        for (index, r) in placed {
            results[index] = Some(r);
        }
        results.into_iter().map(|r| r.ok_or_else(|| Error::internal("item not placed"))).collect()
    }

    /// Deduplicate `facts` (with `dedup`: against the earlier facts of the batch, then the
    /// caller's stored active facts) and write them: the new rows in one insert (marked
    /// unique, so that the store refuses a fact a racing write stored after our read), then
    /// the confirmations of the stored facts they repeat. A repeat within the batch
    /// confirms the batch's row before it is written (`mention_count`, a `confirmed`
    /// event).
    async fn place_facts(
        &self,
        p: &Principal,
        views: &HashMap<ViewKey, View>,
        facts: &[Fact],
        dedup: bool,
        now: OffsetDateTime,
    ) -> Result<Vec<(usize, Remembered)>> {
        /// Where one fact went: a new row, a repeat of one, a repeat of a stored fact.
        enum Placed {
            New(usize),
            Repeats(usize, f32),
            Stored(MemoryId, f32),
        }
        let mut rows: Vec<NewMemory> = Vec::new();
        let mut placed = Vec::with_capacity(facts.len());
        // The new rows of this batch, per view, for in-batch dedup.
        let mut fresh: HashMap<&ViewKey, Vec<usize>> = HashMap::new();
        for f in facts {
            let v = &views[&f.key];
            if dedup {
                let threshold = self.dedup_threshold(v);
                let earlier = fresh.get(&f.key).and_then(|list| {
                    list.iter()
                        .map(|&r| (r, crate::embed::dot(&facts[r].vector, &f.vector)))
                        .filter(|&(r, sim)| {
                            sim >= threshold
                                && crate::dedup::same_fact(
                                    &facts[r].memory.content,
                                    &f.memory.content,
                                )
                        })
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                });
                if let Some((r, sim)) = earlier {
                    placed.push(Placed::Repeats(r, sim));
                    continue;
                }
                if let Some((id, sim)) =
                    self.duplicate_of(v, &f.vector, &f.memory.content, threshold).await?
                {
                    placed.push(Placed::Stored(id, sim));
                    continue;
                }
            }
            let r = placed.len();
            fresh.entry(&f.key).or_default().push(r);
            placed.push(Placed::New(rows.len()));
            let m = &f.memory;
            let kind = if m.source.kind == SourceKind::Import {
                EventKind::Imported
            } else {
                EventKind::Created
            };
            let mut event = Self::event(m.id, kind, None, p, now);
            note_redactions(&mut event, &f.redacted);
            rows.push(NewMemory {
                memory: m.clone(),
                vector: Some(f.vector.clone()),
                events: vec![event],
                unique: dedup,
            });
        }
        // Repeats within the batch count as mentions of the row they repeat.
        for at in &placed {
            if let Placed::Repeats(r, _) = at
                && let Placed::New(row) = placed[*r]
            {
                let row = &mut rows[row];
                row.memory.mention_count += 1;
                row.events.push(Self::event(row.memory.id, EventKind::Confirmed, None, p, now));
            }
        }
        if !rows.is_empty() {
            self.svc.store.insert_memories(&p.tenant, rows.clone()).await?;
        }
        let mut out = Vec::with_capacity(facts.len());
        for (f, at) in facts.iter().zip(&placed) {
            let (decision, memory, similarity) = match *at {
                Placed::New(row) => (Decision::Add, rows[row].memory.clone(), None),
                Placed::Repeats(r, sim) => {
                    let Placed::New(row) = placed[r] else {
                        return Err(Error::internal("a repeat of a repeat"));
                    };
                    (Decision::None, rows[row].memory.clone(), Some(sim))
                }
                Placed::Stored(id, sim) => {
                    let ev = Self::event(id, EventKind::Confirmed, None, p, now);
                    self.svc.store.confirm_memory(&p.tenant, id, ev).await?;
                    let existing = self
                        .svc
                        .store
                        .get_memory(&p.tenant, id)
                        .await?
                        .ok_or_else(|| Error::internal("confirmed memory vanished"))?;
                    (Decision::None, existing, Some(sim))
                }
            };
            out.push((
                f.index,
                Remembered { decision, memory, similarity, redacted: f.redacted.clone() },
            ));
        }
        Ok(out)
    }
}
