-- The voice sessions' records (store.VoiceCatalog): the key the server
-- signs its voice agents' grants with (one row), and the sessions those
-- grants are good for. Times are Unix nanoseconds, 0 for none.
CREATE TABLE voice_signing_key (
    slot       integer PRIMARY KEY CHECK (slot = 1),
    id         text NOT NULL,
    secret     text NOT NULL,
    created_at bigint NOT NULL
);

CREATE TABLE voice_sessions (
    id             text PRIMARY KEY,
    tenant         text NOT NULL,
    thread         text NOT NULL,
    thread_created bigint NOT NULL,
    key_hash       text NOT NULL,
    signing_key    text NOT NULL,
    created_at     bigint NOT NULL,
    expires_at     bigint NOT NULL,
    deadline       bigint NOT NULL,
    renewed_at     bigint NOT NULL,
    caller         text NOT NULL,
    caller_at      bigint NOT NULL,
    ended_at       bigint NOT NULL
);
CREATE INDEX voice_sessions_thread ON voice_sessions (thread, created_at);
CREATE INDEX voice_sessions_expiry ON voice_sessions (expires_at);
