//! The transport-neutral half of a listener: what a handler receives ([`Received`]), how the
//! `oncebox_*` headers of a message are read ([`EventHeaders::decode`]), and the registry of typed
//! handlers ([`Handlers`], with [`Handlers::on`] and [`Handlers::on_once`] through an
//! [`Inbox`]). Payloads are JSON unless a handler names its own [`Deserializer`]
//! ([`Handlers::on_with`], [`Handlers::on_once_with`]).
//!
//! A transport crate keeps only its broker loop (acknowledging or committing, holding a message
//! for a retry, reconnecting, dead-lettering) and hands each message here as a
//! `Received<Vec<u8>, M>`, where `M` is what the broker says about the message (a Kafka
//! record's topic, partition and offset; a RabbitMQ delivery's exchange and redelivery flag).
//!
//! ```
//! use oncebox_core::consume::{EventHeaders, Handlers, Received};
//! use oncebox_core::Consumed;
//!
//! #[derive(serde::Deserialize)]
//! struct OrderCreated { order: u64 }
//!
//! let id = uuid::Uuid::now_v7().to_string();
//! let headers = EventHeaders::decode(
//!     "queue 'billing'",
//!     [("oncebox_event_id", Some(id.as_str())), ("oncebox_event_type", Some("order-created")), ("traceparent", Some("00-1-2-01"))],
//! )?;
//! assert_eq!(headers.event_type.as_deref(), Some("order-created"));
//! assert_eq!(headers.headers.len(), 1, "only the user's headers are kept");
//!
//! let handlers: Handlers<()> = Handlers::new().on("order-created", |event: Received<OrderCreated, ()>| async move {
//!     assert_eq!(event.payload.order, 7);
//!     Ok(Consumed::Applied(()))
//! });
//! assert_eq!(handlers.event_types(), ["order-created"]);
//! # Ok::<(), oncebox_core::Error>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use tracing::Instrument;
use uuid::Uuid;

use crate::dao::{InboxWriter, Transactions};
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::event::{HEADER_CREATED_AT, HEADER_EVENT_ID, HEADER_EVENT_TYPE, HEADER_PAYLOAD_TYPE, Headers};
use crate::inbox::{ConsumeError, Consumed, Inbox};
use crate::serializer::{Deserializer, JsonSerializer};
use crate::stored::StoredInbox;

mod pipeline;

pub use pipeline::{Ended, Pipeline, RetryPolicy, Verdict, stopped, until_shutdown};

/// Prefix of the headers oncebox writes itself; they are read into [`Received`]'s fields and never
/// passed on as user headers.
pub const ONCEBOX_HEADER_PREFIX: &str = "oncebox_";

/// An event as a handler receives it: the decoded `oncebox_*` headers, what the broker says about
/// the message (`source`), and the payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Received<T, M> {
    /// The event id (`oncebox_event_id`): the inbox key.
    pub id: Uuid,
    /// The event type (`oncebox_event_type`): selects the handler.
    pub event_type: String,
    /// The payload type name (`oncebox_payload_type`), when present.
    pub payload_type: Option<String>,
    /// When the event was written (`oncebox_created_at`), when present: an inbox refuses an event
    /// older than the ids it keeps ([`Inbox::admit`]).
    pub created_at: Option<DateTime<Utc>>,
    /// Every other header with a text value (trace context, correlation id, user headers).
    pub headers: Headers,
    /// Where the message came from, in the broker's terms.
    pub source: M,
    /// The payload.
    pub payload: T,
}

impl<M> Received<Vec<u8>, M> {
    /// The event with its payload decoded as `T` by `deserializer`, which is given the
    /// `oncebox_payload_type` header too. A payload that does not fit `T` can never be handled,
    /// so its error is [`HandlerFailure::Poison`], naming the event and the type, with the
    /// deserializer's error as its source.
    pub fn decode<T, D>(self, deserializer: &D) -> Result<Received<T, M>, HandlerFailure>
    where
        D: Deserializer<T> + ?Sized,
    {
        match deserializer.deserialize(&self.payload, self.payload_type.as_deref()) {
            Ok(payload) => Ok(Received {
                id: self.id,
                event_type: self.event_type,
                payload_type: self.payload_type,
                created_at: self.created_at,
                headers: self.headers,
                source: self.source,
                payload,
            }),
            Err(error) => {
                let text = format!(
                    "the payload of event {} ({}) does not decode as {}",
                    self.id,
                    self.event_type,
                    std::any::type_name::<T>()
                );
                Err(HandlerFailure::Poison(Error::new(ErrorKind::Decode, text).with_source(error)))
            }
        }
    }

    /// The event with its JSON payload decoded as `T`: [`decode`](Self::decode) with
    /// [`JsonSerializer`].
    pub fn decode_json<T: DeserializeOwned>(self) -> Result<Received<T, M>, HandlerFailure> {
        self.decode(&JsonSerializer)
    }
}

/// The `oncebox_*` headers of a message and the user's headers beside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHeaders {
    /// `oncebox_event_id`.
    pub id: Uuid,
    /// `oncebox_event_type`, when present; a transport may fall back to a routing key.
    pub event_type: Option<String>,
    /// `oncebox_payload_type`, when present.
    pub payload_type: Option<String>,
    /// `oncebox_created_at`, when present.
    pub created_at: Option<DateTime<Utc>>,
    /// Every header not starting with `oncebox_` whose value is text.
    pub headers: Headers,
}

impl EventHeaders {
    /// Reads the headers of the message at `place` (`"record orders/2@41"`, `"queue 'billing'"`;
    /// formatted only for an error, so `format_args!` costs nothing per message),
    /// given as names with their value when it is text (`None` for a value that is not: binary,
    /// or a number). A missing `oncebox_event_id`, or one that is not text or not a UUID, is an
    /// [`ErrorKind::Decode`] error naming the header and `place`.
    pub fn decode<'a>(
        place: impl fmt::Display,
        entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<Self> {
        let mut id: Option<Option<&str>> = None;
        let (mut event_type, mut payload_type, mut created_at) = (None, None, None);
        let mut headers = Headers::new();
        for (name, value) in entries {
            match name {
                HEADER_EVENT_ID => id = Some(value),
                HEADER_EVENT_TYPE => event_type = value.map(str::to_owned),
                HEADER_PAYLOAD_TYPE => payload_type = value.map(str::to_owned),
                HEADER_CREATED_AT => created_at = value,
                other if other.starts_with(ONCEBOX_HEADER_PREFIX) => {}
                other => {
                    if let Some(value) = value {
                        headers.insert(other.to_owned(), value.to_owned());
                    }
                }
            }
        }
        let text = id
            .ok_or_else(|| decode_error(format!("{place} has no {HEADER_EVENT_ID} header")))?
            .ok_or_else(|| decode_error(format!("header {HEADER_EVENT_ID} of {place} is not text")))?;
        let id = Uuid::parse_str(text.trim()).map_err(|error| {
            decode_error(format!("header {HEADER_EVENT_ID} '{text}' of {place} is not a UUID"))
                .with_source(error)
        })?;
        // Optional and only a guard: a value another producer wrote its own way is read as absent
        // (the inbox then cannot tell the event's age) rather than poisoning the message.
        let created_at = created_at.and_then(|text| match DateTime::parse_from_rfc3339(text.trim()) {
            Ok(at) => Some(at.with_timezone(&Utc)),
            Err(error) => {
                tracing::warn!(%id, value = text, %error, "header {HEADER_CREATED_AT} of {place} is not an RFC 3339 time; read as absent");
                None
            }
        });
        Ok(Self { id, event_type, payload_type, created_at, headers })
    }

    /// The event these headers describe, with `event_type` settled by the transport.
    pub fn into_received<T, M>(self, event_type: String, source: M, payload: T) -> Received<T, M> {
        Received {
            id: self.id,
            event_type,
            payload_type: self.payload_type,
            created_at: self.created_at,
            headers: self.headers,
            source,
            payload,
        }
    }
}

fn decode_error(message: String) -> Error {
    Error::new(ErrorKind::Decode, message)
}

/// What a listener did with one message, for logs, metrics and tests (every transport reports the
/// same kinds; `to` and `at` name places in the broker's terms).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler ran and succeeded; the message was settled (acknowledged, or its offset
    /// committed).
    Applied {
        /// Event id.
        id: Uuid,
    },
    /// The inbox had the event already; the message was settled without running the effect.
    Duplicate {
        /// Event id.
        id: Uuid,
    },
    /// The handler failed; nothing was settled and the message runs again after `retry_in`.
    Retrying {
        /// Event id.
        id: Uuid,
        /// Failed runs so far.
        attempts: u32,
        /// The wait before the next run.
        retry_in: std::time::Duration,
        /// The handler's error.
        error: String,
    },
    /// A poison message was handed to the dead-letter destination `to` (a Kafka topic, a
    /// RabbitMQ queue's dead-letter exchange), then settled.
    DeadLettered {
        /// Event id, when it could be decoded.
        id: Option<Uuid>,
        /// The dead-letter destination.
        to: String,
        /// Why the message is poison.
        reason: String,
    },
    /// A poison message with nowhere to go: never settled, never discarded, held where it is (`at`:
    /// a Kafka partition stopped at its offset, or a RabbitMQ message left unacknowledged) until
    /// the listener restarts or the broker hands it out again.
    Held {
        /// Event id, when it could be decoded.
        id: Option<Uuid>,
        /// Where it is held.
        at: String,
        /// Why the message is poison.
        reason: String,
    },
}

/// How a handler failed: poison can never succeed (dead-letter it, or hold it), anything else
/// runs again after a backoff.
#[derive(Debug)]
pub enum HandlerFailure {
    /// The message can never be handled (its payload does not decode, say).
    Poison(Error),
    /// The handler failed; a later run may succeed.
    Failed(Error),
}

/// The future a registered handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Consumed<()>, HandlerFailure>> + Send>>;

/// A registered handler, its payload type erased: it decodes the payload itself.
pub type Handler<M> = Arc<dyn Fn(Received<Vec<u8>, M>) -> HandlerFuture + Send + Sync>;

/// The future of a transactional handler ([`Handlers::on_in`]): it borrows the open transaction,
/// and fails with any error type (`?` boxes it; its source chain is kept).
pub type TxFuture<'a> = Pin<Box<dyn Future<Output = std::result::Result<(), BoxError>> + Send + 'a>>;

/// The failure of a transactional handler for event `id`: an oncebox error as it is, any other
/// error wrapped with its text in the message (for the log line) and kept as the source.
pub(crate) fn handler_failure(id: Uuid, error: BoxError) -> HandlerFailure {
    match error.downcast::<Error>() {
        Ok(error) => HandlerFailure::Failed(error.context(format!("the handler of event {id}"))),
        Err(error) => HandlerFailure::Failed(
            Error::new(ErrorKind::Other, format!("the handler of event {id} failed: {error}"))
                .with_boxed_source(error),
        ),
    }
}

/// Rolls back the transaction of a transactional handler for event `id`. A failed rollback is
/// logged only: the database discards the transaction with its connection anyway.
pub(crate) async fn rollback<S: Transactions>(transactions: &S, tx: S::Tx, id: Uuid) {
    if let Err(error) = transactions.rollback(tx).await {
        tracing::warn!(event_id = %id, %error, "rolling back a transactional handler failed; the database discards it with the connection");
    }
}

/// One handler per event type, each decoding the payload into its own type.
pub struct Handlers<M> {
    by_type: HashMap<String, Handler<M>>,
    consumer: Arc<str>,
}

impl<M> Default for Handlers<M> {
    fn default() -> Self {
        Self { by_type: HashMap::new(), consumer: Arc::from("") }
    }
}

impl<M> fmt::Debug for Handlers<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handlers").field("event_types", &self.event_types()).finish()
    }
}

impl<M: Send + 'static> Handlers<M> {
    /// The handler of `event_type`. Each run is a [`CONSUME`](crate::trace::CONSUME) span that
    /// continues the trace in the event's headers and records the outcome.
    pub fn get(&self, event_type: &str) -> Option<Handler<M>> {
        let handler = self.by_type.get(event_type)?.clone();
        let consumer = Arc::clone(&self.consumer);
        Some(Arc::new(move |event: Received<Vec<u8>, M>| -> HandlerFuture {
            let span = tracing::info_span!(
                "oncebox.consume",
                event_id = %event.id,
                event_type = %event.event_type,
                consumer = %consumer,
                outcome = tracing::field::Empty
            );
            crate::trace::continue_trace(&span, &event.headers);
            let running = handler(event).instrument(span.clone());
            Box::pin(async move {
                let result = running.await;
                let outcome = match &result {
                    Ok(consumed) if consumed.is_applied() => "applied",
                    Ok(_) => "duplicate",
                    Err(HandlerFailure::Failed(_)) => "failed",
                    Err(HandlerFailure::Poison(_)) => "poison",
                };
                span.record("outcome", outcome);
                result
            })
        }))
    }

    /// The same handlers, their spans naming `consumer` (a Kafka group, a RabbitMQ queue).
    #[must_use]
    pub fn for_consumer(mut self, consumer: &str) -> Self {
        self.consumer = Arc::from(consumer);
        self
    }
}

impl<M> Handlers<M> {
    /// Whether no type has a handler.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    /// The event types with a handler, sorted.
    pub fn event_types(&self) -> Vec<&str> {
        let mut types: Vec<&str> = self.by_type.keys().map(String::as_str).collect();
        types.sort_unstable();
        types
    }
}

impl<M: Send + 'static> Handlers<M> {
    /// No handler yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles `event_type` with `handler`, which receives the payload decoded as `T` (JSON) and
    /// is responsible for idempotency itself, typically by recording the id through the dialect's
    /// `InboxWriter` in the transaction of its effect. It returns `Ok(Consumed::Duplicate)` when
    /// the inbox skipped the effect. Registering a type again replaces its handler.
    #[must_use]
    pub fn on<T, F, Fut>(self, event_type: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Received<T, M>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Consumed<()>>> + Send + 'static,
    {
        self.on_with(event_type, JsonSerializer, handler)
    }

    /// [`on`](Self::on) with the payload decoded by `deserializer` instead of JSON: the consuming
    /// half of the [`Serializer`](crate::Serializer) the publisher was given. A payload it refuses
    /// is poison ([`HandlerFailure::Poison`]): `handler` never sees it.
    ///
    /// ```
    /// use oncebox_core::consume::{Handlers, Received};
    /// use oncebox_core::{Consumed, Deserializer, Error, ErrorKind, Result};
    ///
    /// /// Payloads like `v2;amount=1250`.
    /// struct AmountV2;
    ///
    /// impl Deserializer<u64> for AmountV2 {
    ///     fn deserialize(&self, payload: &[u8], _payload_type: Option<&str>) -> Result<u64> {
    ///         std::str::from_utf8(payload)
    ///             .ok()
    ///             .and_then(|text| text.strip_prefix("v2;amount="))
    ///             .and_then(|amount| amount.parse().ok())
    ///             .ok_or_else(|| Error::new(ErrorKind::Serialization, "not a v2 amount"))
    ///     }
    /// }
    ///
    /// let handlers: Handlers<()> =
    ///     Handlers::new().on_with("payment-made", AmountV2, |event: Received<u64, ()>| async move {
    ///         assert_eq!(event.payload, 1250);
    ///         Ok(Consumed::Applied(()))
    ///     });
    /// assert_eq!(handlers.event_types(), ["payment-made"]);
    /// ```
    #[must_use]
    pub fn on_with<T, D, F, Fut>(mut self, event_type: impl Into<String>, deserializer: D, handler: F) -> Self
    where
        T: Send + 'static,
        D: Deserializer<T> + 'static,
        F: Fn(Received<T, M>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Consumed<()>>> + Send + 'static,
    {
        let shared = Arc::new((deserializer, handler));
        let erased: Handler<M> = Arc::new(move |raw: Received<Vec<u8>, M>| -> HandlerFuture {
            let shared = Arc::clone(&shared);
            Box::pin(async move {
                let (deserializer, handler) = &*shared;
                handler(raw.decode(deserializer)?).await.map_err(HandlerFailure::Failed)
            })
        });
        self.by_type.insert(event_type.into(), erased);
        self
    }

    /// Handles `event_type` in a transaction of its own: begins one from `transactions` (the
    /// dialect), records the event id there through `inbox`, runs `handler` with the transaction
    /// and the event (payload decoded as JSON), and commits: the effect and the id commit together
    /// or not at all, whatever crashes. An id recorded before is a duplicate (the transaction is
    /// rolled back, `handler` never runs); a failed handler rolls everything back and the delivery
    /// runs again after the listener's backoff. An id the inbox does not know that is older than
    /// the ids it keeps is refused as poison ([`Inbox::admit`]).
    ///
    /// `handler` returns a boxed future (`|tx, event| Box::pin(async move { … })`): that is what
    /// lets the listener's task, which must be `Send`, hold it across the borrowed transaction.
    /// The README's consume example shows it on a RabbitMQ listener over SQLite.
    #[must_use]
    pub fn on_in<T, S, W, F>(
        mut self,
        event_type: impl Into<String>,
        inbox: Inbox<W>,
        transactions: S,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        S: Transactions,
        W: InboxWriter<S::Tx> + 'static,
        F: for<'a> Fn(&'a mut S::Tx, Received<T, M>) -> TxFuture<'a> + Send + Sync + 'static,
    {
        let shared = Arc::new((inbox, transactions, handler));
        let erased: Handler<M> = Arc::new(move |raw: Received<Vec<u8>, M>| -> HandlerFuture {
            let shared = Arc::clone(&shared);
            Box::pin(async move {
                let (inbox, transactions, handler) = &*shared;
                let created_at = raw.created_at;
                let event = raw.decode_json::<T>()?;
                let id = event.id;
                let mut tx = transactions.begin().await.map_err(HandlerFailure::Failed)?;
                let consumed = inbox
                    .consume_in_at(&mut tx, id, created_at, async |tx: &mut S::Tx| handler(tx, event).await);
                let outcome = consumed.await.map_err(|failure| match failure {
                    // Unknown to the inbox and older than the ids it keeps: it may have been
                    // applied and forgotten, so it is never applied.
                    ConsumeError::Inbox(error) if error.kind() == ErrorKind::TooOld => {
                        HandlerFailure::Poison(error)
                    }
                    ConsumeError::Inbox(error) => {
                        HandlerFailure::Failed(error.context(format!("the inbox for event {id}")))
                    }
                    ConsumeError::Handler(error) => handler_failure(id, error),
                });
                if !matches!(outcome, Ok(Consumed::Applied(()))) {
                    rollback(transactions, tx, id).await;
                    if matches!(outcome, Ok(Consumed::Duplicate)) {
                        // Recorded by a transaction that committed: cached from now on.
                        inbox.remember(id).await;
                    }
                    return outcome;
                }
                transactions.commit(tx).await.map_err(|error| {
                    HandlerFailure::Failed(error.context(format!("committing the effect of event {id}")))
                })?;
                inbox.remember(id).await;
                outcome
            })
        });
        self.by_type.insert(event_type.into(), erased);
        self
    }

    /// Stores every message of `event_types` in the durable inbox `inbox` instead of handling it
    /// here ([`StoredInbox::keeper`]): the message is acknowledged once its row committed, and the
    /// inbox's [`StoredProcessor`](crate::stored::StoredProcessor) runs its handler.
    #[must_use]
    pub fn store_in<E>(mut self, event_types: impl IntoIterator<Item = E>, inbox: &StoredInbox) -> Self
    where
        E: Into<String>,
        M: fmt::Display,
    {
        for event_type in event_types {
            self.by_type.insert(event_type.into(), inbox.keeper());
        }
        self
    }

    /// Handles `event_type` through `inbox` with [`Inbox::consume_once`]: the id is claimed, then
    /// `effect` runs; a redelivered message is settled without running it again, one that arrives
    /// while another delivery's effect runs waits and runs again later (without counting a failed
    /// run), and a failed effect releases the claim so the retry runs it.
    #[must_use]
    pub fn on_once<T, W, F, Fut>(self, event_type: impl Into<String>, inbox: Inbox<W>, effect: F) -> Self
    where
        T: DeserializeOwned + Send + Sync + 'static,
        W: Send + Sync + 'static,
        F: Fn(Received<T, M>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.on_once_with(event_type, inbox, JsonSerializer, effect)
    }

    /// [`on_once`](Self::on_once) with the payload decoded by `deserializer` instead of JSON; see
    /// [`on_with`](Self::on_with).
    #[must_use]
    pub fn on_once_with<T, W, D, F, Fut>(
        mut self,
        event_type: impl Into<String>,
        inbox: Inbox<W>,
        deserializer: D,
        effect: F,
    ) -> Self
    where
        T: Send + Sync + 'static,
        W: Send + Sync + 'static,
        D: Deserializer<T> + 'static,
        F: Fn(Received<T, M>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let shared = Arc::new((inbox, deserializer, effect));
        let erased: Handler<M> = Arc::new(move |raw: Received<Vec<u8>, M>| -> HandlerFuture {
            let shared = Arc::clone(&shared);
            Box::pin(async move {
                let (inbox, deserializer, effect) = &*shared;
                let created_at = raw.created_at;
                let event = raw.decode(deserializer)?;
                let id = event.id;
                inbox.consume_once_at(id, created_at, async || effect(event).await).await.map_err(|failure| {
                    match failure {
                        // Older than the ids the inbox keeps and unknown to it: it may have been
                        // applied and forgotten, so it is never applied.
                        ConsumeError::Inbox(error) if error.kind() == ErrorKind::TooOld => {
                            HandlerFailure::Poison(error)
                        }
                        ConsumeError::Inbox(error) => {
                            HandlerFailure::Failed(error.context(format!("the inbox for event {id}")))
                        }
                        ConsumeError::Handler(error) => HandlerFailure::Failed(error),
                    }
                })
            })
        });
        self.by_type.insert(event_type.into(), erased);
        self
    }
}

/// A transport's listener configuration, as [`ListenerBuilder`] needs it.
pub trait ListenerConfig: Sized {
    /// What the broker says about a message: the `M` of the handlers' [`Received<T, M>`].
    type Source: Send + 'static;
    /// The listener this configuration builds.
    type Listener;
    /// The configuration section errors name (`kafka.listener`).
    const SECTION: &'static str;

    /// Who consumes, as spans name it: the Kafka consumer group, the RabbitMQ queue. Empty by
    /// default.
    fn consumer(&self) -> &str {
        ""
    }

    /// Checks every setting, naming the first that is wrong.
    fn validate(&self) -> Result<()>;

    /// How a failed handler is retried, and whether a message can be given up.
    fn retry(&self) -> RetryPolicy;

    /// The listener running `pipeline` (its handlers checked, and never empty).
    fn listener(self, pipeline: Pipeline<Self::Source>) -> Result<Self::Listener>;
}

/// Builds a transport's listener: one handler per event type, then [`build`](Self::build).
pub struct ListenerBuilder<C: ListenerConfig> {
    config: C,
    handlers: Handlers<C::Source>,
}

impl<C: ListenerConfig + fmt::Debug> fmt::Debug for ListenerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerBuilder")
            .field("config", &self.config)
            .field("handlers", &self.handlers)
            .finish()
    }
}

impl<C: ListenerConfig> ListenerBuilder<C> {
    /// A builder for `config` with no handler yet.
    pub fn new(config: C) -> Self {
        Self { config, handlers: Handlers::new() }
    }

    /// Handles `event_type` with `handler`, the payload decoded as JSON; see [`Handlers::on`].
    #[must_use]
    pub fn on<T, F, Fut>(self, event_type: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Received<T, C::Source>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Consumed<()>>> + Send + 'static,
    {
        self.on_with(event_type, JsonSerializer, handler)
    }

    /// Handles `event_type` with `handler`, the payload decoded by `deserializer`; see
    /// [`Handlers::on_with`]. A payload it refuses is poison.
    #[must_use]
    pub fn on_with<T, D, F, Fut>(mut self, event_type: impl Into<String>, deserializer: D, handler: F) -> Self
    where
        T: Send + 'static,
        D: Deserializer<T> + 'static,
        F: Fn(Received<T, C::Source>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Consumed<()>>> + Send + 'static,
    {
        self.handlers = self.handlers.on_with(event_type, deserializer, handler);
        self
    }

    /// Handles `event_type` in a transaction of its own, the event id recorded through `inbox` in
    /// it, the payload decoded as JSON; see [`Handlers::on_in`].
    #[must_use]
    pub fn on_in<T, S, W, F>(
        mut self,
        event_type: impl Into<String>,
        inbox: Inbox<W>,
        transactions: S,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        S: Transactions,
        W: InboxWriter<S::Tx> + 'static,
        F: for<'a> Fn(&'a mut S::Tx, Received<T, C::Source>) -> TxFuture<'a> + Send + Sync + 'static,
    {
        self.handlers = self.handlers.on_in(event_type, inbox, transactions, handler);
        self
    }

    /// Stores every message of `event_types` in the durable inbox `inbox`; see
    /// [`Handlers::store_in`].
    #[must_use]
    pub fn store_in<E>(mut self, event_types: impl IntoIterator<Item = E>, inbox: &StoredInbox) -> Self
    where
        E: Into<String>,
        C::Source: fmt::Display,
    {
        self.handlers = self.handlers.store_in(event_types, inbox);
        self
    }

    /// Handles `event_type` through `inbox`, the payload decoded as JSON; see
    /// [`Handlers::on_once`]. A redelivered message is settled without running `effect` again.
    #[must_use]
    pub fn on_once<T, W, F, Fut>(self, event_type: impl Into<String>, inbox: Inbox<W>, effect: F) -> Self
    where
        T: DeserializeOwned + Send + Sync + 'static,
        W: Send + Sync + 'static,
        F: Fn(Received<T, C::Source>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.on_once_with(event_type, inbox, JsonSerializer, effect)
    }

    /// Handles `event_type` through `inbox`, the payload decoded by `deserializer`; see
    /// [`Handlers::on_once_with`].
    #[must_use]
    pub fn on_once_with<T, W, D, F, Fut>(
        mut self,
        event_type: impl Into<String>,
        inbox: Inbox<W>,
        deserializer: D,
        effect: F,
    ) -> Self
    where
        T: Send + Sync + 'static,
        W: Send + Sync + 'static,
        D: Deserializer<T> + 'static,
        F: Fn(Received<T, C::Source>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.handlers = self.handlers.on_once_with(event_type, inbox, deserializer, effect);
        self
    }

    /// The listener; checks the configuration and that at least one handler is registered.
    pub fn build(self) -> Result<C::Listener> {
        self.config.validate()?;
        if self.handlers.is_empty() {
            return Err(Error::config(C::SECTION, "no event type has a handler"));
        }
        let handlers = self.handlers.for_consumer(self.config.consumer());
        let retry = self.config.retry();
        self.config.listener(Pipeline::new(handlers, retry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(payload: &[u8]) -> Received<Vec<u8>, &'static str> {
        Received {
            id: Uuid::nil(),
            event_type: "order-created".into(),
            payload_type: None,
            created_at: None,
            headers: Headers::new(),
            source: "orders/0@1",
            payload: payload.to_vec(),
        }
    }

    #[derive(Debug, serde::Deserialize)]
    struct Order {
        order: u32,
    }

    #[test]
    fn a_payload_decodes_into_the_handlers_type_or_is_poison_naming_it() {
        let decoded = raw(b"{\"order\":7}").decode_json::<Order>();
        assert!(matches!(&decoded, Ok(event) if event.payload.order == 7 && event.source == "orders/0@1"));
        let poison = raw(b"{\"order\":\"seven\"}").decode_json::<Order>();
        assert!(
            matches!(&poison, Err(HandlerFailure::Poison(error)) if error.kind() == ErrorKind::Decode
                && error.to_string().contains("Order")),
            "{poison:?}"
        );
    }

    #[test]
    fn headers_split_into_the_oncebox_fields_and_the_users_text_headers() -> Result<()> {
        let id = Uuid::now_v7().to_string();
        let headers = EventHeaders::decode(
            "record orders/2@41",
            [
                (HEADER_EVENT_ID, Some(id.as_str())),
                (HEADER_EVENT_TYPE, Some("order-created")),
                (HEADER_PAYLOAD_TYPE, Some("OrderCreated")),
                ("oncebox_future_header", Some("ignored")),
                ("traceparent", Some("00-abc-def-01")),
                ("binary", None),
            ],
        )?;
        assert_eq!(headers.id.to_string(), id);
        assert_eq!(headers.event_type.as_deref(), Some("order-created"));
        assert_eq!(headers.payload_type.as_deref(), Some("OrderCreated"));
        assert_eq!(headers.headers, Headers::from([("traceparent".to_owned(), "00-abc-def-01".to_owned())]));
        Ok(())
    }

    #[test]
    fn a_missing_non_text_or_malformed_id_is_a_decode_error_naming_the_header_and_the_place() {
        let cases: [Vec<(&str, Option<&str>)>; 3] = [
            vec![(HEADER_EVENT_TYPE, Some("t"))],
            vec![(HEADER_EVENT_ID, None)],
            vec![(HEADER_EVENT_ID, Some("42"))],
        ];
        for entries in cases {
            let error = EventHeaders::decode("queue 'billing'", entries).err();
            assert!(
                error.as_ref().is_some_and(|error| error.kind() == ErrorKind::Decode
                    && error.to_string().contains(HEADER_EVENT_ID)
                    && error.to_string().contains("queue 'billing'")),
                "{error:?}"
            );
        }
    }

    /// `v2;order=7`: a format of the tests' own, refused unless the payload type is `order/v2`.
    struct OrderV2;

    impl Deserializer<Order> for OrderV2 {
        fn deserialize(&self, payload: &[u8], payload_type: Option<&str>) -> Result<Order> {
            if payload_type != Some("order/v2") {
                return Err(Error::new(
                    ErrorKind::Serialization,
                    format!("payload type {payload_type:?} is not order/v2"),
                ));
            }
            std::str::from_utf8(payload)
                .ok()
                .and_then(|text| text.strip_prefix("v2;order="))
                .and_then(|order| order.parse().ok())
                .map(|order| Order { order })
                .ok_or_else(|| Error::new(ErrorKind::Serialization, "not a v2 order"))
        }
    }

    fn raw_v2(payload: &[u8]) -> Received<Vec<u8>, &'static str> {
        Received { payload_type: Some("order/v2".to_owned()), ..raw(payload) }
    }

    #[test]
    fn decode_goes_through_the_given_deserializer_with_the_payload_type() {
        let decoded = raw_v2(b"v2;order=7").decode(&OrderV2);
        assert!(matches!(&decoded, Ok(event) if event.payload.order == 7
            && event.payload_type.as_deref() == Some("order/v2")));
        // JSON is just another deserializer: `decode_json` is `decode(&JsonSerializer)`.
        assert!(matches!(
            raw(b"{\"order\":7}").decode(&JsonSerializer),
            Ok(Received { payload: Order { order: 7 }, .. })
        ));
        assert!(matches!(raw(b"v2;order=7").decode_json::<Order>(), Err(HandlerFailure::Poison(_))));
    }

    #[tokio::test]
    async fn on_with_hands_the_handler_the_custom_payload_and_a_refused_one_is_poison() -> Result<()> {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handlers: Handlers<&'static str> = {
            let seen = Arc::clone(&seen);
            Handlers::new().on_with("order-created", OrderV2, move |event: Received<Order, &'static str>| {
                if let Ok(mut seen) = seen.lock() {
                    seen.push(event.payload.order);
                }
                async { Ok(Consumed::Applied(())) }
            })
        };
        let handler = handlers
            .get("order-created")
            .ok_or_else(|| Error::new(ErrorKind::Config, "the handler is missing"))?;
        assert!(matches!(handler(raw_v2(b"v2;order=7")).await, Ok(Consumed::Applied(()))));
        for refused in [raw_v2(b"{\"order\":7}"), raw(b"v2;order=8"), raw_v2(b"v2;order=eight")] {
            let failure = handler(refused).await;
            let Err(HandlerFailure::Poison(error)) = &failure else {
                return Err(Error::new(ErrorKind::Other, format!("not poison: {failure:?}")));
            };
            let text = error.to_string();
            assert_eq!(error.kind(), ErrorKind::Decode, "{text}");
            assert!(
                text.contains(&Uuid::nil().to_string())
                    && text.contains("(order-created)")
                    && text.contains("Order"),
                "the poison names the event, its type and the target type: {text}"
            );
            assert!(std::error::Error::source(error).is_some(), "the deserializer's error is the source");
        }
        assert_eq!(
            seen.lock().map(|seen| seen.clone()).unwrap_or_default(),
            [7],
            "only the good payload ran"
        );
        Ok(())
    }

    use crate::inbox::memory::SetInbox;

    #[tokio::test]
    async fn on_once_with_decodes_with_the_deserializer_and_runs_the_effect_once_per_id() -> Result<()> {
        let inbox = Inbox::new("billing", Arc::new(SetInbox::default()), ());
        let effects = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handlers: Handlers<&'static str> = {
            let effects = Arc::clone(&effects);
            Handlers::new().on_once_with(
                "order-created",
                inbox.with_retention(std::time::Duration::from_secs(3_600)),
                OrderV2,
                move |event: Received<Order, &'static str>| {
                    let effects = Arc::clone(&effects);
                    async move {
                        if let Ok(mut effects) = effects.lock() {
                            effects.push((event.id, event.payload.order));
                        }
                        Ok(())
                    }
                },
            )
        };
        let handler = handlers
            .get("order-created")
            .ok_or_else(|| Error::new(ErrorKind::Config, "the handler is missing"))?;
        let (first, second) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let with_id = |id, payload: &[u8]| Received { id, ..raw_v2(payload) };
        assert!(matches!(handler(with_id(first, b"v2;order=7")).await, Ok(Consumed::Applied(()))));
        assert!(matches!(handler(with_id(first, b"v2;order=7")).await, Ok(Consumed::Duplicate)));
        assert!(matches!(handler(with_id(second, b"v2;order=8")).await, Ok(Consumed::Applied(()))));
        // Poison is refused before the inbox: the id is not recorded.
        let third = Uuid::from_u128(3);
        assert!(matches!(handler(with_id(third, b"nonsense")).await, Err(HandlerFailure::Poison(_))));
        assert!(matches!(handler(with_id(third, b"v2;order=9")).await, Ok(Consumed::Applied(()))));
        // Older than the inbox keeps ids: poison, never applied, even when new to the inbox.
        let old = Received {
            created_at: Some(chrono::Utc::now() - chrono::Duration::hours(2)),
            ..with_id(Uuid::from_u128(4), b"v2;order=10")
        };
        assert!(matches!(handler(old).await, Err(HandlerFailure::Poison(_))));
        let young =
            Received { created_at: Some(chrono::Utc::now()), ..with_id(Uuid::from_u128(5), b"v2;order=11") };
        assert!(matches!(handler(young).await, Ok(Consumed::Applied(()))));
        assert_eq!(
            effects.lock().map(|effects| effects.clone()).unwrap_or_default(),
            [(first, 7), (second, 8), (third, 9), (Uuid::from_u128(5), 11)]
        );
        Ok(())
    }

    type StagedTx = crate::inbox::memory::StagedTx<u32>;

    /// The "database" of the transactional tests: the inbox's ids, the committed effects, and how
    /// many transactions ended each way.
    #[derive(Default)]
    struct StagedDb {
        inbox: Arc<SetInbox>,
        effects: std::sync::Mutex<Vec<u32>>,
        ended: std::sync::Mutex<(usize, usize)>,
    }

    impl Transactions for Arc<StagedDb> {
        type Tx = StagedTx;

        async fn begin(&self) -> Result<StagedTx> {
            Ok(StagedTx::default())
        }

        async fn commit(&self, mut tx: StagedTx) -> Result<()> {
            if let (Ok(mut effects), Ok(mut ended)) = (self.effects.lock(), self.ended.lock()) {
                effects.append(&mut tx.effects);
                ended.0 += 1;
            }
            self.inbox.commit(tx);
            Ok(())
        }

        async fn rollback(&self, _tx: StagedTx) -> Result<()> {
            if let Ok(mut ended) = self.ended.lock() {
                ended.1 += 1;
            }
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Declined;

    impl fmt::Display for Declined {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("card declined")
        }
    }

    impl std::error::Error for Declined {}

    #[tokio::test]
    async fn on_in_commits_the_effect_with_the_id_and_rolls_back_a_duplicate_a_failure_and_an_old_event()
    -> Result<()> {
        let db = Arc::new(StagedDb::default());
        let inbox =
            Inbox::new("billing", Arc::clone(&db.inbox) as Arc<dyn crate::InboxDao>, Arc::clone(&db.inbox))
                .with_retention(std::time::Duration::from_secs(3_600));
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handlers: Handlers<&'static str> = {
            let runs = Arc::clone(&runs);
            Handlers::new().on_in(
                "order-created",
                inbox,
                Arc::clone(&db),
                move |tx: &mut StagedTx, event: Received<Order, &'static str>| {
                    let runs = Arc::clone(&runs);
                    Box::pin(async move {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tx.effects.push(event.payload.order);
                        if event.payload.order == 13 {
                            return Err(Declined.into());
                        }
                        if event.payload.order == 99 {
                            return Err(Error::permanent("order 99 is refused").with_source(Declined).into());
                        }
                        Ok(())
                    })
                },
            )
        };
        let handler = handlers
            .get("order-created")
            .ok_or_else(|| Error::new(ErrorKind::Config, "the handler is missing"))?;
        let with_id = |id: u128, payload: &[u8]| Received { id: Uuid::from_u128(id), ..raw(payload) };
        let ended = || db.ended.lock().map(|ended| *ended).unwrap_or_default();

        assert!(matches!(handler(with_id(1, b"{\"order\":7}")).await, Ok(Consumed::Applied(()))));
        assert_eq!(ended(), (1, 0), "committed");
        assert!(db.inbox.has("billing", Uuid::from_u128(1)), "the id committed with the effect");
        assert!(matches!(handler(with_id(1, b"{\"order\":7}")).await, Ok(Consumed::Duplicate)));
        assert_eq!(ended(), (1, 1), "a duplicate is rolled back");

        let failed = handler(with_id(2, b"{\"order\":13}")).await;
        let Err(HandlerFailure::Failed(error)) = &failed else {
            return Err(Error::new(ErrorKind::Other, format!("not a retryable failure: {failed:?}")));
        };
        let text = error.to_string();
        assert!(text.contains("card declined") && text.contains(&Uuid::from_u128(2).to_string()), "{text}");
        let source = std::error::Error::source(error).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("card declined"), "the handler's own error is the source");
        assert_eq!(ended(), (1, 2), "a failure is rolled back");
        assert!(!db.inbox.has("billing", Uuid::from_u128(2)), "so its id is not recorded");

        let old = Received {
            created_at: Some(chrono::Utc::now() - chrono::Duration::hours(2)),
            ..with_id(3, b"{\"order\":8}")
        };
        assert!(matches!(handler(old).await, Err(HandlerFailure::Poison(_))), "unknown and too old: poison");
        let known_old = Received {
            created_at: Some(chrono::Utc::now() - chrono::Duration::hours(2)),
            ..with_id(1, b"{\"order\":7}")
        };
        assert!(matches!(handler(known_old).await, Ok(Consumed::Duplicate)), "known: still a duplicate");
        assert!(matches!(handler(with_id(4, b"nonsense")).await, Err(HandlerFailure::Poison(_))));
        // An oncebox error keeps its kind: a permanent one is given up by the pipeline at once.
        let refused = handler(with_id(5, b"{\"order\":99}")).await;
        let Err(HandlerFailure::Failed(error)) = &refused else {
            return Err(Error::new(ErrorKind::Other, format!("not a failure: {refused:?}")));
        };
        assert_eq!(error.kind(), ErrorKind::Permanent, "{error}");
        assert_eq!(ended(), (1, 5), "rolled back too");

        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3, "the handler ran for the new ids only");
        assert_eq!(db.effects.lock().map(|effects| effects.clone()).unwrap_or_default(), [7]);
        Ok(())
    }

    #[tokio::test]
    async fn a_handler_gets_its_type_and_a_failure_is_retried_not_poison() -> Result<()> {
        let handlers: Handlers<&'static str> =
            Handlers::new().on("order-created", |event: Received<Order, &'static str>| async move {
                if event.payload.order == 7 {
                    Ok(Consumed::Applied(()))
                } else {
                    Err(Error::new(ErrorKind::Database, "effect failed"))
                }
            });
        assert!(handlers.get("order-cancelled").is_none());
        let handler = handlers
            .get("order-created")
            .ok_or_else(|| Error::new(ErrorKind::Config, "the handler is missing"))?;
        assert!(matches!(handler(raw(b"{\"order\":7}")).await, Ok(Consumed::Applied(()))));
        assert!(matches!(handler(raw(b"{\"order\":8}")).await, Err(HandlerFailure::Failed(_))));
        assert!(matches!(handler(raw(b"[]")).await, Err(HandlerFailure::Poison(_))));
        Ok(())
    }
}
