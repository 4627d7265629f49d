//! The in-process cache.

use std::time::Duration;

use async_trait::async_trait;
use moka::future::Cache;
use oncebox_core::ConsumedCache;
use oncebox_core::config::{CacheConfig, MAX_SETTING_DURATION};
use uuid::Uuid;

/// An in-process consumed-id cache: at most `max_entries` ids, each kept for `ttl` after it was
/// inserted. Cheap to clone; clones share the entries.
///
/// Expired and evicted entries are cleaned up during later calls (moka runs no background
/// thread), so [`entry_count`](Self::entry_count) may lag until
/// [`run_pending_tasks`](Self::run_pending_tasks) ran.
#[derive(Clone)]
pub struct MemoryCache {
    entries: Cache<(String, Uuid), ()>,
}

impl std::fmt::Debug for MemoryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCache").field("entries", &self.entries.entry_count()).finish_non_exhaustive()
    }
}

impl MemoryCache {
    /// A cache of at most `max_entries` ids, each kept for `ttl`. A `ttl` over
    /// [`MAX_SETTING_DURATION`] (100 years) is treated as that; the configuration refuses one.
    pub fn new(ttl: Duration, max_entries: u64) -> Self {
        // moka panics on a TTL over 1,000 years; no caller should be able to reach that.
        let ttl = ttl.min(MAX_SETTING_DURATION);
        Self { entries: Cache::builder().max_capacity(max_entries).time_to_live(ttl).build() }
    }

    /// A cache sized by `oncebox.inbox.cache` (`ttl`, `max-entries`).
    pub fn from_config(config: &CacheConfig) -> Self {
        Self::new(config.ttl, config.max_entries)
    }

    /// Entries held, as of the last maintenance.
    pub fn entry_count(&self) -> u64 {
        self.entries.entry_count()
    }

    /// Applies pending expirations and evictions now.
    pub async fn run_pending_tasks(&self) {
        self.entries.run_pending_tasks().await;
    }
}

#[async_trait]
impl ConsumedCache for MemoryCache {
    async fn contains(&self, consumer: &str, id: Uuid) -> bool {
        self.entries.get(&(consumer.to_owned(), id)).await.is_some()
    }

    async fn insert(&self, consumer: &str, id: Uuid) {
        self.entries.insert((consumer.to_owned(), id), ()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_inserted_id_is_found_for_its_consumer_only() {
        let cache = MemoryCache::new(Duration::from_secs(60), 100);
        let id = Uuid::now_v7();
        assert!(!cache.contains("billing", id).await);
        cache.insert("billing", id).await;
        assert!(cache.contains("billing", id).await);
        assert!(!cache.contains("shipping", id).await);
        assert!(!cache.contains("billing", Uuid::now_v7()).await);
        assert!(cache.clone().contains("billing", id).await, "clones share entries");
    }

    #[tokio::test]
    async fn entries_expire_after_the_ttl() {
        let cache = MemoryCache::new(Duration::from_millis(100), 100);
        let id = Uuid::now_v7();
        cache.insert("billing", id).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!cache.contains("billing", id).await, "an expired id must count as not cached");
    }

    #[tokio::test]
    async fn the_entry_count_stays_within_max_entries() {
        let cache = MemoryCache::new(Duration::from_secs(60), 100);
        for _ in 0..1_000 {
            cache.insert("billing", Uuid::now_v7()).await;
        }
        cache.run_pending_tasks().await;
        assert!(cache.entry_count() <= 100, "{} entries for a bound of 100", cache.entry_count());
        assert!(cache.entry_count() > 0);
    }

    #[tokio::test]
    async fn a_ttl_beyond_any_setting_is_saturated_instead_of_panicking() {
        let cache = MemoryCache::new(Duration::MAX, 10);
        cache.insert("billing", Uuid::now_v7()).await;
        let id = Uuid::now_v7();
        cache.insert("billing", id).await;
        assert!(cache.contains("billing", id).await);
    }

    #[test]
    fn the_config_sizes_the_cache() {
        let cache = MemoryCache::from_config(&CacheConfig { ttl: Duration::from_secs(5), max_entries: 7 });
        assert_eq!(cache.entries.policy().max_capacity(), Some(7));
        assert_eq!(cache.entries.policy().time_to_live(), Some(Duration::from_secs(5)));
    }
}
