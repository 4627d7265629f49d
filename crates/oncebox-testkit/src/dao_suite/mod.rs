//! The DAO suite: every storage contract of `oncebox-core` (outbox, DLQ, inbox, job lock, writer)
//! checked against a real database through a [`DaoHarness`].
//!
//! Each case gets a fresh, isolated dialect from the harness and disposes of it at the end, also
//! when an assertion fails.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use libtest_mimic::Failed;
use oncebox_core::event::{DlqFilter, DlqSelection, JobLease, OlderEvents};
use oncebox_core::{
    ClaimedBatch, Dialect, DlqStatus, ErrorKind, EventStatus, Headers, InboxClaim, NewOutboxEvent, OutboxDao,
    OutboxEvent, SchemaPlan, Settlement,
};
use uuid::Uuid;

use crate::harness::{AgedTable, DaoHarness};
use crate::runner::{Case, TestResult, fail};

mod dlq;
mod inbox;
mod lock;
mod outbox;
mod stored;

/// Every DAO case: the outbox's, then the DLQ's, the inbox's, the durable inbox's and the job
/// lock's.
pub fn cases<H: DaoHarness>() -> Vec<Case<H>> {
    [outbox::cases(), dlq::cases(), inbox::cases(), stored::cases(), lock::cases()].concat()
}

/// The event type most cases use.
const ORDERS: &str = "order-created";
/// A second event type.
const PAYMENTS: &str = "payment-received";
/// An age threshold the cases backdate rows past.
const HOUR: Duration = Duration::from_secs(3_600);
/// Backdating by this much puts a row past [`HOUR`].
const TWO_HOURS: Duration = Duration::from_secs(7_200);

/// A new event of `event_type` whose payload names `index`.
pub fn new_event(event_type: &str, index: usize) -> NewOutboxEvent {
    NewOutboxEvent {
        id: Uuid::now_v7(),
        event_type: event_type.to_owned(),
        payload: format!("{{\"index\":{index}}}"),
        payload_type: "TestEvent".to_owned(),
        headers: Headers::new(),
        partition_key: None,
    }
}

/// `count` new events of `event_type`, ids ascending.
pub fn new_events(event_type: &str, count: usize) -> Vec<NewOutboxEvent> {
    (0..count).map(|index| new_event(event_type, index)).collect()
}

/// Gives `event` the content writers get wrong most easily: quotes and non-ASCII in a header, a
/// trace header, a partition key, emoji and SQL in the payload.
pub fn make_awkward(event: &mut NewOutboxEvent) {
    event
        .headers
        .insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    event.headers.insert("note".into(), "quotes \" and ünïcödé ✓".into());
    event.partition_key = Some("customer-7".into());
    event.payload = "{\"emoji\":\"🚀\",\"text\":\"'); DROP TABLE x; --\"}".into();
}

/// Checks that two writers stored `first[i]` and `second[i]` as the same row: what was written
/// (payload, headers) read back unchanged, and every column but the id and the write time equal.
pub async fn assert_written_alike(
    outbox: &dyn OutboxDao,
    first: &[NewOutboxEvent],
    second: &[NewOutboxEvent],
) -> TestResult {
    assert_eq!(first.len(), second.len());
    let comparable = |mut row: OutboxEvent| {
        assert_eq!(row.created_at, row.updated_at, "a new row's updated_at is its created_at");
        assert_eq!(row.created_at, row.next_retry_at, "a new row is due at once");
        row.id = Uuid::nil();
        row.created_at = DateTime::UNIX_EPOCH;
        row.updated_at = row.created_at;
        row.next_retry_at = row.created_at;
        row
    };
    for (one, other) in first.iter().zip(second) {
        let by_first = stored(outbox, one.id).await?;
        let by_second = stored(outbox, other.id).await?;
        assert_eq!(by_first.headers, one.headers);
        assert_eq!(by_first.payload, one.payload);
        assert_eq!(comparable(by_first), comparable(by_second));
    }
    Ok(())
}

/// The ids of `events`, in order.
pub fn ids_of(events: &[NewOutboxEvent]) -> Vec<Uuid> {
    events.iter().map(|event| event.id).collect()
}

fn claimed_ids(batch: &ClaimedBatch) -> Vec<Uuid> {
    batch.events.iter().map(|event| event.id).collect()
}

fn processed_all(batch: &ClaimedBatch) -> Vec<Settlement> {
    batch.events.iter().map(|event| Settlement::Processed { id: event.id }).collect()
}

/// Runs `$body(&harness, &dialect)` on a fresh dialect from `$harness` (an `Arc<H>`), which is
/// disposed of afterwards even when the body fails or panics; evaluates to the case's result.
macro_rules! on_a_fresh_dialect {
    ($harness:expr, $body:path) => {{
        let harness = $harness;
        let dialect = harness.fresh().await.map_err(fail)?;
        let outcome = AssertUnwindSafe($body(&*harness, &dialect)).catch_unwind().await;
        let disposed = harness.dispose(dialect).await;
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(result) => {
                result?;
                disposed.map_err(fail)
            }
        }
    }};
}
pub(crate) use on_a_fresh_dialect;

/// Defines `async fn $name<H: DaoHarness>(harness: Arc<H>) -> TestResult` running
/// `$body(&harness, &dialect)` on a fresh dialect (see [`on_a_fresh_dialect`]).
macro_rules! dao_test {
    ($($name:ident => $body:ident;)*) => {$(
        async fn $name<H: DaoHarness>(harness: Arc<H>) -> TestResult {
            $crate::dao_suite::on_a_fresh_dialect!(harness, $body)
        }
    )*};
}
pub(crate) use dao_test;

/// Defines an area's cases, each named once: every `async fn name(harness, dialect) { body }`
/// becomes the case `name`, its body running on a fresh dialect (see [`on_a_fresh_dialect`]) with
/// `harness: &H` and `dialect: &H::Dialect`, and `cases()` lists them in order.
macro_rules! dao_cases {
    ($($(#[$meta:meta])* async fn $name:ident($harness:ident, $dialect:ident) $body:block)*) => {
        /// This area's cases, in order.
        pub fn cases<H: DaoHarness>() -> Vec<Case<H>> {
            vec![$(Case { name: stringify!($name), run: |harness| Box::pin($name(harness)) }),*]
        }

        $(
            $(#[$meta])*
            async fn $name<H: DaoHarness>(harness: Arc<H>) -> TestResult {
                async fn body<H: DaoHarness>($harness: &H, $dialect: &H::Dialect) -> TestResult $body
                on_a_fresh_dialect!(harness, body)
            }
        )*
    };
}
use dao_cases;

async fn publish<H: DaoHarness>(harness: &H, dialect: &H::Dialect, events: &[NewOutboxEvent]) -> TestResult {
    harness.publish(dialect, events, true).await.map_err(fail)
}

async fn stored(outbox: &dyn OutboxDao, id: Uuid) -> Result<OutboxEvent, Failed> {
    outbox.get(id).await.map_err(fail)?.ok_or_else(|| fail(format!("event {id} is not in the outbox")))
}

/// Whether `actual` is within `tolerance` of `expected`.
fn close_to(actual: DateTime<Utc>, expected: DateTime<Utc>, tolerance: Duration) -> bool {
    let tolerance = chrono::Duration::from_std(tolerance).unwrap_or(chrono::Duration::MAX);
    (actual - expected).abs() <= tolerance
}

/// Publishes `count` events of [`ORDERS`], claims them all and settles them with `settle`.
async fn published_and_claimed<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
    count: usize,
) -> Result<(Vec<NewOutboxEvent>, ClaimedBatch), Failed> {
    let events = new_events(ORDERS, count);
    publish(harness, dialect, &events).await?;
    let batch =
        dialect.outbox_dao().claim(ORDERS, u32::try_from(count).map_err(fail)?).await.map_err(fail)?;
    assert_eq!(batch.len(), count, "every published event should be claimed");
    Ok((events, batch))
}
