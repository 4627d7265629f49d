//! The facade assembled with the SQLite dialect and the in-memory broker.

use std::time::{Duration, Instant};

use oncebox::sqlite::SqliteDialect;
use oncebox::{Config, Consumed, ErrorKind, Lifecycle, Oncebox};
use oncebox_testkit::MemoryBroker;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn database_url(name: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let directory = std::env::temp_dir().join("oncebox-facade-tests");
    std::fs::create_dir_all(&directory)?;
    let path = directory.join(format!("{name}-{}.db", uuid::Uuid::now_v7()));
    Ok(format!("sqlite://{}", path.display()))
}

const CONFIG: &str = r#"
oncebox:
  outbox:
    events:
      order-created:
        topic: orders
        polling: { min-fixed-delay: 10ms, max-fixed-delay: 100ms }
  inbox: {}
"#;

#[derive(serde::Serialize)]
struct OrderCreated {
    id: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_commit_deliver_and_consume_once() -> TestResult {
    let dialect = SqliteDialect::connect(&database_url("loop")?).await?;
    let pool = dialect.pool().clone();
    let broker = MemoryBroker::new();
    let outbox = Oncebox::builder(Config::from_yaml_str(CONFIG)?)
        .dialect(dialect)
        .sender(broker.clone())
        .start()
        .await?;
    assert_eq!(outbox.state(), Lifecycle::Running);

    let mut tx = pool.begin().await?;
    let kept = outbox.publisher().publish(&mut tx, "order-created", &OrderCreated { id: 1 }).await?;
    tx.commit().await?;
    let mut tx = pool.begin().await?;
    let dropped = outbox.publisher().publish(&mut tx, "order-created", &OrderCreated { id: 2 }).await?;
    tx.rollback().await?;

    let mut tx = pool.begin().await?;
    let unknown = outbox.publisher().publish(&mut tx, "order-deleted", &OrderCreated { id: 3 }).await;
    assert_eq!(unknown.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput));
    tx.rollback().await?;

    let deadline = Instant::now() + Duration::from_secs(20);
    while !broker.delivery_counts().contains_key(&kept) {
        assert!(Instant::now() < deadline, "the committed event was not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!broker.delivery_counts().contains_key(&dropped));

    let inbox = outbox.inbox("billing");
    for expected_applied in [true, false] {
        let mut tx = pool.begin().await?;
        let outcome = inbox
            .consume_in(&mut tx, kept, async |tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>| {
                sqlx::query("SELECT 1").execute(&mut **tx).await.map(|_| ())
            })
            .await?;
        tx.commit().await?;
        assert_eq!(outcome.is_applied(), expected_applied);
    }
    let once = inbox.consume_once(kept, async || Ok::<_, std::io::Error>(())).await?;
    assert_eq!(once, Consumed::Duplicate, "the non-transactional flavour shares the inbox key");

    outbox.shutdown(Duration::from_secs(10)).await?;
    assert_eq!(outbox.state(), Lifecycle::Stopped);
    Ok(())
}

#[tokio::test]
async fn a_consumer_only_service_creates_no_outbox_tables_and_needs_no_sender() -> TestResult {
    let dialect = SqliteDialect::connect(&database_url("consumer")?).await?;
    let pool = dialect.pool().clone();
    let config = Config::from_yaml_str("oncebox:\n  inbox: {}\n")?;
    let service = Oncebox::builder(config).dialect(dialect).start().await?;
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(&pool)
            .await?;
    assert!(tables.contains(&"outbox_consumed_events".to_owned()), "{tables:?}");
    assert!(!tables.contains(&"outbox_events".to_owned()), "{tables:?}");
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

#[tokio::test]
async fn an_outbox_without_a_sender_fails_to_start_with_the_key_named() -> TestResult {
    let dialect = SqliteDialect::connect(&database_url("nosender")?).await?;
    let error = Oncebox::builder(Config::from_yaml_str(CONFIG)?).dialect(dialect).start().await.err();
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("oncebox.outbox") && message.contains("no sender"), "{message}");
    Ok(())
}

#[test]
fn public_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Oncebox<SqliteDialect>>();
    assert_send_sync::<oncebox::Inbox<std::sync::Arc<oncebox::sqlite::SqliteWriter>>>();
    assert_send_sync::<oncebox::EngineHandle>();
    assert_send_sync::<Config>();
    assert_send_sync::<oncebox::Error>();
}

/// Counts consumed-id cache lookups and hits.
#[derive(Default)]
struct CacheLookups {
    lookups: std::sync::atomic::AtomicUsize,
    hits: std::sync::atomic::AtomicUsize,
}

impl oncebox::OutboxMetrics for CacheLookups {
    fn cache_lookup(&self, hit: bool) {
        use std::sync::atomic::Ordering;
        self.lookups.fetch_add(1, Ordering::SeqCst);
        if hit {
            self.hits.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn a_configured_inbox_cache_is_attached_and_answers_a_redelivery() -> TestResult {
    use std::sync::atomic::Ordering;
    let dialect = SqliteDialect::connect(&database_url("cache")?).await?;
    let config =
        Config::from_yaml_str("oncebox:\n  inbox:\n    cache:\n      ttl: 10m\n      max-entries: 1000\n")?;
    let lookups = std::sync::Arc::new(CacheLookups::default());
    let service = Oncebox::builder(config).dialect(dialect).metrics(lookups.clone()).start().await?;
    let inbox = service.inbox("billing");
    let id = uuid::Uuid::now_v7();
    let first = inbox.consume_once(id, async || Ok::<_, oncebox::Error>(())).await;
    let again = inbox.consume_once(id, async || Ok::<_, oncebox::Error>(())).await;
    assert!(matches!(first, Ok(Consumed::Applied(()))));
    assert!(matches!(again, Ok(Consumed::Duplicate)));
    assert_eq!(lookups.lookups.load(Ordering::SeqCst), 2);
    assert_eq!(lookups.hits.load(Ordering::SeqCst), 1, "the redelivery was answered by the cache");
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_metrics_and_gauges_reach_the_installed_recorder() -> TestResult {
    let recorder = oncebox::metrics::prometheus_builder()?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    let config = Config::from_yaml_str(
        r#"
oncebox:
  outbox:
    events:
      order-created:
        topic: orders
        polling: { min-fixed-delay: 10ms, max-fixed-delay: 100ms }
    metrics:
      enabled: true
      gauge: { enabled: true, cache: { ttls: [1s, 1s, 1s] } }
"#,
    )?;
    let dialect = SqliteDialect::connect(&database_url("metrics")?).await?;
    let pool = dialect.pool().clone();
    let broker = MemoryBroker::new();
    let service = Oncebox::builder(config).dialect(dialect).sender(broker.clone()).start().await?;
    let mut tx = pool.begin().await?;
    for id in 0..3 {
        service.publisher().publish(&mut tx, "order-created", &OrderCreated { id }).await?;
    }
    tx.commit().await?;
    let processed = r#"oncebox_outbox_events{event_type="order-created",status="processed"} 3"#;
    let delivered = r#"oncebox_events_settled_total{event_type="order-created",outcome="delivered"} 3"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rendered = handle.render();
        if rendered.contains(processed) && rendered.contains(delivered) {
            break;
        }
        assert!(Instant::now() < deadline, "gave up waiting for the metrics:\n{rendered}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

/// A migration step or a publish-only tier needs the tables and the writer without a relay: the
/// facade alone names everything for it.
#[tokio::test]
async fn tables_and_writes_need_nothing_but_the_facade() -> TestResult {
    use oncebox::{Dialect, NewOutboxEvent, OutboxWriter, SchemaPlan, TableNames};
    let dialect = SqliteDialect::connect(&database_url("tables")?)
        .await?
        .with_tables(&TableNames::with_prefix("shop_")?);
    dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true }).await?;
    let event = NewOutboxEvent {
        id: uuid::Uuid::now_v7(),
        event_type: "order-created".to_owned(),
        payload: r#"{"id":1}"#.to_owned(),
        payload_type: "OrderCreated".to_owned(),
        headers: Default::default(),
        partition_key: None,
    };
    let mut tx = dialect.pool().begin().await?;
    dialect.writer().write(&mut tx, std::slice::from_ref(&event)).await?;
    tx.commit().await?;
    let stored = dialect.outbox_dao().get(event.id).await?;
    assert_eq!(stored.map(|row| row.event_type), Some("order-created".to_owned()));
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'shop_%' ORDER BY name",
    )
    .fetch_all(dialect.pool())
    .await?;
    assert_eq!(tables.len(), 4, "{tables:?}");
    Ok(())
}
