-- The version of each flow its new threads start on (store.Promotions),
-- the same for every process sharing the store: since and promoted_by say when
-- and by whom it was promoted. Times are Unix nanoseconds.
CREATE TABLE flow_promotions (
    flow    TEXT PRIMARY KEY,
    version TEXT NOT NULL,
    since   INTEGER NOT NULL,
    promoted_by TEXT NOT NULL
);
