-- Working memory (issue 15, seeds 002 and 003): short-lived key-value state per (tenant,
-- user, agent, session), with an expiry. No agent is stored as '' (a primary key column
-- cannot be NULL). Never embedded or indexed for search; erased with the user; expired rows
-- are unreadable at once and deleted by the workers' sweep.
CREATE TABLE session_state (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    agent_id   text NOT NULL DEFAULT '',
    session_id text NOT NULL,
    key        text NOT NULL,
    value      jsonb NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, user_id, agent_id, session_id, key)
);
CREATE INDEX session_state_expiry ON session_state (expires_at);
