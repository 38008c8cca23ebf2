-- Schedules (store.Schedules): a cron expression in a time zone that
-- starts a run on a thread (its store key) or on a new thread each tick;
-- next_at is the next tick, moved forward by compare-and-set. Times are
-- Unix nanoseconds, 0 for none; grace is in nanoseconds.
CREATE TABLE schedules (
    id         text PRIMARY KEY,
    tenant     text NOT NULL,
    flow       text NOT NULL,
    thread     text NOT NULL,
    cron       text NOT NULL,
    zone       text NOT NULL,
    input      text NOT NULL,
    metadata   text NOT NULL,
    missed     text NOT NULL,
    grace      bigint NOT NULL,
    webhook    text NOT NULL,
    paused     boolean NOT NULL,
    next_at    bigint NOT NULL,
    last_tick  bigint NOT NULL,
    last_run   text NOT NULL,
    last_error text NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX schedules_due ON schedules (paused, next_at);
CREATE INDEX schedules_tenant ON schedules (tenant, id);
CREATE INDEX schedules_thread ON schedules (thread);
