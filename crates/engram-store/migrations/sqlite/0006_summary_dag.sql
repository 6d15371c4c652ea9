-- The summary DAG (issue 13). Compaction summarizes a conversation's oldest messages into
-- leaves, leaves into branches, branches into roots; `summarized_seq` is the last message a
-- leaf covers, moved in the leaf's own transaction only if it still has the value the
-- compactor read (so a job killed and re-run never writes the same leaf twice).
ALTER TABLE conversations ADD COLUMN summarized_seq INTEGER NOT NULL DEFAULT 0;

CREATE INDEX summaries_conversation ON summaries (tenant_id, conversation_id, depth);
CREATE INDEX summaries_parent ON summaries (tenant_id, parent_id);
CREATE INDEX summary_sources_source ON summary_sources (tenant_id, source_id);

-- Summaries are searched by keyword like messages (same tokenizer).
CREATE VIRTUAL TABLE summaries_fts USING fts5 (
    content, content = 'summaries', content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE summaries_fts_vocab USING fts5vocab (summaries_fts, 'row');
CREATE TRIGGER summaries_fts_ai AFTER INSERT ON summaries BEGIN
    INSERT INTO summaries_fts (rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER summaries_fts_ad AFTER DELETE ON summaries BEGIN
    INSERT INTO summaries_fts (summaries_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;
CREATE TRIGGER summaries_fts_au AFTER UPDATE OF content ON summaries BEGIN
    INSERT INTO summaries_fts (summaries_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO summaries_fts (rowid, content) VALUES (new.rowid, new.content);
END;
INSERT INTO summaries_fts (rowid, content) SELECT rowid, content FROM summaries;
