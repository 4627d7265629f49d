//! The testkit sender suite and the RabbitMQ-specific sender cases against a real broker
//! (`ONCEBOX_AMQP_URL`, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`).

mod support;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ExchangeKind};
use oncebox_core::{Deadline, ErrorKind, OutboundMessage, Result, Sender};
use oncebox_rabbit::{RabbitSender, RabbitSenderConfig};
use oncebox_testkit::case;
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail, server_missing};
use oncebox_testkit::sender_suite::{self, ReceivedMessage, SenderHarness, TestConsumer, test_message};

use support::{amqp_url, close_connections_named, fresh_name, header_text, plumbing, raw_channel};

/// Test consumers' queues refuse messages above this many bytes (`x-max-length-bytes` with
/// `x-overflow: reject-publish`), which RabbitMQ reports to the publisher as a nack; the broker's own
/// message size limit (128 MiB by default) is too large to exercise in a test.
const QUEUE_MAX_BYTES: usize = 256 * 1024;
/// A closed port: connecting fails at once.
const UNREACHABLE_URL: &str = "amqp://guest:guest@127.0.0.1:1/%2f";
/// Long enough for a healthy broker, short enough that a hang fails the test.
const EMERGENCY_TIMEOUT: Duration = Duration::from_secs(15);

struct RabbitHarness {
    url: String,
}

struct RabbitConsumer {
    // Kept open for the consumer's lifetime: the exclusive queue (and with it the auto-delete
    // exchange) disappears when this connection closes.
    _connection: Connection,
    _channel: Channel,
    consumer: lapin::Consumer,
}

#[oncebox_core::async_trait]
impl TestConsumer for RabbitConsumer {
    async fn next(&mut self, timeout: Duration) -> Result<Option<ReceivedMessage>> {
        match tokio::time::timeout(timeout, self.consumer.next()).await {
            Err(_) | Ok(None) => Ok(None),
            Ok(Some(Err(error))) => Err(plumbing("consuming", error)),
            Ok(Some(Ok(delivery))) => {
                let headers = delivery
                    .properties
                    .headers()
                    .as_ref()
                    .map(|table| {
                        table
                            .inner()
                            .iter()
                            .filter_map(|(name, value)| Some((name.as_str().to_owned(), header_text(value)?)))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Some(ReceivedMessage {
                    key: Some(delivery.routing_key.as_str().to_owned()),
                    payload: String::from_utf8_lossy(&delivery.data).into_owned(),
                    headers,
                }))
            }
        }
    }
}

fn short(value: &str) -> Result<ShortString> {
    ShortString::try_new(value).map_err(|error| plumbing("name", error))
}

/// Declares `exchange` as an auto-delete topic exchange.
async fn declare_exchange(channel: &Channel, exchange: &str, auto_delete: bool) -> Result<()> {
    channel
        .exchange_declare(
            short(exchange)?,
            ExchangeKind::Topic,
            ExchangeDeclareOptions { auto_delete, ..ExchangeDeclareOptions::default() },
            FieldTable::default(),
        )
        .await
        .map_err(|error| plumbing("declaring the exchange", error))
}

impl RabbitHarness {
    fn config(&self) -> RabbitSenderConfig {
        RabbitSenderConfig::new(self.url.clone())
    }
}

#[oncebox_core::async_trait]
impl SenderHarness for RabbitHarness {
    type Sender = RabbitSender;

    async fn sender(&self, _topic: &str) -> Result<RabbitSender> {
        RabbitSender::new(self.config())
    }

    async fn unreachable_sender(&self) -> Result<RabbitSender> {
        RabbitSender::new(RabbitSenderConfig::new(UNREACHABLE_URL))
    }

    async fn consumer(&self, topic: &str) -> Result<Box<dyn TestConsumer>> {
        let (connection, channel) = raw_channel(&self.url).await?;
        declare_exchange(&channel, topic, true).await?;
        let mut arguments = FieldTable::default();
        arguments.insert(short("x-max-length-bytes")?, AMQPValue::LongLongInt(QUEUE_MAX_BYTES as i64));
        arguments.insert(short("x-overflow")?, AMQPValue::LongString(LongString::from("reject-publish")));
        let queue = channel
            .queue_declare(
                short("")?,
                QueueDeclareOptions { exclusive: true, auto_delete: true, ..QueueDeclareOptions::default() },
                arguments,
            )
            .await
            .map_err(|error| plumbing("declaring the queue", error))?;
        channel
            .queue_bind(
                queue.name().clone(),
                short(topic)?,
                short("#")?,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|error| plumbing("binding the queue", error))?;
        let consumer = channel
            .basic_consume(
                queue.name().clone(),
                short("")?,
                BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() },
                FieldTable::default(),
            )
            .await
            .map_err(|error| plumbing("consuming", error))?;
        Ok(Box::new(RabbitConsumer { _connection: connection, _channel: channel, consumer }))
    }

    fn fresh_topic(&self) -> String {
        fresh_name("exchange")
    }

    fn oversized_payload(&self) -> Option<String> {
        Some("x".repeat(QUEUE_MAX_BYTES + 1))
    }
}

async fn delete_exchange(channel: &Channel, exchange: &str) -> Result<()> {
    channel
        .exchange_delete(short(exchange)?, ExchangeDeleteOptions::default())
        .await
        .map_err(|error| plumbing("deleting the exchange", error))
}

async fn an_exchange_without_queues_fails_the_event_as_unroutable(harness: Arc<RabbitHarness>) -> TestResult {
    let exchange = fresh_name("unroutable");
    let (connection, channel) = raw_channel(&harness.url).await.map_err(fail)?;
    declare_exchange(&channel, &exchange, false).await.map_err(fail)?;
    let sender = harness.sender(&exchange).await.map_err(fail)?;
    let batch = vec![test_message(&exchange, 0), test_message(&exchange, 1)];
    let results = sender.send(&batch, Deadline::after(EMERGENCY_TIMEOUT)).await;
    delete_exchange(&channel, &exchange).await.map_err(fail)?;
    drop(connection);
    assert_eq!(results.len(), 2, "one result per message");
    for result in &results {
        let error =
            result.as_ref().err().ok_or_else(|| fail("an unroutable message counted as delivered"))?;
        assert_eq!(error.kind(), ErrorKind::Broker);
        assert!(error.to_string().contains("unroutable"), "{error}");
        assert!(!error.is_temporary(), "nothing will route it until someone binds a queue: {error}");
    }
    Ok(())
}

async fn a_missing_exchange_fails_the_batch_without_hanging(harness: Arc<RabbitHarness>) -> TestResult {
    let missing = fresh_name("missing");
    let sender = harness.sender(&missing).await.map_err(fail)?;
    let batch: Vec<_> = (0..5).map(|index| test_message(&missing, index)).collect();
    // Well below the emergency timeout: the closed channel must fail the confirms by itself.
    let results =
        tokio::time::timeout(Duration::from_secs(5), sender.send(&batch, Deadline::after(EMERGENCY_TIMEOUT)))
            .await
            .map_err(|_| fail("send to a missing exchange hung"))?;
    assert_eq!(results.len(), batch.len(), "one result per message");
    for result in &results {
        let error = result.as_ref().err().ok_or_else(|| fail("a message to a missing exchange succeeded"))?;
        assert_eq!(error.kind(), ErrorKind::Broker, "{error}");
    }
    // The same sender opens a new channel for the next batch.
    let topic = harness.fresh_topic();
    let mut consumer = harness.consumer(&topic).await.map_err(fail)?;
    let good = test_message(&topic, 9);
    let results = sender.send(std::slice::from_ref(&good), Deadline::after(EMERGENCY_TIMEOUT)).await;
    assert!(results.iter().all(Result::is_ok), "the next batch should be delivered: {results:?}");
    let got = consumer.next(Duration::from_secs(10)).await.map_err(fail)?;
    assert!(got.is_some(), "the next batch never arrived");
    Ok(())
}

async fn the_sender_recovers_after_its_connection_is_closed(harness: Arc<RabbitHarness>) -> TestResult {
    let name = fresh_name("connection");
    let sender = RabbitSender::new(
        harness
            .config()
            .with_connection_name(name.clone())
            .with_reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200)),
    )
    .map_err(fail)?;
    let topic = harness.fresh_topic();
    let mut consumer = harness.consumer(&topic).await.map_err(fail)?;
    let first = test_message(&topic, 0);
    assert!(
        sender
            .send(std::slice::from_ref(&first), Deadline::after(EMERGENCY_TIMEOUT))
            .await
            .iter()
            .all(Result::is_ok)
    );

    let closed = close_connections_named(&name).map_err(fail)?;
    assert_eq!(closed, 1, "the sender's connection should be listed by rabbitmqctl");

    let second = test_message(&topic, 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let results = sender.send(std::slice::from_ref(&second), Deadline::after(EMERGENCY_TIMEOUT)).await;
        match results.first() {
            Some(Ok(())) => break,
            Some(Err(error)) => {
                assert!(error.is_temporary(), "a closed connection is a temporary failure: {error}");
                if tokio::time::Instant::now() >= deadline {
                    return Err(fail(format!("the sender did not recover: {error}")));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            None => return Err(fail("no result for a one-message batch")),
        }
    }
    let mut seen = Vec::new();
    while let Some(message) = consumer.next(Duration::from_secs(10)).await.map_err(fail)? {
        seen.push(message.payload);
        if seen.len() == 2 {
            break;
        }
    }
    assert!(seen.contains(&second.payload), "the message sent after reconnecting never arrived: {seen:?}");
    sender.close().await.map_err(fail)?;
    Ok(())
}

/// Messages per `send` in the mixed-routing case: enough that RabbitMQ coalesces confirms
/// (`multiple=true` acks) and returns interleave with them.
const MIXED_BATCH: usize = 400;
/// Rounds of each shape in the mixed-routing case; a wrong pairing showed within one or two.
const MIXED_ROUNDS: usize = 5;

/// A batch of `MIXED_BATCH` messages alternating event types `a` (routable) and `b` (unroutable).
fn mixed_batch(exchange: &str) -> Vec<OutboundMessage> {
    (0..MIXED_BATCH)
        .map(|index| {
            let mut message = test_message(exchange, index);
            message.event_type = if index % 2 == 0 { "a" } else { "b" }.to_owned();
            message
        })
        .collect()
}

/// Checks that every `a` message was confirmed and every `b` one failed as unroutable; returns how
/// many were confirmed.
fn check_mixed(
    batch: &[OutboundMessage],
    results: &[std::result::Result<(), oncebox_core::SendError>],
) -> Result<usize, Failed> {
    assert_eq!(results.len(), batch.len(), "one result per message");
    let mut wrong = Vec::new();
    for (message, result) in batch.iter().zip(results) {
        match (message.event_type.as_str(), result) {
            ("a", Ok(())) => {}
            ("b", Err(error))
                if error.to_string().contains("unroutable")
                    && error.to_string().contains(&message.id.to_string()) => {}
            (event_type, result) => wrong.push(format!("{event_type} {}: {result:?}", message.id)),
        }
    }
    if wrong.is_empty() {
        Ok(batch.len() / 2)
    } else {
        Err(fail(format!(
            "{} of {} results belong to another message, e.g. {:?}",
            wrong.len(),
            batch.len(),
            &wrong[..wrong.len().min(3)]
        )))
    }
}

async fn each_returned_message_fails_itself_and_no_other(harness: Arc<RabbitHarness>) -> TestResult {
    let exchange = fresh_name("mixed");
    let queue = fresh_name("mixed-a");
    let (connection, channel) = raw_channel(&harness.url).await.map_err(fail)?;
    channel
        .exchange_declare(
            short(&exchange).map_err(fail)?,
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(fail)?;
    channel
        .queue_declare(short(&queue).map_err(fail)?, QueueDeclareOptions::default(), FieldTable::default())
        .await
        .map_err(fail)?;
    channel
        .queue_bind(
            short(&queue).map_err(fail)?,
            short(&exchange).map_err(fail)?,
            short("a").map_err(fail)?,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(fail)?;
    let sender = harness.sender(&exchange).await.map_err(fail)?;
    let mut routed = 0;
    let outcome = async {
        for _ in 0..MIXED_ROUNDS {
            let batch = mixed_batch(&exchange);
            routed += check_mixed(&batch, &sender.send(&batch, Deadline::after(EMERGENCY_TIMEOUT)).await)?;
        }
        for _ in 0..MIXED_ROUNDS {
            let (first, second) = (mixed_batch(&exchange), mixed_batch(&exchange));
            let (first_results, second_results) = tokio::join!(
                sender.send(&first, Deadline::after(EMERGENCY_TIMEOUT)),
                sender.send(&second, Deadline::after(EMERGENCY_TIMEOUT))
            );
            routed += check_mixed(&first, &first_results)?;
            routed += check_mixed(&second, &second_results)?;
        }
        let held = channel
            .queue_declare(
                short(&queue).map_err(fail)?,
                QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() },
                FieldTable::default(),
            )
            .await
            .map_err(fail)?
            .message_count() as usize;
        assert_eq!(held, routed, "the queue holds exactly the confirmed messages");
        Ok::<(), Failed>(())
    }
    .await;
    sender.close().await.map_err(fail)?;
    channel.queue_delete(short(&queue).map_err(fail)?, QueueDeleteOptions::default()).await.map_err(fail)?;
    delete_exchange(&channel, &exchange).await.map_err(fail)?;
    drop(connection);
    outcome
}

fn rabbit_cases() -> Vec<Case<RabbitHarness>> {
    vec![
        case!(
            "each_returned_message_fails_itself_and_no_other",
            each_returned_message_fails_itself_and_no_other
        ),
        case!(
            "an_exchange_without_queues_fails_the_event_as_unroutable",
            an_exchange_without_queues_fails_the_event_as_unroutable
        ),
        case!(
            "a_missing_exchange_fails_the_batch_without_hanging",
            a_missing_exchange_fails_the_batch_without_hanging
        ),
        case!(
            "the_sender_recovers_after_its_connection_is_closed",
            the_sender_recovers_after_its_connection_is_closed
        ),
    ]
}

fn main() -> ExitCode {
    let Some(url) = amqp_url() else {
        return server_missing("rabbit sender", support::URL_VARIABLE);
    };
    let harness = Arc::new(RabbitHarness { url });
    Suite::new()
        .add("sender", harness.clone(), sender_suite::cases())
        .add("rabbit", harness, rabbit_cases())
        .run()
}
