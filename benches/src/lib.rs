//! Shared helpers of the oncebox benchmark binaries (`pg_relay`, `pg_idle`, `pg_pool_share`, `latency`,
//! `mysql_relay`, `rabbit_publish`, `kafka_publish`, `relay_memory`): the server address from the environment,
//! fixed-size payloads, fresh names, latency summaries, a sender that only acknowledges and an
//! observed outbox DAO ([`observe`]), this process's resident memory ([`process`]);
//! [`pg_backlog`] holds the PostgreSQL backlog and raw loop the relay benchmarks share.
//!
//! The binaries are measurements, not tests: they print tables and never assert a target.

use std::error::Error;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Deadline, NewOutboxEvent, OutboundMessage, SendError, Sender};
use serde::Serialize;

pub mod kafka;
pub mod observe;
pub mod pg_backlog;
pub mod process;
pub mod rabbit;

/// The boxed error every benchmark `main` returns.
pub type BenchError = Box<dyn Error + Send + Sync>;

/// The result type of the benchmark code.
pub type BenchResult<T> = Result<T, BenchError>;

/// Size of every benchmark payload, in bytes of JSON text.
pub const PAYLOAD_BYTES: usize = 200;

/// The event type every benchmark publishes and relays.
pub const EVENT_TYPE: &str = "bench-event";

/// The server address from `variable`, or a message that names the variable and an example value.
pub fn server_url(variable: &str, example: &str) -> BenchResult<String> {
    match std::env::var(variable) {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => {
            Err(format!("{variable} is not set; run e.g. `{variable}={example} cargo run --release …`")
                .into())
        }
    }
}

/// Runs a benchmark's `run` with its `args` and the server URL from `variable` on a multi-thread
/// runtime: what every benchmark `main` does.
pub fn run_against<A, F>(
    variable: &str,
    example: &str,
    args: A,
    run: impl FnOnce(A, String) -> F,
) -> Result<(), Box<dyn Error>>
where
    F: std::future::Future<Output = BenchResult<()>>,
{
    let url = server_url(variable, example).map_err(|error| -> Box<dyn Error> { error })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args, url)).map_err(|error| -> Box<dyn Error> { error })
}

/// A name no concurrent run uses: `<stem><8 hex digits>`.
pub fn fresh_name(stem: &str) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{stem}{}", &random[..8])
}

/// The business payload of the benchmarks; its JSON form is exactly [`PAYLOAD_BYTES`] long.
#[derive(Debug, Clone, Serialize)]
pub struct BenchPayload {
    /// A running number.
    pub order: u64,
    /// A fixed-width customer reference.
    pub customer: String,
    /// Padding that brings the JSON text to [`PAYLOAD_BYTES`].
    pub note: String,
}

impl BenchPayload {
    /// The payload for `order`, padded so its JSON is exactly [`PAYLOAD_BYTES`] long.
    pub fn new(order: u64) -> Self {
        let mut payload =
            Self { order, customer: format!("customer-{:08}", order % 100_000_000), note: String::new() };
        let bare = payload.json_len();
        payload.note = "x".repeat(PAYLOAD_BYTES.saturating_sub(bare));
        payload
    }

    /// The payload as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn json_len(&self) -> usize {
        self.to_json().len()
    }
}

/// Mean and percentiles of a set of durations.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile (nearest rank).
    pub p99: Duration,
    /// 99.9th percentile (nearest rank).
    pub p999: Duration,
    /// The largest sample.
    pub max: Duration,
}

impl Summary {
    /// The summary of `samples` (all zero when there are none).
    pub fn of(samples: &[Duration]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let count = sorted.len();
        Self {
            count,
            mean: total / u32::try_from(count).unwrap_or(u32::MAX),
            p50: sorted[nearest_rank(count, 0.50)],
            p99: sorted[nearest_rank(count, 0.99)],
            p999: sorted[nearest_rank(count, 0.999)],
            max: sorted[count - 1],
        }
    }
}

/// The index of the `quantile` sample of `count` sorted samples, by the nearest-rank method.
fn nearest_rank(count: usize, quantile: f64) -> usize {
    let rank = (quantile * count as f64).ceil() as usize;
    rank.clamp(1, count) - 1
}

/// A duration in milliseconds with three decimals, for tables.
pub fn millis(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64() * 1e3)
}

/// The outbox event a backlog is made of: type `event_type`, the payload of `index`.
pub fn bench_event(event_type: &str, index: u64) -> NewOutboxEvent {
    NewOutboxEvent {
        id: uuid::Uuid::now_v7(),
        event_type: event_type.to_owned(),
        payload: BenchPayload::new(index).to_json(),
        payload_type: std::any::type_name::<BenchPayload>().to_owned(),
        headers: Default::default(),
        partition_key: None,
    }
}

/// The message a publish benchmark sends to `topic`: a fresh id as its key and the payload of
/// `index`, as the relay would build it.
pub fn bench_message(topic: &str, index: u64) -> OutboundMessage {
    let id = uuid::Uuid::now_v7();
    OutboundMessage {
        id,
        event_type: EVENT_TYPE.to_owned(),
        topic: topic.to_owned(),
        key: id.to_string(),
        payload: BenchPayload::new(index).to_json(),
        payload_type: std::any::type_name::<BenchPayload>().to_owned(),
        headers: Default::default(),
        created_at: chrono::Utc::now(),
    }
}

/// Prints the latency table of interleaved variants: one row per label, with its summary.
pub fn print_variants<'a>(labels: impl IntoIterator<Item = &'a str>, summaries: &[Summary]) {
    println!("\n| variant | n | mean ms | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|");
    for (label, summary) in labels.into_iter().zip(summaries) {
        println!(
            "| {label} | {} | {} | {} | {} |",
            summary.count,
            millis(summary.mean),
            millis(summary.p50),
            millis(summary.p99)
        );
    }
}

/// Prints the ratio table of `summaries`: for each `(label, a, b)`, variant `a`'s mean and median
/// over variant `b`'s.
pub fn print_ratios(summaries: &[Summary], pairs: &[(&str, usize, usize)]) {
    let ratio = |a: usize, b: usize, pick: fn(&Summary) -> Duration| {
        pick(&summaries[a]).as_secs_f64() / pick(&summaries[b]).as_secs_f64()
    };
    println!("\n| ratio | of means | of p50 |\n|---|---:|---:|");
    for &(label, a, b) in pairs {
        println!("| {label} | {:.3} | {:.3} |", ratio(a, b, |s| s.mean), ratio(a, b, |s| s.p50));
    }
}

/// `count` per `elapsed` second.
pub fn per_second(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 { count as f64 / seconds } else { 0.0 }
}

/// The median of `values` (0 when empty).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) { (sorted[middle - 1] + sorted[middle]) / 2.0 } else { sorted[middle] }
}

/// A sender that acknowledges every message and keeps nothing, so the broker is never what limits
/// a drain.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingSender;

#[async_trait]
impl Sender for CountingSender {
    async fn send(&self, batch: &[OutboundMessage], _deadline: Deadline) -> Vec<Result<(), SendError>> {
        batch.iter().map(|_| Ok(())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_exactly_200_bytes() {
        for order in [0, 7, 123_456, u64::MAX] {
            assert_eq!(BenchPayload::new(order).to_json().len(), PAYLOAD_BYTES, "order {order}");
        }
    }

    #[test]
    fn summaries_use_nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let summary = Summary::of(&samples);
        assert_eq!(summary.p50, Duration::from_millis(50));
        assert_eq!(summary.p99, Duration::from_millis(99));
        assert_eq!(summary.p999, Duration::from_millis(100));
        assert_eq!(summary.max, Duration::from_millis(100));
        assert_eq!(summary.mean, Duration::from_micros(50_500));
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
