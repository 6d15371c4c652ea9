//! PostgreSQL: the [`engram_core::store::MemoryStore`] part of the store. Facts: insert, read, list, supersede, confirm, rate, purge, history, vector and keyword search, access counts, profile lookup; and the read side around them (recalls, context sessions).

use super::*;

#[async_trait]
impl MemoryStore for PgStore {
    async fn insert_memories(&self, tenant: &TenantId, rows: Vec<NewMemory>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if let Some(dims) = rows.iter().find_map(|r| r.vector.as_ref().map(Vec::len))
            && let Some((_, d)) = self.embedding_space().await?
            && rows.iter().any(|r| r.vector.as_ref().is_some_and(|v| v.len() != d))
        {
            return Err(Error::Unprocessable(format!(
                "vector of {dims} dimensions in a store of {d}"
            )));
        }
        if rows.iter().any(|r| r.memory.tenant_id != *tenant) {
            return Err(Error::internal("memory of another tenant in insert batch"));
        }
        let mut tx = self.begin().await?;
        let users = rows.iter().map(|r| r.memory.user_id.as_str().to_string()).collect();
        let versions = Self::bump_all(&mut tx, tenant.as_str(), users).await?;
        // One statement per table for the whole batch (one round trip per row and event
        // made a 1,000-row batch ~2,000 statements).
        for chunk in rows.chunks(INSERT_CHUNK) {
            Self::insert_rows(&mut tx, chunk, &versions).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        let sql = format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::memory).transpose()
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        let sql =
            format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND id = ANY($2)");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(&ids)
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.iter().map(rows::memory).collect()
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
        let mut tx = self.begin().await?;
        Self::supersede_tx(&mut tx, tenant, old, new.as_ref(), &event).await?;
        tx.commit().await.map_err(db)
    }

    async fn confirm_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        event: MemoryEvent,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        Self::confirm_tx(&mut tx, tenant, id, &event).await?;
        tx.commit().await.map_err(db)
    }

    async fn rate_memory(
        &self,
        tenant: &TenantId,
        id: MemoryId,
        delta: i64,
        event: MemoryEvent,
    ) -> Result<i64> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(
            "UPDATE memories SET rating = rating + $1 WHERE tenant_id = $2 AND id = $3 RETURNING user_id, rating",
        )
        .bind(delta)
        .bind(tenant.as_str())
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?
        .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        let user: String = col(&row, "user_id")?;
        let rating: i64 = col(&row, "rating")?;
        Self::insert_event(&mut tx, tenant.as_str(), &user, &event).await?;
        tx.commit().await.map_err(db)?;
        Ok(rating)
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        let mut tx = self.begin().await?;
        let user = Self::memory_user(&mut tx, tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        // Bump the user's counter first: it is the per-user write lock (the SQLite store
        // keeps the same order).
        let v = crate::versions::bump_postgres(&mut tx, tenant.as_str(), &user).await?;
        let n = sqlx::query("DELETE FROM memories WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(db)?
            .rows_affected();
        if n == 0 {
            return Err(Error::not_found(format!("memory {id}")));
        }
        for sql in [
            "DELETE FROM memory_events WHERE tenant_id = $1 AND memory_id = $2",
            // Successors and predecessors keep their rows; links to the purged id are cleared.
            "UPDATE memories SET superseded_by = NULL WHERE tenant_id = $1 AND superseded_by = $2",
            "DELETE FROM recalls WHERE tenant_id = $1 AND memory_id = $2",
        ] {
            sqlx::query(sql)
                .bind(tenant.as_str())
                .bind(id.0)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
        }
        sqlx::query(
            "INSERT INTO memory_tombstones (tenant_id, user_id, memory_id, version) VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant.as_str())
        .bind(&user)
        .bind(id.0)
        .bind(v)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn history(
        &self,
        tenant: &TenantId,
        id: MemoryId,
    ) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
        let Some(start) = self.get_memory(tenant, id).await? else {
            return Err(Error::not_found(format!("memory {id}")));
        };
        // Walk back through predecessors, then forward through successors.
        let mut chain = vec![start.clone()];
        let mut cur = start.id;
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND superseded_by = $2 LIMIT 1"
        );
        for _ in 0..10_000 {
            let prev = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(tenant.as_str())
                .bind(cur.0)
                .fetch_optional(&self.pool)
                .await
                .map_err(db)?;
            let Some(p) = prev else { break };
            let m = rows::memory(&p)?;
            cur = m.id;
            chain.insert(0, m);
        }
        let mut next = start.superseded_by;
        while let Some(n) = next {
            let Some(m) = self.get_memory(tenant, n).await? else { break };
            next = m.superseded_by;
            chain.push(m);
            if chain.len() > 10_000 {
                break;
            }
        }
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
        let hits =
            self.text_search_impl(search::TextScope::Memories(tenant, filter), query, k).await?;
        Ok(hits.into_iter().map(|(id, s)| (MemoryId(id), s)).collect())
    }

    async fn touch_memories(
        &self,
        tenant: &TenantId,
        ids: &[MemoryId],
        at: OffsetDateTime,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        // Sorted and deduplicated: the primary-key scan then locks rows in one order.
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect::<BTreeSet<_>>().into_iter().collect();
        sqlx::query(
            "UPDATE memories SET access_count = access_count + 1, last_accessed_at = $1 \
             WHERE tenant_id = $2 AND id = ANY($3)",
        )
        .bind(at)
        .bind(tenant.as_str())
        .bind(&ids)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = $1 AND user_id = $2 AND kind = 'profile' AND key = $3 \
             AND superseded_at IS NULL AND pool IS NOT DISTINCT FROM $4 ORDER BY id DESC LIMIT 1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .bind(key)
            .bind(pool)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        row.as_ref().map(rows::memory).transpose()
    }

    async fn record_recall(
        &self,
        tenant: &TenantId,
        turn_id: &str,
        ids: &[MemoryId],
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        sqlx::query(
            "INSERT INTO recalls (tenant_id, turn_id, memory_id, user_id, created_at) \
             SELECT tenant_id, $2, id, user_id, now() FROM memories WHERE tenant_id = $1 AND id = ANY($3) \
             ON CONFLICT DO NOTHING",
        )
        .bind(tenant.as_str())
        .bind(turn_id)
        .bind(&ids)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        let rows = sqlx::query(
            "SELECT memory_id FROM recalls WHERE tenant_id = $1 AND turn_id = $2 ORDER BY created_at, memory_id",
        )
        .bind(tenant.as_str())
        .bind(turn_id)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| Ok(MemoryId(col(r, "memory_id")?))).collect()
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        let row = sqlx::query(
            "SELECT * FROM context_sessions WHERE tenant_id = $1 AND session_id = $2 AND user_id = $3 AND pool = $4",
        )
        .bind(tenant.as_str())
        .bind(session_id)
        .bind(user.as_str())
        .bind(pool.unwrap_or(""))
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        let Some(r) = row else { return Ok(None) };
        let ids: Vec<Uuid> = col(&r, "memory_ids")?;
        Ok(Some(ContextSession {
            session_id: col(&r, "session_id")?,
            user_id: UserId::parse(col::<String>(&r, "user_id")?)?,
            pool: Some(col::<String>(&r, "pool")?).filter(|p| !p.is_empty()),
            text: col(&r, "text")?,
            memory_ids: ids.into_iter().map(MemoryId).collect(),
            created_at: col(&r, "created_at")?,
        }))
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        let ids: Vec<Uuid> = s.memory_ids.iter().map(|i| i.0).collect();
        sqlx::query(
            "INSERT INTO context_sessions (tenant_id, session_id, user_id, pool, text, memory_ids, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tenant_id, session_id, user_id, pool) DO UPDATE SET \
             text = excluded.text, memory_ids = excluded.memory_ids, created_at = excluded.created_at",
        )
        .bind(tenant.as_str())
        .bind(&s.session_id)
        .bind(s.user_id.as_str())
        .bind(s.pool.as_deref().unwrap_or(""))
        .bind(&s.text)
        .bind(&ids)
        .bind(s.created_at)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }
}
