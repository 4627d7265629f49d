//! Every YAML example of the Java library's README (and of the article that presents it), loaded
//! verbatim from `tests/seed-config/`. Each one either loads, with its values checked, or fails with
//! the message designed for it: the key it names and what to do in oncebox instead. Where an example
//! fails only because of a placeholder (`events:` with just a comment) or a key oncebox refuses
//! (`mappings`), the rest of it is loaded too, so every other key of the example is checked.

use std::time::Duration;

use oncebox_core::config::{DEFAULT_CACHE_NAME, Polling, TransportKind};
use oncebox_core::{Config, ErrorKind};

type TestResult = Result<(), Box<dyn std::error::Error>>;

macro_rules! seed {
    ($name:literal) => {
        include_str!(concat!("seed-config/", $name, ".yaml"))
    };
}

/// The error `text` fails with, which must be a configuration error.
fn refusal(text: &str) -> String {
    match Config::from_yaml_str(text) {
        Ok(config) => panic!("expected a configuration error, got {config:?}"),
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::Config, "{error}");
            error.to_string()
        }
    }
}

fn assert_names(message: &str, needles: &[&str]) {
    for needle in needles {
        assert!(message.contains(needle), "the message should contain `{needle}`: {message}");
    }
}

/// The refusal of a publisher example whose `events:` holds only a comment.
fn assert_needs_an_event(text: &str) {
    let message = refusal(text);
    assert_names(&message, &["oncebox.outbox.events", "at least one event type is required"]);
}

/// `text` with its events placeholder (`# Your events …`) replaced by one event type, or with an
/// `events` block appended under `publisher` when it has none.
fn with_an_event(text: &str) -> String {
    let event = "      seeded:\n        topic: seeded-topic";
    if text.contains("# Your events") {
        text.lines()
            .map(|line| if line.trim_start().starts_with("# Your events") { event } else { line })
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        format!("{text}    events:\n{event}\n")
    }
}

/// `text` without the block of `key` (the key's line and every deeper-indented or blank line after it).
fn without_block(text: &str, key: &str) -> String {
    let mut kept = Vec::new();
    let mut skipping_below: Option<usize> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(level) = skipping_below {
            if line.trim().is_empty() || indent > level {
                continue;
            }
            skipping_below = None;
        }
        if line.trim() == key {
            skipping_below = Some(indent);
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

fn adaptive(initial: u64, min_ms: u64, max_s: u64, multiplier: f64) -> Polling {
    Polling::Adaptive {
        initial_delay: Duration::from_secs(initial),
        min_delay: Duration::from_millis(min_ms),
        max_delay: Duration::from_secs(max_s),
        multiplier,
    }
}

// ---- Quick start ----

#[test]
fn quick_start_publisher_loads() -> TestResult {
    let config = Config::from_yaml_str(seed!("quick-start-publisher"))?;
    let outbox = config.outbox.as_ref().ok_or("outbox")?;
    assert_eq!(outbox.sender_type, Some(TransportKind::Kafka));
    assert_eq!(config.event("create-example-event")?.topic, "example-events");
    assert!(outbox.dlq.is_none(), "DLQ is disabled by default");
    // The comment says `# or rabbit`: that spelling is read as rabbitmq.
    let rabbit = seed!("quick-start-publisher").replace("type: kafka", "type: rabbit");
    let rabbit = Config::from_yaml_str(&rabbit)?;
    assert_eq!(rabbit.outbox.and_then(|o| o.sender_type), Some(TransportKind::RabbitMq));
    Ok(())
}

#[test]
fn quick_start_consumer_refuses_mappings_and_loads_without_them() -> TestResult {
    let message = refusal(seed!("quick-start-consumer"));
    assert_names(&message, &["oncebox.consumer.mappings", "each handler decodes the payload", "on::<"]);
    let config = Config::from_yaml_str(&without_block(seed!("quick-start-consumer"), "mappings:"))?;
    assert!(config.outbox.is_none(), "publisher.enabled: false");
    let inbox = config.inbox.ok_or("inbox")?;
    assert_eq!(inbox.source, Some(TransportKind::Kafka));
    assert_eq!(inbox.cache_name, "oncebox:consumed");
    assert!(inbox.cache.is_some(), "the cache is on by default");
    assert!(inbox.clean_up.is_some(), "clean-up is on by default");
    Ok(())
}

// ---- Configuration reference ----

#[test]
fn global_section_loads() -> TestResult {
    let config = Config::from_yaml_str(seed!("global"))?;
    assert_eq!(config.thread_pool_size, 5);
    assert!(config.tables.auto_create);
    assert_eq!(config.distributed_lock.lock_at_least_for, Duration::from_secs(1));
    assert_eq!(config.distributed_lock.lock_at_most_for, Duration::from_secs(60));
    assert!(!config.distributed_lock.resolve_by_polling_properties);
    assert!(config.outbox.is_none() && config.inbox.is_none());
    Ok(())
}

#[test]
fn sender_bean_name_is_refused_naming_the_builder() -> TestResult {
    let message = refusal(seed!("publisher-sender"));
    assert_names(
        &message,
        &["oncebox.publisher.sender.bean-name", "no beans", "OnceboxBuilder::sender", "sender_arc"],
    );
    let config = Config::from_yaml_str(&with_an_event(&without_block(
        seed!("publisher-sender"),
        "bean-name: \"customKafkaTemplate\"",
    )))?;
    let outbox = config.outbox.ok_or("outbox")?;
    assert_eq!(outbox.sender_type, Some(TransportKind::Kafka));
    assert_eq!(outbox.emergency_timeout, Duration::from_secs(120));
    Ok(())
}

/// `text` (a `polling:` block at column 0) as the polling of an event type.
fn under_an_event(text: &str) -> String {
    let indented: String = text.lines().map(|line| format!("        {line}\n")).collect();
    format!("oncebox:\n  outbox:\n    events:\n      e:\n        topic: t\n{indented}")
}

#[test]
fn polling_fragments_load_under_an_event() -> TestResult {
    let config = Config::from_yaml_str(&under_an_event(seed!("polling-adaptive")))?;
    assert_eq!(config.event("e")?.polling, adaptive(300, 1000, 60, 2.0));
    let config = Config::from_yaml_str(&under_an_event(seed!("polling-fixed")))?;
    assert_eq!(
        config.event("e")?.polling,
        Polling::Fixed { initial_delay: Duration::from_secs(300), delay: Duration::from_secs(2) }
    );
    Ok(())
}

#[test]
fn defaults_section_applies_to_every_event() -> TestResult {
    assert_needs_an_event(seed!("publisher-defaults"));
    let config = Config::from_yaml_str(&with_an_event(seed!("publisher-defaults")))?;
    let event = config.event("seeded")?;
    assert_eq!(event.batch_size, 200);
    assert_eq!(event.polling, adaptive(300, 250, 60, 1.5));
    assert_eq!(event.max_retries, 3);
    assert!(event.backoff.enabled);
    assert_eq!(event.backoff.delay, Duration::from_secs(10));
    assert_eq!(event.backoff.multiplier, 3.0);
    Ok(())
}

#[test]
fn per_event_overrides_load_for_kafka_and_rabbitmq() -> TestResult {
    for (text, topic) in [(seed!("events-kafka"), "orders"), (seed!("events-rabbitmq"), "orders-exchange")] {
        let config = Config::from_yaml_str(text)?;
        let create = config.event("create-order")?;
        assert_eq!(create.topic, topic);
        assert_eq!(create.batch_size, 500);
        assert_eq!(create.polling, adaptive(0, 1000, 60, 1.5));
        assert_eq!(create.max_retries, 2);
        assert_eq!((create.backoff.delay, create.backoff.multiplier), (Duration::from_secs(5), 2.0));
        let update = config.event("update-order")?;
        assert_eq!(update.batch_size, 200);
        assert_eq!(
            update.polling,
            Polling::Fixed { initial_delay: Duration::from_secs(600), delay: Duration::from_millis(250) }
        );
        assert!(!update.backoff.enabled);
        let delete = config.event("delete-order")?;
        assert_eq!(delete.polling, adaptive(0, 250, 300, 5.0));
        assert_eq!(delete.max_retries, 3);
    }
    Ok(())
}

#[test]
fn inheritance_example_refuses_a_polling_key_outside_polling() -> TestResult {
    // The README writes `min-fixed-delay` on the event type itself, where Spring ignores it.
    let message = refusal(seed!("events-inheritance"));
    assert_names(&message, &["oncebox.publisher.events.high-priority.min-fixed-delay", "under `polling:`"]);
    let fixed = seed!("events-inheritance").replace(
        "        min-fixed-delay: 250ms  # Override",
        "        polling: { min-fixed-delay: 250ms }  # Override",
    );
    let config = Config::from_yaml_str(&fixed)?;
    let high = config.event("high-priority")?;
    assert_eq!(high.batch_size, 200);
    assert_eq!(high.polling, adaptive(300, 250, 60, 1.5));
    assert_eq!(high.max_retries, 3);
    assert!(high.backoff.enabled);
    let low = config.event("low-priority")?;
    assert_eq!(low.polling, adaptive(300, 10_000, 300, 2.0));
    assert!(!low.backoff.enabled);
    assert_eq!(low.backoff.delay, Duration::from_secs(10), "the rest of backoff is inherited");
    Ok(())
}

#[test]
fn stuck_recovery_section_loads() -> TestResult {
    assert_needs_an_event(seed!("stuck-recovery"));
    let config = Config::from_yaml_str(&with_an_event(seed!("stuck-recovery")))?;
    let stuck = config.outbox.ok_or("outbox")?.stuck_recovery;
    assert_eq!(stuck.batch_size, 500);
    assert_eq!(stuck.max_batch_processing_time, Duration::from_secs(300));
    assert_eq!(stuck.polling, adaptive(300, 1000, 60, 4.0));
    Ok(())
}

#[test]
fn clean_up_section_loads() -> TestResult {
    assert_needs_an_event(seed!("clean-up"));
    let config = Config::from_yaml_str(&with_an_event(seed!("clean-up")))?;
    let clean_up = config.outbox.and_then(|o| o.clean_up).ok_or("clean-up")?;
    assert_eq!((clean_up.batch_size, clean_up.ttl), (500, Duration::from_secs(86_400)));
    assert_eq!(clean_up.polling, adaptive(300, 5000, 60, 2.0));
    Ok(())
}

#[test]
fn dlq_section_loads_with_empty_transfer_blocks() -> TestResult {
    assert_needs_an_event(seed!("dlq"));
    let config = Config::from_yaml_str(&with_an_event(seed!("dlq")))?;
    let dlq = config.outbox.and_then(|o| o.dlq).ok_or("dlq")?;
    for job in [dlq.transfer_to, dlq.transfer_from] {
        assert_eq!(job.batch_size, 500);
        assert_eq!(job.polling, adaptive(300, 1000, 120, 10.0));
    }
    let clean_up = dlq.clean_up.ok_or("dlq clean-up")?;
    assert_eq!(clean_up.ttl, Duration::from_secs(86_400));
    assert_eq!(clean_up.polling, adaptive(300, 5000, 60, 2.0));
    Ok(())
}

#[test]
fn dlq_override_example_refuses_pooling_and_loads_as_polling() -> TestResult {
    let message = refusal(seed!("dlq-override"));
    assert_names(&message, &["oncebox.publisher.dlq.transfer-to.pooling", "did you mean `polling`?"]);
    let config =
        Config::from_yaml_str(&with_an_event(&seed!("dlq-override").replace("pooling:", "polling:")))?;
    let dlq = config.outbox.and_then(|o| o.dlq).ok_or("dlq")?;
    // transfer-to inherits everything but the multiplier.
    assert_eq!(dlq.transfer_to.batch_size, 500);
    assert_eq!(dlq.transfer_to.polling, adaptive(300, 1000, 120, 2.5));
    assert_eq!(dlq.transfer_from.batch_size, 1000);
    assert_eq!(
        dlq.transfer_from.polling,
        Polling::Fixed { initial_delay: Duration::from_secs(300), delay: Duration::from_secs(60) }
    );
    Ok(())
}

#[test]
fn metrics_sections_load() -> TestResult {
    assert_needs_an_event(seed!("metrics"));
    let config = Config::from_yaml_str(&with_an_event(seed!("metrics")))?;
    let metrics = config.outbox.ok_or("outbox")?.metrics;
    assert!(metrics.enabled);
    let ttls = metrics.gauges.and_then(|g| g.cache_ttls).ok_or("gauge ttls")?;
    assert_eq!(ttls, [60, 60, 30].map(Duration::from_secs));
    let config = Config::from_yaml_str(&with_an_event(seed!("metrics-enabled")))?;
    let metrics = config.outbox.ok_or("outbox")?.metrics;
    assert!(metrics.enabled && metrics.gauges.is_none());
    Ok(())
}

#[test]
fn consumer_source_loads() -> TestResult {
    let config = Config::from_yaml_str(seed!("consumer-source"))?;
    assert_eq!(config.inbox.and_then(|i| i.source), Some(TransportKind::Kafka));
    Ok(())
}

#[test]
fn consumer_mappings_are_refused_naming_the_handlers() {
    let message = refusal(seed!("consumer-mappings"));
    assert_names(&message, &["oncebox.consumer.mappings", "each handler decodes the payload", "on_once"]);
}

#[test]
fn consumer_clean_up_cache_and_metrics_load() -> TestResult {
    let clean_up = Config::from_yaml_str(seed!("consumer-clean-up"))?.inbox.and_then(|i| i.clean_up);
    let clean_up = clean_up.ok_or("clean-up")?;
    assert_eq!((clean_up.batch_size, clean_up.ttl), (500, Duration::from_secs(86_400)));
    assert_eq!(clean_up.polling, adaptive(300, 5000, 60, 2.0));
    let inbox = Config::from_yaml_str(seed!("consumer-cache"))?.inbox.ok_or("inbox")?;
    assert!(inbox.cache.is_some());
    assert_eq!(inbox.cache_name, "oncebox:consumed");
    let inbox = Config::from_yaml_str(seed!("consumer-metrics"))?.inbox.ok_or("inbox")?;
    assert!(inbox.metrics_enabled);
    assert_eq!(inbox.cache_name, DEFAULT_CACHE_NAME);
    Ok(())
}

// ---- Examples: publisher-only ----

#[test]
fn publisher_only_minimal() -> TestResult {
    assert_needs_an_event(seed!("publisher-only-minimal"));
    let config = Config::from_yaml_str(&with_an_event(seed!("publisher-only-minimal")))?;
    let outbox = config.outbox.ok_or("outbox")?;
    assert_eq!(outbox.sender_type, Some(TransportKind::Kafka));
    assert_eq!(outbox.events["seeded"].topic, "seeded-topic");
    assert!(outbox.dlq.is_none() && !outbox.metrics.enabled);
    assert!(config.inbox.is_none());
    Ok(())
}

#[test]
fn publisher_only_with_all_features() -> TestResult {
    assert_needs_an_event(seed!("publisher-only-all-features"));
    let config = Config::from_yaml_str(&with_an_event(seed!("publisher-only-all-features")))?;
    let outbox = config.outbox.ok_or("outbox")?;
    assert!(outbox.dlq.is_some());
    assert!(outbox.metrics.enabled);
    assert_eq!(outbox.metrics.gauges.and_then(|g| g.cache_ttls), Some([Duration::from_secs(60); 3]));
    Ok(())
}

#[test]
fn publisher_only_full() -> TestResult {
    assert_needs_an_event(seed!("publisher-only-full"));
    let config = Config::from_yaml_str(&with_an_event(seed!("publisher-only-full")))?;
    assert_eq!(config.thread_pool_size, 5);
    assert!(config.tables.auto_create);
    let outbox = config.outbox.ok_or("outbox")?;
    assert_eq!(outbox.sender_type, Some(TransportKind::Kafka));
    assert_eq!(outbox.emergency_timeout, Duration::from_secs(120));
    let event = &outbox.events["seeded"];
    assert_eq!(event.batch_size, 200);
    assert_eq!(event.polling, adaptive(300, 250, 60, 1.5));
    assert_eq!(outbox.stuck_recovery.polling, adaptive(300, 1000, 60, 4.0));
    let clean_up = outbox.clean_up.ok_or("clean-up")?;
    assert_eq!((clean_up.batch_size, clean_up.polling), (200, adaptive(300, 500, 60, 2.0)));
    let dlq = outbox.dlq.ok_or("dlq")?;
    assert_eq!(dlq.transfer_to.polling, adaptive(300, 1000, 120, 10.0));
    assert_eq!(outbox.metrics.gauges.and_then(|g| g.cache_ttls), Some([Duration::from_secs(60); 3]));
    Ok(())
}

// ---- Examples: consumer-only ----

#[test]
fn consumer_only_minimal() -> TestResult {
    let message = refusal(seed!("consumer-only-minimal"));
    assert_names(&message, &["oncebox.consumer.mappings", "on::<OrderCreated"]);
    let config = Config::from_yaml_str(&without_block(seed!("consumer-only-minimal"), "mappings:"))?;
    assert!(config.outbox.is_none());
    let inbox = config.inbox.ok_or("inbox")?;
    assert_eq!(inbox.source, Some(TransportKind::Kafka));
    assert_eq!(inbox.cache_name, "oncebox:consumed");
    assert!(inbox.cache.is_some() && inbox.clean_up.is_some() && !inbox.metrics_enabled);
    Ok(())
}

#[test]
fn consumer_only_with_all_features() -> TestResult {
    let message = refusal(seed!("consumer-only-all-features"));
    assert_names(&message, &["oncebox.consumer.mappings"]);
    let config = Config::from_yaml_str(&without_block(seed!("consumer-only-all-features"), "mappings:"))?;
    let inbox = config.inbox.ok_or("inbox")?;
    assert_eq!(inbox.source, Some(TransportKind::Kafka));
    assert!(inbox.metrics_enabled);
    Ok(())
}

#[test]
fn consumer_only_full() -> TestResult {
    let message = refusal(seed!("consumer-only-full"));
    assert_names(&message, &["oncebox.consumer.mappings"]);
    let config = Config::from_yaml_str(&without_block(seed!("consumer-only-full"), "mappings:"))?;
    assert_eq!(config.thread_pool_size, 2);
    assert!(config.outbox.is_none());
    let inbox = config.inbox.ok_or("inbox")?;
    assert_eq!(inbox.source, Some(TransportKind::Kafka));
    let clean_up = inbox.clean_up.ok_or("clean-up")?;
    assert_eq!((clean_up.batch_size, clean_up.ttl), (200, Duration::from_secs(86_400)));
    assert_eq!(clean_up.polling, adaptive(300, 500, 60, 2.0));
    assert!(inbox.cache.is_some());
    assert_eq!(inbox.cache_name, "oncebox:consumed");
    assert!(inbox.metrics_enabled);
    Ok(())
}

// ---- The article's snippets ----

#[test]
fn article_snippets_load() -> TestResult {
    let config = Config::from_yaml_str(seed!("article-whole-service"))?;
    assert_eq!(config.thread_pool_size, 5);
    let outbox = config.outbox.as_ref().ok_or("outbox")?;
    assert_eq!(outbox.sender_type, Some(TransportKind::Kafka));
    assert_eq!(config.event("create-order")?.polling, adaptive(0, 250, 60, 1.5));
    assert_eq!(config.event("daily-report")?.polling, adaptive(0, 10_000, 300, 1.5));
    assert!(outbox.dlq.is_some());
    let inbox = config.inbox.as_ref().ok_or("inbox")?;
    assert_eq!(inbox.source, Some(TransportKind::Kafka));
    assert_eq!(inbox.cache_name, "orders-service:oncebox:inbox");
    assert_eq!(inbox.clean_up.map(|c| c.ttl), Some(Duration::from_secs(86_400)));

    let config = Config::from_yaml_str(seed!("article-per-event"))?;
    assert_eq!(config.event("high-priority")?.polling, adaptive(0, 250, 60, 1.5));
    let low = config.event("low-priority")?;
    assert_eq!(low.polling, adaptive(0, 10_000, 300, 2.0));
    assert!(!low.backoff.enabled);

    let inbox = Config::from_yaml_str(seed!("article-inbox-cache"))?.inbox.ok_or("inbox")?;
    assert!(inbox.cache.is_some());
    assert_eq!(inbox.cache_name, "orders-service:oncebox:inbox");
    Ok(())
}
