-- engram PostgreSQL store, schema version 1 (PostgreSQL >= 15, pgvector >= 0.8).
-- Mirrors migrations/sqlite (versions 1-3) with native types: timestamptz (microseconds),
-- uuid, jsonb, uuid[], pgvector's `vector`. Every table leads with tenant_id, and so does
-- every index except those a global operation needs (see the comments marked GLOBAL) and
-- the GIN/HNSW indexes, which cannot have a text column first.
-- Applied migrations are never edited: add a new file instead.

-- Store-wide settings (the embedding space). GLOBAL: one row per key for the whole store.
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE api_keys (
    tenant_id   text NOT NULL,
    id          text NOT NULL,
    role        text NOT NULL CHECK (role IN ('admin', 'agent', 'user')),
    agent_id    text,
    user_id     text,
    prefix      text NOT NULL,
    secret_hash text NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    PRIMARY KEY (tenant_id, id)
);
-- GLOBAL: a request is authenticated by the hash alone (its tenant is what the key says),
-- and keys are revoked by id.
CREATE UNIQUE INDEX api_keys_secret ON api_keys (secret_hash);
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);

CREATE TABLE agents (
    tenant_id       text NOT NULL,
    id              text NOT NULL,
    memory_enabled  boolean NOT NULL,
    cluster_id      text,
    dedup_threshold double precision NOT NULL,
    settings        jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE memories (
    tenant_id              text NOT NULL,
    id                     uuid NOT NULL,
    user_id                text NOT NULL,
    agent_id               text,
    pool                   text,
    kind                   text NOT NULL,
    key                    text,
    category               text NOT NULL,
    importance             smallint NOT NULL CHECK (importance BETWEEN 1 AND 10),
    rating                 bigint NOT NULL DEFAULT 0,
    content                text NOT NULL,
    source_kind            text NOT NULL,
    source_conversation_id text,
    source_message_ids     uuid[] NOT NULL DEFAULT '{}',
    observed_at            timestamptz NOT NULL,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    last_accessed_at       timestamptz,
    access_count           bigint NOT NULL DEFAULT 0,
    mention_count          bigint NOT NULL DEFAULT 1,
    expires_at             timestamptz,
    superseded_at          timestamptz,
    superseded_by          uuid,
    metadata               jsonb NOT NULL DEFAULT '{}',
    -- Untyped: the dimension is chosen by the first vector (ensure_embedding_space), which
    -- also creates a partial HNSW index on (embedding::vector(N)) for that dimension.
    embedding              vector,
    embedding_model        text,
    -- The user's change counter when this row last changed (see user_versions).
    version                bigint NOT NULL,
    -- The content as the store tokenizes it (lowercased alphanumeric words, diacritics
    -- folded, made in Rust so that it does not depend on the database locale), and its
    -- tsvector with the language-neutral `simple` configuration.
    fts_text               text NOT NULL DEFAULT '',
    fts                    tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, fts_text)) STORED,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX memories_scope ON memories (tenant_id, user_id, superseded_at, id);
CREATE INDEX memories_version ON memories (tenant_id, user_id, version);
CREATE INDEX memories_profile ON memories (tenant_id, user_id, key) WHERE kind = 'profile';
CREATE INDEX memories_successor ON memories (tenant_id, superseded_by) WHERE superseded_by IS NOT NULL;
CREATE INDEX memories_fts ON memories USING gin (fts);

CREATE TABLE memory_events (
    tenant_id  text NOT NULL,
    id         bigint GENERATED ALWAYS AS IDENTITY,
    user_id    text NOT NULL,
    memory_id  uuid NOT NULL,
    event      text NOT NULL,
    related_id uuid,
    actor      text NOT NULL,
    detail     jsonb NOT NULL DEFAULT '{}',
    at         timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX memory_events_memory ON memory_events (tenant_id, memory_id);
CREATE INDEX memory_events_user ON memory_events (tenant_id, user_id);

-- Per-user change counter, bumped (and so row-locked) inside every write transaction of
-- the user's memories: writers of one user serialize on it across processes. A purge
-- leaves a tombstone so that caches can drop the row.
CREATE TABLE user_versions (
    tenant_id text NOT NULL,
    user_id   text NOT NULL,
    version   bigint NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);
CREATE TABLE memory_tombstones (
    tenant_id text NOT NULL,
    user_id   text NOT NULL,
    memory_id uuid NOT NULL,
    version   bigint NOT NULL
);
CREATE INDEX memory_tombstones_user ON memory_tombstones (tenant_id, user_id, version);

CREATE TABLE conversations (
    tenant_id          text NOT NULL,
    id                 text NOT NULL,
    user_id            text NOT NULL,
    agent_id           text,
    last_seq           bigint NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    rolling_summary    text,
    summary_user_turns bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX conversations_user ON conversations (tenant_id, user_id);

CREATE TABLE messages (
    tenant_id       text NOT NULL,
    id              uuid NOT NULL,
    conversation_id text NOT NULL,
    user_id         text NOT NULL,
    agent_id        text,
    seq             bigint NOT NULL,
    role            text NOT NULL,
    content         text NOT NULL,
    tool_name       text,
    tool_args       jsonb,
    tool_result     text,
    turn_id         text,
    metadata        jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    rating          bigint NOT NULL DEFAULT 0,
    embedding       vector,
    embedding_model text,
    -- content and tool name, tokenized like memories.fts_text.
    fts_text        text NOT NULL DEFAULT '',
    fts             tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, fts_text)) STORED,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, conversation_id, seq)
);
CREATE INDEX messages_user ON messages (tenant_id, user_id);
CREATE INDEX messages_turn ON messages (tenant_id, turn_id);
CREATE INDEX messages_fts ON messages USING gin (fts);

-- Summary DAG (leaf -> branch -> root) with links to sources; filled by the workers.
CREATE TABLE summaries (
    tenant_id       text NOT NULL,
    id              text NOT NULL,
    user_id         text NOT NULL,
    conversation_id text,
    parent_id       text,
    depth           bigint NOT NULL DEFAULT 0,
    kind            text NOT NULL DEFAULT 'leaf',
    content         text NOT NULL,
    message_count   bigint NOT NULL DEFAULT 0,
    earliest_at     timestamptz,
    latest_at       timestamptz,
    embedding       vector,
    embedding_model text,
    model           text,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX summaries_user ON summaries (tenant_id, user_id);
CREATE TABLE summary_sources (
    tenant_id  text NOT NULL,
    summary_id text NOT NULL,
    source_id  text NOT NULL,
    ordinal    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, summary_id, source_id)
);
CREATE INDEX summary_sources_source ON summary_sources (tenant_id, source_id);

-- Durable background jobs: claimed with FOR UPDATE SKIP LOCKED and an expiring lease;
-- at most one PENDING job per dedup key, at most one RUNNING job per lock key.
CREATE TABLE jobs (
    tenant_id    text NOT NULL,
    id           text NOT NULL,
    user_id      text,
    kind         text NOT NULL,
    dedup_key    text,
    lock_key     text,
    payload      jsonb NOT NULL DEFAULT '{}',
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts     bigint NOT NULL DEFAULT 0,
    max_attempts bigint NOT NULL DEFAULT 3,
    run_after    timestamptz NOT NULL,
    lease_until  timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
-- GLOBAL: workers claim from every tenant, and heartbeat/complete/fail a job by its id.
CREATE INDEX jobs_claim ON jobs (run_after, id) WHERE status IN ('pending', 'running');
CREATE INDEX jobs_id ON jobs (id);
CREATE UNIQUE INDEX jobs_dedup ON jobs (tenant_id, dedup_key) WHERE dedup_key IS NOT NULL AND status = 'pending';
CREATE INDEX jobs_lock ON jobs (tenant_id, lock_key, status) WHERE lock_key IS NOT NULL;
CREATE INDEX jobs_user ON jobs (tenant_id, user_id);
CREATE INDEX jobs_list ON jobs (tenant_id, created_at);

-- Content-hash cursor of the extractor, per conversation.
CREATE TABLE extraction_cursors (
    tenant_id       text NOT NULL,
    conversation_id text NOT NULL,
    user_id         text NOT NULL,
    last_hash       text NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id)
);

-- Which memories a search/context call returned, keyed by the caller's turn id.
CREATE TABLE recalls (
    tenant_id  text NOT NULL,
    turn_id    text NOT NULL,
    memory_id  uuid NOT NULL,
    user_id    text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, turn_id, memory_id)
);
CREATE INDEX recalls_user ON recalls (tenant_id, user_id);
CREATE INDEX recalls_memory ON recalls (tenant_id, memory_id);

-- Context blocks kept stable for a session.
CREATE TABLE context_sessions (
    tenant_id  text NOT NULL,
    session_id text NOT NULL,
    user_id    text NOT NULL,
    pool       text NOT NULL DEFAULT '',
    text       text NOT NULL,
    memory_ids uuid[] NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, session_id, user_id, pool)
);
CREATE INDEX context_sessions_user ON context_sessions (tenant_id, user_id);
