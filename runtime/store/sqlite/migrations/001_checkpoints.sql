CREATE TABLE threads (
    id         TEXT PRIMARY KEY,
    head       INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX threads_updated ON threads (updated_at);

CREATE TABLE checkpoints (
    thread TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL,
    parent INTEGER NOT NULL,
    run    TEXT NOT NULL,
    step   INTEGER NOT NULL,
    source TEXT NOT NULL,
    at     INTEGER NOT NULL,
    meta   TEXT NOT NULL,
    PRIMARY KEY (thread, seq)
);

CREATE TABLE writes (
    thread  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    field   TEXT NOT NULL,
    version INTEGER NOT NULL,
    append  INTEGER NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (thread, field, seq),
    FOREIGN KEY (thread, seq) REFERENCES checkpoints (thread, seq) ON DELETE CASCADE
);
CREATE INDEX writes_seq ON writes (thread, seq);
