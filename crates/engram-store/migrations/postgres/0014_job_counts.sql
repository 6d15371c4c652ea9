-- `/v1/stats` counts a tenant's jobs by status and kind (queue depth, failed jobs, the
-- compactions and extractions done). Finished jobs are kept (one `embed_messages` job per
-- append), and the counts read every job row of the tenant. This index answers them from
-- its entries (an index-only scan where the visibility map allows).
CREATE INDEX IF NOT EXISTS jobs_tenant_status ON jobs (tenant_id, status, kind);
