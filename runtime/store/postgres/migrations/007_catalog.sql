-- What a served runtime records beside the checkpoints (store.Catalog):
-- threads' owners and flows, runs and their events, API keys. Times are
-- Unix nanoseconds, 0 for none.
CREATE TABLE api_threads (
    id         text PRIMARY KEY,
    tenant     text NOT NULL,
    flow       text NOT NULL,
    metadata   text NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX api_threads_list ON api_threads (tenant, created_at DESC, id DESC);

CREATE TABLE api_runs (
    id           text PRIMARY KEY,
    tenant       text NOT NULL,
    thread       text NOT NULL,
    flow         text NOT NULL,
    flow_version text NOT NULL,
    status       text NOT NULL,
    input        text NOT NULL,
    error        text NOT NULL,
    checkpoint   bigint NOT NULL,
    created_at   bigint NOT NULL,
    started_at   bigint NOT NULL,
    finished_at  bigint NOT NULL
);
CREATE INDEX api_runs_thread ON api_runs (thread, created_at DESC, id DESC);

CREATE TABLE api_events (
    run  text NOT NULL,
    seq  bigint NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (run, seq)
);

CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    hash       text NOT NULL UNIQUE,
    tenant     text NOT NULL,
    admin      boolean NOT NULL,
    name       text NOT NULL,
    created_at bigint NOT NULL,
    revoked_at bigint NOT NULL
);
