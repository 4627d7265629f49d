//! Durations as bound parameters.

use std::time::Duration;

/// Shifts beyond this are clamped, so a huge duration cannot overflow a timestamp column
/// (`DATETIME` ends in year 9999, PostgreSQL in 294276); a thousand years is far past any sensible
/// setting.
pub const MAX_SHIFT_MICROS: u128 = 1_000 * 365 * 24 * 3_600 * 1_000_000;

/// `duration` in whole microseconds (the resolution of PostgreSQL timestamps and `DATETIME(6)`),
/// clamped to [`MAX_SHIFT_MICROS`], for an interval bound as a number.
pub fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros().min(MAX_SHIFT_MICROS)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_become_clamped_microseconds() {
        assert_eq!(micros(Duration::from_millis(10_005)), 10_005_000);
        assert_eq!(micros(Duration::ZERO), 0);
        assert_eq!(micros(Duration::MAX) as u128, MAX_SHIFT_MICROS);
    }
}
