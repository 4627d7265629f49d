//! Payload serialization and event ids: the pieces users most often replace.
//!
//! A [`Serializer`] turns a payload into the text stored in the outbox row and sent to the broker;
//! the matching [`Deserializer`] turns that text back into the payload on the consuming side
//! ([`Handlers::on_with`](crate::consume::Handlers::on_with)). [`JsonSerializer`] is both, for any
//! `serde` type. A [`UuidGenerator`] hands out the event ids (UUIDv7 by default), which are the
//! inbox's deduplication key end to end.

use serde::Serialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::error::{Error, ErrorKind, Result};

/// A payload turned into storable text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedEvent {
    /// Payload text (JSON by default).
    pub payload: String,
    /// Name of the payload's type, sent as `oncebox_payload_type`.
    pub payload_type: String,
}

/// Turns a typed payload into a [`SerializedEvent`]. Implement it for a format of your own
/// (e.g. `impl<T: prost::Message> Serializer<T> for ProtoText`), together with the matching
/// [`Deserializer`] for the consumers.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot serialize a payload of type `{T}`",
    label = "`{Self}` has no `Serializer<{T}>` impl",
    note = "the JSON serializer needs the payload type to implement `serde::Serialize`",
    note = "a serializer of your own needs `impl Serializer<{T}> for {Self}`"
)]
pub trait Serializer<T: ?Sized>: Send + Sync {
    /// Serializes `value`; a failure is returned to the publish call before anything is written.
    fn serialize(&self, value: &T) -> Result<SerializedEvent>;
}

/// The default serializer: JSON via `serde_json`, payload type = the Rust type name.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonSerializer;

impl<T: Serialize + ?Sized> Serializer<T> for JsonSerializer {
    fn serialize(&self, value: &T) -> Result<SerializedEvent> {
        let payload = serde_json::to_string(value).map_err(|error| {
            Error::new(
                ErrorKind::Serialization,
                format!("cannot serialize {} as JSON", std::any::type_name::<T>()),
            )
            .with_source(error)
        })?;
        Ok(SerializedEvent { payload, payload_type: std::any::type_name::<T>().to_owned() })
    }
}

/// Turns a received payload back into its type: the consuming half of a [`Serializer`].
///
/// `payload` is the message body as the broker delivered it and `payload_type` the
/// `oncebox_payload_type` header ([`SerializedEvent::payload_type`] on the publishing side), when
/// the message has one. An error means the message can never be handled: the listener treats it
/// as a poison message (dead-lettered, or held), never retries it.
///
/// A versioned text format, published with `Publisher::with_serializer` (or the facade builder's
/// `serializer`) and consumed with [`Handlers::on_with`](crate::consume::Handlers::on_with):
///
/// ```
/// use oncebox_core::{Deserializer, Error, ErrorKind, Result, SerializedEvent, Serializer};
///
/// #[derive(Debug, PartialEq)]
/// struct Order { id: u64, cents: u64 }
///
/// /// `v2;id=7;cents=1250`
/// struct OrderV2;
///
/// impl Serializer<Order> for OrderV2 {
///     fn serialize(&self, order: &Order) -> Result<SerializedEvent> {
///         Ok(SerializedEvent {
///             payload: format!("v2;id={};cents={}", order.id, order.cents),
///             payload_type: "order/v2".to_owned(),
///         })
///     }
/// }
///
/// impl Deserializer<Order> for OrderV2 {
///     fn deserialize(&self, payload: &[u8], _payload_type: Option<&str>) -> Result<Order> {
///         let bad = || Error::new(ErrorKind::Serialization, "not a v2 order");
///         let text = std::str::from_utf8(payload).map_err(|_| bad())?;
///         let rest = text.strip_prefix("v2;id=").ok_or_else(bad)?;
///         let (id, cents) = rest.split_once(";cents=").ok_or_else(bad)?;
///         Ok(Order { id: id.parse().map_err(|_| bad())?, cents: cents.parse().map_err(|_| bad())? })
///     }
/// }
///
/// let order = Order { id: 7, cents: 1250 };
/// let stored = OrderV2.serialize(&order)?;
/// assert_eq!(stored.payload, "v2;id=7;cents=1250");
/// let back: Order = OrderV2.deserialize(stored.payload.as_bytes(), Some(&stored.payload_type))?;
/// assert_eq!(back, order);
/// assert!(Deserializer::<Order>::deserialize(&OrderV2, b"v1;7", None).is_err());
/// # Ok::<(), oncebox_core::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot deserialize a payload of type `{T}`",
    label = "`{Self}` has no `Deserializer<{T}>` impl",
    note = "the JSON serializer needs the payload type to implement `serde::de::DeserializeOwned`",
    note = "a deserializer of your own needs `impl Deserializer<{T}> for {Self}`"
)]
pub trait Deserializer<T>: Send + Sync {
    /// Decodes `payload` (whose `oncebox_payload_type` is `payload_type`, when sent) as `T`.
    fn deserialize(&self, payload: &[u8], payload_type: Option<&str>) -> Result<T>;
}

impl<T: DeserializeOwned> Deserializer<T> for JsonSerializer {
    /// Reads `payload` as JSON; the payload type name is not checked, so a consumer's type may
    /// differ from the publisher's as long as the JSON fits it.
    fn deserialize(&self, payload: &[u8], _payload_type: Option<&str>) -> Result<T> {
        serde_json::from_slice(payload).map_err(|error| {
            Error::new(
                ErrorKind::Serialization,
                format!("cannot deserialize {} from JSON", std::any::type_name::<T>()),
            )
            .with_source(error)
        })
    }
}

/// Produces event ids.
pub trait UuidGenerator: Send + Sync {
    /// A new, unique id.
    fn generate(&self) -> Uuid;
}

/// The default generator: UUIDv7, time ordered, so inserts land at the index tail.
#[derive(Debug, Clone, Copy, Default)]
pub struct UuidV7Generator;

impl UuidGenerator for UuidV7Generator {
    fn generate(&self) -> Uuid {
        Uuid::now_v7()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct OrderCreated {
        id: u32,
    }

    #[test]
    fn json_serializer_names_the_type() {
        let serialized = JsonSerializer.serialize(&OrderCreated { id: 7 }).ok();
        let serialized = serialized
            .unwrap_or_else(|| SerializedEvent { payload: String::new(), payload_type: String::new() });
        assert_eq!(serialized.payload, r#"{"id":7}"#);
        assert!(serialized.payload_type.ends_with("OrderCreated"), "{}", serialized.payload_type);
    }

    #[test]
    fn json_serializer_reports_unserializable_payloads() {
        let mut map = BTreeMap::new();
        map.insert((1, 2), "tuple keys are not JSON");
        let error = JsonSerializer.serialize(&map).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.starts_with("serialization error: cannot serialize"), "{error}");
    }

    #[test]
    fn json_deserializer_reads_what_the_serializer_wrote_and_names_the_type_when_it_cannot() {
        let written = JsonSerializer.serialize(&OrderCreated { id: 7 }).map(|event| event.payload);
        let written = written.unwrap_or_default();
        let read: Result<OrderCreated> = JsonSerializer.deserialize(written.as_bytes(), None);
        assert_eq!(read.ok(), Some(OrderCreated { id: 7 }));
        let error = Deserializer::<OrderCreated>::deserialize(&JsonSerializer, b"{\"id\":\"seven\"}", None)
            .err()
            .map(|e| (e.kind(), e.to_string()));
        assert!(
            error.as_ref().is_some_and(|(kind, text)| *kind == ErrorKind::Serialization
                && text.contains("cannot deserialize")
                && text.contains("OrderCreated")),
            "{error:?}"
        );
    }

    #[test]
    fn v7_ids_are_time_ordered() {
        let first = UuidV7Generator.generate();
        let second = UuidV7Generator.generate();
        assert_eq!(first.get_version_num(), 7);
        assert!(first < second);
    }
}
