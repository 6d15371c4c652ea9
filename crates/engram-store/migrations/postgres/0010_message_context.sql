-- Each message is keyword-indexed with its context (issue 13), as the SQLite store's
-- migration 11 does: `ctx_fts` holds the words of the two messages before it in its
-- conversation (the last 800 characters of each one's `fts_text`, tool name included), so
-- that a short answer ("Yes, last Saturday") is found by the words of the question it
-- answers. Search matches `fts` or `ctx_fts` and weighs a context occurrence
-- `text::CONTEXT_WEIGHT` (0.25) against 1 for the message's own (BM25F); document
-- frequencies, the drop of common terms and coverage read `fts` alone, so a row found only
-- through its context has no lexical support.
--
-- A plain column with a constant default (no table rewrite), filled by triggers on every
-- write path (the store's, `engram migrate`'s, a restore, an operator's SQL): before an
-- insert, from the rows before it (a VOLATILE function sees the rows an INSERT of several
-- has already written); after an insert or a change of `fts_text`, the two rows after it
-- are brought up to date when they differ (in an in-order append none exist yet). Messages
-- are deleted only with their user, so a delete leaves no neighbour to update.
ALTER TABLE messages ADD COLUMN ctx_fts tsvector NOT NULL DEFAULT ''::tsvector;

-- A message row with a 384-dimension vector was ~1,960 bytes; its context makes it ~2,200,
-- over the 2,032 at which PostgreSQL starts moving values out of line, and the first value
-- it moves is the vector (the largest, and `vector` is stored EXTERNAL): measured at 100k
-- messages, the exact vector scan then read 153 MB of TOAST and took 2× as long. Rows stay
-- whole up to 4,080 bytes instead (then values are compressed or moved out as before); the
-- backfill below rewrites the rows it fills under the new target.
ALTER TABLE messages SET (toast_tuple_target = 4080);

CREATE FUNCTION engram_message_context(tenant text, conv text, at_seq bigint) RETURNS tsvector
    LANGUAGE sql VOLATILE
    RETURN (SELECT to_tsvector('simple'::regconfig, coalesce(string_agg(right(p.fts_text, 800), ' '), ''))
        FROM (SELECT fts_text FROM messages
            WHERE tenant_id = tenant AND conversation_id = conv AND seq < at_seq
            ORDER BY seq DESC LIMIT 2) p);

CREATE FUNCTION engram_message_context_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.ctx_fts := engram_message_context(NEW.tenant_id, NEW.conversation_id, NEW.seq);
    RETURN NEW;
END
$$;

CREATE FUNCTION engram_message_context_next() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages m SET ctx_fts = c.ctx
    FROM (SELECT x.id, engram_message_context(x.tenant_id, x.conversation_id, x.seq) AS ctx
        FROM messages x
        WHERE x.tenant_id = NEW.tenant_id AND x.conversation_id = NEW.conversation_id
            AND x.seq > NEW.seq
        ORDER BY x.seq LIMIT 2) c
    WHERE m.tenant_id = NEW.tenant_id AND m.id = c.id AND m.ctx_fts IS DISTINCT FROM c.ctx;
    RETURN NULL;
END
$$;

-- Messages written before this version: the two before each, by window.
UPDATE messages m SET ctx_fts = to_tsvector('simple'::regconfig, x.ctx)
FROM (SELECT tenant_id, id,
        concat_ws(' ', right(lag(fts_text, 2) OVER w, 800), right(lag(fts_text, 1) OVER w, 800)) AS ctx
    FROM messages
    WINDOW w AS (PARTITION BY tenant_id, conversation_id ORDER BY seq)) x
WHERE m.tenant_id = x.tenant_id AND m.id = x.id AND x.ctx <> '';

CREATE TRIGGER messages_context BEFORE INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION engram_message_context_new();
CREATE TRIGGER messages_context_next AFTER INSERT OR UPDATE OF fts_text ON messages
    FOR EACH ROW EXECUTE FUNCTION engram_message_context_next();

-- Matched through the user's postings, like `fts` (migration 4).
CREATE INDEX messages_ctx_fts_scoped ON messages
    USING gin (engram_scoped_fts(tenant_id, user_id, ctx_fts));
