-- The version of each flow its new threads start on (store.Promotions),
-- the same for every process sharing the store: since and promoted_by say when
-- and by whom it was promoted. Times are Unix nanoseconds.
CREATE TABLE flow_promotions (
    flow    text PRIMARY KEY,
    version text NOT NULL,
    since   bigint NOT NULL,
    promoted_by text NOT NULL
);
