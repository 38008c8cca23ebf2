-- Runs are a queue every server of a store shares (store.Catalog):
-- which server runs a run, a request to stop it, and the servers'
-- heartbeats, so a run of a server that died is taken over.
ALTER TABLE api_runs ADD COLUMN resume boolean NOT NULL DEFAULT false;
ALTER TABLE api_runs ADD COLUMN interrupt boolean NOT NULL DEFAULT false;
ALTER TABLE api_runs ADD COLUMN server text NOT NULL DEFAULT '';
ALTER TABLE api_runs ADD COLUMN stop text NOT NULL DEFAULT '';
CREATE INDEX api_runs_queue ON api_runs (status, created_at, id);

CREATE TABLE api_servers (
    id      text PRIMARY KEY,
    seen_at bigint NOT NULL
);
