//! Durations as SQLite date modifiers, for comparisons with the stored fixed-width UTC text.

use std::time::Duration;

/// Shifts beyond this are clamped, so a huge duration cannot push a date past year 9999 (where
/// the fixed-width text order would break) or before year 0.
const MAX_SHIFT_MILLIS: u128 = 1_000 * 365 * 24 * 3_600 * 1_000;

/// The modifier that moves a time `duration` later (`'+10.000 seconds'`), at millisecond precision.
pub(crate) fn later_by(duration: Duration) -> String {
    modifier('+', duration)
}

/// The modifier that moves a time `duration` earlier.
pub(crate) fn earlier_by(duration: Duration) -> String {
    modifier('-', duration)
}

fn modifier(sign: char, duration: Duration) -> String {
    let millis = duration.as_millis().min(MAX_SHIFT_MILLIS);
    format!("{sign}{}.{:03} seconds", millis / 1_000, millis % 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modifiers_keep_milliseconds_and_clamp() {
        assert_eq!(later_by(Duration::from_millis(10_005)), "+10.005 seconds");
        assert_eq!(earlier_by(Duration::ZERO), "-0.000 seconds");
        assert_eq!(later_by(Duration::MAX), format!("+{}.000 seconds", MAX_SHIFT_MILLIS / 1_000));
    }
}
