//! Defaults, inheritance and validation: raw file model → [`Config`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::raw::*;
use super::*;
use crate::stored::StoredInboxSettings;

const OUTBOX: &str = "oncebox.outbox";
const INBOX: &str = "oncebox.inbox";

fn secs(value: u64) -> Option<HumanDuration> {
    Some(HumanDuration(Duration::from_secs(value)))
}

fn millis(value: u64) -> Option<HumanDuration> {
    Some(HumanDuration(Duration::from_millis(value)))
}

fn adaptive(
    initial: Option<HumanDuration>,
    min: Option<HumanDuration>,
    max: u64,
    multiplier: f64,
) -> RawPolling {
    RawPolling {
        kind: Some(PollingType::Adaptive),
        initial_delay: initial,
        fixed_delay: None,
        min_fixed_delay: min,
        max_fixed_delay: secs(max),
        multiplier: Some(multiplier),
    }
}

/// Event pollers start at once: the seed's 5-minute initial delay held back every event after start.
fn event_polling_defaults() -> RawPolling {
    adaptive(secs(0), millis(250), 60, 1.5)
}

fn stuck_recovery_polling_defaults() -> RawPolling {
    adaptive(secs(300), secs(1), 60, 4.0)
}

fn clean_up_polling_defaults() -> RawPolling {
    adaptive(secs(300), secs(5), 60, 2.0)
}

fn dlq_polling_defaults() -> RawPolling {
    adaptive(secs(300), secs(1), 120, 10.0)
}

fn backoff_defaults() -> RawBackoff {
    RawBackoff {
        enabled: Some(true),
        delay: secs(10),
        multiplier: Some(3.0),
        max_delay: secs(3600),
        jitter: Some(0.0),
    }
}

/// Reads a duration setting: `default` when unset, an error naming `key` when over
/// [`MAX_SETTING_DURATION`].
fn setting(value: Option<HumanDuration>, key: impl AsRef<str>, default: Duration) -> Result<Duration> {
    let value = value.map(|d| d.0).unwrap_or(default);
    if value > MAX_SETTING_DURATION {
        return Err(Error::config(
            key.as_ref(),
            format!("{} is longer than the 100 years any duration may be", humantime::format_duration(value)),
        ));
    }
    Ok(value)
}

pub(crate) fn resolve(raw: &RawOncebox) -> Result<Config> {
    let thread_pool_size = match raw.thread_pool_size {
        Some(0) => return Err(Error::config("oncebox.thread-pool-size", "must be at least 1")),
        Some(size) => size,
        None => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(5),
    };
    let tables_raw = raw.tables.clone().unwrap_or_default();
    let tables = TablesConfig {
        auto_create: tables_raw.auto_create.unwrap_or(true),
        names: TableNames::with_prefix(tables_raw.prefix.as_deref().unwrap_or(""))?,
    };
    let lock_raw = raw.distributed_lock.clone().unwrap_or_default();
    let distributed_lock = DistributedLockConfig {
        lock_at_least_for: setting(
            lock_raw.lock_at_least_for,
            "oncebox.distributed-lock.lock-at-least-for",
            Duration::from_secs(1),
        )?,
        lock_at_most_for: setting(
            lock_raw.lock_at_most_for,
            "oncebox.distributed-lock.lock-at-most-for",
            Duration::from_secs(60),
        )?,
        resolve_by_polling_properties: lock_raw.resolve_by_polling_properties.unwrap_or(true),
    };
    if distributed_lock.lock_at_least_for > distributed_lock.lock_at_most_for {
        return Err(Error::config(
            "oncebox.distributed-lock.lock-at-least-for",
            "must not be greater than lock-at-most-for",
        ));
    }
    let outbox = match &raw.outbox {
        Some(outbox) if outbox.enabled.unwrap_or(true) => Some(resolve_outbox(outbox)?),
        _ => None,
    };
    let inbox = match &raw.inbox {
        Some(inbox) if inbox.enabled.unwrap_or(true) => Some(resolve_inbox(inbox)?),
        _ => None,
    };
    Ok(Config { thread_pool_size, tables, distributed_lock, outbox, inbox })
}

fn resolve_outbox(raw: &RawOutbox) -> Result<OutboxConfig> {
    let sender = raw.sender.clone().unwrap_or_default();
    let emergency_timeout = setting(
        sender.emergency_timeout,
        format!("{OUTBOX}.sender.emergency-timeout"),
        Duration::from_secs(120),
    )?;
    if emergency_timeout.is_zero() {
        return Err(Error::config(format!("{OUTBOX}.sender.emergency-timeout"), "must be greater than 0"));
    }
    let defaults = raw.defaults.clone().unwrap_or_default();
    if defaults.topic.is_some() {
        return Err(Error::config(
            format!("{OUTBOX}.defaults.topic"),
            "a topic belongs to an event type, not to the defaults",
        ));
    }
    let default_polling = defaults.polling.clone().unwrap_or_default().over(&event_polling_defaults());
    let default_backoff = defaults.backoff.clone().unwrap_or_default().over(&backoff_defaults());

    let raw_events = raw.events.clone().unwrap_or_default();
    if raw_events.is_empty() {
        return Err(Error::config(
            format!("{OUTBOX}.events"),
            "at least one event type is required (omit the outbox section for a consumer-only service)",
        ));
    }
    let mut events = BTreeMap::new();
    for (name, settings) in &raw_events {
        let path = format!("{OUTBOX}.events.{name}");
        if let Some(problem) = crate::event::event_type_name_problem(name) {
            return Err(Error::config(&path, problem));
        }
        let topic = match settings.topic.as_deref().map(str::trim) {
            Some(topic) if !topic.is_empty() => topic.to_owned(),
            Some(_) => return Err(Error::config(format!("{path}.topic"), "must not be blank")),
            None => {
                return Err(Error::config(
                    format!("{path}.topic"),
                    "missing: every event type needs a topic",
                ));
            }
        };
        let batch_size = batch_size(settings.batch_size.or(defaults.batch_size).unwrap_or(200), &path)?;
        let concurrency = concurrency(settings.concurrency.or(defaults.concurrency).unwrap_or(1), &path)?;
        let polling_raw = settings.polling.clone().unwrap_or_default().over(&default_polling);
        let polling = polling(&polling_raw, &format!("{path}.polling"))?;
        let max_retries = settings.max_retries.or(defaults.max_retries).unwrap_or(3);
        let backoff_raw = settings.backoff.clone().unwrap_or_default().over(&default_backoff);
        let backoff = backoff(&backoff_raw, &format!("{path}.backoff"))?;
        events.insert(
            name.clone(),
            EventConfig { topic, batch_size, concurrency, polling, max_retries, backoff },
        );
    }

    let stuck = raw.stuck_recovery.clone().unwrap_or_default();
    let stuck_recovery = StuckRecoveryConfig {
        batch_size: batch_size(stuck.batch_size.unwrap_or(500), &format!("{OUTBOX}.stuck-recovery"))?,
        max_batch_processing_time: setting(
            stuck.max_batch_processing_time,
            format!("{OUTBOX}.stuck-recovery.max-batch-processing-time"),
            Duration::from_secs(300),
        )?,
        max_recoveries: match stuck.max_recoveries.unwrap_or(5) {
            0 => {
                return Err(Error::config(
                    format!("{OUTBOX}.stuck-recovery.max-recoveries"),
                    "must be at least 1",
                ));
            }
            max_recoveries => max_recoveries,
        },
        polling: polling(
            &stuck.polling.clone().unwrap_or_default().over(&stuck_recovery_polling_defaults()),
            &format!("{OUTBOX}.stuck-recovery.polling"),
        )?,
    };
    if stuck_recovery.max_batch_processing_time <= emergency_timeout {
        return Err(Error::config(
            format!("{OUTBOX}.stuck-recovery.max-batch-processing-time"),
            format!(
                "must be longer than sender.emergency-timeout ({}), or batches still being sent would be \
                 recovered and sent twice",
                humantime::format_duration(emergency_timeout)
            ),
        ));
    }

    let clean_up = resolve_clean_up(raw.clean_up.as_ref(), &format!("{OUTBOX}.clean-up"))?;

    let dlq = match &raw.dlq {
        Some(dlq) if dlq.enabled.unwrap_or(false) => {
            let shared_polling = dlq.polling.clone().unwrap_or_default().over(&dlq_polling_defaults());
            let shared_batch = dlq.batch_size.unwrap_or(500);
            let job = |raw_job: &Option<RawJob>, key: &str| -> Result<JobConfig> {
                let raw_job = raw_job.clone().unwrap_or_default();
                let path = format!("{OUTBOX}.dlq.{key}");
                Ok(JobConfig {
                    batch_size: batch_size(raw_job.batch_size.unwrap_or(shared_batch), &path)?,
                    polling: polling(
                        &raw_job.polling.unwrap_or_default().over(&shared_polling),
                        &format!("{path}.polling"),
                    )?,
                })
            };
            batch_size(shared_batch, &format!("{OUTBOX}.dlq"))?;
            let re_drive_key = crate::dlq::RE_DRIVE_MAX_AGE_KEY;
            let re_drive_max_age = setting(dlq.re_drive_max_age, re_drive_key, DEFAULT_RE_DRIVE_MAX_AGE)?;
            if re_drive_max_age.is_zero() {
                return Err(Error::config(re_drive_key, "must be greater than 0"));
            }
            polling(&shared_polling, &format!("{OUTBOX}.dlq.polling"))?;
            Some(DlqConfig {
                transfer_to: job(&dlq.transfer_to, "transfer-to")?,
                transfer_from: job(&dlq.transfer_from, "transfer-from")?,
                clean_up: resolve_clean_up(dlq.clean_up.as_ref(), &format!("{OUTBOX}.dlq.clean-up"))?,
                re_drive_max_age,
            })
        }
        _ => None,
    };

    let metrics = metrics(raw.metrics.as_ref(), &format!("{OUTBOX}.metrics"))?;
    Ok(OutboxConfig {
        sender_type: sender.kind,
        emergency_timeout,
        events,
        stuck_recovery,
        clean_up,
        dlq,
        metrics,
        wake_up: raw.wake_up.unwrap_or_default(),
    })
}

fn resolve_inbox(raw: &RawInbox) -> Result<InboxConfig> {
    let clean_up = resolve_clean_up(raw.clean_up.as_ref(), &format!("{INBOX}.clean-up"))?;
    let cache = match &raw.cache {
        Some(cache) if cache.enabled.unwrap_or(true) => {
            let ttl = setting(cache.ttl, format!("{INBOX}.cache.ttl"), Duration::from_secs(3600))?;
            if ttl.is_zero() {
                return Err(Error::config(format!("{INBOX}.cache.ttl"), "must be greater than 0"));
            }
            if let Some(clean_up) = &clean_up
                && ttl > clean_up.ttl
            {
                return Err(Error::config(
                    format!("{INBOX}.cache.ttl"),
                    format!(
                        "{} is longer than inbox.clean-up.ttl ({}): the cache would claim ids the inbox has forgotten",
                        humantime::format_duration(ttl),
                        humantime::format_duration(clean_up.ttl)
                    ),
                ));
            }
            let max_entries = cache.max_entries.unwrap_or(100_000);
            if max_entries == 0 {
                return Err(Error::config(format!("{INBOX}.cache.max-entries"), "must be at least 1"));
            }
            Some(CacheConfig { ttl, max_entries })
        }
        _ => None,
    };
    let cache_name = match raw.cache.as_ref().and_then(|cache| cache.cache_name.as_deref()) {
        None => DEFAULT_CACHE_NAME.to_owned(),
        Some(name) if name.trim().is_empty() => {
            return Err(Error::config(format!("{INBOX}.cache.cache-name"), "must not be blank"));
        }
        Some(name) if name.chars().any(char::is_control) => {
            return Err(Error::config(
                format!("{INBOX}.cache.cache-name"),
                "must not contain control characters (it is the prefix of every cache key)",
            ));
        }
        Some(name) => name.to_owned(),
    };
    let metrics = metrics(raw.metrics.as_ref(), &format!("{INBOX}.metrics"))?;
    let durable = raw.durable.as_ref().map(resolve_durable).transpose()?;
    Ok(InboxConfig {
        durable,
        source: raw.source.as_ref().and_then(|source| source.kind),
        clean_up,
        cache,
        cache_name,
        metrics_enabled: metrics.enabled,
    })
}

/// `inbox.durable`: every key optional, each default [`StoredInboxSettings::default`]'s.
fn resolve_durable(raw: &RawDurable) -> Result<StoredInboxSettings> {
    let path = format!("{INBOX}.durable");
    let defaults = StoredInboxSettings::default();
    let backoff = match &raw.backoff {
        Some(raw) => {
            let base = &defaults.backoff;
            let base = RawBackoff {
                enabled: Some(base.enabled),
                delay: Some(HumanDuration(base.delay)),
                multiplier: Some(base.multiplier),
                max_delay: Some(HumanDuration(base.max_delay)),
                jitter: Some(base.jitter),
            };
            backoff(&raw.over(&base), &format!("{path}.backoff"))?
        }
        None => defaults.backoff,
    };
    let settings = StoredInboxSettings {
        batch_size: raw.batch_size.unwrap_or(defaults.batch_size),
        concurrency: raw.concurrency.unwrap_or(defaults.concurrency),
        poll_interval: setting(raw.poll_interval, format!("{path}.poll-interval"), defaults.poll_interval)?,
        lease: setting(raw.lease, format!("{path}.lease"), defaults.lease)?,
        max_attempts: raw.max_attempts.unwrap_or(defaults.max_attempts),
        backoff,
        keep_processed: setting(
            raw.keep_processed,
            format!("{path}.keep-processed"),
            defaults.keep_processed,
        )?,
        clean_up_every: setting(
            raw.clean_up_every,
            format!("{path}.clean-up-every"),
            defaults.clean_up_every,
        )?,
    };
    settings.validate()?;
    Ok(settings)
}

/// Claim loops per event type: at least one, and no more than [`MAX_CONCURRENCY`], past which
/// more loops only contend for the same rows and connections.
fn concurrency(value: u32, path: &str) -> Result<u32> {
    if !(1..=MAX_CONCURRENCY).contains(&value) {
        return Err(Error::config(
            format!("{path}.concurrency"),
            format!("must be between 1 and {MAX_CONCURRENCY}, got {value}"),
        ));
    }
    Ok(value)
}

fn batch_size(value: u32, path: &str) -> Result<u32> {
    if value == 0 {
        return Err(Error::config(format!("{path}.batch-size"), "must be at least 1"));
    }
    Ok(value)
}

fn resolve_clean_up(raw: Option<&RawCleanUp>, path: &str) -> Result<Option<CleanUpConfig>> {
    let raw = raw.cloned().unwrap_or_default();
    if !raw.enabled.unwrap_or(true) {
        return Ok(None);
    }
    let ttl = setting(raw.ttl, format!("{path}.ttl"), DEFAULT_CLEAN_UP_TTL)?;
    if ttl.is_zero() {
        return Err(Error::config(format!("{path}.ttl"), "must be greater than 0"));
    }
    Ok(Some(CleanUpConfig {
        batch_size: batch_size(raw.batch_size.unwrap_or(500), path)?,
        ttl,
        polling: polling(
            &raw.polling.unwrap_or_default().over(&clean_up_polling_defaults()),
            &format!("{path}.polling"),
        )?,
    }))
}

fn metrics(raw: Option<&RawMetrics>, path: &str) -> Result<MetricsConfig> {
    let raw = raw.cloned().unwrap_or_default();
    let gauge = raw.gauge.unwrap_or_default();
    let gauges = if gauge.enabled.unwrap_or(false) {
        let cache = gauge.cache.unwrap_or_default();
        let cache_ttls = if cache.enabled.unwrap_or(true) {
            let key = format!("{path}.gauge.cache.ttls");
            let ttls: Vec<Duration> = match cache.ttls {
                Some(ttls) => ttls
                    .into_iter()
                    .map(|ttl| setting(Some(ttl), &key, Duration::ZERO))
                    .collect::<Result<_>>()?,
                None => vec![Duration::from_secs(60); 3],
            };
            // Each refresh counts whole tables: more often than once a second only loads the database.
            if let Some(short) = ttls.iter().find(|ttl| **ttl < MIN_GAUGE_REFRESH) {
                return Err(Error::config(
                    &key,
                    format!(
                        "{} is shorter than 1s; each refresh counts whole tables",
                        humantime::format_duration(*short)
                    ),
                ));
            }
            let ttls: [Duration; 3] = ttls.try_into().map_err(|ttls: Vec<Duration>| {
                Error::config(
                    &key,
                    format!(
                        "needs exactly 3 durations (total, per status, per type and status), got {}",
                        ttls.len()
                    ),
                )
            })?;
            Some(ttls)
        } else {
            None
        };
        Some(GaugeConfig { cache_ttls })
    } else {
        None
    };
    Ok(MetricsConfig { enabled: raw.enabled.unwrap_or(false) || gauges.is_some(), gauges })
}

fn polling(raw: &RawPolling, path: &str) -> Result<Polling> {
    let initial_delay = setting(raw.initial_delay, format!("{path}.initial-delay"), Duration::ZERO)?;
    match raw.kind.unwrap_or(PollingType::Adaptive) {
        PollingType::Fixed => {
            if raw.fixed_delay.is_none() {
                return Err(Error::config(
                    format!("{path}.fixed-delay"),
                    "required when polling type is 'fixed'",
                ));
            }
            let delay = setting(raw.fixed_delay, format!("{path}.fixed-delay"), Duration::ZERO)?;
            if delay.is_zero() {
                return Err(Error::config(
                    format!("{path}.fixed-delay"),
                    "must be greater than 0 (a zero delay busy-loops)",
                ));
            }
            Ok(Polling::Fixed { initial_delay, delay })
        }
        PollingType::Adaptive => {
            let min_delay = setting(raw.min_fixed_delay, format!("{path}.min-fixed-delay"), Duration::ZERO)?;
            let max_delay = setting(raw.max_fixed_delay, format!("{path}.max-fixed-delay"), Duration::ZERO)?;
            let multiplier = raw.multiplier.unwrap_or(1.5);
            if min_delay.is_zero() {
                return Err(Error::config(
                    format!("{path}.min-fixed-delay"),
                    "must be greater than 0 (a zero delay busy-loops)",
                ));
            }
            if min_delay > max_delay {
                return Err(Error::config(
                    format!("{path}.min-fixed-delay"),
                    format!(
                        "{} is greater than max-fixed-delay ({})",
                        humantime::format_duration(min_delay),
                        humantime::format_duration(max_delay)
                    ),
                ));
            }
            if !multiplier.is_finite() || multiplier < 1.0 {
                return Err(Error::config(
                    format!("{path}.multiplier"),
                    format!("{multiplier} is less than 1.0"),
                ));
            }
            Ok(Polling::Adaptive { initial_delay, min_delay, max_delay, multiplier })
        }
    }
}

fn backoff(raw: &RawBackoff, path: &str) -> Result<Backoff> {
    let enabled = raw.enabled.unwrap_or(true);
    let multiplier = raw.multiplier.unwrap_or(3.0);
    let jitter = raw.jitter.unwrap_or(0.0);
    if !multiplier.is_finite() || multiplier < 1.0 {
        return Err(Error::config(format!("{path}.multiplier"), format!("{multiplier} is less than 1.0")));
    }
    if !(0.0..=1.0).contains(&jitter) {
        return Err(Error::config(format!("{path}.jitter"), format!("{jitter} is not between 0.0 and 1.0")));
    }
    Ok(Backoff {
        enabled,
        delay: setting(raw.delay, format!("{path}.delay"), Duration::ZERO)?,
        multiplier,
        max_delay: setting(raw.max_delay, format!("{path}.max-delay"), Duration::from_secs(3600))?,
        jitter,
    })
}
