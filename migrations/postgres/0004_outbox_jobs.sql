-- Job locks: one lease row per named background job, shared by every instance.
CREATE TABLE IF NOT EXISTS outbox_jobs (
    name         TEXT        NOT NULL PRIMARY KEY,
    locked_until TIMESTAMPTZ NOT NULL,
    locked_at    TIMESTAMPTZ NOT NULL,
    locked_by    UUID        NOT NULL
);
