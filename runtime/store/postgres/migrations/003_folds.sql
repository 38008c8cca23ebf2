-- Folds and segments let a long thread's state be read without reading its
-- whole history (see package sqlstore). Both are derived from the writes
-- table. Segment items are stored as text: they are only ever read whole,
-- and text is returned without the conversion jsonb output needs.
CREATE TABLE folds (
    thread text NOT NULL,
    seq    bigint NOT NULL,
    spans  text NOT NULL,
    PRIMARY KEY (thread, seq)
);

CREATE TABLE segments (
    thread  text NOT NULL,
    field   text NOT NULL,
    last    bigint NOT NULL,
    first   bigint NOT NULL,
    version bigint NOT NULL,
    items   text NOT NULL,
    PRIMARY KEY (thread, field, last)
);
