//! SQLite: the [`engram_core::store::MemoryStore`] part of the store. Facts: insert, read, list, supersede, confirm, rate, purge, history, vector and keyword search, access counts, profile lookup; and the read side around them (recalls, context sessions).

use super::*;

#[async_trait]
impl MemoryStore for SqliteStore {
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
        let mut tx = self.begin().await?;
        let mut versions: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        for row in &rows {
            if row.memory.tenant_id != *tenant {
                return Err(Error::internal("memory of another tenant in insert batch"));
            }
            let user = row.memory.user_id.as_str();
            let v = match versions.get(user) {
                Some(v) => *v,
                None => {
                    let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), user).await?;
                    versions.insert(user.to_string(), v);
                    v
                }
            };
            Self::insert_row(&mut tx, row, v).await?;
        }
        tx.commit().await.map_err(db)
    }

    async fn get_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<Option<Memory>> {
        let sql = format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND id = ?");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(memory_from_row).transpose()
    }

    async fn get_memories(&self, tenant: &TenantId, ids: &[MemoryId]) -> Result<Vec<Memory>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let select = format!("SELECT {MEMORY_COLS} FROM memories");
        self.select_by_ids(&select, tenant, &ids, memory_from_row).await
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
        let mut memories = rows.iter().map(memory_from_row).collect::<Result<Vec<_>>>()?;
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
        rows.iter().map(memory_from_row).collect()
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
        let row = sqlx::query("UPDATE memories SET rating = rating + ? WHERE tenant_id = ? AND id = ? RETURNING user_id, rating")
            .bind(delta)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
            .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
        let user: String = row.get(0);
        let rating: i64 = row.get(1);
        Self::insert_event(&mut tx, tenant.as_str(), &user, &event).await?;
        tx.commit().await.map_err(db)?;
        Ok(rating)
    }

    async fn purge_memory(&self, tenant: &TenantId, id: MemoryId) -> Result<()> {
        // The same order as the PostgreSQL store: find the row's user, bump the user's
        // counter, then delete (the counter is the per-user write lock there).
        let mut tx = self.begin().await?;
        let user: String =
            sqlx::query("SELECT user_id FROM memories WHERE tenant_id = ? AND id = ?")
                .bind(tenant.as_str())
                .bind(id.to_string())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?
                .ok_or_else(|| Error::not_found(format!("memory {id}")))?
                .get(0);
        let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), &user).await?;
        sqlx::query("DELETE FROM memories WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        sqlx::query("DELETE FROM memory_events WHERE tenant_id = ? AND memory_id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        // Successors and predecessors keep their rows; links to the purged id are cleared.
        sqlx::query(
            "UPDATE memories SET superseded_by = NULL WHERE tenant_id = ? AND superseded_by = ?",
        )
        .bind(tenant.as_str())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        sqlx::query("DELETE FROM recalls WHERE tenant_id = ? AND memory_id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        sqlx::query("INSERT INTO memory_tombstones (tenant_id, user_id, memory_id, version) VALUES (?, ?, ?, ?)")
            .bind(tenant.as_str())
            .bind(&user)
            .bind(id.to_string())
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
        let sql =
            format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND superseded_by = ?");
        for _ in 0..10_000 {
            let prev = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(tenant.as_str())
                .bind(cur.to_string())
                .fetch_optional(&self.read)
                .await
                .map_err(db)?;
            let Some(p) = prev else { break };
            let m = memory_from_row(&p)?;
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
                events.push(event_from_row(&r)?);
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
        let Some(fq) = self.informative_query(query, "memories_fts_vocab", "memories").await?
        else {
            return Ok(vec![]);
        };
        let now = ts(OffsetDateTime::now_utc());
        let mut q = QueryBuilder::<Sqlite>::new(
            "SELECT m.id AS id, bm25(memories_fts) AS score FROM memories_fts CROSS JOIN memories m ON m.rowid = memories_fts.rowid \
             WHERE memories_fts MATCH ",
        );
        q.push_bind(fq).push(" AND m.tenant_id = ").push_bind(tenant.as_str().to_string());
        // Column names are unqualified in push_filter; they are unambiguous (fts has only `content`).
        push_filter(&mut q, filter, now);
        q.push(" ORDER BY score LIMIT ").push_bind(k as i64);
        let rows = q.build().fetch_all(&self.read).await.map_err(db)?;
        rows.iter()
            .map(|r| Ok((MemoryId::parse(r.get("id"))?, -r.get::<f64, _>("score"))))
            .collect()
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
        let mut tx = self.begin().await?;
        let mut q = QueryBuilder::<Sqlite>::new(
            "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ",
        );
        q.push_bind(ts(at))
            .push(" WHERE tenant_id = ")
            .push_bind(tenant.as_str().to_string())
            .push(" AND id IN (");
        let mut s = q.separated(", ");
        for id in ids {
            s.push_bind(id.to_string());
        }
        s.push_unseparated(")");
        q.build().execute(&mut *tx).await.map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn find_profile(
        &self,
        tenant: &TenantId,
        user: &UserId,
        pool: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        let sql = format!(
            "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND user_id = ? AND kind = 'profile' AND key = ? \
             AND superseded_at IS NULL AND pool IS ? ORDER BY id DESC LIMIT 1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(user.as_str())
            .bind(key)
            .bind(pool)
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(memory_from_row).transpose()
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
        let mut tx = self.begin().await?;
        let mut q = QueryBuilder::<Sqlite>::new(
            "INSERT OR IGNORE INTO recalls (tenant_id, turn_id, memory_id, user_id, created_at) SELECT tenant_id, ",
        );
        q.push_bind(turn_id.to_string())
            .push(", id, user_id, ")
            .push_bind(ts(OffsetDateTime::now_utc()))
            .push(" FROM memories WHERE tenant_id = ")
            .push_bind(tenant.as_str().to_string())
            .push(" AND id IN (");
        let mut s = q.separated(", ");
        for id in ids {
            s.push_bind(id.to_string());
        }
        s.push_unseparated(")");
        q.build().execute(&mut *tx).await.map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn recalled(&self, tenant: &TenantId, turn_id: &str) -> Result<Vec<MemoryId>> {
        let rows = sqlx::query("SELECT memory_id FROM recalls WHERE tenant_id = ? AND turn_id = ? ORDER BY created_at, memory_id")
            .bind(tenant.as_str())
            .bind(turn_id)
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        rows.iter().map(|r| MemoryId::parse(r.get(0))).collect()
    }

    async fn get_context_session(
        &self,
        tenant: &TenantId,
        session_id: &str,
        user: &UserId,
        pool: Option<&str>,
    ) -> Result<Option<ContextSession>> {
        let row = sqlx::query("SELECT * FROM context_sessions WHERE tenant_id = ? AND session_id = ? AND user_id = ? AND pool = ?")
            .bind(tenant.as_str())
            .bind(session_id)
            .bind(user.as_str())
            .bind(pool.unwrap_or(""))
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        let Some(r) = row else { return Ok(None) };
        let ids: Vec<String> =
            serde_json::from_str(r.get::<&str, _>("memory_ids")).unwrap_or_default();
        Ok(Some(ContextSession {
            session_id: r.get("session_id"),
            user_id: UserId::parse(r.get::<String, _>("user_id"))?,
            pool: Some(r.get::<String, _>("pool")).filter(|p| !p.is_empty()),
            text: r.get("text"),
            memory_ids: ids.iter().filter_map(|s| MemoryId::parse(s).ok()).collect(),
            created_at: from_ts(r.get("created_at")),
        }))
    }

    async fn put_context_session(&self, tenant: &TenantId, s: &ContextSession) -> Result<()> {
        let ids: Vec<String> = s.memory_ids.iter().map(ToString::to_string).collect();
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT OR REPLACE INTO context_sessions (tenant_id, session_id, user_id, pool, text, memory_ids, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(tenant.as_str())
        .bind(&s.session_id)
        .bind(s.user_id.as_str())
        .bind(s.pool.as_deref().unwrap_or(""))
        .bind(&s.text)
        .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        .bind(ts(s.created_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }
}
