//! [`RabbitSender`]: pipelined publishing with publisher confirms and mandatory routing.

use std::fmt;
use std::sync::Arc;

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
/// The connection is opened on the first batch. A closed channel or connection fails the
/// unconfirmed messages of the batch at once; the next batch re-opens the channel, or reconnects
/// with backoff.
pub struct RabbitSender {
    config: RabbitSenderConfig,
    link: Arc<Mutex<Link>>,
}

impl fmt::Debug for RabbitSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSender").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The current connection and channel, and how the last connection attempts went.
#[derive(Default)]
struct Link {
    connection: Option<Connection>,
    channel: Option<Channel>,
    failed_attempts: u32,
    next_attempt: Option<Instant>,
}

impl RabbitSender {
    /// A sender for `config`; checks the settings but does not connect yet, so a service can start
    /// while the broker is down.
    pub fn new(config: RabbitSenderConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config, link: Arc::new(Mutex::new(Link::default())) })
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
        let channel = link.channel.take();
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
        drop(channel);
        Ok(())
    }

    /// A usable confirm-mode channel: the current one, a new one on the current connection, or a
    /// new connection when the old one is gone (not before the backoff delay has passed), opened
    /// by `deadline`.
    async fn channel(&self, deadline: Deadline) -> Result<Channel> {
        let mut link = self.link.lock().await;
        if let Some(channel) = &link.channel
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        link.channel = None;
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
        link.channel = Some(channel.clone());
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

    /// Drops `channel` if it is still the current one, so the next batch opens a fresh one.
    async fn discard(&self, channel: &Channel) {
        discard(&self.link, channel).await;
    }
}

/// Drops `channel` from `link` if it is still the current one.
async fn discard(link: &Mutex<Link>, channel: &Channel) {
    link.lock().await.forget(channel);
}

impl Link {
    /// Drops `channel` if it is still the current one.
    fn forget(&mut self, channel: &Channel) {
        if self.channel.as_ref().is_some_and(|current| current.id() == channel.id()) {
            self.channel = None;
        }
    }
}

/// What the broker's confirm says about one message.
fn confirmation_result(message: &OutboundMessage, confirmation: Confirmation) -> Result<(), SendError> {
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) => Err(Error::new(
            ErrorKind::Broker,
            format!(
                "message {} is unroutable: exchange '{}' has no queue bound for routing key '{}' ({} {})",
                message.id, message.topic, message.event_type, returned.reply_code, returned.reply_text
            ),
        )),
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

#[async_trait]
impl Sender for RabbitSender {
    async fn send(&self, batch: &[OutboundMessage], deadline: Deadline) -> Vec<Result<(), SendError>> {
        if batch.is_empty() {
            return Vec::new();
        }
        let mut results: Vec<Option<Result<(), SendError>>> = (0..batch.len()).map(|_| None).collect();
        let mut used = None;
        if deadline.bound(self.publish_all(batch, &mut results, deadline, &mut used)).await.is_none() {
            tracing::warn!(
                messages = batch.len(),
                timeout = ?deadline.timeout(),
                "RabbitMQ batch hit the emergency timeout"
            );
            // Confirms that never came mean the channel cannot be trusted; the next batch opens a
            // new one. In the background when another batch holds the link: the answers in hand
            // must be returned now. Channel ids restart with each connection, so a late discard
            // may drop a healthy channel of a new connection; that only costs the next batch a
            // channel_open.
            if let Some(channel) = used {
                match self.link.try_lock() {
                    Ok(mut link) => link.forget(&channel),
                    Err(_) => {
                        let link = self.link.clone();
                        tokio::spawn(async move { discard(&link, &channel).await });
                    }
                }
            }
        }
        unanswered_as_timeouts(results, batch, &deadline, "confirmed")
    }

    /// RabbitMQ, checked against `oncebox.outbox.sender.type` at start.
    fn transport(&self) -> Option<TransportKind> {
        Some(TransportKind::RabbitMq)
    }
}

impl RabbitSender {
    /// Publishes every message without waiting in between, then collects the confirms; fills
    /// `results` as outcomes become known so a timeout leaves only the unknown ones empty.
    /// `used` is set to the channel as soon as there is one, for the caller to discard on a timeout.
    async fn publish_all(
        &self,
        batch: &[OutboundMessage],
        results: &mut [Option<Result<(), SendError>>],
        deadline: Deadline,
        used: &mut Option<Channel>,
    ) {
        let channel = match self.channel(deadline).await {
            Ok(channel) => {
                *used = Some(channel.clone());
                channel
            }
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
        while let Some((index, outcome)) = confirms.next().await {
            let message = &batch[index];
            results[index] = Some(match outcome {
                Ok(confirmation) => confirmation_result(message, confirmation),
                Err(error) => {
                    channel_broken = true;
                    // lapin fails every pending confirm with the reason the channel closed (e.g.
                    // NOT_FOUND for a missing exchange), so nothing waits for a confirm that cannot come.
                    Err(broker(
                        format!(
                            "message {} was not confirmed: the channel to '{}' closed",
                            message.id, message.topic
                        ),
                        error,
                    ))
                }
            });
        }
        if channel_broken || !channel.status().connected() {
            self.discard(&channel).await;
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
        assert!(confirmation_result(&message, Confirmation::Ack(None)).is_ok());
        assert!(confirmation_result(&message, Confirmation::Nack(None)).is_err());
        assert!(confirmation_result(&message, Confirmation::NotRequested).is_err());
        let mut long = message.clone();
        long.topic = "x".repeat(300);
        assert!(prepare(&long).is_err_and(|error| error.kind() == ErrorKind::InvalidInput));
        assert!(prepare(&message).is_ok());
    }
}
