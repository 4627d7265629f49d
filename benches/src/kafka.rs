//! Kafka set-up and the raw producer the benchmarks share.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};

use crate::pg_backlog::{RawRecord, RawSend};
use crate::{BenchResult, fresh_name};

/// Creates a fresh single-partition topic named `<stem><8 hex digits>` and returns its name.
pub async fn create_topic(bootstrap: &str, stem: &str) -> BenchResult<String> {
    let topic = fresh_name(stem);
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    for result in admin
        .create_topics(&[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await?
    {
        result.map_err(|(name, code)| format!("creating topic {name}: {code}"))?;
    }
    Ok(topic)
}

/// The raw producer: the `KafkaSender`'s delivery settings (`acks=all`, idempotence, the delivery
/// timeout) and nothing else.
pub fn raw_producer(bootstrap: &str, delivery_timeout: Duration) -> BenchResult<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", delivery_timeout.as_millis().to_string())
        .create()?)
}

/// Enqueues every `(key, payload)` record to `topic`, waiting for the oldest delivery when the
/// local queue is full, then awaits every delivery report; returns how many were acknowledged.
pub async fn produce_all<'a>(
    producer: &FutureProducer,
    topic: &str,
    records: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BenchResult<u64> {
    let mut pending: VecDeque<DeliveryFuture> = VecDeque::new();
    let mut acknowledged = 0u64;
    for (key, payload) in records {
        loop {
            match producer.send_result(FutureRecord::to(topic).key(key).payload(payload)) {
                Ok(delivery) => {
                    pending.push_back(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    let oldest = pending.pop_front().ok_or("queue full with nothing of ours in it")?;
                    oldest.await?.map_err(|(error, _)| error)?;
                    acknowledged += 1;
                }
                Err((error, _)) => return Err(error.into()),
            }
        }
    }
    for delivery in pending {
        delivery.await?.map_err(|(error, _)| error)?;
        acknowledged += 1;
    }
    Ok(acknowledged)
}

/// The raw loop's send to Kafka: each claimed batch produced whole (key and payload only, no
/// headers), every delivery awaited before the batch is settled.
pub struct RawKafkaSend {
    /// The producer, shared by every worker as one process would share it.
    pub producer: FutureProducer,
    /// The topic produced to.
    pub topic: String,
}

#[async_trait]
impl RawSend for RawKafkaSend {
    async fn send(&self, records: &[RawRecord]) -> BenchResult<()> {
        let keys: Vec<String> = records.iter().map(RawRecord::key).collect();
        let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(records.len());
        for (key, record) in keys.iter().zip(records) {
            pairs.push((key, &record.payload));
        }
        let acknowledged = produce_all(&self.producer, &self.topic, pairs).await?;
        if acknowledged != records.len() as u64 {
            return Err(format!("{acknowledged} of {} records acknowledged", records.len()).into());
        }
        Ok(())
    }
}
