-- Runs are a queue every server of a store shares (store.Catalog):
-- which server runs a run, a request to stop it, and the servers'
-- heartbeats, so a run of a server that died is taken over.
ALTER TABLE api_runs ADD COLUMN resume INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_runs ADD COLUMN interrupt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_runs ADD COLUMN server TEXT NOT NULL DEFAULT '';
ALTER TABLE api_runs ADD COLUMN stop TEXT NOT NULL DEFAULT '';
CREATE INDEX api_runs_queue ON api_runs (status, created_at, id);

CREATE TABLE api_servers (
    id      TEXT PRIMARY KEY,
    seen_at INTEGER NOT NULL
);
