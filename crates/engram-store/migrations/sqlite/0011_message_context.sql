-- Each message is keyword-indexed with its context (issue 13): a third column, `context`,
-- holds the words of the two messages before it in its conversation (each cut to its last
-- 800 characters, tool name included), so that a short answer ("Yes, last Saturday") is
-- found by the words of the question it answers. Search weighs the column 0.25 in bm25()
-- (BM25F: one document, fields weighted; `text::CONTEXT_WEIGHT`), reads document
-- frequencies for its drop rule from the message's own columns only (the vocabulary is per
-- column now), and scores coverage on the message's own words, so a row found only through
-- its context has no lexical support. Measured on LoCoMo in benches/README.md ("the keyword
-- index with each message's context").
--
-- The index is contentless (`content = ''`): the context is nowhere else to read back from,
-- and `contentless_delete` lets a row be deleted by rowid. The triggers keep the invariant
-- that every message's row holds its own words and those of the two messages before it:
-- an insert or a content change re-indexes the message and the two after it (in an
-- in-order append none exist yet, so it costs one index probe).
DROP TRIGGER IF EXISTS messages_fts_ai;
DROP TRIGGER IF EXISTS messages_fts_ad;
DROP TRIGGER IF EXISTS messages_fts_au;
DROP TABLE IF EXISTS messages_fts_vocab;
DROP TABLE IF EXISTS messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content, tool_name, context, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab (messages_fts, 'col');
-- What the index holds of each message: its own columns and its context.
CREATE VIEW messages_fts_rows AS
SELECT m.rowid AS message_rowid, m.tenant_id, m.conversation_id, m.seq, m.content,
    coalesce(m.tool_name, '') AS tool_name,
    coalesce((SELECT group_concat(substr(p.content || ' ' || coalesce(p.tool_name, ''), -800), char(10))
        FROM (SELECT content, tool_name FROM messages
            WHERE tenant_id = m.tenant_id AND conversation_id = m.conversation_id AND seq < m.seq
            ORDER BY seq DESC LIMIT 2) p), '') AS context
FROM messages m;
INSERT INTO messages_fts (rowid, content, tool_name, context)
SELECT message_rowid, content, tool_name, context FROM messages_fts_rows;
-- Insert and content change alike: the message and the two after it, re-indexed (deleting
-- a row the index does not hold yet is a no-op).
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid IN (SELECT rowid FROM messages
        WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
        ORDER BY seq LIMIT 3);
    INSERT INTO messages_fts (rowid, content, tool_name, context)
    SELECT message_rowid, content, tool_name, context FROM messages_fts_rows
    WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
    ORDER BY seq LIMIT 3;
END;
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, tool_name ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid IN (SELECT rowid FROM messages
        WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
        ORDER BY seq LIMIT 3);
    INSERT INTO messages_fts (rowid, content, tool_name, context)
    SELECT message_rowid, content, tool_name, context FROM messages_fts_rows
    WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
    ORDER BY seq LIMIT 3;
END;
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.rowid;
END;
