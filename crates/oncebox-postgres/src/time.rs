//! Durations and limits as bound parameters.

/// `duration` in microseconds, for `$n * INTERVAL '1 microsecond'`.
pub(crate) use oncebox_sqlx::micros;

/// A row count limit as PostgreSQL's `bigint`.
pub(crate) fn limit(limit: u32) -> i64 {
    i64::from(limit)
}
