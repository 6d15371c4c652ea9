-- Web UI sign-ins. The browser's cookie holds a random token; the row holds its SHA-256,
-- never the API key the user signed in with. A sign-in ends at sign-out, at `expires_at`, or
-- when its key is revoked (the lookup joins `api_keys`). Not exported and not carried by
-- `engram migrate`: a restored or moved store asks its UI users to sign in again. The CSRF
-- token of the sign-in's forms is stored with it, so every process serving the UI accepts
-- them, across restarts.
CREATE TABLE ui_sessions (
    token_hash text PRIMARY KEY,
    tenant_id  text NOT NULL,
    key_id     text NOT NULL,
    csrf       text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_at);
