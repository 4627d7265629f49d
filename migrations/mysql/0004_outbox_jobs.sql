-- Job locks: one lease row per named background job, shared by every instance.
CREATE TABLE IF NOT EXISTS outbox_jobs (
    name         VARCHAR(255) NOT NULL,
    locked_until DATETIME(6)  NOT NULL,
    locked_at    DATETIME(6)  NOT NULL,
    locked_by    BINARY(16)   NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
