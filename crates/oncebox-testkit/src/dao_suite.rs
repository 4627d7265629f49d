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
use oncebox_core::event::{DlqFilter, DlqSelection, JobLease};
use oncebox_core::{
    ClaimedBatch, Dialect, DlqStatus, ErrorKind, EventStatus, Headers, NewOutboxEvent, OutboxDao,
    OutboxEvent, SchemaPlan, Settlement,
};
use uuid::Uuid;

use crate::case;
use crate::harness::{AgedTable, DaoHarness};
use crate::runner::{Case, TestResult, fail};

/// Every DAO case.
pub fn cases<H: DaoHarness>() -> Vec<Case<H>> {
    vec![
        case!("publish_is_visible_after_commit", publish_is_visible_after_commit),
        case!("publish_is_invisible_after_rollback", publish_is_invisible_after_rollback),
        case!("batch_publish_of_1000_events", batch_publish_of_1000_events),
        case!("claim_respects_event_type", claim_respects_event_type),
        case!("claim_respects_limit", claim_respects_limit),
        case!("claim_skips_rows_not_due_yet", claim_skips_rows_not_due_yet),
        case!("claim_takes_oldest_next_retry_at_first", claim_takes_oldest_next_retry_at_first),
        case!("two_concurrent_claims_never_share_a_row", two_concurrent_claims_never_share_a_row),
        case!("four_claiming_tasks_claim_every_row_once", four_claiming_tasks_claim_every_row_once),
        case!("settle_processed_counts_the_attempt", settle_processed_counts_the_attempt),
        case!("settle_retry_schedules_the_next_attempt", settle_retry_schedules_the_next_attempt),
        case!("settle_failed_keeps_the_error", settle_failed_keeps_the_error),
        case!("a_stale_claim_token_cannot_settle", a_stale_claim_token_cannot_settle),
        case!("stuck_recovery_keeps_attempts_and_spares_young_rows", stuck_recovery_keeps_attempts),
        case!("stuck_recovery_fails_a_row_after_max_recoveries", stuck_recovery_fails_after_max_recoveries),
        case!("create_schema_adds_recoveries_to_an_older_outbox_table", create_schema_adds_recoveries),
        case!("clean_up_deletes_only_old_processed_rows_in_batches", clean_up_deletes_old_processed),
        case!("counts_group_by_type_and_status", counts_group_by_type_and_status),
        case!("dlq_transfer_to_keeps_id_and_data", dlq_transfer_to_keeps_id_and_data),
        case!("dlq_transfer_from_makes_events_claimable_again", dlq_transfer_from_redrives),
        case!("dlq_set_status_refuses_in_process", dlq_set_status_refuses_in_process),
        case!("dlq_set_status_and_delete_by_ids_and_type", dlq_set_status_and_delete),
        case!("dlq_list_and_count_filter_and_page", dlq_list_and_count_filter_and_page),
        case!("dlq_clean_up_deletes_only_old_resolved_rows", dlq_clean_up_deletes_old_resolved),
        case!("inbox_records_a_single_id_once", inbox_records_a_single_id_once),
        case!("inbox_batch_keeps_order_and_filters_duplicates", inbox_batch_filters_duplicates),
        case!("inbox_consumers_are_independent", inbox_consumers_are_independent),
        case!("inbox_transactional_record_follows_the_transaction", inbox_record_follows_transaction),
        case!("inbox_forget_removes_a_record", inbox_forget_removes_a_record),
        case!("inbox_clean_up_deletes_old_records_in_batches", inbox_clean_up_deletes_old_records),
        case!("job_lock_has_one_winner_among_concurrent_owners", job_lock_has_one_winner),
        case!("job_lock_held_refuses_other_owners", job_lock_held_refuses_others),
        case!("job_lock_expires_after_lock_at_most_for", job_lock_expires),
        case!("job_lock_only_the_owner_releases", job_lock_only_the_owner_releases),
        case!("job_lock_stays_held_for_lock_at_least_for", job_lock_stays_held_at_least),
        case!("job_lock_durations_are_taken_per_call", job_lock_durations_are_per_call),
        case!("payload_texts_round_trip", payload_texts_round_trip),
        case!("large_payload_round_trips", large_payload_round_trips),
        case!("headers_and_partition_key_survive_claim", headers_and_partition_key_survive_claim),
    ]
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

/// Defines `async fn $name<H: DaoHarness>(harness: Arc<H>) -> TestResult` running
/// `$body(&harness, &dialect)` on a fresh dialect, which is disposed of afterwards even when the
/// body fails or panics.
macro_rules! dao_test {
    ($($name:ident => $body:ident;)*) => {$(
        async fn $name<H: DaoHarness>(harness: Arc<H>) -> TestResult {
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
        }
    )*};
}
pub(crate) use dao_test;

dao_test! {
    publish_is_visible_after_commit => publish_is_visible_after_commit_body;
    publish_is_invisible_after_rollback => publish_is_invisible_after_rollback_body;
    batch_publish_of_1000_events => batch_publish_of_1000_events_body;
    claim_respects_event_type => claim_respects_event_type_body;
    claim_respects_limit => claim_respects_limit_body;
    claim_skips_rows_not_due_yet => claim_skips_rows_not_due_yet_body;
    claim_takes_oldest_next_retry_at_first => claim_takes_oldest_next_retry_at_first_body;
    two_concurrent_claims_never_share_a_row => two_concurrent_claims_never_share_a_row_body;
    four_claiming_tasks_claim_every_row_once => four_claiming_tasks_claim_every_row_once_body;
    settle_processed_counts_the_attempt => settle_processed_counts_the_attempt_body;
    settle_retry_schedules_the_next_attempt => settle_retry_schedules_the_next_attempt_body;
    settle_failed_keeps_the_error => settle_failed_keeps_the_error_body;
    a_stale_claim_token_cannot_settle => a_stale_claim_token_cannot_settle_body;
    stuck_recovery_keeps_attempts => stuck_recovery_keeps_attempts_body;
    stuck_recovery_fails_after_max_recoveries => stuck_recovery_fails_after_max_recoveries_body;
    create_schema_adds_recoveries => create_schema_adds_recoveries_body;
    clean_up_deletes_old_processed => clean_up_deletes_old_processed_body;
    counts_group_by_type_and_status => counts_group_by_type_and_status_body;
    dlq_transfer_to_keeps_id_and_data => dlq_transfer_to_keeps_id_and_data_body;
    dlq_transfer_from_redrives => dlq_transfer_from_redrives_body;
    dlq_set_status_refuses_in_process => dlq_set_status_refuses_in_process_body;
    dlq_set_status_and_delete => dlq_set_status_and_delete_body;
    dlq_list_and_count_filter_and_page => dlq_list_and_count_filter_and_page_body;
    dlq_clean_up_deletes_old_resolved => dlq_clean_up_deletes_old_resolved_body;
    inbox_records_a_single_id_once => inbox_records_a_single_id_once_body;
    inbox_batch_filters_duplicates => inbox_batch_filters_duplicates_body;
    inbox_consumers_are_independent => inbox_consumers_are_independent_body;
    inbox_record_follows_transaction => inbox_record_follows_transaction_body;
    inbox_forget_removes_a_record => inbox_forget_removes_a_record_body;
    inbox_clean_up_deletes_old_records => inbox_clean_up_deletes_old_records_body;
    job_lock_has_one_winner => job_lock_has_one_winner_body;
    job_lock_held_refuses_others => job_lock_held_refuses_others_body;
    job_lock_expires => job_lock_expires_body;
    job_lock_only_the_owner_releases => job_lock_only_the_owner_releases_body;
    job_lock_stays_held_at_least => job_lock_stays_held_at_least_body;
    job_lock_durations_are_per_call => job_lock_durations_are_per_call_body;
    payload_texts_round_trip => payload_texts_round_trip_body;
    large_payload_round_trips => large_payload_round_trips_body;
    headers_and_partition_key_survive_claim => headers_and_partition_key_survive_claim_body;
}

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

// ---- publishing -------------------------------------------------------------------------------

async fn publish_is_visible_after_commit_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let event = new_event(ORDERS, 1);
    publish(harness, dialect, std::slice::from_ref(&event)).await?;
    let outbox = dialect.outbox_dao();
    let row = stored(&*outbox, event.id).await?;
    assert_eq!(row.status, EventStatus::Pending);
    assert_eq!(row.attempts, 0, "a new event has no attempts");
    assert_eq!(row.claim_token, None);
    assert_eq!(row.processed_at, None);
    assert_eq!(row.last_error, None);
    assert_eq!(row.created_at, row.updated_at, "created_at and updated_at are both the insert time");
    assert!(row.next_retry_at <= row.created_at, "a new event is due at once");
    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(claimed_ids(&batch), vec![event.id]);
    // An empty publish is a no-op, not an error.
    publish(harness, dialect, &[]).await?;
    Ok(())
}

async fn publish_is_invisible_after_rollback_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let events = new_events(ORDERS, 3);
    harness.publish(dialect, &events, false).await.map_err(fail)?;
    let outbox = dialect.outbox_dao();
    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert!(batch.is_empty(), "rolled-back events must never be claimed: {:?}", claimed_ids(&batch));
    for event in &events {
        assert!(outbox.get(event.id).await.map_err(fail)?.is_none(), "rolled-back event {} exists", event.id);
    }
    assert_eq!(outbox.counts().await.map_err(fail)?.total(), 0);
    Ok(())
}

async fn batch_publish_of_1000_events_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let events = new_events(ORDERS, 1000);
    publish(harness, dialect, &events).await?;
    let outbox = dialect.outbox_dao();
    let counts = outbox.counts().await.map_err(fail)?;
    assert_eq!(counts.status_total(EventStatus::Pending), 1000);
    let batch = outbox.claim(ORDERS, 2000).await.map_err(fail)?;
    let claimed: HashSet<Uuid> = claimed_ids(&batch).into_iter().collect();
    assert_eq!(claimed, ids_of(&events).into_iter().collect::<HashSet<_>>(), "every event is claimable");
    Ok(())
}

// ---- claiming ---------------------------------------------------------------------------------

async fn claim_respects_event_type_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let orders = new_events(ORDERS, 3);
    let payments = new_events(PAYMENTS, 2);
    publish(harness, dialect, &[orders.clone(), payments.clone()].concat()).await?;
    let outbox = dialect.outbox_dao();
    let batch = outbox.claim(PAYMENTS, 10).await.map_err(fail)?;
    assert_eq!(batch.event_type, PAYMENTS);
    assert_eq!(claimed_ids(&batch), ids_of(&payments), "only rows of the claimed type");
    assert!(batch.events.iter().all(|event| event.event_type == PAYMENTS));
    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(claimed_ids(&batch), ids_of(&orders));
    assert!(outbox.claim("unknown-type", 10).await.map_err(fail)?.is_empty());
    Ok(())
}

async fn claim_respects_limit_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let events = new_events(ORDERS, 5);
    publish(harness, dialect, &events).await?;
    let outbox = dialect.outbox_dao();
    let first = outbox.claim(ORDERS, 2).await.map_err(fail)?;
    assert_eq!(claimed_ids(&first), ids_of(&events[..2]), "the limit caps the batch");
    assert!(first.events.iter().all(|event| event.status == EventStatus::InProcess));
    assert!(first.events.iter().all(|event| event.claim_token == Some(first.claim_token)));
    let second = outbox.claim(ORDERS, 2).await.map_err(fail)?;
    assert_eq!(claimed_ids(&second), ids_of(&events[2..4]));
    assert_ne!(first.claim_token, second.claim_token, "every batch gets a fresh claim token");
    let third = outbox.claim(ORDERS, 2).await.map_err(fail)?;
    assert_eq!(claimed_ids(&third), ids_of(&events[4..]));
    assert!(outbox.claim(ORDERS, 2).await.map_err(fail)?.is_empty(), "claimed rows are not claimed again");
    Ok(())
}

async fn claim_skips_rows_not_due_yet_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let (events, batch) = published_and_claimed(harness, dialect, 2).await?;
    let outbox = dialect.outbox_dao();
    let settlements = vec![
        Settlement::Retry { id: events[0].id, delay: HOUR, error: "broker away".into() },
        Settlement::Retry { id: events[1].id, delay: Duration::ZERO, error: "broker away".into() },
    ];
    outbox.settle(&batch, &settlements).await.map_err(fail)?;
    let again = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(claimed_ids(&again), vec![events[1].id], "a row due in an hour is not claimed now");
    Ok(())
}

async fn claim_takes_oldest_next_retry_at_first_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let events = new_events(ORDERS, 4);
    publish(harness, dialect, &events).await?;
    // Due times: event 2 oldest, then 0, then 3; event 1 keeps its insert time.
    harness
        .backdate(dialect, AgedTable::Events, &[events[2].id], Duration::from_secs(300))
        .await
        .map_err(fail)?;
    harness
        .backdate(dialect, AgedTable::Events, &[events[0].id], Duration::from_secs(200))
        .await
        .map_err(fail)?;
    harness
        .backdate(dialect, AgedTable::Events, &[events[3].id], Duration::from_secs(100))
        .await
        .map_err(fail)?;
    let outbox = dialect.outbox_dao();
    let batch = outbox.claim(ORDERS, 3).await.map_err(fail)?;
    assert_eq!(
        claimed_ids(&batch),
        vec![events[2].id, events[0].id, events[3].id],
        "oldest next_retry_at first"
    );
    let batch = outbox.claim(ORDERS, 3).await.map_err(fail)?;
    assert_eq!(claimed_ids(&batch), vec![events[1].id]);
    Ok(())
}

async fn two_concurrent_claims_never_share_a_row_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let events = new_events(ORDERS, 100);
    publish(harness, dialect, &events).await?;
    let outbox = dialect.outbox_dao();
    let (first, second) = tokio::join!(outbox.claim(ORDERS, 50), outbox.claim(ORDERS, 50));
    let (first, second) = (first.map_err(fail)?, second.map_err(fail)?);
    let first_ids: HashSet<Uuid> = claimed_ids(&first).into_iter().collect();
    let second_ids: HashSet<Uuid> = claimed_ids(&second).into_iter().collect();
    assert!(first_ids.is_disjoint(&second_ids), "two claims shared rows");
    assert_eq!(first_ids.len() + second_ids.len(), 100, "together the claims took every row");
    Ok(())
}

async fn four_claiming_tasks_claim_every_row_once_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let events = new_events(ORDERS, 500);
    publish(harness, dialect, &events).await?;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let outbox = dialect.outbox_dao();
        tasks.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            loop {
                let batch = outbox.claim(ORDERS, 17).await?;
                if batch.is_empty() {
                    return Ok::<_, oncebox_core::Error>(claimed);
                }
                let report = outbox.settle(&batch, &processed_all(&batch)).await?;
                assert_eq!(report.settled, batch.len() as u64, "a fresh claim settles in full");
                claimed.extend(claimed_ids(&batch));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.map_err(fail)?.map_err(fail)?);
    }
    let unique: HashSet<Uuid> = all.iter().copied().collect();
    assert_eq!(all.len(), 500, "some row was claimed twice or not at all");
    assert_eq!(unique, ids_of(&events).into_iter().collect::<HashSet<_>>());
    Ok(())
}

// ---- settling ---------------------------------------------------------------------------------

async fn settle_processed_counts_the_attempt_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let (events, batch) = published_and_claimed(harness, dialect, 3).await?;
    let outbox = dialect.outbox_dao();
    let report = outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (3, 0));
    for event in &events {
        let row = stored(&*outbox, event.id).await?;
        assert_eq!(row.status, EventStatus::Processed);
        assert_eq!(row.attempts, 1, "the delivery counts as attempt 1");
        assert_eq!(row.claim_token, None, "settling clears the claim token");
        assert_eq!(row.last_error, None);
        let processed_at = row.processed_at.ok_or_else(|| fail("processed_at is not set"))?;
        assert!(close_to(processed_at, row.updated_at, Duration::from_secs(1)));
    }
    // Settling again is refused: the rows no longer hold the claim.
    let report = outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (0, 3));
    Ok(())
}

async fn settle_retry_schedules_the_next_attempt_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let (events, batch) = published_and_claimed(harness, dialect, 1).await?;
    let id = events[0].id;
    let outbox = dialect.outbox_dao();
    let delay = Duration::from_millis(90_250);
    let report = outbox
        .settle(&batch, &[Settlement::Retry { id, delay, error: "connection refused".into() }])
        .await
        .map_err(fail)?;
    assert_eq!((report.settled, report.refused), (1, 0));
    let row = stored(&*outbox, id).await?;
    assert_eq!(row.status, EventStatus::Pending);
    assert_eq!(row.attempts, 1);
    assert_eq!(row.claim_token, None);
    assert_eq!(row.last_error.as_deref(), Some("connection refused"));
    let expected = row.updated_at + chrono::Duration::from_std(delay).map_err(fail)?;
    assert!(
        close_to(row.next_retry_at, expected, Duration::from_secs(1)),
        "next_retry_at {} should be about now + {delay:?} = {expected}",
        row.next_retry_at
    );

    // A second failure counts attempt 2, and a long error text is shortened, not refused.
    harness.backdate(dialect, AgedTable::Events, &[id], TWO_HOURS).await.map_err(fail)?;
    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(claimed_ids(&batch), vec![id], "a row is claimable once its retry is due");
    let long_error = "x".repeat(20_000);
    outbox
        .settle(&batch, &[Settlement::Retry { id, delay: Duration::ZERO, error: long_error }])
        .await
        .map_err(fail)?;
    let row = stored(&*outbox, id).await?;
    assert_eq!(row.attempts, 2);
    let stored_error = row.last_error.unwrap_or_default();
    assert!(!stored_error.is_empty() && stored_error.len() < 20_000, "last_error should be shortened");

    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
    let row = stored(&*outbox, id).await?;
    assert_eq!((row.status, row.attempts), (EventStatus::Processed, 3));
    assert_eq!(row.last_error, None, "a delivery clears the last error");
    Ok(())
}

async fn settle_failed_keeps_the_error_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let (events, batch) = published_and_claimed(harness, dialect, 2).await?;
    let outbox = dialect.outbox_dao();
    let settlements = vec![
        Settlement::Failed { id: events[0].id, error: "message too large".into() },
        Settlement::Processed { id: events[1].id },
    ];
    let report = outbox.settle(&batch, &settlements).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (2, 0));
    let failed = stored(&*outbox, events[0].id).await?;
    assert_eq!(failed.status, EventStatus::Failed);
    assert_eq!(failed.attempts, 1);
    assert_eq!(failed.claim_token, None);
    assert_eq!(failed.last_error.as_deref(), Some("message too large"));
    assert_eq!(stored(&*outbox, events[1].id).await?.status, EventStatus::Processed);
    assert!(outbox.claim(ORDERS, 10).await.map_err(fail)?.is_empty(), "FAILED rows are never claimed");
    Ok(())
}

async fn a_stale_claim_token_cannot_settle_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let (events, old_batch) = published_and_claimed(harness, dialect, 3).await?;
    let outbox = dialect.outbox_dao();
    // The first worker stalls: its batch is recovered as stuck and claimed by a second worker.
    harness.backdate(dialect, AgedTable::Events, &[], TWO_HOURS).await.map_err(fail)?;
    assert_eq!(outbox.recover_stuck(HOUR, 5, 100).await.map_err(fail)?, 3);
    let new_batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(new_batch.len(), 3);
    assert_ne!(new_batch.claim_token, old_batch.claim_token);

    // Both settle shapes are fenced: a dialect may settle an all-delivered batch with a statement
    // of its own.
    let report = outbox.settle(&old_batch, &processed_all(&old_batch)).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (0, 3), "a stale all-delivered batch must be refused");
    let failures: Vec<Settlement> = events
        .iter()
        .map(|event| Settlement::Failed { id: event.id, error: "late failure".into() })
        .collect();
    let report = outbox.settle(&old_batch, &failures).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (0, 3), "the stale batch must be refused");
    for event in &events {
        let row = stored(&*outbox, event.id).await?;
        assert_eq!(row.status, EventStatus::InProcess, "the new claimer's state is kept");
        assert_eq!(row.claim_token, Some(new_batch.claim_token));
        assert_eq!(row.attempts, 0);
        assert_eq!(row.last_error, None);
    }
    let report = outbox.settle(&new_batch, &processed_all(&new_batch)).await.map_err(fail)?;
    assert_eq!((report.settled, report.refused), (3, 0), "the current claimer settles");
    Ok(())
}

// ---- background jobs on the outbox ------------------------------------------------------------

async fn stuck_recovery_keeps_attempts_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let outbox = dialect.outbox_dao();
    // One row with an attempt behind it, then claimed again.
    let (retried, batch) = published_and_claimed(harness, dialect, 1).await?;
    let retried = retried[0].id;
    outbox
        .settle(&batch, &[Settlement::Retry { id: retried, delay: Duration::ZERO, error: "flaky".into() }])
        .await
        .map_err(fail)?;
    assert_eq!(claimed_ids(&outbox.claim(ORDERS, 10).await.map_err(fail)?), vec![retried]);
    // Two fresh stuck rows, and one young claimed row.
    let others = new_events(ORDERS, 3);
    publish(harness, dialect, &others).await?;
    let young_batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(young_batch.len(), 3);
    let old_ids = [retried, others[0].id, others[1].id];
    harness.backdate(dialect, AgedTable::Events, &old_ids, TWO_HOURS).await.map_err(fail)?;

    assert_eq!(outbox.recover_stuck(HOUR, 5, 2).await.map_err(fail)?, 2, "at most `limit` rows per call");
    assert_eq!(outbox.recover_stuck(HOUR, 5, 2).await.map_err(fail)?, 1);
    assert_eq!(outbox.recover_stuck(HOUR, 5, 2).await.map_err(fail)?, 0);
    for id in old_ids {
        let row = stored(&*outbox, id).await?;
        assert_eq!(row.status, EventStatus::Pending, "stuck row {id} is PENDING again");
        assert_eq!(row.claim_token, None);
    }
    assert_eq!(stored(&*outbox, retried).await?.attempts, 1, "recovery does not count an attempt");
    assert_eq!(stored(&*outbox, others[0].id).await?.attempts, 0);
    let young = stored(&*outbox, others[2].id).await?;
    assert_eq!(young.status, EventStatus::InProcess, "a row claimed just now is not stuck");
    assert_eq!(young.claim_token, Some(young_batch.claim_token));
    let reclaimed = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    assert_eq!(reclaimed.len(), 3, "recovered rows are claimable again");
    Ok(())
}

async fn stuck_recovery_fails_after_max_recoveries_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    const MAX_RECOVERIES: u32 = 3;
    let outbox = dialect.outbox_dao();
    // An event with one failed send behind it, then claimed by workers that all die sending it.
    let (published, batch) = published_and_claimed(harness, dialect, 1).await?;
    let crasher = published[0].id;
    outbox
        .settle(&batch, &[Settlement::Retry { id: crasher, delay: Duration::ZERO, error: "flaky".into() }])
        .await
        .map_err(fail)?;
    for recovery in 1..=MAX_RECOVERIES {
        assert_eq!(claimed_ids(&outbox.claim(ORDERS, 10).await.map_err(fail)?), vec![crasher]);
        harness.backdate(dialect, AgedTable::Events, &[crasher], TWO_HOURS).await.map_err(fail)?;
        assert_eq!(outbox.recover_stuck(HOUR, MAX_RECOVERIES, 100).await.map_err(fail)?, 1);
        let row = stored(&*outbox, crasher).await?;
        assert_eq!(row.attempts, 1, "recovery {recovery} does not count an attempt");
        assert_eq!(row.claim_token, None);
        if recovery < MAX_RECOVERIES {
            assert_eq!(row.status, EventStatus::Pending, "after {recovery} of {MAX_RECOVERIES} recoveries");
            assert_eq!(row.last_error.as_deref(), Some("flaky"));
        } else {
            assert_eq!(row.status, EventStatus::Failed, "after {MAX_RECOVERIES} recoveries");
            let last_error = row.last_error.unwrap_or_default();
            assert!(last_error.contains(&format!("recovered {MAX_RECOVERIES} times")), "{last_error}");
        }
    }
    assert!(outbox.claim(ORDERS, 10).await.map_err(fail)?.is_empty(), "a FAILED row is never claimed");
    Ok(())
}

async fn create_schema_adds_recoveries_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    // An outbox table as an oncebox without migration 0005 left it, holding a stuck row.
    harness.execute_sql(dialect, "ALTER TABLE {events} DROP COLUMN recoveries").await.map_err(fail)?;
    let (published, _) = published_and_claimed(harness, dialect, 1).await?;
    harness.backdate(dialect, AgedTable::Events, &[], TWO_HOURS).await.map_err(fail)?;
    let outbox = dialect.outbox_dao();
    let missing = outbox.recover_stuck(HOUR, 1, 10).await;
    assert!(missing.is_err(), "recovery needs the recoveries column");

    let everything = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };
    dialect.create_schema(everything).await.map_err(fail)?;
    dialect.create_schema(everything).await.map_err(fail)?;
    assert_eq!(outbox.recover_stuck(HOUR, 1, 10).await.map_err(fail)?, 1);
    let row = stored(&*outbox, published[0].id).await?;
    assert_eq!(row.status, EventStatus::Failed, "the existing row starts at 0 recoveries");
    assert!(row.last_error.is_some_and(|error| error.contains("recovered 1 times")));
    Ok(())
}

async fn clean_up_deletes_old_processed_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let (events, batch) = published_and_claimed(harness, dialect, 5).await?;
    let outbox = dialect.outbox_dao();
    outbox.settle(&batch, &processed_all(&batch)).await.map_err(fail)?;
    let pending = new_events(ORDERS, 1);
    publish(harness, dialect, &pending).await?;
    let old: Vec<Uuid> = events[..3].iter().map(|event| event.id).chain([pending[0].id]).collect();
    harness.backdate(dialect, AgedTable::Events, &old, TWO_HOURS).await.map_err(fail)?;

    assert_eq!(outbox.delete_processed(HOUR, 2).await.map_err(fail)?, 2, "at most `limit` rows per call");
    assert_eq!(outbox.delete_processed(HOUR, 2).await.map_err(fail)?, 1);
    assert_eq!(outbox.delete_processed(HOUR, 2).await.map_err(fail)?, 0);
    for event in &events[..3] {
        assert!(outbox.get(event.id).await.map_err(fail)?.is_none(), "old processed row kept");
    }
    for event in &events[3..] {
        stored(&*outbox, event.id).await?;
    }
    assert_eq!(stored(&*outbox, pending[0].id).await?.status, EventStatus::Pending, "only PROCESSED rows go");
    Ok(())
}

async fn counts_group_by_type_and_status_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let (_, batch) = published_and_claimed(harness, dialect, 2).await?;
    publish(harness, dialect, &new_events(ORDERS, 3)).await?;
    publish(harness, dialect, &new_events(PAYMENTS, 4)).await?;
    let outbox = dialect.outbox_dao();
    outbox.settle(&batch, &processed_all(&batch)[..1]).await.map_err(fail)?;
    let counts = outbox.counts().await.map_err(fail)?;
    let mut rows = counts.by_type_and_status.clone();
    rows.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
    assert_eq!(
        rows,
        vec![
            (ORDERS.to_owned(), EventStatus::InProcess, 1),
            (ORDERS.to_owned(), EventStatus::Pending, 3),
            (ORDERS.to_owned(), EventStatus::Processed, 1),
            (PAYMENTS.to_owned(), EventStatus::Pending, 4),
        ]
    );
    assert_eq!(counts.total(), 9);
    assert!(outbox.get(Uuid::now_v7()).await.map_err(fail)?.is_none(), "an unknown id reads as None");
    Ok(())
}

// ---- dead letter queue ------------------------------------------------------------------------

/// Publishes `orders` events of [`ORDERS`] and `payments` of [`PAYMENTS`], fails them all and moves
/// them to the DLQ. Returns the moved rows as they were in the outbox, oldest first.
async fn in_dlq<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
    orders: usize,
    payments: usize,
) -> Result<Vec<OutboxEvent>, Failed> {
    let outbox = dialect.outbox_dao();
    let mut failed = Vec::new();
    for (event_type, count) in [(ORDERS, orders), (PAYMENTS, payments)] {
        if count == 0 {
            continue;
        }
        publish(harness, dialect, &new_events(event_type, count)).await?;
        let batch = outbox.claim(event_type, 1000).await.map_err(fail)?;
        let settlements: Vec<Settlement> = batch
            .events
            .iter()
            .map(|event| Settlement::Failed { id: event.id, error: "gave up".into() })
            .collect();
        outbox.settle(&batch, &settlements).await.map_err(fail)?;
        for event in &batch.events {
            failed.push(stored(&*outbox, event.id).await?);
        }
    }
    let moved = dialect.dlq_dao().transfer_to_dlq(1000).await.map_err(fail)?;
    assert_eq!(moved.len(), failed.len(), "every FAILED row moves to the DLQ");
    Ok(failed)
}

async fn dlq_transfer_to_keeps_id_and_data_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let outbox = dialect.outbox_dao();
    let dlq = dialect.dlq_dao();
    let mut events = new_events(ORDERS, 3);
    events[0].headers.insert("traceparent".into(), "00-trace-span-01".into());
    events[0].partition_key = Some("customer-1".into());
    publish(harness, dialect, &events).await?;
    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    let settlements = vec![
        Settlement::Failed { id: events[0].id, error: "too large".into() },
        Settlement::Failed { id: events[1].id, error: "rejected".into() },
        Settlement::Processed { id: events[2].id },
    ];
    outbox.settle(&batch, &settlements).await.map_err(fail)?;
    let before = [stored(&*outbox, events[0].id).await?, stored(&*outbox, events[1].id).await?];

    let first = dlq.transfer_to_dlq(1).await.map_err(fail)?;
    assert_eq!(first.len(), 1, "at most `limit` rows per transfer");
    let rest = dlq.transfer_to_dlq(10).await.map_err(fail)?;
    assert_eq!(rest.len(), 1);
    assert!(dlq.transfer_to_dlq(10).await.map_err(fail)?.is_empty());
    let mut moved: Vec<OutboxEvent> = first.into_iter().chain(rest).collect();
    moved.sort_by_key(|event| event.id);
    assert_eq!(moved.as_slice(), &before, "the moved rows are returned unchanged");

    for original in &before {
        assert!(outbox.get(original.id).await.map_err(fail)?.is_none(), "moved row left in the outbox");
        let row = dlq.get(original.id).await.map_err(fail)?.ok_or_else(|| fail("row missing in the DLQ"))?;
        assert_eq!(&row.event, original, "same id and data in the DLQ");
        assert_eq!(row.dlq_status, DlqStatus::Moved);
        assert_eq!(row.event.status, EventStatus::Failed);
        assert!(row.moved_at >= original.updated_at);
    }
    assert_eq!(stored(&*outbox, events[2].id).await?.status, EventStatus::Processed, "others stay");
    let counts = outbox.counts().await.map_err(fail)?;
    assert_eq!(counts.total(), 1);
    assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 2);
    Ok(())
}

async fn dlq_transfer_from_redrives_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let failed = in_dlq(harness, dialect, 3, 0).await?;
    let outbox = dialect.outbox_dao();
    let dlq = dialect.dlq_dao();
    assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 0, "MOVED rows stay until a person acts");
    let retry: Vec<Uuid> = failed[..2].iter().map(|event| event.id).collect();
    assert_eq!(dlq.set_status(&DlqSelection::Ids(retry.clone()), DlqStatus::ToRetry).await.map_err(fail)?, 2);

    assert_eq!(dlq.transfer_from_dlq(1).await.map_err(fail)?, 1, "at most `limit` rows per transfer");
    assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 1);
    assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 0);
    for original in &failed[..2] {
        assert!(dlq.get(original.id).await.map_err(fail)?.is_none(), "re-driven row left in the DLQ");
        let row = stored(&*outbox, original.id).await?;
        assert_eq!(row.status, EventStatus::Pending);
        assert_eq!(row.attempts, 0, "a re-driven event starts over");
        assert_eq!(row.claim_token, None);
        assert_eq!(row.processed_at, None);
        assert_eq!(row.payload, original.payload);
        assert_eq!(row.created_at, original.created_at, "created_at is the original write time");
    }
    let remaining =
        dlq.get(failed[2].id).await.map_err(fail)?.ok_or_else(|| fail("untouched DLQ row gone"))?;
    assert_eq!(remaining.dlq_status, DlqStatus::Moved);

    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    let mut claimed = claimed_ids(&batch);
    claimed.sort();
    assert_eq!(claimed, retry, "re-driven events are claimable with their ids");
    Ok(())
}

async fn dlq_set_status_refuses_in_process_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let failed = in_dlq(harness, dialect, 1, 0).await?;
    let dlq = dialect.dlq_dao();
    for selection in [DlqSelection::Ids(vec![failed[0].id]), DlqSelection::EventType(ORDERS.into())] {
        let error = dlq.set_status(&selection, DlqStatus::InProcess).await.err();
        assert_eq!(error.map(|e| e.kind()), Some(ErrorKind::InvalidInput), "IN_PROCESS is not settable");
    }
    let row = dlq.get(failed[0].id).await.map_err(fail)?.ok_or_else(|| fail("DLQ row gone"))?;
    assert_eq!(row.dlq_status, DlqStatus::Moved, "a refused change leaves the row alone");
    assert_eq!(dlq.transfer_from_dlq(10).await.map_err(fail)?, 0);
    Ok(())
}

async fn dlq_set_status_and_delete_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let failed = in_dlq(harness, dialect, 3, 2).await?;
    let dlq = dialect.dlq_dao();
    let order_ids: Vec<Uuid> = failed.iter().filter(|e| e.event_type == ORDERS).map(|e| e.id).collect();
    let status_of = |id: Uuid| {
        let dlq = dlq.clone();
        async move {
            let row = dlq.get(id).await.map_err(fail)?.ok_or_else(|| fail(format!("DLQ row {id} gone")))?;
            Ok::<_, Failed>(row.dlq_status)
        }
    };

    let before = dlq.get(order_ids[0]).await.map_err(fail)?.ok_or_else(|| fail("DLQ row gone"))?;
    let changed = dlq.set_status(&DlqSelection::Ids(vec![order_ids[0]]), DlqStatus::Resolved).await;
    assert_eq!(changed.map_err(fail)?, 1);
    assert_eq!(status_of(order_ids[0]).await?, DlqStatus::Resolved);
    let after = dlq.get(order_ids[0]).await.map_err(fail)?.ok_or_else(|| fail("DLQ row gone"))?;
    assert!(after.event.updated_at >= before.event.updated_at, "a status change updates updated_at");
    assert_eq!(status_of(order_ids[1]).await?, DlqStatus::Moved, "other ids are untouched");

    let changed = dlq.set_status(&DlqSelection::EventType(PAYMENTS.into()), DlqStatus::ToRetry).await;
    assert_eq!(changed.map_err(fail)?, 2);
    let filter = DlqFilter { status: Some(DlqStatus::ToRetry), event_type: None };
    assert_eq!(dlq.count(&filter).await.map_err(fail)?, 2);
    assert_eq!(dlq.set_status(&DlqSelection::Ids(Vec::new()), DlqStatus::Resolved).await.map_err(fail)?, 0);
    let unknown = DlqSelection::Ids(vec![Uuid::now_v7()]);
    assert_eq!(dlq.set_status(&unknown, DlqStatus::Resolved).await.map_err(fail)?, 0);

    assert_eq!(dlq.delete(&DlqSelection::Ids(vec![order_ids[0], order_ids[1]])).await.map_err(fail)?, 2);
    assert!(dlq.get(order_ids[0]).await.map_err(fail)?.is_none());
    assert_eq!(dlq.delete(&DlqSelection::Ids(Vec::new())).await.map_err(fail)?, 0);
    assert_eq!(dlq.delete(&DlqSelection::EventType(PAYMENTS.into())).await.map_err(fail)?, 2);
    assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 1);
    assert_eq!(status_of(order_ids[2]).await?, DlqStatus::Moved);
    Ok(())
}

async fn dlq_list_and_count_filter_and_page_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let first = in_dlq(harness, dialect, 4, 0).await?;
    // A second transfer, later than the first, so moved_at orders the two groups.
    harness.backdate(dialect, AgedTable::Dlq, &[], Duration::from_secs(60)).await.map_err(fail)?;
    let second = in_dlq(harness, dialect, 0, 3).await?;
    let dlq = dialect.dlq_dao();
    let mut expected: Vec<Uuid> = first.iter().map(|event| event.id).collect();
    expected.sort();
    let mut later: Vec<Uuid> = second.iter().map(|event| event.id).collect();
    later.sort();
    expected.extend(later);

    let mut paged = Vec::new();
    for page in 0..4 {
        let rows = dlq.list(&DlqFilter::default(), page * 3, 3).await.map_err(fail)?;
        assert!(rows.len() <= 3);
        paged.extend(rows.iter().map(|row| row.event.id));
    }
    assert_eq!(paged, expected, "pages follow moved_at, then id, without gaps or repeats");
    let moved_at: Vec<DateTime<Utc>> =
        dlq.list(&DlqFilter::default(), 0, 100).await.map_err(fail)?.iter().map(|row| row.moved_at).collect();
    assert!(moved_at.windows(2).all(|pair| pair[0] <= pair[1]), "ordered by moved_at");

    dlq.set_status(&DlqSelection::Ids(vec![first[0].id, second[0].id]), DlqStatus::Resolved)
        .await
        .map_err(fail)?;
    let resolved = DlqFilter { status: Some(DlqStatus::Resolved), event_type: None };
    let resolved_orders = DlqFilter { status: Some(DlqStatus::Resolved), event_type: Some(ORDERS.into()) };
    let payments = DlqFilter { status: None, event_type: Some(PAYMENTS.into()) };
    assert_eq!(dlq.count(&resolved).await.map_err(fail)?, 2);
    assert_eq!(dlq.count(&resolved_orders).await.map_err(fail)?, 1);
    assert_eq!(dlq.count(&payments).await.map_err(fail)?, 3);
    assert_eq!(dlq.count(&DlqFilter::default()).await.map_err(fail)?, 7);
    let listed = dlq.list(&resolved_orders, 0, 10).await.map_err(fail)?;
    assert_eq!(listed.iter().map(|row| row.event.id).collect::<Vec<_>>(), vec![first[0].id]);
    let listed = dlq.list(&payments, 1, 10).await.map_err(fail)?;
    assert_eq!(listed.len(), 2, "offset skips rows within the filter");
    assert!(listed.iter().all(|row| row.event.event_type == PAYMENTS));
    assert!(dlq.list(&DlqFilter::default(), 100, 10).await.map_err(fail)?.is_empty());

    let mut counts = dlq.counts().await.map_err(fail)?.by_type_and_status;
    counts.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
    assert_eq!(
        counts,
        vec![
            (ORDERS.to_owned(), DlqStatus::Moved, 3),
            (ORDERS.to_owned(), DlqStatus::Resolved, 1),
            (PAYMENTS.to_owned(), DlqStatus::Moved, 2),
            (PAYMENTS.to_owned(), DlqStatus::Resolved, 1),
        ]
    );
    Ok(())
}

async fn dlq_clean_up_deletes_old_resolved_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let failed = in_dlq(harness, dialect, 5, 0).await?;
    let ids: Vec<Uuid> = failed.iter().map(|event| event.id).collect();
    let dlq = dialect.dlq_dao();
    dlq.set_status(&DlqSelection::Ids(ids[..3].to_vec()), DlqStatus::Resolved).await.map_err(fail)?;
    // Old: resolved 0 and 1, and the MOVED row 4; young: resolved 2.
    harness.backdate(dialect, AgedTable::Dlq, &[ids[0], ids[1], ids[4]], TWO_HOURS).await.map_err(fail)?;
    assert_eq!(dlq.delete_resolved(HOUR, 1).await.map_err(fail)?, 1, "at most `limit` rows per call");
    assert_eq!(dlq.delete_resolved(HOUR, 10).await.map_err(fail)?, 1);
    assert_eq!(dlq.delete_resolved(HOUR, 10).await.map_err(fail)?, 0);
    let left: Vec<Uuid> =
        dlq.list(&DlqFilter::default(), 0, 10).await.map_err(fail)?.iter().map(|r| r.event.id).collect();
    let left: HashSet<Uuid> = left.into_iter().collect();
    assert_eq!(left, [ids[2], ids[3], ids[4]].into_iter().collect::<HashSet<_>>());
    Ok(())
}

// ---- inbox ------------------------------------------------------------------------------------

async fn inbox_records_a_single_id_once_body<H: DaoHarness>(
    _harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let inbox = dialect.inbox_dao();
    let id = Uuid::now_v7();
    assert!(inbox.record("billing", id).await.map_err(fail)?, "a new id is recorded");
    assert!(!inbox.record("billing", id).await.map_err(fail)?, "a duplicate is reported");
    assert_eq!(inbox.consumed("billing", &[id, Uuid::now_v7()]).await.map_err(fail)?, vec![id]);
    Ok(())
}

async fn inbox_batch_filters_duplicates_body<H: DaoHarness>(
    _harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let inbox = dialect.inbox_dao();
    let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
    assert!(inbox.record("billing", ids[1]).await.map_err(fail)?);
    // Out of id order, with a known id and a duplicate inside the input.
    let input = vec![ids[4], ids[1], ids[0], ids[4], ids[3], ids[2], ids[0]];
    let new = inbox.record_many("billing", &input).await.map_err(fail)?;
    assert_eq!(new, vec![ids[4], ids[0], ids[3], ids[2]], "new ids in input order, each once");
    assert!(inbox.record_many("billing", &input).await.map_err(fail)?.is_empty(), "all known now");
    assert!(inbox.record_many("billing", &[]).await.map_err(fail)?.is_empty());
    let consumed = inbox.consumed("billing", &[ids[2], Uuid::now_v7(), ids[1]]).await.map_err(fail)?;
    assert_eq!(consumed, vec![ids[2], ids[1]]);
    assert!(inbox.consumed("billing", &[]).await.map_err(fail)?.is_empty());
    Ok(())
}

async fn inbox_consumers_are_independent_body<H: DaoHarness>(
    _harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let inbox = dialect.inbox_dao();
    let id = Uuid::now_v7();
    assert!(inbox.record("billing", id).await.map_err(fail)?);
    assert!(inbox.record("shipping", id).await.map_err(fail)?, "another consumer sees the id as new");
    assert_eq!(inbox.record_many("audit", &[id]).await.map_err(fail)?, vec![id]);
    assert!(inbox.forget("billing", id).await.map_err(fail)?);
    assert_eq!(inbox.consumed("shipping", &[id]).await.map_err(fail)?, vec![id], "forget is per consumer");
    assert!(inbox.consumed("billing", &[id]).await.map_err(fail)?.is_empty());
    Ok(())
}

async fn inbox_record_follows_transaction_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let inbox = dialect.inbox_dao();
    let rolled_back = [Uuid::now_v7(), Uuid::now_v7()];
    let new = harness.record_in_transaction(dialect, "billing", &rolled_back, false).await.map_err(fail)?;
    assert_eq!(new, rolled_back.to_vec(), "inside the transaction both ids were new");
    assert!(inbox.consumed("billing", &rolled_back).await.map_err(fail)?.is_empty(), "rollback forgets them");

    let known = Uuid::now_v7();
    assert!(inbox.record("billing", known).await.map_err(fail)?);
    let committed = [Uuid::now_v7(), known];
    let new = harness.record_in_transaction(dialect, "billing", &committed, true).await.map_err(fail)?;
    assert_eq!(new, vec![committed[0]], "a committed id already known is a duplicate");
    assert_eq!(inbox.consumed("billing", &committed).await.map_err(fail)?, committed.to_vec());
    assert!(inbox.record("billing", rolled_back[0]).await.map_err(fail)?, "a rolled-back id is still new");
    Ok(())
}

async fn inbox_forget_removes_a_record_body<H: DaoHarness>(_harness: &H, dialect: &H::Dialect) -> TestResult {
    let inbox = dialect.inbox_dao();
    let id = Uuid::now_v7();
    assert!(inbox.record("mailer", id).await.map_err(fail)?);
    assert!(inbox.forget("mailer", id).await.map_err(fail)?, "forget reports a removed record");
    assert!(inbox.consumed("mailer", &[id]).await.map_err(fail)?.is_empty());
    assert!(!inbox.forget("mailer", id).await.map_err(fail)?, "nothing left to forget");
    assert!(inbox.record("mailer", id).await.map_err(fail)?, "a forgotten id is new again");
    Ok(())
}

async fn inbox_clean_up_deletes_old_records_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let inbox = dialect.inbox_dao();
    let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
    inbox.record_many("billing", &ids[..3]).await.map_err(fail)?;
    inbox.record("shipping", ids[3]).await.map_err(fail)?;
    harness
        .backdate(dialect, AgedTable::Consumed, &[ids[0], ids[1], ids[3]], TWO_HOURS)
        .await
        .map_err(fail)?;
    assert_eq!(inbox.delete_older_than(HOUR, 2).await.map_err(fail)?, 2, "at most `limit` rows per call");
    assert_eq!(inbox.delete_older_than(HOUR, 2).await.map_err(fail)?, 1, "over all consumers");
    assert_eq!(inbox.delete_older_than(HOUR, 2).await.map_err(fail)?, 0);
    assert_eq!(inbox.consumed("billing", &ids).await.map_err(fail)?, vec![ids[2]], "the young record stays");
    assert!(inbox.consumed("shipping", &ids).await.map_err(fail)?.is_empty());
    Ok(())
}

// ---- job lock ---------------------------------------------------------------------------------

const JOB: &str = "outbox-clean-up";

async fn job_lock_has_one_winner_body<H: DaoHarness>(_harness: &H, dialect: &H::Dialect) -> TestResult {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let lock = dialect.job_lock();
        tasks.push(tokio::spawn(
            async move { lock.try_lock(JOB, Uuid::now_v7(), Duration::ZERO, HOUR).await },
        ));
    }
    let mut winners = Vec::new();
    for task in tasks {
        if let Some(lease) = task.await.map_err(fail)?.map_err(fail)? {
            winners.push(lease);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of eight owners gets the lease: {winners:?}");
    assert_eq!(winners[0].job, JOB);
    Ok(())
}

async fn job_lock_held_refuses_others_body<H: DaoHarness>(_harness: &H, dialect: &H::Dialect) -> TestResult {
    let lock = dialect.job_lock();
    let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
    let lease = lock.try_lock(JOB, first, Duration::ZERO, HOUR).await.map_err(fail)?;
    assert_eq!(lease, Some(JobLease { job: JOB.into(), owner: first, lock_at_least_for: Duration::ZERO }));
    assert!(lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(), "lease held");
    assert!(
        lock.try_lock("another-job", second, Duration::ZERO, HOUR).await.map_err(fail)?.is_some(),
        "leases are per job"
    );
    Ok(())
}

async fn job_lock_expires_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let lock = dialect.job_lock();
    let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
    assert!(lock.try_lock(JOB, first, Duration::ZERO, HOUR).await.map_err(fail)?.is_some());
    assert!(lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?.is_none());
    // The holder died an hour and more ago: its lease ran out.
    harness.backdate(dialect, AgedTable::Jobs, &[], TWO_HOURS).await.map_err(fail)?;
    let lease = lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?;
    assert_eq!(lease.map(|lease| lease.owner), Some(second), "an expired lease can be taken");
    Ok(())
}

async fn job_lock_only_the_owner_releases_body<H: DaoHarness>(
    _harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let lock = dialect.job_lock();
    let (owner, intruder, next) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let lease = lock.try_lock(JOB, owner, Duration::ZERO, HOUR).await.map_err(fail)?;
    let lease = lease.ok_or_else(|| fail("a free job should lock"))?;
    let forged = JobLease { job: JOB.into(), owner: intruder, lock_at_least_for: Duration::ZERO };
    lock.unlock(&forged).await.map_err(fail)?;
    assert!(lock.try_lock(JOB, next, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(), "still held");
    lock.unlock(&lease).await.map_err(fail)?;
    assert!(lock.try_lock(JOB, next, Duration::ZERO, HOUR).await.map_err(fail)?.is_some(), "released");
    Ok(())
}

async fn job_lock_stays_held_at_least_body<H: DaoHarness>(_harness: &H, dialect: &H::Dialect) -> TestResult {
    let lock = dialect.job_lock();
    let (owner, other) = (Uuid::now_v7(), Uuid::now_v7());
    let lease = lock.try_lock(JOB, owner, HOUR, TWO_HOURS).await.map_err(fail)?;
    let lease = lease.ok_or_else(|| fail("a free job should lock"))?;
    assert_eq!(lease.lock_at_least_for, HOUR);
    lock.unlock(&lease).await.map_err(fail)?;
    assert!(
        lock.try_lock(JOB, other, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(),
        "lock-at-least-for keeps the job locked after unlock"
    );

    let quick = "quick-job";
    let lease = lock.try_lock(quick, owner, Duration::ZERO, TWO_HOURS).await.map_err(fail)?;
    lock.unlock(&lease.ok_or_else(|| fail("a free job should lock"))?).await.map_err(fail)?;
    assert!(lock.try_lock(quick, other, Duration::ZERO, HOUR).await.map_err(fail)?.is_some(), "free at once");
    Ok(())
}

async fn job_lock_durations_are_per_call_body<H: DaoHarness>(
    _harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let lock = dialect.job_lock();
    let (first, second, third) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    // A lease held for at most zero time is over as soon as it is taken.
    assert!(lock.try_lock(JOB, first, Duration::ZERO, Duration::ZERO).await.map_err(fail)?.is_some());
    let lease = lock.try_lock(JOB, second, Duration::ZERO, HOUR).await.map_err(fail)?;
    assert_eq!(lease.map(|lease| lease.owner), Some(second), "the first call's zero duration took effect");
    assert!(
        lock.try_lock(JOB, third, Duration::ZERO, HOUR).await.map_err(fail)?.is_none(),
        "the second call's hour took effect"
    );
    Ok(())
}

// ---- payloads ---------------------------------------------------------------------------------

async fn round_trip<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
    events: &[NewOutboxEvent],
) -> Result<Vec<OutboxEvent>, Failed> {
    publish(harness, dialect, events).await?;
    let batch = dialect.outbox_dao().claim(ORDERS, 100).await.map_err(fail)?;
    assert_eq!(batch.len(), events.len());
    for (claimed, written) in batch.events.iter().zip(events) {
        assert_eq!(claimed.id, written.id);
        assert_eq!(claimed.payload, written.payload, "payload of {} changed", written.id);
        assert_eq!(claimed.payload_type, written.payload_type);
        assert_eq!(claimed.headers, written.headers);
        assert_eq!(claimed.partition_key, written.partition_key);
        assert_eq!(claimed.event_type, written.event_type);
    }
    Ok(batch.events)
}

async fn payload_texts_round_trip_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let payloads = [
        String::new(),
        "plain text, not JSON".to_owned(),
        "{\"emoji\":\"🚀🎉👩‍👩‍👧\",\"cjk\":\"注文が作成されました\",\"rtl\":\"مرحبا\"}".to_owned(),
        "combining: e\u{301} a\u{308} n\u{303}; zero width:\u{200b}|".to_owned(),
        "quotes ' \" ` and backslashes \\ \\\\ \\n; percent %s %d; NUL-free \t tab".to_owned(),
        "'); DROP TABLE outbox_events; --".to_owned(),
    ];
    let events: Vec<NewOutboxEvent> = payloads
        .iter()
        .enumerate()
        .map(|(index, payload)| NewOutboxEvent { payload: payload.clone(), ..new_event(ORDERS, index) })
        .collect();
    round_trip(harness, dialect, &events).await?;
    Ok(())
}

async fn large_payload_round_trips_body<H: DaoHarness>(harness: &H, dialect: &H::Dialect) -> TestResult {
    let mebibyte: String = "0123456789abcdef".repeat(64 * 1024);
    let event = NewOutboxEvent { payload: mebibyte, ..new_event(ORDERS, 0) };
    let claimed = round_trip(harness, dialect, std::slice::from_ref(&event)).await?;
    assert_eq!(claimed[0].payload.len(), 1024 * 1024);
    Ok(())
}

async fn headers_and_partition_key_survive_claim_body<H: DaoHarness>(
    harness: &H,
    dialect: &H::Dialect,
) -> TestResult {
    let mut with_headers = new_event(ORDERS, 0);
    with_headers
        .headers
        .insert("traceparent".into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    with_headers.headers.insert("correlation-id".into(), "order-42".into());
    with_headers.headers.insert("note".into(), "quotes \" and ünïcödé ✓".into());
    with_headers.partition_key = Some("customer-7".into());
    let plain = new_event(ORDERS, 1);
    let claimed = round_trip(harness, dialect, &[with_headers.clone(), plain]).await?;
    assert_eq!(claimed[0].headers.len(), 3);
    assert_eq!(claimed[1].partition_key, None, "no partition key stays none");
    let message = claimed[0].to_message("orders");
    assert_eq!(message.key, "customer-7", "the partition key is the message key");
    Ok(())
}
