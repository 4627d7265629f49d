//! The oncebox wire format of a Kafka record: the `oncebox_*` headers the sender writes, how the
//! listener reads them back, and the headers a dead-lettered record gains.

use oncebox_core::consume::{EventHeaders, Received};
use oncebox_core::event::HEADER_EVENT_TYPE;
use oncebox_core::{Error, ErrorKind, OutboundMessage, Result};
use rdkafka::message::{Header, Headers as _, Message, OwnedHeaders, OwnedMessage};

/// Header naming why a record was dead-lettered.
pub const HEADER_DEAD_LETTER_REASON: &str = "oncebox_dead_letter_reason";
/// Header naming the topic, partition and offset a dead-lettered record came from (`topic/partition/offset`).
pub const HEADER_DEAD_LETTER_SOURCE: &str = "oncebox_dead_letter_source";
/// A record as a handler receives it: the decoded `oncebox_*` headers, where it came from
/// ([`KafkaSource`]) and the typed payload.
pub type KafkaEvent<T> = Received<T, KafkaSource>;

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSource {
    /// The record key, when it is UTF-8.
    pub key: Option<String>,
    /// Topic of the record.
    pub topic: String,
    /// Partition of the record.
    pub partition: i32,
    /// Offset of the record.
    pub offset: i64,
}

/// `orders/2@41` (topic, partition, offset): what a durable inbox stores as the source.
impl std::fmt::Display for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

/// The headers of `message` as Kafka record headers, values as raw UTF-8.
pub(crate) fn record_headers(message: &OutboundMessage) -> OwnedHeaders {
    message.wire_headers().iter().fold(OwnedHeaders::new(), |headers, (name, value)| {
        headers.insert(Header { key: name, value: Some(value.as_bytes()) })
    })
}

/// Decodes the `oncebox_*` headers of a record. A missing, non-UTF-8 or non-UUID
/// `oncebox_event_id`, or a missing `oncebox_event_type`, is a [`ErrorKind::Decode`] error naming
/// the header.
pub fn decode_record(record: &OwnedMessage) -> Result<KafkaEvent<Vec<u8>>> {
    let place = format_args!("record {}/{}@{}", record.topic(), record.partition(), record.offset());
    let entries = record
        .headers()
        .into_iter()
        .flat_map(|list| list.iter())
        .map(|Header { key, value }| (key, value.and_then(|bytes| std::str::from_utf8(bytes).ok())));
    let headers = EventHeaders::decode(place, entries)?;
    let Some(event_type) = headers.event_type.clone() else {
        return Err(Error::new(
            ErrorKind::Decode,
            format!("{place} (event {}) has no {HEADER_EVENT_TYPE} header", headers.id),
        ));
    };
    let source = KafkaSource {
        key: record.key().and_then(|bytes| std::str::from_utf8(bytes).ok()).map(str::to_owned),
        topic: record.topic().to_owned(),
        partition: record.partition(),
        offset: record.offset(),
    };
    let payload = record.payload().map(<[u8]>::to_vec).unwrap_or_default();
    Ok(headers.into_received(event_type, source, payload))
}

/// The headers of `record` dead-lettered for `reason`: its own, plus the reason and where it came
/// from (`topic/partition/offset`, also returned for messages).
pub(crate) fn dead_letter_headers(record: &OwnedMessage, reason: &str) -> (OwnedHeaders, String) {
    let source = format!("{}/{}/{}", record.topic(), record.partition(), record.offset());
    let headers = record
        .headers()
        .map_or_else(OwnedHeaders::new, OwnedHeaders::clone)
        .insert(Header { key: HEADER_DEAD_LETTER_REASON, value: Some(reason.as_bytes()) })
        .insert(Header { key: HEADER_DEAD_LETTER_SOURCE, value: Some(source.as_bytes()) });
    (headers, source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::event::{HEADER_EVENT_ID, HEADER_PAYLOAD_TYPE};
    use rdkafka::Timestamp;
    use uuid::Uuid;

    fn record(headers: &[(&str, &[u8])]) -> OwnedMessage {
        let owned = headers
            .iter()
            .fold(OwnedHeaders::new(), |list, (key, value)| list.insert(Header { key, value: Some(*value) }));
        OwnedMessage::new(
            Some(b"{}".to_vec()),
            Some(b"customer-7".to_vec()),
            "orders".to_owned(),
            Timestamp::NotAvailable,
            2,
            41,
            Some(owned),
        )
    }

    #[test]
    fn headers_decode_into_the_event() -> Result<()> {
        let id = Uuid::now_v7();
        let text = id.to_string();
        let event = decode_record(&record(&[
            (HEADER_EVENT_ID, text.as_bytes()),
            (HEADER_EVENT_TYPE, b"order-created"),
            (HEADER_PAYLOAD_TYPE, b"OrderCreated"),
            ("traceparent", b"00-abc-def-01"),
            ("binary", &[0xff, 0xfe]),
        ]))?;
        assert_eq!(event.id, id);
        assert_eq!(event.event_type, "order-created");
        assert_eq!(event.payload_type.as_deref(), Some("OrderCreated"));
        assert_eq!(event.source.key.as_deref(), Some("customer-7"));
        assert_eq!((event.source.partition, event.source.offset), (2, 41));
        assert_eq!(event.headers.get("traceparent").map(String::as_str), Some("00-abc-def-01"));
        assert!(!event.headers.contains_key("binary"), "non-UTF-8 header values are left out");
        assert!(!event.headers.contains_key(HEADER_EVENT_ID));
        Ok(())
    }

    #[test]
    fn a_missing_or_malformed_id_or_type_is_a_decode_error_naming_the_header() {
        let id = Uuid::now_v7().to_string();
        type Case<'a> = (Vec<(&'a str, &'a [u8])>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (vec![(HEADER_EVENT_TYPE, b"t")], HEADER_EVENT_ID),
            (vec![(HEADER_EVENT_ID, b"42"), (HEADER_EVENT_TYPE, b"t")], HEADER_EVENT_ID),
            (vec![(HEADER_EVENT_ID, &[0xff]), (HEADER_EVENT_TYPE, b"t")], HEADER_EVENT_ID),
            (vec![(HEADER_EVENT_ID, id.as_bytes())], HEADER_EVENT_TYPE),
        ];
        for (headers, named) in cases {
            let error = decode_record(&record(&headers)).err();
            assert!(
                error.as_ref().is_some_and(
                    |error| error.kind() == ErrorKind::Decode && error.to_string().contains(named)
                ),
                "{error:?}"
            );
        }
    }
}
