//! Cases only SQLite has: decoding damaged rows, busy databases, schema plans, the parameter limit
//! of the batch insert, and the stored timestamp format.

use std::sync::Arc;
use std::time::Duration;

use oncebox_core::{Dialect, ErrorKind, EventStatus, SchemaPlan, TableNames};
use oncebox_sqlite::{SqliteDialect, connect_options};
use oncebox_testkit::DaoHarness;
use oncebox_testkit::case;
use oncebox_testkit::dao_suite::{ids_of, new_events};
use oncebox_testkit::runner::{Case, TestResult, fail};
use sqlx::AssertSqlSafe;
use sqlx::sqlite::SqlitePoolOptions;
use uuid::Uuid;

use super::{SqliteHarness, database_file};

/// Every SQLite-only case.
pub fn cases() -> Vec<Case<SqliteHarness>> {
    vec![
        case!("damaged_rows_are_decode_errors_naming_the_column", damaged_rows_are_decode_errors),
        case!("a_busy_database_is_a_temporary_error", a_busy_database_is_a_temporary_error),
        case!("create_schema_follows_the_plan_and_is_idempotent", create_schema_follows_the_plan),
        case!("a_batch_over_the_parameter_limit_is_written_whole", batch_over_the_parameter_limit),
        case!("timestamps_are_fixed_width_utc_text_in_wal_mode", timestamps_are_fixed_width_utc_text),
        case!("table_prefixes_keep_dialects_apart", table_prefixes_keep_dialects_apart),
    ]
}

const ORDERS: &str = "order-created";

async fn execute(dialect: &SqliteDialect, sql: String) -> TestResult {
    sqlx::query(AssertSqlSafe(sql)).execute(dialect.pool()).await.map_err(fail)?;
    Ok(())
}

async fn damaged_rows_are_decode_errors(harness: Arc<SqliteHarness>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let events = dialect.tables().events().to_owned();
    let good = new_events(ORDERS, 1);
    harness.publish(&dialect, &good, true).await.map_err(fail)?;
    let outbox = dialect.outbox_dao();
    let insert = |id: &str, status: &str, headers: &str| {
        format!(
            "INSERT INTO {events} (id, event_type, payload, payload_type, headers, status, attempts, \
             next_retry_at, created_at, updated_at) VALUES ('{id}', '{ORDERS}', '{{}}', 'T', '{headers}', \
             '{status}', 0, '2000-01-01T00:00:00.000Z', '2000-01-01T00:00:00.000Z', '2000-01-01T00:00:00.000Z')"
        )
    };

    // Ids are text here, so one can hold something that is not a UUID. Claimed first (it is the
    // oldest), it must not fail the claim of the others, forever: it is given up on by the id as
    // stored, and the transfer to the DLQ takes it out of the outbox like any failed row.
    execute(&dialect, insert("not-a-uuid", "PENDING", "{}")).await?;
    let batch = outbox.claim(ORDERS, 10).await.map_err(fail)?;
    let claimed: Vec<Uuid> = batch.events.iter().map(|event| event.id).collect();
    assert_eq!(claimed, ids_of(&good), "the healthy row is claimed and nothing else");
    let (status, last_error): (String, Option<String>) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT status, last_error FROM {events} WHERE id = 'not-a-uuid'"
    )))
    .fetch_one(dialect.pool())
    .await
    .map_err(fail)?;
    assert_eq!(status, "FAILED");
    let last_error = last_error.unwrap_or_default();
    assert!(
        last_error.contains(&format!("{events}.id")) && last_error.contains("not-a-uuid"),
        "{last_error}"
    );
    let dlq = dialect.dlq_dao();
    dlq.transfer_to_dlq(10).await.map_err(fail)?;
    let left: i64 =
        sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {events} WHERE id = 'not-a-uuid'")))
            .fetch_one(dialect.pool())
            .await
            .map_err(fail)?;
    assert_eq!(left, 0, "the transfer to the DLQ took the row out of the outbox");
    dlq.transfer_to_dlq(10).await.map_err(fail)?;
    let dlq_table = dialect.tables().dlq().to_owned();
    execute(&dialect, format!("DELETE FROM {dlq_table} WHERE id = 'not-a-uuid'")).await?;

    let bad_headers = Uuid::now_v7();
    execute(&dialect, insert(&bad_headers.to_string(), "FAILED", "[1, 2]")).await?;
    let error = outbox.get(bad_headers).await.err().ok_or_else(|| fail("bad headers should not decode"))?;
    assert_eq!(error.kind(), ErrorKind::Decode);
    assert!(error.to_string().contains(&bad_headers.to_string()), "{error}");

    let bad_status = Uuid::now_v7();
    execute(&dialect, insert(&bad_status.to_string(), "LOST", "{}")).await?;
    let error = outbox.get(bad_status).await.err().ok_or_else(|| fail("a bad status should not decode"))?;
    assert_eq!(error.kind(), ErrorKind::Decode);
    assert!(error.to_string().contains("status") && error.to_string().contains("LOST"), "{error}");
    let error = outbox.counts().await.err().ok_or_else(|| fail("counts should refuse a bad status"))?;
    assert_eq!(error.kind(), ErrorKind::Decode);

    let bad_time = Uuid::now_v7();
    execute(&dialect, insert(&bad_time.to_string(), "PENDING", "{}")).await?;
    execute(&dialect, format!("UPDATE {events} SET created_at = 'yesterday' WHERE id = '{bad_time}'"))
        .await?;
    let error = outbox.get(bad_time).await.err().ok_or_else(|| fail("a bad timestamp should not decode"))?;
    assert!(error.to_string().contains("created_at"), "{error}");

    harness.dispose(dialect).await.map_err(fail)
}

async fn a_busy_database_is_a_temporary_error(harness: Arc<SqliteHarness>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    harness.publish(&dialect, &new_events(ORDERS, 1), true).await.map_err(fail)?;
    let file = database_file(&dialect);
    let impatient_options =
        connect_options(&file.to_string_lossy()).map_err(fail)?.busy_timeout(Duration::ZERO);
    let impatient_pool = SqlitePoolOptions::new().connect_with(impatient_options).await.map_err(fail)?;
    let impatient = SqliteDialect::new(impatient_pool).with_tables(dialect.tables());

    let writer = dialect.pool().begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
    let error = impatient.outbox_dao().claim(ORDERS, 10).await.err();
    writer.rollback().await.map_err(fail)?;
    let error = error.ok_or_else(|| fail("a claim while another connection writes should fail at once"))?;
    assert_eq!(error.kind(), ErrorKind::Database);
    assert!(error.is_temporary(), "SQLITE_BUSY must be temporary: {error}");
    assert_eq!(impatient.outbox_dao().claim(ORDERS, 10).await.map_err(fail)?.len(), 1, "free again");
    impatient.pool().close().await;
    harness.dispose(dialect).await.map_err(fail)
}

async fn table_names(dialect: &SqliteDialect) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(dialect.pool())
            .await?;
    Ok(rows.into_iter().map(|(name,)| name).collect())
}

async fn create_schema_follows_the_plan(harness: Arc<SqliteHarness>) -> TestResult {
    let fresh = harness.fresh().await.map_err(fail)?;
    let file = database_file(&fresh);
    let tables = TableNames::with_prefix("plan_").map_err(fail)?;
    let dialect = SqliteDialect::connect(&file.to_string_lossy()).await.map_err(fail)?.with_tables(&tables);
    let inbox_only = SchemaPlan { inbox: true, ..SchemaPlan::default() };
    dialect.create_schema(inbox_only).await.map_err(fail)?;
    dialect.create_schema(inbox_only).await.map_err(fail)?;
    let names = table_names(&dialect).await.map_err(fail)?;
    assert!(names.iter().any(|name| name == tables.consumed()), "{names:?}");
    assert!(
        !names.iter().any(|name| name == tables.events()),
        "an inbox-only plan creates no outbox table: {names:?}"
    );
    let everything = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };
    dialect.create_schema(everything).await.map_err(fail)?;
    dialect.create_schema(everything).await.map_err(fail)?;
    let names = table_names(&dialect).await.map_err(fail)?;
    for table in [tables.events(), tables.dlq(), tables.consumed(), tables.jobs()] {
        assert!(names.iter().any(|name| name == table), "{table} missing from {names:?}");
    }
    dialect.pool().close().await;
    harness.dispose(fresh).await.map_err(fail)
}

async fn batch_over_the_parameter_limit(harness: Arc<SqliteHarness>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    let events = new_events(ORDERS, 12_000);
    harness.publish(&dialect, &events, true).await.map_err(fail)?;
    let counts = dialect.outbox_dao().counts().await.map_err(fail)?;
    assert_eq!(counts.status_total(EventStatus::Pending), 12_000);
    // A rollback undoes every chunk of the batch.
    let rolled_back = new_events(ORDERS, 6_000);
    harness.publish(&dialect, &rolled_back, false).await.map_err(fail)?;
    assert_eq!(dialect.outbox_dao().counts().await.map_err(fail)?.total(), 12_000);
    let last = ids_of(&events).last().copied().ok_or_else(|| fail("no events"))?;
    assert!(dialect.outbox_dao().get(last).await.map_err(fail)?.is_some());
    harness.dispose(dialect).await.map_err(fail)
}

async fn timestamps_are_fixed_width_utc_text(harness: Arc<SqliteHarness>) -> TestResult {
    let dialect = harness.fresh().await.map_err(fail)?;
    harness.publish(&dialect, &new_events(ORDERS, 3), true).await.map_err(fail)?;
    let sql = format!("SELECT created_at, next_retry_at, id FROM {}", dialect.tables().events());
    let rows: Vec<(String, String, String)> =
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(dialect.pool()).await.map_err(fail)?;
    for (created_at, next_retry_at, id) in rows {
        for text in [&created_at, &next_retry_at] {
            assert_eq!(text.len(), 24, "{text}");
            assert!(
                text.ends_with('Z') && text.as_bytes()[10] == b'T' && text.as_bytes()[19] == b'.',
                "{text}"
            );
        }
        assert_eq!(Uuid::parse_str(&id).map(|u| u.hyphenated().to_string()).ok(), Some(id.clone()));
    }
    let (mode,): (String,) =
        sqlx::query_as("PRAGMA journal_mode").fetch_one(dialect.pool()).await.map_err(fail)?;
    assert_eq!(mode, "wal");
    harness.dispose(dialect).await.map_err(fail)
}

async fn table_prefixes_keep_dialects_apart(harness: Arc<SqliteHarness>) -> TestResult {
    let first = harness.fresh().await.map_err(fail)?;
    let tables = TableNames::with_prefix("other_").map_err(fail)?;
    let second = first.clone().with_tables(&tables);
    second
        .create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true })
        .await
        .map_err(fail)?;
    harness.publish(&first, &new_events(ORDERS, 2), true).await.map_err(fail)?;
    harness.publish(&second, &new_events(ORDERS, 3), true).await.map_err(fail)?;
    assert_eq!(first.outbox_dao().claim(ORDERS, 10).await.map_err(fail)?.len(), 2);
    assert_eq!(second.outbox_dao().claim(ORDERS, 10).await.map_err(fail)?.len(), 3);
    let id = Uuid::now_v7();
    assert!(first.inbox_dao().record("billing", id).await.map_err(fail)?);
    assert!(second.inbox_dao().record("billing", id).await.map_err(fail)?, "inboxes are per prefix");
    harness.dispose(first).await.map_err(fail)
}
