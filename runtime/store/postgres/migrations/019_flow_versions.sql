-- Flow versions (store.Versions): each file a version of a flow was
-- compiled from, kept once by the hash of its content; each version's
-- manifest (file name to hash, as JSON); and the version each thread
-- runs. Times are Unix nanoseconds.
CREATE TABLE flow_files (
    hash text PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE flow_versions (
    flow       text NOT NULL,
    version    text NOT NULL,
    path       text NOT NULL,
    manifest   text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (flow, version)
);
CREATE INDEX flow_versions_recent ON flow_versions (flow, created_at DESC);

CREATE TABLE thread_versions (
    thread  text PRIMARY KEY,
    tenant  text NOT NULL,
    flow    text NOT NULL,
    version text NOT NULL,
    since   bigint NOT NULL
);
CREATE INDEX thread_versions_flow ON thread_versions (tenant, flow, version, thread);

-- A thread's version is among what deleting it removes (and so what
-- pruning it does): migration 022 adds it to trellis_delete_thread.
