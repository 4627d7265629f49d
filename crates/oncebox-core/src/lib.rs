//! The core of oncebox: domain types, the storage and transport traits, configuration, the relay
//! engine, the publisher and the inbox. It depends on no database driver and no broker client;
//! dialect crates (`oncebox-sqlite`, `oncebox-postgres`, …) and transport crates
//! (`oncebox-kafka`, `oncebox-rabbit`) implement its traits, and the `oncebox` facade assembles
//! them.
//!
//! ```
//! use oncebox_core::{Config, retry::{decide, RetryDecision}};
//! use std::time::Duration;
//!
//! let config = Config::from_yaml_str("oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: orders\n")?;
//! let event = config.event("order-created")?;
//! // max-retries 3: the first failed send is retried after 10 s, …, the fourth gives up.
//! assert_eq!(decide(1, event.max_retries, &event.backoff), RetryDecision::RetryAfter(Duration::from_secs(10)));
//! assert_eq!(decide(4, event.max_retries, &event.backoff), RetryDecision::GiveUp);
//! # Ok::<(), oncebox_core::Error>(())
//! ```
#![deny(missing_docs)]

pub mod activity;
pub mod config;
pub mod consume;
pub mod dao;
pub mod dlq;
pub mod engine;
pub mod error;
pub mod event;
pub mod hooks;
pub mod inbox;
pub mod polling;
pub mod publisher;
pub mod redact;
pub mod retry;
pub mod sender;
pub mod serializer;
pub mod stored;
pub mod tables;
pub mod trace;

/// Re-exported so implementations of the async traits need no extra dependency.
pub use async_trait::async_trait;
pub use config::Config;
pub use dao::{
    Daos, Dialect, DlqDao, InboxClaim, InboxDao, InboxWriter, JobLock, OutboxDao, OutboxWriter, SchemaPlan,
    StoredInboxDao, StoredInboxTransactions, Transactions, WakeSource, WakeUp,
};
pub use engine::{Engine, EngineHandle, EngineParts, Lifecycle, StatsSnapshot};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use event::{
    ClaimedBatch, DlqCounts, DlqEvent, DlqFilter, DlqSelection, DlqStatus, EventStatus, Headers, InboxRecord,
    JobLease, NewOutboxEvent, OutboundMessage, OutboxEvent, SettleReport, Settlement,
};
pub use hooks::{ConsumedCache, NoCache, NoMetrics, OutboxMetrics};
pub use hooks::{DlqHandler, LogDlqHandler};
pub use inbox::{ConsumeError, Consumed, Inbox};
pub use publisher::{EventMeta, Publisher};
pub use sender::{Deadline, SendError, Sender};
pub use serializer::{
    Deserializer, JsonSerializer, SerializedEvent, Serializer, UuidGenerator, UuidV7Generator,
};
pub use tables::TableNames;
