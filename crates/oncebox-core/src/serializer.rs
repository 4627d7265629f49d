//! Payload serialization and event ids: the two pieces users most often replace.

use serde::Serialize;
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
/// (e.g. `impl<T: prost::Message> Serializer<T> for ProtoText`).
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

    #[derive(Serialize)]
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
    fn v7_ids_are_time_ordered() {
        let first = UuidV7Generator.generate();
        let second = UuidV7Generator.generate();
        assert_eq!(first.get_version_num(), 7);
        assert!(first < second);
    }
}
