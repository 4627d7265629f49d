//! A property of the Kafka-protocol broker that the chaos ledger relies on, checked on its own:
//! a consumer reading the tail of a partition while several producers append to it receives
//! every offset. oncebox commits a partition's offset past what its handler finished, so a
//! broker that hands a tail reader offset `n + 1` before `n` is readable loses `n` for the group
//! for good, and the ledger counts it lost.
//!
//! Opt-in (`--ignored`): tansu 0.6.0, the broker CI runs, fails it now and then (a few records in
//! a hundred thousand); docs/reliability.md has the measurements. Run it against any broker with
//! `cargo test -p oncebox-integration-tests --test kafka_broker -- --ignored --nocapture`.

use std::collections::BTreeSet;
use std::error::Error;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

type TestResult = Result<(), Box<dyn Error>>;

/// Producers appending at once, and records each sends.
const PRODUCERS: usize = 8;
const RECORDS_PER_PRODUCER: usize = 10_000;
/// How long a broker call of the set-up may take.
const CALL: Duration = Duration::from_secs(10);

fn bootstrap() -> Option<String> {
    match std::env::var("ONCEBOX_KAFKA_BOOTSTRAP") {
        Ok(bootstrap) => Some(bootstrap),
        Err(_) if oncebox_testkit::runner::in_ci() => {
            panic!("ONCEBOX_KAFKA_BOOTSTRAP is not set; CI needs the Kafka-protocol broker")
        }
        Err(_) => {
            eprintln!("SKIPPED: ONCEBOX_KAFKA_BOOTSTRAP is not set");
            None
        }
    }
}

fn consumer(bootstrap: &str, topic: &str, from: Offset) -> Result<BaseConsumer, Box<dyn Error>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}_reader"))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, from)?;
    consumer.assign(&list)?;
    Ok(consumer)
}

/// Appends `RECORDS_PER_PRODUCER` records, one per batch as the chaos relays send them.
fn produce(bootstrap: &str, topic: &str, producer: usize) -> Result<(), String> {
    let client: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        .create()
        .map_err(|error| format!("producer {producer}: {error}"))?;
    for record in 0..RECORDS_PER_PRODUCER {
        let payload = format!("{producer}-{record}");
        let mut pending = BaseRecord::<(), String>::to(topic).partition(0).payload(&payload);
        // A full local queue hands the record back; wait for room and offer it again.
        while let Err((error, returned)) = client.send(pending) {
            if !matches!(error.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::QueueFull)) {
                return Err(format!("producer {producer}: {error}"));
            }
            std::thread::sleep(Duration::from_millis(5));
            pending = returned;
        }
    }
    client.flush(Duration::from_secs(60)).map_err(|error| format!("producer {producer}: {error}"))
}

#[test]
#[ignore = "tansu 0.6.0 fails it now and then; see docs/reliability.md"]
fn a_tail_reader_receives_every_offset_while_producers_append() -> TestResult {
    let Some(bootstrap) = bootstrap() else {
        return Ok(());
    };
    let topic = format!("oncebox_tail_probe_{}", uuid::Uuid::now_v7().simple());
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(admin.create_topics(
        [&NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(CALL)),
    ))?;

    let tail = consumer(&bootstrap, &topic, Offset::Beginning)?;
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
            std::thread::spawn(move || produce(&bootstrap, &topic, producer))
        })
        .collect();

    let total = (PRODUCERS * RECORDS_PER_PRODUCER) as i64;
    let mut received = BTreeSet::new();
    let mut skipped = Vec::new();
    let mut next = 0_i64;
    while next < total {
        let Some(message) = tail.poll(Duration::from_millis(200)) else {
            if producers.iter().all(std::thread::JoinHandle::is_finished) {
                let (_, high) = tail.fetch_watermarks(&topic, 0, CALL)?;
                if next >= high {
                    break;
                }
            }
            continue;
        };
        let offset = message?.offset();
        if offset > next {
            skipped.extend(next..offset);
        }
        received.insert(offset);
        next = next.max(offset + 1);
    }
    for producer in producers {
        producer.join().map_err(|_| "a producer thread panicked")??;
    }

    // Whatever the tail reader missed, read again directly: present means the broker stored it
    // and skipped it on the tail only.
    let mut stored_but_skipped = Vec::new();
    for &offset in &skipped {
        let reread = consumer(&bootstrap, &topic, Offset::Offset(offset))?;
        if let Some(Ok(message)) = reread.poll(CALL)
            && message.offset() == offset
        {
            stored_but_skipped.push(offset);
        }
    }
    // The topic is left in place: librdkafka 2.x has crashed here (SIGSEGV in its metadata cache)
    // on the metadata tansu sends for deleted topics, and the broker's storage is memory anyway.

    eprintln!(
        "{total} records from {PRODUCERS} producers: the tail reader received {}, skipped {skipped:?}, \
         of which readable afterwards {stored_but_skipped:?}",
        received.len()
    );
    assert!(
        skipped.is_empty(),
        "the tail reader skipped offsets {skipped:?} of {total} (readable afterwards: {stored_but_skipped:?})"
    );
    assert_eq!(received.len() as i64, total, "records received by the tail reader");
    Ok(())
}
