//! PostgreSQL: the [`engram_core::store::MemoryStore`] part of the store. Facts: insert, read, list, supersede, confirm, rate, purge, history, vector and keyword search, access counts, profile lookup; and the read side around them (recalls, context sessions).
//!
//! What both backends do alike is written once in [`crate::common::memories`]; this file holds
//! the rest and calls it.

use super::*;

#[async_trait]
impl MemoryStore for PgStore {
    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()> {
        let begun = common::memories::begin_insert(&self.pool, self, tenant, &rows).await?;
        let Some((mut tx, versions)) = begun else { return Ok(()) };
        // One statement per table for the whole batch (one round trip per row and event
        // made a 1,000-row batch ~2,000 statements).
        for chunk in rows.chunks(INSERT_CHUNK) {
            Self::insert_rows(&mut tx, chunk, &versions).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        common::memories::get(&self.pool, tenant, id).await
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        common::memories::get_many(&self.pool, tenant, ids).await
    }

    async fn list_memories(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        cursor: Option<MemoryId>,
        limit: usize,
    ) -> Result<MemoryPage> {
        let fetch = i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1;
        let mut memories =
            self.select_memories(tenant, " ORDER BY id DESC", filter, cursor, Some(fetch)).await?;
        let next_cursor = if memories.len() > limit {
            memories.truncate(limit);
            memories.last().map(|m| m.id)
        } else {
            None
        };
        Ok(MemoryPage { memories, next_cursor })
    }

    async fn all_active(&self, tenant: &TenantId, filter: &MemoryFilter) -> Result<Vec<Memory>> {
        let f = MemoryFilter { include_superseded: false, ..filter.clone() };
        self.select_memories(tenant, " ORDER BY observed_at, id", &f, None, None).await
    }

    async fn supersede(
        &self,
        tenant: &TenantId,
        old: MemoryId,
        new: Option<NewMemory>,
        event: MemoryEvent,
    ) -> Result<()> {
        common::memories::supersede(&self.pool, tenant, old, new.as_ref(), &event).await
    }

    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()> {
        common::memories::confirm(&self.pool, tenant, id, &event).await
    }

    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64> {
        common::memories::rate(&self.pool, tenant, id, delta, &event).await
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        common::memories::purge(&self.pool, tenant, id).await
    }

    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let chain = common::memories::chain(&self.pool, tenant, id).await?;
        let ids: Vec<Uuid> = chain.iter().map(|m| m.id.0).collect();
        let rows = sqlx::query(
            "SELECT * FROM memory_events WHERE tenant_id = $1 AND memory_id = ANY($2) ORDER BY at, id",
        )
        .bind(tenant.as_str())
        .bind(&ids)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        let events = rows.iter().map(rows::event).collect::<Result<Vec<_>>>()?;
        Ok((chain, events))
    }

    async fn vector_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        vector: &[f32],
        k: usize,
    ) -> Result<Vec<(MemoryId, f32)>> {
        self.vector_search_impl(tenant, filter, vector, k).await
    }

    async fn text_search(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        let scope = search::TextScope::Memories(tenant, filter);
        self.text_search_impl(scope, query, k, MemoryId).await
    }

    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        common::memories::touch(&self.pool, tenant, ids, at).await
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        common::memories::find_profile(&self.pool, tenant, user, pool, key).await
    }

    async fn record_recall(
        &self,
        tenant: &TenantId,
        turn_id: &str,
        ids: &[MemoryId],
    ) -> Result<()> {
        common::memories::record_recall(&self.pool, tenant, turn_id, ids).await
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        common::memories::recalled(&self.pool, tenant, turn_id).await
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        common::memories::get_context_session(&self.pool, tenant, session_id, user, pool).await
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        common::memories::put_context_session(&self.pool, tenant, s).await
    }
}
