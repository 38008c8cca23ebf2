-- A change of a run's record carries a write id (store.RunRecord.WriteID),
-- so that a change tried again after a failure that may have come after
-- it committed recognises its own instead of reading it as another
-- server's.
ALTER TABLE api_runs ADD COLUMN write_id text NOT NULL DEFAULT '';
