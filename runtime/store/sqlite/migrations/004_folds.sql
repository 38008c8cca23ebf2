-- Folds and segments let a long thread's state be read without reading its
-- whole history (see package sqlstore). Both are derived from the writes
-- table and deleted with their thread.
CREATE TABLE folds (
    thread TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL,
    spans  TEXT NOT NULL,
    PRIMARY KEY (thread, seq)
) WITHOUT ROWID;

CREATE TABLE segments (
    thread  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    field   TEXT NOT NULL,
    last    INTEGER NOT NULL,
    first   INTEGER NOT NULL,
    version INTEGER NOT NULL,
    items   TEXT NOT NULL,
    PRIMARY KEY (thread, field, last)
);
