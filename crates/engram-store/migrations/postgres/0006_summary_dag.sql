-- The summary DAG (issue 13). Compaction summarizes a conversation's oldest messages into
-- leaves, leaves into branches, branches into roots; `summarized_seq` is the last message a
-- leaf covers, moved in the leaf's own transaction only if it still has the value the
-- compactor read (so a job killed and re-run never writes the same leaf twice).
ALTER TABLE conversations ADD COLUMN summarized_seq bigint NOT NULL DEFAULT 0;

-- Summary ids are UUIDs, like messages (nothing wrote the table before this migration).
ALTER TABLE summaries ALTER COLUMN id TYPE uuid USING id::uuid;
ALTER TABLE summaries ALTER COLUMN parent_id TYPE uuid USING parent_id::uuid;

CREATE INDEX summaries_conversation ON summaries (tenant_id, conversation_id, depth);
CREATE INDEX summaries_parent ON summaries (tenant_id, parent_id);

-- Summaries are searched by keyword like messages: the same folded `fts_text` written by the
-- store, the same per-user postings (migration 4).
ALTER TABLE summaries ADD COLUMN fts_text text NOT NULL DEFAULT '';
ALTER TABLE summaries ADD COLUMN fts tsvector
    GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, fts_text)) STORED;
CREATE INDEX summaries_fts_scoped ON summaries USING gin (engram_scoped_fts(tenant_id, user_id, fts));
