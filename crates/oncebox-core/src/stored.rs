//! The durable inbox: messages a listener stored before it acknowledged the broker, and the state of
//! their processing (`RECEIVED → PROCESSING → PROCESSED | FAILED`).
//!
//! The ids-only inbox ([`crate::inbox`]) remembers which events a consumer applied; a failing
//! handler's retries live in the listener's memory and in the broker's redeliveries. The durable
//! inbox keeps the message itself: the broker is released as soon as the row commits, and the
//! engine's own pollers run the handler, fenced by a claim token as the outbox's pollers are, with
//! attempts and the next attempt's time in the row, so retries survive restarts.
//!
//! ```
//! use oncebox_core::stored::{InboxSettlement, InboxStatus};
//! use std::time::Duration;
//!
//! let retry = InboxSettlement::Retry { after: Duration::from_secs(2), error: "timeout".into() };
//! assert_eq!(retry.status(), InboxStatus::Received);
//! assert_eq!("PROCESSING".parse::<InboxStatus>()?, InboxStatus::Processing);
//! # Ok::<(), oncebox_core::Error>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, ErrorKind};
use crate::event::Headers;

mod runner;

pub use runner::{
    CORRELATION_ID_HEADER, StoredEvent, StoredInbox, StoredInboxSettings, StoredProcessing, StoredProcessor,
    StoredSource,
};

/// The processing state of a stored inbox message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InboxStatus {
    /// Stored, waiting for its first run or for its next attempt at `available_at`.
    Received,
    /// Claimed by a poller holding the row's claim token since `locked_at`.
    Processing,
    /// The handler's effect committed; removed later by clean-up.
    Processed,
    /// Attempts exhausted, or the handler said the message can never succeed: kept, with the
    /// error, for a person.
    Failed,
}

impl InboxStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [InboxStatus; 4] =
        [InboxStatus::Received, InboxStatus::Processing, InboxStatus::Processed, InboxStatus::Failed];

    /// The value stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxStatus::Received => "RECEIVED",
            InboxStatus::Processing => "PROCESSING",
            InboxStatus::Processed => "PROCESSED",
            InboxStatus::Failed => "FAILED",
        }
    }
}

impl fmt::Display for InboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for InboxStatus {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(value))
            .ok_or_else(|| Error::new(ErrorKind::Decode, format!("unknown inbox status '{value}'")))
    }
}

/// A message as a listener stores it, before it acknowledges the broker.
#[derive(Debug, Clone, PartialEq)]
pub struct NewInboxMessage {
    /// Who consumes it (the inbox's consumer name): with `id`, the row's key.
    pub consumer: String,
    /// The event id.
    pub id: Uuid,
    /// The event type: selects the handler.
    pub event_type: String,
    /// The payload type name, when the message carried one.
    pub payload_type: Option<String>,
    /// The payload as received.
    pub payload: Vec<u8>,
    /// The user headers (trace context, correlation id, the user's own).
    pub headers: Headers,
    /// Where the broker had it (`"queue 'billing'"`, `"orders/2@41"`).
    pub source: String,
    /// The correlation id the publisher set, when it set one.
    pub correlation_id: Option<String>,
    /// When the event was written, when the message said.
    pub created_at: Option<DateTime<Utc>>,
}

/// A stored inbox message with its processing state.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxMessage {
    /// What was stored.
    pub message: NewInboxMessage,
    /// The processing state.
    pub status: InboxStatus,
    /// Failed runs so far (a lease that ran out counts as one).
    pub attempts: u32,
    /// When it was stored (database clock).
    pub received_at: DateTime<Utc>,
    /// When the next run may start; `None` once it is PROCESSED or FAILED.
    pub available_at: Option<DateTime<Utc>>,
    /// When the effect committed.
    pub processed_at: Option<DateTime<Utc>>,
    /// The last failure, cut to [`LAST_ERROR_MAX_CHARS`](crate::event::LAST_ERROR_MAX_CHARS).
    pub last_error: Option<String>,
    /// The token of the claim in flight.
    pub claim_token: Option<Uuid>,
    /// When the claim in flight was taken.
    pub locked_at: Option<DateTime<Utc>>,
}

/// The messages one claim took, all under one token.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxBatch {
    /// The token that fences every settle of these messages.
    pub claim_token: Uuid,
    /// The claimed messages, oldest `available_at` first; each is PROCESSING.
    pub messages: Vec<InboxMessage>,
}

impl InboxBatch {
    /// Orders the messages oldest `available_at` first, the order a claim takes them in.
    pub fn sort_oldest_first(&mut self) {
        self.messages.sort_by_key(|stored| (stored.available_at, stored.message.id));
    }
}

/// How one run of a claimed message ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxSettlement {
    /// The effect committed (for a transactional handler, in the handler's own transaction).
    Processed,
    /// The run failed; the next one starts `after` from now (database clock).
    Retry {
        /// The wait before the next run.
        after: Duration,
        /// The failure.
        error: String,
    },
    /// The message can never succeed, or its attempts ran out.
    Failed {
        /// The failure.
        error: String,
    },
}

impl InboxSettlement {
    /// The status the settle leaves the row in.
    pub fn status(&self) -> InboxStatus {
        match self {
            InboxSettlement::Processed => InboxStatus::Processed,
            InboxSettlement::Retry { .. } => InboxStatus::Received,
            InboxSettlement::Failed { .. } => InboxStatus::Failed,
        }
    }
}

/// Stored messages of one consumer and event type in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxCount {
    /// The consumer.
    pub consumer: String,
    /// The event type.
    pub event_type: String,
    /// The status.
    pub status: InboxStatus,
    /// How many rows.
    pub rows: u64,
}

/// The `last_error` a lease that ran out leaves: the holder crashed or stalled mid-run.
pub const LEASE_RAN_OUT: &str =
    "the claim's lease ran out before its handler finished (the consumer crashed or stalled)";
