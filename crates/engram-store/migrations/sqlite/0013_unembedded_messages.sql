-- The messages still waiting for a vector, for the backlog that `/metrics` and `/v1/stats`
-- report (`Store::backlog`, `Store::stats`). Counting them read every message row of the
-- store (every vector with it) on each scrape; this partial index holds only the rows
-- without a vector (usually none, or the lane's backlog), so the count reads only those.
CREATE INDEX IF NOT EXISTS messages_unembedded ON messages (tenant_id) WHERE embedding IS NULL;
