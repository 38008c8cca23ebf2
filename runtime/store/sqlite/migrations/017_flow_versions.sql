-- Flow versions (store.Versions): each file a version of a flow was
-- compiled from, kept once by the hash of its content; each version's
-- manifest (file name to hash, as JSON); and the version each thread
-- runs. Times are Unix nanoseconds.
CREATE TABLE flow_files (
    hash TEXT PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE flow_versions (
    flow       TEXT NOT NULL,
    version    TEXT NOT NULL,
    path       TEXT NOT NULL,
    manifest   TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (flow, version)
);
CREATE INDEX flow_versions_recent ON flow_versions (flow, created_at DESC);

CREATE TABLE thread_versions (
    thread  TEXT PRIMARY KEY,
    tenant  TEXT NOT NULL,
    flow    TEXT NOT NULL,
    version TEXT NOT NULL,
    since   INTEGER NOT NULL
);
CREATE INDEX thread_versions_flow ON thread_versions (tenant, flow, version, thread);
