-- The voice sessions' records (store.VoiceCatalog): the key the server
-- signs its voice agents' grants with (one row), and the sessions those
-- grants are good for. Times are Unix nanoseconds, 0 for none.
CREATE TABLE voice_signing_key (
    slot       INTEGER PRIMARY KEY CHECK (slot = 1),
    id         TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE voice_sessions (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    thread         TEXT NOT NULL,
    thread_created INTEGER NOT NULL,
    key_hash       TEXT NOT NULL,
    signing_key    TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    deadline       INTEGER NOT NULL,
    renewed_at     INTEGER NOT NULL,
    caller         TEXT NOT NULL,
    caller_at      INTEGER NOT NULL,
    ended_at       INTEGER NOT NULL
);
CREATE INDEX voice_sessions_thread ON voice_sessions (thread, created_at);
CREATE INDEX voice_sessions_expiry ON voice_sessions (expires_at);
