//! The RabbitMQ objects a benchmark publishes into: a fresh durable direct exchange and one
//! durable queue bound for the event types it publishes, deleted at the end.

use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use crate::{BenchResult, fresh_name};

/// The broker objects of one run.
#[derive(Debug, Clone)]
pub struct Topology {
    /// The exchange (the sender's topic).
    pub exchange: String,
    /// The durable queue bound to it.
    pub queue: String,
}

impl Topology {
    /// Fresh names; nothing is declared yet.
    pub fn fresh() -> Self {
        Self { exchange: fresh_name("oncebox-bench-exchange-"), queue: fresh_name("oncebox-bench-queue-") }
    }

    /// Declares the exchange and the queue and binds them for each of `routing_keys` (the event
    /// types).
    pub async fn declare(&self, channel: &Channel, routing_keys: &[String]) -> BenchResult<()> {
        self.declare_with(channel, routing_keys, FieldTable::default()).await
    }

    /// [`declare`](Self::declare) with the queue's `arguments` (`x-max-length`, …).
    pub async fn declare_with(
        &self,
        channel: &Channel,
        routing_keys: &[String],
        arguments: FieldTable,
    ) -> BenchResult<()> {
        channel
            .exchange_declare(
                ShortString::from(self.exchange.as_str()),
                ExchangeKind::Direct,
                ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() },
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_declare(
                ShortString::from(self.queue.as_str()),
                QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() },
                arguments,
            )
            .await?;
        for key in routing_keys {
            channel
                .queue_bind(
                    ShortString::from(self.queue.as_str()),
                    ShortString::from(self.exchange.as_str()),
                    ShortString::from(key.as_str()),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        Ok(())
    }

    /// Deletes the queue and the exchange.
    pub async fn clean_up(&self, channel: &Channel) -> BenchResult<()> {
        channel.queue_delete(ShortString::from(self.queue.as_str()), QueueDeleteOptions::default()).await?;
        channel
            .exchange_delete(ShortString::from(self.exchange.as_str()), ExchangeDeleteOptions::default())
            .await?;
        Ok(())
    }
}
