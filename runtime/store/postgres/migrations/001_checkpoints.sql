CREATE TABLE threads (
    id         text PRIMARY KEY,
    head       bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE INDEX threads_updated ON threads (updated_at);

CREATE TABLE checkpoints (
    thread text NOT NULL,
    seq    bigint NOT NULL,
    parent bigint NOT NULL,
    run    text NOT NULL,
    step   integer NOT NULL,
    source text NOT NULL,
    at     bigint NOT NULL,
    meta   jsonb NOT NULL,
    PRIMARY KEY (thread, seq)
);

CREATE TABLE writes (
    thread  text NOT NULL,
    seq     bigint NOT NULL,
    field   text NOT NULL,
    version bigint NOT NULL,
    append  boolean NOT NULL,
    value   jsonb NOT NULL,
    PRIMARY KEY (thread, field, seq)
);
CREATE INDEX writes_seq ON writes (thread, seq);
