-- The in-process cache of transcript vectors (`sqlite::transcript_vectors`). Each message and
-- summary row carries `vector_seq`: a per-user counter that a trigger advances whenever the
-- row is inserted with a vector or its vector or model is written (embedded, re-embedded,
-- cleared). Before a search the cache reads only the user's rows whose `vector_seq` is past
-- the one it has applied, so a vector written by any process is seen by the next search
-- without reading every vector again. Rows written before this version keep NULL: a cache
-- reads them when it first loads the user.
ALTER TABLE messages ADD COLUMN vector_seq INTEGER;
CREATE INDEX messages_vector_seq ON messages (tenant_id, user_id, vector_seq);
CREATE TRIGGER messages_vector_seq_ai AFTER INSERT ON messages WHEN new.embedding IS NOT NULL BEGIN
    UPDATE messages SET vector_seq = (SELECT coalesce(max(vector_seq), 0) + 1 FROM messages
        WHERE tenant_id = new.tenant_id AND user_id = new.user_id)
    WHERE rowid = new.rowid;
END;
CREATE TRIGGER messages_vector_seq_au AFTER UPDATE OF embedding, embedding_model ON messages BEGIN
    UPDATE messages SET vector_seq = (SELECT coalesce(max(vector_seq), 0) + 1 FROM messages
        WHERE tenant_id = new.tenant_id AND user_id = new.user_id)
    WHERE rowid = new.rowid;
END;

ALTER TABLE summaries ADD COLUMN vector_seq INTEGER;
CREATE INDEX summaries_vector_seq ON summaries (tenant_id, user_id, vector_seq);
CREATE TRIGGER summaries_vector_seq_ai AFTER INSERT ON summaries WHEN new.embedding IS NOT NULL BEGIN
    UPDATE summaries SET vector_seq = (SELECT coalesce(max(vector_seq), 0) + 1 FROM summaries
        WHERE tenant_id = new.tenant_id AND user_id = new.user_id)
    WHERE rowid = new.rowid;
END;
CREATE TRIGGER summaries_vector_seq_au AFTER UPDATE OF embedding, embedding_model ON summaries BEGIN
    UPDATE summaries SET vector_seq = (SELECT coalesce(max(vector_seq), 0) + 1 FROM summaries
        WHERE tenant_id = new.tenant_id AND user_id = new.user_id)
    WHERE rowid = new.rowid;
END;
