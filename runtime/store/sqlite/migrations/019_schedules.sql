-- Schedules (store.Schedules): a cron expression in a time zone that
-- starts a run on a thread (its store key) or on a new thread each tick;
-- next_at is the next tick, moved forward by compare-and-set. Times are
-- Unix nanoseconds, 0 for none; grace is in nanoseconds.
CREATE TABLE schedules (
    id         TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    flow       TEXT NOT NULL,
    thread     TEXT NOT NULL,
    cron       TEXT NOT NULL,
    zone       TEXT NOT NULL,
    input      TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    missed     TEXT NOT NULL,
    grace      INTEGER NOT NULL,
    webhook    TEXT NOT NULL,
    paused     INTEGER NOT NULL,
    next_at    INTEGER NOT NULL,
    last_tick  INTEGER NOT NULL,
    last_run   TEXT NOT NULL,
    last_error TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX schedules_due ON schedules (paused, next_at);
CREATE INDEX schedules_tenant ON schedules (tenant, id);
CREATE INDEX schedules_thread ON schedules (thread);
