//! rdkafka errors mapped to [`oncebox_core::Error`] at the crate boundary.

use oncebox_core::{Error, ErrorKind};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Codes that repeat for the same record however often it is sent: it is too large, malformed,
/// or addressed to a topic that is invalid or forbidden. Everything else (timeouts, lost
/// connections, leader changes, a full queue, a missing topic that may yet be created) may clear up.
fn is_permanent_code(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidArgument
    )
}

/// Whether the error can be fixed only by a new producer (librdkafka's fatal state, e.g. the
/// idempotent producer's "Inconsistent state").
pub(crate) fn is_fatal(error: &KafkaError) -> bool {
    matches!(error, KafkaError::MessageConsumptionFatal(_))
        || error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal)
}

/// Whether a produce error means this producer will never be accepted again, so the sender must
/// replace it: librdkafka's fatal state, or the broker refusing the producer's id or epoch. tansu
/// 0.6 answers `ProducerFenced` to every produce after librdkafka bumped the idempotent
/// producer's epoch (which it does after a record timed out), where Apache Kafka accepts the new
/// epoch; without a new producer, and so a new producer id, no record would be delivered again.
pub(crate) fn needs_new_producer(error: &KafkaError) -> bool {
    is_fatal(error)
        || error.rdkafka_error_code().is_some_and(|code| {
            matches!(
                code,
                RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
                    | RDKafkaErrorCode::UnknownProducerId
                    | RDKafkaErrorCode::InvalidProducerIdMapping
            )
        })
}

/// A producer error with `context`: permanent for the codes of [`is_permanent_code`] and for
/// configuration errors, temporary otherwise; `error` becomes the source.
pub(crate) fn produce_error(context: impl Into<String>, error: KafkaError) -> Error {
    let context = context.into();
    let permanent = match &error {
        KafkaError::ClientConfig(..) | KafkaError::ClientCreation(_) => true,
        other => other.rdkafka_error_code().is_some_and(is_permanent_code),
    };
    let kind = match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageTimedOut | RDKafkaErrorCode::RequestTimedOut) => ErrorKind::Timeout,
        _ => ErrorKind::Broker,
    };
    let mapped = if permanent { Error::new(kind, context) } else { Error::temporary(kind, context) };
    mapped.with_source(error)
}

/// A consumer-side error (subscribing, committing, pausing) with `context`; temporary, since the
/// listener keeps running and tries again.
pub(crate) fn consumer_error(context: impl Into<String>, error: KafkaError) -> Error {
    Error::temporary(ErrorKind::Broker, context).with_source(error)
}

/// A client that could not be created from its configuration: the message names the property.
pub(crate) fn creation_error(what: &str, error: KafkaError) -> Error {
    Error::config(format!("kafka.{what}"), error.to_string()).with_source(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_and_topic_problems_are_permanent_and_timeouts_temporary() {
        let too_large =
            produce_error("x", KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge));
        assert!(!too_large.is_temporary());
        assert_eq!(too_large.kind(), ErrorKind::Broker);
        let timed_out = produce_error("x", KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut));
        assert!(timed_out.is_temporary());
        assert_eq!(timed_out.kind(), ErrorKind::Timeout);
        let down = produce_error("x", KafkaError::MessageProduction(RDKafkaErrorCode::AllBrokersDown));
        assert!(down.is_temporary());
        assert!(is_fatal(&KafkaError::MessageProduction(RDKafkaErrorCode::Fatal)));
        assert!(!is_fatal(&KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)));
    }

    #[test]
    fn a_fenced_producer_is_replaced_and_a_timeout_is_not() {
        assert!(needs_new_producer(&KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced)));
        assert!(needs_new_producer(&KafkaError::MessageProduction(RDKafkaErrorCode::Fatal)));
        assert!(!needs_new_producer(&KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)));
    }
}
