//! Cases only MySQL/MariaDB have: the isolation level of the library's sessions and what it
//! prevents, the claim index, chunked batch inserts and the mysql_async writer. Several engines
//! over one table are in the generic engine suite.

use std::sync::Arc;
use std::time::Duration;

use oncebox_core::config::{Config, EventSettings};
use oncebox_core::engine::{Engine, EngineHandle, EngineParts};
use oncebox_core::{Dialect, EventStatus, InboxWriter, NewOutboxEvent, OutboxWriter, Sender, Settlement};
use oncebox_mysql::{MySqlDialect, connect_options};
use oncebox_testkit::dao_suite::{assert_written_alike, ids_of, make_awkward, new_events};
use oncebox_testkit::engine_suite::fast_polling;
use oncebox_testkit::runner::{Case, Failed, TestResult, fail};
use oncebox_testkit::{DaoHarness, MemoryBroker, case, eventually, with_fresh};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Executor, Row};
use uuid::Uuid;

use super::MySqlHarness;

/// Every MySQL-only case.
pub fn cases() -> Vec<Case<MySqlHarness>> {
    vec![
        case!("library_sessions_run_at_read_committed", sessions_run_at_read_committed),
        case!(
            "a_claim_blocks_business_inserts_only_at_repeatable_read",
            claim_gap_locks_only_at_repeatable_read
        ),
        case!("the_claim_scans_the_claim_index", claim_uses_the_claim_index),
        case!(
            "a_settle_whose_second_statement_failed_is_retried_without_refusals",
            failed_settle_is_retried_without_refusals
        ),
        case!("a_batch_of_1000_is_inserted_in_two_statements", batch_of_1000_in_two_statements),
        case!("an_oversized_value_fails_the_publish_instead_of_truncating", oversized_value_fails),
        case!("a_batch_record_that_fails_midway_records_no_id", failed_batch_record_records_nothing),
        case!("mysql_async_commit_delivers_and_rollback_never", mysql_async_commit_and_rollback),
        case!("mysql_async_and_sqlx_writers_write_identical_rows", writers_write_identical_rows),
        case!("mysql_async_inbox_records_follow_the_transaction", mysql_async_inbox_follows_tx),
    ]
}

const ORDERS: &str = "order-created";
const TOPIC: &str = "orders";

async fn start(
    dialect: &MySqlDialect,
    config: Config,
    sender: Arc<dyn Sender>,
) -> Result<EngineHandle, Failed> {
    let mut parts = EngineParts::with_dialect(config, dialect);
    parts.sender = Some(sender);
    Engine::start(parts).map_err(fail)
}

// ---- isolation --------------------------------------------------------------------------------

async fn sessions_run_at_read_committed(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |_harness, dialect| async move {
        let server = dialect.check_server().await.map_err(fail)?;
        let query = format!("SELECT {}", server.isolation_variable());
        // Every connection of the pool, not only the first.
        let mut connections = Vec::new();
        for _ in 0..3 {
            connections.push(dialect.pool().acquire().await.map_err(fail)?);
        }
        for connection in &mut connections {
            let (level,): (String,) = sqlx::query_as(AssertSqlSafe(query.clone()))
                .fetch_one(&mut **connection)
                .await
                .map_err(fail)?;
            assert_eq!(level, "READ-COMMITTED");
        }
        Ok(())
    })
    .await
}

/// Holds a claim's locking read open at `isolation`, then tries to insert a new due event from a
/// second session that waits at most one second for locks. Returns whether the insert got through.
async fn insert_passes_open_claim(
    dialect: &MySqlDialect,
    url: &str,
    isolation: &str,
) -> Result<bool, Failed> {
    let pool = MySqlPoolOptions::new()
        .max_connections(2)
        .connect_with(connect_options(url).map_err(fail)?)
        .await
        .map_err(fail)?;
    let mut claimer = pool.acquire().await.map_err(fail)?;
    let mut writer = pool.acquire().await.map_err(fail)?;
    claimer
        .execute(AssertSqlSafe(format!("SET SESSION TRANSACTION ISOLATION LEVEL {isolation}")))
        .await
        .map_err(fail)?;
    writer.execute("SET SESSION innodb_lock_wait_timeout = 1").await.map_err(fail)?;
    let table = &dialect.tables().events();
    let prefix = dialect.tables().prefix();
    claimer.execute("START TRANSACTION").await.map_err(fail)?;
    // The claim's own locking read, as the dialect sends it, with a limit above the backlog.
    let claimed = sqlx::query(AssertSqlSafe(format!(
        "SELECT id FROM {table} FORCE INDEX ({prefix}outbox_events_claim) \
         WHERE event_type = ? AND status = 'PENDING' AND next_retry_at <= UTC_TIMESTAMP(6) \
         ORDER BY next_retry_at, id LIMIT 100 FOR UPDATE SKIP LOCKED"
    )))
    .bind(ORDERS)
    .fetch_all(&mut *claimer)
    .await
    .map_err(fail)?;
    assert_eq!(claimed.len(), 3);
    let mut tx = sqlx::Connection::begin(&mut *writer).await.map_err(fail)?;
    let inserted = dialect.writer().write(&mut tx, &new_events(ORDERS, 1)).await;
    let passed = match inserted {
        Ok(()) => {
            tx.commit().await.map_err(fail)?;
            true
        }
        Err(error) => {
            assert!(error.is_temporary(), "a lock wait timeout is temporary: {error}");
            tx.rollback().await.map_err(fail)?;
            false
        }
    };
    claimer.execute("ROLLBACK").await.map_err(fail)?;
    drop((claimer, writer));
    pool.close().await;
    Ok(passed)
}

async fn claim_gap_locks_only_at_repeatable_read(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        harness.publish(&dialect, &new_events(ORDERS, 3), true).await.map_err(fail)?;
        // At REPEATABLE READ the locking read locks the gap after the last due row, exactly where
        // a new event goes: the business transaction waits for the claim (and times out here).
        let passed = insert_passes_open_claim(&dialect, harness.0.url(), "REPEATABLE READ").await?;
        assert!(!passed, "at REPEATABLE READ the insert waits for the claim's gap lock");
        // At READ COMMITTED, the level of every library session, it goes straight through.
        let passed = insert_passes_open_claim(&dialect, harness.0.url(), "READ COMMITTED").await?;
        assert!(passed, "at READ COMMITTED the insert does not wait for the claim");
        Ok(())
    })
    .await
}

async fn claim_uses_the_claim_index(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        for event_type in [ORDERS, "payment-received"] {
            harness.publish(&dialect, &new_events(event_type, 200), true).await.map_err(fail)?;
        }
        let table = &dialect.tables().events();
        let prefix = dialect.tables().prefix();
        let plan = sqlx::query(AssertSqlSafe(format!(
            "EXPLAIN SELECT id FROM {table} FORCE INDEX ({prefix}outbox_events_claim) \
             WHERE event_type = 'order-created' AND status = 'PENDING' AND next_retry_at <= UTC_TIMESTAMP(6) \
             ORDER BY next_retry_at, id LIMIT 10 FOR UPDATE SKIP LOCKED"
        )))
        .fetch_one(dialect.pool())
        .await
        .map_err(fail)?;
        let key: Option<String> = plan.try_get("key").map_err(fail)?;
        let extra: Option<String> = plan.try_get("Extra").map_err(fail)?;
        assert_eq!(key.as_deref(), Some(format!("{prefix}outbox_events_claim").as_str()));
        assert!(!extra.unwrap_or_default().contains("filesort"), "the index gives the claim order, no sort");
        Ok(())
    })
    .await
}

// ---- the settle -------------------------------------------------------------------------------

/// A settle of delivered and failed events is two statements. When the second fails (here a
/// trigger on this test's table refuses retries, as a lock wait timeout or a lost connection
/// would), the engine retries the whole settle: it must find every row still IN_PROCESS under
/// its token, not the delivered half already PROCESSED and counted as refused.
async fn failed_settle_is_retried_without_refusals(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let events = new_events(ORDERS, 4);
        harness.publish(&dialect, &events, true).await.map_err(fail)?;
        let outbox = dialect.outbox_dao();
        let batch = outbox.claim(ORDERS, 4).await.map_err(fail)?;
        assert_eq!(batch.len(), 4);
        let settlements: Vec<Settlement> = batch
            .events
            .iter()
            .enumerate()
            .map(|(index, event)| match index {
                0 | 1 => Settlement::Processed { id: event.id },
                _ => Settlement::Retry { id: event.id, delay: Duration::from_secs(10), error: "nack".into() },
            })
            .collect();
        let table = &dialect.tables().events();
        let trigger = format!("{}refuse_retries", dialect.tables().prefix());
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TRIGGER {trigger} BEFORE UPDATE ON {table} FOR EACH ROW \
             IF NEW.status = 'PENDING' AND OLD.status = 'IN_PROCESS' THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'retries refused for this test'; END IF"
        )))
        .execute(dialect.pool())
        .await
        .map_err(fail)?;
        let failed = outbox.settle(&batch, &settlements).await;
        assert!(failed.is_err(), "the trigger fails the statement that settles the retries");
        sqlx::raw_sql(AssertSqlSafe(format!("DROP TRIGGER {trigger}")))
            .execute(dialect.pool())
            .await
            .map_err(fail)?;

        let report = outbox.settle(&batch, &settlements).await.map_err(fail)?;
        assert_eq!((report.settled, report.refused), (4, 0), "the retried settle found its rows");
        for (index, event) in batch.events.iter().enumerate() {
            let row = outbox.get(event.id).await.map_err(fail)?.ok_or_else(|| fail("row vanished"))?;
            let expected = if index < 2 { EventStatus::Processed } else { EventStatus::Pending };
            assert_eq!(row.status, expected, "event {index}");
            assert_eq!(row.attempts, 1, "event {index} counted one send, not one per settle attempt");
        }
        Ok(())
    })
    .await
}

// ---- the writer -------------------------------------------------------------------------------

/// Reads the server's count of INSERT statements run by this session so far.
async fn inserts_so_far(connection: &mut sqlx::MySqlConnection) -> Result<i64, Failed> {
    let row = sqlx::query("SHOW SESSION STATUS LIKE 'Com_insert'")
        .fetch_one(&mut *connection)
        .await
        .map_err(fail)?;
    let value: String = row.try_get(1).map_err(fail)?;
    value.parse().map_err(fail)
}

async fn batch_of_1000_in_two_statements(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |_harness, dialect| async move {
        let events = new_events(ORDERS, 1000);
        let mut connection = dialect.pool().acquire().await.map_err(fail)?;
        let before = inserts_so_far(&mut connection).await?;
        let mut tx = sqlx::Connection::begin(&mut *connection).await.map_err(fail)?;
        dialect.writer().write(&mut tx, &events).await.map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        let after = inserts_so_far(&mut connection).await?;
        assert_eq!(after - before, 2, "1000 rows in chunks of 500");
        let counts = dialect.outbox_dao().counts().await.map_err(fail)?;
        assert_eq!(counts.status_total(EventStatus::Pending), 1000);
        Ok(())
    })
    .await
}

async fn oversized_value_fails(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let mut events = new_events(ORDERS, 2);
        events[1].partition_key = Some("k".repeat(300));
        let error = harness.publish(&dialect, &events, true).await.err().ok_or_else(|| fail("accepted"))?;
        assert!(!error.is_temporary(), "{error}");
        assert!(error.to_string().contains("writing outbox events"), "{error}");
        let counts = dialect.outbox_dao().counts().await.map_err(fail)?;
        assert_eq!(counts.status_total(EventStatus::Pending), 0, "nothing of the batch was stored");
        Ok(())
    })
    .await
}

// ---- the inbox ----------------------------------------------------------------------------------

/// MySQL records a batch one insert per id (each must tell new from duplicate by itself): outside
/// a caller's transaction they run in one of their own, or a failure after the first insert would
/// leave ids recorded whose effect the inbox then skips.
async fn failed_batch_record_records_nothing(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |_harness, dialect| async move {
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let tables = dialect.tables();
        let refuse_second = format!(
            "CREATE TRIGGER {}refuse_one BEFORE INSERT ON {} FOR EACH ROW \
             IF NEW.id = X'{}' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused on purpose'; END IF",
            tables.prefix(),
            tables.consumed(),
            ids[1].simple()
        );
        sqlx::raw_sql(AssertSqlSafe(refuse_second)).execute(dialect.pool()).await.map_err(fail)?;
        let inbox = dialect.inbox_dao();
        let failed = inbox.record_many("billing", &ids).await;
        assert!(
            failed.as_ref().is_err_and(|error| error.to_string().contains("refused on purpose")),
            "{failed:?}"
        );
        let recorded = inbox.consumed("billing", &ids).await.map_err(fail)?;
        assert!(recorded.is_empty(), "a failed batch left {recorded:?} recorded");
        // The refused id alone fails; the others record as one batch.
        let others = [ids[0], ids[2]];
        assert_eq!(inbox.record_many("billing", &others).await.map_err(fail)?, others);
        Ok(())
    })
    .await
}

// ---- the mysql_async writer -------------------------------------------------------------------

async fn mysql_async_pool(harness: &MySqlHarness) -> Result<mysql_async::Pool, Failed> {
    let options = mysql_async::Opts::from_url(harness.0.url()).map_err(fail)?;
    Ok(mysql_async::Pool::new(options))
}

async fn publish_mysql_async(
    pool: &mysql_async::Pool,
    dialect: &MySqlDialect,
    events: &[NewOutboxEvent],
    commit: bool,
) -> TestResult {
    let mut connection = pool.get_conn().await.map_err(fail)?;
    let mut tx = connection.start_transaction(mysql_async::TxOpts::default()).await.map_err(fail)?;
    dialect.writer().write(&mut tx, events).await.map_err(fail)?;
    if commit { tx.commit().await.map_err(fail) } else { tx.rollback().await.map_err(fail) }
}

async fn mysql_async_commit_and_rollback(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let pool = mysql_async_pool(&harness).await?;
        let rolled_back = new_events(ORDERS, 3);
        publish_mysql_async(&pool, &dialect, &rolled_back, false).await?;
        let committed = new_events(ORDERS, 1000);
        publish_mysql_async(&pool, &dialect, &committed, true).await?;
        publish_mysql_async(&pool, &dialect, &[], true).await?;

        let broker = MemoryBroker::new();
        let config = Config::builder()
            .event(ORDERS, EventSettings::new(TOPIC).polling(fast_polling()))
            .build()
            .map_err(fail)?;
        let engine = start(&dialect, config, Arc::new(broker.clone())).await?;
        let delivered = eventually("the committed events are delivered", Duration::from_secs(60), || {
            let broker = broker.clone();
            async move { Ok(broker.delivery_counts().len() == 1000) }
        })
        .await;
        engine.shutdown(Duration::from_secs(10)).await.map_err(fail)?;
        pool.disconnect().await.map_err(fail)?;
        delivered?;
        let counts = broker.delivery_counts();
        assert!(ids_of(&committed).iter().all(|id| counts.contains_key(id)), "every committed event");
        assert!(rolled_back.iter().all(|event| !counts.contains_key(&event.id)), "rolled back never");
        Ok(())
    })
    .await
}

async fn writers_write_identical_rows(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let pool = mysql_async_pool(&harness).await?;
        let mut by_sqlx = new_events(ORDERS, 2);
        let mut by_mysql_async = new_events(ORDERS, 2);
        make_awkward(&mut by_sqlx[0]);
        make_awkward(&mut by_mysql_async[0]);
        harness.publish(&dialect, &by_sqlx, true).await.map_err(fail)?;
        publish_mysql_async(&pool, &dialect, &by_mysql_async, true).await?;
        pool.disconnect().await.map_err(fail)?;

        assert_written_alike(&*dialect.outbox_dao(), &by_sqlx, &by_mysql_async).await?;
        Ok(())
    })
    .await
}

async fn mysql_async_inbox_follows_tx(harness: Arc<MySqlHarness>) -> TestResult {
    with_fresh(harness, |harness, dialect| async move {
        let pool = mysql_async_pool(&harness).await?;
        let writer = dialect.writer();
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let mut connection = pool.get_conn().await.map_err(fail)?;

        let mut tx = connection.start_transaction(mysql_async::TxOpts::default()).await.map_err(fail)?;
        assert!(writer.record(&mut tx, "shipping", ids[0]).await.map_err(fail)?);
        tx.rollback().await.map_err(fail)?;

        let mut tx = connection.start_transaction(mysql_async::TxOpts::default()).await.map_err(fail)?;
        let new = writer.record_many(&mut tx, "shipping", &[ids[0], ids[1], ids[1]]).await.map_err(fail)?;
        assert_eq!(new, vec![ids[0], ids[1]], "the rolled-back record is gone; a repeated id counts once");
        assert!(!writer.record(&mut tx, "shipping", ids[0]).await.map_err(fail)?, "duplicate in the same tx");
        assert!(writer.record(&mut tx, "billing", ids[0]).await.map_err(fail)?, "consumers are separate");
        tx.commit().await.map_err(fail)?;
        drop(connection);
        pool.disconnect().await.map_err(fail)?;

        let recorded = dialect.inbox_dao().consumed("shipping", &ids).await.map_err(fail)?;
        assert_eq!(recorded, vec![ids[0], ids[1]]);
        Ok(())
    })
    .await
}
