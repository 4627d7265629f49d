//! The typed builder: the same model and validation as a file, without one.

use std::time::Duration;

use super::raw::*;
use super::{Backoff, Config, Polling};
use crate::error::Result;

/// Builds a [`Config`] in code. Every setting left alone keeps the file defaults, and `build()`
/// runs the same validation as [`Config::from_yaml_str`].
///
/// ```
/// use std::time::Duration;
/// use oncebox_core::config::{Config, EventSettings, Polling};
///
/// let config = Config::builder()
///     .event("order-created", EventSettings::new("orders").batch_size(500))
///     .event("order-shipped", EventSettings::new("orders").polling(Polling::Fixed {
///         initial_delay: Duration::ZERO,
///         delay: Duration::from_secs(1),
///     }))
///     .dlq_enabled(true)
///     .inbox_enabled(true)
///     .build()?;
/// assert_eq!(config.outbox.unwrap().events.len(), 2);
/// # Ok::<(), oncebox_core::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ConfigBuilder {
    raw: RawOncebox,
}

/// Settings of one event type for [`ConfigBuilder::event`].
#[derive(Debug, Clone)]
#[must_use]
pub struct EventSettings {
    raw: RawEventSettings,
}

fn human(duration: Duration) -> Option<HumanDuration> {
    Some(HumanDuration(duration))
}

fn raw_polling(polling: Polling) -> RawPolling {
    match polling {
        Polling::Fixed { initial_delay, delay } => RawPolling {
            kind: Some(PollingType::Fixed),
            initial_delay: human(initial_delay),
            fixed_delay: human(delay),
            ..RawPolling::default()
        },
        Polling::Adaptive { initial_delay, min_delay, max_delay, multiplier } => RawPolling {
            kind: Some(PollingType::Adaptive),
            initial_delay: human(initial_delay),
            fixed_delay: None,
            min_fixed_delay: human(min_delay),
            max_fixed_delay: human(max_delay),
            multiplier: Some(multiplier),
        },
    }
}

fn raw_backoff(backoff: Backoff) -> RawBackoff {
    RawBackoff {
        enabled: Some(backoff.enabled),
        delay: human(backoff.delay),
        multiplier: Some(backoff.multiplier),
        max_delay: human(backoff.max_delay),
        jitter: Some(backoff.jitter),
    }
}

impl EventSettings {
    /// An event type delivered to `topic` (Kafka topic or RabbitMQ exchange).
    pub fn new(topic: impl Into<String>) -> Self {
        Self { raw: RawEventSettings { topic: Some(topic.into()), ..RawEventSettings::default() } }
    }

    /// Rows per claim.
    pub fn batch_size(mut self, batch_size: u32) -> Self {
        self.raw.batch_size = Some(batch_size);
        self
    }

    /// Claim loops of this type in one engine (see [`EventConfig::concurrency`](super::EventConfig::concurrency)).
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.raw.concurrency = Some(concurrency);
        self
    }

    /// Poll schedule.
    pub fn polling(mut self, polling: Polling) -> Self {
        self.raw.polling = Some(raw_polling(polling));
        self
    }

    /// Retries after the first send.
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.raw.max_retries = Some(max_retries);
        self
    }

    /// Retry delays.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.raw.backoff = Some(raw_backoff(backoff));
        self
    }
}

impl ConfigBuilder {
    fn outbox(&mut self) -> &mut RawOutbox {
        self.raw.outbox.get_or_insert_with(RawOutbox::default)
    }

    fn inbox(&mut self) -> &mut RawInbox {
        self.raw.inbox.get_or_insert_with(RawInbox::default)
    }

    /// How many task runs may execute at once.
    pub fn thread_pool_size(mut self, size: usize) -> Self {
        self.raw.thread_pool_size = Some(size);
        self
    }

    /// Prefix of every table name (`[a-z_][a-z0-9_]*`).
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.raw.tables.get_or_insert_with(RawTables::default).prefix = Some(prefix.into());
        self
    }

    /// Whether missing tables are created at start.
    pub fn auto_create(mut self, auto_create: bool) -> Self {
        self.raw.tables.get_or_insert_with(RawTables::default).auto_create = Some(auto_create);
        self
    }

    /// Adds (or replaces) an event type.
    pub fn event(mut self, event_type: impl Into<String>, settings: EventSettings) -> Self {
        self.outbox().events.get_or_insert_with(Default::default).insert(event_type.into(), settings.raw);
        self
    }

    /// Poll schedule inherited by event types that set none.
    pub fn default_polling(mut self, polling: Polling) -> Self {
        self.outbox().defaults.get_or_insert_with(Default::default).polling = Some(raw_polling(polling));
        self
    }

    /// Backoff inherited by event types that set none.
    pub fn default_backoff(mut self, backoff: Backoff) -> Self {
        self.outbox().defaults.get_or_insert_with(Default::default).backoff = Some(raw_backoff(backoff));
        self
    }

    /// Bound on one batch's send.
    pub fn emergency_timeout(mut self, timeout: Duration) -> Self {
        self.outbox().sender.get_or_insert_with(Default::default).emergency_timeout = human(timeout);
        self
    }

    /// When an IN_PROCESS row counts as stuck, and the recovery job's schedule.
    pub fn stuck_recovery(mut self, max_batch_processing_time: Duration, polling: Polling) -> Self {
        let stuck = self.outbox().stuck_recovery.get_or_insert_with(Default::default);
        stuck.max_batch_processing_time = human(max_batch_processing_time);
        stuck.polling = Some(raw_polling(polling));
        self
    }

    /// How many stuck recoveries without an outcome make a row FAILED (`stuck-recovery.max-recoveries`).
    pub fn max_recoveries(mut self, max_recoveries: u32) -> Self {
        self.outbox().stuck_recovery.get_or_insert_with(Default::default).max_recoveries =
            Some(max_recoveries);
        self
    }

    /// Clean-up of PROCESSED rows: `None` disables it.
    pub fn processed_clean_up(mut self, ttl_and_polling: Option<(Duration, Polling)>) -> Self {
        let clean_up = self.outbox().clean_up.get_or_insert_with(Default::default);
        set_clean_up(clean_up, ttl_and_polling);
        self
    }

    /// Whether the database's wake-up hints cut poll sleeps short.
    pub fn wake_up(mut self, mode: super::WakeUpMode) -> Self {
        self.outbox().wake_up = Some(mode);
        self
    }

    /// Turns the dead letter queue on or off.
    pub fn dlq_enabled(mut self, enabled: bool) -> Self {
        self.outbox().dlq.get_or_insert_with(Default::default).enabled = Some(enabled);
        self
    }

    /// Schedule shared by the DLQ transfer jobs.
    pub fn dlq_polling(mut self, polling: Polling) -> Self {
        self.outbox().dlq.get_or_insert_with(Default::default).polling = Some(raw_polling(polling));
        self
    }

    /// Clean-up of RESOLVED DLQ rows: `None` disables it.
    pub fn dlq_clean_up(mut self, ttl_and_polling: Option<(Duration, Polling)>) -> Self {
        let dlq = self.outbox().dlq.get_or_insert_with(Default::default);
        set_clean_up(dlq.clean_up.get_or_insert_with(Default::default), ttl_and_polling);
        self
    }

    /// How old an event a DLQ re-drive may send back without being explicitly allowed to
    /// (`dlq.re-drive-max-age`); see [`DlqConfig::re_drive_max_age`](super::DlqConfig::re_drive_max_age).
    pub fn dlq_re_drive_max_age(mut self, max_age: Duration) -> Self {
        self.outbox().dlq.get_or_insert_with(Default::default).re_drive_max_age = human(max_age);
        self
    }

    /// Turns the inbox on or off.
    pub fn inbox_enabled(mut self, enabled: bool) -> Self {
        self.inbox().enabled = Some(enabled);
        self
    }

    /// Inbox clean-up (the deduplication window): `None` keeps records forever.
    pub fn inbox_clean_up(mut self, ttl_and_polling: Option<(Duration, Polling)>) -> Self {
        let clean_up = self.inbox().clean_up.get_or_insert_with(Default::default);
        set_clean_up(clean_up, ttl_and_polling);
        self
    }

    /// Enables the consumed-id cache with this TTL.
    pub fn inbox_cache_ttl(mut self, ttl: Duration) -> Self {
        let cache = self.inbox().cache.get_or_insert_with(Default::default);
        cache.enabled = Some(true);
        cache.ttl = human(ttl);
        self
    }

    /// Validates and returns the configuration.
    pub fn build(self) -> Result<Config> {
        super::resolve::resolve(&self.raw)
    }
}

fn set_clean_up(clean_up: &mut RawCleanUp, ttl_and_polling: Option<(Duration, Polling)>) {
    match ttl_and_polling {
        Some((ttl, polling)) => {
            clean_up.enabled = Some(true);
            clean_up.ttl = human(ttl);
            clean_up.polling = Some(raw_polling(polling));
        }
        None => clean_up.enabled = Some(false),
    }
}
