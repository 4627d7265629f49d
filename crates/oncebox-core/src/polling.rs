//! Polling schedules: how long a poller or job sleeps after each run.

use std::time::Duration;

use crate::config::Polling;

/// How a run went, as far as the schedule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    /// A whole batch was processed and at least part of it succeeded: more work is likely waiting.
    Full,
    /// An event poller delivered events but emptied what was due: the type is receiving events,
    /// so the next poll comes after the minimum delay instead of a grown one. Without this a
    /// steady trickle of events (every poll finding some, none finding a full batch) would grow
    /// the delay to its maximum, and with wake-ups off every event would wait up to that long.
    Partial,
    /// Nothing at all, a batch that failed entirely, an error, or a job's run that did not fill
    /// its batch.
    Short,
}

/// The schedule state of one task.
#[derive(Debug, Clone)]
pub struct Schedule {
    polling: Polling,
    current: Duration,
}

impl Schedule {
    /// A schedule at its starting delay.
    pub fn new(polling: Polling) -> Self {
        let current = match polling {
            Polling::Fixed { delay, .. } => delay,
            Polling::Adaptive { min_delay, .. } => min_delay,
        };
        Self { polling, current }
    }

    /// The delay before the first run.
    pub fn initial_delay(&self) -> Duration {
        match self.polling {
            Polling::Fixed { initial_delay, .. } | Polling::Adaptive { initial_delay, .. } => initial_delay,
        }
    }

    /// The delay before the next run, given how this one went.
    ///
    /// A full run is followed by the next one at once (drain), so throughput is not capped at one
    /// batch per minimum delay; the adaptive delay also drops back to its minimum. A partial run
    /// waits the fixed delay, or the adaptive minimum. A short run waits the fixed delay, or
    /// multiplies the adaptive delay, up to its maximum.
    pub fn next_delay(&mut self, result: RunResult) -> Duration {
        match (self.polling, result) {
            (Polling::Fixed { .. }, RunResult::Full) => Duration::ZERO,
            (Polling::Fixed { delay, .. }, RunResult::Partial | RunResult::Short) => delay,
            (Polling::Adaptive { min_delay, .. }, RunResult::Full) => {
                self.current = min_delay;
                Duration::ZERO
            }
            (Polling::Adaptive { min_delay, .. }, RunResult::Partial) => {
                self.current = min_delay;
                min_delay
            }
            (Polling::Adaptive { max_delay, multiplier, .. }, RunResult::Short) => {
                let grown = self.current.as_secs_f64() * multiplier;
                self.current = if grown.is_finite() && grown < max_delay.as_secs_f64() {
                    Duration::from_secs_f64(grown)
                } else {
                    max_delay
                };
                self.current
            }
        }
    }

    /// The delay an adaptive schedule has reached (the fixed delay for a fixed one).
    pub fn current_delay(&self) -> Duration {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EventConfig;

    fn default_event_polling() -> Polling {
        EventConfig::new("topic").polling
    }

    #[test]
    fn default_adaptive_delays_reach_the_cap_after_14_empty_polls() {
        let mut schedule = Schedule::new(default_event_polling());
        let delays: Vec<Duration> = (0..15).map(|_| schedule.next_delay(RunResult::Short)).collect();
        assert_eq!(delays[0], Duration::from_millis(375));
        assert!(delays[12] < Duration::from_secs(60), "{:?}", delays[12]);
        assert_eq!(delays[13], Duration::from_secs(60));
        assert_eq!(delays[14], Duration::from_secs(60));
        assert!(delays.windows(2).all(|pair| pair[0] <= pair[1]));
    }

    #[test]
    fn a_full_batch_drains_at_once_and_resets_to_the_minimum() {
        let mut schedule = Schedule::new(default_event_polling());
        for _ in 0..20 {
            schedule.next_delay(RunResult::Short);
        }
        assert_eq!(schedule.next_delay(RunResult::Full), Duration::ZERO);
        assert_eq!(schedule.current_delay(), Duration::from_millis(250));
        assert_eq!(schedule.next_delay(RunResult::Short), Duration::from_millis(375));
    }

    #[test]
    fn a_partial_run_returns_to_the_minimum_delay_and_stays_there() {
        let mut schedule = Schedule::new(default_event_polling());
        for _ in 0..20 {
            schedule.next_delay(RunResult::Short);
        }
        assert_eq!(schedule.current_delay(), Duration::from_secs(60));
        for _ in 0..5 {
            assert_eq!(schedule.next_delay(RunResult::Partial), Duration::from_millis(250));
        }
        assert_eq!(schedule.next_delay(RunResult::Short), Duration::from_millis(375));
    }

    #[test]
    fn fixed_polling_waits_its_delay_unless_draining() {
        let polling = Polling::Fixed { initial_delay: Duration::from_secs(1), delay: Duration::from_secs(2) };
        let mut schedule = Schedule::new(polling);
        assert_eq!(schedule.initial_delay(), Duration::from_secs(1));
        assert_eq!(schedule.next_delay(RunResult::Short), Duration::from_secs(2));
        assert_eq!(schedule.next_delay(RunResult::Full), Duration::ZERO);
        assert_eq!(schedule.next_delay(RunResult::Short), Duration::from_secs(2));
        assert_eq!(schedule.next_delay(RunResult::Partial), Duration::from_secs(2));
    }
}
