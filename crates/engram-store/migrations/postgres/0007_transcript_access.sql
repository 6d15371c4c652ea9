-- Access reinforcement on the transcript (issue 13, SPEC §3): messages and summaries count
-- how often a search returned them and when it last did, like memories, so the temporal
-- decay e^(-0.05 days) (1 + 0.02 access_count) reads from the last access.
ALTER TABLE messages ADD COLUMN access_count bigint NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN last_accessed_at timestamptz;
ALTER TABLE summaries ADD COLUMN access_count bigint NOT NULL DEFAULT 0;
ALTER TABLE summaries ADD COLUMN last_accessed_at timestamptz;
