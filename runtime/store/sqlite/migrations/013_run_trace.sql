-- The W3C traceparent of the request that started a run, so that the run
-- joins the caller's trace whichever server claims it, whenever.
ALTER TABLE api_runs ADD COLUMN trace TEXT NOT NULL DEFAULT '';
