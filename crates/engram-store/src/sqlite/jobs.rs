//! SQLite: the [`engram_core::store::JobStore`] part of the store. Durable background jobs: enqueue (deduplicated), claim with a lease, heartbeat, finish, fail or retry, list.
//!
//! What both backends do alike is written once in [`crate::common::jobs`]; this file holds
//! the rest and calls it.

use super::*;

#[async_trait]
impl JobStore for SqliteStore {
    async fn enqueue_job(&self, job: &Job) -> Result<bool> {
        common::jobs::enqueue(self, job).await
    }

    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = ?1, updated_at = ?2 \
             WHERE id = (SELECT j.id FROM jobs j \
               WHERE ((j.status = 'pending' AND j.run_after <= ?2) OR (j.status = 'running' AND j.lease_until <= ?2)) \
                 AND j.kind IN (SELECT value FROM json_each(?3)) \
                 AND (j.lock_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs r WHERE r.tenant_id = j.tenant_id \
                      AND r.lock_key = j.lock_key AND r.status = 'running' AND r.lease_until > ?2 AND r.id != j.id)) \
               ORDER BY j.run_after, j.id LIMIT 1) \
             RETURNING *",
        )
        .bind(ts(lease_until))
        .bind(ts(now))
        .bind(serde_json::json!(kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>()).to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.as_ref().map(common::rows::job).transpose()
    }

    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()> {
        common::jobs::heartbeat(self, id, lease_until).await
    }

    async fn complete_job(&self, id: &str) -> Result<()> {
        common::jobs::complete(self, id).await
    }

    async fn fail_job(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<OffsetDateTime>,
    ) -> Result<()> {
        common::jobs::fail(self, id, error, retry_at).await
    }

    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        common::jobs::list(self, tenant, status, limit).await
    }

    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()> {
        common::jobs::retry(self, tenant, id).await
    }
}
