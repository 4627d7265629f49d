//! [`RabbitListener`]: consumes a queue with manual acknowledgement and hands each event to a typed
//! handler, usually through an [`Inbox`] so a redelivered event has its effect once.
//!
//! What happens to a delivery:
//! * handler succeeded, or the inbox says the event was consumed before → `basic.ack`;
//! * handler failed → the listener keeps the message (unacknowledged) and runs the handler again
//!   after an exponential backoff ([`with_retry_backoff`](RabbitListenerConfig::with_retry_backoff),
//!   200 ms doubling up to 30 s by default), so a database blip of a few seconds costs a few retries
//!   instead of the message. Once [`max_attempts`](RabbitListenerConfig::with_max_attempts) runs
//!   have failed in this process (a redelivery after a closed channel alone does not count), the
//!   message is rejected to the queue's dead-letter exchange **if the listener knows the queue has
//!   one**; otherwise it is never given up: it stays unacknowledged and is retried at the backoff
//!   (capped at its maximum) for as long as the handler fails, each failure logged at ERROR with the
//!   event id;
//! * poison (missing or malformed `oncebox_event_id`, no handler for the event type, a payload the
//!   handler's type cannot decode) → `basic.reject` without requeue at once when the queue has a
//!   dead-letter exchange; otherwise the message is **held**: left unacknowledged, logged at ERROR,
//!   reported as [`Outcome::Held`], and the listener moves on to the next message. A held
//!   message occupies a prefetch slot until the channel closes (a reconnect, a stop, or RabbitMQ's
//!   `consumer_timeout`), when RabbitMQ delivers it again; once every slot holds one the listener
//!   receives nothing more, so a queue that can receive poison needs a dead-letter exchange.
//!
//! The listener knows about a dead-letter exchange when its [topology](crate::RabbitTopology::with_dead_letter)
//! declares one, or when told with
//! [`with_queue_dead_letter_exchange`](RabbitListenerConfig::with_queue_dead_letter_exchange) that a
//! queue declared elsewhere has one. A message is never rejected without one, because RabbitMQ would
//! discard it; nothing is ever acknowledged as done unless its handler succeeded.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{FieldTable, LongString, ShortString};
use lapin::{Connection, ConnectionProperties};
use oncebox_core::consume::{
    Ended, ListenerBuilder, ListenerConfig, Outcome, Pipeline, RetryPolicy, Verdict, stopped, until_shutdown,
};
use oncebox_core::{Error, ErrorKind, Result};
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use crate::config::{RabbitListenerConfig, redact_url};
use crate::error::broker;
use crate::message::{RabbitSource, broker_may_drop, decode_delivery};
use crate::topology::short;

/// Longest wait for the broker to confirm closing a channel and connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Failing events whose deliveries this process counts itself, at most.
const LOCAL_DELIVERY_ENTRIES: usize = 10_000;
/// How often a wait for a retry checks that the channel is still open. lapin 4 offers no
/// notification of a channel's closing, and a closed channel has returned the message to the
/// queue, so the wait would otherwise keep the listener idle for up to the whole backoff.
const CHANNEL_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// What the listener did with one delivery: the [`Outcome`] every transport reports. A poison
/// message is [`Outcome::DeadLettered`] to the queue's dead-letter exchange (rejected without
/// requeue) when it has one; otherwise [`Outcome::Held`]: left unacknowledged (never discarded)
/// and logged at ERROR while the listener goes on with the next messages. A held message occupies
/// a prefetch slot until the channel closes, when RabbitMQ delivers it again; when every slot
/// holds one the listener receives nothing more until then. `Retrying` attempts beyond the
/// maximum mean the queue has no dead-letter exchange, so the message is retried rather than
/// discarded.
pub type ListenerOutcome = Outcome;

/// What became of one delivery.
enum Processed {
    /// Acknowledged or rejected.
    Settled,
    /// Poison without a dead-letter exchange: kept unacknowledged for the life of the channel.
    Held(Box<Delivery>),
    /// Shutdown was requested while the message waited for a retry; it is left unacknowledged, so
    /// closing the channel returns it to the queue.
    Stopping,
}

/// Why a connection's session ended.
enum SessionEnd {
    /// Shutdown was requested.
    Stopped,
    /// The connection or consumer was lost; `consumed` when it got as far as consuming.
    Lost { error: Error, consumed: bool },
}

/// Builds a [`RabbitListener`]: one handler per event type ([`ListenerBuilder::on`],
/// [`ListenerBuilder::on_once`]), then [`ListenerBuilder::build`].
pub type RabbitListenerBuilder = ListenerBuilder<RabbitListenerConfig>;

impl ListenerConfig for RabbitListenerConfig {
    type Source = RabbitSource;
    type Listener = RabbitListener;
    const SECTION: &'static str = "rabbit.listener";

    fn consumer(&self) -> &str {
        &self.queue
    }

    fn validate(&self) -> Result<()> {
        RabbitListenerConfig::validate(self)
    }

    fn retry(&self) -> RetryPolicy {
        // Without a dead-letter exchange, rejecting a message would make RabbitMQ discard it.
        RetryPolicy {
            backoff: self.retry,
            max_attempts: Some(self.max_attempts),
            can_give_up: self.dead_letters(),
        }
    }

    fn listener(self, pipeline: Pipeline<RabbitSource>) -> Result<RabbitListener> {
        Ok(RabbitListener { config: self, pipeline, local_attempts: Arc::new(Mutex::new(HashMap::new())) })
    }
}

/// Consumes one queue and hands each event to the handler registered for its type.
///
/// [`run`](Self::run) keeps consuming until its shutdown future completes, reconnecting (and
/// re-declaring the topology when `declare` is on) after the connection is lost.
pub struct RabbitListener {
    config: RabbitListenerConfig,
    pipeline: Pipeline<RabbitSource>,
    /// Failed handler runs seen by this process per event id: the attempt count, kept across a
    /// redelivery (after a reconnect) of a message that failed here. Entries go when the message is
    /// settled.
    local_attempts: Arc<Mutex<HashMap<Uuid, u32>>>,
}

impl fmt::Debug for RabbitListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitListener")
            .field("config", &self.config)
            .field("event_types", &self.pipeline.event_types())
            .finish()
    }
}

/// An acknowledgement that lapin did not send because the channel had closed (`Ok(false)`).
fn channel_lost(what: String) -> Error {
    Error::temporary(
        ErrorKind::Broker,
        format!("{what}: the channel closed first; RabbitMQ delivers the message again"),
    )
}

/// Whether `delivery` can still be settled on `channel`.
fn channel_open(channel: &lapin::Channel, delivery: &Delivery) -> bool {
    channel.status().connected() && !delivery.acker.poisoned()
}

/// Completes once `channel` is no longer open (polled; see [`CHANNEL_CHECK_INTERVAL`]).
async fn channel_closed(channel: &lapin::Channel, delivery: &Delivery) {
    while channel_open(channel, delivery) {
        tokio::time::sleep(CHANNEL_CHECK_INTERVAL).await;
    }
}

impl RabbitListener {
    /// A builder for a listener with `config`.
    pub fn builder(config: RabbitListenerConfig) -> RabbitListenerBuilder {
        ListenerBuilder::new(config)
    }

    /// What the listener does with each delivery, as it happens (a bounded broadcast: a slow
    /// subscriber misses old outcomes rather than slowing the listener).
    pub fn outcomes(&self) -> broadcast::Receiver<ListenerOutcome> {
        self.pipeline.outcomes()
    }

    /// Consumes until `shutdown` completes, then finishes the delivery in hand (within the
    /// [shutdown grace](RabbitListenerConfig::with_shutdown_grace)) and closes the connection.
    /// Connection losses are logged and followed by a reconnect with backoff; only shutdown ends
    /// the call.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let mut shutdown = std::pin::pin!(shutdown);
        let (stop, stopping) = watch::channel(false);
        let mut failures: u32 = 0;
        let (grace, queue) = (self.config.shutdown_grace, &self.config.queue);
        loop {
            let session = self.session(stopping.clone());
            let end = match until_shutdown(shutdown.as_mut(), &stop, grace, queue, session).await {
                Ended::Finished(end) => end,
                Ended::ShutDown(_) => return Ok(()),
            };
            let error = match end {
                SessionEnd::Stopped => return Ok(()),
                SessionEnd::Lost { error, consumed } => {
                    failures = if consumed { 1 } else { failures.saturating_add(1) };
                    error
                }
            };
            let delay = self.config.reconnect_delay(failures);
            tracing::warn!(queue = %self.config.queue, %error, ?delay, "RabbitMQ listener lost its connection; reconnecting");
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One connection's life: connect, declare, consume until something breaks or `stopping`.
    async fn session(&self, stopping: watch::Receiver<bool>) -> SessionEnd {
        let properties = ConnectionProperties::default()
            .with_connection_name(LongString::from(self.config.connection_name.clone()));
        let connection = match Connection::connect(&self.config.url, properties).await {
            Ok(connection) => connection,
            Err(error) => {
                let error = Error::temporary(
                    ErrorKind::Broker,
                    format!("connecting to RabbitMQ at {}", redact_url(&self.config.url)),
                )
                .with_source(error);
                return SessionEnd::Lost { error, consumed: false };
            }
        };
        let channel = match connection.create_channel().await {
            Ok(channel) => channel,
            Err(error) => {
                return SessionEnd::Lost {
                    error: broker("opening a RabbitMQ channel", error),
                    consumed: false,
                };
            }
        };
        let mut consumed = false;
        let result = self.consume(&channel, stopping, &mut consumed).await;
        // Closed in order and awaited (bounded): dropping the channel handle would close it in the
        // background, racing the connection's close. Unacknowledged messages return to the queue.
        let closing = async {
            if channel.status().connected() {
                let _ = channel.close(200, ShortString::from("oncebox listener closing")).await;
            }
            if connection.status().connected() {
                let _ = connection.close(200, ShortString::from("oncebox listener closing")).await;
            }
        };
        if tokio::time::timeout(CLOSE_TIMEOUT, closing).await.is_err() {
            tracing::warn!(queue = %self.config.queue, "closing the RabbitMQ connection timed out");
        }
        match result {
            Ok(true) => SessionEnd::Stopped,
            Ok(false) => SessionEnd::Lost {
                error: Error::temporary(ErrorKind::Broker, "the broker cancelled the consumer"),
                consumed,
            },
            Err(error) => SessionEnd::Lost { error, consumed },
        }
    }

    /// Consumes on `connection`; `Ok(true)` when stopped, `Ok(false)` when the consumer ended.
    async fn consume(
        &self,
        channel: &lapin::Channel,
        mut stopping: watch::Receiver<bool>,
        consumed: &mut bool,
    ) -> Result<bool> {
        channel
            .basic_qos(self.config.prefetch, BasicQosOptions::default())
            .await
            .map_err(|error| broker("setting the prefetch", error))?;
        let queue = short("rabbit.listener.queue", &self.config.queue)?;
        if let Some(topology) = &self.config.declare {
            topology.declare(channel, &queue, &self.pipeline.event_types()).await?;
        }
        let mut consumer = channel
            .basic_consume(
                queue.clone(),
                ShortString::from(""),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|error| broker(format!("consuming queue '{}'", self.config.queue), error))?;
        *consumed = true;
        tracing::info!(queue = %self.config.queue, "RabbitMQ listener consuming");
        // Poison messages kept unacknowledged; closing the channel returns them to the queue.
        let mut held: Vec<Delivery> = Vec::new();
        // Deliveries being handled: at most `concurrency` (1: one at a time, in queue order).
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let concurrency = usize::from(self.config.concurrency.max(1));
        // Why the loop stopped taking deliveries: stopped (`true`), the consumer ended (`false`),
        // or a broker error. The deliveries in hand are finished first either way.
        let mut ending: Option<Result<bool>> = None;
        loop {
            tokio::select! {
                biased;
                Some(processed) = in_flight.next(), if !in_flight.is_empty() => {
                    match processed {
                        Ok(Processed::Settled) => {}
                        Ok(Processed::Stopping) => {
                            ending.get_or_insert(Ok(true));
                        }
                        Ok(Processed::Held(delivery)) => {
                            held.push(*delivery);
                            if self.config.prefetch != 0 && held.len() >= usize::from(self.config.prefetch) {
                                tracing::error!(
                                    queue = %self.config.queue, held = held.len(),
                                    "every prefetch slot holds a poison message: this listener receives nothing more (RabbitMQ's consumer_timeout closes the channel after 30 minutes by default, and the messages come back to be held again); the queue needs a dead-letter exchange: an x-dead-letter-exchange argument or policy and with_queue_dead_letter_exchange(), or with_declare with RabbitTopology::with_dead_letter"
                                );
                            }
                        }
                        Err(error) => {
                            // The first broker error ends the session; the others in hand meet the
                            // same closed channel.
                            if !matches!(ending, Some(Err(_))) {
                                ending = Some(Err(error));
                            }
                        }
                    }
                }
                () = stopped(&mut stopping), if ending.is_none() => {
                    ending = Some(Ok(true));
                }
                next = consumer.next(), if ending.is_none() && in_flight.len() < concurrency => {
                    match next {
                        None => ending = Some(Ok(false)),
                        Some(Err(error)) => ending = Some(Err(broker("receiving a delivery", error))),
                        Some(Ok(delivery)) => {
                            // A handler run is not raced against `stopping` (a delivery in hand is
                            // handled and settled first); only a wait for a retry is.
                            let mut stopping = stopping.clone();
                            in_flight.push(async move { self.process(channel, delivery, &mut stopping).await });
                        }
                    }
                }
            }
            if in_flight.is_empty()
                && let Some(ending) = ending.take()
            {
                return ending;
            }
        }
    }

    /// The failed handler runs of `id` this process saw (on earlier deliveries too). The broker's
    /// own count (`x-delivery-count`) is not used: it also rises each time a channel closes with
    /// the message unacknowledged, even one never handed to a handler, so a few reconnects would
    /// use up the attempts of messages that never failed.
    fn failures(&self, id: Uuid) -> u32 {
        self.local_attempts
            .lock()
            .map(|mut counts| {
                // Entries of events settled by another instance are never removed here; forgetting
                // them all now and then only makes such an event's count start again.
                if counts.len() >= LOCAL_DELIVERY_ENTRIES && !counts.contains_key(&id) {
                    counts.clear();
                }
                counts.get(&id).copied().unwrap_or(0)
            })
            .unwrap_or(0)
    }

    /// Remembers that `attempts` runs of `id` have failed (`None`: it was settled), for a later
    /// redelivery to this process.
    fn remember(&self, id: Uuid, attempts: Option<u32>) {
        if let Ok(mut counts) = self.local_attempts.lock() {
            match attempts {
                Some(attempts) => counts.insert(id, attempts),
                None => counts.remove(&id),
            };
        }
    }

    /// Handles one delivery: runs the handler, retrying it in process with backoff while it fails,
    /// and settles or holds the message. Only a failure to talk to the broker is an error.
    async fn process(
        &self,
        channel: &lapin::Channel,
        delivery: Delivery,
        stopping: &mut watch::Receiver<bool>,
    ) -> Result<Processed> {
        let decoded = decode_delivery(&delivery);
        if let Some(count) = broker_may_drop(&delivery, self.config.dead_letters()) {
            tracing::error!(
                event_id = ?decoded.as_ref().ok().map(|event| event.id), delivery_count = count,
                routing_key = %delivery.routing_key,
                "RabbitMQ has delivered this message {count} times and the queue has no known dead-letter exchange: a quorum queue with a delivery limit (20 by default on RabbitMQ 4) drops it once the limit is reached; set the policy `delivery-limit: -1` on the queue or give it a dead-letter exchange"
            );
        }
        let event = match decoded {
            Ok(event) => event,
            Err(error) => return self.give_up(delivery, None, error).await,
        };
        let id = event.id;
        let mut failures = self.failures(id);
        loop {
            let retry_in = match self.pipeline.run(event.clone(), failures).await {
                Verdict::Settle(outcome) => {
                    let acknowledged = delivery
                        .acker
                        .ack(BasicAckOptions::default())
                        .await
                        .map_err(|error| broker(format!("acknowledging event {id}"), error))?;
                    if !acknowledged {
                        // The channel closed under the handler: RabbitMQ delivers the event again
                        // (the inbox then finds it consumed), so it is neither applied nor settled here.
                        return Err(channel_lost(format!("acknowledging event {id}")));
                    }
                    self.remember(id, None);
                    self.pipeline.report(outcome);
                    return Ok(Processed::Settled);
                }
                Verdict::Poison { id, reason, .. } => return self.give_up(delivery, id, reason).await,
                Verdict::Retry { attempts, retry_in } => {
                    self.remember(id, Some(attempts));
                    failures = attempts;
                    retry_in
                }
            };
            tokio::select! {
                biased;
                () = stopped(stopping) => return Ok(Processed::Stopping),
                () = tokio::time::sleep(retry_in) => {}
                () = channel_closed(channel, &delivery) => {}
            }
            if !channel_open(channel, &delivery) {
                // The broker returned the message to the queue with the channel; running the handler
                // again here could not be acknowledged.
                return Err(Error::temporary(
                    ErrorKind::Broker,
                    format!(
                        "the channel closed while event {id} waited for a retry; RabbitMQ delivers it again"
                    ),
                ));
            }
        }
    }

    /// A message that is not handled: rejected to the dead-letter exchange when the queue has one,
    /// otherwise held unacknowledged, since rejecting it would make RabbitMQ discard it.
    async fn give_up(&self, delivery: Delivery, id: Option<Uuid>, reason: Error) -> Result<Processed> {
        if !self.config.dead_letters() {
            tracing::error!(
                event_id = ?id, routing_key = %delivery.routing_key, error = %reason,
                "a message cannot be handled and the queue has no dead-letter exchange: it stays unacknowledged, never discarded, and occupies a prefetch slot until the channel closes; give the queue a dead-letter exchange so such messages leave it"
            );
            self.pipeline.report(Outcome::Held {
                id,
                at: format!("queue '{}'", self.config.queue),
                reason: reason.to_string(),
            });
            return Ok(Processed::Held(Box::new(delivery)));
        }
        tracing::error!(
            event_id = ?id, routing_key = %delivery.routing_key, error = %reason,
            "rejecting a message to the dead-letter exchange"
        );
        let rejected = delivery
            .acker
            .reject(BasicRejectOptions { requeue: false })
            .await
            .map_err(|error| broker("rejecting a message", error))?;
        if !rejected {
            // Not dead-lettered: the broker returned the message to the queue with the channel.
            return Err(channel_lost(match id {
                Some(id) => format!("rejecting event {id}"),
                None => "rejecting a message".to_owned(),
            }));
        }
        if let Some(id) = id {
            self.remember(id, None);
        }
        self.pipeline.report(Outcome::DeadLettered {
            id,
            to: self.config.dead_letter_destination(),
            reason: reason.to_string(),
        });
        Ok(Processed::Settled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RabbitEvent;
    use oncebox_core::Consumed;

    #[test]
    fn attempts_count_only_failed_runs_of_this_process() -> Result<()> {
        let listener = RabbitListener::builder(RabbitListenerConfig::new("amqp://host", "billing"))
            .on("order-created", |_: RabbitEvent<serde_json::Value>| async { Ok(Consumed::Applied(())) })
            .build()?;
        let id = Uuid::now_v7();
        assert_eq!(listener.failures(id), 0, "a message never failed here starts with no failure");
        listener.remember(id, Some(3));
        assert_eq!(listener.failures(id), 3, "a redelivery continues the count of this process");
        listener.remember(id, None);
        assert_eq!(listener.failures(id), 0);
        Ok(())
    }

    #[test]
    fn listener_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<RabbitListener>();
        assert_send_sync::<RabbitListenerConfig>();
    }
}
