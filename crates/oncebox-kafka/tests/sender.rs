//! The testkit sender suite against a real Kafka-protocol broker (`ONCEBOX_KAFKA_BOOTSTRAP`,
//! default `127.0.0.1:9092` under `CI=true`; a broker that does not answer skips the suite, or fails
//! it under `CI=true`). Every test uses a fresh topic created through the admin API.

mod support;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::{Error, ErrorKind, Result};
use oncebox_kafka::{KafkaSender, KafkaSenderConfig};
use oncebox_testkit::case;
use oncebox_testkit::runner::{Suite, TestResult, fail};
use oncebox_testkit::sender_suite::{self, ReceivedMessage, SenderHarness, TestConsumer};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};

/// The sender's local record size limit in these tests (librdkafka's `message.max.bytes`).
const MAX_RECORD_BYTES: usize = 256 * 1024;

fn plumbing(context: &str, error: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("{context}: {error}"))
}

struct KafkaHarness {
    bootstrap: String,
}

impl KafkaHarness {
    async fn create_topic(&self, topic: &str) -> Result<()> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|error| plumbing("admin client", error))?;
        let results = admin
            .create_topics(&[NewTopic::new(topic, 1, TopicReplication::Fixed(1))], &AdminOptions::new())
            .await
            .map_err(|error| plumbing("creating the topic", error))?;
        for result in results {
            result.map_err(|(name, code)| plumbing(&format!("creating topic {name}"), code))?;
        }
        Ok(())
    }
}

struct KafkaConsumer {
    consumer: StreamConsumer,
}

#[oncebox_core::async_trait]
impl TestConsumer for KafkaConsumer {
    async fn next(&mut self, timeout: Duration) -> Result<Option<ReceivedMessage>> {
        match tokio::time::timeout(timeout, self.consumer.recv()).await {
            Err(_) => Ok(None),
            Ok(Err(error)) => Err(plumbing("consuming", error)),
            Ok(Ok(message)) => {
                let headers = message
                    .headers()
                    .map(|list| {
                        list.iter()
                            .map(|header| {
                                let value = header.value.map(String::from_utf8_lossy).unwrap_or_default();
                                (header.key.to_owned(), value.into_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Some(ReceivedMessage {
                    key: message.key().map(|key| String::from_utf8_lossy(key).into_owned()),
                    payload: message.payload().map(String::from_utf8_lossy).unwrap_or_default().into_owned(),
                    headers,
                }))
            }
        }
    }
}

#[oncebox_core::async_trait]
impl SenderHarness for KafkaHarness {
    type Sender = KafkaSender;

    async fn sender(&self, _topic: &str) -> Result<KafkaSender> {
        KafkaSender::new(
            KafkaSenderConfig::new(self.bootstrap.clone())
                .with_producer_property("message.max.bytes", MAX_RECORD_BYTES.to_string()),
        )
    }

    async fn unreachable_sender(&self) -> Result<KafkaSender> {
        KafkaSender::new(KafkaSenderConfig::new("127.0.0.1:1"))
    }

    async fn consumer(&self, topic: &str) -> Result<Box<dyn TestConsumer>> {
        self.create_topic(topic).await?;
        let consumer: StreamConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", format!("{topic}-reader"))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|error| plumbing("test consumer", error))?;
        consumer.subscribe(&[topic]).map_err(|error| plumbing("subscribing", error))?;
        Ok(Box::new(KafkaConsumer { consumer }))
    }

    fn fresh_topic(&self) -> String {
        format!("oncebox-test-{}", uuid::Uuid::new_v4().simple())
    }

    fn oversized_payload(&self) -> Option<String> {
        Some("x".repeat(MAX_RECORD_BYTES + 1))
    }
}

fn main() -> ExitCode {
    let bootstrap = match support::broker_or_exit("kafka sender") {
        Ok(bootstrap) => bootstrap,
        Err(code) => return code,
    };
    let harness = Arc::new(KafkaHarness { bootstrap });
    Suite::new()
        .add("sender", harness.clone(), sender_suite::cases())
        .add(
            "connect",
            harness,
            vec![
                case!("connect_answers_when_the_cluster_does", connect_answers_when_the_cluster_does),
                case!(
                    "connect_names_an_unreachable_bootstrap_address",
                    connect_names_an_unreachable_bootstrap_address
                ),
            ],
        )
        .run()
}

async fn connect_answers_when_the_cluster_does(harness: Arc<KafkaHarness>) -> TestResult {
    let sender = KafkaSender::new(KafkaSenderConfig::new(harness.bootstrap.clone())).map_err(fail)?;
    sender.connect(Duration::from_secs(30)).await.map_err(fail)
}

async fn connect_names_an_unreachable_bootstrap_address(_harness: Arc<KafkaHarness>) -> TestResult {
    // Nothing listens on port 1: the check fails within its timeout instead of at the first send.
    let sender = KafkaSender::new(KafkaSenderConfig::new("127.0.0.1:1")).map_err(fail)?;
    let Err(error) = sender.connect(Duration::from_secs(2)).await else {
        return Err(fail("connect succeeded against a closed port"));
    };
    let message = error.to_string();
    if error.kind() == ErrorKind::Broker && message.contains("127.0.0.1:1") && error.is_temporary() {
        Ok(())
    } else {
        Err(fail(format!("the error should be a temporary broker error naming the address: {message}")))
    }
}
