//! Connection and sender settings.

use std::fmt;
use std::time::Duration;

use oncebox_core::{Error, Result};

/// Default bound on one batch: connecting, publishing and waiting for every confirm. The same as the
/// default of `oncebox.outbox.sender.emergency-timeout`, which the stuck recovery is checked against.
pub const DEFAULT_EMERGENCY_TIMEOUT: Duration = Duration::from_secs(120);
/// Default first wait before reconnecting after a failed connection attempt.
pub const DEFAULT_RECONNECT_MIN: Duration = Duration::from_millis(100);
/// Default longest wait between reconnection attempts.
pub const DEFAULT_RECONNECT_MAX: Duration = Duration::from_secs(10);

/// How a [`RabbitSender`](crate::RabbitSender) reaches the broker and how long it may take.
///
/// `Debug` hides the password of the URL.
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitSenderConfig {
    pub(crate) url: String,
    pub(crate) emergency_timeout: Duration,
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
    pub(crate) connection_name: String,
}

impl RabbitSenderConfig {
    /// Settings for the broker at `url` (`amqp://user:password@host:5672/%2f`) with the defaults:
    /// a 120 s emergency timeout and reconnection backoff from 100 ms doubling up to 10 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            emergency_timeout: DEFAULT_EMERGENCY_TIMEOUT,
            reconnect_min: DEFAULT_RECONNECT_MIN,
            reconnect_max: DEFAULT_RECONNECT_MAX,
            connection_name: "oncebox-rabbit sender".to_owned(),
        }
    }

    /// Bounds one `send` call: connecting, publishing and awaiting every confirm. Messages not
    /// confirmed by then fail with a temporary [`ErrorKind::Timeout`](oncebox_core::ErrorKind::Timeout).
    /// Pass the configured `oncebox.outbox.sender.emergency-timeout` (`OutboxConfig::emergency_timeout`)
    /// so the stuck recovery, which must outlast it, stays consistent.
    #[must_use]
    pub fn with_emergency_timeout(mut self, timeout: Duration) -> Self {
        self.emergency_timeout = timeout;
        self
    }

    /// After a failed connection attempt the next one waits `min`, doubling per failure up to `max`.
    /// Batches sent while waiting fail at once with a temporary error instead of hammering the broker.
    #[must_use]
    pub fn with_reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
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
        if self.emergency_timeout.is_zero() {
            return Err(Error::config("rabbit.emergency-timeout", "must be greater than zero"));
        }
        if self.reconnect_min > self.reconnect_max {
            return Err(Error::config(
                "rabbit.reconnect-backoff",
                format!("min {:?} is greater than max {:?}", self.reconnect_min, self.reconnect_max),
            ));
        }
        Ok(())
    }

    /// The broker URL, password included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bound on one batch.
    pub fn emergency_timeout(&self) -> Duration {
        self.emergency_timeout
    }

    /// The delay before reconnection attempt `failures + 1` after `failures` failed attempts.
    pub(crate) fn reconnect_delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
        self.reconnect_min.saturating_mul(factor).min(self.reconnect_max)
    }
}

impl fmt::Debug for RabbitSenderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitSenderConfig")
            .field("url", &redact_url(&self.url))
            .field("emergency_timeout", &self.emergency_timeout)
            .field("reconnect_min", &self.reconnect_min)
            .field("reconnect_max", &self.reconnect_max)
            .field("connection_name", &self.connection_name)
            .finish()
    }
}

/// Parses `url` as lapin will, so a malformed URL fails at construction with `key` named. The
/// parser's message never contains the URL once the scheme has been checked.
pub(crate) fn check_url(key: &str, url: &str) -> Result<()> {
    url.parse::<lapin::uri::AMQPUri>()
        .map(|_| ())
        .map_err(|problem| Error::config(key, format!("{problem} in {}", redact_url(url))))
}

/// The URL with the password of its user info replaced by `***`, for logs and `Debug`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|index| index + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..].find('/').map_or(url.len(), |index| scheme_end + index);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let user_info = &authority[..at];
    match user_info.find(':') {
        Some(colon) => {
            format!("{}{}:***{}", &url[..scheme_end], &user_info[..colon], &url[scheme_end + at..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn reconnect_delay_doubles_up_to_the_cap() {
        let config = RabbitSenderConfig::new("amqp://x")
            .with_reconnect_backoff(Duration::from_millis(100), Duration::from_millis(350));
        let delays: Vec<Duration> = (0..5).map(|failures| config.reconnect_delay(failures)).collect();
        let expected = [0, 100, 200, 350, 350].map(Duration::from_millis);
        assert_eq!(delays, expected);
    }
}
