//! A pass-through outbox DAO that tells an observer when each call that runs the relay's statements
//! starts and ends, and how long each claim and settle took and what it covered, for benchmarks that
//! time the relay's statements, count them in flight or stamp its events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use oncebox_core::event::OutboxCounts;
use oncebox_core::{ClaimedBatch, OutboxDao, OutboxEvent, Result, SettleReport, Settlement};
use uuid::Uuid;

/// Told about every claim and settle of an [`ObservedOutbox`]; each method does nothing unless
/// implemented.
pub trait OutboxObserver: Send + Sync {
    /// A call that runs outbox statements (claim, settle, stuck recovery, clean-up) is about to run.
    fn started(&self) {}
    /// That call has ended: returned, failed or been cancelled.
    fn finished(&self) {}
    /// A claim returned `batch` after `elapsed`.
    fn claimed(&self, elapsed: Duration, batch: &ClaimedBatch) {
        let _ = (elapsed, batch);
    }
    /// A settle of `settlements` for `batch` returned after `elapsed`.
    fn settled(&self, elapsed: Duration, batch: &ClaimedBatch, settlements: &[Settlement]) {
        let _ = (elapsed, batch, settlements);
    }
}

/// Tells the observer a call has finished when dropped, so a failed or cancelled call counts too.
struct Running<'a, O: OutboxObserver>(&'a O);

impl<'a, O: OutboxObserver> Running<'a, O> {
    fn start(observer: &'a O) -> Self {
        observer.started();
        Self(observer)
    }
}

impl<O: OutboxObserver> Drop for Running<'_, O> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// An [`OutboxDao`] that passes every call to `inner` and reports claims and settles to `observer`.
pub struct ObservedOutbox<O> {
    inner: Arc<dyn OutboxDao>,
    observer: Arc<O>,
}

impl<O> ObservedOutbox<O> {
    /// Observes `inner` with `observer`.
    pub fn new(inner: Arc<dyn OutboxDao>, observer: Arc<O>) -> Self {
        Self { inner, observer }
    }
}

#[async_trait]
impl<O: OutboxObserver + 'static> OutboxDao for ObservedOutbox<O> {
    async fn claim(&self, event_type: &str, limit: u32) -> Result<ClaimedBatch> {
        let _running = Running::start(&*self.observer);
        let started = Instant::now();
        let batch = self.inner.claim(event_type, limit).await?;
        self.observer.claimed(started.elapsed(), &batch);
        Ok(batch)
    }

    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport> {
        let _running = Running::start(&*self.observer);
        let started = Instant::now();
        let report = self.inner.settle(batch, settlements).await?;
        self.observer.settled(started.elapsed(), batch, settlements);
        Ok(report)
    }

    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, limit: u32) -> Result<u64> {
        let _running = Running::start(&*self.observer);
        self.inner.recover_stuck(older_than, max_recoveries, limit).await
    }

    async fn delete_processed(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let _running = Running::start(&*self.observer);
        self.inner.delete_processed(older_than, limit).await
    }

    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        self.inner.get(id).await
    }

    async fn counts(&self) -> Result<OutboxCounts> {
        self.inner.counts().await
    }
}
