-- A run's configuration, without its secret values.
ALTER TABLE api_runs ADD COLUMN config text NOT NULL DEFAULT 'null';
