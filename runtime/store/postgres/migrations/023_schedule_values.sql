-- A schedule that starts a run on a new thread each tick gives each
-- thread these initial values (JSON, 'null' for none).
ALTER TABLE schedules ADD COLUMN thread_values text NOT NULL DEFAULT 'null';
