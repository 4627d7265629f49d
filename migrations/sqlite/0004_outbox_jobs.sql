-- Job locks: one lease row per named background job, shared by every instance.
CREATE TABLE IF NOT EXISTS {jobs} (
    name         TEXT NOT NULL PRIMARY KEY,
    locked_until TEXT NOT NULL,
    locked_at    TEXT NOT NULL,
    locked_by    TEXT NOT NULL
) STRICT, WITHOUT ROWID;
