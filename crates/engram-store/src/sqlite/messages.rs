//! SQLite: the [`engram_core::store::MessageStore`] part of the store. The transcript: appending and reading messages, their ratings, keyword and vector search, their vectors, and the conversation state extraction keeps (cursor, rolling summary, the extraction batch).

use super::*;

#[async_trait]
impl MessageStore for SqliteStore {
    async fn append_messages(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>> {
        let Some(first) = messages.first() else { return Ok(vec![]) };
        let conv = first.conversation_id.clone();
        let user = first.user_id.clone();
        let agent = first.agent_id.clone();
        let now = ts(OffsetDateTime::now_utc());
        let mut tx = self.begin().await?;
        let existing = sqlx::query(
            "SELECT user_id, agent_id, last_seq FROM conversations WHERE tenant_id = ? AND id = ?",
        )
        .bind(tenant.as_str())
        .bind(conv.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let mut seq = match existing {
            Some(r) => {
                if r.get::<&str, _>("user_id") != user.as_str() {
                    return Err(Error::Conflict(format!(
                        "conversation '{conv}' belongs to another user"
                    )));
                }
                crate::check_conversation_agent(
                    &conv,
                    r.get::<Option<&str>, _>("agent_id"),
                    &messages,
                )?;
                r.get::<i64, _>("last_seq")
            }
            None => {
                sqlx::query(
                    "INSERT INTO conversations (tenant_id, id, user_id, agent_id, last_seq, created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?)",
                )
                .bind(tenant.as_str())
                .bind(conv.as_str())
                .bind(user.as_str())
                .bind(agent.as_ref().map(AgentId::as_str))
                .bind(now)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
                0
            }
        };
        let mut out = Vec::with_capacity(messages.len());
        for mut m in messages {
            seq += 1;
            m.seq = seq;
            sqlx::query(
                "INSERT INTO messages (id, tenant_id, conversation_id, user_id, agent_id, seq, role, content, tool_name, \
                 tool_args, tool_result, turn_id, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(m.id.to_string())
            .bind(tenant.as_str())
            .bind(conv.as_str())
            .bind(user.as_str())
            .bind(m.agent_id.as_ref().map(AgentId::as_str))
            .bind(seq)
            .bind(m.role.as_str())
            .bind(&m.content)
            .bind(m.tool_name.as_deref())
            .bind(m.tool_args.as_ref().map(ToString::to_string))
            .bind(m.tool_result.as_deref())
            .bind(m.turn_id.as_deref())
            .bind(m.metadata.to_string())
            .bind(ts(m.created_at))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            out.push(m);
        }
        sqlx::query(
            "UPDATE conversations SET last_seq = ?, updated_at = ? WHERE tenant_id = ? AND id = ?",
        )
        .bind(seq)
        .bind(now)
        .bind(tenant.as_str())
        .bind(conv.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(out)
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        let rows = sqlx::query("SELECT * FROM messages WHERE tenant_id = ? AND conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?")
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .bind(after_seq)
            .bind(limit as i64)
            .fetch_all(&self.read)
            .await
            .map_err(db)?;
        rows.iter().map(message_from_row).collect()
    }

    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        let row = sqlx::query(
            "SELECT user_id, agent_id FROM conversations WHERE tenant_id = ? AND id = ?",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.read)
        .await
        .map_err(db)?;
        row.map(|r| {
            Ok((
                UserId::parse(r.get::<String, _>(0))?,
                r.get::<Option<String>, _>(1).map(AgentId::parse).transpose()?,
            ))
        })
        .transpose()
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        let row = sqlx::query("SELECT * FROM messages WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?;
        row.as_ref().map(message_from_row).transpose()
    }

    async fn get_messages(&self, tenant: &TenantId, ids: &[MessageId]) -> Result<Vec<Message>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        self.select_by_ids("SELECT * FROM messages", tenant, &ids, message_from_row).await
    }

    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        let mut tx = self.begin().await?;
        let r: i64 = sqlx::query("UPDATE messages SET rating = rating + ? WHERE tenant_id = ? AND id = ? RETURNING rating")
            .bind(delta)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?
            .ok_or_else(|| Error::not_found(format!("message {id}")))?
            .get(0);
        tx.commit().await.map_err(db)?;
        Ok(r)
    }

    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let Some(fq) = self.informative_query(query, "messages_fts_vocab", "messages").await?
        else {
            return Ok(vec![]);
        };
        let rows = sqlx::query(
            "SELECT m.id AS id, bm25(messages_fts) AS score FROM messages_fts CROSS JOIN messages m ON m.rowid = messages_fts.rowid \
             WHERE messages_fts MATCH ? AND m.tenant_id = ? AND m.user_id = ? ORDER BY score LIMIT ?",
        )
        .bind(fq)
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(k as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| Ok((MessageId::parse(r.get("id"))?, -r.get::<f64, _>("score"))))
            .collect()
    }

    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        let rows = sqlx::query(
            "SELECT id, seq FROM messages WHERE tenant_id = ? AND conversation_id = ? \
             AND content != '' AND (embedding IS NULL OR embedding_model IS NOT ?) ORDER BY seq LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter()
            .map(|r| Ok((MessageId::parse(r.get::<&str, _>("id"))?, r.get::<i64, _>("seq"))))
            .collect()
    }

    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        let rows = sqlx::query(
            "SELECT DISTINCT conversation_id FROM messages WHERE tenant_id = ? AND content != '' \
             AND (embedding IS NULL OR embedding_model IS NOT ?) ORDER BY 1 LIMIT ?",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(|r| ConversationId::parse(r.get::<String, _>(0))).collect()
    }

    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        for (id, v) in rows {
            sqlx::query(
                "UPDATE messages SET embedding = ?, embedding_model = ? WHERE tenant_id = ? AND id = ?",
            )
            .bind(vec_to_blob(&v))
            .bind(model_id)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        }
        tx.commit().await.map_err(db)
    }

    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>> {
        let rows = sqlx::query(
            "SELECT id, embedding FROM messages WHERE tenant_id = ? AND user_id = ? \
             AND embedding IS NOT NULL AND embedding_model = ?",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(model_id)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        let mut scored = Vec::with_capacity(rows.len());
        for r in &rows {
            let blob: &[u8] = r.get("embedding");
            if blob.len() != query.len() * 4 {
                continue; // another space: never comparable with this query
            }
            let sim = vectors::dot(&blob_to_vec(blob), query);
            scored.push((sim, r.get::<String, _>("id")));
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        scored.truncate(k);
        scored.into_iter().map(|(s, id)| Ok((MessageId::parse(&id)?, s))).collect()
    }

    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>> {
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE tenant_id = ? AND conversation_id = ? ORDER BY seq",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(message_from_row).collect()
    }

    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        Ok(sqlx::query(
            "SELECT last_hash FROM extraction_cursors WHERE tenant_id = ? AND conversation_id = ?",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .fetch_optional(&self.read)
        .await
        .map_err(db)?
        .map(|r| r.get(0)))
    }

    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        Ok(sqlx::query("SELECT rolling_summary, summary_user_turns FROM conversations WHERE tenant_id = ? AND id = ?")
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .fetch_optional(&self.read)
            .await
            .map_err(db)?
            .map_or((None, 0), |r| (r.get(0), r.get(1))))
    }

    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE conversations SET rolling_summary = ?, summary_user_turns = ? WHERE tenant_id = ? AND id = ?")
            .bind(summary)
            .bind(user_turns)
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        if !batch.adds.is_empty() {
            let v = crate::versions::bump_sqlite(&mut tx, tenant.as_str(), user.as_str()).await?;
            for row in &batch.adds {
                if row.memory.tenant_id != *tenant || row.memory.user_id != *user {
                    return Err(Error::internal("extracted memory of another tenant or user"));
                }
                Self::insert_row(&mut tx, row, v).await?;
            }
        }
        for (old, new, event) in &batch.supersedes {
            Self::supersede_tx(&mut tx, tenant, *old, new.as_ref(), event).await?;
        }
        for (id, event) in &batch.confirms {
            Self::confirm_tx(&mut tx, tenant, *id, event).await?;
        }
        sqlx::query(
            "INSERT INTO extraction_cursors (tenant_id, conversation_id, user_id, last_hash, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET last_hash = excluded.last_hash, updated_at = excluded.updated_at",
        )
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(user.as_str())
        .bind(&batch.cursor)
        .bind(ts(OffsetDateTime::now_utc()))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn set_message_content(
        &self,
        tenant: &TenantId,
        id: MessageId,
        content: &str,
    ) -> Result<bool> {
        let mut tx = self.begin().await?;
        let n = sqlx::query(
            "UPDATE messages SET content = ? WHERE tenant_id = ? AND id = ? AND content = ''",
        )
        .bind(content)
        .bind(tenant.as_str())
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
        tx.commit().await.map_err(db)?;
        Ok(n == 1)
    }
}
