//! **oncebox** makes "change my database and tell the world" safe.
//!
//! A service writes an event row in the same transaction as its business rows (the transactional
//! **outbox**); oncebox's pollers deliver those rows to Kafka or RabbitMQ at least once; on the
//! receiving side the **inbox** remembers processed event ids so every effect happens once.
//!
//! Depend on this crate plus exactly one dialect and one transport, e.g. `oncebox` with the
//! `sqlite` feature (or `oncebox-postgres`) and `oncebox-kafka`. Assemble once at start-up:
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")]
//! # async fn example(sender: std::sync::Arc<dyn oncebox::Sender>) -> Result<(), Box<dyn std::error::Error>> {
//! use oncebox::{Config, Consumed, Oncebox};
//! use oncebox::sqlite::SqliteDialect;
//!
//! let config = Config::from_yaml_str(r#"
//! oncebox:
//!   outbox:
//!     events:
//!       order-created: { topic: orders }
//!   inbox: {}
//! "#)?;
//! let dialect = SqliteDialect::connect("sqlite://orders.db").await?;
//! let pool = dialect.pool().clone();
//! let outbox = Oncebox::builder(config).dialect(dialect).sender_arc(sender).start().await?;
//!
//! // Publish inside the business transaction: the event exists if and only if it commits.
//! let mut tx = pool.begin().await?;
//! // … business writes on &mut *tx …
//! outbox.publisher().publish(&mut tx, "order-created", &serde_json::json!({"id": 7})).await?;
//! tx.commit().await?;
//!
//! // Consume through the inbox: the id and the effect commit together.
//! let event_id = uuid::Uuid::now_v7();
//! let inbox = outbox.inbox("billing");
//! let mut tx = pool.begin().await?;
//! let outcome = inbox
//!     .consume_in(&mut tx, event_id, async |_tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>| {
//!         Ok::<_, std::io::Error>(())
//!     })
//!     .await?;
//! tx.commit().await?;
//! assert!(outcome.is_applied());
//! inbox.remember(event_id).await; // committed: later deliveries are answered by the cache
//!
//! outbox.shutdown(std::time::Duration::from_secs(30)).await?;
//! # Ok(()) }
//! ```
//!
//! # Declarative publish
//!
//! [`macro@publish`] on the function that holds the transaction writes its `Ok` value (or a named
//! argument) as an event into that transaction before returning; an `Err` writes nothing:
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # mod example {
//! use oncebox::Publisher;
//! use oncebox::sqlite::SqliteWriter;
//! use sqlx::{Sqlite, Transaction};
//!
//! #[derive(serde::Serialize)]
//! pub struct Order { pub id: i64, pub amount_cents: i64 }
//!
//! #[oncebox::publish("order-created")]
//! pub async fn place_order(
//!     outbox: &Publisher<SqliteWriter>,
//!     tx: &mut Transaction<'_, Sqlite>,
//!     amount_cents: i64,
//! ) -> Result<Order, oncebox::Error> {
//!     let id = 7; // … insert the order on &mut **tx and read its id …
//!     Ok(Order { id, amount_cents })
//! }
//!
//! #[oncebox::publish("order-created", payload = order)]
//! pub async fn import_order(
//!     outbox: &Publisher<SqliteWriter>,
//!     tx: &mut Transaction<'_, Sqlite>,
//!     order: &Order,
//! ) -> Result<(), oncebox::Error> {
//!     Ok(()) // … store the imported order on &mut **tx …
//! }
//! # }
//! ```
//!
//! The manual call ([`Publisher::publish`]) fits where the event is one step among others, needs
//! metadata ([`Publisher::publish_with`]) or a batch ([`Publisher::publish_all`]); the attribute
//! fits a function whose result *is* the event, and makes forgetting the publish impossible.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::Arc;
use std::time::Duration;

pub use oncebox_core::config::{self, EventSettings, Polling};
pub use oncebox_core::engine::{Lifecycle, StatsSnapshot, Wakers};
pub use oncebox_core::redact;
pub use oncebox_core::{
    BoxError, ConsumeError, Consumed, ConsumedCache, Daos, Deadline, Deserializer, Dialect, DlqDao,
    DlqHandler, DlqStatus, EngineHandle, Error, ErrorKind, EventMeta, EventStatus, Headers, Inbox, InboxDao,
    InboxWriter, JsonSerializer, NewOutboxEvent, NoCache, NoMetrics, OutboundMessage, OutboxDao, OutboxEvent,
    OutboxMetrics, OutboxWriter, Publisher, Result, SchemaPlan, SendError, Sender, SerializedEvent,
    Serializer, StoredInboxDao, StoredInboxTransactions, TableNames, Transactions, UuidGenerator,
    UuidV7Generator,
};
pub use oncebox_core::{Config, consume, event, hooks, stored, trace};

/// Publishes an event inside the function's own transaction when the function returns `Ok`.
///
/// `#[oncebox::publish("order-created")]` publishes the `Ok` value;
/// `#[oncebox::publish("order-created", payload = order)]` publishes the argument `order` as it is
/// after the body ran. The function must be an `async fn` returning a `Result` whose error converts
/// from [`Error`]; its publisher is the parameter typed `Publisher<…>` or `Oncebox<…>` (or
/// `publisher = <expression>`), its transaction the parameter typed `&mut Transaction<…>` (or
/// `tx = <parameter>`). See the [crate documentation](crate#declarative-publish) for an example.
pub use oncebox_macros::publish;

/// The embedded SQLite dialect.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use oncebox_sqlite as sqlite;

/// The PostgreSQL dialect.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use oncebox_postgres as postgres;

/// The MySQL / MariaDB dialect.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use oncebox_mysql as mysql;

/// The Oracle dialect.
#[cfg(feature = "oracle")]
#[cfg_attr(docsrs, doc(cfg(feature = "oracle")))]
pub use oncebox_oracle as oracle;

/// Metrics through the `metrics` facade, row-count gauges and a Prometheus recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use oncebox_metrics as metrics;

/// The REST API and web console for the dead letter queue:
/// `dlq_api::DlqApi::with_tokens(oncebox.dlq(), tokens).metrics(oncebox.metrics())
/// .re_drive_max_age(oncebox.config().dlq_re_drive_max_age()).router()`.
#[cfg(feature = "dlq-api")]
#[cfg_attr(docsrs, doc(cfg(feature = "dlq-api")))]
pub use oncebox_dlq_api as dlq_api;

/// Consumed-id caches for the inbox: in-process (moka) and, with `cache-redis`, Redis.
#[cfg(feature = "cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "cache")))]
pub use oncebox_cache as cache;
/// The Kafka transport.
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub use oncebox_kafka as kafka;

/// The RabbitMQ transport (lapin): sender with publisher confirms and the inbox listener.
#[cfg(feature = "rabbit")]
#[cfg_attr(docsrs, doc(cfg(feature = "rabbit")))]
pub use oncebox_rabbit as rabbit;

use oncebox_core::engine::{Engine, EngineParts};
use oncebox_core::hooks::LogDlqHandler;

/// A started oncebox: the engine's handle, the publisher and the inbox factory.
pub struct Oncebox<D: Dialect, S = JsonSerializer> {
    engine: EngineHandle,
    publisher: Publisher<Arc<D::Writer>, S>,
    writer: Arc<D::Writer>,
    dialect: Arc<D>,
    cache: Arc<dyn ConsumedCache>,
    metrics: Arc<dyn OutboxMetrics>,
    config: Config,
    /// The row-count gauge refresh, stopped at shutdown.
    #[cfg(feature = "metrics")]
    gauges: std::sync::Mutex<Option<oncebox_metrics::GaugeRefresh>>,
}

/// Which events [`Oncebox::until_drained`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainScope<'a> {
    /// Every event type.
    All,
    /// One event type.
    EventType(&'a str),
}

impl DrainScope<'_> {
    fn covers(&self, event_type: &str) -> bool {
        match self {
            DrainScope::All => true,
            DrainScope::EventType(wanted) => *wanted == event_type,
        }
    }
}

impl std::fmt::Display for DrainScope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainScope::All => f.write_str("every type"),
            DrainScope::EventType(event_type) => write!(f, "type '{event_type}'"),
        }
    }
}

/// Marks a builder that has no dialect yet.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDialect;

/// Assembles configuration, a dialect, a sender and optional hooks; [`start`](Self::start) spawns
/// the engine.
#[must_use]
pub struct OnceboxBuilder<D, S = JsonSerializer> {
    config: Config,
    dialect: D,
    sender: Option<Arc<dyn Sender>>,
    serializer: S,
    ids: Arc<dyn UuidGenerator>,
    metrics: Option<Arc<dyn OutboxMetrics>>,
    cache: Option<Arc<dyn ConsumedCache>>,
    dlq_handler: Arc<dyn DlqHandler>,
    worker_id: uuid::Uuid,
    relay: bool,
}

impl Oncebox<Unassembled> {
    /// Starts assembling oncebox from a validated configuration.
    pub fn builder(config: Config) -> OnceboxBuilder<NoDialect> {
        OnceboxBuilder {
            config,
            dialect: NoDialect,
            sender: None,
            serializer: JsonSerializer,
            ids: Arc::new(UuidV7Generator),
            metrics: None,
            cache: None,
            dlq_handler: Arc::new(LogDlqHandler),
            worker_id: uuid::Uuid::new_v4(),
            relay: true,
        }
    }
}

/// The type behind [`Oncebox::builder`] before a dialect is chosen; it has no values.
#[doc(hidden)]
pub enum Unassembled {}

#[oncebox_core::async_trait]
impl Dialect for Unassembled {
    type Writer = ();
    fn name(&self) -> &'static str {
        match *self {}
    }
    fn with_tables(self, _tables: &oncebox_core::TableNames) -> Self {
        match self {}
    }
    async fn create_schema(&self, _plan: SchemaPlan) -> Result<()> {
        match *self {}
    }
    fn daos(&self) -> oncebox_core::Daos {
        match *self {}
    }
    fn writer(&self) -> Self::Writer {
        match *self {}
    }
}

impl<S> OnceboxBuilder<NoDialect, S> {
    /// The database backend (e.g. `SqliteDialect`, `PgDialect`).
    pub fn dialect<D: Dialect>(self, dialect: D) -> OnceboxBuilder<D, S> {
        OnceboxBuilder {
            config: self.config,
            dialect,
            sender: self.sender,
            serializer: self.serializer,
            ids: self.ids,
            metrics: self.metrics,
            cache: self.cache,
            dlq_handler: self.dlq_handler,
            worker_id: self.worker_id,
            relay: self.relay,
        }
    }
}

impl<D, S> OnceboxBuilder<D, S> {
    /// The transport that delivers events (required when `oncebox.outbox` is configured).
    pub fn sender(self, sender: impl Sender + 'static) -> Self {
        self.sender_arc(Arc::new(sender))
    }

    /// The transport, already shared.
    pub fn sender_arc(mut self, sender: Arc<dyn Sender>) -> Self {
        self.sender = Some(sender);
        self
    }

    /// Replaces the JSON serializer.
    pub fn serializer<S2>(self, serializer: S2) -> OnceboxBuilder<D, S2> {
        OnceboxBuilder {
            config: self.config,
            dialect: self.dialect,
            sender: self.sender,
            serializer,
            ids: self.ids,
            metrics: self.metrics,
            cache: self.cache,
            dlq_handler: self.dlq_handler,
            worker_id: self.worker_id,
            relay: self.relay,
        }
    }

    /// Replaces the UUIDv7 id generator.
    pub fn uuid_generator(mut self, ids: impl UuidGenerator + 'static) -> Self {
        self.ids = Arc::new(ids);
        self
    }

    /// Records metrics through this hook.
    pub fn metrics(mut self, metrics: Arc<dyn OutboxMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Puts a consumed-id cache in front of the inbox's single-event calls.
    pub fn consumed_cache(mut self, cache: Arc<dyn ConsumedCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Called after each committed transfer to the DLQ (default: logs the ids).
    pub fn dlq_handler(mut self, handler: impl DlqHandler + 'static) -> Self {
        self.dlq_handler = Arc::new(handler);
        self
    }

    /// Starts no relay: the tables are created (with `tables.auto-create`) and the publisher
    /// accepts the configured event types, but no poller, stuck recovery, DLQ job or outbox
    /// clean-up runs here, and no sender is needed. This is the web tier of a deployment whose
    /// relay runs elsewhere; the relay deployment is an ordinary start with the same
    /// `oncebox.outbox` block and a sender. Inbox work (its clean-up, its cache) is unchanged.
    pub fn publisher_only(mut self) -> Self {
        self.relay = false;
        self
    }

    /// This instance's id, the owner of its job locks (default: random per start).
    pub fn worker_id(mut self, worker_id: uuid::Uuid) -> Self {
        self.worker_id = worker_id;
        self
    }
}

impl<D: Dialect, S> OnceboxBuilder<D, S> {
    /// Creates missing tables (when `tables.auto-create`), then starts the pollers and jobs on the
    /// current tokio runtime.
    pub async fn start(self) -> Result<Oncebox<D, S>> {
        let OnceboxBuilder {
            config,
            dialect,
            sender,
            serializer,
            ids,
            metrics,
            cache,
            dlq_handler,
            worker_id,
            relay,
        } = self;
        if relay && config.outbox.is_some() && sender.is_none() {
            return Err(Error::config(
                "oncebox.outbox",
                "events are configured but no sender was given to the builder",
            ));
        }
        check_sender_transport(&config, sender.as_deref())?;
        let mut dialect = dialect.with_tables(&config.tables.names);
        if !wake_ups_wanted(&config) {
            dialect = dialect.without_wake_ups();
        }
        let plan = SchemaPlan::for_config(&config);
        if config.tables.auto_create {
            dialect.create_schema(plan).await.map_err(|e| e.context("creating oncebox tables"))?;
        }
        let cache = inbox_cache(&config, cache);
        let metrics = metrics_hook(&config, metrics);
        // Without the relay, the engine sees no outbox: it runs the inbox's jobs only.
        let mut engine_config = config.clone();
        if !relay {
            engine_config.outbox = None;
        }
        let engine_plan = SchemaPlan::for_config(&engine_config);
        let mut parts = EngineParts::new(engine_config);
        parts.worker_id = worker_id;
        parts.metrics = metrics.clone();
        parts.dlq_handler = dlq_handler;
        parts.sender = if relay { sender } else { None };
        attach_daos(&mut parts, &dialect, engine_plan).await?;
        let engine = Engine::start(parts)?;
        #[cfg(feature = "metrics")]
        let gauges = row_count_gauges(&config, &dialect, plan);
        let writer = Arc::new(dialect.writer());
        let event_types =
            config.outbox.as_ref().map(|o| o.events.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        let publisher =
            Publisher::new(writer.clone(), event_types).with_serializer(serializer).with_uuid_generator(ids);
        tracing::info!(dialect = dialect.name(), relay, "oncebox started");
        Ok(Oncebox {
            engine,
            publisher,
            writer,
            dialect: Arc::new(dialect),
            cache: cache.unwrap_or_else(|| Arc::new(NoCache)),
            metrics,
            config,
            #[cfg(feature = "metrics")]
            gauges: std::sync::Mutex::new(gauges),
        })
    }
}

/// Refuses a sender whose transport is not the one `oncebox.outbox.sender.type` names. A sender
/// that reports no transport (a custom or test sender), or a configuration without the key, passes.
fn check_sender_transport(config: &Config, sender: Option<&dyn Sender>) -> Result<()> {
    let configured = config.outbox.as_ref().and_then(|outbox| outbox.sender_type);
    match (configured, sender.and_then(|sender| sender.transport())) {
        (Some(configured), Some(actual)) if configured != actual => Err(Error::config(
            "oncebox.outbox.sender.type",
            format!(
                "is {configured}, but the sender given to the builder delivers to {actual}; give a \
                 {configured} sender or change the key to {actual}"
            ),
        )),
        _ => Ok(()),
    }
}

/// The cache in front of the inbox: the one attached, else the configured in-memory cache (with
/// the `cache` feature), else none.
fn inbox_cache(config: &Config, attached: Option<Arc<dyn ConsumedCache>>) -> Option<Arc<dyn ConsumedCache>> {
    match (config.inbox.as_ref().and_then(|i| i.cache), attached) {
        (_, Some(cache)) => Some(cache),
        #[cfg(feature = "cache")]
        (Some(cache_config), None) => {
            Some(Arc::new(oncebox_cache::MemoryCache::from_config(&cache_config)) as Arc<dyn ConsumedCache>)
        }
        #[cfg(not(feature = "cache"))]
        (Some(_), None) => {
            tracing::warn!(
                "oncebox.inbox.cache is configured but no cache was attached and the `cache` feature is off; \
                 every inbox check goes to the database"
            );
            None
        }
        (None, None) => None,
    }
}

/// The metrics hook: the one attached, else Prometheus metrics when the configuration enables
/// them (with the `metrics` feature), else none.
fn metrics_hook(config: &Config, attached: Option<Arc<dyn OutboxMetrics>>) -> Arc<dyn OutboxMetrics> {
    let outbox = config.outbox.as_ref();
    let wanted =
        outbox.is_some_and(|o| o.metrics.enabled) || config.inbox.as_ref().is_some_and(|i| i.metrics_enabled);
    #[cfg(not(feature = "metrics"))]
    if outbox.is_some_and(|o| o.metrics.gauges.is_some()) {
        tracing::warn!("oncebox.outbox.metrics.gauge is enabled but the `metrics` feature is off; no gauges");
    }
    match attached {
        Some(metrics) => metrics,
        #[cfg(feature = "metrics")]
        None if wanted => Arc::new(oncebox_metrics::Metrics::new()),
        #[cfg(not(feature = "metrics"))]
        None if wanted => {
            tracing::warn!(
                "metrics are enabled in the configuration but no metrics hook was attached and the `metrics` \
                 feature is off; nothing is recorded"
            );
            Arc::new(NoMetrics)
        }
        None => Arc::new(NoMetrics),
    }
}

/// Whether the configuration asks for database wake-ups (`oncebox.outbox.wake-up`): the one switch
/// for both the relay's listener and the publisher's signal.
fn wake_ups_wanted(config: &Config) -> bool {
    config.outbox.as_ref().is_some_and(|o| o.wake_up == config::WakeUpMode::ListenNotify)
}

/// Gives the engine the dialect's DAOs, job lock and wake-up source that `plan` calls for.
async fn attach_daos<D: Dialect>(parts: &mut EngineParts, dialect: &D, plan: SchemaPlan) -> Result<()> {
    let daos = dialect.daos();
    parts.job_lock = plan.jobs.then_some(daos.job_lock);
    if plan.outbox {
        parts.outbox = Some(daos.outbox);
        if wake_ups_wanted(&parts.config) {
            parts.wake_source = dialect.wake_source().await?;
            parts.activity = dialect.poller_activity();
        }
    }
    if plan.dlq {
        parts.dlq = Some(daos.dlq);
    }
    if plan.inbox {
        parts.inbox = Some(daos.inbox);
    }
    Ok(())
}

/// The row-count gauges, refreshed in the background, when `oncebox.outbox.metrics.gauge` is on.
#[cfg(feature = "metrics")]
fn row_count_gauges<D: Dialect>(
    config: &Config,
    dialect: &D,
    plan: SchemaPlan,
) -> Option<oncebox_metrics::GaugeRefresh> {
    let gauge_config = config.outbox.as_ref().and_then(|o| o.metrics.gauges.as_ref())?;
    let gauges = oncebox_metrics::RowCountGauges::from_config(gauge_config).with_outbox(dialect.outbox_dao());
    Some(if plan.dlq { gauges.with_dlq(dialect.dlq_dao()) } else { gauges }.spawn())
}

impl<D: Dialect, S> Oncebox<D, S> {
    /// Writes events inside the caller's transactions.
    pub fn publisher(&self) -> &Publisher<Arc<D::Writer>, S> {
        &self.publisher
    }

    /// The inbox of `consumer` (records are keyed by consumer and event id).
    pub fn inbox(&self, consumer: impl Into<String>) -> Inbox<Arc<D::Writer>> {
        let inbox = Inbox::new(consumer, self.dialect.inbox_dao(), self.writer.clone())
            .with_cache(self.cache.clone())
            .with_metrics(self.metrics.clone());
        // The clean-up TTL is how long an id is kept: an older event may have been applied and
        // forgotten, so the inbox refuses it (`Inbox::admit`).
        match self.config.inbox.as_ref().and_then(|inbox| inbox.clean_up) {
            Some(clean_up) => inbox.with_retention(clean_up.ttl),
            None => inbox,
        }
    }

    /// The durable inbox of `consumer` ([`stored`]): a listener hands its messages over with
    /// `store_in(event_types, &inbox)`, and `inbox.processor()` runs the handlers on the stored
    /// rows. Its settings are `oncebox.inbox.durable` (the defaults when the section is absent);
    /// with `oncebox.inbox.metrics.enabled` it records into the engine's metrics hook.
    pub fn stored_inbox(&self, consumer: impl Into<String>) -> Result<stored::StoredInbox> {
        let mut inbox = stored::StoredInbox::new(consumer, self.dialect.stored_inbox_dao())
            .with_job_lock(self.dialect.job_lock());
        // Only with `inbox.metrics.enabled`: a processor with metrics also counts its rows.
        if self.config.inbox.as_ref().is_some_and(|inbox| inbox.metrics_enabled) {
            inbox = inbox.with_metrics(self.metrics.clone());
        }
        match self.config.inbox.as_ref().and_then(|inbox| inbox.durable.clone()) {
            Some(settings) => inbox.with_settings(settings),
            None => Ok(inbox),
        }
    }

    /// Cuts the sleep of `event_type`'s poller short; `false` when it has no poller.
    pub fn wake(&self, event_type: &str) -> bool {
        self.engine.wake(event_type)
    }

    /// The engine's state.
    pub fn state(&self) -> Lifecycle {
        self.engine.state()
    }

    /// Running totals since start.
    pub fn stats(&self) -> StatsSnapshot {
        self.engine.stats()
    }

    /// The engine handle (state changes, wakers).
    pub fn engine(&self) -> &EngineHandle {
        &self.engine
    }

    /// The dialect, e.g. to reach its pool.
    pub fn dialect(&self) -> &D {
        &self.dialect
    }

    /// The DLQ DAO, for tools and the DLQ API.
    pub fn dlq(&self) -> Arc<dyn DlqDao> {
        self.dialect.dlq_dao()
    }

    /// The metrics hook the engine and the inboxes record into (a no-op when metrics are off), for
    /// `dlq_api::DlqApi::with_tokens(oncebox.dlq(), tokens).metrics(oncebox.metrics())`.
    pub fn metrics(&self) -> Arc<dyn OutboxMetrics> {
        self.metrics.clone()
    }

    /// The outbox DAO, for tools and gauges.
    pub fn outbox_dao(&self) -> Arc<dyn OutboxDao> {
        self.dialect.outbox_dao()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Waits until no event of `scope` is PENDING or IN_PROCESS in the outbox table, counted on
    /// the database (an event counts as delivered once its settle committed), or fails with a
    /// [`ErrorKind::Timeout`] error giving what is still open when `deadline` passes. For tests,
    /// batch jobs and graceful deploys. Events waiting for a retry count as open, FAILED ones (in
    /// the outbox or moved to the DLQ) do not. It works on any instance that shares the tables,
    /// including a [`publisher_only`](OnceboxBuilder::publisher_only) one waiting for a relay
    /// elsewhere.
    pub async fn until_drained(&self, scope: DrainScope<'_>, deadline: Duration) -> Result<()> {
        let until = tokio::time::Instant::now() + deadline;
        let dao = self.dialect.outbox_dao();
        let mut pause = Duration::from_millis(5);
        loop {
            let counts = dao.counts().await?;
            let open: u64 = counts
                .by_type_and_status
                .iter()
                .filter(|(event_type, status, _)| {
                    matches!(status, EventStatus::Pending | EventStatus::InProcess)
                        && scope.covers(event_type)
                })
                .map(|(_, _, count)| count)
                .sum();
            if open == 0 {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("{open} event(s) of {scope} still pending or in process after {deadline:?}"),
                ));
            }
            tokio::time::sleep(pause.min(until - now)).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Graceful shutdown: stops claiming, lets in-flight batches settle within `deadline`,
    /// flushes the sender.
    pub async fn shutdown(&self, deadline: Duration) -> Result<()> {
        #[cfg(feature = "metrics")]
        let gauges = self.gauges.lock().ok().and_then(|mut slot| slot.take());
        #[cfg(feature = "metrics")]
        if let Some(gauges) = gauges {
            gauges.stop().await;
        }
        self.engine.shutdown(deadline).await
    }
}

/// The README's examples marked `rust,no_run`, compiled as doctests so that what it shows keeps
/// building (its `rust,ignore` ones leave out what a real service has around them).
#[cfg(all(doctest, feature = "sqlite", feature = "rabbit"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
