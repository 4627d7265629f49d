//! The Redis consumed-id cache against a real Redis (`ONCEBOX_REDIS_URL`; under `CI=true` a missing
//! server fails the run), in front of a real (SQLite) inbox.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use oncebox_cache::{RedisCache, RedisCacheConfig};
use oncebox_core::{
    Consumed, ConsumedCache, Dialect, Error, Inbox, InboxClaim, InboxDao, Result, SchemaPlan, async_trait,
};
use oncebox_sqlite::SqliteDialect;
use oncebox_testkit::case;
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail, server_missing};
use uuid::Uuid;

const VARIABLE: &str = "ONCEBOX_REDIS_URL";

struct Harness {
    url: String,
}

impl Harness {
    /// A cache under a prefix no other test uses, so tests never see each other's keys.
    async fn cache(&self, prefix: &str, ttl: Duration) -> Result<RedisCache, Failed> {
        RedisCache::connect(RedisCacheConfig::new(&self.url).with_key_prefix(prefix).with_ttl(ttl))
            .await
            .map_err(fail)
    }

    /// A plain connection for set-up and inspection, independent of the code under test.
    async fn raw(&self) -> Result<redis::aio::MultiplexedConnection, Failed> {
        let client = redis::Client::open(self.url.as_str()).map_err(fail)?;
        client.get_multiplexed_async_connection().await.map_err(fail)
    }
}

fn fresh_prefix() -> String {
    format!("oncebox-test:{}", Uuid::new_v4().simple())
}

async fn an_id_inserted_by_one_instance_is_seen_by_another(harness: Arc<Harness>) -> TestResult {
    let prefix = fresh_prefix();
    let first = harness.cache(&prefix, Duration::from_secs(60)).await?;
    let second = harness.cache(&prefix, Duration::from_secs(60)).await?;
    let id = Uuid::now_v7();
    assert!(!second.contains("billing", id).await);
    first.insert("billing", id).await;
    assert!(second.contains("billing", id).await, "the cache is shared through Redis");
    assert!(!second.contains("shipping", id).await, "entries are per consumer");
    let other_installation = harness.cache(&fresh_prefix(), Duration::from_secs(60)).await?;
    assert!(!other_installation.contains("billing", id).await, "entries are per key prefix");
    Ok(())
}

async fn keys_carry_the_ttl_and_expire(harness: Arc<Harness>) -> TestResult {
    let prefix = fresh_prefix();
    let cache = harness.cache(&prefix, Duration::from_millis(1500)).await?;
    let id = Uuid::now_v7();
    cache.insert("billing", id).await;
    let mut raw = harness.raw().await?;
    let key = format!("{prefix}:billing:{id}");
    let remaining: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut raw).await.map_err(fail)?;
    assert!((1..=1500).contains(&remaining), "PTTL of {key} is {remaining} ms");
    let deadline = Instant::now() + Duration::from_secs(10);
    while cache.contains("billing", id).await {
        if Instant::now() > deadline {
            return Err(fail("gave up waiting: the key outlived its 1.5 s TTL by 10 s"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A private `redis-server` on a free port, so freezing it disturbs no other test.
struct PrivateRedis {
    child: std::process::Child,
    url: String,
}

impl PrivateRedis {
    fn start() -> Result<Self, Failed> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(fail)?
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|error| {
                fail(format!("starting a private redis-server (is it on the PATH?): {error}"))
            })?;
        let server = Self { child, url: format!("redis://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(fail(format!(
                    "gave up waiting: the private redis-server did not open port {port}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server process.
    fn signal(&self, signal: &str) -> TestResult {
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .map_err(fail)?;
        if status.success() { Ok(()) } else { Err(fail(format!("kill -{signal} failed: {status}"))) }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.signal("CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A frozen Redis (SIGSTOP: connected, never answering) must count as "not cached" within the
/// cache's timeout instead of hanging the consumer, and the cache works again once it answers.
async fn a_redis_that_stops_answering_counts_as_not_cached(_harness: Arc<Harness>) -> TestResult {
    let server = PrivateRedis::start()?;
    let cache = RedisCache::connect(
        RedisCacheConfig::new(&server.url)
            .with_key_prefix(fresh_prefix())
            .with_timeout(Duration::from_millis(200)),
    )
    .await
    .map_err(fail)?;
    let id = Uuid::now_v7();
    cache.insert("billing", id).await;
    assert!(cache.contains("billing", id).await);

    server.signal("STOP")?;
    let started = Instant::now();
    let answered = cache.contains("billing", id).await;
    cache.insert("billing", Uuid::now_v7()).await;
    let waited = started.elapsed();
    server.signal("CONT")?;
    assert!(!answered, "a frozen Redis must count as not cached");
    assert!(waited < Duration::from_secs(2), "a lookup and an insert waited {waited:?} for a frozen Redis");

    let deadline = Instant::now() + Duration::from_secs(10);
    while !cache.contains("billing", id).await {
        if Instant::now() > deadline {
            return Err(fail("gave up waiting: the cache did not answer again within 10 s of SIGCONT"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Counts the inbox calls that reach the database.
struct CountingInbox {
    inner: Arc<dyn InboxDao>,
    records: AtomicUsize,
}

#[async_trait]
impl InboxDao for CountingInbox {
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
        self.records.fetch_add(1, Ordering::SeqCst);
        self.inner.record(consumer, id).await
    }
    async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        self.inner.record_many(consumer, ids).await
    }
    async fn claim(&self, consumer: &str, id: Uuid, lease: Duration) -> Result<InboxClaim> {
        self.records.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(consumer, id, lease).await
    }
    async fn finish(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        self.inner.finish(consumer, id, token).await
    }
    async fn release(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        self.inner.release(consumer, id, token).await
    }
    async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        self.inner.consumed(consumer, ids).await
    }
    async fn delete_older_than(&self, older_than: Duration, limit: u32) -> Result<u64> {
        self.inner.delete_older_than(older_than, limit).await
    }
}

async fn inbox_dialect() -> Result<(SqliteDialect, std::path::PathBuf), Failed> {
    let path = std::env::temp_dir().join(format!("oncebox-cache-{}.db", Uuid::new_v4().simple()));
    let dialect = SqliteDialect::connect(&path.to_string_lossy()).await.map_err(fail)?;
    dialect
        .create_schema(SchemaPlan { outbox: false, dlq: false, inbox: true, jobs: false })
        .await
        .map_err(fail)?;
    Ok((dialect, path))
}

fn remove_database(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.to_string_lossy()));
    }
}

async fn a_cached_id_skips_the_database_and_the_effect(harness: Arc<Harness>) -> TestResult {
    let (dialect, path) = inbox_dialect().await?;
    let dao = Arc::new(CountingInbox { inner: dialect.inbox_dao(), records: AtomicUsize::new(0) });
    let cache = Arc::new(harness.cache(&fresh_prefix(), Duration::from_secs(60)).await?);
    let first_instance = Inbox::new("billing", dao.clone(), ()).with_cache(cache.clone());
    let second_instance = Inbox::new("billing", dao.clone(), ()).with_cache(cache.clone());
    let id = Uuid::now_v7();
    let effects = AtomicUsize::new(0);
    let effect = async || {
        effects.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>(())
    };
    let first = first_instance.consume_once(id, effect).await.map_err(|e| fail(format!("{e:?}")))?;
    let again = second_instance.consume_once(id, effect).await.map_err(|e| fail(format!("{e:?}")))?;
    assert!(matches!(first, Consumed::Applied(())));
    assert!(matches!(again, Consumed::Duplicate));
    assert_eq!(effects.load(Ordering::SeqCst), 1, "the effect ran once");
    assert_eq!(dao.records.load(Ordering::SeqCst), 1, "the cached duplicate reached the database");
    assert!(first_instance.is_consumed(id).await.map_err(fail)?, "the database holds the record");
    dialect.pool().close().await;
    remove_database(&path);
    Ok(())
}

async fn a_rolled_back_record_is_never_cached(harness: Arc<Harness>) -> TestResult {
    let (dialect, path) = inbox_dialect().await?;
    let cache = Arc::new(harness.cache(&fresh_prefix(), Duration::from_secs(60)).await?);
    let inbox = Inbox::new("billing", dialect.inbox_dao(), dialect.writer()).with_cache(cache.clone());
    let id = Uuid::now_v7();
    let mut tx = dialect.pool().begin().await.map_err(fail)?;
    assert!(inbox.record_in(&mut tx, id).await.map_err(fail)?, "a new id");
    tx.rollback().await.map_err(fail)?;
    assert!(!cache.contains("billing", id).await, "a rolled-back consumption was cached");
    assert!(!inbox.is_consumed(id).await.map_err(fail)?);

    // Committed, then remembered: the next delivery is answered by the cache.
    let mut tx = dialect.pool().begin().await.map_err(fail)?;
    assert!(inbox.record_in(&mut tx, id).await.map_err(fail)?);
    tx.commit().await.map_err(fail)?;
    inbox.remember(id).await;
    assert!(cache.contains("billing", id).await);
    dialect.pool().close().await;
    remove_database(&path);
    Ok(())
}

fn cases() -> Vec<Case<Harness>> {
    vec![
        case!(
            "an_id_inserted_by_one_instance_is_seen_by_another",
            an_id_inserted_by_one_instance_is_seen_by_another
        ),
        case!("keys_carry_the_ttl_and_expire", keys_carry_the_ttl_and_expire),
        case!(
            "a_redis_that_stops_answering_counts_as_not_cached",
            a_redis_that_stops_answering_counts_as_not_cached
        ),
        case!("a_cached_id_skips_the_database_and_the_effect", a_cached_id_skips_the_database_and_the_effect),
        case!("a_rolled_back_record_is_never_cached", a_rolled_back_record_is_never_cached),
    ]
}

fn main() -> ExitCode {
    let Some(url) = std::env::var(VARIABLE).ok().filter(|url| !url.is_empty()) else {
        return server_missing("redis cache", VARIABLE);
    };
    Suite::new().add("redis", Arc::new(Harness { url }), cases()).run()
}
