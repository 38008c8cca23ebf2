-- What a served runtime records beside the checkpoints (store.Catalog):
-- threads' owners and flows, runs and their events, API keys. Times are
-- Unix nanoseconds, 0 for none.
CREATE TABLE api_threads (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    flow       TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX api_threads_list ON api_threads (tenant, created_at DESC, id DESC);

CREATE TABLE api_runs (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    thread       TEXT NOT NULL,
    flow         TEXT NOT NULL,
    flow_version TEXT NOT NULL,
    status       TEXT NOT NULL,
    input        TEXT NOT NULL,
    error        TEXT NOT NULL,
    checkpoint   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER NOT NULL
);
CREATE INDEX api_runs_thread ON api_runs (thread, created_at DESC, id DESC);

CREATE TABLE api_events (
    run  TEXT NOT NULL,
    seq  INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    hash       TEXT NOT NULL UNIQUE,
    tenant     TEXT NOT NULL,
    admin      INTEGER NOT NULL,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL
);
