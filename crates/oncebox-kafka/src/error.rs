//! rdkafka errors mapped to [`oncebox_core::Error`] at the crate boundary.

use oncebox_core::{Error, ErrorKind};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::config::shows_value;

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

/// A client that could not be created from `config`: the message names the refused property but
/// never shows a value that might be a credential. rdkafka's own `Display` and `Debug` of a
/// refused property print its value (e.g. `ssl.key.password` on a build without OpenSSL), so the
/// rdkafka error is not kept as the source, and librdkafka's text is scrubbed of every value not
/// on the allow-list of [`shows_value`].
pub(crate) fn creation_error(what: &str, config: &rdkafka::ClientConfig, error: KafkaError) -> Error {
    let hidden: Vec<&str> = config
        .config_map()
        .into_iter()
        .filter(|(key, value)| !shows_value(key) && !value.is_empty())
        .map(|(_, value)| value)
        .collect();
    let problem = match &error {
        KafkaError::ClientConfig(_, description, key, value) => {
            let mut hidden = hidden;
            if !shows_value(key) && !value.is_empty() {
                hidden.push(value);
            }
            format!("property '{key}' was refused: {}", scrubbed(description, hidden))
        }
        other => scrubbed(&other.to_string(), hidden),
    };
    Error::config(format!("kafka.{what}"), problem)
}

/// Shortest piece of a hidden value that is masked where it appears on its own: librdkafka
/// sometimes quotes only part of a value (`Unrecognized sasl.oauthbearer.config beginning at: …`).
/// A hidden value shorter than this is masked only whole.
const MIN_MASKED_FRAGMENT: usize = 6;

/// `text` with every piece of a `hidden` value (the whole value, or a run of at least
/// [`MIN_MASKED_FRAGMENT`] characters of it) replaced by `***`.
fn scrubbed(text: &str, hidden: Vec<&str>) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut masked = vec![false; chars.len()];
    for value in hidden {
        let value: Vec<char> = value.chars().collect();
        let shortest = value.len().min(MIN_MASKED_FRAGMENT);
        for start in 0..chars.len() {
            let longest = (0..value.len())
                .map(|offset| chars[start..].iter().zip(&value[offset..]).take_while(|(a, b)| a == b).count())
                .max()
                .unwrap_or(0);
            if longest >= shortest {
                masked[start..start + longest].iter_mut().for_each(|mask| *mask = true);
            }
        }
    }
    let mut out = String::with_capacity(text.len());
    for (index, character) in chars.iter().enumerate() {
        match (masked[index], index > 0 && masked[index - 1]) {
            (true, false) => out.push_str("***"),
            (true, true) => {}
            (false, _) => out.push(*character),
        }
    }
    out
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
    fn a_creation_error_names_the_property_but_never_its_value() {
        use rdkafka::types::RDKafkaConfRes;
        let refused = KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"hunter2-4711\" for configuration property \"sasl.password\"".to_owned(),
            "sasl.password".to_owned(),
            "hunter2-4711".to_owned(),
        );
        let error = creation_error("producer", &rdkafka::ClientConfig::new(), refused);
        let text = format!("{error} | {error:?} | {:?}", std::error::Error::source(&error));
        assert!(text.contains("sasl.password") && !text.contains("4711"), "{text}");

        let mut config = rdkafka::ClientConfig::new();
        config.set("sasl.oauthbearer.config", "principal=admin token=tok-4711").set("linger.ms", "5");
        let failed = KafkaError::ClientCreation(
            "Unrecognized sasl.oauthbearer.config beginning at: token=tok-4711".to_owned(),
        );
        let error = creation_error("producer", &config, failed);
        let text = format!("{error} | {error:?} | {:?}", std::error::Error::source(&error));
        assert!(text.contains("sasl.oauthbearer.config") && !text.contains("4711"), "{text}");
    }

    #[test]
    fn a_fenced_producer_is_replaced_and_a_timeout_is_not() {
        assert!(needs_new_producer(&KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced)));
        assert!(needs_new_producer(&KafkaError::MessageProduction(RDKafkaErrorCode::Fatal)));
        assert!(!needs_new_producer(&KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut)));
    }
}
