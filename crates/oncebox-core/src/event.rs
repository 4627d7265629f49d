//! Domain types: outbox rows, their states, DLQ rows, inbox records and the message a
//! [`Sender`](crate::Sender) delivers.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, ErrorKind};

/// Header carrying the event id on every delivered message.
pub const HEADER_EVENT_ID: &str = "oncebox_event_id";
/// Header carrying the event type on every delivered message.
pub const HEADER_EVENT_TYPE: &str = "oncebox_event_type";
/// Header carrying the payload type on every delivered message.
pub const HEADER_PAYLOAD_TYPE: &str = "oncebox_payload_type";
/// Header carrying when the event was written (RFC 3339, UTC, microseconds): how an inbox tells an
/// event older than the ids it keeps.
pub const HEADER_CREATED_AT: &str = "oncebox_created_at";

/// User and tracing headers stored with an event (a JSON object of strings).
pub type Headers = std::collections::BTreeMap<String, String>;

/// The lifecycle state of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventStatus {
    /// Waiting to be claimed (new, or scheduled for a retry at `next_retry_at`).
    Pending,
    /// Claimed by a worker holding the row's claim token.
    InProcess,
    /// Acknowledged by the broker; removed later by clean-up.
    Processed,
    /// Retries exhausted; moved to the DLQ when it is enabled.
    Failed,
}

impl EventStatus {
    /// The value stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Pending => "PENDING",
            EventStatus::InProcess => "IN_PROCESS",
            EventStatus::Processed => "PROCESSED",
            EventStatus::Failed => "FAILED",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventStatus {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Error> {
        match value.to_ascii_uppercase().as_str() {
            "PENDING" => Ok(EventStatus::Pending),
            "IN_PROCESS" => Ok(EventStatus::InProcess),
            "PROCESSED" => Ok(EventStatus::Processed),
            "FAILED" => Ok(EventStatus::Failed),
            _ => Err(Error::new(ErrorKind::Decode, format!("unknown event status '{value}'"))),
        }
    }
}

/// A row of the outbox table as read back from the database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEvent {
    /// Event id (UUIDv7 by default): the idempotency key end to end.
    pub id: Uuid,
    /// Configured event type; selects topic, polling and retry settings.
    pub event_type: String,
    /// Serialized payload (JSON text by default).
    pub payload: String,
    /// Name of the payload's type, for consumers.
    pub payload_type: String,
    /// Stored headers (trace context, correlation id, user headers).
    pub headers: Headers,
    /// Kafka key / routing hint; the event id is used when absent.
    pub partition_key: Option<String>,
    /// Current state.
    pub status: EventStatus,
    /// Sends tried so far (0 when new).
    pub attempts: u32,
    /// Earliest time the row may be claimed.
    pub next_retry_at: DateTime<Utc>,
    /// When the row was written.
    pub created_at: DateTime<Utc>,
    /// Last state change (the claim time while IN_PROCESS).
    pub updated_at: DateTime<Utc>,
    /// When the broker acknowledged the event.
    pub processed_at: Option<DateTime<Utc>>,
    /// Short text of the last send failure.
    pub last_error: Option<String>,
    /// The fencing token of the claim that holds the row, while IN_PROCESS.
    pub claim_token: Option<Uuid>,
}

impl OutboxEvent {
    /// The message handed to a [`Sender`](crate::Sender) for this row, addressed to `topic`.
    pub fn to_message(&self, topic: &str) -> OutboundMessage {
        OutboundMessage {
            id: self.id,
            event_type: self.event_type.clone(),
            topic: topic.to_owned(),
            key: self.partition_key.clone().unwrap_or_else(|| self.id.to_string()),
            payload: self.payload.clone(),
            payload_type: self.payload_type.clone(),
            headers: self.headers.clone(),
            created_at: self.created_at,
        }
    }
}

/// A new event ready to be inserted by a dialect's writer.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOutboxEvent {
    /// Event id.
    pub id: Uuid,
    /// Configured event type.
    pub event_type: String,
    /// Serialized payload.
    pub payload: String,
    /// Payload type name.
    pub payload_type: String,
    /// Headers to store.
    pub headers: Headers,
    /// Optional partition key.
    pub partition_key: Option<String>,
}

impl NewOutboxEvent {
    /// Headers as the JSON object text stored in the `headers` column.
    pub fn headers_json(&self) -> String {
        headers_to_json(&self.headers)
    }
}

/// Renders headers as a JSON object.
pub fn headers_to_json(headers: &Headers) -> String {
    serde_json::to_string(headers).unwrap_or_else(|_| "{}".to_owned())
}

/// Parses the stored `headers` column; a malformed value is a decode error naming the row.
pub fn headers_from_json(id: Uuid, text: &str) -> Result<Headers, Error> {
    if text.is_empty() {
        return Ok(Headers::new());
    }
    serde_json::from_str(text).map_err(|error| {
        Error::new(ErrorKind::Decode, format!("headers of event {id} are not a JSON object of strings"))
            .with_source(error)
    })
}

/// Longest `last_error` text stored per row, in characters.
pub const LAST_ERROR_MAX_CHARS: usize = 1_000;

/// The part of a failure text a dialect stores as `last_error`: at most
/// [`LAST_ERROR_MAX_CHARS`] characters, cut on a character boundary.
pub fn last_error_text(error: &str) -> &str {
    match error.char_indices().nth(LAST_ERROR_MAX_CHARS) {
        Some((cut, _)) => &error[..cut],
        None => error,
    }
}

/// What a [`Sender`](crate::Sender) delivers: one event, addressed and keyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundMessage {
    /// Event id (also sent as the `oncebox_event_id` header).
    pub id: Uuid,
    /// Event type (also the RabbitMQ routing key).
    pub event_type: String,
    /// Kafka topic or RabbitMQ exchange from the event type's config.
    pub topic: String,
    /// Record key: the partition key, or the event id.
    pub key: String,
    /// Payload text.
    pub payload: String,
    /// Payload type name.
    pub payload_type: String,
    /// Stored headers (the `oncebox_*` headers are added by the sender).
    pub headers: Headers,
    /// When the event was written.
    pub created_at: DateTime<Utc>,
}

impl OutboundMessage {
    /// Stored headers plus the four `oncebox_*` headers, as a transport writes them.
    pub fn wire_headers(&self) -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> = vec![
            (HEADER_EVENT_ID.to_owned(), self.id.to_string()),
            (HEADER_EVENT_TYPE.to_owned(), self.event_type.clone()),
            (HEADER_PAYLOAD_TYPE.to_owned(), self.payload_type.clone()),
            (
                HEADER_CREATED_AT.to_owned(),
                self.created_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
        ];
        headers.extend(
            self.headers
                .iter()
                .filter(|(name, _)| !name.starts_with("oncebox_"))
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        headers
    }
}

/// A batch claimed by one worker: every row carries the same fresh claim token.
#[derive(Debug, Clone)]
pub struct ClaimedBatch {
    /// Event type of every row.
    pub event_type: String,
    /// The fencing token; settling only touches rows still holding it.
    pub claim_token: Uuid,
    /// Claimed rows, oldest `next_retry_at` first.
    pub events: Vec<OutboxEvent>,
}

impl ClaimedBatch {
    /// Number of claimed rows.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether nothing was claimed.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// How one claimed row ends its claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// Delivered: status PROCESSED, attempts + 1, `processed_at` set.
    Processed {
        /// Event id.
        id: Uuid,
    },
    /// Failed, to be retried: status PENDING, attempts + 1, `next_retry_at = now + delay`.
    Retry {
        /// Event id.
        id: Uuid,
        /// Delay from the database's now to the next attempt.
        delay: Duration,
        /// Short failure text.
        error: String,
    },
    /// Failed for good: status FAILED, attempts + 1.
    Failed {
        /// Event id.
        id: Uuid,
        /// Short failure text.
        error: String,
    },
}

impl Settlement {
    /// The row this settlement is for.
    pub fn id(&self) -> Uuid {
        match self {
            Settlement::Processed { id } | Settlement::Retry { id, .. } | Settlement::Failed { id, .. } => {
                *id
            }
        }
    }
}

/// What a settle call changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Rows updated.
    pub settled: u64,
    /// Rows not updated because they no longer hold the batch's claim token (recovered as stuck
    /// and re-claimed, or settled already).
    pub refused: u64,
}

/// Row counts for gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxCounts {
    /// Counts per `(event_type, status)`.
    pub by_type_and_status: Vec<(String, EventStatus, u64)>,
    /// Per event type with PENDING rows, how long the oldest of them has waited since its commit
    /// (on the database's clock): the one number that says delivery is stuck.
    pub oldest_pending: Vec<(String, std::time::Duration)>,
}

impl OutboxCounts {
    /// Total rows in a status, over all types.
    pub fn status_total(&self, status: EventStatus) -> u64 {
        self.by_type_and_status.iter().filter(|(_, s, _)| *s == status).map(|(_, _, n)| n).sum()
    }

    /// Total rows.
    pub fn total(&self) -> u64 {
        self.by_type_and_status.iter().map(|(_, _, n)| n).sum()
    }
}

/// Why `name` cannot be an event type name, or `None` when it can: a name is non-blank, has no
/// surrounding spaces or control characters and is at most 255 bytes (the column's width). The
/// config applies it; a filter over stored names is looser ([`crate::dlq::event_type`]).
pub fn event_type_name_problem(name: &str) -> Option<&'static str> {
    let valid = !name.trim().is_empty()
        && name.trim() == name
        && name.len() <= 255
        && !name.chars().any(char::is_control);
    (!valid).then_some(
        "an event type name must be non-blank, without surrounding spaces or control characters, at most \
         255 bytes",
    )
}

/// The state of a DLQ row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DlqStatus {
    /// Arrived from the outbox; waiting for a person.
    Moved,
    /// Only inside the transfer-from transaction; never settable through the API.
    InProcess,
    /// Handled; deleted by DLQ clean-up after its TTL.
    Resolved,
    /// To be moved back to the outbox as PENDING by the transfer-from job.
    ToRetry,
}

impl DlqStatus {
    /// The value stored in the `dlq_status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            DlqStatus::Moved => "MOVED",
            DlqStatus::InProcess => "IN_PROCESS",
            DlqStatus::Resolved => "RESOLVED",
            DlqStatus::ToRetry => "TO_RETRY",
        }
    }

    /// Whether a person (the DLQ API) may set this status.
    pub fn is_settable(self) -> bool {
        !matches!(self, DlqStatus::InProcess)
    }
}

impl fmt::Display for DlqStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DlqStatus {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Error> {
        match value.to_ascii_uppercase().as_str() {
            "MOVED" => Ok(DlqStatus::Moved),
            "IN_PROCESS" => Ok(DlqStatus::InProcess),
            "RESOLVED" => Ok(DlqStatus::Resolved),
            "TO_RETRY" => Ok(DlqStatus::ToRetry),
            _ => Err(Error::new(
                ErrorKind::InvalidInput,
                format!("unknown DLQ status '{value}' (expected MOVED, RESOLVED or TO_RETRY)"),
            )),
        }
    }
}

/// A row of the dead letter queue table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DlqEvent {
    /// The outbox row as it was when it was moved (status FAILED).
    pub event: OutboxEvent,
    /// DLQ state.
    pub dlq_status: DlqStatus,
    /// When the row arrived in the DLQ.
    pub moved_at: DateTime<Utc>,
}

/// Which DLQ rows an API call is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DlqSelection {
    /// These ids.
    Ids(Vec<Uuid>),
    /// Every row of this event type.
    EventType(String),
}

/// Filter for listing and counting DLQ rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DlqFilter {
    /// Only rows in this state.
    pub status: Option<DlqStatus>,
    /// Only rows of this event type.
    pub event_type: Option<String>,
}

/// The selected DLQ rows written longer ago than some age ([`DlqDao::older_than`]): what a
/// re-drive of them is asked about.
///
/// [`DlqDao::older_than`]: crate::DlqDao::older_than
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OlderEvents {
    /// How many rows.
    pub count: u64,
    /// How long ago the oldest of them was written (`created_at`); `None` when `count` is 0.
    pub oldest_age: Option<Duration>,
}

impl OlderEvents {
    /// `count` rows, the oldest written `oldest_age_ms` milliseconds ago, as an aggregate
    /// statement reads them (a negative count or age, from a clock step, counts as 0).
    pub fn from_aggregate(count: i64, oldest_age_ms: i64) -> Self {
        let count = u64::try_from(count).unwrap_or_default();
        let age = Duration::from_millis(u64::try_from(oldest_age_ms).unwrap_or_default());
        Self { count, oldest_age: (count > 0).then_some(age) }
    }

    /// These rows and `other`'s together (the parts of a long id list read in chunks).
    #[must_use]
    pub fn and(self, other: OlderEvents) -> OlderEvents {
        let oldest_age = match (self.oldest_age, other.oldest_age) {
            (Some(one), Some(two)) => Some(one.max(two)),
            (one, two) => one.or(two),
        };
        OlderEvents { count: self.count + other.count, oldest_age }
    }
}

/// DLQ row counts for gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DlqCounts {
    /// Counts per `(event_type, dlq_status)`.
    pub by_type_and_status: Vec<(String, DlqStatus, u64)>,
}

/// One remembered consumption: `(consumer, id)` and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRecord {
    /// Consumer name (the inbox key's first part).
    pub consumer: String,
    /// Event id.
    pub id: Uuid,
    /// When it was recorded.
    pub consumed_at: DateTime<Utc>,
}

/// A lease on a named job, returned by [`JobLock::try_lock`](crate::JobLock::try_lock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLease {
    /// Job name.
    pub job: String,
    /// The instance holding it.
    pub owner: Uuid,
    /// Minimum time the lock stays held, counted from acquisition, even after unlock.
    pub lock_at_least_for: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_texts_are_cut_on_character_boundaries() {
        assert_eq!(last_error_text("timeout"), "timeout");
        let long = "é".repeat(LAST_ERROR_MAX_CHARS + 5);
        assert_eq!(last_error_text(&long).chars().count(), LAST_ERROR_MAX_CHARS);
    }

    #[test]
    fn statuses_round_trip_case_insensitively() {
        for status in
            [EventStatus::Pending, EventStatus::InProcess, EventStatus::Processed, EventStatus::Failed]
        {
            assert_eq!(status.as_str().to_lowercase().parse::<EventStatus>().ok(), Some(status));
        }
        for status in [DlqStatus::Moved, DlqStatus::InProcess, DlqStatus::Resolved, DlqStatus::ToRetry] {
            assert_eq!(status.as_str().parse::<DlqStatus>().ok(), Some(status));
        }
        let error = "LOST".parse::<DlqStatus>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("LOST"), "{error}");
        assert!(!DlqStatus::InProcess.is_settable());
    }

    #[test]
    fn wire_headers_put_oncebox_headers_first_and_keep_user_headers() {
        let mut headers = Headers::new();
        headers.insert("traceparent".into(), "00-abc-def-01".into());
        headers.insert("oncebox_event_id".into(), "spoofed".into());
        let event = OutboxEvent {
            id: Uuid::nil(),
            event_type: "order-created".into(),
            payload: "{}".into(),
            payload_type: "Order".into(),
            headers,
            partition_key: None,
            status: EventStatus::InProcess,
            attempts: 0,
            next_retry_at: Utc::now(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
            processed_at: None,
            last_error: None,
            claim_token: None,
        };
        let message = event.to_message("orders");
        assert_eq!(message.key, Uuid::nil().to_string());
        let wire = message.wire_headers();
        assert_eq!(wire.len(), 5);
        assert_eq!(wire[0], (HEADER_EVENT_ID.to_owned(), Uuid::nil().to_string()));
        let created_at =
            wire.iter().find(|(name, _)| name == HEADER_CREATED_AT).map(|(_, value)| value.as_str());
        assert_eq!(
            created_at
                .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
                .map(|at| at.timestamp_micros()),
            Some(event.created_at.timestamp_micros()),
            "written to the microsecond"
        );
        assert!(wire.contains(&("traceparent".to_owned(), "00-abc-def-01".to_owned())));
    }
}
