//! Metrics for oncebox through the [`metrics`] facade, so any recorder (Prometheus, StatsD,
//! OpenTelemetry bridges) receives them.
//!
//! * [`Metrics`] implements the engine's and the inbox's [`OutboxMetrics`](oncebox_core::OutboxMetrics)
//!   hook: task runs and their durations, polling delays, settled events by outcome, refused
//!   settles, rows moved by the jobs, inbox outcomes and cache lookups.
//! * [`RowCountGauges`] keeps gauges of outbox and DLQ rows per event type and status, refreshed
//!   on a timer from the DAOs' count queries (one grouped query per table per refresh, never one
//!   per scrape).
//! * With the `prometheus` feature, [`prometheus_builder`] gives a Prometheus recorder whose
//!   `_seconds` histograms have buckets (so they aggregate across instances) instead of the
//!   exporter's default summaries.
//!
//! Labels are event types, task names, consumers and outcomes: never event ids, so the number of
//! series stays bounded. Every name is in [`names`].
//!
//! ```
//! use std::sync::Arc;
//! use oncebox_core::OutboxMetrics;
//! use oncebox_metrics::Metrics;
//!
//! // Attach to the facade with `Oncebox::builder(…).metrics(hook)`, or to an inbox with
//! // `Inbox::with_metrics(hook)`; the installed `metrics` recorder receives everything.
//! let hook: Arc<dyn OutboxMetrics> = Arc::new(Metrics::new());
//! hook.events_settled("order-created", 498, 2, 0);
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod gauges;
mod hook;
#[cfg(feature = "prometheus")]
mod prometheus;

pub use gauges::{GaugeRefresh, RowCountGauges};
pub use hook::Metrics;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::{DELIVERY_DELAY_BUCKETS, DURATION_BUCKETS, prometheus_builder};

/// The metric names oncebox records.
pub mod names {
    /// Counter of task runs, by `task` and `outcome` (`full`, `short`, `failed`, `skipped`).
    pub const TASK_RUNS: &str = "oncebox_task_runs_total";
    /// Histogram of task run durations in seconds, by `task`.
    pub const TASK_DURATION: &str = "oncebox_task_duration_seconds";
    /// Gauge of task runs in progress, by `task`.
    pub const TASKS_RUNNING: &str = "oncebox_tasks_running";
    /// Gauge of the delay before a task's next run, in seconds, by `task`.
    pub const POLLING_DELAY: &str = "oncebox_polling_delay_seconds";
    /// Counter of settled events, by `event_type` and `outcome` (`delivered`, `retried`, `failed`).
    pub const EVENTS_SETTLED: &str = "oncebox_events_settled_total";
    /// Histogram of the time from an event's commit to the broker's acknowledgement, in seconds,
    /// by `event_type` (buckets from 1 ms to 10 min).
    pub const DELIVERY_DELAY: &str = "oncebox_delivery_delay_seconds";
    /// Counter of settles refused by fencing, by `event_type`.
    pub const SETTLES_REFUSED: &str = "oncebox_settles_refused_total";
    /// Counter of rows the background jobs moved, recovered or deleted, by `job`.
    pub const JOB_ROWS: &str = "oncebox_job_rows_total";
    /// Counter of inbox events, by `consumer` and `outcome` (`consumed`, `duplicate`, `failed`,
    /// `cleaned`).
    pub const INBOX_EVENTS: &str = "oncebox_inbox_events_total";
    /// Counter of DLQ rows an operator changed through the DLQ API, by `action` (`deleted`,
    /// `to_retry`, `resolved`, `moved`).
    pub const DLQ_MANUAL: &str = "oncebox_dlq_manual_actions_total";
    /// Counter of consumed-id cache lookups, by `result` (`hit`, `miss`).
    pub const CACHE_LOOKUPS: &str = "oncebox_inbox_cache_lookups_total";
    /// Gauge of outbox rows, by `event_type` and `status` (`pending`, `in_process`, `processed`,
    /// `failed`).
    pub const OUTBOX_ROWS: &str = "oncebox_outbox_events";
    /// Gauge of DLQ rows, by `event_type` and `status` (`moved`, `in_process`, `resolved`,
    /// `to_retry`).
    pub const DLQ_ROWS: &str = "oncebox_dlq_events";
    /// Gauge of how long the oldest PENDING event of each `event_type` has waited since its commit,
    /// in seconds (0 when the type has none): the one number that says delivery is stuck.
    pub const OLDEST_PENDING_AGE: &str = "oncebox_oldest_pending_age_seconds";
    /// Counter of failed gauge refreshes (a count query failed; the gauges keep their last value).
    pub const GAUGE_REFRESH_ERRORS: &str = "oncebox_gauge_refresh_errors_total";
    /// Counter of durable inbox messages, by `consumer`, `event_type` and `outcome` (`stored`,
    /// `duplicate`: the listener's hand-off; `processed`, `retried`, `failed`, `taken_over`: the
    /// processor's runs).
    pub const STORED_MESSAGES: &str = "oncebox_stored_inbox_messages_total";
    /// Histogram of durable inbox handler runs in seconds (the commit included), by `consumer` and
    /// `event_type`.
    pub const STORED_HANDLER_DURATION: &str = "oncebox_stored_inbox_handler_duration_seconds";
    /// Histogram of the time from an event's write to its effect's commit in a durable inbox, in
    /// seconds, by `consumer` and `event_type` (the delivery delay's buckets).
    pub const STORED_LATENCY: &str = "oncebox_stored_inbox_latency_seconds";
    /// Gauge of durable inbox rows, by `consumer`, `event_type` and `status` (`received`,
    /// `processing`, `processed`, `failed`), set every 10 s by each running processor.
    pub const STORED_ROWS: &str = "oncebox_stored_inbox_rows";

    /// Every name above, for checks that a dashboard or an alert only uses names oncebox records.
    pub const ALL: &[&str] = &[
        TASK_RUNS,
        TASK_DURATION,
        TASKS_RUNNING,
        POLLING_DELAY,
        EVENTS_SETTLED,
        DELIVERY_DELAY,
        SETTLES_REFUSED,
        JOB_ROWS,
        INBOX_EVENTS,
        CACHE_LOOKUPS,
        DLQ_MANUAL,
        OUTBOX_ROWS,
        DLQ_ROWS,
        OLDEST_PENDING_AGE,
        GAUGE_REFRESH_ERRORS,
        STORED_MESSAGES,
        STORED_HANDLER_DURATION,
        STORED_LATENCY,
        STORED_ROWS,
    ];
}
