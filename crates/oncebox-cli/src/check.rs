//! `oncebox check-config FILE`: the file read the way a starting service reads it (the core's
//! sections, then the transports' blocks), and what each event type resolves to.

use std::path::Path;

use oncebox_core::config::{Backoff, CleanUpConfig, Format, OutboxConfig, Polling, WakeUpMode, section};
use oncebox_core::{Config, Error};
use oncebox_kafka::KafkaSenderConfig;
use oncebox_rabbit::RabbitSenderConfig;

use crate::Failure;
use crate::text::{age, table};

pub(crate) fn run(file: &Path) -> Result<(), Failure> {
    let config = Config::from_file(file)?;
    let shown = file.display();
    let text = std::fs::read_to_string(file)
        .map_err(|error| Failure::usage(format!("cannot read {shown}: {error}")))?;
    let format = Format::of_path(file);
    let in_file = |error: Error| Failure::from(error.context(&shown));
    let mut transports = Vec::new();
    if section::<serde_json::Value>(&text, format, "kafka").map_err(in_file)?.is_some() {
        let kafka = match format {
            Format::Yaml => KafkaSenderConfig::from_yaml_str(&text),
            Format::Toml => KafkaSenderConfig::from_toml_str(&text),
        };
        kafka.map_err(in_file)?;
        transports.push("oncebox.kafka");
    }
    if section::<serde_json::Value>(&text, format, "rabbitmq").map_err(in_file)?.is_some() {
        let rabbit = match format {
            Format::Yaml => RabbitSenderConfig::from_yaml_str(&text),
            Format::Toml => RabbitSenderConfig::from_toml_str(&text),
        };
        rabbit.map_err(in_file)?;
        transports.push("oncebox.rabbitmq");
    }

    let names = &config.tables.names;
    println!(
        "tables: {}, {}, {}, {} (auto-create {})",
        names.events(),
        names.dlq(),
        names.consumed(),
        names.jobs(),
        if config.tables.auto_create { "on" } else { "off" }
    );
    match &config.outbox {
        Some(outbox) => print_outbox(outbox),
        None => println!("outbox: off"),
    }
    match &config.inbox {
        Some(inbox) => {
            let cache = inbox.cache.map_or_else(
                || "no cache".to_owned(),
                |cache| format!("cache {} for up to {} ids", age(cache.ttl), cache.max_entries),
            );
            println!("inbox: on, {cache}, clean-up {}", clean_up(inbox.clean_up.as_ref()));
        }
        None => println!("inbox: off"),
    }
    for warning in window_warnings(&config) {
        println!("warning: {warning}");
    }
    if !transports.is_empty() {
        println!("transport blocks valid: {}", transports.join(", "));
    }
    println!("ok: {shown} is valid");
    Ok(())
}

/// Where an event can reach this service's inbox after the inbox forgot its id: the inbox then
/// refuses it (it is older than the ids kept), so the event is held or dead-lettered, not applied.
fn window_warnings(config: &Config) -> Vec<String> {
    let Some(ttl) = config.inbox.as_ref().and_then(|inbox| inbox.clean_up).map(|clean_up| clean_up.ttl)
    else {
        return Vec::new();
    };
    let Some(outbox) = &config.outbox else {
        return Vec::new();
    };
    let mut warnings: Vec<String> = outbox
        .events
        .iter()
        .filter_map(|(event_type, event)| {
            let horizon = event.backoff.retry_horizon(event.max_retries, outbox.emergency_timeout);
            (horizon >= ttl).then(|| {
                format!(
                    "event type {event_type} can be retried for up to {} (oncebox.outbox.events.{event_type}.max-retries \
                     and backoff), longer than the inbox keeps ids ({}, oncebox.inbox.clean-up.ttl): a late copy \
                     would be refused as too old; raise the TTL",
                    age(horizon),
                    age(ttl)
                )
            })
        })
        .collect();
    if outbox.dlq.is_some() {
        warnings.push(format!(
            "a DLQ re-drive can bring back an event of any age: one older than {} (oncebox.inbox.clean-up.ttl) is \
             refused by the inbox as too old (re-driving one past oncebox.outbox.dlq.re-drive-max-age needs --allow-older)",
            age(ttl)
        ));
    }
    warnings
}

fn print_outbox(outbox: &OutboxConfig) {
    println!(
        "outbox: sender {}, emergency timeout {}, wake-up {}",
        outbox.sender_type.map_or("(chosen by the code)", |kind| kind.as_str()),
        age(outbox.emergency_timeout),
        match outbox.wake_up {
            WakeUpMode::ListenNotify => "listen-notify",
            WakeUpMode::Off => "off",
        }
    );
    let rows: Vec<Vec<String>> = outbox
        .events
        .iter()
        .map(|(event_type, event)| {
            vec![
                event_type.clone(),
                event.topic.clone(),
                event.batch_size.to_string(),
                event.concurrency.to_string(),
                polling(&event.polling),
                event.max_retries.to_string(),
                backoff(&event.backoff),
            ]
        })
        .collect();
    println!(
        "{}",
        table(&["event type", "topic", "batch", "loops", "polling", "max retries", "backoff"], &rows)
    );
    let stuck = &outbox.stuck_recovery;
    println!(
        "stuck recovery: after {} in process, {} rows per run, FAILED after {} recoveries, {}",
        age(stuck.max_batch_processing_time),
        stuck.batch_size,
        stuck.max_recoveries,
        polling(&stuck.polling)
    );
    println!("clean-up of processed events: {}", clean_up(outbox.clean_up.as_ref()));
    match &outbox.dlq {
        Some(dlq) => println!(
            "dlq: on; to the DLQ {} rows {}, back to the outbox {} rows {}; clean-up of resolved {}",
            dlq.transfer_to.batch_size,
            polling(&dlq.transfer_to.polling),
            dlq.transfer_from.batch_size,
            polling(&dlq.transfer_from.polling),
            clean_up(dlq.clean_up.as_ref())
        ),
        None => println!("dlq: off (events that fail for good stay FAILED in the outbox)"),
    }
}

fn polling(polling: &Polling) -> String {
    match polling {
        Polling::Fixed { initial_delay, delay } => {
            format!("every {} (first after {})", age_ms(*delay), age_ms(*initial_delay))
        }
        Polling::Adaptive { initial_delay, min_delay, max_delay, multiplier } => format!(
            "adaptive {}..{} x{multiplier} (first after {})",
            age_ms(*min_delay),
            age_ms(*max_delay),
            age_ms(*initial_delay)
        ),
    }
}

fn backoff(backoff: &Backoff) -> String {
    if !backoff.enabled {
        return "off (retry at the next poll)".to_owned();
    }
    let jitter = if backoff.jitter > 0.0 { format!(", jitter {}", backoff.jitter) } else { String::new() };
    format!("{} x{} up to {}{jitter}", age_ms(backoff.delay), backoff.multiplier, age_ms(backoff.max_delay))
}

fn clean_up(clean_up: Option<&CleanUpConfig>) -> String {
    clean_up.map_or_else(
        || "off".to_owned(),
        |job| format!("after {}, {} rows {}", age(job.ttl), job.batch_size, polling(&job.polling)),
    )
}

/// A poll or retry delay, to the millisecond (they are often under a second).
fn age_ms(duration: std::time::Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    humantime::format_duration(std::time::Duration::from_millis(duration.as_millis() as u64)).to_string()
}
