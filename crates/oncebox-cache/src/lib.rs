//! Consumed-id caches for the oncebox inbox.
//!
//! The inbox table's primary key decides whether an event was consumed; a cache only saves the
//! database round trip for an id seen before. Both caches here **fail open**: a cache that cannot
//! answer says "not cached", and the inbox asks the database. A cache entry is written only after
//! the consumption is durable (see `oncebox_core::Inbox`), so a rolled-back effect is never
//! remembered as done.
//!
//! * [`MemoryCache`] (feature `memory`, on by default): in-process, bounded, with a time to live.
//!   Each instance of a service has its own.
//! * [`RedisCache`] (feature `redis`): shared by every instance, keys expiring after the time to
//!   live, each call bounded by a timeout so an unresponsive Redis slows nothing down.
//!
//! Keep the time to live below the inbox clean-up TTL (the configuration refuses a longer one):
//! a cache must never claim an id the inbox has already forgotten.
//!
//! ```
//! # #[cfg(feature = "memory")]
//! # async fn example() {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use oncebox_cache::MemoryCache;
//! use oncebox_core::ConsumedCache;
//!
//! let cache = Arc::new(MemoryCache::new(Duration::from_secs(600), 100_000));
//! let id = uuid::Uuid::now_v7();
//! assert!(!cache.contains("billing", id).await);
//! cache.insert("billing", id).await;
//! assert!(cache.contains("billing", id).await);
//! assert!(!cache.contains("shipping", id).await, "entries are per consumer");
//! // Put it in front of an inbox: `Inbox::new(…).with_cache(cache)`, or
//! // `Oncebox::builder(…).consumed_cache(cache)`.
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "memory")]
mod memory;
#[cfg(feature = "redis")]
mod redis_cache;

#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use memory::MemoryCache;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis_cache::{RedisCache, RedisCacheConfig};
