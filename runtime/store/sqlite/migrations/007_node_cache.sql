-- Node results kept for a node's cache setting (store.Cache), by key,
-- until they expire (0: never).
CREATE TABLE node_cache (
    key        TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX node_cache_age ON node_cache (created_at);
