//! The decisions every listener makes the same way, whatever its broker: which handler runs, what
//! its result means for the message, when a failed run is tried again and when it is given up, and
//! how outcomes are reported. A transport acts on the [`Verdict`] in its own terms (commit or ack,
//! hold, dead-letter).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use super::{HandlerFailure, Handlers, Outcome, Received};
use crate::error::{Error, ErrorKind};
use crate::retry::Doubling;

/// How a listener retries a failed handler: after a doubling backoff, at most `max_attempts`
/// runs (`None`: for as long as it fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The wait after each failed run.
    pub backoff: Doubling,
    /// Runs before the message is given up, when it can be.
    pub max_attempts: Option<u32>,
    /// Whether the transport can give a message up once its runs are used up: it has somewhere to
    /// send it, or can hold its place. When not, the message is retried, never discarded.
    pub can_give_up: bool,
}

/// What one run of a message's handler came to.
#[derive(Debug)]
pub enum Verdict {
    /// The handler succeeded, or the inbox had the event: settle the message (acknowledge it,
    /// commit its offset), then [report](Pipeline::report) this [`Outcome::Applied`] or
    /// [`Outcome::Duplicate`].
    Settle(Outcome),
    /// The handler failed `attempts` runs so far; run it again after `retry_in` (already logged
    /// and reported as [`Outcome::Retrying`]).
    Retry {
        /// Failed runs so far.
        attempts: u32,
        /// The wait before the next run.
        retry_in: Duration,
    },
    /// The message can never be handled (already counted; the transport logs what it does with
    /// it): dead-letter it, or hold it.
    Poison {
        /// The event id, when the headers could be read.
        id: Option<Uuid>,
        /// Why.
        reason: Error,
        /// Failed runs so far.
        attempts: u32,
    },
}

/// The transport-neutral part of a listener: its handlers, its retry policy and its outcome
/// reports.
pub struct Pipeline<M> {
    handlers: Handlers<M>,
    retry: RetryPolicy,
    outcomes: broadcast::Sender<Outcome>,
    poison: AtomicU64,
}

impl<M> fmt::Debug for Pipeline<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("event_types", &self.handlers.event_types())
            .field("retry", &self.retry)
            .finish()
    }
}

impl<M: Send + 'static> Pipeline<M> {
    /// A pipeline running `handlers` with `retry`.
    pub fn new(handlers: Handlers<M>, retry: RetryPolicy) -> Self {
        let (outcomes, _) = broadcast::channel(1024);
        Self { handlers, retry, outcomes, poison: AtomicU64::new(0) }
    }

    /// The event types with a handler, sorted.
    pub fn event_types(&self) -> Vec<&str> {
        self.handlers.event_types()
    }

    /// What the listener does with each message, as it happens (a bounded broadcast: a slow
    /// subscriber misses old outcomes rather than slowing the listener).
    pub fn outcomes(&self) -> broadcast::Receiver<Outcome> {
        self.outcomes.subscribe()
    }

    /// Reports `outcome` to the subscribers of [`outcomes`](Self::outcomes), if any.
    pub fn report(&self, outcome: Outcome) {
        // No subscriber is fine: outcomes are informational.
        let _ = self.outcomes.send(outcome);
    }

    /// The wait after `attempts` failed runs, by the [`RetryPolicy`]'s backoff: also the wait of
    /// a transport's own retries, such as a dead-letter send that failed.
    pub fn retry_delay(&self, attempts: u32) -> Duration {
        self.retry.backoff.delay(attempts)
    }

    /// Poison messages met since the listener was built.
    pub fn poison_seen(&self) -> u64 {
        self.poison.load(Ordering::Relaxed)
    }

    /// Runs the handler of `event`'s type, after `failures` failed runs of it, and says what
    /// becomes of the message. A type without a handler is poison. When the runs are used up the
    /// message is given up as poison if the policy [can give it up](RetryPolicy::can_give_up);
    /// otherwise it is retried at the backoff, logged at ERROR, and never discarded.
    pub async fn run(&self, event: Received<Vec<u8>, M>, failures: u32) -> Verdict {
        let id = event.id;
        let Some(handler) = self.handlers.get(&event.event_type) else {
            let reason = format!("no handler for event type '{}' (event {id})", event.event_type);
            return self.poison(Some(id), super::decode_error(reason), failures);
        };
        let error = match handler(event).await {
            Ok(consumed) if consumed.is_applied() => return Verdict::Settle(Outcome::Applied { id }),
            Ok(_) => return Verdict::Settle(Outcome::Duplicate { id }),
            Err(HandlerFailure::Poison(reason)) => return self.poison(Some(id), reason, failures),
            Err(HandlerFailure::Failed(error)) if error.kind() == ErrorKind::InFlight => {
                // Another delivery is applying this event: nothing failed here, so no attempt is
                // counted, and settling would lose the event if that delivery's effect fails.
                let retry_in = self.retry_delay(failures.max(1));
                tracing::info!(event_id = %id, ?retry_in, %error, "the event is in flight elsewhere; the message runs again after a pause");
                self.report(Outcome::Retrying { id, attempts: failures, retry_in, error: error.to_string() });
                return Verdict::Retry { attempts: failures, retry_in };
            }
            Err(HandlerFailure::Failed(error)) if error.kind() == ErrorKind::Permanent => {
                // The handler knows no retry can mend it: given up at once, as poison.
                return self.poison(Some(id), error, failures.saturating_add(1));
            }
            Err(HandlerFailure::Failed(error)) => error,
        };
        let attempts = failures.saturating_add(1);
        let exhausted = self.retry.max_attempts.is_some_and(|max| attempts >= max);
        if exhausted && self.retry.can_give_up {
            return self.poison(
                Some(id),
                error.context(format!("gave up after {attempts} attempts")),
                attempts,
            );
        }
        let retry_in = self.retry_delay(attempts);
        if exhausted {
            tracing::error!(
                event_id = %id, attempts, ?retry_in, %error,
                "handler keeps failing and the message has nowhere to go: it stays unsettled and runs again after a pause, never discarded"
            );
        } else {
            tracing::warn!(event_id = %id, attempts, ?retry_in, %error, "handler failed; the message runs again after a pause");
        }
        self.report(Outcome::Retrying { id, attempts, retry_in, error: error.to_string() });
        Verdict::Retry { attempts, retry_in }
    }

    /// A message whose headers cannot be read (see [`EventHeaders::decode`](super::EventHeaders::decode)):
    /// poison.
    pub fn undecodable(&self, reason: Error, failures: u32) -> Verdict {
        self.poison(None, reason, failures)
    }

    fn poison(&self, id: Option<Uuid>, reason: Error, attempts: u32) -> Verdict {
        self.poison.fetch_add(1, Ordering::Relaxed);
        Verdict::Poison { id, reason, attempts }
    }
}

/// How a listener's work ended, as [`until_shutdown`] saw it.
#[derive(Debug)]
pub enum Ended<T> {
    /// The work ended by itself.
    Finished(T),
    /// Shutdown came first; the work's result when it finished within the grace.
    ShutDown(Option<T>),
}

/// Runs `work` until it ends, or until `shutdown` completes: then `stop` is told (the work watches
/// it, finishes the message in hand and returns) and the work gets `grace` to do so. Past the
/// grace it is dropped, with a warning naming `consumer`.
pub async fn until_shutdown<T>(
    shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    stop: &watch::Sender<bool>,
    grace: Duration,
    consumer: &str,
    work: impl Future<Output = T>,
) -> Ended<T> {
    let mut work = std::pin::pin!(work);
    tokio::select! {
        () = shutdown => {
            let _ = stop.send(true);
            let finished = tokio::time::timeout(grace, &mut work).await.ok();
            if finished.is_none() {
                tracing::warn!(consumer, ?grace, "the listener did not stop within its shutdown grace");
            }
            Ended::ShutDown(finished)
        }
        result = &mut work => Ended::Finished(result),
    }
}

/// Completes once `stopping` turns true (or its sender is gone).
pub async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Headers;
    use crate::{Consumed, ErrorKind};

    fn event(event_type: &str) -> Received<Vec<u8>, ()> {
        let (id, headers) = (Uuid::now_v7(), Headers::new());
        Received {
            id,
            event_type: event_type.into(),
            payload_type: None,
            created_at: None,
            headers,
            source: (),
            payload: b"1".to_vec(),
        }
    }

    fn pipeline(max_attempts: Option<u32>, can_give_up: bool) -> Pipeline<()> {
        let handlers = Handlers::new()
            .on("ok", |_: Received<u32, ()>| async { Ok(Consumed::Applied(())) })
            .on("failing", |_: Received<u32, ()>| async { Err(Error::new(ErrorKind::Broker, "down")) })
            .on("elsewhere", |_: Received<u32, ()>| async {
                Err(Error::temporary(ErrorKind::InFlight, "held"))
            })
            .on("refused", |_: Received<u32, ()>| async { Err(Error::permanent("customer 7 is unknown")) });
        let backoff = Doubling::new(Duration::from_millis(100), Duration::from_millis(250));
        Pipeline::new(handlers, RetryPolicy { backoff, max_attempts, can_give_up })
    }

    #[tokio::test]
    async fn a_run_settles_retries_with_backoff_or_gives_up_only_where_it_may() {
        let pipeline = pipeline(Some(3), true);
        assert!(matches!(pipeline.run(event("ok"), 0).await, Verdict::Settle(Outcome::Applied { .. })));
        let Verdict::Retry { attempts: 2, retry_in } = pipeline.run(event("failing"), 1).await else {
            panic!("the second failed run is retried");
        };
        assert_eq!(retry_in, Duration::from_millis(200));
        let Verdict::Poison { reason, attempts: 3, .. } = pipeline.run(event("failing"), 2).await else {
            panic!("the last run gives up");
        };
        assert!(reason.to_string().contains("gave up after 3 attempts"), "{reason}");
        let kept = self::pipeline(Some(3), false).run(event("failing"), 7).await;
        assert!(matches!(kept, Verdict::Retry { attempts: 8, .. }), "nowhere to go: retried, {kept:?}");
        let Verdict::Poison { reason, id: Some(_), .. } = pipeline.run(event("unknown"), 0).await else {
            panic!("a type without a handler is poison");
        };
        assert!(reason.to_string().contains("no handler for event type 'unknown'"), "{reason}");
        assert_eq!(pipeline.poison_seen(), 2);
    }

    #[tokio::test]
    async fn an_event_in_flight_elsewhere_runs_again_without_using_up_an_attempt() {
        let pipeline = pipeline(Some(3), true);
        for failures in [0, 2] {
            let verdict = pipeline.run(event("elsewhere"), failures).await;
            assert!(
                matches!(verdict, Verdict::Retry { attempts, .. } if attempts == failures),
                "{verdict:?}"
            );
        }
        assert_eq!(pipeline.poison_seen(), 0, "never given up, even at the last attempt");
    }

    #[tokio::test]
    async fn a_permanent_failure_is_given_up_at_its_first_run_with_or_without_a_limit() {
        for (max_attempts, can_give_up) in [(None, true), (Some(5), true), (Some(5), false)] {
            let pipeline = pipeline(max_attempts, can_give_up);
            let verdict = pipeline.run(event("refused"), 0).await;
            let Verdict::Poison { reason, attempts: 1, id: Some(_) } = &verdict else {
                panic!("given up at once ({max_attempts:?}, {can_give_up}): {verdict:?}");
            };
            assert_eq!(reason.kind(), ErrorKind::Permanent);
            assert!(reason.to_string().contains("customer 7 is unknown"), "{reason}");
        }
    }

    #[tokio::test]
    async fn without_a_limit_a_failing_handler_is_never_given_up() {
        let kept = pipeline(None, true).run(event("failing"), u32::MAX - 1).await;
        assert!(matches!(kept, Verdict::Retry { attempts: u32::MAX, .. }), "{kept:?}");
    }
}
