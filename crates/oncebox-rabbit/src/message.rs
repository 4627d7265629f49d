//! The oncebox wire format of an AMQP message: the properties and `oncebox_*` headers the sender
//! writes, and how the listener reads a delivery back.

use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use oncebox_core::consume::{EventHeaders, Received};
use oncebox_core::{Error, ErrorKind, OutboundMessage, Result};

/// AMQP delivery mode 2: the broker writes the message to disk in durable queues.
const PERSISTENT: u8 = 2;
const CONTENT_TYPE: &str = "application/json";

/// The pieces of a message that must be valid AMQP short strings, checked before publishing so a
/// bad message fails alone.
pub(crate) struct Prepared {
    pub(crate) exchange: ShortString,
    pub(crate) routing_key: ShortString,
    pub(crate) properties: BasicProperties,
}

fn short(what: &str, message: &OutboundMessage, value: &str) -> Result<ShortString> {
    ShortString::try_new(value).map_err(|error| {
        Error::new(ErrorKind::InvalidInput, format!("{what} of message {} is too long for AMQP", message.id))
            .with_source(error)
    })
}

pub(crate) fn prepare(message: &OutboundMessage) -> Result<Prepared> {
    let mut headers = FieldTable::default();
    for (name, value) in message.wire_headers() {
        headers
            .insert(short("a header name", message, &name)?, AMQPValue::LongString(LongString::from(value)));
    }
    let timestamp = u64::try_from(message.created_at.timestamp()).unwrap_or(0);
    let properties = BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_content_type(ShortString::from(CONTENT_TYPE))
        .with_message_id(short("the id", message, &message.id.to_string())?)
        .with_timestamp(timestamp)
        .with_type(short("the payload type", message, &message.payload_type)?)
        .with_headers(headers);
    Ok(Prepared {
        exchange: short("the exchange (topic)", message, &message.topic)?,
        routing_key: short("the routing key (event type)", message, &message.event_type)?,
        properties,
    })
}

/// A broker delivery count (`x-delivery-count`) above which a message on a queue without a known
/// dead-letter exchange is logged at ERROR: a quorum queue's `delivery-limit` (20 by default on
/// RabbitMQ 4) drops the message once its count reaches the limit.
const DELIVERY_COUNT_WARNING: u64 = 10;

/// An event as a handler receives it: the decoded `oncebox_*` headers, where it came from
/// ([`RabbitSource`]) and the typed payload. Without an `oncebox_event_type` header the event type
/// is the routing key.
pub type RabbitEvent<T> = Received<T, RabbitSource>;

/// Where a delivery came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitSource {
    /// The exchange the message was published to.
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// Whether the broker delivered this message before.
    pub redelivered: bool,
}

/// `exchange 'orders' routing key 'order-placed'`: what a durable inbox stores as the source.
impl std::fmt::Display for RabbitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exchange '{}' routing key '{}'", self.exchange, self.routing_key)
    }
}

fn header_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        AMQPValue::ShortString(text) => Some(text.as_str().to_owned()),
        _ => None,
    }
}

fn header_number(value: &AMQPValue) -> Option<u64> {
    match value {
        AMQPValue::LongLongInt(number) => u64::try_from(*number).ok(),
        AMQPValue::LongInt(number) => u64::try_from(*number).ok(),
        AMQPValue::LongUInt(number) => Some(u64::from(*number)),
        AMQPValue::ShortInt(number) => u64::try_from(*number).ok(),
        AMQPValue::ShortUInt(number) => Some(u64::from(*number)),
        _ => None,
    }
}

/// Decodes the `oncebox_*` headers of a delivery; a missing or malformed event id is a decode error.
/// The broker's own `x-` headers are left out of the user's headers.
pub fn decode_delivery(delivery: &Delivery) -> Result<RabbitEvent<Vec<u8>>> {
    let place =
        format_args!("the message on '{}' (routing key '{}')", delivery.exchange, delivery.routing_key);
    let texts: Vec<(&str, Option<String>)> = delivery
        .properties
        .headers()
        .iter()
        .flat_map(|table| table.inner().iter())
        .filter(|(name, _)| !name.as_str().starts_with("x-"))
        .map(|(name, value)| (name.as_str(), header_text(value)))
        .collect();
    let headers = EventHeaders::decode(place, texts.iter().map(|(name, value)| (*name, value.as_deref())))?;
    let event_type = headers.event_type.clone().unwrap_or_else(|| delivery.routing_key.as_str().to_owned());
    let source = RabbitSource {
        exchange: delivery.exchange.as_str().to_owned(),
        routing_key: delivery.routing_key.as_str().to_owned(),
        redelivered: delivery.redelivered,
    };
    Ok(headers.into_received(event_type, source, delivery.data.clone()))
}

/// The broker's delivery count of `delivery` when it is above [`DELIVERY_COUNT_WARNING`] on a
/// queue without a known dead-letter exchange, where a delivery limit would drop the message.
pub(crate) fn broker_may_drop(delivery: &Delivery, dead_letters: bool) -> Option<u64> {
    if dead_letters {
        return None;
    }
    let count = delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|table| table.inner().get("x-delivery-count").and_then(header_number))?;
    (count > DELIVERY_COUNT_WARNING).then_some(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::event::{HEADER_EVENT_ID, HEADER_PAYLOAD_TYPE};
    use uuid::Uuid;

    fn delivery(headers: &[(&str, &str)]) -> Delivery {
        let mut table = FieldTable::default();
        for (name, value) in headers {
            table.insert(ShortString::from(*name), AMQPValue::LongString(LongString::from(*value)));
        }
        let mut delivery = Delivery::mock(
            1,
            ShortString::from("orders"),
            ShortString::from("order-created"),
            true,
            b"{}".to_vec(),
        );
        delivery.properties = BasicProperties::default().with_headers(table);
        delivery
    }

    #[test]
    fn headers_decode_into_the_event() -> Result<()> {
        let id = Uuid::now_v7();
        let text = id.to_string();
        let event = decode_delivery(&delivery(&[
            (HEADER_EVENT_ID, &text),
            (HEADER_PAYLOAD_TYPE, "OrderCreated"),
            ("traceparent", "00-abc-def-01"),
        ]))?;
        assert_eq!(event.id, id);
        assert_eq!(event.event_type, "order-created", "the routing key stands in for a missing type header");
        assert_eq!(event.payload_type.as_deref(), Some("OrderCreated"));
        assert_eq!(event.headers.get("traceparent").map(String::as_str), Some("00-abc-def-01"));
        assert!(!event.headers.contains_key(HEADER_EVENT_ID));
        assert!(event.source.redelivered);
        Ok(())
    }

    #[test]
    fn a_missing_or_malformed_event_id_is_a_decode_error_naming_the_header() {
        for headers in [vec![], vec![(HEADER_EVENT_ID, "42")]] {
            let error = decode_delivery(&delivery(&headers)).err();
            assert!(
                error
                    .as_ref()
                    .is_some_and(|error| error.kind() == ErrorKind::Decode
                        && error.to_string().contains(HEADER_EVENT_ID)),
                "{error:?}"
            );
        }
    }

    fn counted(count: Option<i64>) -> Delivery {
        let mut delivery = delivery(&[]);
        if let Some(count) = count {
            let mut table = FieldTable::default();
            table.insert(ShortString::from("x-delivery-count"), AMQPValue::LongLongInt(count));
            delivery.properties = BasicProperties::default().with_headers(table);
        }
        delivery
    }

    #[test]
    fn a_high_delivery_count_is_flagged_only_without_a_dead_letter_exchange() {
        let limit = i64::try_from(DELIVERY_COUNT_WARNING).unwrap_or(i64::MAX);
        assert_eq!(broker_may_drop(&counted(None), false), None, "classic queues keep no count");
        assert_eq!(broker_may_drop(&counted(Some(limit)), false), None);
        assert_eq!(broker_may_drop(&counted(Some(limit + 1)), false), Some(DELIVERY_COUNT_WARNING + 1));
        assert_eq!(broker_may_drop(&counted(Some(19)), false), Some(19));
        assert_eq!(broker_may_drop(&counted(Some(19)), true), None, "a dead-letter exchange keeps it");
    }
}
