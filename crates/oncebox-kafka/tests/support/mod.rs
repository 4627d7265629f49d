//! Helpers shared by the test binaries: the broker address (and whether it answers), fresh names,
//! topic creation, raw records, committed offsets and a reader for any topic, all independent of the
//! code under test; and what that code logs ([`log_lines`]).

#![allow(dead_code)]

pub mod log_lines;

use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use oncebox_core::{Error, ErrorKind, Result};
use oncebox_testkit::runner::in_ci;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

/// The variable naming the broker under test.
pub const VARIABLE: &str = "ONCEBOX_KAFKA_BOOTSTRAP";

/// The bootstrap address: `ONCEBOX_KAFKA_BOOTSTRAP`, or `127.0.0.1:9092` under `CI=true`.
pub fn bootstrap() -> Option<String> {
    match std::env::var(VARIABLE) {
        Ok(value) if !value.is_empty() => Some(value),
        _ if in_ci() => Some("127.0.0.1:9092".to_owned()),
        _ => None,
    }
}

/// The broker to test against, or the exit code of a suite that cannot run: a missing or
/// unreachable broker skips loudly, and fails under `CI=true`.
pub fn broker_or_exit(suite: &str) -> std::result::Result<String, ExitCode> {
    let Some(bootstrap) = bootstrap() else {
        return Err(oncebox_testkit::runner::server_missing(suite, VARIABLE));
    };
    let first = bootstrap.split(',').next().unwrap_or_default().trim().to_owned();
    let answers = first
        .to_socket_addrs()
        .ok()
        .into_iter()
        .flatten()
        .any(|address| TcpStream::connect_timeout(&address, Duration::from_secs(3)).is_ok());
    if answers {
        return Ok(bootstrap);
    }
    if in_ci() {
        eprintln!(
            "FAILED: {suite}: no Kafka broker answers at {bootstrap} ({VARIABLE}), and CI=true requires it"
        );
        Err(ExitCode::FAILURE)
    } else {
        eprintln!("SKIPPED: {suite}: no Kafka broker answers at {bootstrap} ({VARIABLE})");
        Err(ExitCode::SUCCESS)
    }
}

/// A topic or group name no other test (in this or a concurrent run) uses.
pub fn fresh_name(prefix: &str) -> String {
    format!("oncebox-test-{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Maps any displayable failure of test plumbing to an error.
pub fn plumbing(context: &str, error: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("{context}: {error}"))
}

/// Creates single-partition topics through the admin API (tansu creates none on first use).
pub async fn create_topics(bootstrap: &str, topics: &[&str]) -> Result<()> {
    create_topics_with_partitions(bootstrap, topics, 1).await
}

/// Creates topics of `partitions` partitions each through the admin API.
pub async fn create_topics_with_partitions(bootstrap: &str, topics: &[&str], partitions: i32) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|error| plumbing("admin client", error))?;
    let new: Vec<NewTopic<'_>> =
        topics.iter().map(|topic| NewTopic::new(topic, partitions, TopicReplication::Fixed(1))).collect();
    let results = admin
        .create_topics(&new, &AdminOptions::new())
        .await
        .map_err(|error| plumbing("creating topics", error))?;
    for result in results {
        result.map_err(|(name, code)| plumbing(&format!("creating topic {name}"), code))?;
    }
    Ok(())
}

/// A plain producer for records a foreign producer might send (odd or missing headers).
pub fn raw_producer(bootstrap: &str) -> Result<FutureProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .create()
        .map_err(|error| plumbing("raw producer", error))
}

/// Produces one record with `headers` (raw values) and waits for its delivery report.
pub async fn produce_raw(
    producer: &FutureProducer,
    topic: &str,
    headers: &[(&str, &[u8])],
    payload: &[u8],
) -> Result<()> {
    produce_raw_to(producer, topic, None, headers, payload).await
}

/// As [`produce_raw`], to `partition` when given (else the producer's partitioner picks).
pub async fn produce_raw_to(
    producer: &FutureProducer,
    topic: &str,
    partition: Option<i32>,
    headers: &[(&str, &[u8])],
    payload: &[u8],
) -> Result<()> {
    let owned = headers
        .iter()
        .fold(OwnedHeaders::new(), |list, (key, value)| list.insert(Header { key, value: Some(*value) }));
    let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(owned).payload(payload);
    if let Some(partition) = partition {
        record = record.partition(partition);
    }
    producer
        .send(record, Duration::from_secs(10))
        .await
        .map(|_| ())
        .map_err(|(error, _)| plumbing("producing a raw record", error))
}

/// The offset `group` committed for partition 0 of `topic`, read from the group coordinator;
/// `None` when the group committed nothing there.
pub fn committed_offset(bootstrap: &str, group: &str, topic: &str) -> Result<Option<i64>> {
    committed_offset_at(bootstrap, group, topic, 0)
}

/// As [`committed_offset`], for `partition`.
pub fn committed_offset_at(bootstrap: &str, group: &str, topic: &str, partition: i32) -> Result<Option<i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|error| plumbing("offset reader", error))?;
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    let committed = consumer
        .committed_offsets(list, Duration::from_secs(10))
        .map_err(|error| plumbing("reading committed offsets", error))?;
    match committed.find_partition(topic, partition).map(|element| element.offset()) {
        Some(Offset::Offset(offset)) => Ok(Some(offset)),
        _ => Ok(None),
    }
}

/// Reads every record of `topic` from the beginning with a throw-away group, until `count`
/// arrived or `wait` passed.
pub async fn read_topic(
    bootstrap: &str,
    topic: &str,
    count: usize,
    wait: Duration,
) -> Result<Vec<OwnedMessage>> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", fresh_name("reader"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|error| plumbing("topic reader", error))?;
    consumer.subscribe(&[topic]).map_err(|error| plumbing("subscribing the reader", error))?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut records = Vec::new();
    while records.len() < count {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Err(_) => break,
            Ok(Ok(message)) => records.push(message.detach()),
            Ok(Err(error)) => return Err(plumbing("reading the topic", error)),
        }
    }
    Ok(records)
}

/// The value of header `name` of `record`, as text.
pub fn header(record: &OwnedMessage, name: &str) -> Option<String> {
    use rdkafka::message::Headers as _;
    record
        .headers()?
        .iter()
        .find(|header| header.key == name)
        .and_then(|header| header.value.map(|value| String::from_utf8_lossy(value).into_owned()))
}
