//! The shared cache on Redis.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::config::{CacheConfig, InboxConfig};
use oncebox_core::redact::redact_url;
use oncebox_core::{ConsumedCache, Error, ErrorKind, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use uuid::Uuid;

/// Settings of a [`RedisCache`]. Its `Debug` shows the URL without its password.
#[derive(Clone)]
pub struct RedisCacheConfig {
    url: String,
    key_prefix: String,
    ttl: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for RedisCacheConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCacheConfig")
            .field("url", &redact_url(&self.url))
            .field("key_prefix", &self.key_prefix)
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisCacheConfig {
    /// Redis at `url` (`redis://host:port/db`), keys under `oncebox:consumed`, a one-hour time to
    /// live and a 250 ms bound on every call.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            key_prefix: "oncebox:consumed".to_owned(),
            ttl: Duration::from_secs(3600),
            timeout: Duration::from_millis(250),
        }
    }

    /// Redis at `url`, with the time to live of `oncebox.inbox.cache.ttl`.
    pub fn from_config(url: impl Into<String>, config: &CacheConfig) -> Self {
        Self::new(url).with_ttl(config.ttl)
    }

    /// Redis at `url`, named by `oncebox.inbox.cache.cache-name` (the key prefix, default
    /// `oncebox:consumed`) and, when the cache is configured, with the time to live of
    /// `oncebox.inbox.cache.ttl`.
    pub fn from_inbox(url: impl Into<String>, inbox: &InboxConfig) -> Self {
        let config = Self::new(url).with_key_prefix(inbox.cache_name.clone());
        match &inbox.cache {
            Some(cache) => config.with_ttl(cache.ttl),
            None => config,
        }
    }

    /// Keys are `<prefix>:<consumer>:<event id>`; give each installation sharing a Redis its own.
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How long an id stays cached (rounded up to whole milliseconds).
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The bound on each lookup and insert; past it the call counts as "not cached".
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// A consumed-id cache shared by every instance through Redis: `SET <key> 1 PX <ttl>` after a
/// consumption, `EXISTS <key>` before one.
///
/// It fails open: a Redis error or a call slower than the timeout answers "not cached" (the inbox
/// then asks the database) and an insert that fails is dropped. The first failure is logged as a
/// warning and the recovery as info, not every call. The connection reconnects by itself.
#[derive(Clone)]
pub struct RedisCache {
    connection: ConnectionManager,
    key_prefix: String,
    ttl_millis: u64,
    timeout: Duration,
    failing: std::sync::Arc<AtomicBool>,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache")
            .field("key_prefix", &self.key_prefix)
            .field("ttl_millis", &self.ttl_millis)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisCache {
    /// Connects; an unparsable URL, a zero time to live or timeout, or a Redis that does not answer
    /// within the timeout is an error naming what was wrong.
    pub async fn connect(config: RedisCacheConfig) -> Result<Self> {
        let RedisCacheConfig { url, key_prefix, ttl, timeout } = config;
        if ttl.is_zero() {
            return Err(Error::config("redis cache ttl", "must be greater than 0"));
        }
        if timeout.is_zero() {
            return Err(Error::config("redis cache timeout", "must be greater than 0"));
        }
        let ttl_millis = u64::try_from(ttl.as_nanos().div_ceil(1_000_000))
            .map_err(|_| Error::config("redis cache ttl", "is too long"))?;
        let client = redis::Client::open(url.as_str())
            .map_err(|error| Error::config("redis cache url", format!("is not a Redis URL ({error})")))?;
        // Few quick retries: a failed call answers "not cached" at once anyway, and the next call
        // after a lost connection starts a new reconnect.
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2);
        let connection = ConnectionManager::new_with_config(client, settings).await.map_err(|error| {
            Error::temporary(ErrorKind::Other, format!("could not connect to Redis at {}", redact_url(&url)))
                .with_source(error)
        })?;
        Ok(Self { connection, key_prefix, ttl_millis, timeout, failing: Default::default() })
    }

    fn key(&self, consumer: &str, id: Uuid) -> String {
        format!("{}:{consumer}:{id}", self.key_prefix)
    }

    /// Runs `command` within the timeout; `None` (logged on the first of a run of failures) when
    /// Redis failed or was too slow.
    async fn run<T: redis::FromRedisValue>(&self, action: &str, command: redis::Cmd) -> Option<T> {
        let mut connection = self.connection.clone();
        let outcome = tokio::time::timeout(self.timeout, command.query_async::<T>(&mut connection)).await;
        let failure = match outcome {
            Ok(Ok(value)) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the Redis consumed-id cache answers again");
                }
                return Some(value);
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                action,
                error = %failure,
                "the Redis consumed-id cache failed; inbox checks go to the database until it answers again"
            );
        }
        None
    }
}

#[async_trait]
impl ConsumedCache for RedisCache {
    async fn contains(&self, consumer: &str, id: Uuid) -> bool {
        let mut command = redis::cmd("EXISTS");
        command.arg(self.key(consumer, id));
        self.run::<u64>("lookup", command).await.is_some_and(|found| found > 0)
    }

    async fn insert(&self, consumer: &str, id: Uuid) {
        let mut command = redis::cmd("SET");
        command.arg(self.key(consumer, id)).arg(1).arg("PX").arg(self.ttl_millis);
        let _: Option<()> = self.run("insert", command).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passwords_are_left_out_of_debug_and_errors() {
        for url in [
            "redis://user:s3cret@127.0.0.1:1/0",
            "redis://:s3cret@127.0.0.1:1",
            "redis+unix:///nonexistent/redis.sock?db=0&pass=s3cret",
            "redis://user:s3/cret@127.0.0.1:1/0",
        ] {
            let config = RedisCacheConfig::new(url).with_timeout(Duration::from_millis(200));
            let shown = format!("{config:?}");
            assert!(!shown.contains("s3cret") && !shown.contains("s3/cret"), "{shown}");
            let error =
                RedisCache::connect(config).await.err().map(|e| format!("{e} {e:?}")).unwrap_or_default();
            assert!(!error.is_empty(), "{url} cannot connect");
            assert!(!error.contains("s3cret") && !error.contains("s3/cret"), "{error}");
        }
    }

    #[test]
    fn the_inbox_cache_name_is_the_key_prefix() -> Result<()> {
        let config = oncebox_core::Config::from_yaml_str(
            "oncebox:\n  inbox:\n    cache:\n      cache-name: \"orders-service:oncebox:inbox\"\n      ttl: 10m\n",
        )?;
        let inbox = config.inbox.ok_or_else(|| Error::invalid_input("the inbox is configured"))?;
        let redis = RedisCacheConfig::from_inbox("redis://127.0.0.1:1", &inbox);
        assert_eq!(redis.key_prefix, "orders-service:oncebox:inbox");
        assert_eq!(redis.ttl, Duration::from_secs(600));
        let defaults = oncebox_core::Config::from_yaml_str("oncebox:\n  inbox: {}\n")?;
        let inbox = defaults.inbox.ok_or_else(|| Error::invalid_input("the inbox is configured"))?;
        assert_eq!(RedisCacheConfig::from_inbox("redis://h", &inbox).key_prefix, "oncebox:consumed");
        Ok(())
    }

    #[tokio::test]
    async fn bad_settings_are_refused_with_the_setting_named() {
        let zero_ttl =
            RedisCache::connect(RedisCacheConfig::new("redis://127.0.0.1:1").with_ttl(Duration::ZERO));
        let message = zero_ttl.await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("ttl"), "{message}");
        let bad_url = RedisCache::connect(RedisCacheConfig::new("not a url")).await;
        let message = bad_url.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("redis cache url"), "{message}");
    }

    #[tokio::test]
    async fn a_redis_that_is_not_there_is_a_connection_error_naming_it() {
        let config = RedisCacheConfig::new("redis://127.0.0.1:1").with_timeout(Duration::from_millis(200));
        let error = RedisCache::connect(config).await.err();
        assert!(error.as_ref().is_some_and(Error::is_temporary), "{error:?}");
        let message = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("redis://127.0.0.1:1"), "{message}");
    }
}
