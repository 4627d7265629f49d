-- The business table of the publish-overhead benchmark.
CREATE TABLE {prefix}orders (
    id         UUID        NOT NULL PRIMARY KEY,
    customer   TEXT        NOT NULL,
    amount     BIGINT      NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
