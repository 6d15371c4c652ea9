//! Operator backup and restore (`engram export` / `import`), and the earlier memory-line
//! export kept for compatibility.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{Content, EventKind, Kind, Memory, MemoryEvent, MemoryId, Principal, UserId};
use crate::store::{BackupRow, BackupScope, NewMemory, RestoreState};

use super::{Engine, ImportReport};

impl Engine {
    /// Operator backup (`engram export`, never reachable over the API): every row in `scope`
    /// from one snapshot, see [`Store::backup`].
    pub async fn backup(
        &self,
        scope: &BackupScope,
        sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    ) -> Result<u64> {
        self.svc.store.backup(scope, sink).await
    }

    /// The store's embedding space `(model id, dimensions)`, if it holds vectors.
    pub async fn embedding_space(&self) -> Result<Option<(String, usize)>> {
        self.svc.store.embedding_space().await
    }

    /// Before restoring a backup whose vectors are of `space`: the store must hold that space
    /// or none (it is then recorded); vectors of two models are never mixed.
    pub async fn prepare_restore(&self, space: Option<(&str, usize)>) -> Result<()> {
        let Some((model, dims)) = space else { return Ok(()) };
        match self.svc.store.embedding_space().await? {
            Some((m, d)) if m != model || d != dims => Err(Error::Unprocessable(format!(
                "the export's vectors are of {model} ({dims} dims) but this store's of {m} ({d} \
                 dims); one store holds one embedding space (import into an empty store, or run \
                 `engram reembed` after importing into a store of the export's model)"
            ))),
            Some(_) => Ok(()),
            None => self.svc.store.ensure_embedding_space(model, dims).await,
        }
    }

    /// What an import that has not finished said when it began (`engram import` marks the
    /// store before its first row and clears the mark after its last), if one has not.
    pub async fn import_mark(&self) -> Result<Option<String>> {
        self.svc.store.import_mark().await
    }

    /// Mark an import begun (Some) or finished (None).
    pub async fn set_import_mark(&self, mark: Option<&str>) -> Result<()> {
        self.svc.store.set_import_mark(mark).await
    }

    /// Operator restore (`engram import`): one batch of backup rows, see [`Store::restore`].
    pub async fn restore(&self, rows: &[BackupRow], state: &mut RestoreState) -> Result<()> {
        self.svc.store.restore(rows, state).await
    }

    /// Every memory row (active and superseded) with its events, of one user or of the
    /// whole tenant: the lossless export that [`Engine::import`] reads back.
    pub async fn export_memories(
        &self,
        p: &Principal,
        user: Option<&UserId>,
    ) -> Result<Vec<(Memory, Vec<MemoryEvent>)>> {
        Self::require_admin(p, "exporting memories")?;
        let users = match user {
            Some(u) => vec![u.clone()],
            None => self.svc.store.list_users(&p.tenant).await?,
        };
        let mut out = Vec::new();
        for u in users {
            let (memories, events) = self.svc.store.user_memories(&p.tenant, &u).await?;
            let mut by_id: HashMap<MemoryId, Vec<MemoryEvent>> = HashMap::new();
            for e in events {
                by_id.entry(e.memory_id).or_default().push(e);
            }
            for m in memories {
                let ev = by_id.remove(&m.id).unwrap_or_default();
                out.push((m, ev));
            }
        }
        Ok(out)
    }

    /// Restore exported rows exactly (ids, timestamps, supersession, ratings, events), into
    /// the caller's tenant, re-embedding their content with the current embedder. Rows whose
    /// id already exists are skipped, so an import can be re-run.
    pub async fn import(
        &self,
        p: &Principal,
        records: Vec<(Memory, Vec<MemoryEvent>)>,
        progress: &(dyn Fn(&ImportReport) + Send + Sync),
    ) -> Result<ImportReport> {
        Self::require_admin(p, "importing memories")?;
        let mut report = ImportReport::default();
        for chunk in records.chunks(500) {
            let ids: Vec<MemoryId> = chunk.iter().map(|(m, _)| m.id).collect();
            let existing: std::collections::HashSet<MemoryId> = self
                .svc
                .store
                .get_memories(&p.tenant, &ids)
                .await?
                .into_iter()
                .map(|m| m.id)
                .collect();
            let fresh: Vec<&(Memory, Vec<MemoryEvent>)> =
                chunk.iter().filter(|(m, _)| !existing.contains(&m.id)).collect();
            report.skipped += chunk.len() - fresh.len();
            let texts: Vec<String> = fresh
                .iter()
                .filter(|(m, _)| m.kind != Kind::Profile)
                .map(|(m, _)| m.content.clone())
                .collect();
            let mut vectors = if texts.is_empty() {
                vec![]
            } else {
                self.svc.embedder.embed_background(&texts).await?
            }
            .into_iter();
            if !texts.is_empty() {
                self.svc.ensure_space().await?;
            }
            let mut rows = Vec::with_capacity(fresh.len());
            for (m, events) in fresh {
                let mut m = m.clone();
                Content::parse(&m.content, usize::MAX)?;
                m.tenant_id = p.tenant.clone();
                let vector = if m.kind == Kind::Profile {
                    m.embedding_model = None;
                    None
                } else {
                    m.embedding_model = Some(self.svc.embedder.model_id().to_string());
                    Some(
                        vectors
                            .next()
                            .ok_or_else(|| Error::internal("embedder returned too few vectors"))?,
                    )
                };
                let mut events = events.clone();
                if let Some(current) = self.profile_in_place(p, &m).await? {
                    // The store already has another active value under this key: the newer
                    // statement stays active and the other becomes its history (the store
                    // keeps one active value per key; nothing is overwritten).
                    if m.created_at > current.created_at {
                        let ev = Self::event(
                            current.id,
                            EventKind::Superseded,
                            Some(m.id),
                            p,
                            crate::model::now(),
                        );
                        let row = NewMemory { memory: m, vector, events, unique: false };
                        self.svc.store.supersede(&p.tenant, current.id, Some(row), ev).await?;
                        report.imported += 1;
                        continue;
                    }
                    m.superseded_at = Some(current.created_at);
                    m.superseded_by = Some(current.id);
                    events.push(Self::event(
                        m.id,
                        EventKind::Superseded,
                        Some(current.id),
                        p,
                        crate::model::now(),
                    ));
                }
                rows.push(NewMemory { memory: m, vector, events, unique: false });
            }
            report.imported += rows.len();
            self.svc.store.insert_memories(&p.tenant, rows).await?;
            progress(&report);
        }
        Ok(report)
    }

    /// The active profile value an imported one would stand beside: another row under the
    /// same user, pool and key, while the imported one is active too.
    async fn profile_in_place(&self, p: &Principal, m: &Memory) -> Result<Option<Memory>> {
        let (Kind::Profile, Some(key), None) = (m.kind, &m.key, m.superseded_at) else {
            return Ok(None);
        };
        let found =
            self.svc.store.find_profile(&p.tenant, &m.user_id, m.pool.as_deref(), key).await?;
        Ok(found.filter(|f| f.id != m.id))
    }
}
