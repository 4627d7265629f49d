//! The recording hook.

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use oncebox_core::OutboxMetrics;
use oncebox_core::hooks::{DlqManualAction, InboxOutcome, StoredOutcome, TaskOutcome};
use oncebox_core::stored::InboxStatus;

use crate::names;

/// Records oncebox's activity into the installed [`metrics`] recorder.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metrics;

impl Metrics {
    /// The hook.
    pub fn new() -> Self {
        Self
    }
}

fn outcome_label(outcome: TaskOutcome) -> &'static str {
    match outcome {
        TaskOutcome::Succeeded { full: true } => "full",
        TaskOutcome::Succeeded { full: false } => "short",
        TaskOutcome::Failed => "failed",
        TaskOutcome::Skipped => "skipped",
    }
}

fn inbox_label(outcome: InboxOutcome) -> &'static str {
    match outcome {
        InboxOutcome::Consumed => "consumed",
        InboxOutcome::Duplicate => "duplicate",
        InboxOutcome::Failed => "failed",
        InboxOutcome::Cleaned => "cleaned",
    }
}

impl OutboxMetrics for Metrics {
    fn task_started(&self, task: &str) {
        gauge!(names::TASKS_RUNNING, "task" => task.to_owned()).increment(1.0);
    }

    fn task_finished(&self, task: &str, elapsed: Duration, outcome: TaskOutcome) {
        gauge!(names::TASKS_RUNNING, "task" => task.to_owned()).decrement(1.0);
        counter!(names::TASK_RUNS, "task" => task.to_owned(), "outcome" => outcome_label(outcome))
            .increment(1);
        histogram!(names::TASK_DURATION, "task" => task.to_owned()).record(elapsed.as_secs_f64());
    }

    fn polling_delay(&self, task: &str, delay: Duration) {
        gauge!(names::POLLING_DELAY, "task" => task.to_owned()).set(delay.as_secs_f64());
    }

    fn events_settled(&self, event_type: &str, delivered: u64, retried: u64, failed: u64) {
        for (outcome, count) in [("delivered", delivered), ("retried", retried), ("failed", failed)] {
            if count > 0 {
                counter!(names::EVENTS_SETTLED, "event_type" => event_type.to_owned(), "outcome" => outcome)
                    .increment(count);
            }
        }
    }

    fn delivery_delays(&self, event_type: &str, delays: &[Duration]) {
        if delays.is_empty() {
            return;
        }
        let histogram = histogram!(names::DELIVERY_DELAY, "event_type" => event_type.to_owned());
        for delay in delays {
            histogram.record(delay.as_secs_f64());
        }
    }

    fn dlq_manual(&self, action: DlqManualAction, count: u64) {
        counter!(names::DLQ_MANUAL, "action" => action.as_str()).increment(count);
    }

    fn settles_refused(&self, event_type: &str, count: u64) {
        counter!(names::SETTLES_REFUSED, "event_type" => event_type.to_owned()).increment(count);
    }

    fn job_rows(&self, job: &str, count: u64) {
        counter!(names::JOB_ROWS, "job" => job.to_owned()).increment(count);
    }

    fn inbox(&self, consumer: &str, outcome: InboxOutcome, count: u64) {
        counter!(names::INBOX_EVENTS, "consumer" => consumer.to_owned(), "outcome" => inbox_label(outcome))
            .increment(count);
    }

    fn stored_message(&self, consumer: &str, event_type: &str, outcome: StoredOutcome) {
        counter!(names::STORED_MESSAGES, "consumer" => consumer.to_owned(), "event_type" => event_type.to_owned(), "outcome" => outcome.as_str())
            .increment(1);
    }

    fn stored_handler_duration(&self, consumer: &str, event_type: &str, elapsed: Duration) {
        histogram!(names::STORED_HANDLER_DURATION, "consumer" => consumer.to_owned(), "event_type" => event_type.to_owned())
            .record(elapsed.as_secs_f64());
    }

    fn stored_latency(&self, consumer: &str, event_type: &str, latency: Duration) {
        histogram!(names::STORED_LATENCY, "consumer" => consumer.to_owned(), "event_type" => event_type.to_owned())
            .record(latency.as_secs_f64());
    }

    fn stored_rows(&self, consumer: &str, event_type: &str, status: InboxStatus, rows: u64) {
        let status = match status {
            InboxStatus::Received => "received",
            InboxStatus::Processing => "processing",
            InboxStatus::Processed => "processed",
            InboxStatus::Failed => "failed",
        };
        gauge!(names::STORED_ROWS, "consumer" => consumer.to_owned(), "event_type" => event_type.to_owned(), "status" => status)
            .set(rows as f64);
    }

    fn cache_lookup(&self, hit: bool) {
        counter!(names::CACHE_LOOKUPS, "result" => if hit { "hit" } else { "miss" }).increment(1);
    }
}
