-- The messages still waiting for a vector, for the backlog that `/metrics` and `/v1/stats`
-- report (`Store::backlog`, `Store::stats`). Counting them scanned every message row of the
-- database on each scrape; this partial index holds only the rows without a vector
-- (usually none, or the lane's backlog), so the count reads only those. A vector write
-- adds nothing to it (the new row version is outside the predicate).
CREATE INDEX IF NOT EXISTS messages_unembedded ON messages (tenant_id) WHERE embedding IS NULL;
