//! Configuration: one model for YAML and TOML (keys under `oncebox.outbox.*` and
//! `oncebox.inbox.*`, with `publisher`/`consumer` accepted as older spellings), resolved once into
//! typed values with defaults and inheritance applied, and validated with the offending key named.
//!
//! ```
//! let config = oncebox_core::Config::from_yaml_str(r#"
//! oncebox:
//!   outbox:
//!     events:
//!       order-created:
//!         topic: orders
//!         batch-size: 500
//! "#)?;
//! let event = &config.outbox.as_ref().unwrap().events["order-created"];
//! assert_eq!(event.batch_size, 500);
//! assert_eq!(event.max_retries, 3);
//! # Ok::<(), oncebox_core::Error>(())
//! ```

mod builder;
pub(crate) mod raw;
mod resolve;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub use builder::{ConfigBuilder, EventSettings};
pub use raw::HumanDuration;

/// The longest duration any setting accepts (100 years). Longer values are surely typos, and they
/// would overflow clock arithmetic (`Instant + duration`) or a cache (moka refuses a TTL over
/// 1,000 years) later, far from the key that caused them. Validation refuses them naming the key;
/// constructors that take a duration directly saturate at it.
pub const MAX_SETTING_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The default TTL of every clean-up job (`clean-up.ttl`, `dlq.clean-up.ttl`, `inbox.clean-up.ttl`):
/// one day. For the inbox it is how long an id is kept, so how old an event it can vouch for.
pub const DEFAULT_CLEAN_UP_TTL: Duration = Duration::from_secs(24 * 3600);

/// The default of `oncebox.outbox.dlq.re-drive-max-age`: the inbox clean-up TTL's default, so that
/// with default settings on both sides a re-drive needs `--allow-older` (`allow_older` in the DLQ
/// API) exactly for the events a consumer may refuse as older than the ids it keeps.
pub const DEFAULT_RE_DRIVE_MAX_AGE: Duration = DEFAULT_CLEAN_UP_TTL;

/// The most claim loops one event type may have in one engine (`concurrency`).
pub const MAX_CONCURRENCY: u32 = 16;

/// The default of `oncebox.inbox.cache.cache-name`: the name (Redis key prefix) of the shared
/// consumed-id cache, as in the Java library's examples.
pub const DEFAULT_CACHE_NAME: &str = "oncebox:consumed";

/// The shortest refresh period of the row-count gauges (`metrics.gauge.cache.ttls`): each refresh
/// counts whole tables, so refreshing more often only loads the database.
pub const MIN_GAUGE_REFRESH: Duration = Duration::from_secs(1);

use crate::error::{Error, ErrorKind, Result};
use crate::tables::TableNames;

/// The whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// How many task runs (polls and jobs) may execute at once.
    pub thread_pool_size: usize,
    /// Table names and auto-create.
    pub tables: TablesConfig,
    /// Lock durations for the clean-up jobs.
    pub distributed_lock: DistributedLockConfig,
    /// The publishing side; `None` for a consumer-only service.
    pub outbox: Option<OutboxConfig>,
    /// The consuming side; `None` for a publisher-only service.
    pub inbox: Option<InboxConfig>,
}

/// `oncebox.tables`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesConfig {
    /// Create missing tables at start (idempotent).
    pub auto_create: bool,
    /// Table names built from `oncebox.tables.prefix`.
    pub names: TableNames,
}

/// `oncebox.distributed-lock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistributedLockConfig {
    /// Minimum hold time when not derived from polling.
    pub lock_at_least_for: Duration,
    /// Maximum hold time when not derived from polling.
    pub lock_at_most_for: Duration,
    /// Derive each job's durations from its polling settings (min/max delay, or the fixed delay).
    pub resolve_by_polling_properties: bool,
}

impl DistributedLockConfig {
    /// `(at_least, at_most)` for a job polled with `polling`.
    pub fn durations_for(&self, polling: &Polling) -> (Duration, Duration) {
        if !self.resolve_by_polling_properties {
            return (self.lock_at_least_for, self.lock_at_most_for);
        }
        match *polling {
            Polling::Fixed { delay, .. } => (delay, delay),
            Polling::Adaptive { min_delay, max_delay, .. } => (min_delay, max_delay),
        }
    }
}

/// `oncebox.outbox`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxConfig {
    /// `sender.type`, when given. The sender itself is passed to the builder; the facade refuses
    /// to start when this names another transport than the sender reports
    /// ([`Sender::transport`](crate::Sender::transport)).
    pub sender_type: Option<TransportKind>,
    /// `sender.emergency-timeout`: the bound on one batch's send.
    pub emergency_timeout: Duration,
    /// One entry per event type.
    pub events: BTreeMap<String, EventConfig>,
    /// `stuck-recovery`.
    pub stuck_recovery: StuckRecoveryConfig,
    /// `clean-up` of PROCESSED rows; `None` when disabled.
    pub clean_up: Option<CleanUpConfig>,
    /// `dlq`; `None` when disabled (FAILED rows then stay in the outbox).
    pub dlq: Option<DlqConfig>,
    /// `metrics`.
    pub metrics: MetricsConfig,
    /// `wake-up`: whether the database's hints (e.g. PostgreSQL NOTIFY) cut poll sleeps short.
    pub wake_up: WakeUpMode,
}

/// A message broker oncebox has a transport for: the value of `oncebox.outbox.sender.type` and
/// `oncebox.inbox.source.type`, and what a sender reports through
/// [`Sender::transport`](crate::Sender::transport).
///
/// A file writes `kafka` or `rabbitmq`; `rabbit`, the Java library's spelling, is read as
/// `rabbitmq`. Any other value is refused naming the key and the values allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// Apache Kafka (`oncebox-kafka`).
    Kafka,
    /// RabbitMQ (`oncebox-rabbit`).
    RabbitMq,
}

impl TransportKind {
    /// The name a configuration file gives it: `kafka`, `rabbitmq`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::RabbitMq => "rabbitmq",
        }
    }

    /// The transport a configuration value names (`kafka`, `rabbitmq`, or `rabbit` as the Java
    /// library spells it); `None` for any other value.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "kafka" => Some(Self::Kafka),
            "rabbitmq" | "rabbit" => Some(Self::RabbitMq),
            _ => None,
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for TransportKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct TransportVisitor;

        impl serde::de::Visitor<'_> for TransportVisitor {
            type Value = TransportKind;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a transport: kafka or rabbitmq")
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> std::result::Result<TransportKind, E> {
                TransportKind::from_name(value).ok_or_else(|| {
                    E::custom(format!(
                        "unknown transport '{value}': expected kafka or rabbitmq (rabbit, the Java \
                         library's spelling, is read as rabbitmq)"
                    ))
                })
            }
        }

        deserializer.deserialize_str(TransportVisitor)
    }
}

/// `oncebox.outbox.wake-up`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WakeUpMode {
    /// Use the dialect's hints when it has any (PostgreSQL LISTEN/NOTIFY); polling stays the backstop.
    #[default]
    ListenNotify,
    /// Poll only.
    Off,
}

/// Settings of one event type, with `defaults` applied.
#[derive(Debug, Clone, PartialEq)]
pub struct EventConfig {
    /// Kafka topic or RabbitMQ exchange.
    pub topic: String,
    /// Rows per claim.
    pub batch_size: u32,
    /// Claim loops of this type in one engine (`1` to [`MAX_CONCURRENCY`], default `1`). Each loop
    /// claims, sends and settles on its own, fenced like the loops of separate instances, so
    /// ordering across loops is what it is across instances; every loop takes a
    /// `thread-pool-size` permit per run.
    pub concurrency: u32,
    /// Poll schedule.
    pub polling: Polling,
    /// Retries after the first send; `3` means 4 sends in all.
    pub max_retries: u32,
    /// Delay between retries.
    pub backoff: Backoff,
}

impl EventConfig {
    /// An event type with every default and the given topic.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
            batch_size: 200,
            concurrency: 1,
            polling: Polling::Adaptive {
                initial_delay: Duration::ZERO,
                min_delay: Duration::from_millis(250),
                max_delay: Duration::from_secs(60),
                multiplier: 1.5,
            },
            max_retries: 3,
            backoff: Backoff::default(),
        }
    }
}

/// A poll schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Polling {
    /// A constant delay between short runs.
    Fixed {
        /// Before the first run.
        initial_delay: Duration,
        /// Between runs (`fixed-delay`).
        delay: Duration,
    },
    /// A delay that grows by `multiplier` after each short run, up to `max_delay`, and drops to
    /// `min_delay` after a full one.
    Adaptive {
        /// Before the first run.
        initial_delay: Duration,
        /// `min-fixed-delay`.
        min_delay: Duration,
        /// `max-fixed-delay`.
        max_delay: Duration,
        /// `multiplier` (≥ 1).
        multiplier: f64,
    },
}

/// Retry delays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// When false, a failed event is retried at the next poll.
    pub enabled: bool,
    /// Delay before the first retry.
    pub delay: Duration,
    /// Growth per retry (≥ 1).
    pub multiplier: f64,
    /// Upper bound of any delay.
    pub max_delay: Duration,
    /// Fraction (0–1) by which each delay may be randomly shortened.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            enabled: true,
            delay: Duration::from_secs(10),
            multiplier: 3.0,
            max_delay: Duration::from_secs(3600),
            jitter: 0.0,
        }
    }
}

/// `stuck-recovery`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StuckRecoveryConfig {
    /// Rows per run.
    pub batch_size: u32,
    /// A row IN_PROCESS for longer than this is returned to PENDING.
    pub max_batch_processing_time: Duration,
    /// `max-recoveries`: a row recovered this many times without an outcome becomes FAILED
    /// (default 5, at least 1). Recoveries are counted apart from `attempts`, so a crashed worker
    /// costs an event no retry, yet an event that crashes every worker cannot loop forever.
    pub max_recoveries: u32,
    /// Schedule.
    pub polling: Polling,
}

/// A clean-up job (`clean-up`, `dlq.clean-up`, `inbox.clean-up`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanUpConfig {
    /// Rows deleted per run.
    pub batch_size: u32,
    /// Rows older than this are deleted.
    pub ttl: Duration,
    /// Schedule.
    pub polling: Polling,
}

/// A transfer job (`dlq.transfer-to`, `dlq.transfer-from`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobConfig {
    /// Rows per run.
    pub batch_size: u32,
    /// Schedule.
    pub polling: Polling,
}

/// `dlq`, when enabled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DlqConfig {
    /// FAILED outbox rows → DLQ.
    pub transfer_to: JobConfig,
    /// TO_RETRY DLQ rows → outbox.
    pub transfer_from: JobConfig,
    /// Deletion of RESOLVED rows; `None` when disabled.
    pub clean_up: Option<CleanUpConfig>,
    /// `re-drive-max-age`: a person sending events written longer ago than this back to the
    /// outbox (status `TO_RETRY`) must say so explicitly ([`dlq::check_re_drive`](crate::dlq::check_re_drive)):
    /// a consumer whose inbox has forgotten their ids refuses them, or one without inbox retention
    /// may apply them again. Default [`DEFAULT_RE_DRIVE_MAX_AGE`].
    pub re_drive_max_age: Duration,
}

/// `metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Record counters and timers.
    pub enabled: bool,
    /// Gauges of row counts; `None` when disabled.
    pub gauges: Option<GaugeConfig>,
}

/// `metrics.gauge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaugeConfig {
    /// How long a count is reused: total, per status, per type and status. `None`: count on every scrape.
    pub cache_ttls: Option<[Duration; 3]>,
}

/// `oncebox.inbox`.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxConfig {
    /// `source.type`: the broker this service consumes from, when given. Informational: a
    /// listener is built in code from a transport crate (`oncebox_kafka`, `oncebox_rabbit`), which
    /// decides the broker; tools such as `oncebox check` show it.
    pub source: Option<TransportKind>,
    /// Deletion of old records; the TTL is the deduplication window. `None` when disabled.
    pub clean_up: Option<CleanUpConfig>,
    /// The consumed-id cache; `None` when disabled.
    pub cache: Option<CacheConfig>,
    /// `cache.cache-name` (default `oncebox:consumed`): the name of the shared consumed-id cache.
    /// `RedisCacheConfig::from_inbox` (`oncebox-cache`) makes it the Redis key prefix, so keys are
    /// `<cache-name>:<consumer>:<event id>`; give each service sharing a Redis its own. The
    /// in-process cache has no name and ignores it.
    pub cache_name: String,
    /// Record inbox metrics.
    pub metrics_enabled: bool,
    /// `inbox.durable`: how a durable inbox ([`crate::stored`]) claims, retries and cleans up;
    /// `None` when the section is absent (a durable inbox then runs with the defaults).
    pub durable: Option<crate::stored::StoredInboxSettings>,
}

/// `inbox.cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long an id stays cached; never longer than the inbox TTL.
    pub ttl: Duration,
    /// Bound on entries of an in-process cache.
    pub max_entries: u64,
}

impl Config {
    /// A configuration builder (the typed alternative to a file).
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Parses and validates YAML with a top-level `oncebox:` key.
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        let deserializer = serde_norway::Deserializer::from_str(text);
        let file: raw::RawFile = serde_path_to_error::deserialize(deserializer).map_err(parse_error)?;
        resolve::resolve(&file.oncebox)
    }

    /// Parses and validates TOML with a top-level `[oncebox]` table.
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let deserializer = toml::Deserializer::parse(text).map_err(|error| {
            Error::new(ErrorKind::Config, format!("invalid TOML: {}", error.message())).with_source(error)
        })?;
        let file: raw::RawFile = serde_path_to_error::deserialize(deserializer).map_err(parse_error)?;
        resolve::resolve(&file.oncebox)
    }

    /// Reads a `.yaml`/`.yml` or `.toml` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| {
            Error::new(ErrorKind::Config, format!("cannot read {}", path.display())).with_source(error)
        })?;
        let result = match Format::of_path(path) {
            Format::Toml => Self::from_toml_str(&text),
            Format::Yaml => Self::from_yaml_str(&text),
        };
        result.map_err(|error| error.context(path.display()))
    }

    /// The event types, or an error naming `event_type` when it is not configured.
    pub fn event(&self, event_type: &str) -> Result<&EventConfig> {
        self.outbox.as_ref().and_then(|outbox| outbox.events.get(event_type)).ok_or_else(|| {
            Error::invalid_input(format!(
                "event type '{event_type}' is not configured under oncebox.outbox.events"
            ))
        })
    }

    /// `oncebox.outbox.dlq.re-drive-max-age`, or [`DEFAULT_RE_DRIVE_MAX_AGE`] when the DLQ is
    /// off here (a tool working on the DLQ of a service configured elsewhere).
    pub fn dlq_re_drive_max_age(&self) -> Duration {
        self.outbox
            .as_ref()
            .and_then(|outbox| outbox.dlq.as_ref())
            .map_or(DEFAULT_RE_DRIVE_MAX_AGE, |dlq| dlq.re_drive_max_age)
    }
}

/// The text format of a configuration document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML, with a top-level `oncebox:` key.
    Yaml,
    /// TOML, with a top-level `[oncebox]` table.
    Toml,
}

impl Format {
    /// The format a file's extension names: `.toml` is TOML, anything else YAML.
    pub fn of_path(path: &Path) -> Self {
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("toml") => Self::Toml,
            _ => Self::Yaml,
        }
    }
}

/// Reads the block `oncebox.<name>` of a configuration document as `T`: how a transport reads
/// its own settings (`oncebox.kafka`, `oncebox.rabbitmq`) from the file the core reads, without a
/// parser of its own. `Ok(None)` when the block is absent; an error names the key that is wrong
/// (`oncebox.rabbitmq.connect-timeout`).
///
/// ```
/// use oncebox_core::config::{section, Format, HumanDuration};
///
/// #[derive(serde::Deserialize)]
/// #[serde(rename_all = "kebab-case")]
/// struct Broker { url: String, connect_timeout: Option<HumanDuration> }
///
/// let text = "oncebox:\n  broker:\n    url: amqp://host\n    connect-timeout: 30s\n";
/// let broker: Option<Broker> = section(text, Format::Yaml, "broker")?;
/// assert_eq!(broker.map(|broker| broker.url).as_deref(), Some("amqp://host"));
/// let wrong = section::<Broker>("oncebox:\n  broker:\n    url: x\n    connect-timeout: 30\n", Format::Yaml, "broker");
/// assert!(wrong.is_err_and(|error| error.to_string().contains("oncebox.broker.connect-timeout")));
/// # Ok::<(), oncebox_core::Error>(())
/// ```
pub fn section<T: serde::de::DeserializeOwned>(text: &str, format: Format, name: &str) -> Result<Option<T>> {
    let prefix = format!("oncebox.{name}");
    let invalid = |error: String| Error::config(prefix.clone(), error);
    match format {
        Format::Yaml => {
            let root: serde_norway::Value =
                serde_norway::from_str(text).map_err(|error| invalid(format!("invalid YAML: {error}")))?;
            match root.get("oncebox").and_then(|oncebox| oncebox.get(name)) {
                None => Ok(None),
                Some(block) => serde_path_to_error::deserialize(block.clone())
                    .map(Some)
                    .map_err(|error| keyed(&prefix, error)),
            }
        }
        Format::Toml => {
            let root: toml::Table = toml::from_str(text)
                .map_err(|error| invalid(format!("invalid TOML: {}", error.message())))?;
            match root.get("oncebox").and_then(|oncebox| oncebox.get(name)) {
                None => Ok(None),
                Some(block) => serde_path_to_error::deserialize(block.clone())
                    .map(Some)
                    .map_err(|error| keyed(&prefix, error)),
            }
        }
    }
}

/// A parse error of a block at `prefix`, naming the key below it that is wrong.
fn keyed<E: std::fmt::Display>(prefix: &str, error: serde_path_to_error::Error<E>) -> Error {
    let path = error.path().to_string();
    let key = if path == "." || path.is_empty() { prefix.to_owned() } else { format!("{prefix}.{path}") };
    Error::config(key, error.into_inner().to_string())
}

fn parse_error<E: std::fmt::Display>(error: serde_path_to_error::Error<E>) -> Error {
    let path = error.path().to_string();
    let inner = error.into_inner().to_string();
    let key = if path == "." || path.is_empty() { "oncebox".to_owned() } else { path };
    Error::config(key, inner)
}

#[cfg(test)]
mod tests;
