//! Row-count gauges.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use metrics::{counter, gauge};
use oncebox_core::config::{GaugeConfig, MIN_GAUGE_REFRESH};
use oncebox_core::{DlqDao, OutboxDao, Result};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::names;

/// How often gauges refresh when `metrics.gauge.cache` is off ("count on every scrape" has no
/// scrape to hook into through the metrics facade).
const UNCACHED_REFRESH: Duration = Duration::from_secs(10);

/// Gauges of outbox and DLQ rows per event type and status, set from the DAOs' grouped counts.
pub struct RowCountGauges {
    outbox: Option<Arc<dyn OutboxDao>>,
    dlq: Option<Arc<dyn DlqDao>>,
    every: Duration,
    /// Series set before, so a status that emptied is set to 0 instead of keeping its last count.
    seen: Mutex<HashSet<(&'static str, String, &'static str)>>,
    /// Event types whose oldest-PENDING age was set before, for the same reason.
    pending_types: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for RowCountGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowCountGauges")
            .field("outbox", &self.outbox.is_some())
            .field("dlq", &self.dlq.is_some())
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

fn label(status: &str) -> &'static str {
    match status {
        "PENDING" => "pending",
        "IN_PROCESS" => "in_process",
        "PROCESSED" => "processed",
        "FAILED" => "failed",
        "MOVED" => "moved",
        "RESOLVED" => "resolved",
        "TO_RETRY" => "to_retry",
        _ => "other",
    }
}

/// One gauge value: metric name, event type, status label, rows.
type Series = (&'static str, String, &'static str, u64);

fn series<S>(
    name: &'static str,
    counts: Vec<(String, S, u64)>,
    status_text: impl Fn(S) -> &'static str,
) -> impl Iterator<Item = Series> {
    counts
        .into_iter()
        .map(move |(event_type, status, rows)| (name, event_type, label(status_text(status)), rows))
}

impl RowCountGauges {
    /// Gauges refreshed every `every`; attach the tables with [`with_outbox`](Self::with_outbox)
    /// and [`with_dlq`](Self::with_dlq).
    ///
    /// `every` is at least [`MIN_GAUGE_REFRESH`] (1 s): a shorter period is raised to it, since each
    /// refresh counts whole tables.
    pub fn new(every: Duration) -> Self {
        let every = every.max(MIN_GAUGE_REFRESH);
        Self {
            outbox: None,
            dlq: None,
            every,
            seen: Mutex::new(HashSet::new()),
            pending_types: Mutex::new(HashSet::new()),
        }
    }

    /// Gauges refreshed as `oncebox.outbox.metrics.gauge` says: every per-type-and-status TTL
    /// (the counts come from one grouped query), or every 10 s with the cache off.
    pub fn from_config(config: &GaugeConfig) -> Self {
        Self::new(config.cache_ttls.map(|ttls| ttls[2]).unwrap_or(UNCACHED_REFRESH))
    }

    /// Counts the outbox table.
    #[must_use]
    pub fn with_outbox(mut self, outbox: Arc<dyn OutboxDao>) -> Self {
        self.outbox = Some(outbox);
        self
    }

    /// Counts the DLQ table.
    #[must_use]
    pub fn with_dlq(mut self, dlq: Arc<dyn DlqDao>) -> Self {
        self.dlq = Some(dlq);
        self
    }

    /// The refresh interval.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Counts once and sets every gauge. A failed count leaves that table's gauges at their last
    /// value and is returned.
    pub async fn refresh(&self) -> Result<()> {
        let mut current: Vec<Series> = Vec::new();
        let mut oldest_pending = Vec::new();
        if let Some(outbox) = &self.outbox {
            let counts = outbox.counts().await?;
            oldest_pending = counts.oldest_pending;
            current.extend(series(names::OUTBOX_ROWS, counts.by_type_and_status, |status| status.as_str()));
        }
        if let Some(dlq) = &self.dlq {
            let counts = dlq.counts().await?.by_type_and_status;
            current.extend(series(names::DLQ_ROWS, counts, |status| status.as_str()));
        }
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let now: HashSet<(&'static str, String, &'static str)> =
            current.iter().map(|(name, t, s, _)| (*name, t.clone(), *s)).collect();
        for (name, event_type, status) in seen.difference(&now) {
            gauge!(*name, "event_type" => event_type.clone(), "status" => *status).set(0.0);
        }
        for (name, event_type, status, count) in current {
            gauge!(name, "event_type" => event_type, "status" => status).set(count as f64);
        }
        seen.extend(now);
        drop(seen);
        self.set_oldest_pending(oldest_pending);
        Ok(())
    }

    /// Sets the age of the oldest PENDING event per type; a type whose PENDING rows are all gone
    /// drops to 0 rather than keeping its last age.
    fn set_oldest_pending(&self, ages: Vec<(String, Duration)>) {
        let mut seen = self.pending_types.lock().unwrap_or_else(PoisonError::into_inner);
        let now: HashSet<String> = ages.iter().map(|(event_type, _)| event_type.clone()).collect();
        for event_type in seen.difference(&now) {
            gauge!(names::OLDEST_PENDING_AGE, "event_type" => event_type.clone()).set(0.0);
        }
        for (event_type, age) in ages {
            gauge!(names::OLDEST_PENDING_AGE, "event_type" => event_type).set(age.as_secs_f64());
        }
        seen.extend(now);
    }

    /// Refreshes now and then every interval on the current tokio runtime, until the returned
    /// handle is stopped or dropped.
    pub fn spawn(self) -> GaugeRefresh {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Err(error) = self.refresh().await {
                    counter!(names::GAUGE_REFRESH_ERRORS).increment(1);
                    tracing::warn!(%error, "refreshing oncebox row-count gauges failed; they keep their last values");
                }
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(self.every) => {}
                }
            }
        });
        GaugeRefresh { stop, task: Some(task) }
    }
}

/// The running refresh of [`RowCountGauges::spawn`]; dropping it stops the refresh.
#[derive(Debug)]
pub struct GaugeRefresh {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl GaugeRefresh {
    /// Stops the refresh and waits for a count in progress to finish.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for GaugeRefresh {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_lower_case_labels() {
        let labels: Vec<&str> =
            ["PENDING", "IN_PROCESS", "PROCESSED", "FAILED", "MOVED", "RESOLVED", "TO_RETRY", "?"]
                .map(label)
                .into();
        assert_eq!(
            labels,
            ["pending", "in_process", "processed", "failed", "moved", "resolved", "to_retry", "other"]
        );
    }

    #[test]
    fn a_zero_refresh_period_is_raised_to_the_minimum() {
        assert_eq!(RowCountGauges::new(Duration::ZERO).every(), MIN_GAUGE_REFRESH);
        let zero = GaugeConfig { cache_ttls: Some([Duration::ZERO; 3]) };
        assert_eq!(RowCountGauges::from_config(&zero).every(), MIN_GAUGE_REFRESH);
    }

    #[test]
    fn the_refresh_interval_follows_the_gauge_cache() {
        let cached = GaugeConfig {
            cache_ttls: Some([Duration::from_secs(30), Duration::from_secs(45), Duration::from_secs(90)]),
        };
        assert_eq!(RowCountGauges::from_config(&cached).every(), Duration::from_secs(90));
        assert_eq!(RowCountGauges::from_config(&GaugeConfig { cache_ttls: None }).every(), UNCACHED_REFRESH);
    }
}
