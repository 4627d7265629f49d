//! The metrics hook and the row-count gauges recorded into a real Prometheus recorder, from a real
//! engine relaying SQLite rows to the in-memory broker and a real inbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncebox_core::config::{Backoff, EventSettings};
use oncebox_core::consume::Received;
use oncebox_core::stored::{StoredEvent, StoredInbox, StoredInboxSettings};
use oncebox_core::{Config, Consumed, Dialect, Engine, EngineParts, Error, Inbox, Publisher, SchemaPlan};
use oncebox_metrics::{Metrics, RowCountGauges, names, prometheus_builder};
use oncebox_sqlite::SqliteDialect;
use oncebox_testkit::MemoryBroker;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The value of the series `name{labels}` in a Prometheus text rendering (labels in the order
/// they were recorded).
fn value(rendered: &str, name: &str, labels: &str) -> Option<f64> {
    let series = format!("{name}{{{labels}}} ");
    rendered.lines().find_map(|line| line.strip_prefix(&series)).and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_and_the_inbox_report_into_prometheus() -> TestResult {
    let recorder = prometheus_builder()?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let path = std::env::temp_dir().join(format!("oncebox-metrics-{}.db", uuid::Uuid::new_v4().simple()));
    let dialect = SqliteDialect::connect(&path.to_string_lossy()).await?;
    dialect.create_schema(SchemaPlan { outbox: true, dlq: false, inbox: true, jobs: false }).await?;
    let publisher = Publisher::new(dialect.writer(), ["order-created".to_owned()]);
    let mut tx = dialect.pool().begin().await?;
    for index in 0..25 {
        publisher.publish(&mut tx, "order-created", &serde_json::json!({ "index": index })).await?;
    }
    tx.commit().await?;

    // Before the relay runs, the 25 events wait: the oldest-pending gauge says how long.
    let gauges = RowCountGauges::new(Duration::from_secs(60)).with_outbox(dialect.outbox_dao());
    gauges.refresh().await?;
    let waiting = value(&handle.render(), names::OLDEST_PENDING_AGE, r#"event_type="order-created""#);
    assert!(waiting.is_some_and(|age| (0.0..600.0).contains(&age)), "{waiting:?}");

    let broker = MemoryBroker::new();
    // The first message sent fails and is retried, counted as such.
    broker.fail_next(1);
    let config = Config::builder()
        .event(
            "order-created",
            EventSettings::new("orders")
                .batch_size(10)
                .backoff(Backoff { enabled: false, ..Backoff::default() }),
        )
        .processed_clean_up(None)
        .build()?;
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(dialect.outbox_dao());
    parts.sender = Some(Arc::new(broker.clone()));
    parts.metrics = Arc::new(Metrics::new());
    let engine = Engine::start(parts)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while broker.delivery_counts().len() < 25 {
        if Instant::now() > deadline {
            return Err("gave up waiting: 25 events were not delivered within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine.shutdown(Duration::from_secs(10)).await?;

    let inbox = Inbox::new("billing", dialect.inbox_dao(), ()).with_metrics(Arc::new(Metrics::new()));
    let id = uuid::Uuid::now_v7();
    let first = inbox.consume_once(id, async || Ok::<_, Error>(())).await;
    let again = inbox.consume_once(id, async || Ok::<_, Error>(())).await;
    assert!(matches!(first, Ok(Consumed::Applied(()))) && matches!(again, Ok(Consumed::Duplicate)));

    gauges.refresh().await?;

    let rendered = handle.render();
    let delivered =
        value(&rendered, names::EVENTS_SETTLED, r#"event_type="order-created",outcome="delivered""#);
    let retried = value(&rendered, names::EVENTS_SETTLED, r#"event_type="order-created",outcome="retried""#);
    assert_eq!(delivered, Some(25.0), "{rendered}");
    assert_eq!(retried, Some(1.0), "{rendered}");
    assert!(
        rendered.contains(&format!(r#"{}_bucket{{task="order-created",le="0.001"}}"#, names::TASK_DURATION)),
        "task durations must be a histogram with buckets, not a summary:\n{rendered}"
    );
    assert!(
        value(&rendered, names::TASK_RUNS, r#"task="order-created",outcome="short""#)
            .is_some_and(|n| n >= 1.0),
        "{rendered}"
    );
    assert_eq!(value(&rendered, names::TASKS_RUNNING, r#"task="order-created""#), Some(0.0), "{rendered}");
    // Every delivered event has its commit-to-acknowledgement delay, with buckets up to ten minutes.
    assert_eq!(
        value(&rendered, &format!("{}_count", names::DELIVERY_DELAY), r#"event_type="order-created""#),
        Some(25.0),
        "{rendered}"
    );
    for le in ["0.001", "600"] {
        let bucket = format!(r#"{}_bucket{{event_type="order-created",le="{le}"}}"#, names::DELIVERY_DELAY);
        assert!(rendered.contains(&bucket), "no bucket le={le}:\n{rendered}");
    }
    assert_eq!(
        value(&rendered, names::OUTBOX_ROWS, r#"event_type="order-created",status="processed""#),
        Some(25.0),
        "{rendered}"
    );
    assert_eq!(value(&rendered, names::INBOX_EVENTS, r#"consumer="billing",outcome="consumed""#), Some(1.0));
    assert_eq!(value(&rendered, names::INBOX_EVENTS, r#"consumer="billing",outcome="duplicate""#), Some(1.0));
    assert!(!rendered.contains(&id.to_string()), "an event id became a label");
    let drained = value(&rendered, names::OLDEST_PENDING_AGE, r#"event_type="order-created""#);
    assert_eq!(drained, Some(0.0), "a type with nothing pending drops to 0:\n{rendered}");

    stored_inbox_reports_into_prometheus(&dialect, &handle).await?;

    // Once the rows are gone, their gauge drops to 0 instead of keeping the last count.
    sqlx::query("DELETE FROM outbox_events").execute(dialect.pool()).await?;
    gauges.refresh().await?;
    let rendered = handle.render();
    assert_eq!(
        value(&rendered, names::OUTBOX_ROWS, r#"event_type="order-created",status="processed""#),
        Some(0.0),
        "{rendered}"
    );
    dialect.pool().close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.to_string_lossy()));
    }
    Ok(())
}

/// A durable inbox on the same database: the listener's hand-off (one message stored, its copy a
/// duplicate), a handler that fails once then applies it, and the rows gauge of a processor.
async fn stored_inbox_reports_into_prometheus(
    dialect: &SqliteDialect,
    handle: &metrics_exporter_prometheus::PrometheusHandle,
) -> TestResult {
    let settings = StoredInboxSettings {
        poll_interval: Duration::from_millis(20),
        backoff: Backoff {
            enabled: true,
            delay: Duration::from_millis(20),
            multiplier: 1.0,
            max_delay: Duration::from_millis(20),
            jitter: 0.0,
        },
        ..StoredInboxSettings::default()
    };
    let inbox = StoredInbox::new("ledger", dialect.stored_inbox_dao())
        .with_settings(settings)?
        .with_metrics(Arc::new(Metrics::new()));
    let keeper = inbox.keeper::<&'static str>();
    let received = Received {
        id: uuid::Uuid::now_v7(),
        event_type: "order-created".to_owned(),
        payload_type: None,
        created_at: Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
        headers: Default::default(),
        source: "queue 'ledger'",
        payload: br#"{"index":1}"#.to_vec(),
    };
    assert!(matches!(keeper(received.clone()).await, Ok(Consumed::Applied(()))));
    assert!(matches!(keeper(received).await, Ok(Consumed::Duplicate)));
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let processor = |runs: Arc<std::sync::atomic::AtomicUsize>| {
        inbox.processor().on("order-created", move |_event: StoredEvent<serde_json::Value>| {
            let run = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { if run == 0 { Err("the first run fails".into()) } else { Ok(()) } }
        })
    };
    let processing = processor(runs.clone()).start()?;
    let series =
        |outcome: &str| format!(r#"consumer="ledger",event_type="order-created",outcome="{outcome}""#);
    let deadline = Instant::now() + Duration::from_secs(30);
    while value(&handle.render(), names::STORED_MESSAGES, &series("processed")).is_none() {
        if Instant::now() > deadline {
            return Err(format!("the stored message was not processed:\n{}", handle.render()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    processing.shutdown(Duration::from_secs(10)).await;
    // A processor counts the rows of its types when it starts.
    let counting = processor(runs.clone()).start()?;
    let rows = r#"consumer="ledger",event_type="order-created",status="processed""#;
    while value(&handle.render(), names::STORED_ROWS, rows) != Some(1.0) {
        if Instant::now() > deadline {
            return Err(format!("no rows gauge:\n{}", handle.render()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    counting.shutdown(Duration::from_secs(10)).await;
    let rendered = handle.render();
    for (outcome, count) in [("stored", 1.0), ("duplicate", 1.0), ("retried", 1.0), ("processed", 1.0)] {
        assert_eq!(
            value(&rendered, names::STORED_MESSAGES, &series(outcome)),
            Some(count),
            "{outcome}:\n{rendered}"
        );
    }
    let by_type = r#"consumer="ledger",event_type="order-created""#;
    assert_eq!(
        value(&rendered, &format!("{}_count", names::STORED_HANDLER_DURATION), by_type),
        Some(2.0),
        "{rendered}"
    );
    assert_eq!(
        value(&rendered, &format!("{}_count", names::STORED_LATENCY), by_type),
        Some(1.0),
        "{rendered}"
    );
    let received = r#"consumer="ledger",event_type="order-created",status="received""#;
    assert_eq!(
        value(&rendered, names::STORED_ROWS, received),
        Some(0.0),
        "an empty status is 0:\n{rendered}"
    );
    Ok(())
}
