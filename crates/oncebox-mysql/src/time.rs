//! Durations and limits as bound parameters.

/// `duration` in whole microseconds, for `INTERVAL ? MICROSECOND`.
pub(crate) use oncebox_sqlx::micros;

/// A row count limit for `LIMIT ?`.
pub(crate) fn limit(limit: u32) -> u64 {
    u64::from(limit)
}
