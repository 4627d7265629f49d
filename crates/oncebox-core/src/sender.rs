//! The transport contract: deliver a batch and report one result per message.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
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
