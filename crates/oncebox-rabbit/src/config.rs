//! Connection and sender settings.

use std::fmt;
use std::time::Duration;

use lapin::types::ShortString;
use oncebox_core::config::{Format, HumanDuration, section};
use oncebox_core::retry::Doubling;
use oncebox_core::{Error, Result};
use serde::Deserialize;

use crate::topology::RabbitTopology;

/// Default bound on opening or closing a connection outside a send ([`RabbitSender::connect`],
/// [`RabbitSender::close`]); inside a send, the engine's deadline bounds connecting too.
///
/// [`RabbitSender::connect`]: crate::RabbitSender::connect
/// [`RabbitSender::close`]: crate::RabbitSender::close
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default first wait before reconnecting after a failed connection attempt.
pub const DEFAULT_RECONNECT_MIN: Duration = Duration::from_millis(100);
/// Default longest wait between reconnection attempts.
pub const DEFAULT_RECONNECT_MAX: Duration = Duration::from_secs(10);
/// Longest connect timeout accepted: the engine's own limit on any duration setting
/// ([`MAX_SETTING_DURATION`](oncebox_core::config::MAX_SETTING_DURATION), 100 years). Longer values
/// are typos, and a deadline computed from one would overflow the clock.
pub const MAX_CONNECT_TIMEOUT: Duration = oncebox_core::config::MAX_SETTING_DURATION;
/// Longest reconnection backoff accepted (one hour), for the sender and the listener: waiting longer
/// after a broker comes back only prolongs an outage, and a far deadline could overflow the clock.
pub const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(60 * 60);

/// How a [`RabbitSender`](crate::RabbitSender) reaches the broker.
///
/// How long a send may take is not set here: the engine hands every send the deadline of its
/// `oncebox.outbox.sender.emergency-timeout`. `Debug` hides the password of the URL.
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitSenderConfig {
    pub(crate) url: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect: Doubling,
    pub(crate) connection_name: String,
}

impl RabbitSenderConfig {
    /// Settings for the broker at `url` (`amqp://user:password@host:5672/%2f`) with the defaults:
    /// a 30 s connect timeout and reconnection backoff from 100 ms doubling up to 10 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            reconnect: Doubling::new(DEFAULT_RECONNECT_MIN, DEFAULT_RECONNECT_MAX),
            connection_name: "oncebox-rabbit sender".to_owned(),
        }
    }

    /// Reads `oncebox.rabbitmq` from a YAML document (the file the core reads; its other keys are
    /// ignored): `url`, optional `connect-timeout` and `connection-name`. An `emergency-timeout`
    /// here is refused with a pointer to `oncebox.outbox.sender.emergency-timeout`, which bounds
    /// every send.
    ///
    /// ```
    /// use oncebox_rabbit::RabbitSenderConfig;
    /// let text = "oncebox:\n  rabbitmq:\n    url: amqp://guest:guest@127.0.0.1:5672/%2f\n    connect-timeout: 5s\n";
    /// let config = RabbitSenderConfig::from_yaml_str(text)?;
    /// assert_eq!(config.connect_timeout(), std::time::Duration::from_secs(5));
    /// # Ok::<(), oncebox_core::Error>(())
    /// ```
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        RabbitSection::read(text, Format::Yaml)?.sender()
    }

    /// Reads `[oncebox.rabbitmq]` from a TOML document, with the keys of
    /// [`from_yaml_str`](Self::from_yaml_str).
    pub fn from_toml_str(text: &str) -> Result<Self> {
        RabbitSection::read(text, Format::Toml)?.sender()
    }

    /// Bounds opening and closing a connection outside a send ([`RabbitSender::connect`] at
    /// start-up, [`RabbitSender::close`]). At most [`MAX_CONNECT_TIMEOUT`].
    ///
    /// [`RabbitSender::connect`]: crate::RabbitSender::connect
    /// [`RabbitSender::close`]: crate::RabbitSender::close
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// After a failed connection attempt the next one waits `min`, doubling per failure up to `max`.
    /// Batches sent while waiting fail at once with a temporary error instead of hammering the broker.
    #[must_use]
    pub fn with_reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect = Doubling::new(min, max);
        self
    }

    /// The connection name shown in the RabbitMQ management UI and `rabbitmqctl list_connections`.
    #[must_use]
    pub fn with_connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    /// Checks the settings once, naming the offending key.
    pub fn validate(&self) -> Result<()> {
        if !(self.url.starts_with("amqp://") || self.url.starts_with("amqps://")) {
            return Err(Error::config("rabbit.url", "must start with amqp:// or amqps://"));
        }
        check_url("rabbit.url", &self.url)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::config("rabbit.connect-timeout", "must be greater than zero"));
        }
        if self.connect_timeout > MAX_CONNECT_TIMEOUT {
            return Err(Error::config(
                "rabbit.connect-timeout",
                format!("{:?} is longer than the limit {MAX_CONNECT_TIMEOUT:?}", self.connect_timeout),
            ));
        }
        self.reconnect.check("rabbit.reconnect-backoff", MAX_RECONNECT_BACKOFF)
    }

    /// The broker URL, password included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound on opening or closing a connection outside a send.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The delay before reconnection attempt `failures + 1` after `failures` failed attempts.
    pub(crate) fn reconnect_delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        self.reconnect.delay(failures)
    }
}

impl fmt::Debug for RabbitSenderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSenderConfig")
            .field("url", &redact_url(&self.url))
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect", &self.reconnect)
            .field("connection_name", &self.connection_name)
            .finish()
    }
}

/// The `oncebox.rabbitmq` block of a configuration file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RabbitSection {
    url: String,
    connect_timeout: Option<HumanDuration>,
    /// Moved to `oncebox.outbox.sender.emergency-timeout`; read only to refuse it clearly.
    emergency_timeout: Option<serde::de::IgnoredAny>,
    connection_name: Option<String>,
}

impl RabbitSection {
    fn read(text: &str, format: Format) -> Result<Self> {
        let block: Self = section(text, format, "rabbitmq")?
            .ok_or_else(|| Error::config("oncebox.rabbitmq", "the section is missing"))?;
        if block.emergency_timeout.is_some() {
            return Err(Error::config(
                "oncebox.rabbitmq.emergency-timeout",
                "is not read: set oncebox.outbox.sender.emergency-timeout, which the engine hands to \
                 the sender as the deadline of every send (connect-timeout bounds connecting outside a send)",
            ));
        }
        Ok(block)
    }

    fn sender(self) -> Result<RabbitSenderConfig> {
        let mut config = RabbitSenderConfig::new(self.url);
        if let Some(HumanDuration(timeout)) = self.connect_timeout {
            config = config.with_connect_timeout(timeout);
        }
        if let Some(name) = self.connection_name {
            config = config.with_connection_name(name);
        }
        config.validate().map_err(|error| error.context("the oncebox.rabbitmq block"))?;
        Ok(config)
    }

    fn listener(self, queue: String) -> Result<RabbitListenerConfig> {
        let mut config = RabbitListenerConfig::new(self.url, queue);
        if let Some(name) = self.connection_name {
            config = config.with_connection_name(name);
        }
        config.validate().map_err(|error| error.context("the oncebox.rabbitmq block"))?;
        Ok(config)
    }
}

/// Parses `url` as lapin will, so a malformed URL fails at construction with `key` named. The
/// parser's message never contains the URL once the scheme has been checked. An `amqps://` URL
/// without TLS compiled in is refused here rather than failing every connection attempt later.
pub(crate) fn check_url(key: &str, url: &str) -> Result<()> {
    if url.starts_with("amqps://") && !cfg!(feature = "rustls") {
        return Err(Error::config(
            key,
            "amqps:// needs TLS support: enable the `rustls` feature of oncebox-rabbit (`tls-rustls` of the oncebox facade)",
        ));
    }
    url.parse::<lapin::uri::AMQPUri>()
        .map(|_| ())
        .map_err(|problem| Error::config(key, format!("{problem} in {}", redact_url(url))))
}

/// The URL with the password of its user info (and secret-looking query parameters) replaced by
/// `***`, for logs and `Debug`: the one rule of `oncebox-core`, where the user info runs to the
/// **last** `@`, so a password with an unencoded `/`, `?`, `#` or `@` is hidden too.
pub use oncebox_core::redact::redact_url;

/// Default number of failed handler runs of an event seen by this process (the first included,
/// across in-process retries and redeliveries to this process) before it is rejected to the
/// dead-letter exchange. Without a dead-letter exchange the event is retried beyond it, never
/// discarded.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default wait before the second run of a failing handler; it doubles per failed run.
pub const DEFAULT_RETRY_MIN: Duration = Duration::from_millis(200);
/// Default longest wait between runs of a failing handler.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(30);
/// Longest retry backoff accepted (15 minutes). The message waits unacknowledged meanwhile, and
/// RabbitMQ closes a channel holding a message longer than its `consumer_timeout` (30 minutes by
/// default), so a longer wait could never end in a retry.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// Longest shutdown grace accepted (one day); a deadline beyond it could overflow the clock.
pub const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(24 * 60 * 60);
/// Default wait for the delivery in hand at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Default number of unacknowledged messages the broker sends ahead.
pub const DEFAULT_PREFETCH: u16 = 32;

/// Where and how a [`RabbitListener`] consumes. `Debug` hides the URL's password.
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitListenerConfig {
    pub(crate) url: String,
    pub(crate) queue: String,
    pub(crate) prefetch: u16,
    pub(crate) concurrency: u16,
    pub(crate) max_attempts: u32,
    pub(crate) retry: Doubling,
    pub(crate) declare: Option<RabbitTopology>,
    pub(crate) queue_dead_letter_exchange: bool,
    pub(crate) reconnect: Doubling,
    pub(crate) shutdown_grace: Duration,
    pub(crate) connection_name: String,
}

impl fmt::Debug for RabbitListenerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitListenerConfig")
            .field("url", &redact_url(&self.url))
            .field("queue", &self.queue)
            .field("prefetch", &self.prefetch)
            .field("concurrency", &self.concurrency)
            .field("max_attempts", &self.max_attempts)
            .field("retry", &self.retry)
            .field("declare", &self.declare)
            .field("queue_dead_letter_exchange", &self.queue_dead_letter_exchange)
            .field("reconnect", &self.reconnect)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish()
    }
}

impl RabbitListenerConfig {
    /// Consume `queue` on the broker at `url`, with prefetch 32, a failing handler retried after
    /// 200 ms doubling up to 30 s and given up after 5 runs only when there is a dead-letter
    /// exchange, no topology declaration (and so no known dead-letter exchange), reconnect backoff
    /// from 100 ms doubling up to 10 s, 30 s shutdown grace.
    pub fn new(url: impl Into<String>, queue: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            queue: queue.into(),
            prefetch: DEFAULT_PREFETCH,
            concurrency: 1,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retry: Doubling::new(DEFAULT_RETRY_MIN, DEFAULT_RETRY_MAX),
            declare: None,
            queue_dead_letter_exchange: false,
            reconnect: Doubling::new(DEFAULT_RECONNECT_MIN, DEFAULT_RECONNECT_MAX),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            connection_name: "oncebox-rabbit listener".to_owned(),
        }
    }

    /// Reads the broker's `url` (and `connection-name`) from `oncebox.rabbitmq` of a YAML
    /// document, for consuming `queue`; see [`RabbitSenderConfig::from_yaml_str`].
    pub fn from_yaml_str(text: &str, queue: impl Into<String>) -> Result<Self> {
        RabbitSection::read(text, Format::Yaml)?.listener(queue.into())
    }

    /// Reads `[oncebox.rabbitmq]` of a TOML document; see [`Self::from_yaml_str`].
    pub fn from_toml_str(text: &str, queue: impl Into<String>) -> Result<Self> {
        RabbitSection::read(text, Format::Toml)?.listener(queue.into())
    }

    /// Unacknowledged messages the broker may send ahead (`basic.qos`).
    #[must_use]
    pub fn with_prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Handlers running at once (1 by default: one message at a time, in queue order). With more,
    /// up to `concurrency` deliveries are handled side by side, each acknowledged when its own
    /// handler is done, so effects no longer happen in queue order; a failing one waits for its
    /// retry without holding back the others. At most the prefetch (unless it is 0, unlimited):
    /// more could never be in hand.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: u16) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Failed runs of a handler seen by this process (the first included, in-process retries and
    /// redeliveries to this process together; a redelivery caused by a closed channel alone does not
    /// count) before the message is rejected to the queue's dead-letter exchange. Without a
    /// dead-letter exchange the message is not given up: it stays unacknowledged and is retried at
    /// the backoff, each further failure logged at ERROR.
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Waits between runs of a failing handler: `min`, doubling per failed run, up to `max`
    /// (at most [`MAX_RETRY_BACKOFF`]). The message is held unacknowledged meanwhile; handlers run
    /// one at a time, so the messages behind it wait too, in order.
    #[must_use]
    pub fn with_retry_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.retry = Doubling::new(min, max);
        self
    }

    /// The queue, declared elsewhere, has a dead-letter exchange (an `x-dead-letter-exchange`
    /// argument or a policy), so rejecting a message sends it there. Only then, or with a
    /// [declared topology](Self::with_declare) that names a dead-letter exchange, does the listener
    /// reject poison messages and messages whose attempts are used up; RabbitMQ would discard them
    /// otherwise.
    #[must_use]
    pub fn with_queue_dead_letter_exchange(mut self) -> Self {
        self.queue_dead_letter_exchange = true;
        self
    }

    /// Declares `topology` (and the queue) on every (re)connection (`declare: true`).
    #[must_use]
    pub fn with_declare(mut self, topology: RabbitTopology) -> Self {
        self.declare = Some(topology);
        self
    }

    /// Backoff between reconnection attempts: `min`, doubling per failure, up to `max`.
    #[must_use]
    pub fn with_reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect = Doubling::new(min, max);
        self
    }

    /// How long [`RabbitListener::run`] waits, after shutdown was requested, for the delivery in
    /// hand to be handled and settled (default 30 s).
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The connection name shown by the broker.
    #[must_use]
    pub fn with_connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.url.starts_with("amqp://") || self.url.starts_with("amqps://")) {
            return Err(Error::config("rabbit.listener.url", "must start with amqp:// or amqps://"));
        }
        crate::config::check_url("rabbit.listener.url", &self.url)?;
        if self.queue.is_empty() || ShortString::try_new(self.queue.as_str()).is_err() {
            return Err(Error::config("rabbit.listener.queue", "must be 1 to 255 bytes"));
        }
        if self.max_attempts == 0 {
            return Err(Error::config("rabbit.listener.max-attempts", "must be at least 1"));
        }
        if self.concurrency == 0 {
            return Err(Error::config("rabbit.listener.concurrency", "must be at least 1"));
        }
        if self.prefetch != 0 && self.concurrency > self.prefetch {
            return Err(Error::config(
                "rabbit.listener.concurrency",
                format!(
                    "{} is more than the prefetch ({}): no more deliveries than the prefetch can be in hand",
                    self.concurrency, self.prefetch
                ),
            ));
        }
        self.retry.check("rabbit.listener.retry-backoff", MAX_RETRY_BACKOFF)?;
        self.reconnect.check("rabbit.listener.reconnect-backoff", MAX_RECONNECT_BACKOFF)?;
        if self.shutdown_grace > MAX_SHUTDOWN_GRACE {
            return Err(Error::config(
                "rabbit.listener.shutdown-grace",
                format!("{:?} is longer than the limit {MAX_SHUTDOWN_GRACE:?}", self.shutdown_grace),
            ));
        }
        Ok(())
    }

    /// Where a rejected message goes, for reports: the declared dead-letter exchange, else the
    /// one the queue was declared with elsewhere.
    pub(crate) fn dead_letter_destination(&self) -> String {
        match self.declare.as_ref().and_then(|topology| topology.dead_letter_exchange.as_deref()) {
            Some(exchange) => format!("exchange '{exchange}'"),
            None => format!("the dead-letter exchange of queue '{}'", self.queue),
        }
    }

    /// Whether rejecting a message sends it to a dead-letter exchange rather than discarding it.
    pub(crate) fn dead_letters(&self) -> bool {
        self.queue_dead_letter_exchange
            || self.declare.as_ref().is_some_and(|topology| topology.dead_letter_exchange.is_some())
    }

    pub(crate) fn reconnect_delay(&self, failures: u32) -> Duration {
        self.reconnect.delay(failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RabbitSender;
    use oncebox_core::Sender;

    #[test]
    fn debug_hides_the_password() {
        let config = RabbitSenderConfig::new("amqp://guest:s3cret@127.0.0.1:5672/%2f");
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("amqp://guest:***@127.0.0.1:5672/%2f"), "{shown}");
        assert_eq!(redact_url("amqp://127.0.0.1:5672"), "amqp://127.0.0.1:5672");
        assert_eq!(redact_url("amqp://user@host/vh"), "amqp://user@host/vh");
    }

    #[test]
    fn validation_names_the_key() {
        let bad = RabbitSenderConfig::new("http://x").validate().err().map(|e| e.to_string());
        assert!(bad.is_some_and(|text| text.contains("rabbit.url")));
        let bad = RabbitSenderConfig::new("amqp://guest:secret@host:notaport/")
            .validate()
            .err()
            .map(|e| e.to_string());
        assert!(bad.is_some_and(|text| text.contains("rabbit.url") && !text.contains("secret")));
        let bad = RabbitSenderConfig::new("amqp://x")
            .with_reconnect_backoff(Duration::from_secs(2), Duration::from_secs(1))
            .validate()
            .err()
            .map(|e| e.to_string());
        assert!(bad.is_some_and(|text| text.contains("rabbit.reconnect-backoff")));
    }

    /// Passwords that must never show, in the URL shapes people write.
    const SECRET_URLS: &[(&str, &str, &str)] = &[
        ("amqp://user:pa/ss@host:5672/%2f", "pa/ss", "amqp://user:***@host:5672/%2f"),
        ("amqp://user:p%40ss@host:5672/%2f", "p%40ss", "amqp://user:***@host:5672/%2f"),
        ("amqp://user:pa@ss@host:5672/%2f", "pa@ss", "amqp://user:***@host:5672/%2f"),
        ("amqp://user:a/b@c@host:5672/vhost", "a/b@c", "amqp://user:***@host:5672/vhost"),
        ("amqp://user:s3cr/et@host", "s3cr/et", "amqp://user:***@host"),
        (
            "amqps://user:s3cret@broker.example.com:5671/prod",
            "s3cret",
            "amqps://user:***@broker.example.com:5671/prod",
        ),
        ("amqps://user:s3cret@broker.example.com", "s3cret", "amqps://user:***@broker.example.com"),
        (
            "amqp://user:s3cret@host:5672/%2f?heartbeat=10",
            "s3cret",
            "amqp://user:***@host:5672/%2f?heartbeat=10",
        ),
        ("amqp://:s3cret@host/%2f", "s3cret", "amqp://:***@host/%2f"),
    ];

    #[test]
    fn redaction_finds_the_user_info_before_the_last_at_sign() {
        for (url, secret, shown) in SECRET_URLS {
            assert_eq!(redact_url(url), *shown, "{url}");
            let sender = RabbitSenderConfig::new(*url);
            let listener = crate::RabbitListenerConfig::new(*url, "billing");
            let texts = [
                format!("{sender:?}"),
                format!("{sender:#?}"),
                format!("{listener:?}"),
                format!("{:?}", sender.validate()),
                format!("{:?}", RabbitSender::new(sender.clone()).err()),
                format!("{:?}", crate::RabbitListener::builder(listener).build().err()),
            ];
            for text in texts {
                assert!(!text.contains(secret), "{url}: {text}");
            }
        }
        for plain in
            ["amqp://user@host/vh", "amqp://127.0.0.1:5672", "amqp://host/v@host", "amqps://host:5671"]
        {
            assert_eq!(redact_url(plain), plain);
        }
    }

    #[test]
    fn an_amqps_url_needs_the_rustls_feature() {
        let url = "amqps://user:s3cret@broker.example.com:5671/%2f";
        let sender = RabbitSenderConfig::new(url).validate();
        let listener = crate::RabbitListener::builder(crate::RabbitListenerConfig::new(url, "billing"))
            .on("order-created", |_event: crate::RabbitEvent<serde_json::Value>| async {
                Ok(oncebox_core::Consumed::Applied(()))
            })
            .build()
            .map(|_| ());
        if cfg!(feature = "rustls") {
            assert!(sender.is_ok() && listener.is_ok(), "{sender:?} {listener:?}");
        } else {
            let text = problem(sender);
            assert!(text.contains("rabbit.url") && text.contains("rustls"), "{text}");
            let text = problem(listener);
            assert!(text.contains("rabbit.listener.url") && text.contains("rustls"), "{text}");
        }
    }

    #[tokio::test]
    async fn connection_errors_show_the_url_without_its_password() {
        let sender = RabbitSender::new(
            RabbitSenderConfig::new("amqp://user:s3cret@127.0.0.1:1/%2f")
                .with_connect_timeout(Duration::from_secs(5)),
        );
        let sender = match sender {
            Ok(sender) => sender,
            Err(error) => panic!("a valid config was refused: {error}"),
        };
        let text = format!("{:?}", sender.connect().await);
        assert!(text.contains("amqp://user:***@127.0.0.1:1/%2f") && !text.contains("s3cret"), "{text}");
    }

    fn problem<T: fmt::Debug>(result: Result<T>) -> String {
        match result {
            Ok(value) => panic!("accepted: {value:?}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn durations_beyond_their_bound_are_refused_naming_the_key() {
        let base = || RabbitSenderConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f");
        let text = problem(base().with_connect_timeout(Duration::MAX).validate());
        assert!(text.contains("rabbit.connect-timeout"), "{text}");
        let text = problem(RabbitSender::new(base().with_connect_timeout(Duration::MAX)));
        assert!(text.contains("rabbit.connect-timeout"), "{text}");
        let text = problem(base().with_reconnect_backoff(Duration::from_secs(1), Duration::MAX).validate());
        assert!(text.contains("rabbit.reconnect-backoff"), "{text}");
        let text = problem(base().with_reconnect_backoff(Duration::MAX, Duration::MAX).validate());
        assert!(text.contains("rabbit.reconnect-backoff"), "{text}");
    }

    /// Whatever a builder was given, a send returns results instead of panicking on clock arithmetic.
    #[tokio::test]
    async fn a_send_never_panics_on_an_endless_deadline_or_reconnect_backoff() {
        let message = oncebox_testkit::sender_suite::test_message("orders", 0);
        let configs = [
            (RabbitSenderConfig::new("amqp://guest:guest@127.0.0.1:1/%2f"), Duration::MAX),
            (
                RabbitSenderConfig::new("amqp://guest:guest@127.0.0.1:1/%2f")
                    .with_reconnect_backoff(Duration::MAX, Duration::MAX),
                Duration::from_secs(5),
            ),
        ];
        for (config, timeout) in configs {
            // Refused at construction, or it sends (and fails: nothing listens on port 1).
            if let Ok(sender) = RabbitSender::new(config) {
                for _ in 0..2 {
                    let deadline = oncebox_core::Deadline::after(timeout);
                    let results = sender.send(std::slice::from_ref(&message), deadline).await;
                    assert!(results.iter().all(Result::is_err), "{results:?}");
                }
            }
        }
    }

    #[test]
    fn reconnect_delay_doubles_up_to_the_cap() {
        let config = RabbitSenderConfig::new("amqp://x")
            .with_reconnect_backoff(Duration::from_millis(100), Duration::from_millis(350));
        let delays: Vec<Duration> = (0..5).map(|failures| config.reconnect_delay(failures)).collect();
        let expected = [0, 100, 200, 350, 350].map(Duration::from_millis);
        assert_eq!(delays, expected);
    }

    #[test]
    fn config_debug_hides_the_password_and_validation_names_the_key() {
        let config = RabbitListenerConfig::new("amqp://guest:s3cret@host/%2f", "billing");
        assert!(!format!("{config:?}").contains("s3cret"));
        let error = RabbitListenerConfig::new("amqp://host", "").validate().err().map(|e| e.to_string());
        assert!(error.is_some_and(|text| text.contains("rabbit.listener.queue")));
        let error = crate::RabbitListener::builder(config).build().err().map(|e| e.to_string());
        assert!(error.is_some_and(|text| text.contains("no event type has a handler")));
    }

    #[test]
    fn the_rabbitmq_block_of_the_shared_file_configures_sender_and_listener() -> Result<()> {
        let yaml = "oncebox:\n  outbox:\n    events: {}\n  rabbitmq:\n    url: amqp://guest:s3cret@host:5672/%2f\n    connect-timeout: 45s\n    connection-name: billing\n";
        let sender = RabbitSenderConfig::from_yaml_str(yaml)?;
        assert_eq!(sender.connect_timeout(), Duration::from_secs(45));
        assert_eq!(sender.connection_name, "billing");
        let listener = RabbitListenerConfig::from_yaml_str(yaml, "billing-orders")?;
        assert_eq!((listener.url.as_str(), listener.queue.as_str()), (sender.url(), "billing-orders"));
        let toml = "[oncebox.rabbitmq]\nurl = \"amqp://host\"\nconnect-timeout = \"2s\"\n";
        assert_eq!(RabbitSenderConfig::from_toml_str(toml)?.connect_timeout(), Duration::from_secs(2));
        Ok(())
    }

    #[test]
    fn a_missing_block_or_a_wrong_key_is_named_and_the_password_stays_hidden() {
        let missing =
            RabbitSenderConfig::from_yaml_str("oncebox:\n  outbox: {}\n").err().map(|e| e.to_string());
        assert!(missing.is_some_and(|text| text.contains("oncebox.rabbitmq") && text.contains("missing")));
        let unit = "oncebox:\n  rabbitmq:\n    url: amqp://guest:s3cret@host/%2f\n    connect-timeout: 30\n";
        let error = RabbitSenderConfig::from_yaml_str(unit).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("oncebox.rabbitmq.connect-timeout") && !error.contains("s3cret"), "{error}");
        let moved =
            "oncebox:\n  rabbitmq:\n    url: amqp://guest:s3cret@host/%2f\n    emergency-timeout: 30s\n";
        for error in [
            RabbitSenderConfig::from_yaml_str(moved).err().map(|e| e.to_string()),
            RabbitListenerConfig::from_yaml_str(moved, "billing").err().map(|e| e.to_string()),
        ] {
            let error = error.unwrap_or_default();
            assert!(
                error.contains("oncebox.rabbitmq.emergency-timeout")
                    && error.contains("oncebox.outbox.sender.emergency-timeout"),
                "{error}"
            );
        }
        let unknown = "oncebox:\n  rabbitmq:\n    url: amqp://host\n    urll: x\n";
        let error =
            RabbitSenderConfig::from_yaml_str(unknown).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("urll"), "{error}");
    }

    fn listener_problem(config: &RabbitListenerConfig) -> String {
        config
            .validate()
            .err()
            .map(|error| error.to_string())
            .unwrap_or_else(|| format!("accepted: {config:?}"))
    }

    #[test]
    fn every_duration_is_bounded_naming_the_key() {
        let base = || RabbitListenerConfig::new("amqp://guest:guest@host/%2f", "billing");
        let (second, huge) = (Duration::from_secs(1), Duration::MAX);
        let cases = [
            (base().with_retry_backoff(second, huge), "rabbit.listener.retry-backoff"),
            (base().with_retry_backoff(huge, huge), "rabbit.listener.retry-backoff"),
            (
                base().with_retry_backoff(MAX_RETRY_BACKOFF, MAX_RETRY_BACKOFF + second),
                "rabbit.listener.retry-backoff",
            ),
            (base().with_retry_backoff(Duration::ZERO, second), "rabbit.listener.retry-backoff"),
            (base().with_reconnect_backoff(second, huge), "rabbit.listener.reconnect-backoff"),
            (base().with_reconnect_backoff(Duration::ZERO, second), "rabbit.listener.reconnect-backoff"),
            (base().with_shutdown_grace(huge), "rabbit.listener.shutdown-grace"),
            (base().with_max_attempts(0), "rabbit.listener.max-attempts"),
            (base().with_concurrency(0), "rabbit.listener.concurrency"),
            (base().with_prefetch(4).with_concurrency(8), "rabbit.listener.concurrency"),
        ];
        for (config, key) in cases {
            let text = listener_problem(&config);
            assert!(text.contains(key), "{key}: {text}");
        }
        assert!(base().with_prefetch(0).with_concurrency(64).validate().is_ok(), "prefetch 0 is unlimited");
        let longest = base()
            .with_retry_backoff(MAX_RETRY_BACKOFF, MAX_RETRY_BACKOFF)
            .with_reconnect_backoff(crate::MAX_RECONNECT_BACKOFF, crate::MAX_RECONNECT_BACKOFF)
            .with_shutdown_grace(MAX_SHUTDOWN_GRACE);
        assert!(longest.validate().is_ok(), "{longest:?}");
        assert_eq!(longest.retry.delay(u32::MAX), MAX_RETRY_BACKOFF);
        assert_eq!(longest.reconnect_delay(u32::MAX), crate::MAX_RECONNECT_BACKOFF);
    }

    #[test]
    fn retry_delay_doubles_from_the_default_up_to_the_cap() {
        let config = RabbitListenerConfig::new("amqp://host", "billing");
        let delays: Vec<Duration> = (1..=10).map(|attempt| config.retry.delay(attempt)).collect();
        let expected =
            [200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000].map(Duration::from_millis);
        assert_eq!(delays, expected);
    }

    #[test]
    fn only_a_known_dead_letter_exchange_lets_the_listener_reject() {
        let base = || RabbitListenerConfig::new("amqp://host", "billing");
        assert!(!base().dead_letters(), "the default queue has no dead-letter exchange");
        assert!(!base().with_declare(RabbitTopology::new("orders")).dead_letters());
        assert!(
            base().with_declare(RabbitTopology::new("orders").with_dead_letter("dlx", "dlq")).dead_letters()
        );
        assert!(base().with_queue_dead_letter_exchange().dead_letters());
    }
}
