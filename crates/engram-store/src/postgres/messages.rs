//! PostgreSQL: the [`engram_core::store::MessageStore`] part of the store. The transcript: appending and reading messages, their ratings, keyword and vector search, their vectors, and the conversation state extraction keeps (cursor, rolling summary, the extraction batch).
//!
//! What both backends do alike is written once in [`crate::common::messages`]; this file holds
//! the rest and calls it.

use super::*;
use crate::common::messages::Conversation;

#[async_trait]
impl MessageStore for PgStore {
    async fn append_messages(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>> {
        common::messages::append(&self.pool, tenant, messages).await
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        Conversation::new(&self.pool, tenant, conversation).list(after_seq, limit).await
    }

    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        Conversation::new(&self.pool, tenant, conversation).owner().await
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        common::messages::get(&self.pool, tenant, id).await
    }

    async fn get_messages(&self, tenant: &TenantId, ids: &[MessageId]) -> Result<Vec<Message>> {
        common::messages::get_many(&self.pool, tenant, ids).await
    }

    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        common::messages::rate(&self.pool, tenant, id, delta).await
    }

    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let scope = search::TextScope::Messages(tenant, user);
        self.text_search_impl(scope, query, k, MessageId).await
    }

    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        Conversation::new(&self.pool, tenant, conversation).needing_vectors(model_id, limit).await
    }

    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        common::messages::conversations_needing_vectors(&self.pool, tenant, model_id, limit).await
    }

    async fn set_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        rows: Vec<(MessageId, Vec<f32>)>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.0.0).collect();
        let vectors: Vec<pgvector::Vector> =
            rows.into_iter().map(|r| pgvector::Vector::from(r.1)).collect();
        sqlx::query(
            "UPDATE messages m SET embedding = v.embedding, embedding_model = $2 \
             FROM unnest($3::uuid[], $4::vector[]) AS v(id, embedding) \
             WHERE m.tenant_id = $1 AND m.id = v.id",
        )
        .bind(tenant.as_str())
        .bind(model_id)
        .bind(&ids)
        .bind(&vectors)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn vector_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        model_id: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(MessageId, f32)>> {
        // Exact: a user's messages are ranked in full (no index on this column), and only
        // vectors of the query's model and dimension are compared.
        let rows = sqlx::query(
            "SELECT id, -(embedding <#> $4) AS sim FROM messages \
             WHERE tenant_id = $1 AND user_id = $2 AND embedding_model = $3 \
               AND vector_dims(embedding) = $5 \
             ORDER BY embedding <#> $4, id LIMIT $6",
        )
        .bind(tenant.as_str())
        .bind(user.as_str())
        .bind(model_id)
        .bind(pgvector::Vector::from(query.to_vec()))
        .bind(query.len() as i32)
        .bind(k as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.iter().map(|r| Ok((MessageId(col(r, "id")?), col::<f64>(r, "sim")? as f32))).collect()
    }

    async fn conversation_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Vec<Message>> {
        Conversation::new(&self.pool, tenant, conversation).messages().await
    }

    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        Conversation::new(&self.pool, tenant, conversation).extraction_cursor().await
    }

    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        Conversation::new(&self.pool, tenant, conversation).rolling_summary().await
    }

    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        Conversation::new(&self.pool, tenant, conversation)
            .set_rolling_summary(summary, user_turns)
            .await
    }

    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        common::memories::apply_extraction(&self.pool, tenant, conversation, user, batch).await
    }

    async fn set_message_content(
        &self,
        tenant: &TenantId,
        id: MessageId,
        content: &str,
    ) -> Result<bool> {
        let mut tx = self.begin().await?;
        let r = sqlx::query(
            "SELECT tool_name FROM messages WHERE tenant_id = $1 AND id = $2 AND content = '' FOR UPDATE",
        )
        .bind(tenant.as_str())
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let Some(r) = r else { return Ok(false) };
        let tool: Option<String> = col(&r, "tool_name")?;
        sqlx::query(
            "UPDATE messages SET content = $1, fts_text = $2 WHERE tenant_id = $3 AND id = $4",
        )
        .bind(content)
        .bind(index_text(&[content, tool.as_deref().unwrap_or("")]))
        .bind(tenant.as_str())
        .bind(id.0)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(true)
    }
}
