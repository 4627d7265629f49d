//! The transport contract: deliver a batch by a deadline and report one result per message.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::config::TransportKind;
use crate::error::{Error, ErrorKind, Result};
use crate::event::OutboundMessage;

/// A delivery failure. [`Error::is_temporary`] tells whether the broker may accept the message
/// later; both kinds are retried up to `max-retries`, then the event is FAILED.
pub type SendError = Error;

/// When the send of one batch must be over: `oncebox.outbox.sender.emergency-timeout` after the
/// send began. The engine owns the setting and hands each send its deadline; a sender stops
/// waiting when it passes and reports the messages still unanswered with
/// [`unanswered_as_timeouts`], so the answers it already has still count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    /// The deadline `timeout` from now. A timeout beyond the clock's range saturates (30 years
    /// ahead, as tokio's own "never") instead of overflowing.
    pub fn after(timeout: Duration) -> Self {
        let now = Instant::now();
        let at =
            now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 24 * 60 * 60));
        Self { at, timeout }
    }

    /// The configured bound the deadline was made from, for messages.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The time left; zero once the deadline has passed.
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// The same deadline `grace` later (saturating), keeping the configured timeout.
    pub(crate) fn later_by(&self, grace: Duration) -> Self {
        Self { at: self.at.checked_add(grace).unwrap_or(self.at), timeout: self.timeout }
    }

    /// Runs `work` until it finishes (`Some`) or the deadline passes (`None`).
    pub async fn bound<F: Future>(&self, work: F) -> Option<F::Output> {
        tokio::time::timeout_at(self.at, work).await.ok()
    }
}

/// Delivers outbox messages to a broker.
#[async_trait]
pub trait Sender: Send + Sync {
    /// Sends `batch` and returns one result per message, in the same order. `Ok` only after the
    /// broker acknowledged the message (Kafka delivery report with acks=all, RabbitMQ confirm).
    /// Senders should pipeline the batch rather than wait for each message in turn, and return by
    /// `deadline` with the unanswered messages as temporary timeouts ([`unanswered_as_timeouts`]);
    /// the engine stops waiting a moment (one second) after the deadline, and then counts the
    /// whole batch as unanswered.
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>>;

    /// Called by [`Engine::start`](crate::Engine::start), once per start and after every other
    /// part was checked, with `oncebox.outbox.sender.emergency-timeout`. A sender whose client
    /// takes a delivery bound at creation (librdkafka's `message.timeout.ms`) adopts it here, so
    /// the client gives a record up about when its batch is settled; an error names the setting
    /// that conflicts with it and stops the start.
    fn adopt_emergency_timeout(&self, _timeout: Duration) -> Result<()> {
        Ok(())
    }

    /// The broker this sender delivers to, for the check against `oncebox.outbox.sender.type`:
    /// a start whose configured type names another transport is refused. `None` (the default)
    /// for senders that are not one of oncebox's transports (custom and test senders), which
    /// pass the check whatever the configuration says.
    fn transport(&self) -> Option<TransportKind> {
        None
    }

    /// Waits for anything still buffered, for graceful shutdown.
    async fn flush(&self, _timeout: Duration) -> Result<()> {
        Ok(())
    }
}

/// The results of a batch whose deadline has passed: every message without an answer gets a
/// temporary `Timeout` error naming it and the emergency timeout, so it is retried, never counted
/// as delivered. `results[i]` belongs to `batch[i]`; `unanswered` says what did not happen
/// ("acknowledged", "confirmed").
pub fn unanswered_as_timeouts(
    results: Vec<Option<Result<(), SendError>>>,
    batch: &[OutboundMessage],
    deadline: &Deadline,
    unanswered: &str,
) -> Vec<Result<(), SendError>> {
    let timeout = deadline.timeout();
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
            &Deadline::after(Duration::from_secs(5)),
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

    /// A sender that is none of oncebox's transports.
    struct Custom;

    #[async_trait]
    impl Sender for Custom {
        async fn send(&self, batch: &[OutboundMessage], _deadline: Deadline) -> Vec<Result<(), SendError>> {
            batch.iter().map(|_| Ok(())).collect()
        }
    }

    #[test]
    fn a_sender_reports_no_transport_unless_it_says_so() {
        assert_eq!(Custom.transport(), None);
        let shared: std::sync::Arc<dyn Sender> = std::sync::Arc::new(Custom);
        assert_eq!(shared.transport(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_bounds_work_and_saturates_beyond_the_clock() {
        let deadline = Deadline::after(Duration::from_secs(2));
        assert_eq!(deadline.bound(async { 7 }).await, Some(7));
        assert_eq!(deadline.bound(std::future::pending::<()>()).await, None);
        assert_eq!(deadline.remaining(), Duration::ZERO);
        let endless = Deadline::after(Duration::MAX);
        assert_eq!(endless.timeout(), Duration::MAX);
        assert!(endless.remaining() > Duration::from_secs(365 * 24 * 60 * 60));
    }
}
