-- Node results kept for a node's cache setting (store.Cache), by key,
-- until they expire (0: never).
CREATE TABLE node_cache (
    key        text PRIMARY KEY,
    value      bytea NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX node_cache_age ON node_cache (created_at);
