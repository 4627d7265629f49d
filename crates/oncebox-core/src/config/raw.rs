//! The file model: every key optional, unknown keys rejected. Resolution into the typed
//! [`Config`](super::Config) fills defaults, applies inheritance and validates.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, Visitor};

/// A duration as configuration files write it (`250ms`, `1m`, `24h`); a bare number is refused
/// with a hint to give a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"250ms\", \"30s\", \"1m\" or \"24h\"")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<HumanDuration, E> {
                humantime::parse_duration(value.trim())
                    .map(HumanDuration)
                    .map_err(|error| E::custom(format!("invalid duration '{value}': {error}")))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration {value}: give a unit, e.g. \"{value}ms\" or \"{value}s\""
                )))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<HumanDuration, E> {
                Err(E::custom(format!("invalid duration {value}: give a unit, e.g. \"{value}s\"")))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Declares a key that oncebox refuses whatever its value, with a message that names what to do
/// instead. The type is the field's: absent, the field is its `Default` (with `#[serde(default)]`);
/// present, even empty (`mappings:` followed by a comment only, which YAML reads as null), its
/// deserialization fails with `$why`, and the error names the key as the file spells it.
macro_rules! refused_key {
    ($(#[$doc:meta])* $name:ident => $why:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub(crate) struct $name;

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(_deserializer: D) -> Result<Self, D::Error> {
                Err(de::Error::custom($why))
            }
        }
    };
}

refused_key! {
    /// `sender.bean-name` (Java: which Spring bean is the sender): there are no beans.
    BeanName => "oncebox has no beans: pass the sender to the builder instead, \
        `Oncebox::builder(config).sender(sender)` or `.sender_arc(Arc<dyn Sender>)` \
        (`OnceboxBuilder::sender` / `OnceboxBuilder::sender_arc`); remove this key"
}

refused_key! {
    /// `inbox.mappings` (Java: event type → payload class): handlers name their payload type.
    Mappings => "oncebox has no payload class mappings: each handler decodes the payload into its \
        own type, e.g. `listener.on::<OrderCreated, _, _>(\"create-order\", handler)` or \
        `.on_once::<OrderCreated, _, _, _>(\"create-order\", inbox, effect)` \
        (`ListenerBuilder::on` / `on_once`, `Handlers::on`); remove this key"
}

refused_key! {
    /// `pooling`, the spelling of the Java README's DLQ override example, which Spring ignores.
    Pooling => "unknown key; did you mean `polling`? (the Java README's DLQ override example \
        spells it `pooling`; Spring ignores the unknown key, so there the override never applied)"
}

refused_key! {
    /// A polling key written on an event type or `defaults` instead of under its `polling`.
    PollingKey => "a polling setting belongs under `polling:` (e.g. `polling: { min-fixed-delay: \
        250ms }`); written on the event type or `defaults` itself it would set nothing (the Java \
        library ignores it there), so it is refused"
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    pub(crate) oncebox: RawOncebox,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawOncebox {
    pub(crate) thread_pool_size: Option<usize>,
    pub(crate) tables: Option<RawTables>,
    pub(crate) distributed_lock: Option<RawDistributedLock>,
    #[serde(alias = "publisher")]
    pub(crate) outbox: Option<RawOutbox>,
    #[serde(alias = "consumer")]
    pub(crate) inbox: Option<RawInbox>,
    /// The Kafka transport's block, read by `oncebox-kafka` from the same file; core knows no
    /// transport, so it accepts the block without looking inside (the transport validates it).
    #[serde(rename = "kafka")]
    pub(crate) _kafka: Option<IgnoredAny>,
    /// The RabbitMQ transport's block, accepted unread for the same reason.
    #[serde(rename = "rabbitmq")]
    pub(crate) _rabbitmq: Option<IgnoredAny>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawTables {
    pub(crate) auto_create: Option<bool>,
    pub(crate) prefix: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawDistributedLock {
    pub(crate) lock_at_least_for: Option<HumanDuration>,
    pub(crate) lock_at_most_for: Option<HumanDuration>,
    pub(crate) resolve_by_polling_properties: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawOutbox {
    pub(crate) enabled: Option<bool>,
    pub(crate) sender: Option<RawSender>,
    pub(crate) defaults: Option<RawEventSettings>,
    pub(crate) events: Option<BTreeMap<String, RawEventSettings>>,
    pub(crate) stuck_recovery: Option<RawStuckRecovery>,
    pub(crate) clean_up: Option<RawCleanUp>,
    pub(crate) dlq: Option<RawDlq>,
    pub(crate) metrics: Option<RawMetrics>,
    pub(crate) wake_up: Option<super::WakeUpMode>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawSender {
    #[serde(rename = "type")]
    pub(crate) kind: Option<super::TransportKind>,
    pub(crate) emergency_timeout: Option<HumanDuration>,
    /// Refused: the sender is given to the builder.
    #[serde(rename = "bean-name", default)]
    pub(crate) _bean_name: BeanName,
}

/// Settings of one event type, or of `defaults` (where `topic` is not allowed).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawEventSettings {
    pub(crate) topic: Option<String>,
    pub(crate) batch_size: Option<u32>,
    pub(crate) concurrency: Option<u32>,
    pub(crate) polling: Option<RawPolling>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) backoff: Option<RawBackoff>,
    /// Refused here: polling keys belong under `polling` (the Java README's inheritance example
    /// writes `min-fixed-delay` directly on an event type, where Spring ignores it).
    #[serde(rename = "initial-delay", default)]
    pub(crate) _initial_delay: PollingKey,
    #[serde(rename = "fixed-delay", default)]
    pub(crate) _fixed_delay: PollingKey,
    #[serde(rename = "min-fixed-delay", default)]
    pub(crate) _min_fixed_delay: PollingKey,
    #[serde(rename = "max-fixed-delay", default)]
    pub(crate) _max_fixed_delay: PollingKey,
}

/// The polling strategy's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PollingType {
    Fixed,
    Adaptive,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawPolling {
    #[serde(rename = "type")]
    pub(crate) kind: Option<PollingType>,
    pub(crate) initial_delay: Option<HumanDuration>,
    pub(crate) fixed_delay: Option<HumanDuration>,
    pub(crate) min_fixed_delay: Option<HumanDuration>,
    pub(crate) max_fixed_delay: Option<HumanDuration>,
    pub(crate) multiplier: Option<f64>,
}

impl RawPolling {
    /// Fields set here win; the rest come from `base`.
    pub(crate) fn over(&self, base: &RawPolling) -> RawPolling {
        RawPolling {
            kind: self.kind.or(base.kind),
            initial_delay: self.initial_delay.or(base.initial_delay),
            fixed_delay: self.fixed_delay.or(base.fixed_delay),
            min_fixed_delay: self.min_fixed_delay.or(base.min_fixed_delay),
            max_fixed_delay: self.max_fixed_delay.or(base.max_fixed_delay),
            multiplier: self.multiplier.or(base.multiplier),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawBackoff {
    pub(crate) enabled: Option<bool>,
    pub(crate) delay: Option<HumanDuration>,
    pub(crate) multiplier: Option<f64>,
    pub(crate) max_delay: Option<HumanDuration>,
    pub(crate) jitter: Option<f64>,
}

impl RawBackoff {
    pub(crate) fn over(&self, base: &RawBackoff) -> RawBackoff {
        RawBackoff {
            enabled: self.enabled.or(base.enabled),
            delay: self.delay.or(base.delay),
            multiplier: self.multiplier.or(base.multiplier),
            max_delay: self.max_delay.or(base.max_delay),
            jitter: self.jitter.or(base.jitter),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawStuckRecovery {
    pub(crate) batch_size: Option<u32>,
    pub(crate) max_batch_processing_time: Option<HumanDuration>,
    pub(crate) max_recoveries: Option<u32>,
    pub(crate) polling: Option<RawPolling>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawCleanUp {
    pub(crate) enabled: Option<bool>,
    pub(crate) batch_size: Option<u32>,
    pub(crate) ttl: Option<HumanDuration>,
    pub(crate) polling: Option<RawPolling>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawJob {
    pub(crate) batch_size: Option<u32>,
    pub(crate) polling: Option<RawPolling>,
    /// Refused with a pointer to `polling`.
    #[serde(rename = "pooling", default)]
    pub(crate) _pooling: Pooling,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawDlq {
    pub(crate) enabled: Option<bool>,
    pub(crate) batch_size: Option<u32>,
    pub(crate) polling: Option<RawPolling>,
    pub(crate) transfer_to: Option<RawJob>,
    pub(crate) transfer_from: Option<RawJob>,
    pub(crate) clean_up: Option<RawCleanUp>,
    pub(crate) re_drive_max_age: Option<HumanDuration>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawMetrics {
    pub(crate) enabled: Option<bool>,
    pub(crate) gauge: Option<RawGauge>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawGauge {
    pub(crate) enabled: Option<bool>,
    pub(crate) cache: Option<RawGaugeCache>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawGaugeCache {
    pub(crate) enabled: Option<bool>,
    pub(crate) ttls: Option<Vec<HumanDuration>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawInbox {
    pub(crate) enabled: Option<bool>,
    pub(crate) source: Option<RawSource>,
    pub(crate) clean_up: Option<RawCleanUp>,
    pub(crate) cache: Option<RawCache>,
    pub(crate) metrics: Option<RawMetrics>,
    pub(crate) durable: Option<RawDurable>,
    /// Refused: each handler decodes into its own type.
    #[serde(rename = "mappings", default)]
    pub(crate) _mappings: Mappings,
}

/// `inbox.durable`: the durable inbox's processing.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawDurable {
    pub(crate) batch_size: Option<u32>,
    pub(crate) concurrency: Option<usize>,
    pub(crate) poll_interval: Option<HumanDuration>,
    pub(crate) lease: Option<HumanDuration>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<RawBackoff>,
    pub(crate) keep_processed: Option<HumanDuration>,
    pub(crate) clean_up_every: Option<HumanDuration>,
}

/// `inbox.source`: the broker consumed from.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawSource {
    #[serde(rename = "type")]
    pub(crate) kind: Option<super::TransportKind>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawCache {
    pub(crate) enabled: Option<bool>,
    pub(crate) ttl: Option<HumanDuration>,
    pub(crate) max_entries: Option<u64>,
    pub(crate) cache_name: Option<String>,
}
