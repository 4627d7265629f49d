//! The transport contract: deliver a batch and report one result per message.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::event::OutboundMessage;

/// A delivery failure. [`Error::is_temporary`] tells whether the broker may accept the message
/// later; both kinds are retried up to `max-retries`, then the event is FAILED.
pub type SendError = Error;

/// Delivers outbox messages to a broker.
#[async_trait]
pub trait Sender: Send + Sync {
    /// Sends `batch` and returns one result per message, in the same order. `Ok` only after the
    /// broker acknowledged the message (Kafka delivery report with acks=all, RabbitMQ confirm).
    /// Senders should pipeline the batch rather than wait for each message in turn.
    async fn send(&self, batch: &[OutboundMessage]) -> Vec<Result<(), SendError>>;

    /// Waits for anything still buffered, for graceful shutdown.
    async fn flush(&self, _timeout: Duration) -> Result<()> {
        Ok(())
    }
}

/// The results of a batch whose deadline has passed: every message without an answer gets a
/// temporary `Timeout` error naming it and `timeout`, so it is retried, never counted as
/// delivered. `results[i]` belongs to `batch[i]`; `unanswered` says what did not happen
/// ("acknowledged", "confirmed").
pub fn unanswered_as_timeouts(
    results: Vec<Option<Result<(), SendError>>>,
    batch: &[OutboundMessage],
    timeout: Duration,
    unanswered: &str,
) -> Vec<Result<(), SendError>> {
    results
        .into_iter()
        .zip(batch)
        .map(|(result, message)| {
            result.unwrap_or_else(|| {
                Err(Error::temporary(
                    ErrorKind::Timeout,
                    format!(
                        "message {} was not {unanswered} within the emergency timeout of {timeout:?}",
                        message.id
                    ),
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(n: u128) -> OutboundMessage {
        OutboundMessage {
            id: uuid::Uuid::from_u128(n),
            event_type: "e".into(),
            topic: "t".into(),
            key: n.to_string(),
            payload: "{}".into(),
            payload_type: "P".into(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn only_unanswered_messages_become_temporary_timeouts_naming_the_message() {
        let batch = [message(1), message(2), message(3)];
        let refused = Error::new(ErrorKind::Broker, "refused");
        let results = unanswered_as_timeouts(
            vec![Some(Ok(())), None, Some(Err(refused))],
            &batch,
            Duration::from_secs(5),
            "acknowledged",
        );
        assert_eq!(results.len(), 3);
        assert!(results[0].is_ok());
        let timed_out = results[1].as_ref().err().map(|e| (e.is_temporary(), e.kind(), e.to_string()));
        let (temporary, kind, text) = timed_out.expect("message 2 must fail");
        assert!(temporary);
        assert_eq!(kind, ErrorKind::Timeout);
        assert!(text.contains(&batch[1].id.to_string()) && text.contains("5s"), "{text}");
        assert!(results[2].as_ref().is_err_and(|e| e.kind() == ErrorKind::Broker && !e.is_temporary()));
    }
}
