//! RabbitMQ transport for oncebox, on [lapin](https://docs.rs/lapin).
//!
//! * [`RabbitSender`] implements [`oncebox_core::Sender`]: a batch is published pipelined on a
//!   channel in confirm mode and every confirm awaited; `mandatory` publishing makes an unroutable
//!   event a failure. Exchange = the event type's `topic`, routing key = the event type.
//! * [`RabbitListener`] consumes a queue with manual acknowledgement, decodes the `oncebox_*`
//!   headers, routes by event type to typed handlers and runs each through an
//!   [`oncebox_core::Inbox`].
//!
//! A failing handler is retried in process with exponential backoff, and a message is rejected
//! only to a dead-letter exchange the listener knows about: without one it is retried or held
//! unacknowledged, never discarded (see [`RabbitListenerConfig::with_queue_dead_letter_exchange`]).
//!
//! # TLS
//!
//! `amqps://` needs this crate's `rustls` feature (`tls-rustls` on the `oncebox` facade): lapin
//! then uses rustls (aws-lc-rs) and verifies the broker's certificate against the operating
//! system's trust store (on Linux also `SSL_CERT_FILE` / `SSL_CERT_DIR`); there is no switch to
//! turn verification off. For a managed broker use its DNS name and port 5671 (the default for
//! `amqps`), e.g. `amqps://user:password@b-1234.mq.eu-west-1.amazonaws.com:5671/%2f`, with
//! special characters percent-encoded. Without the feature an `amqps://` URL is refused when the
//! sender or listener is built. Client certificates are not configurable yet.
//!
//! ```no_run
//! use oncebox_core::{Deadline, Sender};
//! use oncebox_rabbit::{RabbitSender, RabbitSenderConfig};
//! use std::time::Duration;
//!
//! # async fn run(batch: Vec<oncebox_core::OutboundMessage>) -> oncebox_core::Result<()> {
//! let config = RabbitSenderConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f");
//! let sender = RabbitSender::new(config)?;
//! // The engine passes `oncebox.outbox.sender.emergency-timeout` as each send's deadline.
//! for result in sender.send(&batch, Deadline::after(Duration::from_secs(10))).await {
//!     result?; // Ok only after the broker confirmed and routed the message
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod config;
mod error;
mod listener;
mod message;
mod sender;
mod topology;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_ATTEMPTS, DEFAULT_PREFETCH, DEFAULT_RECONNECT_MAX,
    DEFAULT_RECONNECT_MIN, DEFAULT_RETRY_MAX, DEFAULT_RETRY_MIN, DEFAULT_SHUTDOWN_GRACE, MAX_CONNECT_TIMEOUT,
    MAX_RECONNECT_BACKOFF, MAX_RETRY_BACKOFF, MAX_SHUTDOWN_GRACE, RabbitListenerConfig, RabbitSenderConfig,
    redact_url,
};
pub use listener::{ListenerOutcome, RabbitListener, RabbitListenerBuilder};
pub use message::{RabbitEvent, RabbitSource, decode_delivery};
pub use oncebox_core::consume::Outcome;
pub use sender::RabbitSender;
pub use topology::RabbitTopology;
