-- A run's events move from a table clustered by (run, seq) (WITHOUT
-- ROWID, migration 005) to one kept in the order they were appended,
-- with (run, seq) as its index. Clustered by run, a served run's events
-- went where its random id fell among the others', a few to a page (a
-- table clustered on its key keeps no more than about a kilobyte of a
-- row in the page, the rest on a page of its own): each commit rewrote
-- pages across the tree. Appended in order, a commit's events share the
-- last pages of the table, and its index entries, small, one page.
-- Reading a run's events by number goes through the index, as a run's
-- rows stay together in the table.
CREATE TABLE api_events_appended (
    run  TEXT NOT NULL,
    seq  INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run, seq)
);
INSERT INTO api_events_appended (run, seq, data) SELECT run, seq, data FROM api_events ORDER BY run, seq;
DROP TABLE api_events;
ALTER TABLE api_events_appended RENAME TO api_events;
