-- Retention (store.PruneIdleThreads, store.Catalog.PackEvents).
--
-- A run's events, once its stream is no longer kept whole for resuming,
-- are packed: what is kept of them, in one compressed record per run
-- (api_event_packs) in place of a row each; events_packed marks the runs
-- whose events are, and the index finds the ended runs still to pack.
-- The live events (api_events) are then only those of recent runs.
ALTER TABLE api_runs ADD COLUMN events_packed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX api_runs_to_pack ON api_runs (finished_at) WHERE NOT events_packed;

CREATE TABLE api_event_packs (
    run   TEXT PRIMARY KEY,
    last  INTEGER NOT NULL,
    count INTEGER NOT NULL,
    data  BLOB NOT NULL
);

-- Deleting or pruning a thread's checkpoints used to leave its record,
-- runs, events and voice sessions behind. A served thread always has
-- checkpoints (they are written before its record, and now deleted with
-- it), so the records of a thread without any are such remains.
DELETE FROM api_runs WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = api_runs.thread);
DELETE FROM api_events WHERE NOT EXISTS (SELECT 1 FROM api_runs r WHERE r.id = api_events.run);
DELETE FROM voice_sessions WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = voice_sessions.thread);
DELETE FROM api_threads WHERE NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = api_threads.id);
