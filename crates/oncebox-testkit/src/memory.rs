//! An in-memory broker: a [`Sender`] plus subscriptions, with fault injection. For core tests and
//! the quickstart only; real transports are tested against real brokers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{Deadline, Error, ErrorKind, OutboundMessage, SendError, Sender};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

#[derive(Default)]
struct BrokerState {
    log: Vec<OutboundMessage>,
    subscribers: HashMap<String, Vec<mpsc::UnboundedSender<OutboundMessage>>>,
    down: bool,
    rejected: HashSet<Uuid>,
    failures_left: u32,
    send_delay: Duration,
    batches: u64,
}

/// A broker held in memory. Cloning shares the same broker.
#[derive(Clone, Default)]
pub struct MemoryBroker {
    state: Arc<Mutex<BrokerState>>,
    /// While true, sends wait before they acknowledge anything; see [`MemoryBroker::hold`].
    held: Arc<watch::Sender<bool>>,
}

/// Messages published to one topic after [`MemoryBroker::subscribe`].
pub struct Subscription {
    receiver: mpsc::UnboundedReceiver<OutboundMessage>,
}

impl Subscription {
    /// The next message, or `None` once the broker is gone.
    pub async fn recv(&mut self) -> Option<OutboundMessage> {
        self.receiver.recv().await
    }

    /// A message if one is already waiting.
    pub fn try_recv(&mut self) -> Option<OutboundMessage> {
        self.receiver.try_recv().ok()
    }
}

impl MemoryBroker {
    /// An empty, healthy broker.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, BrokerState> {
        // A panic while holding the lock cannot leave the state half-written in a way that matters
        // to a test broker, so a poisoned lock is used as is.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Receives every message published to `topic` from now on.
    pub fn subscribe(&self, topic: &str) -> Subscription {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.state().subscribers.entry(topic.to_owned()).or_default().push(sender);
        Subscription { receiver }
    }

    /// Every acknowledged message so far, in delivery order.
    pub fn delivered(&self) -> Vec<OutboundMessage> {
        self.state().log.clone()
    }

    /// How many times each event id was acknowledged.
    pub fn delivery_counts(&self) -> HashMap<Uuid, usize> {
        let mut counts = HashMap::new();
        for message in &self.state().log {
            *counts.entry(message.id).or_insert(0) += 1;
        }
        counts
    }

    /// Number of `send` calls so far.
    pub fn batches(&self) -> u64 {
        self.state().batches
    }

    /// While down, every message fails with a temporary error (as an unreachable broker would).
    pub fn set_down(&self, down: bool) {
        self.state().down = down;
    }

    /// The next `count` messages fail with a temporary error.
    pub fn fail_next(&self, count: u32) {
        self.state().failures_left = count;
    }

    /// Messages with this id always fail with a permanent error (e.g. too large for the broker).
    pub fn reject(&self, id: Uuid) {
        self.state().rejected.insert(id);
    }

    /// Stops rejecting messages with this id.
    pub fn accept(&self, id: Uuid) {
        self.state().rejected.remove(&id);
    }

    /// Every batch takes this long before it is acknowledged.
    pub fn set_send_delay(&self, delay: Duration) {
        self.state().send_delay = delay;
    }

    /// Sends from now on wait, after their delay, until [`release`](MemoryBroker::release): a
    /// case decides when a slow broker answers instead of guessing how long the rest takes.
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Lets held and future sends go on.
    pub fn release(&self) {
        self.held.send_replace(false);
    }
}

/// The broker ignores its deadline, like a sender that overran it: a held or slow send meets the
/// engine's own bound.
#[async_trait]
impl Sender for MemoryBroker {
    async fn send(&self, batch: &[OutboundMessage], _deadline: Deadline) -> Vec<Result<(), SendError>> {
        let delay = {
            let mut state = self.state();
            state.batches += 1;
            state.send_delay
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // The sender half lives as long as `self`, so waiting cannot fail.
        let _ = self.held.subscribe().wait_for(|held| !held).await;
        let mut state = self.state();
        let mut results = Vec::with_capacity(batch.len());
        for message in batch {
            if state.down {
                results.push(Err(Error::temporary(ErrorKind::Broker, "in-memory broker is down")));
                continue;
            }
            if state.rejected.contains(&message.id) {
                results.push(Err(Error::new(
                    ErrorKind::Broker,
                    format!("in-memory broker rejects message {}", message.id),
                )));
                continue;
            }
            if state.failures_left > 0 {
                state.failures_left -= 1;
                results.push(Err(Error::temporary(ErrorKind::Broker, "injected send failure")));
                continue;
            }
            state.log.push(message.clone());
            if let Some(subscribers) = state.subscribers.get_mut(&message.topic) {
                subscribers.retain(|subscriber| subscriber.send(message.clone()).is_ok());
            }
            results.push(Ok(()));
        }
        results
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn deadline() -> Deadline {
        Deadline::after(Duration::from_secs(30))
    }

    fn message(topic: &str) -> OutboundMessage {
        let id = Uuid::now_v7();
        OutboundMessage {
            id,
            event_type: "e".into(),
            topic: topic.into(),
            key: id.to_string(),
            payload: "{}".into(),
            payload_type: "P".into(),
            headers: Default::default(),
            created_at: Utc::now(),
        }
    }

    #[tokio::test]
    async fn delivers_to_subscribers_and_injects_faults() {
        let broker = MemoryBroker::new();
        let mut subscription = broker.subscribe("orders");
        let batch = vec![message("orders"), message("orders"), message("other")];
        broker.reject(batch[1].id);
        let results = broker.send(&batch, deadline()).await;
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(results[1].as_ref().is_err_and(|e| !e.is_temporary()));
        assert_eq!(subscription.try_recv().map(|m| m.id), Some(batch[0].id));
        assert!(subscription.try_recv().is_none());

        broker.set_down(true);
        let results = broker.send(&batch[..1], deadline()).await;
        assert!(results[0].as_ref().is_err_and(|e| e.is_temporary()));
        assert_eq!(broker.delivery_counts().len(), 2);
    }

    #[tokio::test]
    async fn a_held_send_acknowledges_only_after_release() {
        let broker = MemoryBroker::new();
        broker.hold();
        let batch = vec![message("orders")];
        let mut send = Box::pin(broker.send(&batch, deadline()));
        assert!(futures::poll!(&mut send).is_pending());
        assert_eq!(broker.batches(), 1, "the send has started");
        assert!(broker.delivered().is_empty(), "nothing is acknowledged while held");
        broker.release();
        assert!(send.await[0].is_ok());
        assert_eq!(broker.delivery_counts().get(&batch[0].id), Some(&1));
    }
}
