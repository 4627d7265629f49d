//! [`RabbitTopology`]: the exchanges, queues and bindings a listener declares for itself.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, ExchangeKind};
use oncebox_core::{Error, Result};

use crate::error::broker;

/// The exchange, queue and bindings the listener declares when `declare` is on. Everything is
/// durable; the queue gets `x-dead-letter-exchange` when a dead-letter exchange is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RabbitTopology {
    /// Topic exchange the events are published to (the event types' `topic`).
    pub exchange: String,
    /// Binding keys from the exchange to the queue; empty means "every registered event type".
    pub binding_keys: Vec<String>,
    /// Fanout exchange that receives rejected messages.
    pub dead_letter_exchange: Option<String>,
    /// Queue bound to the dead-letter exchange, where people find poison messages.
    pub dead_letter_queue: Option<String>,
}

impl RabbitTopology {
    /// Topology for `exchange`, bound by every registered event type, without dead-lettering.
    pub fn new(exchange: impl Into<String>) -> Self {
        Self {
            exchange: exchange.into(),
            binding_keys: Vec::new(),
            dead_letter_exchange: None,
            dead_letter_queue: None,
        }
    }

    /// Dead-letters rejected messages to `exchange` (fanout) and the queue `queue` bound to it.
    #[must_use]
    pub fn with_dead_letter(mut self, exchange: impl Into<String>, queue: impl Into<String>) -> Self {
        self.dead_letter_exchange = Some(exchange.into());
        self.dead_letter_queue = Some(queue.into());
        self
    }

    /// Binds with these keys instead of the registered event types.
    #[must_use]
    pub fn with_binding_keys(mut self, keys: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.binding_keys = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Declares the exchange, the dead-letter exchange and queue when named, and `queue` bound
    /// by the binding keys, or by `event_types` when there are none. Declaring what exists with
    /// the same arguments changes nothing, so every (re)connect does it.
    pub(crate) async fn declare(
        &self,
        channel: &Channel,
        queue: &ShortString,
        event_types: &[&str],
    ) -> Result<()> {
        let exchange = short("rabbit.listener.declare.exchange", &self.exchange)?;
        declare_exchange(channel, &exchange, ExchangeKind::Topic).await?;
        let mut arguments = FieldTable::default();
        if let Some(dead_letter) = &self.dead_letter_exchange {
            let dead_letter_exchange = short("rabbit.listener.declare.dead-letter-exchange", dead_letter)?;
            declare_exchange(channel, &dead_letter_exchange, ExchangeKind::Fanout).await?;
            let value = AMQPValue::LongString(LongString::from(dead_letter.clone()));
            arguments.insert(ShortString::from("x-dead-letter-exchange"), value);
            if let Some(dead_letter_queue) = &self.dead_letter_queue {
                let name = short("rabbit.listener.declare.dead-letter-queue", dead_letter_queue)?;
                declare_queue(channel, &name, FieldTable::default()).await?;
                bind(channel, &name, &dead_letter_exchange, &ShortString::from("")).await?;
            }
        }
        declare_queue(channel, queue, arguments).await?;
        let keys = if self.binding_keys.is_empty() {
            event_types.iter().map(|key| (*key).to_owned()).collect()
        } else {
            self.binding_keys.clone()
        };
        for key in keys {
            bind(channel, queue, &exchange, &short("rabbit.listener.declare.binding-keys", &key)?).await?;
        }
        Ok(())
    }
}

/// `value` as an AMQP short string; one over 255 bytes is a configuration error naming `what`.
pub(crate) fn short(what: &str, value: &str) -> Result<ShortString> {
    ShortString::try_new(value)
        .map_err(|error| Error::config(what, "longer than 255 bytes").with_source(error))
}

async fn declare_exchange(channel: &Channel, name: &ShortString, kind: ExchangeKind) -> Result<()> {
    let durable = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
    channel
        .exchange_declare(name.clone(), kind, durable, FieldTable::default())
        .await
        .map_err(|error| broker(format!("declaring exchange '{}'", name.as_str()), error))
}

async fn declare_queue(channel: &Channel, name: &ShortString, arguments: FieldTable) -> Result<()> {
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel
        .queue_declare(name.clone(), durable, arguments)
        .await
        .map(drop)
        .map_err(|error| broker(format!("declaring queue '{}'", name.as_str()), error))
}

async fn bind(
    channel: &Channel,
    queue: &ShortString,
    exchange: &ShortString,
    key: &ShortString,
) -> Result<()> {
    channel
        .queue_bind(
            queue.clone(),
            exchange.clone(),
            key.clone(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|error| {
            broker(
                format!(
                    "binding queue '{}' to '{}' with key '{}'",
                    queue.as_str(),
                    exchange.as_str(),
                    key.as_str()
                ),
                error,
            )
        })
}
