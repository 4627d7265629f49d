//! [`RabbitSender`]: pipelined publishing with publisher confirms and mandatory routing.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{LongString, ShortString};
use lapin::{Channel, Confirmation, Connection, ConnectionProperties};
use oncebox_core::config::TransportKind;
use oncebox_core::sender::unanswered_as_timeouts;
use oncebox_core::{Deadline, Error, ErrorKind, OutboundMessage, Result, SendError, Sender};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::{MAX_RECONNECT_BACKOFF, RabbitSenderConfig, redact_url};
use crate::error::broker;
use crate::message::prepare;

/// Delivers outbox messages to RabbitMQ.
///
/// Each batch is published on one channel in confirm mode without waiting in between, then every
/// confirm is awaited; a message is `Ok` only when the broker acknowledged it **and** routed it to
/// at least one queue (`mandatory`), so an unroutable event is a failure and never lost silently.
/// Exchange = [`OutboundMessage::topic`], routing key = event type.
///
/// Each batch in flight has a channel of its own, taken from a pool of idle ones: RabbitMQ sends a
/// `basic.return` without a delivery tag, so on a channel two batches share, a return cannot be
/// told apart by its confirm. The returned message carries its event id (`message_id`), and a
/// batch fails exactly the messages whose ids came back once every confirm of its channel is in.
///
/// The connection is opened on the first batch. A closed channel or connection fails the
/// unconfirmed messages of the batch at once; the next batch opens a new channel, or reconnects
/// with backoff.
pub struct RabbitSender {
    config: RabbitSenderConfig,
    link: Mutex<Link>,
}

impl fmt::Debug for RabbitSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSender").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Idle confirm channels kept for the next batches; more than this many batches in flight at once
/// open channels that are closed again after their batch.
const MAX_IDLE_CHANNELS: usize = 16;

/// The current connection, its idle confirm channels, and how the last connection attempts went.
#[derive(Default)]
struct Link {
    connection: Option<Connection>,
    /// Channels whose every confirm has come in: nothing of an earlier batch can reach the next.
    idle: Vec<Channel>,
    failed_attempts: u32,
    next_attempt: Option<Instant>,
}

impl RabbitSender {
    /// A sender for `config`; checks the settings but does not connect yet, so a service can start
    /// while the broker is down.
    pub fn new(config: RabbitSenderConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config, link: Mutex::new(Link::default()) })
    }

    /// Connects now (within the connect timeout) instead of on the first batch, so start-up can
    /// fail fast on a wrong URL or credentials.
    pub async fn connect(&self) -> Result<()> {
        let deadline = Deadline::after(self.config.connect_timeout);
        match deadline.bound(self.channel(deadline)).await {
            Some(channel) => channel.map(|_| ()),
            None => Err(Error::temporary(
                ErrorKind::Timeout,
                format!(
                    "connecting to RabbitMQ at {} took longer than {:?}",
                    redact_url(&self.config.url),
                    deadline.timeout()
                ),
            )),
        }
    }

    /// Closes the connection gracefully; the next batch connects again.
    pub async fn close(&self) -> Result<()> {
        let mut link = self.link.lock().await;
        // lapin closes a channel when its last handle drops; dropping it before the connection
        // would race the connection's own close of the same channel.
        let channels = std::mem::take(&mut link.idle);
        if let Some(connection) = link.connection.take()
            && connection.status().connected()
        {
            let closing = connection.close(200, ShortString::from("oncebox sender closed"));
            match Deadline::after(self.config.connect_timeout).bound(closing).await {
                Some(result) => result.map_err(|error| broker("closing the RabbitMQ connection", error))?,
                None => {
                    return Err(Error::temporary(
                        ErrorKind::Timeout,
                        "closing the RabbitMQ connection timed out",
                    ));
                }
            }
        }
        drop(channels);
        Ok(())
    }

    /// A confirm-mode channel for one batch alone: an idle one, a new one on the current
    /// connection, or one on a new connection when the old one is gone (not before the backoff
    /// delay has passed), opened by `deadline`. The batch gives it back with [`Self::give_back`].
    async fn channel(&self, deadline: Deadline) -> Result<Channel> {
        let mut link = self.link.lock().await;
        while let Some(channel) = link.idle.pop() {
            if channel.status().connected() {
                return Ok(channel);
            }
        }
        if !link.connection.as_ref().is_some_and(|connection| connection.status().connected()) {
            link.connection = None;
            if let Some(next_attempt) = link.next_attempt {
                let now = Instant::now();
                if now < next_attempt {
                    return Err(Error::temporary(
                        ErrorKind::Broker,
                        format!(
                            "RabbitMQ at {} is unreachable; reconnecting in {:?}",
                            redact_url(&self.config.url),
                            next_attempt - now
                        ),
                    ));
                }
            }
            match self.open_connection(deadline).await {
                Ok(connection) => {
                    link.connection = Some(connection);
                    link.failed_attempts = 0;
                    link.next_attempt = None;
                }
                Err(error) => {
                    link.failed_attempts = link.failed_attempts.saturating_add(1);
                    // The delay is bounded by validation; saturating keeps a clock overflow from ever
                    // panicking here.
                    let now = Instant::now();
                    let delay = self.config.reconnect_delay(link.failed_attempts);
                    link.next_attempt = Some(now.checked_add(delay).unwrap_or(now + MAX_RECONNECT_BACKOFF));
                    return Err(error);
                }
            }
        }
        let Some(connection) = &link.connection else {
            return Err(Error::temporary(ErrorKind::Broker, "no RabbitMQ connection"));
        };
        let channel =
            connection.create_channel().await.map_err(|error| broker("opening a RabbitMQ channel", error))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|error| broker("enabling publisher confirms", error))?;
        Ok(channel)
    }

    async fn open_connection(&self, deadline: Deadline) -> Result<Connection> {
        let properties = ConnectionProperties::default()
            .with_connection_name(LongString::from(self.config.connection_name.clone()));
        let url = redact_url(&self.config.url);
        match deadline.bound(Connection::connect(&self.config.url, properties)).await {
            Some(Ok(connection)) => Ok(connection),
            Some(Err(error)) => {
                // Whatever refused the connection (closed port, restart, credentials while the broker
                // boots) may be gone on the next attempt.
                Err(Error::temporary(ErrorKind::Broker, format!("connecting to RabbitMQ at {url}"))
                    .with_source(error))
            }
            None => Err(Error::temporary(
                ErrorKind::Timeout,
                format!("connecting to RabbitMQ at {url} took longer than {:?}", deadline.timeout()),
            )),
        }
    }

    /// Keeps `channel` for a later batch; only a channel whose every confirm came in is given back,
    /// so no answer to this batch can reach the next one.
    async fn give_back(&self, channel: Channel) {
        let mut link = self.link.lock().await;
        if channel.status().connected() && link.idle.len() < MAX_IDLE_CHANNELS {
            link.idle.push(channel);
        }
    }
}

/// Why RabbitMQ gave a message back (`basic.return`): its reply code and text.
type Returned = (u16, String);

/// What the broker's confirm says about one message, once the returns of its whole batch are known:
/// `returned` is the message's own return, found by its id, whichever confirm lapin handed it to.
fn confirmation_result(
    message: &OutboundMessage,
    confirmation: &Confirmation,
    returned: Option<&Returned>,
) -> Result<(), SendError> {
    if let Some((reply_code, reply_text)) = returned {
        return Err(Error::new(
            ErrorKind::Broker,
            format!(
                "message {} is unroutable: exchange '{}' has no queue bound for routing key '{}' ({reply_code} {reply_text})",
                message.id, message.topic, message.event_type
            ),
        ));
    }
    match confirmation {
        Confirmation::Ack(_) => Ok(()),
        // RabbitMQ nacks when a queue refuses the message (e.g. `x-overflow: reject-publish`) or on
        // an internal error; both can clear up.
        Confirmation::Nack(_) => Err(Error::temporary(
            ErrorKind::Broker,
            format!("RabbitMQ refused message {} (basic.nack) on exchange '{}'", message.id, message.topic),
        )),
        Confirmation::NotRequested => Err(Error::new(
            ErrorKind::Broker,
            format!("message {} was published without publisher confirms", message.id),
        )),
    }
}

/// The returns carried by a batch's confirms, by the id of the message each one gives back, and
/// whether one came back without an id (then no ack of the batch can be trusted).
fn returns_by_id<'a>(
    confirmations: impl Iterator<Item = &'a Confirmation>,
) -> (HashMap<String, Returned>, bool) {
    let mut returns = HashMap::new();
    let mut anonymous = false;
    for confirmation in confirmations {
        if let Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) = confirmation {
            match returned.properties.message_id() {
                Some(id) => {
                    returns.insert(
                        id.as_str().to_owned(),
                        (returned.reply_code, returned.reply_text.as_str().to_owned()),
                    );
                }
                None => anonymous = true,
            }
        }
    }
    (returns, anonymous)
}

#[async_trait]
impl Sender for RabbitSender {
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>> {
        if batch.is_empty() {
            return Vec::new();
        }
        let mut results: Vec<Option<Result<(), SendError>>> = (0..batch.len()).map(|_| None).collect();
        if deadline.bound(self.publish_all(batch, &mut results, deadline)).await.is_none() {
            // The batch's channel is dropped with it, never given back: confirms that never came
            // mean it cannot be trusted.
            tracing::warn!(
                messages = batch.len(),
                timeout = ?deadline.timeout(),
                "RabbitMQ batch hit the emergency timeout"
            );
        }
        unanswered_as_timeouts(results, batch, &deadline, "confirmed")
    }

    /// RabbitMQ, checked against `oncebox.outbox.sender.type` at start.
    fn transport(&self) -> Option<TransportKind> {
        Some(TransportKind::RabbitMq)
    }
}

impl RabbitSender {
    /// Publishes every message on a channel of the batch's own without waiting in between, then
    /// collects the confirms; fills `results` as failures become known, and the acks once every
    /// confirm is in: until then, a message's return may still sit with another message's
    /// confirm. A timeout therefore leaves every ack unanswered, and those messages are sent again
    /// (a duplicate, never a loss).
    async fn publish_all(
        &self,
        batch: &[OutboundMessage],
        results: &mut [Option<Result<(), SendError>>],
        deadline: Deadline,
    ) {
        let channel = match self.channel(deadline).await {
            Ok(channel) => channel,
            Err(error) => {
                let text = error.to_string();
                let temporary = error.is_temporary();
                let kind = error.kind();
                for slot in results.iter_mut() {
                    *slot = Some(Err(if temporary {
                        Error::temporary(kind, text.clone())
                    } else {
                        Error::new(kind, text.clone())
                    }));
                }
                return;
            }
        };
        let options = BasicPublishOptions { mandatory: true, ..BasicPublishOptions::default() };
        let mut confirms = FuturesUnordered::new();
        let mut channel_broken = false;
        for (index, message) in batch.iter().enumerate() {
            if channel_broken {
                results[index] = Some(Err(Error::temporary(
                    ErrorKind::Broker,
                    format!("message {} not published: the channel closed earlier in the batch", message.id),
                )));
                continue;
            }
            let prepared = match prepare(message) {
                Ok(prepared) => prepared,
                Err(error) => {
                    results[index] = Some(Err(error));
                    continue;
                }
            };
            match channel
                .basic_publish(
                    prepared.exchange,
                    prepared.routing_key,
                    options,
                    message.payload.as_bytes(),
                    prepared.properties,
                )
                .await
            {
                Ok(confirm) => confirms.push(async move { (index, confirm.await) }),
                Err(error) => {
                    results[index] = Some(Err(broker(format!("publishing message {}", message.id), error)));
                    channel_broken = true;
                }
            }
        }
        let mut confirmed = Vec::with_capacity(batch.len());
        while let Some((index, outcome)) = confirms.next().await {
            match outcome {
                Ok(confirmation) => confirmed.push((index, confirmation)),
                Err(error) => {
                    channel_broken = true;
                    // lapin fails every pending confirm with the reason the channel closed (e.g.
                    // NOT_FOUND for a missing exchange), so nothing waits for a confirm that cannot come.
                    results[index] = Some(Err(broker(
                        format!(
                            "message {} was not confirmed: the channel to '{}' closed",
                            batch[index].id, batch[index].topic
                        ),
                        error,
                    )));
                }
            }
        }
        let (mut returns, anonymous) = returns_by_id(confirmed.iter().map(|(_, confirmation)| confirmation));
        for (index, confirmation) in &confirmed {
            let message = &batch[*index];
            results[*index] = Some(if anonymous {
                Err(Error::temporary(
                    ErrorKind::Broker,
                    format!(
                        "message {} may have been returned: RabbitMQ gave back a message without an id in its batch",
                        message.id
                    ),
                ))
            } else {
                confirmation_result(message, confirmation, returns.remove(&message.id.to_string()).as_ref())
            });
        }
        if !returns.is_empty() {
            // Cannot happen on a channel of the batch's own; said loudly rather than trusted.
            tracing::warn!(ids = ?returns.keys().collect::<Vec<_>>(), "RabbitMQ returned messages of no batch in flight");
        }
        if !channel_broken {
            self.give_back(channel).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reports_rabbitmq_for_the_sender_type_check() -> Result<()> {
        let sender = RabbitSender::new(RabbitSenderConfig::new("amqp://127.0.0.1:1/%2f"))?;
        assert_eq!(sender.transport(), Some(TransportKind::RabbitMq));
        Ok(())
    }

    #[test]
    fn sender_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<RabbitSender>();
    }

    #[test]
    fn an_unroutable_or_refused_confirm_is_a_failure() {
        let message = oncebox_testkit::sender_suite::test_message("orders", 0);
        let returned = (312, "NO_ROUTE".to_owned());
        assert!(confirmation_result(&message, &Confirmation::Ack(None), None).is_ok());
        assert!(
            confirmation_result(&message, &Confirmation::Ack(None), Some(&returned))
                .is_err_and(|error| !error.is_temporary())
        );
        assert!(confirmation_result(&message, &Confirmation::Nack(None), None).is_err());
        assert!(confirmation_result(&message, &Confirmation::NotRequested, None).is_err());
        let mut long = message.clone();
        long.topic = "x".repeat(300);
        assert!(prepare(&long).is_err_and(|error| error.kind() == ErrorKind::InvalidInput));
        assert!(prepare(&message).is_ok());
    }
}
