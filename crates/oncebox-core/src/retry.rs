//! The retry rule: how many sends an event gets and how long it waits between them.

use std::time::Duration;

use crate::config::Backoff;
use crate::error::Error;

/// What to do with an event whose send just failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again after this delay (zero: at the next poll).
    RetryAfter(Duration),
    /// Retries are exhausted: mark FAILED.
    GiveUp,
}

/// Decides the fate of an event that has now been sent `attempts` times (counting the send that
/// just failed) with `max_retries` retries allowed: `max_retries: 3` means 1 + 3 sends, then FAILED.
pub fn decide(attempts: u32, max_retries: u32, backoff: &Backoff) -> RetryDecision {
    if attempts > max_retries {
        RetryDecision::GiveUp
    } else {
        RetryDecision::RetryAfter(backoff.delay_before_retry(attempts))
    }
}

impl Backoff {
    /// The delay before retry `retry` (1, 2, …): `delay × multiplier^(retry-1)`, computed in
    /// floating-point milliseconds, capped by `max_delay` and then jittered downwards by up to
    /// `jitter` of itself. Never overflows; disabled backoff gives zero.
    pub fn delay_before_retry(&self, retry: u32) -> Duration {
        if !self.enabled {
            return Duration::ZERO;
        }
        let exponent = retry.saturating_sub(1).min(i32::MAX as u32) as i32;
        let uncapped_ms = self.delay.as_secs_f64() * 1000.0 * self.multiplier.powi(exponent);
        let cap_ms = self.max_delay.as_secs_f64() * 1000.0;
        let capped_ms = if uncapped_ms.is_finite() { uncapped_ms.min(cap_ms) } else { cap_ms };
        let jittered_ms =
            if self.jitter > 0.0 { capped_ms * (1.0 - self.jitter * fastrand::f64()) } else { capped_ms };
        Duration::from_millis(jittered_ms.max(0.0).round() as u64)
    }

    /// The longest an event can spend in retries: every delay before retries 1 to `max_retries`,
    /// without jitter, plus one `emergency_timeout` per send. An event delivered on its first send
    /// whose acknowledgement was lost can reach a consumer again this late, so an inbox must keep
    /// ids longer (`oncebox check-config` warns where it does not).
    pub fn retry_horizon(&self, max_retries: u32, emergency_timeout: Duration) -> Duration {
        /// Retries added one by one; past them each counts as the cap (an upper bound, fine for a
        /// warning), so a huge `max-retries` never makes a long loop.
        const STEPPED: u32 = 1_000;
        let steady = Backoff { jitter: 0.0, ..*self };
        let mut total = emergency_timeout.saturating_mul(max_retries.saturating_add(1));
        if !self.enabled {
            return total;
        }
        for retry in 1..=max_retries.min(STEPPED) {
            let delay = steady.delay_before_retry(retry);
            if delay >= steady.max_delay {
                // Capped from here on: the remaining retries in one step.
                return total.saturating_add(delay.saturating_mul(max_retries - retry + 1));
            }
            total = total.saturating_add(delay);
        }
        total.saturating_add(steady.max_delay.saturating_mul(max_retries.saturating_sub(STEPPED)))
    }
}

/// The `n`-th wait of a doubling backoff: `first` for `n` 0 and 1, then twice the one before,
/// never more than `cap`. The transports' reconnect and handler-retry waits all follow it.
///
/// ```
/// use oncebox_core::retry::doubling_delay;
/// use std::time::Duration;
/// let (first, cap) = (Duration::from_millis(100), Duration::from_millis(350));
/// let waits: Vec<u64> = (1..=4).map(|n| doubling_delay(first, cap, n).as_millis() as u64).collect();
/// assert_eq!(waits, [100, 200, 350, 350]);
/// ```
pub fn doubling_delay(first: Duration, cap: Duration, n: u32) -> Duration {
    // The exponent stops at 20: past it every realistic `first` is over any cap already.
    let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
    first.saturating_mul(factor).min(cap)
}

/// Waits that start at `min` and double per failure up to `max`: the pause before a failing
/// handler runs again, or before a lost connection is tried again.
///
/// ```
/// use oncebox_core::retry::Doubling;
/// use std::time::Duration;
/// let backoff = Doubling::new(Duration::from_millis(100), Duration::from_millis(350));
/// assert_eq!(backoff.delay(3), Duration::from_millis(350));
/// assert!(backoff.check("listener.retry-backoff", Duration::from_secs(1)).is_ok());
/// let error = Doubling::new(Duration::ZERO, Duration::from_secs(1)).check("listener.retry-backoff", Duration::from_secs(1));
/// assert!(error.is_err_and(|error| error.to_string().contains("listener.retry-backoff")));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doubling {
    /// The first wait.
    pub min: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Doubling {
    /// Waits from `min` doubling up to `max`.
    pub const fn new(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }

    /// The wait after the `n`th failure (see [`doubling_delay`]).
    pub fn delay(&self, n: u32) -> Duration {
        doubling_delay(self.min, self.max, n)
    }

    /// Checks that `min` is above zero (zero would spin) and not above `max`, and that `max` is
    /// at most `limit`; an error names the setting `key`.
    pub fn check(&self, key: &str, limit: Duration) -> Result<(), Error> {
        let Self { min, max } = *self;
        if min.is_zero() || min > max {
            return Err(Error::config(
                key,
                format!("min {min:?} must be above zero and not above max {max:?}"),
            ));
        }
        if max > limit {
            return Err(Error::config(key, format!("max {max:?} is longer than the limit {limit:?}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(delay_s: u64, multiplier: f64) -> Backoff {
        Backoff {
            enabled: true,
            delay: Duration::from_secs(delay_s),
            multiplier,
            max_delay: Duration::from_secs(3600),
            jitter: 0.0,
        }
    }

    #[test]
    fn defaults_give_10_30_90_seconds_then_failed() {
        let defaults = Backoff::default();
        let decisions: Vec<RetryDecision> = (1..=4).map(|attempts| decide(attempts, 3, &defaults)).collect();
        assert_eq!(
            decisions,
            vec![
                RetryDecision::RetryAfter(Duration::from_secs(10)),
                RetryDecision::RetryAfter(Duration::from_secs(30)),
                RetryDecision::RetryAfter(Duration::from_secs(90)),
                RetryDecision::GiveUp,
            ]
        );
    }

    #[test]
    fn the_retry_horizon_adds_every_delay_without_jitter_and_a_timeout_per_send() {
        let jittered = Backoff { jitter: 0.9, ..Backoff::default() };
        let minute = Duration::from_secs(60);
        // 10 s + 30 s + 90 s of delays, four sends of a minute each.
        assert_eq!(jittered.retry_horizon(3, minute), Duration::from_secs(130 + 240));
        assert_eq!(Backoff::default().retry_horizon(0, minute), minute);
        let capped = Backoff { max_delay: Duration::from_secs(3600), ..Backoff::default() };
        assert!(
            capped.retry_horizon(u32::MAX, minute) >= Duration::from_secs(3600 * 1000),
            "saturates, never panics"
        );
    }

    #[test]
    fn zero_max_retries_fails_on_the_first_failure() {
        assert_eq!(decide(1, 0, &Backoff::default()), RetryDecision::GiveUp);
    }

    #[test]
    fn fractional_multipliers_and_sub_second_delays_are_not_truncated() {
        let half_second = Backoff { delay: Duration::from_millis(500), ..backoff(0, 1.5) };
        assert_eq!(half_second.delay_before_retry(1), Duration::from_millis(500));
        assert_eq!(half_second.delay_before_retry(2), Duration::from_millis(750));
        assert_eq!(half_second.delay_before_retry(3), Duration::from_millis(1125));
    }

    #[test]
    fn huge_exponents_are_capped_not_overflowed() {
        let steep = backoff(10, 1000.0);
        assert_eq!(steep.delay_before_retry(u32::MAX), Duration::from_secs(3600));
        assert_eq!(steep.delay_before_retry(400), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_only_shortens_within_its_fraction() {
        let jittered = Backoff { jitter: 0.2, ..backoff(10, 1.0) };
        for _ in 0..100 {
            let delay = jittered.delay_before_retry(1);
            assert!(delay <= Duration::from_secs(10) && delay >= Duration::from_secs(8), "{delay:?}");
        }
    }

    #[test]
    fn disabled_backoff_retries_at_the_next_poll() {
        let disabled = Backoff { enabled: false, ..Backoff::default() };
        assert_eq!(decide(2, 3, &disabled), RetryDecision::RetryAfter(Duration::ZERO));
    }
}
