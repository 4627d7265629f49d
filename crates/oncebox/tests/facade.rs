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
    assert_eq!(tables.len(), 5, "{tables:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_only_web_tier_and_a_relay_share_the_tables_and_until_drained_sees_the_drain()
-> TestResult {
    use oncebox::{DrainScope, EventStatus};

    let url = database_url("publisher-only")?;
    // The web tier: no sender, no poller; it creates the tables and validates event types.
    let web_dialect = SqliteDialect::connect(&url).await?;
    let pool = web_dialect.pool().clone();
    let web = Oncebox::builder(Config::from_yaml_str(CONFIG)?)
        .dialect(web_dialect)
        .publisher_only()
        .start()
        .await?;
    assert!(!web.wake("order-created"), "a publisher-only instance has no poller");

    let mut ids = Vec::new();
    let mut tx = pool.begin().await?;
    for id in 0..5 {
        ids.push(web.publisher().publish(&mut tx, "order-created", &OrderCreated { id }).await?);
    }
    tx.commit().await?;
    let mut tx = pool.begin().await?;
    let unknown = web.publisher().publish(&mut tx, "order-deleted", &OrderCreated { id: 9 }).await;
    assert_eq!(
        unknown.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidInput),
        "event types are still checked"
    );
    tx.rollback().await?;

    // Nothing relays them here: the wait times out and says what is still open.
    let waited = web.until_drained(DrainScope::EventType("order-created"), Duration::from_millis(50)).await;
    let error = waited.err().ok_or("nothing can drain without a relay")?;
    assert_eq!(error.kind(), ErrorKind::Timeout);
    assert!(error.to_string().contains("5 event(s) of type 'order-created'"), "{error}");
    let pending = web.outbox_dao().counts().await?.status_total(EventStatus::Pending);
    assert_eq!(pending, 5, "the web tier claimed nothing");

    // The relay deployment: the same block and a sender.
    let broker = MemoryBroker::new();
    let relay = Oncebox::builder(Config::from_yaml_str(CONFIG)?)
        .dialect(SqliteDialect::connect(&url).await?)
        .sender(broker.clone())
        .start()
        .await?;
    web.until_drained(DrainScope::All, Duration::from_secs(60)).await?;
    let delivered = broker.delivery_counts();
    for id in &ids {
        assert!(delivered.contains_key(id), "until_drained returned before {id} was delivered");
    }
    let counts = web.outbox_dao().counts().await?;
    assert_eq!(counts.status_total(EventStatus::Processed), 5, "drained means settled");
    relay.shutdown(Duration::from_secs(10)).await?;
    web.shutdown(Duration::from_secs(10)).await?;
    Ok(())
}

/// A sender that reports `transport` and delivers to an in-memory broker. Written without the
/// `async_trait` macro (the facade's tests do not depend on it): the signature is the one the
/// macro gives `Sender::send`.
struct ReportingSender {
    transport: Option<oncebox::config::TransportKind>,
    broker: MemoryBroker,
}

impl oncebox::Sender for ReportingSender {
    fn send<'s, 'b, 'f>(
        &'s self,
        batch: &'b [oncebox::OutboundMessage],
        deadline: oncebox::Deadline,
    ) -> std::pin::Pin<Box<dyn Future<Output = Vec<Result<(), oncebox::SendError>>> + Send + 'f>>
    where
        's: 'f,
        'b: 'f,
        Self: 'f,
    {
        self.broker.send(batch, deadline)
    }

    fn transport(&self) -> Option<oncebox::config::TransportKind> {
        self.transport
    }
}

const KAFKA_CONFIG: &str = r#"
oncebox:
  outbox:
    sender:
      type: kafka
    events:
      order-created:
        topic: orders
"#;

#[tokio::test]
async fn a_sender_of_another_transport_than_sender_type_fails_to_start_naming_the_key() -> TestResult {
    use oncebox::config::TransportKind;
    let dialect = SqliteDialect::connect(&database_url("wrongsender")?).await?;
    let rabbit = ReportingSender { transport: Some(TransportKind::RabbitMq), broker: MemoryBroker::new() };
    let error = Oncebox::builder(Config::from_yaml_str(KAFKA_CONFIG)?)
        .dialect(dialect)
        .sender(rabbit)
        .start()
        .await
        .err();
    assert_eq!(error.as_ref().map(|e| e.kind()), Some(ErrorKind::Config));
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("oncebox.outbox.sender.type"), "{message}");
    assert!(message.contains("is kafka") && message.contains("delivers to rabbitmq"), "{message}");

    // The Java spelling `rabbit` matches a RabbitMQ sender, and a sender that reports no transport
    // (a custom or test sender) passes whatever the key says.
    let rabbit_config = Config::from_yaml_str(&KAFKA_CONFIG.replace("type: kafka", "type: rabbit"))?;
    let rabbit = ReportingSender { transport: Some(TransportKind::RabbitMq), broker: MemoryBroker::new() };
    let dialect = SqliteDialect::connect(&database_url("rabbitsender")?).await?;
    let service = Oncebox::builder(rabbit_config).dialect(dialect).sender(rabbit).start().await?;
    service.shutdown(Duration::from_secs(5)).await?;
    let dialect = SqliteDialect::connect(&database_url("customsender")?).await?;
    let custom = ReportingSender { transport: None, broker: MemoryBroker::new() };
    let service = Oncebox::builder(Config::from_yaml_str(KAFKA_CONFIG)?)
        .dialect(dialect)
        .sender(custom)
        .start()
        .await?;
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

/// A message of a user's own transport (SQS, NATS, a hand-written Kafka loop): the inbox needs only
/// a way to read its id.
#[derive(Debug, Clone, PartialEq)]
struct OwnMessage {
    event_id: uuid::Uuid,
    body: &'static str,
}

#[tokio::test]
async fn the_four_consumer_calls_work_from_a_loop_of_ones_own() -> TestResult {
    use oncebox::Consumed;

    let dialect = SqliteDialect::connect(&database_url("consumer-calls")?).await?;
    let pool = dialect.pool().clone();
    let service =
        Oncebox::builder(Config::from_yaml_str("oncebox:\n  inbox: {}\n")?).dialect(dialect).start().await?;
    sqlx::query("CREATE TABLE effects (id TEXT PRIMARY KEY, body TEXT NOT NULL)").execute(&pool).await?;
    let inbox = service.inbox("own-loop");
    let effects =
        || async { sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM effects").fetch_one(&pool).await };

    // 1. By id, with the effect in the same transaction (Java: consume(UUID, Runnable)).
    let by_id = uuid::Uuid::now_v7();
    for expected_applied in [true, false] {
        let mut tx = pool.begin().await?;
        let outcome = inbox
            .consume_in(&mut tx, by_id, async |tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>| {
                sqlx::query("INSERT INTO effects VALUES (?, 'by id')")
                    .bind(by_id.to_string())
                    .execute(&mut **tx)
                    .await
            })
            .await?;
        tx.commit().await?;
        assert_eq!(outcome.is_applied(), expected_applied, "by id");
    }
    assert_eq!(effects().await?, 1);

    // 2. By message with an id extractor (Java: consume(T, extractor, Consumer<T>)): the id is
    // read from the message, and the effect gets the message.
    let message = OwnMessage { event_id: uuid::Uuid::now_v7(), body: "by message" };
    let id_of = |message: &OwnMessage| message.event_id;
    for expected_applied in [true, false] {
        let delivered = message.clone();
        let outcome = inbox
            .consume_once(id_of(&delivered), async || {
                sqlx::query("INSERT INTO effects VALUES (?, ?)")
                    .bind(delivered.event_id.to_string())
                    .bind(delivered.body)
                    .execute(&pool)
                    .await
            })
            .await?;
        assert_eq!(outcome.is_applied(), expected_applied, "by message");
    }
    assert_eq!(effects().await?, 2);

    // 3. By a set of ids (Java: consume(Set<UUID>, Consumer<Set<UUID>>)): the effect gets the ids
    // not consumed before; `by_id` was.
    let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let mut tx = pool.begin().await?;
    let outcome = inbox
        .consume_all_in(
            &mut tx,
            vec![a, by_id, b],
            |id| *id,
            async |_tx, fresh: Vec<uuid::Uuid>| Ok::<_, std::io::Error>(fresh),
        )
        .await?;
    tx.commit().await?;
    assert_eq!(outcome, Consumed::Applied(vec![a, b]), "only the new ids, in order");

    // 4. By a list of messages with an id extractor (Java: consume(List<T>, extractor, …)):
    // filtered and in order (the Java library loses the order); a repeat within the list counts
    // once, and a message consumed before is dropped.
    let first = OwnMessage { event_id: uuid::Uuid::now_v7(), body: "first" };
    let second = OwnMessage { event_id: uuid::Uuid::now_v7(), body: "second" };
    let batch = vec![second.clone(), message.clone(), first.clone(), second.clone()];
    let outcome = inbox
        .consume_all_once(batch, id_of, async |fresh: Vec<OwnMessage>| Ok::<_, std::io::Error>(fresh))
        .await?;
    assert_eq!(outcome, Consumed::Applied(vec![second.clone(), first.clone()]));
    let again = inbox.consume_all_once(vec![first, second], id_of, async |fresh: Vec<OwnMessage>| {
        Ok::<_, std::io::Error>(fresh)
    });
    assert_eq!(again.await?, Consumed::Duplicate, "every message was consumed before");
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

/// An event the inbox applied comes back after its id was cleaned up (here by a DLQ re-drive; a
/// replay from the start of a topic or a retry past the window do the same): the inbox refuses it
/// as older than the ids it keeps, so the effect happens once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_re_driven_after_its_inbox_record_was_cleaned_is_not_applied_again() -> TestResult {
    const RE_DRIVE: &str = r#"
oncebox:
  outbox:
    events:
      order-created:
        topic: orders
        max-retries: 0
        polling: { min-fixed-delay: 10ms, max-fixed-delay: 50ms }
    dlq:
      enabled: true
      polling: { type: fixed, initial-delay: 0s, fixed-delay: 50ms }
  inbox:
    clean-up:
      ttl: 1s
      polling: { type: fixed, initial-delay: 0s, fixed-delay: 100ms }
"#;
    let dialect = SqliteDialect::connect(&database_url("re-drive")?).await?;
    let pool = dialect.pool().clone();
    let broker = MemoryBroker::new();
    let mut orders = broker.subscribe("orders");
    let outbox = Oncebox::builder(Config::from_yaml_str(RE_DRIVE)?)
        .dialect(dialect)
        .sender(broker.clone())
        .start()
        .await?;
    sqlx::query("CREATE TABLE effects (id TEXT NOT NULL)").execute(&pool).await?;
    let inbox = outbox.inbox("billing");
    // What a consumer does with each delivery: refuse what the inbox cannot vouch for, then apply
    // the effect with the id in one transaction.
    let consume = |message: oncebox::OutboundMessage| {
        let (inbox, pool) = (inbox.clone(), pool.clone());
        async move {
            if inbox.admit(message.id, Some(message.created_at)).is_err() {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(false);
            }
            let mut tx = pool.begin().await?;
            let outcome = inbox
                .consume_in(&mut tx, message.id, async |tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>| {
                    sqlx::query("INSERT INTO effects VALUES (?)")
                        .bind(message.id.to_string())
                        .execute(&mut **tx)
                        .await
                })
                .await?;
            tx.commit().await?;
            Ok(outcome.is_applied())
        }
    };
    let effects =
        || async { sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM effects").fetch_one(&pool).await };

    let mut tx = pool.begin().await?;
    let id = outbox.publisher().publish(&mut tx, "order-created", &OrderCreated { id: 7 }).await?;
    tx.commit().await?;
    let first =
        tokio::time::timeout(Duration::from_secs(20), orders.recv()).await?.ok_or("the broker closed")?;
    assert!(consume(first).await?, "the first delivery is applied");

    // The id leaves the inbox with its clean-up. The row ends FAILED (as when the broker's
    // acknowledgement was lost on every try), reaches the DLQ, and an operator re-drives it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while inbox.is_consumed(id).await? {
        assert!(Instant::now() < deadline, "the inbox clean-up never deleted the record");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dlq = outbox.dlq();
    sqlx::query("UPDATE outbox_events SET status = 'FAILED' WHERE id = ?")
        .bind(id.to_string())
        .execute(&pool)
        .await?;
    while dlq.get(id).await?.is_none() {
        assert!(Instant::now() < deadline, "the event never reached the DLQ");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let selection = oncebox::event::DlqSelection::Ids(vec![id]);
    assert_eq!(dlq.set_status(&selection, oncebox::DlqStatus::ToRetry).await?, 1);
    let again =
        tokio::time::timeout(Duration::from_secs(20), orders.recv()).await?.ok_or("the broker closed")?;
    assert_eq!(again.id, id, "the re-driven event is delivered again");
    assert!(!consume(again).await?, "the inbox refuses an event older than the ids it keeps");
    assert_eq!(effects().await?, 1, "the effect happened once");
    outbox.shutdown(Duration::from_secs(10)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_inbox_from_the_config_applies_a_stored_message_and_cleans_it_up_under_the_job_lock()
-> TestResult {
    let dialect = SqliteDialect::connect(&database_url("durable")?).await?;
    let pool = dialect.pool().clone();
    let config = Config::from_yaml_str(
        "oncebox:\n  inbox:\n    durable:\n      poll-interval: 20ms\n      keep-processed: 1ms\n      clean-up-every: 50ms\n",
    )?;
    let service = Oncebox::builder(config).dialect(dialect).start().await?;
    let inbox = service.stored_inbox("billing")?;
    assert_eq!(inbox.settings().clean_up_every, Duration::from_millis(50), "the configured settings");
    let id = uuid::Uuid::now_v7();
    let received = oncebox::consume::Received {
        id,
        event_type: "order-created".to_owned(),
        payload_type: None,
        created_at: None,
        headers: Default::default(),
        source: "queue 'billing'",
        payload: br#"{"order":1}"#.to_vec(),
    };
    assert!(matches!(inbox.keeper()(received).await, Ok(Consumed::Applied(()))));
    let applied = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = applied.clone();
    let processing = inbox
        .processor()
        .on("order-created", move |_: oncebox::stored::StoredEvent<serde_json::Value>| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(()) }
        })
        .start()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while inbox.dao().get("billing", id).await?.is_some() {
        assert!(Instant::now() < deadline, "the processed message was never cleaned up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    processing.shutdown(Duration::from_secs(5)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 1);
    let jobs: Vec<String> = sqlx::query_scalar("SELECT name FROM outbox_jobs").fetch_all(&pool).await?;
    assert_eq!(jobs, ["stored-inbox-clean-up:billing"], "the clean-up ran under its job lock");
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_inbox_processor_runs_at_most_its_concurrency_over_all_its_event_types() -> TestResult {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dialect = SqliteDialect::connect(&database_url("durable-budget")?).await?;
    let config = Config::from_yaml_str(
        "oncebox:\n  inbox:\n    durable:\n      poll-interval: 20ms\n      concurrency: 2\n",
    )?;
    let service = Oncebox::builder(config).dialect(dialect).start().await?;
    let inbox = service.stored_inbox("billing")?;
    let types = ["order-created", "order-paid", "order-shipped"];
    for event_type in types {
        for _ in 0..4 {
            let received = oncebox::consume::Received {
                id: uuid::Uuid::now_v7(),
                event_type: event_type.to_owned(),
                payload_type: None,
                created_at: None,
                headers: Default::default(),
                source: "queue 'billing'",
                payload: b"{}".to_vec(),
            };
            assert!(matches!(inbox.keeper()(received).await, Ok(Consumed::Applied(()))));
        }
    }
    let (running, most, done) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut processor = inbox.processor();
    for event_type in types {
        let (running, most, done) = (running.clone(), most.clone(), done.clone());
        processor = processor.on(event_type, move |_: oncebox::stored::StoredEvent<serde_json::Value>| {
            let (running, most, done) = (running.clone(), most.clone(), done.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        });
    }
    let processing = processor.start()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.load(Ordering::SeqCst) < 12 {
        assert!(Instant::now() < deadline, "not every message ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    processing.shutdown(Duration::from_secs(5)).await;
    assert_eq!(most.load(Ordering::SeqCst), 2, "two at once over three types, not two per type");
    service.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}
