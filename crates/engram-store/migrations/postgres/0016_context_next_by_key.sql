-- Migration 10's trigger after a message insert brings the context of the two messages after
-- it up to date, with one UPDATE joining them to `messages`. PL/pgSQL caches that statement's
-- plan; planned while the table was small (a new database, statistics of a few rows) the
-- cached plan walked every message of the tenant by the primary key and ran the two-row
-- subquery once for each, and once an INSERT of several rows finds rows after each, that
-- walk did the subquery's work for every one of them: in the conformance suite (4,200
-- messages appended 64 rows a statement) one statement took 2-5 s (`auto_explain`: 896
-- outer rows × 2 inner per trigger call). Which plan a connection caches depends on the
-- statistics it saw (`engram migrate` of a 10,000-message conversation, 1,000 rows a
-- statement, took 4.2 s with the old function). The same work by key, one statement per
-- row after it, has no join for a plan to get wrong: an index probe of the conversation's
-- numbers, then at most two updates by primary key, each only when the context changed.
CREATE OR REPLACE FUNCTION engram_message_context_next() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    nxt record;
    ctx tsvector;
BEGIN
    FOR nxt IN
        SELECT x.id, x.seq FROM messages x
        WHERE x.tenant_id = NEW.tenant_id AND x.conversation_id = NEW.conversation_id
            AND x.seq > NEW.seq
        ORDER BY x.seq LIMIT 2
    LOOP
        ctx := engram_message_context(NEW.tenant_id, NEW.conversation_id, nxt.seq);
        UPDATE messages SET ctx_fts = ctx
        WHERE tenant_id = NEW.tenant_id AND id = nxt.id AND ctx_fts IS DISTINCT FROM ctx;
    END LOOP;
    RETURN NULL;
END
$$;
