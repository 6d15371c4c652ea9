-- The in-process cache of transcript vectors (`common::transcript_vectors`; PostgreSQL's side
-- in `postgres::transcript_vectors`). Each message and summary row carries `vector_xid`: the
-- id of the transaction that last inserted it with a vector or wrote its vector or model
-- (embedded, re-embedded, cleared). A cache remembers the oldest transaction still running
-- when it last read a user (`pg_snapshot_xmin`); every row written by an older transaction
-- was visible to that read, so the next search reads only the user's rows with a
-- `vector_xid` at or past it (an indexed read, usually a handful of rows). Unlike a counter,
-- a transaction id needs no lock to be ordered with the commits of other writers, and it
-- never restarts. Rows written before this version keep NULL: a cache reads them when it
-- first loads the user.
ALTER TABLE messages ADD COLUMN vector_xid xid8;
ALTER TABLE summaries ADD COLUMN vector_xid xid8;
CREATE INDEX messages_vector_xid ON messages (tenant_id, user_id, vector_xid);
CREATE INDEX summaries_vector_xid ON summaries (tenant_id, user_id, vector_xid);

CREATE FUNCTION engram_vector_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.vector_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

-- The background lane's statement stamps the rows itself (`vector_xid = pg_current_xact_id()`,
-- one expression, no trigger call per row: the call measurably slowed the lane); every other
-- write of a vector gets its stamp from these triggers.
CREATE TRIGGER messages_vector_xid_insert BEFORE INSERT ON messages
    FOR EACH ROW WHEN (NEW.embedding IS NOT NULL AND NEW.vector_xid IS NULL)
    EXECUTE FUNCTION engram_vector_xid();
CREATE TRIGGER messages_vector_xid_update BEFORE UPDATE OF embedding, embedding_model ON messages
    FOR EACH ROW WHEN (NEW.vector_xid IS NOT DISTINCT FROM OLD.vector_xid)
    EXECUTE FUNCTION engram_vector_xid();
CREATE TRIGGER summaries_vector_xid_insert BEFORE INSERT ON summaries
    FOR EACH ROW WHEN (NEW.embedding IS NOT NULL AND NEW.vector_xid IS NULL)
    EXECUTE FUNCTION engram_vector_xid();
CREATE TRIGGER summaries_vector_xid_update BEFORE UPDATE OF embedding, embedding_model ON summaries
    FOR EACH ROW WHEN (NEW.vector_xid IS NOT DISTINCT FROM OLD.vector_xid)
    EXECUTE FUNCTION engram_vector_xid();
