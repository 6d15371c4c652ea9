-- `/v1/stats` counts a tenant's jobs by status and kind (queue depth, failed jobs, the
-- compactions and extractions done). Finished jobs are kept (one `embed_messages` job per
-- append), and the counts read every job row of the tenant through `jobs_user`: ~4 s at
-- a million jobs. This index answers them from its entries alone.
CREATE INDEX IF NOT EXISTS jobs_tenant_status ON jobs (tenant_id, status, kind);
