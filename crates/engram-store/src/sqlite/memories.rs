//! SQLite: the [`engram_core::store::MemoryStore`] part of the store. Facts: insert, read, list, supersede, confirm, rate, purge, history, vector and keyword search, access counts, profile lookup; and the read side around them (recalls, context sessions).
//!
//! What both backends do alike is written once in [`crate::common::memories`]; this file holds
//! the rest and calls it.

use super::*;

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()> {
        let begun = common::memories::begin_insert(self, self, tenant, &rows).await?;
        let Some((mut tx, versions)) = begun else { return Ok(()) };
        for row in &rows {
            let v = versions.get(row.memory.user_id.as_str()).copied().unwrap_or_default();
            common::memories::insert::<Self>(&mut tx, row, v).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        common::memories::get(self, tenant, id).await
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        common::memories::get_many(self, tenant, ids).await
    }

    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage> {
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        push_filter(&mut q, filter, now);
        if let Some(c) = cursor {
            q.push(" AND id < ").push_bind(c.to_string());
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind((limit + 1) as i64);
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        let mut memories = rows.iter().map(common::rows::memory).collect::<Result<Vec<_>>>()?;
        let next_cursor = if memories.len() > limit {
            memories.truncate(limit);
            memories.last().map(|m| m.id)
        } else {
            None
        };
        Ok(MemoryPage { memories, next_cursor })
    }

    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>> {
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str().to_string());
        let f = MemoryFilter { include_superseded: false, ..filter.clone() };
        push_filter(&mut q, &f, now);
        q.push(" ORDER BY observed_at, id");
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        rows.iter().map(common::rows::memory).collect()
    }

    async fn supersede(
        &self,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<NewMemory>,
        event: MemoryEvent,
    ) -> Result<()> {
        common::memories::supersede(self, tenant, old, new.as_ref(), &event).await
    }

    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()> {
        common::memories::confirm(self, tenant, id, &event).await
    }

    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64> {
        common::memories::rate(self, tenant, id, delta, &event).await
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        common::memories::purge(self, tenant, id).await
    }

    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let chain = common::memories::chain(self, tenant, id).await?;
        let mut events = Vec::new();
        for m in &chain {
            let rows = sqlx::query(
                "SELECT * FROM memory_events WHERE tenant_id = ? AND memory_id = ? ORDER BY at, id",
            )
            .bind(tenant.as_str())
            .bind(m.id.to_string())
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
            for r in rows {
                events.push(common::rows::event(&r)?);
            }
        }
        events.sort_by_key(|e| e.at);
        Ok((chain, events))
    }

    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        let Some(user) = &filter.user_id else {
            return Err(Error::invalid("user_id", "vector search needs a user_id"));
        };
        let idx = self.catch_up(tenant.as_str(), user.as_str()).await?;
        let now = ts(OffsetDateTime::now_utc());
        let guard = idx.lock().unwrap_or_else(|e| e.into_inner());
        Ok(guard.search(filter, vector, k, now))
    }

    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        let now = ts(OffsetDateTime::now_utc());
        // Column names are unqualified in push_filter; they are unambiguous (fts has only `content`).
        let narrow = |q: &mut QueryBuilder<Sqlite>| push_filter(q, filter, now);
        self.fts_search("memories", tenant, query, k, narrow, MemoryId).await
    }

    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        common::memories::touch(self, tenant, ids, at).await
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        common::memories::find_profile(self, tenant, user, pool, key).await
    }

    async fn record_recall(
        &self,
        tenant: &TenantId,
        turn_id: &str,
        ids: &[MemoryId],
    ) -> Result<()> {
        common::memories::record_recall(self, tenant, turn_id, ids).await
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        common::memories::recalled(self, tenant, turn_id).await
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        common::memories::get_context_session(self, tenant, session_id, user, pool).await
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        common::memories::put_context_session(self, tenant, s).await
    }
}
