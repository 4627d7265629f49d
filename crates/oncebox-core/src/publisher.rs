//! The publisher: validates, serializes and writes events inside the caller's transaction.

use std::collections::BTreeSet;
use std::sync::Arc;

use uuid::Uuid;

use crate::dao::OutboxWriter;
use crate::error::{Error, Result};
use crate::event::{Headers, NewOutboxEvent};
use crate::serializer::{JsonSerializer, Serializer, UuidGenerator, UuidV7Generator};

/// Optional per-event metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventMeta {
    /// Kafka key / routing hint (events with one key keep their order on one partition).
    pub partition_key: Option<String>,
    /// Headers stored with the event and sent with it (e.g. `traceparent`, a correlation id).
    pub headers: Headers,
}

impl EventMeta {
    /// Metadata with a partition key.
    pub fn keyed(partition_key: impl Into<String>) -> Self {
        Self { partition_key: Some(partition_key.into()), headers: Headers::new() }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

/// Writes events into the outbox inside the caller's transaction.
///
/// `W` is the dialect's writer; the transaction type it accepts decides what `publish` takes, so
/// publishing outside a transaction does not compile.
pub struct Publisher<W, S = JsonSerializer> {
    writer: W,
    serializer: S,
    ids: Arc<dyn UuidGenerator>,
    event_types: Arc<BTreeSet<String>>,
}

impl<W: Clone, S: Clone> Clone for Publisher<W, S> {
    fn clone(&self) -> Self {
        Self {
            writer: self.writer.clone(),
            serializer: self.serializer.clone(),
            ids: self.ids.clone(),
            event_types: self.event_types.clone(),
        }
    }
}

impl<W> Publisher<W, JsonSerializer> {
    /// A JSON publisher for the configured `event_types`, with UUIDv7 ids.
    pub fn new(writer: W, event_types: impl IntoIterator<Item = String>) -> Self {
        Self {
            writer,
            serializer: JsonSerializer,
            ids: Arc::new(UuidV7Generator),
            event_types: Arc::new(event_types.into_iter().collect()),
        }
    }
}

impl<W, S> Publisher<W, S> {
    /// The same publisher with another serializer.
    pub fn with_serializer<S2>(self, serializer: S2) -> Publisher<W, S2> {
        Publisher { writer: self.writer, serializer, ids: self.ids, event_types: self.event_types }
    }

    /// The same publisher with another id generator.
    #[must_use]
    pub fn with_uuid_generator(mut self, ids: Arc<dyn UuidGenerator>) -> Self {
        self.ids = ids;
        self
    }

    fn check_event_type(&self, event_type: &str) -> Result<()> {
        if event_type.trim().is_empty() {
            return Err(Error::invalid_input("event type must not be blank"));
        }
        if !self.event_types.contains(event_type) {
            return Err(Error::invalid_input(format!(
                "event type '{event_type}' is not configured under oncebox.outbox.events; nothing was written"
            )));
        }
        Ok(())
    }

    fn draft<T: ?Sized>(&self, event_type: &str, payload: &T, meta: EventMeta) -> Result<NewOutboxEvent>
    where
        S: Serializer<T>,
    {
        let serialized = self.serializer.serialize(payload)?;
        Ok(NewOutboxEvent {
            id: self.ids.generate(),
            event_type: event_type.to_owned(),
            payload: serialized.payload,
            payload_type: serialized.payload_type,
            headers: meta.headers,
            partition_key: meta.partition_key,
        })
    }

    /// Writes one event into `tx`; returns its id. The event is delivered only if `tx` commits.
    pub async fn publish<Tx, T>(&self, tx: Tx, event_type: &str, payload: &T) -> Result<Uuid>
    where
        W: OutboxWriter<Tx>,
        S: Serializer<T>,
        T: ?Sized,
    {
        self.publish_with(tx, event_type, payload, EventMeta::default()).await
    }

    /// Writes one event with a partition key and headers.
    pub async fn publish_with<Tx, T>(
        &self,
        tx: Tx,
        event_type: &str,
        payload: &T,
        meta: EventMeta,
    ) -> Result<Uuid>
    where
        W: OutboxWriter<Tx>,
        S: Serializer<T>,
        T: ?Sized,
    {
        self.check_event_type(event_type)?;
        let event = self.draft(event_type, payload, meta)?;
        let id = event.id;
        self.writer.write(tx, std::slice::from_ref(&event)).await?;
        Ok(id)
    }

    /// Writes one event per payload with one statement; returns the ids in order. Every payload is
    /// serialized before anything is written, so one bad payload writes nothing.
    pub async fn publish_all<Tx, T>(&self, tx: Tx, event_type: &str, payloads: &[T]) -> Result<Vec<Uuid>>
    where
        W: OutboxWriter<Tx>,
        S: Serializer<T>,
    {
        self.check_event_type(event_type)?;
        if payloads.is_empty() {
            return Ok(Vec::new());
        }
        let events = payloads
            .iter()
            .enumerate()
            .map(|(index, payload)| {
                self.draft(event_type, payload, EventMeta::default())
                    .map_err(|error| error.context(format!("payload {index} of {}", payloads.len())))
            })
            .collect::<Result<Vec<_>>>()?;
        self.writer.write(tx, &events).await?;
        Ok(events.iter().map(|event| event.id).collect())
    }

    /// Writes events the caller has already built (own ids, payloads and metadata).
    pub async fn publish_prepared<Tx>(&self, tx: Tx, events: &[NewOutboxEvent]) -> Result<()>
    where
        W: OutboxWriter<Tx>,
    {
        for event in events {
            self.check_event_type(&event.event_type)?;
        }
        if events.is_empty() {
            return Ok(());
        }
        self.writer.write(tx, events).await
    }
}
