//! Producer and consumer settings: ours, the user's pass-through `oncebox.kafka.*` properties, and
//! the checks that keep the two from undermining the delivery guarantee.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use oncebox_core::config::{Format, section};
use oncebox_core::retry::Doubling;
use oncebox_core::{Error, Result};
use rdkafka::ClientConfig;
use serde::Deserialize;

/// The producer's `message.timeout.ms` until an engine hands the sender its
/// `oncebox.outbox.sender.emergency-timeout` (whose default it equals).
pub const DEFAULT_EMERGENCY_TIMEOUT: Duration = Duration::from_secs(120);
/// Default runs of a failing handler (the first included) before its record is dead-lettered, when
/// the listener has a dead-letter topic. Without one there is no durable place for the record, and
/// a failing handler is retried until it succeeds unless
/// [`with_max_attempts`](KafkaListenerConfig::with_max_attempts) says otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default first wait before a failed handler runs again.
pub const DEFAULT_RETRY_MIN: Duration = Duration::from_millis(200);
/// Default longest wait between two runs of a failing handler.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(30);
/// Default wait for the message in hand at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Longest emergency timeout a Kafka sender adopts: it becomes librdkafka's `message.timeout.ms`,
/// an `i32` of milliseconds (about 24.8 days).
pub const MAX_EMERGENCY_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);
/// Longest retry backoff and shutdown grace of the listener (one day): a deadline computed from a
/// longer one could overflow the clock, and nobody waits longer for a record in practice.
pub const MAX_LISTENER_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// Producer properties the sender sets itself; the user may not replace them through
/// pass-through properties because the sender's guarantees depend on them.
const OWNED_PRODUCER_KEYS: &[&str] = &["bootstrap.servers", "metadata.broker.list"];
/// Consumer properties the listener sets itself.
const OWNED_CONSUMER_KEYS: &[&str] = &["bootstrap.servers", "metadata.broker.list", "group.id"];

/// Properties whose values `Debug` and error messages may show: tuning and addressing settings
/// that never carry a credential. An allow-list rather than a list of secret names, so a
/// credential under a name nobody thought of (`sasl.jaas.config`, `sasl.username` holding an API
/// key, a future librdkafka property) is hidden by default.
const SHOWN_PROPERTIES: &[&str] = &[
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "linger.ms",
    "queue.buffering.max.ms",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "batch.size",
    "batch.num.messages",
    "compression.type",
    "compression.codec",
    "compression.level",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "message.max.bytes",
    "max.in.flight",
    "max.in.flight.requests.per.connection",
    "retries",
    "message.send.max.retries",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "request.timeout.ms",
    "socket.timeout.ms",
    "socket.keepalive.enable",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "metadata.max.age.ms",
    "topic.metadata.refresh.interval.ms",
    "statistics.interval.ms",
    "client.id",
    "client.rack",
    "client.dns.lookup",
    "broker.address.family",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.enable",
    "enable.auto.offset.store",
    "partition.assignment.strategy",
    "group.protocol",
    "group.instance.id",
    "isolation.level",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.wait.max.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "enable.partition.eof",
    "check.crcs",
    "allow.auto.create.topics",
    "debug",
    "log_level",
];

/// Whether the value of `key` may be shown; every other value is a possible credential.
pub(crate) fn shows_value(key: &str) -> bool {
    SHOWN_PROPERTIES.contains(&key)
}

/// The properties with every value not on the allow-list replaced by `***`.
fn redacted(properties: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    properties
        .iter()
        .map(|(key, value)| (key.as_str(), if shows_value(key) { value.as_str() } else { "***" }))
        .collect()
}

/// Whether librdkafka reads `value` as true: `true` or `t` in any case, or `1`
/// (`rd_kafka_anyconf_set` for boolean properties).
fn is_true(value: &str) -> bool {
    let value = value.trim();
    value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("t") || value == "1"
}

/// Whether librdkafka reads `value` as false: `false` or `f` in any case, or `0`.
fn is_false(value: &str) -> bool {
    let value = value.trim();
    value.eq_ignore_ascii_case("false") || value.eq_ignore_ascii_case("f") || value == "0"
}

/// Consumer properties that must stay false, with the reason. Only a false spelling is accepted:
/// a truthy one (`1`, `t`, `TRUE`, a YAML `1` or `yes`) would turn them on, and anything else is
/// not worth guessing about.
const FALSE_CONSUMER_KEYS: &[(&str, &str)] = &[
    (
        "enable.auto.commit",
        "auto-commit commits offsets of messages whose handler has not run or failed, so a crash \
         would lose them; the listener commits each offset itself after the handler succeeded",
    ),
    (
        "auto.commit.enable",
        "this legacy name of enable.auto.commit would commit offsets of messages whose handler has \
         not run or failed; the listener commits each offset itself after the handler succeeded",
    ),
    (
        "enable.auto.offset.store",
        "librdkafka would store the offset of each message as it is handed out, so any commit of \
         stored offsets covers messages whose handler has not succeeded; the listener commits each \
         offset itself after the handler succeeded",
    ),
];

/// Properties the dead-letter producer takes over from the consumer's: how to reach and
/// authenticate to the cluster, which a managed service requires of every client.
fn is_connection_property(key: &str) -> bool {
    ["ssl.", "ssl_", "sasl.", "https."].iter().any(|prefix| key.starts_with(prefix))
        || matches!(
            key,
            "security.protocol"
                | "enable.ssl.certificate.verification"
                | "enable.sasl.oauthbearer.unsecure.jwt"
                | "broker.address.family"
                | "client.dns.lookup"
                | "socket.keepalive.enable"
        )
}

/// How a [`KafkaSender`](crate::KafkaSender) reaches the cluster.
///
/// Defaults: `acks=all`, `enable.idempotence=true`, `message.timeout.ms` = the engine's
/// `oncebox.outbox.sender.emergency-timeout` (adopted when the engine starts).
/// Any other librdkafka producer property passes through with
/// [`with_producer_property`](Self::with_producer_property) (or `oncebox.kafka.producer.*` in a
/// file). `Debug` shows only the values of known non-secret properties.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaSenderConfig {
    pub(crate) bootstrap_servers: String,
    pub(crate) properties: BTreeMap<String, String>,
}

impl fmt::Debug for KafkaSenderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSenderConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &redacted(&self.properties))
            .finish()
    }
}

impl KafkaSenderConfig {
    /// Settings for the cluster at `bootstrap_servers` (`host:port[,host:port…]`; a leading
    /// `kafka://` is accepted).
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        Self { bootstrap_servers: strip_scheme(bootstrap_servers.into()), properties: BTreeMap::new() }
    }

    /// Reads `oncebox.kafka` from a YAML document (other keys of the document are ignored):
    /// `bootstrap-servers` and optional `producer` (a map of librdkafka properties). The bound on
    /// a send is the engine's `oncebox.outbox.sender.emergency-timeout`; an
    /// `oncebox.kafka.emergency-timeout` is refused with a pointer to it.
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        Self::from_section(KafkaSection::from_yaml_str(text)?)
    }

    /// Reads `[oncebox.kafka]` from a TOML document, with the keys of [`from_yaml_str`](Self::from_yaml_str).
    pub fn from_toml_str(text: &str) -> Result<Self> {
        Self::from_section(KafkaSection::from_toml_str(text)?)
    }

    fn from_section(section: KafkaSection) -> Result<Self> {
        section.refuse_moved_keys()?;
        let mut config = Self::new(section.bootstrap_servers()?);
        config.properties = section.producer;
        config.validate()?;
        Ok(config)
    }

    /// A librdkafka producer property (`linger.ms`, `compression.type`, `security.protocol`, …),
    /// applied over the defaults.
    #[must_use]
    pub fn with_producer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The bootstrap servers.
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap_servers
    }

    /// Checks the settings once, naming the offending key.
    pub fn validate(&self) -> Result<()> {
        if self.bootstrap_servers.trim().is_empty() {
            return Err(Error::config("kafka.bootstrap-servers", "must name at least one host:port"));
        }
        for key in self.properties.keys() {
            if OWNED_PRODUCER_KEYS.contains(&key.as_str()) {
                return Err(Error::config(
                    format!("kafka.producer.{key}"),
                    "is set by oncebox; use kafka.bootstrap-servers",
                ));
            }
        }
        self.delivery_timeouts().map(|_| ())
    }

    /// The user's `message.timeout.ms` / `delivery.timeout.ms`, checked to be numbers from 1 ms.
    fn delivery_timeouts(&self) -> Result<Vec<(&'static str, u128)>> {
        let mut found = Vec::new();
        for key in ["message.timeout.ms", "delivery.timeout.ms"] {
            if let Some(value) = self.properties.get(key) {
                let millis: u128 = value.trim().parse().map_err(|_| {
                    Error::config(format!("kafka.producer.{key}"), format!("'{value}' is not a number"))
                })?;
                if millis == 0 {
                    return Err(Error::config(format!("kafka.producer.{key}"), "must be at least 1 ms"));
                }
                found.push((key, millis));
            }
        }
        Ok(found)
    }

    /// Checks the engine's emergency timeout against librdkafka's range and the user's own
    /// delivery timeouts: a record librdkafka still retries after its batch's deadline could be
    /// delivered after the batch was settled for a retry or as failed.
    pub(crate) fn check_emergency_timeout(&self, timeout: Duration) -> Result<()> {
        const KEY: &str = "oncebox.outbox.sender.emergency-timeout";
        if timeout < Duration::from_millis(1) {
            return Err(Error::config(KEY, "must be at least 1ms for the Kafka sender"));
        }
        if timeout > MAX_EMERGENCY_TIMEOUT {
            return Err(Error::config(
                KEY,
                format!(
                    "{timeout:?} is above {MAX_EMERGENCY_TIMEOUT:?}, the longest librdkafka accepts as \
                     message.timeout.ms"
                ),
            ));
        }
        let limit = timeout.as_millis();
        match self.delivery_timeouts()?.into_iter().find(|(_, millis)| *millis > limit) {
            Some((key, millis)) => Err(Error::config(
                format!("kafka.producer.{key}"),
                format!(
                    "{millis} ms is longer than {KEY} ({limit} ms): a record could be delivered after its \
                     batch was settled; leave it out to follow the emergency timeout"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Overrides that weaken delivery, for the warning at start.
    pub(crate) fn weakened_settings(&self) -> Vec<String> {
        let mut weakened = Vec::new();
        let value = |key: &str| self.properties.get(key).map(|value| value.trim().to_ascii_lowercase());
        for key in ["acks", "request.required.acks"] {
            if let Some(acks) = value(key)
                && acks != "all"
                && acks != "-1"
            {
                weakened.push(format!("{key}={acks} (a broker failure can lose acknowledged events)"));
            }
        }
        if let Some(idempotence) = value("enable.idempotence")
            && !is_true(&idempotence)
        {
            weakened.push(format!(
                "enable.idempotence={idempotence} (retries can reorder and duplicate records of a key)"
            ));
        }
        weakened
    }

    /// The librdkafka configuration for sends bounded by `emergency_timeout`: our defaults, then
    /// the pass-through properties.
    pub(crate) fn client_config(&self, emergency_timeout: Duration) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap_servers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", emergency_timeout.as_millis().to_string())
            .set("client.id", "oncebox-kafka-sender");
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}

/// Where and how a [`KafkaListener`](crate::KafkaListener) consumes.
///
/// Offsets are committed by the listener itself, one per message after its handler succeeded, so
/// `enable.auto.commit` and `enable.auto.offset.store` accept only a false spelling (`false`, `f`,
/// `0`). `Debug` shows only the values of known non-secret properties.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaListenerConfig {
    pub(crate) bootstrap_servers: String,
    pub(crate) group_id: String,
    pub(crate) topics: Vec<String>,
    pub(crate) properties: BTreeMap<String, String>,
    pub(crate) dead_letter_topic: Option<String>,
    pub(crate) retry: Doubling,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) shutdown_grace: Duration,
}

impl fmt::Debug for KafkaListenerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaListenerConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("properties", &redacted(&self.properties))
            .field("dead_letter_topic", &self.dead_letter_topic)
            .field("retry", &self.retry)
            .field("max_attempts", &self.max_attempts)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish()
    }
}

impl KafkaListenerConfig {
    /// Consume `topics` in consumer group `group_id` from the cluster at `bootstrap_servers`,
    /// starting at the earliest offset when the group has none, retrying a failing handler after
    /// 200 ms doubling up to 30 s without limit, stopping a partition at a poison message (no
    /// dead-letter topic), 30 s shutdown grace.
    pub fn new(
        bootstrap_servers: impl Into<String>,
        group_id: impl Into<String>,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            bootstrap_servers: strip_scheme(bootstrap_servers.into()),
            group_id: group_id.into(),
            topics: topics.into_iter().map(Into::into).collect(),
            properties: BTreeMap::new(),
            dead_letter_topic: None,
            retry: Doubling::new(DEFAULT_RETRY_MIN, DEFAULT_RETRY_MAX),
            max_attempts: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }

    /// Reads `oncebox.kafka` from a YAML document: `bootstrap-servers` and `consumer` (a map of
    /// librdkafka properties); the group and topics are arguments.
    pub fn from_yaml_str(
        text: &str,
        group_id: impl Into<String>,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self> {
        let section = KafkaSection::from_yaml_str(text)?;
        let mut config = Self::new(section.bootstrap_servers()?, group_id, topics);
        config.properties = section.consumer;
        config.validate()?;
        Ok(config)
    }

    /// A librdkafka consumer property (`session.timeout.ms`, `auto.offset.reset`, …).
    #[must_use]
    pub fn with_consumer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// Poison messages (and, with [`with_max_attempts`](Self::with_max_attempts), messages whose
    /// handler keeps failing) are produced to `topic`, then committed. Without a dead-letter topic
    /// the listener stops consuming that partition instead, so nothing is committed unhandled.
    #[must_use]
    pub fn with_dead_letter_topic(mut self, topic: impl Into<String>) -> Self {
        self.dead_letter_topic = Some(topic.into());
        self
    }

    /// Waits between runs of a failing handler: `min`, doubling per failure, up to `max`
    /// (at most [`MAX_LISTENER_WAIT`]; [`validate`](Self::validate) refuses a longer one).
    #[must_use]
    pub fn with_retry_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.retry = Doubling::new(min, max);
        self
    }

    /// Runs of a failing handler (the first included) before the message is treated as poison:
    /// dead-lettered, or with no dead-letter topic held where it is, its partition stopped.
    /// Without it, the limit is [`DEFAULT_MAX_ATTEMPTS`] when a dead-letter topic is set (a
    /// durable place for the record) and none otherwise: a failing handler is then retried until it
    /// succeeds, holding back its partition.
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// How long [`KafkaListener::run`](crate::KafkaListener::run) waits, after shutdown was
    /// requested, for the message in hand. At most [`MAX_LISTENER_WAIT`].
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The consumer group.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// Checks the settings once, naming the offending key.
    pub fn validate(&self) -> Result<()> {
        if self.bootstrap_servers.trim().is_empty() {
            return Err(Error::config("kafka.bootstrap-servers", "must name at least one host:port"));
        }
        if self.group_id.trim().is_empty() {
            return Err(Error::config("kafka.listener.group-id", "must not be empty"));
        }
        if self.topics.is_empty() || self.topics.iter().any(|topic| topic.trim().is_empty()) {
            return Err(Error::config("kafka.listener.topics", "must name at least one non-empty topic"));
        }
        if self.dead_letter_topic.as_deref().is_some_and(|topic| self.topics.iter().any(|t| t == topic)) {
            return Err(Error::config(
                "kafka.listener.dead-letter-topic",
                "must differ from the consumed topics, or a poison message would come back forever",
            ));
        }
        for key in self.properties.keys() {
            if OWNED_CONSUMER_KEYS.contains(&key.as_str()) {
                return Err(Error::config(
                    format!("kafka.consumer.{key}"),
                    "is set by oncebox; use kafka.bootstrap-servers and the listener's group id",
                ));
            }
        }
        for (key, reason) in FALSE_CONSUMER_KEYS {
            if let Some(value) = self.properties.get(*key)
                && !is_false(value)
            {
                return Err(Error::config(
                    format!("kafka.consumer.{key}"),
                    format!("must be false (false, f or 0), not '{value}': {reason}"),
                ));
            }
        }
        self.retry.check("kafka.listener.retry-backoff", MAX_LISTENER_WAIT)?;
        if self.shutdown_grace > MAX_LISTENER_WAIT {
            return Err(Error::config(
                "kafka.listener.shutdown-grace",
                format!("{:?} must not be above {MAX_LISTENER_WAIT:?}", self.shutdown_grace),
            ));
        }
        if self.max_attempts == Some(0) {
            return Err(Error::config("kafka.listener.max-attempts", "must be at least 1"));
        }
        Ok(())
    }

    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", &self.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("client.id", "oncebox-kafka-listener");
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }

    /// The producer for the dead-letter topic: acknowledged and idempotent, like the sender's, and
    /// connected like the consumer (`security.protocol`, `ssl.*`, `sasl.*`, …), since a managed
    /// cluster refuses a client without them.
    pub(crate) fn dead_letter_producer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap_servers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "30000")
            .set("client.id", "oncebox-kafka-dead-letter");
        for (key, value) in self.properties.iter().filter(|(key, _)| is_connection_property(key)) {
            config.set(key, value);
        }
        config
    }
}

fn strip_scheme(servers: String) -> String {
    servers.strip_prefix("kafka://").map(str::to_owned).unwrap_or(servers)
}

/// `oncebox.kafka` of a configuration file. Scalars of any type become property strings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct KafkaSection {
    bootstrap_servers: Option<String>,
    /// Moved to `oncebox.outbox.sender.emergency-timeout`; read only to refuse it clearly.
    emergency_timeout: Option<serde::de::IgnoredAny>,
    #[serde(default, deserialize_with = "properties")]
    producer: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "properties")]
    consumer: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Integer(i64),
    Float(f64),
    Flag(bool),
}

fn properties<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = BTreeMap::<String, Scalar>::deserialize(deserializer)?;
    Ok(raw
        .into_iter()
        .map(|(key, value)| {
            let text = match value {
                Scalar::Text(text) => text,
                Scalar::Integer(number) => number.to_string(),
                Scalar::Float(number) => number.to_string(),
                Scalar::Flag(flag) => flag.to_string(),
            };
            (key, text)
        })
        .collect())
}

impl KafkaSection {
    fn read(text: &str, format: Format) -> Result<Self> {
        section(text, format, "kafka")?
            .ok_or_else(|| Error::config("oncebox.kafka", "the section is missing"))
    }

    fn from_yaml_str(text: &str) -> Result<Self> {
        Self::read(text, Format::Yaml)
    }

    fn from_toml_str(text: &str) -> Result<Self> {
        Self::read(text, Format::Toml)
    }

    fn bootstrap_servers(&self) -> Result<String> {
        self.bootstrap_servers
            .clone()
            .ok_or_else(|| Error::config("oncebox.kafka.bootstrap-servers", "is required"))
    }

    /// Keys that moved to the core's section, refused with the key that replaced them.
    fn refuse_moved_keys(&self) -> Result<()> {
        match self.emergency_timeout {
            Some(_) => Err(Error::config(
                "oncebox.kafka.emergency-timeout",
                "is not read: set oncebox.outbox.sender.emergency-timeout, which the engine hands to \
                 the sender as the deadline of every send and as the producer's message.timeout.ms",
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(result: Result<impl fmt::Debug>) -> String {
        result.err().map(|error| error.to_string()).unwrap_or_default()
    }

    #[test]
    fn failing_records_are_given_up_by_default_only_where_a_dead_letter_topic_keeps_them() {
        let base = KafkaListenerConfig::new("127.0.0.1:9092", "billing", ["orders"]);
        let limit =
            |config: &KafkaListenerConfig| oncebox_core::consume::ListenerConfig::retry(config).max_attempts;
        assert_eq!(limit(&base), None, "no durable place: retried until it succeeds");
        let dead_lettered = base.clone().with_dead_letter_topic("orders.dead");
        assert_eq!(limit(&dead_lettered), Some(DEFAULT_MAX_ATTEMPTS));
        assert_eq!(limit(&dead_lettered.with_max_attempts(9)), Some(9), "an explicit limit wins");
        assert_eq!(limit(&base.with_max_attempts(2)), Some(2), "explicit: the record is held");
    }

    #[test]
    fn one_file_configures_the_core_and_the_kafka_transport() -> Result<()> {
        let text = "oncebox:
  outbox:
    sender:
      emergency-timeout: 12s
    events:
      order-created:
        topic: orders
  kafka:
    bootstrap-servers: 127.0.0.1:9092
    producer:
      linger.ms: 5
    consumer:
      session.timeout.ms: 10000
";
        let core = oncebox_core::Config::from_yaml_str(text)?;
        assert_eq!(core.event("order-created")?.topic, "orders");
        let sender = KafkaSenderConfig::from_yaml_str(text)?;
        assert_eq!(sender.bootstrap_servers(), "127.0.0.1:9092");
        let timeout = core.outbox.as_ref().map(|outbox| outbox.emergency_timeout);
        let client = sender.client_config(timeout.unwrap_or_default());
        assert_eq!(client.get("message.timeout.ms"), Some("12000"));
        Ok(())
    }

    #[test]
    fn defaults_are_acknowledged_and_idempotent() {
        let config = KafkaSenderConfig::new("kafka://127.0.0.1:9092").client_config(Duration::from_secs(7));
        assert_eq!(config.get("bootstrap.servers"), Some("127.0.0.1:9092"));
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("message.timeout.ms"), Some("7000"));
    }

    #[test]
    fn weaker_overrides_are_reported_and_strong_ones_are_not() {
        let weak = KafkaSenderConfig::new("h:1")
            .with_producer_property("acks", "1")
            .with_producer_property("enable.idempotence", "false");
        let reported = weak.weakened_settings();
        assert_eq!(reported.len(), 2, "{reported:?}");
        assert!(reported[0].starts_with("acks=1"));
        let strong = KafkaSenderConfig::new("h:1").with_producer_property("acks", "-1");
        assert!(strong.weakened_settings().is_empty());
        assert_eq!(strong.client_config(DEFAULT_EMERGENCY_TIMEOUT).get("acks"), Some("-1"));
    }

    #[test]
    fn a_message_timeout_beyond_the_emergency_timeout_is_refused() {
        let config = KafkaSenderConfig::new("h:1").with_producer_property("message.timeout.ms", "60000");
        assert!(config.validate().is_ok(), "only the engine's emergency timeout can say it is too long");
        let text = problem(config.check_emergency_timeout(Duration::from_secs(10)));
        assert!(
            text.contains("kafka.producer.message.timeout.ms")
                && text.contains("oncebox.outbox.sender.emergency-timeout"),
            "{text}"
        );
        assert!(config.check_emergency_timeout(Duration::from_secs(60)).is_ok());
        let zero = KafkaSenderConfig::new("h:1").with_producer_property("delivery.timeout.ms", "0");
        assert!(problem(zero.validate()).contains("kafka.producer.delivery.timeout.ms"));
        let config = KafkaSenderConfig::new("h:1").with_producer_property("bootstrap.servers", "x:1");
        assert!(problem(config.validate().map(|_| ())).contains("kafka.producer.bootstrap.servers"));
    }

    #[test]
    fn auto_commit_is_refused_with_the_reason() {
        let config = KafkaListenerConfig::new("h:1", "billing", ["orders"])
            .with_consumer_property("enable.auto.commit", "TRUE");
        let text = problem(config.validate().map(|_| ()));
        assert!(
            text.contains("kafka.consumer.enable.auto.commit") && text.contains("after the handler"),
            "{text}"
        );
        let config = KafkaListenerConfig::new("h:1", "billing", ["orders"]).with_dead_letter_topic("orders");
        assert!(problem(config.validate().map(|_| ())).contains("dead-letter-topic"));
        let config = KafkaListenerConfig::new("h:1", "billing", Vec::<String>::new());
        assert!(problem(config.validate().map(|_| ())).contains("kafka.listener.topics"));
    }

    fn listener_with(key: &str, value: &str) -> KafkaListenerConfig {
        KafkaListenerConfig::new("h:1", "billing", ["orders"]).with_consumer_property(key, value)
    }

    #[test]
    fn every_truthy_spelling_of_auto_commit_is_refused() {
        // librdkafka reads `true` and `t` in any case and `1` as true; anything but a false
        // spelling is refused, so an unknown spelling never reaches librdkafka either.
        for value in ["true", "TRUE", "True", "t", "T", "1", " true ", "yes", "on", "", "01"] {
            let text = problem(listener_with("enable.auto.commit", value).validate());
            assert!(text.contains("kafka.consumer.enable.auto.commit"), "{value:?}: {text}");
        }
        for value in ["false", "FALSE", "False", "f", "F", "0"] {
            let result = listener_with("enable.auto.commit", value).validate();
            assert!(result.is_ok(), "{value:?}: {result:?}");
        }
    }

    #[test]
    fn the_legacy_topic_level_auto_commit_is_refused_too() {
        let text = problem(listener_with("auto.commit.enable", "1").validate());
        assert!(text.contains("kafka.consumer.auto.commit.enable"), "{text}");
        assert!(listener_with("auto.commit.enable", "false").validate().is_ok());
    }

    #[test]
    fn auto_commit_written_as_a_yaml_number_or_flag_is_refused() {
        for value in ["1", "true", "yes", "on"] {
            let yaml = format!(
                "oncebox:\n  kafka:\n    bootstrap-servers: b:1\n    consumer:\n      enable.auto.commit: {value}\n"
            );
            let text = problem(KafkaListenerConfig::from_yaml_str(&yaml, "billing", ["orders"]));
            assert!(text.contains("kafka.consumer.enable.auto.commit"), "{value}: {text}");
        }
    }

    #[test]
    fn the_offset_store_cannot_be_turned_back_on() {
        for value in ["true", "TRUE", "t", "1", "yes", ""] {
            let text = problem(listener_with("enable.auto.offset.store", value).validate());
            assert!(text.contains("kafka.consumer.enable.auto.offset.store"), "{value:?}: {text}");
        }
        let config = listener_with("enable.auto.offset.store", "false");
        assert!(config.validate().is_ok());
        assert_eq!(config.client_config().get("enable.auto.offset.store"), Some("false"));
    }

    #[test]
    fn an_emergency_timeout_beyond_librdkafkas_range_is_refused_naming_the_key() {
        let config = KafkaSenderConfig::new("h:1");
        for timeout in [Duration::MAX, Duration::from_millis(i32::MAX as u64 + 1), Duration::ZERO] {
            let text = problem(config.check_emergency_timeout(timeout));
            assert!(text.contains("oncebox.outbox.sender.emergency-timeout"), "{timeout:?}: {text}");
        }
        assert!(config.check_emergency_timeout(MAX_EMERGENCY_TIMEOUT).is_ok());
    }

    #[test]
    fn an_emergency_timeout_in_the_kafka_section_is_refused_naming_the_engines_key() {
        for value in ["30s", "100years", "soon"] {
            let yaml =
                format!("oncebox:\n  kafka:\n    bootstrap-servers: b:1\n    emergency-timeout: {value}\n");
            let text = problem(KafkaSenderConfig::from_yaml_str(&yaml));
            assert!(
                text.contains("oncebox.kafka.emergency-timeout")
                    && text.contains("oncebox.outbox.sender.emergency-timeout"),
                "{value}: {text}"
            );
        }
    }

    #[test]
    fn listener_waits_are_bounded_naming_the_key() {
        let base = || KafkaListenerConfig::new("h:1", "billing", ["orders"]);
        let huge = Duration::from_secs(u64::MAX / 2);
        let text = problem(base().with_retry_backoff(Duration::from_secs(1), Duration::MAX).validate());
        assert!(text.contains("kafka.listener.retry-backoff"), "{text}");
        let text = problem(base().with_retry_backoff(huge, Duration::MAX).validate());
        assert!(text.contains("kafka.listener.retry-backoff"), "{text}");
        let text = problem(base().with_shutdown_grace(Duration::MAX).validate());
        assert!(text.contains("kafka.listener.shutdown-grace"), "{text}");
        let longest = base()
            .with_retry_backoff(MAX_LISTENER_WAIT, MAX_LISTENER_WAIT)
            .with_shutdown_grace(MAX_LISTENER_WAIT);
        assert!(longest.validate().is_ok());
        // The delay never exceeds the cap, whatever the attempt count.
        let capped = base().with_retry_backoff(Duration::from_secs(1), MAX_LISTENER_WAIT);
        assert_eq!(capped.retry.delay(u32::MAX), MAX_LISTENER_WAIT);
    }

    #[test]
    fn the_dead_letter_producer_connects_like_the_consumer() {
        let config = KafkaListenerConfig::new("h:1", "billing", ["orders"])
            .with_dead_letter_topic("orders.dlt")
            .with_consumer_property("security.protocol", "SASL_SSL")
            .with_consumer_property("sasl.mechanisms", "SCRAM-SHA-512")
            .with_consumer_property("sasl.username", "billing")
            .with_consumer_property("sasl.password", "pass")
            .with_consumer_property("ssl.ca.location", "/etc/ssl/certs/ca.pem")
            .with_consumer_property("session.timeout.ms", "10000");
        let producer = config.dead_letter_producer_config();
        assert_eq!(producer.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(producer.get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(producer.get("sasl.username"), Some("billing"));
        assert_eq!(producer.get("sasl.password"), Some("pass"));
        assert_eq!(producer.get("ssl.ca.location"), Some("/etc/ssl/certs/ca.pem"));
        assert_eq!(producer.get("session.timeout.ms"), None, "consumer tuning stays with the consumer");
        assert_eq!(producer.get("acks"), Some("all"));
    }

    #[test]
    fn a_managed_cluster_block_configures_both_clients_through_a_yaml_anchor() -> Result<()> {
        // The snippet of docs/kafka.md.
        let yaml = "oncebox:
  kafka:
    bootstrap-servers: pkc-xxxxx.eu-west-1.aws.confluent.cloud:9092
    producer: &kafka-security
      security.protocol: SASL_SSL
      sasl.mechanisms: PLAIN
      sasl.username: api-key-4711
      sasl.password: api-secret-4711
    consumer: *kafka-security
";
        let sender = KafkaSenderConfig::from_yaml_str(yaml)?;
        let listener = KafkaListenerConfig::from_yaml_str(yaml, "billing", ["orders"])?
            .with_dead_letter_topic("orders.dlt");
        for client in [
            sender.client_config(DEFAULT_EMERGENCY_TIMEOUT),
            listener.client_config(),
            listener.dead_letter_producer_config(),
        ] {
            assert_eq!(client.get("security.protocol"), Some("SASL_SSL"));
            assert_eq!(client.get("sasl.mechanisms"), Some("PLAIN"));
            assert_eq!(client.get("sasl.password"), Some("api-secret-4711"));
        }
        assert!(!format!("{sender:?}{listener:?}").contains("4711"));
        assert!(format!("{sender:?}").contains("SASL_SSL"));
        Ok(())
    }

    /// Values of properties that carry credentials, as a managed cluster needs them.
    const SECRETS: &[(&str, &str)] = &[
        ("ssl.key.password", "key-pass-4711"),
        ("sasl.password", "sasl-pass-4711"),
        ("sasl.username", "api-key-4711"),
        (
            "sasl.jaas.config",
            "org.apache.kafka.common.security.plain.PlainLoginModule required password=\"jaas-4711\";",
        ),
        ("sasl.oauthbearer.client.secret", "oauth-secret-4711"),
        ("sasl.oauthbearer.config", "principal=admin token=oauth-config-4711"),
        ("ssl.key.pem", "-----BEGIN PRIVATE KEY-----pem-4711"),
        ("ssl.keystore.password", "keystore-4711"),
        ("ssl_key", "legacy-4711"),
    ];

    #[test]
    fn debug_never_shows_a_credential() {
        for (key, value) in SECRETS {
            let sender = KafkaSenderConfig::new("h:1").with_producer_property(*key, *value);
            let listener = listener_with(key, value);
            for text in [format!("{sender:?}"), format!("{listener:?}"), format!("{sender:#?}")] {
                assert!(!text.contains("4711"), "{key}: {text}");
            }
        }
        // Known tuning properties stay readable.
        let sender = KafkaSenderConfig::new("h:1").with_producer_property("linger.ms", "5");
        assert!(format!("{sender:?}").contains("\"linger.ms\": \"5\""), "{sender:?}");
    }

    #[test]
    fn retry_delay_doubles_up_to_the_cap() {
        let config = KafkaListenerConfig::new("h:1", "g", ["t"])
            .with_retry_backoff(Duration::from_millis(100), Duration::from_millis(350));
        let delays: Vec<Duration> = (1..5).map(|attempt| config.retry.delay(attempt)).collect();
        assert_eq!(delays, [100, 200, 350, 350].map(Duration::from_millis));
    }

    #[test]
    fn the_file_section_passes_properties_through() -> Result<()> {
        let yaml = "oncebox:\n  outbox:\n    events: {}\n  kafka:\n    bootstrap-servers: kafka://b:9092\n    producer:\n      linger.ms: 20\n      compression.type: lz4\n      sasl.password: hunter2\n    consumer:\n      session.timeout.ms: 10000\n";
        let sender = KafkaSenderConfig::from_yaml_str(yaml)?;
        assert_eq!(sender.bootstrap_servers(), "b:9092");
        let client = sender.client_config(DEFAULT_EMERGENCY_TIMEOUT);
        assert_eq!(client.get("linger.ms"), Some("20"));
        assert_eq!(client.get("compression.type"), Some("lz4"));
        assert!(!format!("{sender:?}").contains("hunter2"));
        let listener = KafkaListenerConfig::from_yaml_str(yaml, "billing", ["orders"])?;
        assert_eq!(listener.client_config().get("session.timeout.ms"), Some("10000"));
        assert_eq!(listener.client_config().get("enable.auto.commit"), Some("false"));
        let toml =
            "[oncebox.kafka]\nbootstrap-servers = \"b:9092\"\n[oncebox.kafka.producer]\n\"linger.ms\" = 5\n";
        let from_toml = KafkaSenderConfig::from_toml_str(toml)?;
        assert_eq!(from_toml.client_config(DEFAULT_EMERGENCY_TIMEOUT).get("linger.ms"), Some("5"));
        let typo = "oncebox:\n  kafka:\n    bootstrap-server: b:1\n";
        assert!(problem(KafkaSenderConfig::from_yaml_str(typo)).contains("bootstrap-server"));
        let bad = "oncebox:\n  kafka:\n    bootstrap-servers: b:1\n    emergency-timeout: soon\n";
        assert!(problem(KafkaSenderConfig::from_yaml_str(bad)).contains("oncebox.kafka.emergency-timeout"));
        Ok(())
    }
}
