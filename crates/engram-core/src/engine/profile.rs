//! Profile facts: one current value per key, upserted (the same value confirms it, another
//! supersedes it, as does any value once the current one has expired).

use time::OffsetDateTime;

use crate::error::Result;
use crate::model::{EventKind, Memory, Principal};
use crate::pipeline::pii::PiiKind;
use crate::store::NewMemory;

use super::{Decision, Engine, Remembered, View, note_redactions};

impl Engine {
    /// One attempt of a profile upsert: the same value confirms the current fact, another
    /// value (or any value once the current one has expired) supersedes it.
    pub(super) async fn upsert_profile(
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
            Some(old) if old.content == m.content && old.expires_at.is_none_or(|e| e > now) => {
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
                let row = NewMemory {
                    memory: m.clone(),
                    vector: None,
                    events: vec![new_ev],
                    unique: false,
                };
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
                        vec![NewMemory {
                            memory: m.clone(),
                            vector: None,
                            events: vec![ev],
                            unique: false,
                        }],
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
