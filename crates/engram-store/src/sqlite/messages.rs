//! SQLite: the [`engram_core::store::MessageStore`] part of the store. The transcript: appending and reading messages, their ratings, keyword and vector search, their vectors, and the conversation state extraction keeps (cursor, rolling summary, the extraction batch).
//!
//! What both backends do alike is written once in [`crate::common::messages`]; this file holds
//! the rest and calls it.

use super::*;
use crate::common::messages::Conversation;

#[async_trait]
impl MessageStore for SqliteStore {
    async fn append_messages(
        &self,
        tenant: &TenantId,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>> {
        common::messages::append(self, tenant, messages).await
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        Conversation::new(self, tenant, conversation).list(after_seq, limit).await
    }

    async fn conversation_owner(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<(UserId, Option<AgentId>)>> {
        Conversation::new(self, tenant, conversation).owner().await
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Option<Message>> {
        common::messages::get(self, tenant, id).await
    }

    async fn get_messages(&self, tenant: &TenantId, ids: &[MessageId]) -> Result<Vec<Message>> {
        common::messages::get_many(self, tenant, ids).await
    }

    async fn rate_message(&self, tenant: &TenantId, id: MessageId, delta: i64) -> Result<i64> {
        common::messages::rate(self, tenant, id, delta).await
    }

    async fn text_search_messages(
        &self,
        tenant: &TenantId,
        user: &UserId,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let narrow = |q: &mut QueryBuilder<Sqlite>| {
            q.push(" AND m.user_id = ").push_bind(user.as_str().to_string());
        };
        self.fts_search("messages", tenant, query, k, narrow, MessageId).await
    }

    async fn messages_needing_vectors(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<(MessageId, i64)>> {
        Conversation::new(self, tenant, conversation).needing_vectors(model_id, limit).await
    }

    async fn conversations_needing_message_vectors(
        &self,
        tenant: &TenantId,
        model_id: &str,
        limit: usize,
    ) -> Result<Vec<ConversationId>> {
        common::messages::conversations_needing_vectors(self, tenant, model_id, limit).await
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
        Conversation::new(self, tenant, conversation).messages().await
    }

    async fn extraction_cursor(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<Option<String>> {
        Conversation::new(self, tenant, conversation).extraction_cursor().await
    }

    async fn rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
    ) -> Result<(Option<String>, i64)> {
        Conversation::new(self, tenant, conversation).rolling_summary().await
    }

    async fn set_rolling_summary(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        summary: &str,
        user_turns: i64,
    ) -> Result<()> {
        Conversation::new(self, tenant, conversation).set_rolling_summary(summary, user_turns).await
    }

    async fn apply_extraction(
        &self,
        tenant: &TenantId,
        conversation: &ConversationId,
        user: &UserId,
        batch: ExtractionBatch,
    ) -> Result<()> {
        common::memories::apply_extraction(self, tenant, conversation, user, batch).await
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
