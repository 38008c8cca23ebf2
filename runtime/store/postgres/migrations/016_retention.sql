-- Retention (store.PruneIdleThreads, store.Catalog.PackEvents).
--
-- A run's events, once its stream is no longer kept whole for resuming,
-- are packed: what is kept of them, in one compressed record per run
-- (api_event_packs) in place of a row each; events_packed marks the runs
-- whose events are, and the index finds the ended runs still to pack.
-- The live events (api_events) are then only those of recent runs.
ALTER TABLE api_runs ADD COLUMN events_packed boolean NOT NULL DEFAULT false;
CREATE INDEX api_runs_to_pack ON api_runs (finished_at) WHERE NOT events_packed;

CREATE TABLE api_event_packs (
    run   text PRIMARY KEY,
    last  bigint NOT NULL,
    count integer NOT NULL,
    data  bytea NOT NULL
);
-- the records are compressed already: kept out of line as they are
ALTER TABLE api_event_packs ALTER COLUMN data SET STORAGE EXTERNAL;

-- The threads of the child flows a thread ran (THREAD|NODE:SEQ), by their
-- root thread's id, whatever the database's collation: they are deleted
-- with it.
CREATE INDEX threads_children ON threads (split_part(id, '|', 1)) WHERE strpos(id, '|') > 0;

-- Deleting or pruning a thread's checkpoints used to leave its record,
-- runs, events and voice sessions behind. A served thread always has
-- checkpoints (they are written before its record, and now deleted with
-- it), so the records of a thread without any are such remains.
DELETE FROM api_runs r WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = r.thread);
DELETE FROM api_events e WHERE NOT EXISTS (SELECT 1 FROM api_runs r WHERE r.id = e.run);
DELETE FROM voice_sessions v WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = v.thread);
DELETE FROM api_threads a WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = a.id);
