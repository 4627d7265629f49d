//! Kafka transport for oncebox, on [rdkafka](https://docs.rs/rdkafka) (librdkafka built from source).
//!
//! * [`KafkaSender`] implements [`oncebox_core::Sender`]: one idempotent `FutureProducer` with
//!   `acks=all`; a batch is enqueued in full, then every delivery report awaited, one result per
//!   event. Topic = the event type's `topic`, key = the partition key or the event id, headers =
//!   `oncebox_event_id`, `oncebox_event_type`, `oncebox_payload_type` and the stored headers.
//! * [`KafkaListener`] consumes topics in a consumer group, decodes the `oncebox_*` headers, routes
//!   by event type to typed handlers (usually through an [`oncebox_core::Inbox`]) and commits an
//!   offset only after its handler succeeded; poison records go to a dead-letter topic or stop
//!   their partition.
//!
//! ```no_run
//! use oncebox_core::{Deadline, Sender};
//! use oncebox_kafka::{KafkaSender, KafkaSenderConfig};
//! use std::time::Duration;
//!
//! # async fn run(batch: Vec<oncebox_core::OutboundMessage>) -> oncebox_core::Result<()> {
//! let config = KafkaSenderConfig::new("127.0.0.1:9092").with_producer_property("linger.ms", "5");
//! let sender = KafkaSender::new(config)?;
//! // An engine does both with `oncebox.outbox.sender.emergency-timeout`: once at start, then per send.
//! let timeout = Duration::from_secs(30);
//! sender.adopt_emergency_timeout(timeout)?;
//! for result in sender.send(&batch, Deadline::after(timeout)).await {
//!     result?; // Ok only after the delivery report (acks=all)
//! }
//! sender.flush(Duration::from_secs(10)).await?;
//! # Ok(()) }
//! ```
//!
//! # TLS and SASL
//!
//! The crate feature `ssl` builds librdkafka against the system OpenSSL; it is needed for
//! `security.protocol=SSL`/`SASL_SSL` and for the SASL mechanisms `SCRAM-SHA-256/512` and
//! `OAUTHBEARER` (SASL `PLAIN` is built in). Security settings are librdkafka properties, given to
//! the sender as producer properties and to the listener as consumer properties (its dead-letter
//! producer takes them over). A managed cluster such as Confluent Cloud or Amazon MSK needs:
//!
//! ```
//! use oncebox_kafka::{KafkaListenerConfig, KafkaSenderConfig};
//!
//! let security = [
//!     ("security.protocol", "SASL_SSL"),
//!     ("sasl.mechanisms", "SCRAM-SHA-512"), // PLAIN for Confluent Cloud
//!     ("sasl.username", "billing"),
//!     ("sasl.password", "from-a-secret-store"),
//!     // ("ssl.ca.location", "/path/to/ca.pem"), only for a private CA
//! ];
//! let bootstrap = "b-1.example.kafka.eu-west-1.amazonaws.com:9096";
//! let sender = security
//!     .iter()
//!     .fold(KafkaSenderConfig::new(bootstrap), |config, (key, value)| config.with_producer_property(*key, *value));
//! let listener = security.iter().fold(
//!     KafkaListenerConfig::new(bootstrap, "billing", ["orders"]),
//!     |config, (key, value)| config.with_consumer_property(*key, *value),
//! );
//! assert!(sender.validate().is_ok() && listener.validate().is_ok());
//! assert!(!format!("{sender:?}").contains("from-a-secret-store"));
//! ```
//!
//! `Debug` of both configurations shows only known non-secret property values, and a property
//! librdkafka refuses is named in the error without its value. See `docs/kafka.md` for the YAML
//! form and the settings per managed service.
#![deny(missing_docs)]

mod config;
mod error;
mod listener;
mod record;
mod sender;

pub use config::{
    DEFAULT_EMERGENCY_TIMEOUT, DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_MAX, DEFAULT_RETRY_MIN,
    DEFAULT_SHUTDOWN_GRACE, KafkaListenerConfig, KafkaSenderConfig, MAX_EMERGENCY_TIMEOUT, MAX_LISTENER_WAIT,
};
pub use listener::{KafkaListener, KafkaListenerBuilder, KafkaOutcome};
pub use oncebox_core::consume::Outcome;
pub use record::{
    HEADER_DEAD_LETTER_REASON, HEADER_DEAD_LETTER_SOURCE, KafkaEvent, KafkaSource, decode_record,
};
pub use sender::KafkaSender;
