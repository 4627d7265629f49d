//! The inbox: each consumer's effect happens once per event id.
//!
//! Two flavours, one rule each:
//! * **transactional** ([`Inbox::consume_in`]) — the id is recorded in the caller's transaction
//!   together with the effect, so both commit or neither does;
//! * **non-transactional** ([`Inbox::consume_once`]) — for effects that cannot be undone (an
//!   email): the id is claimed first, in flight under a lease, then marked applied after the
//!   effect. A delivery that meets a claim in flight runs again later: the holder's effect may
//!   still fail, and a failed effect removes the claim so the next delivery runs it. A claim whose
//!   holder crashed or stalled past the lease is taken over, so a crash never loses an effect;
//!   the effect of a holder that died after its effect but before marking it may then run again,
//!   so the lease must outlast the longest effect ([`Inbox::with_lease`]).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use uuid::Uuid;

use crate::dao::{InboxClaim, InboxDao, InboxWriter};
use crate::error::{Error, ErrorKind};
use crate::hooks::{ConsumedCache, InboxOutcome, NoCache, NoMetrics, OutboxMetrics};

/// What a consume call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumed<R> {
    /// The effect ran (for a batch: on the new messages) and returned this.
    Applied(R),
    /// Already consumed by this consumer: the effect was skipped.
    Duplicate,
}

impl<R> Consumed<R> {
    /// Whether the effect ran.
    pub fn is_applied(&self) -> bool {
        matches!(self, Consumed::Applied(_))
    }
}

/// A consume call failed: in the inbox itself, or in the caller's effect.
#[derive(Debug)]
pub enum ConsumeError<E> {
    /// Recording or checking the id failed; the effect did not run.
    Inbox(Error),
    /// The effect failed. In the transactional flavour, roll the transaction back.
    Handler(E),
}

impl<E: fmt::Display> fmt::Display for ConsumeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumeError::Inbox(error) => write!(f, "inbox: {error}"),
            ConsumeError::Handler(error) => write!(f, "handler: {error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ConsumeError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConsumeError::Inbox(error) => Some(error),
            ConsumeError::Handler(error) => Some(error),
        }
    }
}

impl From<ConsumeError<Error>> for Error {
    fn from(error: ConsumeError<Error>) -> Self {
        match error {
            ConsumeError::Inbox(error) => error,
            ConsumeError::Handler(error) => error.context("consumer effect"),
        }
    }
}

/// The longest a non-transactional consume keeps trying to mark an applied effect before it gives
/// up (and never longer than half the lease).
const FINISH_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);
/// The first and the longest pause between those tries.
const FINISH_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
const FINISH_MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// The most [`Inbox::admit`] takes off the retention for clocks that disagree.
const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The age of an event written at `created_at` when a store that forgets what it consumed after
/// `retention` must refuse it (it may have been consumed and forgotten); `None` when it is young
/// enough, or its age is unknown. Events within [`CLOCK_MARGIN`] (at most half the retention) of
/// the retention are refused too, since the clock that wrote `created_at` may run behind. The
/// ids-only inbox ([`Inbox::admit`]) and the durable inbox's hand-off both decide by it.
pub(crate) fn too_old(
    created_at: Option<chrono::DateTime<chrono::Utc>>,
    retention: std::time::Duration,
) -> Option<std::time::Duration> {
    let age = (chrono::Utc::now() - created_at?).to_std().unwrap_or_default();
    let margin = (retention / 2).min(CLOCK_MARGIN);
    (age >= retention.saturating_sub(margin)).then_some(age)
}

/// How long a non-transactional claim holds an id before another delivery may take it over, unless
/// [`Inbox::with_lease`] says otherwise.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(300);

/// One consumer's view of the inbox. Records are keyed by `(consumer, id)`, so two consumers in a
/// service both handle the same event.
pub struct Inbox<W> {
    consumer: Arc<str>,
    lease: std::time::Duration,
    retention: Option<std::time::Duration>,
    dao: Arc<dyn InboxDao>,
    writer: W,
    cache: Arc<dyn ConsumedCache>,
    metrics: Arc<dyn OutboxMetrics>,
}

impl<W: Clone> Clone for Inbox<W> {
    fn clone(&self) -> Self {
        Self {
            consumer: self.consumer.clone(),
            lease: self.lease,
            retention: self.retention,
            dao: self.dao.clone(),
            writer: self.writer.clone(),
            cache: self.cache.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<W> fmt::Debug for Inbox<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox").field("consumer", &self.consumer).finish_non_exhaustive()
    }
}

impl<W> Inbox<W> {
    /// An inbox for `consumer` without cache or metrics.
    pub fn new(consumer: impl Into<String>, dao: Arc<dyn InboxDao>, writer: W) -> Self {
        Self {
            consumer: Arc::from(consumer.into()),
            lease: DEFAULT_LEASE,
            retention: None,
            dao,
            writer,
            cache: Arc::new(NoCache),
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Puts a consumed-id cache in front of single-event calls.
    #[must_use]
    pub fn with_cache(mut self, cache: Arc<dyn ConsumedCache>) -> Self {
        self.cache = cache;
        self
    }

    /// How long a non-transactional claim ([`consume_once`](Self::consume_once)) holds an id
    /// before another delivery takes it over as abandoned: longer than the longest effect, since
    /// an effect still running past it may be run a second time; short enough that an event whose
    /// consumer crashed mid-effect is not waited for too long. [`DEFAULT_LEASE`] by default.
    #[must_use]
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long the inbox keeps an id (`inbox.clean-up.ttl`; the facade sets it from the
    /// configuration): [`admit`](Self::admit) refuses an event older than that, since its id may
    /// have been recorded and deleted since.
    #[must_use]
    pub fn with_retention(mut self, retention: std::time::Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Whether the inbox can vouch for an event written at `created_at`: `Ok` when it is younger
    /// than the [retention](Self::with_retention) (less a clock margin of up to a minute, for the
    /// clocks of the database and this process), or when either is unknown. An older event may have
    /// been applied and its id cleaned up since (a DLQ re-drive, a replay from the start of a topic,
    /// a retry past the window): it is refused with a permanent error, logged at ERROR with its id
    /// and age, and never applied. `on_once` handlers call it before the effect; a handler that
    /// records the id itself (`record_in`, `consume_in`) calls it first with the event's
    /// `created_at`.
    pub fn admit(
        &self,
        id: Uuid,
        created_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> crate::error::Result<()> {
        let Some(age) = self.retention.and_then(|retention| too_old(created_at, retention)) else {
            return Ok(());
        };
        let retention = self.retention.unwrap_or_default();
        tracing::error!(
            consumer = %self.consumer, event_id = %id, ?age, ?retention,
            "event older than the inbox keeps ids: not applied, since it may have been applied and forgotten; raise oncebox.inbox.clean-up.ttl above the longest way an event can come back"
        );
        Err(Error::new(
            ErrorKind::TooOld,
            format!(
                "event {id} is {}s old, older than consumer '{}' keeps ids ({}s, oncebox.inbox.clean-up.ttl): it may have been applied and forgotten, so it is not applied",
                age.as_secs(),
                self.consumer,
                retention.as_secs()
            ),
        ))
    }

    /// Records inbox metrics.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn OutboxMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    async fn cached(&self, id: Uuid) -> bool {
        let hit = self.cache.contains(&self.consumer, id).await;
        self.metrics.cache_lookup(hit);
        hit
    }

    fn count(&self, outcome: InboxOutcome, count: usize) {
        if count > 0 {
            self.metrics.inbox(&self.consumer, outcome, count as u64);
        }
    }

    /// Transactional consumption: records `id` in `tx`, then runs `effect` in the same `tx`.
    /// Commit `tx` after `Applied` or `Duplicate`; roll it back after an error.
    ///
    /// The cache is consulted first but never filled here: a "duplicate" answer may come from a
    /// record staged earlier in this same transaction, which a rollback undoes. After committing
    /// `tx` (after `Applied` or `Duplicate`), [`remember`](Self::remember) fills it.
    pub async fn consume_in<Tx, R, E, F>(
        &self,
        tx: &mut Tx,
        id: Uuid,
        effect: F,
    ) -> Result<Consumed<R>, ConsumeError<E>>
    where
        Tx: ?Sized,
        W: InboxWriter<Tx>,
        F: AsyncFnOnce(&mut Tx) -> Result<R, E>,
    {
        self.consume_in_at(tx, id, None, effect).await
    }

    /// [`consume_in`](Self::consume_in) for an event written at `created_at`: an id new to the
    /// inbox that is older than the ids it keeps is refused ([`admit`](Self::admit),
    /// [`ErrorKind::TooOld`]; roll `tx` back) and `effect` never runs, while an id it knows is
    /// still answered as a duplicate.
    pub async fn consume_in_at<Tx, R, E, F>(
        &self,
        tx: &mut Tx,
        id: Uuid,
        created_at: Option<chrono::DateTime<chrono::Utc>>,
        effect: F,
    ) -> Result<Consumed<R>, ConsumeError<E>>
    where
        Tx: ?Sized,
        W: InboxWriter<Tx>,
        F: AsyncFnOnce(&mut Tx) -> Result<R, E>,
    {
        if !self.record_new_in(tx, id).await.map_err(ConsumeError::Inbox)? {
            return Ok(Consumed::Duplicate);
        }
        self.admit(id, created_at).map_err(ConsumeError::Inbox)?;
        match effect(tx).await {
            Ok(value) => {
                self.count(InboxOutcome::Consumed, 1);
                Ok(Consumed::Applied(value))
            }
            Err(error) => {
                self.count(InboxOutcome::Failed, 1);
                Err(ConsumeError::Handler(error))
            }
        }
    }

    /// The first half of [`consume_in`](Self::consume_in) for callers that run the effect
    /// themselves (e.g. a handler whose future must be `Send`): checks the cache, records `id` in
    /// `tx`, and returns `true` when the effect should run. Commit `tx` with the effect, then call
    /// [`remember`](Self::remember). Like `consume_in`, it never fills the cache itself.
    ///
    /// Counted in the metrics like `consume_in`: `duplicate` when it answers `false`, `consumed`
    /// when it answers `true` (the inbox never sees the commit, so an effect that fails after a
    /// `true` and is rolled back has been counted as consumed, and counts again when retried).
    pub async fn record_in<Tx>(&self, tx: &mut Tx, id: Uuid) -> crate::error::Result<bool>
    where
        Tx: ?Sized,
        W: InboxWriter<Tx>,
    {
        let new = self.record_new_in(tx, id).await?;
        if new {
            self.count(InboxOutcome::Consumed, 1);
        }
        Ok(new)
    }

    /// Checks the cache and records `id` in `tx`: `true` when it is new. Counts a duplicate; the
    /// caller counts what becomes of a new id, since only it knows (`consume_in` after the effect).
    async fn record_new_in<Tx>(&self, tx: &mut Tx, id: Uuid) -> crate::error::Result<bool>
    where
        Tx: ?Sized,
        W: InboxWriter<Tx>,
    {
        if self.cached(id).await {
            self.count(InboxOutcome::Duplicate, 1);
            return Ok(false);
        }
        let new = self.writer.record(tx, &self.consumer, id).await?;
        if !new {
            // Not cached: the record that made this a duplicate may be uncommitted (staged earlier
            // in `tx`); only the caller knows when it is durable, and says so with `remember`.
            self.count(InboxOutcome::Duplicate, 1);
        }
        Ok(new)
    }

    /// Transactional batch consumption: records every id in `tx` and runs `effect` once with the
    /// messages not consumed before, in their original order (a repeated id within the batch counts
    /// once, first occurrence). `Duplicate` when nothing is new. Bypasses the cache.
    pub async fn consume_all_in<Tx, M, R, E, F>(
        &self,
        tx: &mut Tx,
        messages: Vec<M>,
        id_of: impl Fn(&M) -> Uuid,
        effect: F,
    ) -> Result<Consumed<R>, ConsumeError<E>>
    where
        Tx: ?Sized,
        W: InboxWriter<Tx>,
        F: AsyncFnOnce(&mut Tx, Vec<M>) -> Result<R, E>,
    {
        let ids: Vec<Uuid> = messages.iter().map(&id_of).collect();
        if ids.is_empty() {
            return Ok(Consumed::Duplicate);
        }
        let new: HashSet<Uuid> = self
            .writer
            .record_many(tx, &self.consumer, &ids)
            .await
            .map_err(ConsumeError::Inbox)?
            .into_iter()
            .collect();
        let fresh = keep_new_in_order(messages, &id_of, &new);
        self.count(InboxOutcome::Duplicate, ids.len() - fresh.len());
        if fresh.is_empty() {
            return Ok(Consumed::Duplicate);
        }
        let applied = fresh.len();
        match effect(tx, fresh).await {
            Ok(value) => {
                self.count(InboxOutcome::Consumed, applied);
                Ok(Consumed::Applied(value))
            }
            Err(error) => {
                self.count(InboxOutcome::Failed, applied);
                Err(ConsumeError::Handler(error))
            }
        }
    }

    /// Non-transactional consumption for effects that cannot be undone: claims `id` first (in
    /// flight under the [lease](Self::with_lease)), runs `effect`, then marks the id applied. If
    /// `effect` returns an error the claim is released so a redelivery runs it.
    ///
    /// A delivery that meets a claim in flight gets [`ConsumeError::Inbox`] with
    /// [`ErrorKind::InFlight`]: run it again later, never settle it as a duplicate, since the
    /// holder's effect may still fail (a listener does this by itself). A claim whose lease ran
    /// out is taken over: its holder crashed or stalled, and its effect may not have happened.
    ///
    /// The cache is filled only after this call's effect succeeded: an id answered as applied by
    /// the database is cached too, but an id in flight never is.
    pub async fn consume_once<R, E, F>(&self, id: Uuid, effect: F) -> Result<Consumed<R>, ConsumeError<E>>
    where
        F: AsyncFnOnce() -> Result<R, E>,
    {
        self.consume_once_at(id, None, effect).await
    }

    /// [`consume_once`](Self::consume_once) for an event written at `created_at`: an id the inbox
    /// does not know that is older than the ids it keeps is refused ([`admit`](Self::admit),
    /// [`ErrorKind::TooOld`], the claim released) and its effect never runs, while an id it knows
    /// is still answered as a duplicate.
    pub async fn consume_once_at<R, E, F>(
        &self,
        id: Uuid,
        created_at: Option<chrono::DateTime<chrono::Utc>>,
        effect: F,
    ) -> Result<Consumed<R>, ConsumeError<E>>
    where
        F: AsyncFnOnce() -> Result<R, E>,
    {
        if self.cached(id).await {
            self.count(InboxOutcome::Duplicate, 1);
            return Ok(Consumed::Duplicate);
        }
        let token = match self.dao.claim(&self.consumer, id, self.lease).await.map_err(ConsumeError::Inbox)? {
            InboxClaim::Taken(token) => token,
            InboxClaim::Done => {
                self.cache.insert(&self.consumer, id).await;
                self.count(InboxOutcome::Duplicate, 1);
                return Ok(Consumed::Duplicate);
            }
            InboxClaim::Held => return Err(ConsumeError::Inbox(self.in_flight(id))),
        };
        if let Err(too_old) = self.admit(id, created_at) {
            self.release(id, token).await;
            return Err(ConsumeError::Inbox(too_old));
        }
        match effect().await {
            Ok(value) => {
                self.finish(id, token).await;
                self.cache.insert(&self.consumer, id).await;
                self.count(InboxOutcome::Consumed, 1);
                Ok(Consumed::Applied(value))
            }
            Err(error) => {
                self.release(id, token).await;
                self.count(InboxOutcome::Failed, 1);
                Err(ConsumeError::Handler(error))
            }
        }
    }

    /// Non-transactional batch consumption: claims the ids, runs `effect` once with the new
    /// messages in order, then marks them applied; on an effect error the claims are released.
    /// When any id is in flight elsewhere, nothing runs: the claims taken are released and the
    /// call fails with [`ErrorKind::InFlight`], so the whole batch is run again later.
    pub async fn consume_all_once<M, R, E, F>(
        &self,
        messages: Vec<M>,
        id_of: impl Fn(&M) -> Uuid,
        effect: F,
    ) -> Result<Consumed<R>, ConsumeError<E>>
    where
        F: AsyncFnOnce(Vec<M>) -> Result<R, E>,
    {
        let ids: Vec<Uuid> = messages.iter().map(&id_of).collect();
        let mut taken = Vec::new();
        let mut held = None;
        for id in distinct(&ids) {
            match self.dao.claim(&self.consumer, id, self.lease).await {
                Ok(InboxClaim::Taken(token)) => taken.push((id, token)),
                Ok(InboxClaim::Done) => {}
                Ok(InboxClaim::Held) => {
                    held = Some(self.in_flight(id));
                    break;
                }
                Err(error) => {
                    held = Some(error);
                    break;
                }
            }
        }
        if let Some(error) = held {
            for (id, token) in taken {
                self.release(id, token).await;
            }
            return Err(ConsumeError::Inbox(error));
        }
        let new: HashSet<Uuid> = taken.iter().map(|(id, _)| *id).collect();
        let fresh = keep_new_in_order(messages, &id_of, &new);
        self.count(InboxOutcome::Duplicate, ids.len() - fresh.len());
        if fresh.is_empty() {
            return Ok(Consumed::Duplicate);
        }
        let applied = fresh.len();
        match effect(fresh).await {
            Ok(value) => {
                for (id, token) in taken {
                    self.finish(id, token).await;
                }
                self.count(InboxOutcome::Consumed, applied);
                Ok(Consumed::Applied(value))
            }
            Err(error) => {
                for (id, token) in taken {
                    self.release(id, token).await;
                }
                self.count(InboxOutcome::Failed, applied);
                Err(ConsumeError::Handler(error))
            }
        }
    }

    /// The error of a delivery that met `id` in flight elsewhere.
    fn in_flight(&self, id: Uuid) -> Error {
        Error::temporary(
            ErrorKind::InFlight,
            format!(
                "event {id} is being applied by another delivery to consumer '{}'; this one runs again later",
                self.consumer
            ),
        )
    }

    /// Marks a claim applied after its effect. The effect has happened, so a mark that fails for
    /// a reason that passes (a database restarting) is tried again, with a doubling pause, for up
    /// to half the lease (at most [`FINISH_PATIENCE`]) before the message is settled: without the
    /// mark, a redelivery takes the claim over after the lease and runs the effect again. When the
    /// claim is gone (its lease ran out and another delivery took it over) or the mark still
    /// fails, that is said loudly.
    async fn finish(&self, id: Uuid, token: Uuid) {
        let give_up_at = tokio::time::Instant::now() + (self.lease / 2).min(FINISH_PATIENCE);
        let mut failures = 0;
        loop {
            match self.dao.finish(&self.consumer, id, token).await {
                Ok(true) => return,
                Ok(false) => {
                    tracing::warn!(
                        consumer = %self.consumer, %id, lease = ?self.lease,
                        "the effect outlasted the inbox lease and another delivery took the claim over: the effect may run twice; raise the lease"
                    );
                    return;
                }
                Err(error) if error.is_temporary() && tokio::time::Instant::now() < give_up_at => {
                    failures += 1;
                    let pause = crate::retry::doubling_delay(FINISH_FIRST_PAUSE, FINISH_MAX_PAUSE, failures);
                    tracing::info!(consumer = %self.consumer, %id, %error, ?pause, "marking the applied effect failed; trying again");
                    tokio::time::sleep(pause).await;
                }
                Err(error) => {
                    tracing::warn!(
                        consumer = %self.consumer, %id, %error,
                        "could not mark the applied effect in the inbox; after the lease a redelivery may run it again"
                    );
                    return;
                }
            }
        }
    }

    /// Releases a claim after its effect failed, so the next delivery runs it. When that fails,
    /// the claim is taken over after the lease instead: later, never lost.
    async fn release(&self, id: Uuid, token: Uuid) {
        if let Err(error) = self.dao.release(&self.consumer, id, token).await {
            tracing::warn!(
                consumer = %self.consumer, %id, %error, lease = ?self.lease,
                "could not release the inbox claim after a failed effect; a redelivery takes it over after the lease"
            );
        }
    }

    /// Fills the cache for `id` once the transaction of a [`consume_in`](Self::consume_in) or
    /// [`record_in`](Self::record_in) call has committed, whether it answered `Applied` or
    /// `Duplicate`: only then is the record known to be durable.
    pub async fn remember(&self, id: Uuid) {
        self.cache.insert(&self.consumer, id).await;
    }

    /// Whether `id` is recorded for this consumer (the database answers; the cache is not asked).
    pub async fn is_consumed(&self, id: Uuid) -> crate::error::Result<bool> {
        Ok(!self.dao.consumed(&self.consumer, &[id]).await?.is_empty())
    }
}

fn keep_new_in_order<M>(messages: Vec<M>, id_of: &impl Fn(&M) -> Uuid, new: &HashSet<Uuid>) -> Vec<M> {
    let mut taken = HashSet::with_capacity(new.len());
    messages
        .into_iter()
        .filter(|message| {
            let id = id_of(message);
            new.contains(&id) && taken.insert(id)
        })
        .collect()
}

/// The ids of `ids` without repeats, in first-seen order: an inbox DAO that records a batch one id
/// at a time records an id named twice once.
pub fn distinct(ids: &[Uuid]) -> Vec<Uuid> {
    let mut seen = HashSet::with_capacity(ids.len());
    ids.iter().copied().filter(|id| seen.insert(*id)).collect()
}

/// The ids of `ids` that are in `found`, in input order and each once (a duplicate in the input is
/// reported once): what an inbox DAO returns from a set the database handed back unordered.
pub fn in_input_order(ids: &[Uuid], mut found: HashSet<Uuid>) -> Vec<Uuid> {
    ids.iter().copied().filter(|id| found.remove(id)).collect()
}

/// An inbox kept in memory, for the unit tests of this crate.
#[cfg(test)]
pub(crate) mod memory {
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use uuid::Uuid;

    use std::sync::Arc;

    use crate::dao::{InboxClaim, InboxDao, InboxWriter};
    use crate::error::Result;

    /// Applied records in a set, claims in flight by token. A claim's lease is over only when it
    /// is zero: the tests take over by asking with no lease.
    #[derive(Default)]
    pub(crate) struct SetInbox {
        pub(crate) committed: Mutex<HashSet<(String, Uuid)>>,
        claims: Mutex<HashMap<(String, Uuid), Uuid>>,
    }

    /// A "transaction" over a [`SetInbox`]: inbox ids and effects staged until committed.
    pub(crate) struct StagedTx<E> {
        pub(crate) staged: Vec<(String, Uuid)>,
        pub(crate) effects: Vec<E>,
    }

    impl<E> Default for StagedTx<E> {
        fn default() -> Self {
            Self { staged: Vec::new(), effects: Vec::new() }
        }
    }

    impl<E: Send + Sync> InboxWriter<StagedTx<E>> for Arc<SetInbox> {
        async fn record(&self, tx: &mut StagedTx<E>, consumer: &str, id: Uuid) -> Result<bool> {
            let key = (consumer.to_owned(), id);
            if self.has(consumer, id) || tx.staged.contains(&key) {
                return Ok(false);
            }
            tx.staged.push(key);
            Ok(true)
        }

        async fn record_many(&self, tx: &mut StagedTx<E>, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
            let mut new = Vec::new();
            for id in ids {
                if InboxWriter::record(self, tx, consumer, *id).await? {
                    new.push(*id);
                }
            }
            Ok(new)
        }
    }

    impl SetInbox {
        /// Commits `tx`'s inbox ids (its effects are the caller's to keep).
        pub(crate) fn commit<E>(&self, tx: StagedTx<E>) {
            if let Ok(mut committed) = self.committed.lock() {
                committed.extend(tx.staged);
            }
        }

        /// Whether `id` is recorded as applied for `consumer`.
        pub(crate) fn has(&self, consumer: &str, id: Uuid) -> bool {
            self.committed.lock().is_ok_and(|c| c.contains(&(consumer.to_owned(), id)))
        }

        /// Whether `id` is claimed and in flight for `consumer`.
        pub(crate) fn in_flight(&self, consumer: &str, id: Uuid) -> bool {
            self.claims.lock().is_ok_and(|c| c.contains_key(&(consumer.to_owned(), id)))
        }

        fn holds(&self, consumer: &str, id: Uuid, token: Uuid) -> bool {
            self.claims.lock().is_ok_and(|c| c.get(&(consumer.to_owned(), id)) == Some(&token))
        }

        fn drop_claim(&self, consumer: &str, id: Uuid) {
            if let Ok(mut claims) = self.claims.lock() {
                claims.remove(&(consumer.to_owned(), id));
            }
        }
    }

    #[async_trait]
    impl InboxDao for SetInbox {
        async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
            if self.in_flight(consumer, id) {
                return Ok(false);
            }
            Ok(self.committed.lock().is_ok_and(|mut c| c.insert((consumer.to_owned(), id))))
        }
        async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
            let mut new = Vec::new();
            for id in ids {
                if self.record(consumer, *id).await? {
                    new.push(*id);
                }
            }
            Ok(new)
        }
        async fn claim(&self, consumer: &str, id: Uuid, lease: Duration) -> Result<InboxClaim> {
            if self.has(consumer, id) {
                return Ok(InboxClaim::Done);
            }
            if self.in_flight(consumer, id) && !lease.is_zero() {
                return Ok(InboxClaim::Held);
            }
            let token = Uuid::new_v4();
            if let Ok(mut claims) = self.claims.lock() {
                claims.insert((consumer.to_owned(), id), token);
            }
            Ok(InboxClaim::Taken(token))
        }
        async fn finish(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
            if !self.holds(consumer, id, token) {
                return Ok(false);
            }
            self.drop_claim(consumer, id);
            Ok(self.committed.lock().is_ok_and(|mut c| c.insert((consumer.to_owned(), id))))
        }
        async fn release(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
            if !self.holds(consumer, id, token) {
                return Ok(false);
            }
            self.drop_claim(consumer, id);
            Ok(true)
        }
        async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
            Ok(ids.iter().copied().filter(|id| self.has(consumer, *id)).collect())
        }
        async fn delete_older_than(&self, _older_than: Duration, _limit: u32) -> Result<u64> {
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use async_trait::async_trait;
    use std::sync::Mutex;
    use std::time::Duration;

    #[test]
    fn batch_ids_are_taken_once_each_in_input_order() {
        let [a, b, c] = [Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3)];
        assert_eq!(distinct(&[b, a, b, c, a]), [b, a, c]);
        let found: HashSet<Uuid> = [c, b].into_iter().collect();
        assert_eq!(in_input_order(&[a, c, b, c], found), [c, b], "input order, a repeat reported once");
    }

    use super::memory::SetInbox;

    type StagedTx = super::memory::StagedTx<&'static str>;

    #[derive(Default)]
    struct RecordingCache {
        entries: Mutex<HashSet<(String, Uuid)>>,
    }

    #[async_trait]
    impl ConsumedCache for RecordingCache {
        async fn contains(&self, consumer: &str, id: Uuid) -> bool {
            self.entries.lock().map(|e| e.contains(&(consumer.to_owned(), id))).unwrap_or(false)
        }
        async fn insert(&self, consumer: &str, id: Uuid) {
            if let Ok(mut entries) = self.entries.lock() {
                entries.insert((consumer.to_owned(), id));
            }
        }
    }

    fn tx() -> StagedTx {
        StagedTx::default()
    }

    fn inbox(store: &Arc<SetInbox>, cache: &Arc<RecordingCache>) -> Inbox<Arc<SetInbox>> {
        let dao: Arc<dyn InboxDao> = store.clone();
        let cache_hook: Arc<dyn ConsumedCache> = cache.clone();
        Inbox::new("billing", dao, store.clone()).with_cache(cache_hook)
    }

    #[tokio::test]
    async fn transactional_consume_applies_once_and_caches_only_what_the_caller_remembers() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let id = Uuid::now_v7();

        let mut first = tx();
        let outcome = inbox
            .consume_in(&mut first, id, async |tx: &mut StagedTx| {
                tx.effects.push("charged");
                Ok::<_, std::io::Error>(42)
            })
            .await;
        assert!(matches!(outcome, Ok(Consumed::Applied(42))));
        assert_eq!(first.effects, vec!["charged"]);
        assert!(!cache.contains("billing", id).await, "not cached before the caller commits");
        store.commit(first);

        let mut second = tx();
        let outcome = inbox
            .consume_in(&mut second, id, async |tx: &mut StagedTx| {
                tx.effects.push("charged again");
                Ok::<_, std::io::Error>(0)
            })
            .await;
        assert!(matches!(outcome, Ok(Consumed::Duplicate)));
        assert!(second.effects.is_empty());
        assert!(
            !cache.contains("billing", id).await,
            "the inbox cannot tell whether the duplicate is durable"
        );
        store.commit(second);
        inbox.remember(id).await;
        assert!(cache.contains("billing", id).await, "remembered after the commit");
    }

    #[tokio::test]
    async fn a_failed_effect_is_returned_and_a_rolled_back_id_stays_unconsumed() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let id = Uuid::now_v7();
        let mut rolled_back = tx();
        let outcome = inbox
            .consume_in(&mut rolled_back, id, async |_tx: &mut StagedTx| {
                Err::<(), _>(std::io::Error::other("declined"))
            })
            .await;
        assert!(matches!(outcome, Err(ConsumeError::Handler(_))));
        drop(rolled_back);
        assert!(!store.has("billing", id));
        assert!(!cache.contains("billing", id).await);
    }

    /// Inbox counts by outcome.
    #[derive(Default)]
    struct CountingMetrics {
        counts: Mutex<Vec<(String, InboxOutcome, u64)>>,
    }

    impl OutboxMetrics for CountingMetrics {
        fn inbox(&self, consumer: &str, outcome: InboxOutcome, count: u64) {
            if let Ok(mut counts) = self.counts.lock() {
                counts.push((consumer.to_owned(), outcome, count));
            }
        }
    }

    #[tokio::test]
    async fn record_in_counts_a_new_id_as_consumed_and_a_recorded_one_as_duplicate() {
        let store = Arc::new(SetInbox::default());
        let metrics = Arc::new(CountingMetrics::default());
        let hook: Arc<dyn OutboxMetrics> = metrics.clone();
        let inbox = inbox(&store, &Arc::new(RecordingCache::default())).with_metrics(hook);
        let id = Uuid::now_v7();
        let mut first = tx();
        assert!(inbox.record_in(&mut first, id).await.unwrap_or(false));
        store.commit(first);
        assert!(!inbox.record_in(&mut tx(), id).await.unwrap_or(true));
        let counts = metrics.counts.lock().map(|counts| counts.clone()).unwrap_or_default();
        assert_eq!(
            counts,
            [
                ("billing".to_owned(), InboxOutcome::Consumed, 1),
                ("billing".to_owned(), InboxOutcome::Duplicate, 1)
            ]
        );
    }

    #[tokio::test]
    async fn consume_in_counts_each_outcome_once() {
        let store = Arc::new(SetInbox::default());
        let metrics = Arc::new(CountingMetrics::default());
        let hook: Arc<dyn OutboxMetrics> = metrics.clone();
        let inbox = inbox(&store, &Arc::new(RecordingCache::default())).with_metrics(hook);
        let (applied, declined) = (Uuid::now_v7(), Uuid::now_v7());
        let mut first = tx();
        let outcome = inbox
            .consume_in(&mut first, applied, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(()))
            .await;
        assert!(matches!(outcome, Ok(Consumed::Applied(()))));
        store.commit(first);
        let outcome = inbox
            .consume_in(&mut tx(), declined, async |_tx: &mut StagedTx| {
                Err::<(), _>(std::io::Error::other("no"))
            })
            .await;
        assert!(matches!(outcome, Err(ConsumeError::Handler(_))));
        let outcome = inbox
            .consume_in(&mut tx(), applied, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(()))
            .await;
        assert!(matches!(outcome, Ok(Consumed::Duplicate)));
        let counts = metrics.counts.lock().map(|counts| counts.clone()).unwrap_or_default();
        let billing = |outcome| ("billing".to_owned(), outcome, 1);
        assert_eq!(
            counts,
            [
                billing(InboxOutcome::Consumed),
                billing(InboxOutcome::Failed),
                billing(InboxOutcome::Duplicate)
            ]
        );
    }

    #[tokio::test]
    async fn record_in_tells_new_from_duplicate_and_consults_the_cache() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let id = Uuid::now_v7();
        let mut first = tx();
        assert!(inbox.record_in(&mut first, id).await.unwrap_or(false));
        store.commit(first);
        let mut second = tx();
        assert!(!inbox.record_in(&mut second, id).await.unwrap_or(true));
        assert!(second.staged.is_empty());
        assert!(!cache.contains("billing", id).await, "filled only by remember");
        let cached_only = Uuid::now_v7();
        cache.insert("billing", cached_only).await;
        assert!(
            !inbox.record_in(&mut tx(), cached_only).await.unwrap_or(true),
            "a cache hit skips the database"
        );
    }

    #[tokio::test]
    async fn a_duplicate_inside_a_rolled_back_transaction_is_not_cached() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let id = Uuid::now_v7();
        let mut one_tx = tx();
        let first =
            inbox.consume_in(&mut one_tx, id, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(())).await;
        assert!(matches!(first, Ok(Consumed::Applied(()))));
        let second =
            inbox.consume_in(&mut one_tx, id, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(())).await;
        assert!(matches!(second, Ok(Consumed::Duplicate)), "the id is staged in the same transaction");
        drop(one_tx);
        assert!(!store.has("billing", id), "rolled back");
        assert!(
            !cache.contains("billing", id).await,
            "a duplicate answered by an uncommitted record is not cached"
        );
        let mut redelivery = tx();
        let outcome = inbox
            .consume_in(&mut redelivery, id, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(()))
            .await;
        assert!(matches!(outcome, Ok(Consumed::Applied(()))), "the redelivery runs the effect");
    }

    #[tokio::test]
    async fn a_concurrent_delivery_waits_for_the_first_and_is_never_a_duplicate() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let id = Uuid::now_v7();
        let first = inbox
            .consume_once(id, async || {
                // A second delivery of the same event arrives while this effect runs: it must run
                // again later, not be acknowledged as a duplicate, since this effect fails.
                let concurrent = inbox.consume_once(id, async || Ok::<_, std::io::Error>("twice")).await;
                assert!(
                    matches!(&concurrent, Err(ConsumeError::Inbox(error)) if error.kind() == ErrorKind::InFlight && error.is_temporary()),
                    "{concurrent:?}"
                );
                Err::<&str, _>(std::io::Error::other("effect failed"))
            })
            .await;
        assert!(matches!(first, Err(ConsumeError::Handler(_))));
        assert!(!cache.contains("billing", id).await);
        let redelivery = inbox.consume_once(id, async || Ok::<_, std::io::Error>("applied")).await;
        assert!(matches!(redelivery, Ok(Consumed::Applied("applied"))), "the effect happens after all");
    }

    #[tokio::test]
    async fn a_claim_abandoned_past_its_lease_is_taken_over_and_the_late_holder_is_fenced() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let id = Uuid::now_v7();
        // A holder that stalls in its effect past the lease: a zero lease lets the next delivery
        // take the claim over at once.
        let stalled = inbox(&store, &cache).with_lease(Duration::ZERO);
        let outcome = stalled
            .consume_once(id, async || {
                let taken_over = stalled.consume_once(id, async || Ok::<_, std::io::Error>("second")).await;
                assert!(matches!(taken_over, Ok(Consumed::Applied("second"))), "{taken_over:?}");
                Ok::<_, std::io::Error>("first")
            })
            .await;
        assert!(matches!(outcome, Ok(Consumed::Applied("first"))));
        assert!(store.has("billing", id), "the taking-over delivery marked it applied");
        assert!(!store.in_flight("billing", id), "the late holder's mark changed nothing");
    }

    #[test]
    fn an_event_older_than_the_retention_is_refused_and_one_without_a_time_admitted() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let id = Uuid::now_v7();
        let day = Duration::from_secs(86_400);
        let inbox = inbox(&store, &cache).with_retention(day);
        let now = chrono::Utc::now();
        assert!(inbox.admit(id, Some(now)).is_ok());
        assert!(inbox.admit(id, None).is_ok(), "a producer without the header is not refused");
        let refused = inbox.admit(id, Some(now - chrono::Duration::hours(25)));
        assert!(
            refused
                .as_ref()
                .is_err_and(|error| !error.is_temporary() && error.to_string().contains(&id.to_string())),
            "{refused:?}"
        );
        let near = inbox.admit(id, Some(now - chrono::Duration::seconds(86_400 - 30)));
        assert!(near.is_err(), "within the clock margin of the retention: refused");
        assert!(
            self::inbox(&store, &cache).admit(id, Some(now - chrono::Duration::days(400))).is_ok(),
            "no retention, no limit"
        );
    }

    /// A [`SetInbox`] whose first `failing` marks fail as a restarting database would.
    struct RestartingInbox {
        inner: SetInbox,
        failing: std::sync::atomic::AtomicU32,
    }

    #[async_trait]
    impl InboxDao for RestartingInbox {
        async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
            self.inner.record(consumer, id).await
        }
        async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
            self.inner.record_many(consumer, ids).await
        }
        async fn claim(&self, consumer: &str, id: Uuid, lease: Duration) -> Result<InboxClaim> {
            self.inner.claim(consumer, id, lease).await
        }
        async fn finish(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
            let left = self.failing.load(std::sync::atomic::Ordering::SeqCst);
            if left > 0 {
                self.failing.store(left - 1, std::sync::atomic::Ordering::SeqCst);
                return Err(Error::temporary(ErrorKind::Database, "the database is restarting"));
            }
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

    #[tokio::test(start_paused = true)]
    async fn a_mark_that_fails_while_the_database_restarts_is_tried_again_before_settling() {
        let store = Arc::new(RestartingInbox { inner: SetInbox::default(), failing: 3.into() });
        let inbox = Inbox::new("mailer", store.clone(), ());
        let id = Uuid::now_v7();
        let sent = inbox.consume_once(id, async || Ok::<_, std::io::Error>("sent")).await;
        assert!(matches!(sent, Ok(Consumed::Applied("sent"))));
        assert!(store.inner.has("mailer", id), "marked applied after three failed tries");
        let again = inbox.consume_once(id, async || Ok::<_, std::io::Error>("sent twice")).await;
        assert!(matches!(again, Ok(Consumed::Duplicate)), "a redelivery is a duplicate, not a second effect");
    }

    #[tokio::test]
    async fn an_old_event_is_refused_only_when_the_inbox_does_not_know_it() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache).with_retention(Duration::from_secs(3_600));
        let old = Some(chrono::Utc::now() - chrono::Duration::hours(2));
        let known = Uuid::now_v7();
        InboxDao::record(&*store, "billing", known).await.unwrap_or_default();
        let again = inbox.consume_once_at(known, old, async || Ok::<_, std::io::Error>(())).await;
        assert!(matches!(again, Ok(Consumed::Duplicate)), "a known id settles as a duplicate: {again:?}");
        let unknown = Uuid::now_v7();
        let refused = inbox.consume_once_at(unknown, old, async || Ok::<_, std::io::Error>(())).await;
        assert!(
            matches!(&refused, Err(ConsumeError::Inbox(error)) if error.kind() == ErrorKind::TooOld),
            "{refused:?}"
        );
        assert!(
            !store.in_flight("billing", unknown) && !store.has("billing", unknown),
            "the claim was released"
        );
    }

    #[tokio::test]
    async fn a_transactional_consume_refuses_an_old_event_only_when_the_inbox_does_not_know_it() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache).with_retention(Duration::from_secs(3_600));
        let old = Some(chrono::Utc::now() - chrono::Duration::hours(2));
        let known = Uuid::now_v7();
        let mut first = tx();
        let applied =
            inbox.consume_in(&mut first, known, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(())).await;
        assert!(matches!(applied, Ok(Consumed::Applied(()))));
        store.commit(first);
        let again = inbox
            .consume_in_at(&mut tx(), known, old, async |_tx: &mut StagedTx| Ok::<_, std::io::Error>(()))
            .await;
        assert!(matches!(again, Ok(Consumed::Duplicate)), "a known id settles as a duplicate: {again:?}");
        let mut refused_tx = tx();
        let refused = inbox
            .consume_in_at(&mut refused_tx, Uuid::now_v7(), old, async |tx: &mut StagedTx| {
                tx.effects.push("applied");
                Ok::<_, std::io::Error>(())
            })
            .await;
        assert!(
            matches!(&refused, Err(ConsumeError::Inbox(error)) if error.kind() == ErrorKind::TooOld),
            "{refused:?}"
        );
        assert!(refused_tx.effects.is_empty(), "the effect never ran");
    }

    #[tokio::test]
    async fn a_batch_meeting_an_id_in_flight_runs_nothing_and_keeps_no_claim() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let outcome = inbox
            .consume_once(ids[2], async || {
                let batch = inbox
                    .consume_all_once(
                        ids.clone(),
                        |id| *id,
                        async |_fresh: Vec<Uuid>| Ok::<_, std::io::Error>(()),
                    )
                    .await;
                assert!(
                    matches!(&batch, Err(ConsumeError::Inbox(error)) if error.kind() == ErrorKind::InFlight)
                );
                Ok::<_, std::io::Error>(())
            })
            .await;
        assert!(matches!(outcome, Ok(Consumed::Applied(()))));
        for id in &ids[..2] {
            assert!(
                !store.in_flight("billing", *id) && !store.has("billing", *id),
                "the batch released its claims"
            );
        }
    }

    #[tokio::test]
    async fn batch_consume_keeps_order_and_filters_consumed_and_repeated_ids() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        InboxDao::record(&*store, "billing", ids[1]).await.unwrap_or_default();
        let messages = vec![ids[4], ids[1], ids[0], ids[4], ids[2]];
        let mut batch_tx = tx();
        let outcome = inbox
            .consume_all_in(
                &mut batch_tx,
                messages,
                |id| *id,
                async |_tx: &mut StagedTx, fresh: Vec<Uuid>| Ok::<_, std::io::Error>(fresh),
            )
            .await;
        match outcome {
            Ok(Consumed::Applied(fresh)) => assert_eq!(fresh, vec![ids[4], ids[0], ids[2]]),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn non_transactional_batch_consume_keeps_order_skips_consumed_and_releases_on_error() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
        InboxDao::record(&*store, "billing", ids[1]).await.unwrap_or_default();
        let messages = vec![ids[3], ids[1], ids[0], ids[3], ids[2]];

        let failed = inbox
            .consume_all_once(
                messages.clone(),
                |id| *id,
                async |_fresh: Vec<Uuid>| Err::<(), _>(std::io::Error::other("warehouse down")),
            )
            .await;
        assert!(matches!(failed, Err(ConsumeError::Handler(_))));
        for id in [ids[0], ids[2], ids[3]] {
            assert!(!store.has("billing", id), "a failed batch leaves its new ids unconsumed");
        }
        assert!(store.has("billing", ids[1]), "an id consumed before stays consumed");

        let applied = inbox
            .consume_all_once(
                messages.clone(),
                |id| *id,
                async |fresh: Vec<Uuid>| Ok::<_, std::io::Error>(fresh),
            )
            .await;
        match applied {
            Ok(Consumed::Applied(fresh)) => {
                assert_eq!(fresh, vec![ids[3], ids[0], ids[2]], "order kept, repeats dropped")
            }
            other => panic!("unexpected {other:?}"),
        }
        let again = inbox
            .consume_all_once(messages, |id| *id, async |_fresh: Vec<Uuid>| Ok::<_, std::io::Error>(()))
            .await;
        assert!(matches!(again, Ok(Consumed::Duplicate)), "a fully consumed batch runs nothing");
        let empty = inbox
            .consume_all_once(
                Vec::<Uuid>::new(),
                |id| *id,
                async |_fresh: Vec<Uuid>| Ok::<_, std::io::Error>(()),
            )
            .await;
        assert!(matches!(empty, Ok(Consumed::Duplicate)));
    }

    #[tokio::test]
    async fn non_transactional_consume_claims_first_and_releases_on_error() {
        let store = Arc::new(SetInbox::default());
        let cache = Arc::new(RecordingCache::default());
        let inbox = inbox(&store, &cache);
        let id = Uuid::now_v7();
        let failed = inbox.consume_once(id, async || Err::<(), _>(std::io::Error::other("smtp down"))).await;
        assert!(matches!(failed, Err(ConsumeError::Handler(_))));
        assert!(!store.has("billing", id), "a failed effect can be retried");
        assert!(!cache.contains("billing", id).await);

        let sent = inbox.consume_once(id, async || Ok::<_, std::io::Error>("sent")).await;
        assert!(matches!(sent, Ok(Consumed::Applied("sent"))));
        assert!(cache.contains("billing", id).await, "cached after success");
        let again = inbox.consume_once(id, async || Ok::<_, std::io::Error>("sent twice")).await;
        assert!(matches!(again, Ok(Consumed::Duplicate)));

        let other: Arc<dyn InboxDao> = store.clone();
        let shipping = Inbox::new("shipping", other, store.clone());
        let shipped = shipping.consume_once(id, async || Ok::<_, std::io::Error>(())).await;
        assert!(matches!(shipped, Ok(Consumed::Applied(()))), "consumers are independent");
    }
}
