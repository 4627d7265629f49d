//! A real Prometheus scrape: the exporter's own HTTP endpoint, read over TCP while an engine runs.
//! The run exercises everything oncebox records (deliveries and a retry, a permanent failure moved
//! to the DLQ, a settle refused after its rows were re-claimed, stuck recovery, the inbox with a
//! cache, a durable inbox, a manual DLQ change through the API, the gauges and a gauge refresh
//! that fails), and
//! every name in `names::ALL` must be in the scrape.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use oncebox_cache::MemoryCache;
use oncebox_core::config::{EventSettings, Polling};
use oncebox_core::consume::Received;
use oncebox_core::event::{ClaimedBatch, OutboxCounts, OutboxEvent, SettleReport, Settlement};
use oncebox_core::stored::{StoredEvent, StoredInbox, StoredInboxSettings};
use oncebox_core::{
    Config, Consumed, Dialect, Engine, EngineParts, Error, Inbox, OutboxDao, Publisher, SchemaPlan,
    TableNames,
};
use oncebox_dlq_api::{ApiToken, BearerTokens, DlqApi, Role};
use oncebox_metrics::{Metrics, RowCountGauges, names, prometheus_builder};
use oncebox_sqlite::SqliteDialect;
use oncebox_testkit::MemoryBroker;
use oncebox_testkit::eventually;
use oncebox_testkit::runner::fail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;
use uuid::Uuid;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const ORDERS: &str = "order-created";
const POISON: &str = "poison";
/// The bound on waiting for the run and the scrape.
const WAIT: Duration = Duration::from_secs(60);

/// The SQLite outbox, except that the first settle of an order batch finds its rows recovered
/// and claimed again by "another worker" first, so the database refuses it (fencing).
struct Racing {
    inner: Arc<dyn OutboxDao>,
    raced: AtomicBool,
}

#[async_trait]
impl OutboxDao for Racing {
    async fn claim(&self, event_type: &str, limit: u32) -> oncebox_core::Result<ClaimedBatch> {
        self.inner.claim(event_type, limit).await
    }

    async fn settle(
        &self,
        batch: &ClaimedBatch,
        settlements: &[Settlement],
    ) -> oncebox_core::Result<SettleReport> {
        if batch.event_type == ORDERS && !batch.is_empty() && !self.raced.swap(true, Ordering::SeqCst) {
            self.inner.recover_stuck(Duration::ZERO, 10, 1_000).await?;
            self.inner.claim(ORDERS, 1_000).await?;
        }
        self.inner.settle(batch, settlements).await
    }

    async fn recover_stuck(
        &self,
        older_than: Duration,
        max_recoveries: u32,
        limit: u32,
    ) -> oncebox_core::Result<u64> {
        self.inner.recover_stuck(older_than, max_recoveries, limit).await
    }

    async fn delete_processed(&self, older_than: Duration, limit: u32) -> oncebox_core::Result<u64> {
        self.inner.delete_processed(older_than, limit).await
    }

    async fn get(&self, id: Uuid) -> oncebox_core::Result<Option<OutboxEvent>> {
        self.inner.get(id).await
    }

    async fn counts(&self) -> oncebox_core::Result<OutboxCounts> {
        self.inner.counts().await
    }
}

/// `GET /metrics` over a plain TCP connection, as Prometheus does.
async fn scrape(port: u16) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no HTTP header end in the scrape")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Ok(body.to_owned())
}

fn fast() -> Polling {
    Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_millis(100) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_of_a_running_engine_has_every_documented_name() -> TestResult {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    prometheus_builder()?.with_http_listener(([127, 0, 0, 1], port)).install()?;

    let path = std::env::temp_dir().join(format!("oncebox-scrape-{}.db", Uuid::new_v4().simple()));
    let dialect = SqliteDialect::connect(&path.to_string_lossy()).await?;
    dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: false }).await?;
    let publisher = Publisher::new(dialect.writer(), [ORDERS.to_owned(), POISON.to_owned()]);
    let mut tx = dialect.pool().begin().await?;
    for index in 0..20 {
        publisher.publish(&mut tx, ORDERS, &serde_json::json!({ "index": index })).await?;
    }
    let poison = publisher.publish(&mut tx, POISON, &serde_json::json!({ "bad": true })).await?;
    tx.commit().await?;

    let metrics: Arc<Metrics> = Arc::new(Metrics::new());
    let gauges = RowCountGauges::new(Duration::from_secs(1))
        .with_outbox(dialect.outbox_dao())
        .with_dlq(dialect.dlq_dao())
        .spawn();
    // A DLQ table that does not exist: its refreshes fail and are counted.
    let missing = dialect.clone().with_tables(&TableNames::with_prefix("missing_")?);
    let failing = RowCountGauges::new(Duration::from_secs(1)).with_dlq(missing.dlq_dao()).spawn();

    let broker = MemoryBroker::new();
    broker.fail_next(1);
    broker.reject(poison);
    let config = Config::builder()
        .event(ORDERS, EventSettings::new("orders").batch_size(10).polling(fast()))
        .event(POISON, EventSettings::new("poison").max_retries(0).polling(fast()))
        .emergency_timeout(Duration::from_secs(1))
        .stuck_recovery(Duration::from_secs(3), fast())
        .processed_clean_up(None)
        .dlq_enabled(true)
        .dlq_polling(fast())
        .dlq_clean_up(None)
        .build()?;
    let mut parts = EngineParts::new(config);
    parts.outbox = Some(Arc::new(Racing { inner: dialect.outbox_dao(), raced: AtomicBool::new(false) }));
    parts.dlq = Some(dialect.dlq_dao());
    parts.sender = Some(Arc::new(broker.clone()));
    parts.metrics = metrics.clone();
    let engine = Engine::start(parts)?;
    let dlq = dialect.dlq_dao();
    eventually("every order delivered and the poison event in the DLQ", WAIT, || async {
        let counts = dlq.counts().await.map_err(fail)?;
        Ok(broker.delivery_counts().len() >= 20 && counts.by_type_and_status.len() == 1)
    })
    .await
    .map_err(|error| format!("{error:?}"))?;
    engine.shutdown(Duration::from_secs(10)).await?;

    let inbox = Inbox::new("billing", dialect.inbox_dao(), ())
        .with_cache(Arc::new(MemoryCache::new(Duration::from_secs(60), 100)))
        .with_metrics(metrics.clone());
    let id = Uuid::now_v7();
    let first = inbox.consume_once(id, async || Ok::<_, Error>(())).await;
    let again = inbox.consume_once(id, async || Ok::<_, Error>(())).await;
    assert!(matches!(first, Ok(Consumed::Applied(()))) && matches!(again, Ok(Consumed::Duplicate)));

    // A durable inbox: one message stored, then processed with a transactional handler.
    let stored = StoredInbox::new("ledger", dialect.stored_inbox_dao())
        .with_settings(StoredInboxSettings {
            poll_interval: Duration::from_millis(20),
            ..StoredInboxSettings::default()
        })?
        .with_metrics(metrics.clone());
    let received = Received {
        id: Uuid::now_v7(),
        event_type: ORDERS.to_owned(),
        payload_type: None,
        created_at: Some(chrono::Utc::now()),
        headers: Default::default(),
        source: "queue 'ledger'",
        payload: br#"{"index":1}"#.to_vec(),
    };
    assert!(matches!(stored.keeper()(received).await, Ok(Consumed::Applied(()))));
    let processing = stored
        .processor()
        .on_in(ORDERS, dialect.clone(), |_tx, _event: StoredEvent<serde_json::Value>| {
            Box::pin(async { Ok(()) })
        })
        .start()?;

    let tokens = BearerTokens::new([ApiToken::new("on-call", "scrape-test-operator", Role::Operator)?])?;
    let api = DlqApi::with_tokens(dialect.dlq_dao(), tokens).metrics(metrics.clone()).router();
    let request = Request::builder()
        .method(Method::POST)
        .uri("/events/status")
        .header("content-type", "application/json")
        .header("authorization", "Bearer scrape-test-operator")
        .body(Body::from(serde_json::json!({ "event_type": POISON, "status": "RESOLVED" }).to_string()))?;
    assert_eq!(api.oneshot(request).await?.status(), StatusCode::OK);

    let last = Mutex::new(String::new());
    let complete = eventually("every documented name in the scrape", WAIT, || async {
        let scraped = scrape(port).await.map_err(fail)?;
        let complete = missing_names(&scraped).is_empty();
        *last.lock().map_err(fail)? = scraped;
        Ok(complete)
    })
    .await;
    let scraped = last.into_inner().unwrap_or_default();
    complete.map_err(|error| format!("{error:?}; missing: {:?}\n{scraped}", missing_names(&scraped)))?;
    assert!(scraped.contains(r#"oncebox_settles_refused_total{event_type="order-created"}"#), "{scraped}");
    assert!(scraped.contains(r#"oncebox_job_rows_total{job="stuck-event-recovery"}"#), "{scraped}");
    assert!(scraped.contains(r#"oncebox_dlq_manual_actions_total{action="resolved"} 1"#), "{scraped}");
    assert!(!scraped.contains(&id.to_string()), "an event id became a label");

    processing.shutdown(Duration::from_secs(10)).await;
    gauges.stop().await;
    failing.stop().await;
    dialect.pool().close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.to_string_lossy()));
    }
    Ok(())
}

fn missing_names(scraped: &str) -> Vec<&'static str> {
    names::ALL.iter().copied().filter(|name| !scraped.contains(&format!("# TYPE {name} "))).collect()
}
