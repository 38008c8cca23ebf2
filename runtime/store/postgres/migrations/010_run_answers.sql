-- The answers a run resuming a paused thread brings to its questions.
ALTER TABLE api_runs ADD COLUMN answers text NOT NULL DEFAULT 'null';
