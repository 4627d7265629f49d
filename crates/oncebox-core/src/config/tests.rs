use std::time::Duration;

use super::*;

fn yaml_error(text: &str) -> String {
    match Config::from_yaml_str(text) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::Config, "{error}");
            error.to_string()
        }
    }
}

fn with_event(event_body: &str) -> String {
    format!("oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: orders\n{event_body}")
}

fn assert_names(message: &str, key: &str) {
    assert!(message.contains(key), "message should name `{key}`: {message}");
}

#[test]
fn defaults_follow_the_seed_except_the_event_initial_delay() {
    let config = Config::from_yaml_str(&with_event("")).expect("the test config is valid");
    let outbox = config.outbox.as_ref().expect("outbox");
    let event = &outbox.events["order-created"];
    assert_eq!(event.batch_size, 200);
    assert_eq!(event.max_retries, 3);
    assert_eq!(
        event.polling,
        Polling::Adaptive {
            initial_delay: Duration::ZERO,
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(60),
            multiplier: 1.5
        }
    );
    assert_eq!(event.backoff, Backoff::default());
    assert_eq!(outbox.emergency_timeout, Duration::from_secs(120));
    assert_eq!(outbox.stuck_recovery.max_batch_processing_time, Duration::from_secs(300));
    assert_eq!(outbox.stuck_recovery.max_recoveries, 5);
    assert_eq!(outbox.clean_up.map(|c| c.ttl), Some(Duration::from_secs(86_400)));
    assert!(outbox.dlq.is_none(), "DLQ is off unless enabled");
    assert!(config.inbox.is_none());
    assert!(config.tables.auto_create);
    assert_eq!(config.tables.names.events(), "outbox_events");
}

#[test]
fn events_inherit_unset_fields_from_defaults() {
    let config = Config::from_yaml_str(
        r#"
oncebox:
  outbox:
    defaults:
      batch-size: 50
      max-retries: 5
      polling:
        min-fixed-delay: 1s
        max-fixed-delay: 2m
      backoff:
        delay: 2s
    events:
      inherits:
        topic: a
      overrides:
        topic: b
        batch-size: 7
        polling:
          multiplier: 4.0
        backoff:
          enabled: false
      fixed:
        topic: c
        polling:
          type: fixed
          fixed-delay: 250ms
"#,
    )
    .expect("the test config is valid");
    let events = &config.outbox.as_ref().expect("outbox").events;
    assert_eq!(events["inherits"].batch_size, 50);
    assert_eq!(events["inherits"].max_retries, 5);
    assert_eq!(events["inherits"].backoff.delay, Duration::from_secs(2));
    assert_eq!(events["inherits"].backoff.multiplier, 3.0);
    assert_eq!(events["overrides"].batch_size, 7);
    assert_eq!(
        events["overrides"].polling,
        Polling::Adaptive {
            initial_delay: Duration::ZERO,
            min_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(120),
            multiplier: 4.0
        }
    );
    assert!(!events["overrides"].backoff.enabled);
    assert_eq!(
        events["fixed"].polling,
        Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_millis(250) }
    );
}

#[test]
fn older_publisher_and_consumer_spellings_are_accepted() {
    let config = Config::from_yaml_str(
        "oncebox:\n  publisher:\n    events:\n      e:\n        topic: t\n  consumer:\n    clean-up:\n      ttl: 2h\n",
    )
    .expect("the older spellings are accepted");
    assert!(config.outbox.is_some());
    assert_eq!(config.inbox.and_then(|i| i.clean_up).map(|c| c.ttl), Some(Duration::from_secs(7200)));
}

#[test]
fn toml_uses_the_same_model() {
    let config = Config::from_toml_str(
        r#"
[oncebox.outbox.events.order-created]
topic = "orders"
batch-size = 10

[oncebox.outbox.events.order-created.polling]
type = "fixed"
fixed-delay = "1s"

[oncebox.inbox.cache]
ttl = "10m"
"#,
    )
    .expect("the test config is valid");
    let event = config.event("order-created").expect("the event type is configured");
    assert_eq!(event.batch_size, 10);
    assert_eq!(
        event.polling,
        Polling::Fixed { initial_delay: Duration::ZERO, delay: Duration::from_secs(1) }
    );
    assert_eq!(config.inbox.and_then(|i| i.cache).map(|c| c.ttl), Some(Duration::from_secs(600)));

    let error = Config::from_toml_str("[oncebox.outbox.events.e]\ntopic = \"t\"\nbatch-size = 0\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_names(&error, "oncebox.outbox.events.e.batch-size");
}

#[test]
fn unknown_keys_are_rejected_with_their_path() {
    let message = yaml_error(&with_event("        bach-size: 10\n"));
    assert_names(&message, "oncebox.outbox.events.order-created");
    assert_names(&message, "bach-size");
    let message = yaml_error("oncebox:\n  outbx:\n    events: {}\n");
    assert_names(&message, "outbx");
}

#[test]
fn transport_blocks_share_the_file_and_typos_elsewhere_are_still_rejected() {
    let yaml = "oncebox:
  outbox:
    events:
      e:
        topic: t
  kafka:
    bootstrap-servers: 127.0.0.1:9092
    producer:
      linger.ms: 5
  rabbitmq:
    url: amqp://127.0.0.1:5672
";
    let config = Config::from_yaml_str(yaml).expect("the test config is valid");
    assert!(config.event("e").is_ok());
    let toml = "[oncebox.outbox.events.e]\ntopic = \"t\"\n\n[oncebox.kafka]\nbootstrap-servers = \"h:9092\"\n\n[oncebox.kafka.producer]\n\"linger.ms\" = \"5\"\n";
    assert!(Config::from_toml_str(toml).is_ok(), "{:?}", Config::from_toml_str(toml).err());
    // A misspelt transport block is not a transport block.
    assert_names(&yaml_error("oncebox:\n  kafak:\n    bootstrap-servers: h:9092\n"), "kafak");
    // Inside the core's own blocks, unknown keys stay errors.
    assert_names(&yaml_error("oncebox:\n  kafka: {}\n  inbox:\n    cach: {}\n"), "cach");
}

#[test]
fn a_bad_duration_names_its_key() {
    let message = yaml_error(&with_event("        polling:\n          min-fixed-delay: soon\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.polling.min-fixed-delay");
    assert_names(&message, "invalid duration 'soon'");
    let message = yaml_error(&with_event("        backoff:\n          delay: 10\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.backoff.delay");
}

#[test]
fn min_greater_than_max_names_the_key() {
    let message = yaml_error(&with_event(
        "        polling:\n          min-fixed-delay: 2m\n          max-fixed-delay: 1m\n",
    ));
    assert_names(&message, "oncebox.outbox.events.order-created.polling.min-fixed-delay");
    assert_names(&message, "greater than max-fixed-delay");
}

#[test]
fn a_multiplier_below_one_names_the_key() {
    let message = yaml_error(&with_event("        polling:\n          multiplier: 0.5\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.polling.multiplier");
    let message = yaml_error(&with_event("        backoff:\n          multiplier: 0.9\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.backoff.multiplier");
}

#[test]
fn a_zero_batch_size_names_the_key() {
    let message = yaml_error(&with_event("        batch-size: 0\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.batch-size");
    let message = yaml_error(&format!("{}    clean-up:\n      batch-size: 0\n", with_event("")));
    assert_names(&message, "oncebox.outbox.clean-up.batch-size");
}

#[test]
fn concurrency_defaults_to_one_inherits_and_is_bounded() {
    let config = Config::from_yaml_str(&with_event("")).expect("the test config is valid");
    assert_eq!(config.outbox.as_ref().expect("outbox").events["order-created"].concurrency, 1);
    let text = "oncebox:\n  outbox:\n    defaults:\n      concurrency: 3\n    events:\n      a:\n        topic: t\n      b:\n        topic: t\n        concurrency: 2\n";
    let config = Config::from_yaml_str(text).expect("the test config is valid");
    let events = &config.outbox.as_ref().expect("outbox").events;
    assert_eq!((events["a"].concurrency, events["b"].concurrency), (3, 2));
    for bad in [0, MAX_CONCURRENCY + 1] {
        let message = yaml_error(&with_event(&format!("        concurrency: {bad}\n")));
        assert_names(&message, "oncebox.outbox.events.order-created.concurrency");
        assert_names(&message, &format!("got {bad}"));
    }
    let built = Config::builder()
        .event("e", EventSettings::new("t").concurrency(4))
        .build()
        .expect("the built config is valid");
    assert_eq!(built.outbox.expect("outbox").events["e"].concurrency, 4);
}

#[test]
fn a_zero_min_delay_names_the_key() {
    let message = yaml_error(&with_event("        polling:\n          min-fixed-delay: 0s\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.polling.min-fixed-delay");
    assert_names(&message, "busy-loops");
}

#[test]
fn a_missing_topic_names_the_event() {
    let message =
        yaml_error("oncebox:\n  outbox:\n    events:\n      order-created:\n        batch-size: 5\n");
    assert_names(&message, "oncebox.outbox.events.order-created.topic");
    let message = yaml_error("oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: '  '\n");
    assert_names(&message, "oncebox.outbox.events.order-created.topic");
}

#[test]
fn an_unknown_polling_type_names_the_key() {
    let message = yaml_error(&with_event("        polling:\n          type: sometimes\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.polling.type");
    assert_names(&message, "sometimes");
}

#[test]
fn fixed_polling_without_fixed_delay_names_the_key() {
    let message = yaml_error(&with_event("        polling:\n          type: fixed\n"));
    assert_names(&message, "oncebox.outbox.events.order-created.polling.fixed-delay");
}

#[test]
fn a_cache_ttl_longer_than_the_inbox_ttl_names_the_key() {
    let message = yaml_error("oncebox:\n  inbox:\n    clean-up:\n      ttl: 1h\n    cache:\n      ttl: 2h\n");
    assert_names(&message, "oncebox.inbox.cache.ttl");
    assert_names(&message, "inbox.clean-up.ttl");
}

#[test]
fn an_invalid_table_prefix_names_the_key() {
    let message = yaml_error("oncebox:\n  tables:\n    prefix: 'drop table;'\n");
    assert_names(&message, "oncebox.tables.prefix");
}

#[test]
fn stuck_recovery_must_outlast_the_emergency_timeout() {
    let message = yaml_error(&format!("{}    sender:\n      emergency-timeout: 10m\n", with_event("")));
    assert_names(&message, "oncebox.outbox.stuck-recovery.max-batch-processing-time");
}

#[test]
fn max_recoveries_is_at_least_one() {
    let message = yaml_error(&format!("{}    stuck-recovery:\n      max-recoveries: 0\n", with_event("")));
    assert_names(&message, "oncebox.outbox.stuck-recovery.max-recoveries");
    let config =
        Config::from_yaml_str(&format!("{}    stuck-recovery:\n      max-recoveries: 2\n", with_event("")))
            .expect("the test config is valid");
    assert_eq!(config.outbox.map(|outbox| outbox.stuck_recovery.max_recoveries), Some(2));
}

#[test]
fn gauge_ttls_need_three_values() {
    let message = yaml_error(&format!(
        "{}    metrics:\n      gauge:\n        enabled: true\n        cache:\n          ttls: [1s, 2s]\n",
        with_event("")
    ));
    assert_names(&message, "oncebox.outbox.metrics.gauge.cache.ttls");
}

#[test]
fn dlq_jobs_inherit_from_the_dlq_block() {
    let config = Config::from_yaml_str(&format!(
        "{}    dlq:\n      enabled: true\n      batch-size: 50\n      polling:\n        min-fixed-delay: 3s\n      transfer-from:\n        batch-size: 1000\n",
        with_event("")
    ))
    .expect("the test config is valid");
    let dlq = config.outbox.and_then(|o| o.dlq).expect("dlq");
    assert_eq!(dlq.transfer_to.batch_size, 50);
    assert_eq!(dlq.transfer_from.batch_size, 1000);
    assert!(matches!(dlq.transfer_to.polling, Polling::Adaptive { min_delay, multiplier, .. }
        if min_delay == Duration::from_secs(3) && multiplier == 10.0));
    assert!(dlq.clean_up.is_some());
}

#[test]
fn the_re_drive_max_age_defaults_to_the_inbox_retention_and_must_be_positive() {
    let dlq_with = |line: &str| format!("{}    dlq:\n      enabled: true\n{line}", with_event(""));
    let config = Config::from_yaml_str(&dlq_with("")).expect("the test config is valid");
    assert_eq!(config.dlq_re_drive_max_age(), Duration::from_secs(86_400));
    let inbox = Config::from_yaml_str("oncebox:\n  inbox:\n    enabled: true\n").expect("valid");
    assert_eq!(
        inbox.inbox.and_then(|inbox| inbox.clean_up).map(|clean_up| clean_up.ttl),
        Some(config.dlq_re_drive_max_age()),
        "by default a re-drive is asked about exactly where a default inbox forgets ids"
    );
    let config = Config::from_yaml_str(&dlq_with("      re-drive-max-age: 6h\n")).expect("valid");
    assert_eq!(
        config.outbox.and_then(|o| o.dlq).map(|d| d.re_drive_max_age),
        Some(Duration::from_secs(6 * 3600))
    );
    for wrong in ["0s", "200years", "soon"] {
        let message = yaml_error(&dlq_with(&format!("      re-drive-max-age: {wrong}\n")));
        assert_names(&message, "oncebox.outbox.dlq.re-drive-max-age");
    }
    let built = Config::builder()
        .event("e", EventSettings::new("t"))
        .dlq_enabled(true)
        .dlq_re_drive_max_age(Duration::from_secs(3600))
        .build()
        .expect("the test config is valid");
    assert_eq!(built.dlq_re_drive_max_age(), Duration::from_secs(3600));
    let zero = Config::builder()
        .event("e", EventSettings::new("t"))
        .dlq_enabled(true)
        .dlq_re_drive_max_age(Duration::ZERO)
        .build();
    let zero = zero.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(zero.contains("oncebox.outbox.dlq.re-drive-max-age: must be greater than 0"), "{zero}");
    let toml = Config::from_toml_str(
        "[oncebox.outbox.events.e]\ntopic = \"t\"\n[oncebox.outbox.dlq]\nenabled = true\nre-drive-max-age = \"2d\"\n",
    )
        .expect("valid");
    assert_eq!(toml.dlq_re_drive_max_age(), Duration::from_secs(2 * 86_400));
    let no_dlq = Config::from_yaml_str(&with_event("")).expect("valid");
    assert_eq!(no_dlq.dlq_re_drive_max_age(), DEFAULT_RE_DRIVE_MAX_AGE, "a tool without the DLQ configured");
}

#[test]
fn the_builder_validates_like_a_file() {
    let error = Config::builder()
        .event("e", EventSettings::new("t").batch_size(0))
        .build()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_names(&error, "oncebox.outbox.events.e.batch-size");
    let config = Config::builder()
        .event("e", EventSettings::new("t").max_retries(1))
        .table_prefix("shop_")
        .build()
        .expect("the test config is valid");
    assert_eq!(config.tables.names.dlq(), "shop_outbox_dlq_events");
    assert_eq!(config.event("e").map(|e| e.max_retries).ok(), Some(1));
    let unknown = config.event("nope").err().map(|e| e.to_string()).unwrap_or_default();
    assert_names(&unknown, "'nope'");
}

#[test]
fn lock_durations_follow_polling_by_default() {
    let config = Config::from_yaml_str(&with_event("")).expect("the test config is valid");
    let polling = Polling::Adaptive {
        initial_delay: Duration::ZERO,
        min_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
        multiplier: 2.0,
    };
    assert_eq!(
        config.distributed_lock.durations_for(&polling),
        (Duration::from_secs(5), Duration::from_secs(60))
    );
}

#[test]
fn wake_ups_default_on_and_can_be_turned_off() {
    let config = Config::from_yaml_str(&with_event("")).expect("the test config is valid");
    assert_eq!(config.outbox.map(|o| o.wake_up), Some(WakeUpMode::ListenNotify));
    let off = Config::from_yaml_str(&format!("{}    wake-up: off\n", with_event("")))
        .expect("the test config is valid");
    assert_eq!(off.outbox.map(|o| o.wake_up), Some(WakeUpMode::Off));
    let message = yaml_error(&format!("{}    wake-up: sometimes\n", with_event("")));
    assert_names(&message, "oncebox.outbox.wake-up");
}

#[test]
fn a_duration_over_a_hundred_years_is_refused_naming_its_key() {
    let cache = "oncebox:\n  inbox:\n    clean-up:\n      enabled: false\n    cache:\n      ttl: 2000years\n";
    assert_names(&yaml_error(cache), "oncebox.inbox.cache.ttl");
    let timeout =
        with_event("").replace("    events:", "    sender:\n      emergency-timeout: 500years\n    events:");
    assert_names(&yaml_error(&timeout), "oncebox.outbox.sender.emergency-timeout");
    let backoff = with_event("        backoff:\n          max-delay: 200years\n");
    assert_names(&yaml_error(&backoff), "oncebox.outbox.events.order-created.backoff.max-delay");
    let polling = with_event("        polling:\n          initial-delay: 101years\n");
    assert_names(&yaml_error(&polling), "oncebox.outbox.events.order-created.polling.initial-delay");
    let lock = "oncebox:\n  distributed-lock:\n    lock-at-most-for: 1000years\n";
    assert_names(&yaml_error(lock), "oncebox.distributed-lock.lock-at-most-for");
    let built =
        Config::builder().event("order-created", EventSettings::new("orders")).inbox_enabled(true).build();
    assert!(built.is_ok(), "the defaults are within bounds: {built:?}");
}

#[test]
fn a_gauge_refresh_shorter_than_a_second_is_refused() {
    let text = "oncebox:\n  inbox:\n    metrics:\n      gauge:\n        enabled: true\n        cache:\n          ttls: [0s, 1s, 1s]\n";
    assert_names(&yaml_error(text), "oncebox.inbox.metrics.gauge.cache.ttls");
    let text = with_event("").replace("  outbox:\n", "  outbox:\n    metrics:\n      gauge:\n        enabled: true\n        cache:\n          ttls: [1s, 1s, 10ms]\n");
    assert_names(&yaml_error(&text), "oncebox.outbox.metrics.gauge.cache.ttls");
}

// ---- Keys of the Java library's configuration reference ----

#[test]
fn sender_and_source_types_name_a_transport() {
    for (value, kind) in [
        ("kafka", TransportKind::Kafka),
        ("rabbitmq", TransportKind::RabbitMq),
        ("rabbit", TransportKind::RabbitMq),
    ] {
        let outbox =
            with_event("").replace("    events:", &format!("    sender:\n      type: {value}\n    events:"));
        let config = Config::from_yaml_str(&outbox).expect("the test config is valid");
        assert_eq!(config.outbox.and_then(|o| o.sender_type), Some(kind), "{value}");
        let inbox = format!("oncebox:\n  consumer:\n    source:\n      type: {value}\n");
        let config = Config::from_yaml_str(&inbox).expect("the test config is valid");
        assert_eq!(config.inbox.and_then(|i| i.source), Some(kind), "{value}");
    }
    let config = Config::from_yaml_str("oncebox:\n  inbox: {}\n").expect("the test config is valid");
    assert_eq!(config.inbox.and_then(|i| i.source), None, "source.type is optional");
    assert_eq!(TransportKind::from_name("rabbit").map(TransportKind::as_str), Some("rabbitmq"));
    assert_eq!(TransportKind::Kafka.to_string(), "kafka");
    assert_eq!(TransportKind::from_name("Kafka"), None);
}

#[test]
fn an_unknown_source_type_names_the_key_and_the_allowed_values() {
    let message = yaml_error("oncebox:\n  inbox:\n    source:\n      type: sqs\n");
    assert_names(&message, "oncebox.inbox.source.type");
    assert_names(&message, "unknown transport 'sqs'");
    assert_names(&message, "expected kafka or rabbitmq");
    let message = yaml_error("oncebox:\n  consumer:\n    source:\n      type: 3\n");
    assert_names(&message, "oncebox.consumer.source.type");
    assert_names(&message, "kafka or rabbitmq");
    let message = yaml_error("oncebox:\n  inbox:\n    source:\n      kind: kafka\n");
    assert_names(&message, "oncebox.inbox.source");
    assert_names(&message, "kind");
    let toml = Config::from_toml_str("[oncebox.inbox.source]\ntype = \"nats\"\n");
    let message = toml.err().map(|e| e.to_string()).unwrap_or_default();
    assert_names(&message, "oncebox.inbox.source.type");
    assert_names(&message, "unknown transport 'nats'");
}

#[test]
fn an_unknown_sender_type_names_the_key_and_the_allowed_values() {
    let text = with_event("").replace("    events:", "    sender:\n      type: pulsar\n    events:");
    let message = yaml_error(&text);
    assert_names(&message, "oncebox.outbox.sender.type");
    assert_names(&message, "unknown transport 'pulsar'");
    assert_names(&message, "expected kafka or rabbitmq");
}

#[test]
fn sender_bean_name_is_refused_pointing_at_the_builder() {
    for section in ["outbox", "publisher"] {
        let text = format!(
            "oncebox:\n  {section}:\n    sender:\n      bean-name: customKafkaTemplate\n    events:\n      e:\n        topic: t\n"
        );
        let message = yaml_error(&text);
        assert_names(&message, &format!("oncebox.{section}.sender.bean-name"));
        assert_names(&message, "no beans");
        assert_names(&message, "OnceboxBuilder::sender");
        assert_names(&message, "sender_arc");
    }
    let message = Config::from_toml_str("[oncebox.outbox.sender]\nbean-name = \"x\"\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_names(&message, "oncebox.outbox.sender.bean-name");
}

#[test]
fn mappings_are_refused_even_when_empty() {
    let values = [
        "\n      create-order: \"com.example.OrderCreatedDto\"\n",
        "\n      # Your specific mappings\n",
        " {}\n",
    ];
    for section in ["inbox", "consumer"] {
        for value in values {
            let message = yaml_error(&format!("oncebox:\n  {section}:\n    mappings:{value}"));
            assert_names(&message, &format!("oncebox.{section}.mappings"));
            assert_names(&message, "each handler decodes the payload into its own type");
            assert_names(&message, "listener.on::<OrderCreated, _, _>(\"create-order\"");
        }
    }
    let message = Config::from_toml_str("[oncebox.inbox.mappings]\ncreate-order = \"com.example.Dto\"\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_names(&message, "oncebox.inbox.mappings");
}

#[test]
fn the_cache_name_is_kept_and_defaults_to_the_java_name() {
    let config =
        Config::from_yaml_str("oncebox:\n  inbox:\n    cache:\n      cache-name: \"orders:consumed\"\n")
            .expect("the test config is valid");
    let inbox = config.inbox.expect("inbox");
    assert_eq!(inbox.cache_name, "orders:consumed");
    assert!(inbox.cache.is_some());
    let config = Config::from_yaml_str("oncebox:\n  inbox: {}\n").expect("the test config is valid");
    assert_eq!(config.inbox.map(|i| i.cache_name).as_deref(), Some(DEFAULT_CACHE_NAME));
    assert_eq!(DEFAULT_CACHE_NAME, "oncebox:consumed");
    // A name given with the cache off is kept for whoever builds a shared cache from it.
    let config = Config::from_yaml_str(
        "oncebox:\n  consumer:\n    cache:\n      enabled: false\n      cache-name: shop\n",
    )
    .expect("the test config is valid");
    let inbox = config.inbox.expect("inbox");
    assert!(inbox.cache.is_none());
    assert_eq!(inbox.cache_name, "shop");
}

#[test]
fn a_blank_or_control_character_cache_name_names_the_key() {
    let message = yaml_error("oncebox:\n  inbox:\n    cache:\n      cache-name: '  '\n");
    assert_names(&message, "oncebox.inbox.cache.cache-name");
    assert_names(&message, "blank");
    let message = yaml_error("oncebox:\n  inbox:\n    cache:\n      cache-name: \"a\\nb\"\n");
    assert_names(&message, "oncebox.inbox.cache.cache-name");
    assert_names(&message, "control characters");
}

#[test]
fn pooling_is_refused_with_a_pointer_to_polling() {
    for job in ["transfer-to", "transfer-from"] {
        let text = format!(
            "{}    dlq:\n      enabled: true\n      {job}:\n        pooling:\n          multiplier: 2.5\n",
            with_event("")
        );
        let message = yaml_error(&text);
        assert_names(&message, &format!("oncebox.outbox.dlq.{job}.pooling"));
        assert_names(&message, "did you mean `polling`?");
    }
}

#[test]
fn a_polling_key_outside_polling_names_the_key() {
    for key in ["initial-delay", "fixed-delay", "min-fixed-delay", "max-fixed-delay"] {
        let message = yaml_error(&with_event(&format!("        {key}: 250ms\n")));
        assert_names(&message, &format!("oncebox.outbox.events.order-created.{key}"));
        assert_names(&message, "belongs under `polling:`");
        let defaults =
            with_event("").replace("    events:", &format!("    defaults:\n      {key}: 1s\n    events:"));
        assert_names(&yaml_error(&defaults), &format!("oncebox.outbox.defaults.{key}"));
    }
}

#[test]
fn the_durable_inbox_section_fills_what_it_leaves_out_with_the_defaults() {
    let text = "oncebox:\n  inbox:\n    durable:\n      concurrency: 3\n      lease: 30s\n      backoff: { delay: 2s }\n";
    let config = Config::from_yaml_str(text).unwrap_or_else(|error| panic!("{error}"));
    let durable =
        config.inbox.and_then(|inbox| inbox.durable).unwrap_or_else(|| panic!("no durable section"));
    let defaults = crate::stored::StoredInboxSettings::default();
    assert_eq!((durable.concurrency, durable.lease), (3, Duration::from_secs(30)));
    assert_eq!(durable.backoff.delay, Duration::from_secs(2));
    assert_eq!((durable.backoff.multiplier, durable.backoff.max_delay), (2.0, Duration::from_secs(300)));
    assert_eq!((durable.batch_size, durable.max_attempts), (defaults.batch_size, defaults.max_attempts));
    let without = Config::from_yaml_str("oncebox:\n  inbox: {}\n").unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(without.inbox.and_then(|inbox| inbox.durable), None);
}

#[test]
fn durable_inbox_values_that_would_stall_or_spin_its_pollers_are_refused_by_name() {
    for (body, key) in [
        ("concurrency: 0", "oncebox.inbox.durable.concurrency"),
        ("batch-size: 0", "oncebox.inbox.durable.batch-size"),
        ("max-attempts: 0", "oncebox.inbox.durable.max-attempts"),
        ("lease: 0s", "oncebox.inbox.durable.lease"),
        ("poll-interval: 0s", "oncebox.inbox.durable.poll-interval"),
        ("backoff: { multiplier: 0.5 }", "oncebox.inbox.durable.backoff.multiplier"),
        ("leese: 1s", "leese"),
    ] {
        let message = yaml_error(&format!("oncebox:\n  inbox:\n    durable:\n      {body}\n"));
        assert_names(&message, key);
    }
}
