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
//! use oncebox_core::Sender;
//! use oncebox_kafka::{KafkaSender, KafkaSenderConfig};
//! use std::time::Duration;
//!
//! # async fn run(batch: Vec<oncebox_core::OutboundMessage>) -> oncebox_core::Result<()> {
//! let config = KafkaSenderConfig::new("127.0.0.1:9092")
//!     .with_emergency_timeout(Duration::from_secs(30))
//!     .with_producer_property("linger.ms", "5");
//! let sender = KafkaSender::new(config)?;
//! for result in sender.send(&batch).await {
//!     result?; // Ok only after the delivery report (acks=all)
//! }
//! sender.flush(Duration::from_secs(10)).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod config;
mod error;
mod listener;
mod sender;

pub use config::{
    DEFAULT_EMERGENCY_TIMEOUT, DEFAULT_RETRY_MAX, DEFAULT_RETRY_MIN, DEFAULT_SHUTDOWN_GRACE,
    KafkaListenerConfig, KafkaSenderConfig,
};
pub use listener::{
    HEADER_DEAD_LETTER_REASON, HEADER_DEAD_LETTER_SOURCE, KafkaEvent, KafkaListener, KafkaListenerBuilder,
    KafkaOutcome, decode_record,
};
pub use sender::KafkaSender;
