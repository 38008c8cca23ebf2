-- What a schedule's last ticks did (store.TickRecord, as JSON, the newest
-- first, at most store.TickHistory): started and their runs, missed while
-- no server ran, or failed and why.
ALTER TABLE schedules ADD COLUMN ticks TEXT NOT NULL DEFAULT '[]';
