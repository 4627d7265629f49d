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

    /// Ties the event to a business flow: the `correlation_id` header, which a durable inbox keeps
    /// in its own column ([`CORRELATION_ID_HEADER`](crate::stored::CORRELATION_ID_HEADER)). Without
    /// it, a durable inbox takes the trace id of the event's `traceparent` instead.
    #[must_use]
    pub fn correlation_id(self, id: impl Into<String>) -> Self {
        self.header(crate::stored::CORRELATION_ID_HEADER, id)
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
        let mut headers = meta.headers;
        crate::trace::capture_current(&mut headers);
        Ok(NewOutboxEvent {
            id: self.ids.generate(),
            event_type: event_type.to_owned(),
            payload: serialized.payload,
            payload_type: serialized.payload_type,
            headers,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use std::collections::BTreeMap;

    /// A "transaction" that collects the rows written into it.
    struct CollectingWriter;

    impl OutboxWriter<&mut Vec<NewOutboxEvent>> for CollectingWriter {
        async fn write(&self, tx: &mut Vec<NewOutboxEvent>, events: &[NewOutboxEvent]) -> Result<()> {
            tx.extend_from_slice(events);
            Ok(())
        }
    }

    fn publisher() -> Publisher<CollectingWriter> {
        Publisher::new(CollectingWriter, ["order-created".to_owned()])
    }

    #[derive(serde::Serialize)]
    struct OrderCreated {
        id: u32,
    }

    #[tokio::test]
    async fn publish_writes_a_serialized_row_with_a_fresh_id_and_metadata() {
        let mut tx = Vec::new();
        let meta = EventMeta::keyed("customer-7").header("traceparent", "00-1-2-01");
        let id = publisher().publish_with(&mut tx, "order-created", &OrderCreated { id: 1 }, meta).await;
        let id = id.expect("publishing succeeds");
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].id, id);
        assert_eq!(tx[0].payload, r#"{"id":1}"#);
        assert!(tx[0].payload_type.ends_with("OrderCreated"));
        assert_eq!(tx[0].partition_key.as_deref(), Some("customer-7"));
        assert_eq!(tx[0].headers.get("traceparent").map(String::as_str), Some("00-1-2-01"));
    }

    #[tokio::test]
    async fn unknown_or_blank_event_types_write_nothing() {
        let mut tx = Vec::new();
        for event_type in ["order-deleted", "  "] {
            let error = publisher().publish(&mut tx, event_type, &OrderCreated { id: 1 }).await.err();
            assert_eq!(error.map(|e| e.kind()), Some(ErrorKind::InvalidInput), "{event_type:?}");
        }
        assert!(tx.is_empty());
    }

    #[tokio::test]
    async fn publish_all_serializes_everything_first_and_writes_once() {
        let mut tx = Vec::new();
        let ids = publisher()
            .publish_all(&mut tx, "order-created", &[OrderCreated { id: 1 }, OrderCreated { id: 2 }])
            .await
            .expect("publishing succeeds");
        assert_eq!(ids, tx.iter().map(|e| e.id).collect::<Vec<_>>());
        assert!(ids[0] < ids[1], "v7 ids keep publish order");

        let mut bad = BTreeMap::new();
        bad.insert((1, 2), 3);
        let mut untouched = Vec::new();
        let payloads = vec![BTreeMap::new(), bad];
        let error = publisher().publish_all(&mut untouched, "order-created", &payloads).await.err();
        let message = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("payload 1 of 2"), "{message}");
        assert!(untouched.is_empty(), "one bad payload writes nothing");
        let none = publisher().publish_all::<_, OrderCreated>(&mut untouched, "order-created", &[]).await;
        assert!(none.is_ok_and(|ids| ids.is_empty()));
    }
}
