//! The storage contracts every dialect implements: the relay's own DAOs (object safe, held as
//! `Arc<dyn …>`) and the write side that joins the caller's transaction (generic over the driver's
//! transaction type).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::activity::PollerActivity;
use crate::error::Result;
use crate::event::{
    ClaimedBatch, DlqCounts, DlqEvent, DlqFilter, DlqSelection, DlqStatus, JobLease, NewOutboxEvent,
    OlderEvents, OutboxCounts, OutboxEvent, SettleReport, Settlement,
};
use crate::stored::{InboxBatch, InboxCount, InboxMessage, InboxSettlement, NewInboxMessage};
use crate::tables::TableNames;

/// The relay's access to the outbox table.
#[async_trait]
pub trait OutboxDao: Send + Sync {
    /// Claims up to `limit` due PENDING rows of `event_type`, oldest `next_retry_at` first, marking
    /// them IN_PROCESS with one fresh claim token and `updated_at` = the database's now. Rows locked
    /// by a concurrent claimer are skipped, never shared.
    async fn claim(&self, event_type: &str, limit: u32) -> Result<ClaimedBatch>;

    /// Ends the claim of the given rows. Each update only touches a row that is still IN_PROCESS with
    /// `batch.claim_token`; the others are counted as refused.
    async fn settle(&self, batch: &ClaimedBatch, settlements: &[Settlement]) -> Result<SettleReport>;

    /// Returns up to `limit` rows IN_PROCESS for longer than `older_than` to PENDING, clearing the
    /// claim token and keeping `attempts`: a crashed worker is not a failed send.
    ///
    /// Each recovery is counted in the row's `recoveries` column instead (a claim never resets
    /// it; a settle does, so only stalls in a row count). The recovery that brings a row to `max_recoveries` makes it FAILED, with a `last_error`
    /// saying how many times it was recovered without an outcome: an event that kills or stalls
    /// every worker sending it would otherwise be claimed first forever. Returns how many rows
    /// changed, to PENDING or to FAILED.
    async fn recover_stuck(&self, older_than: Duration, max_recoveries: u32, limit: u32) -> Result<u64>;

    /// Deletes up to `limit` PROCESSED rows last updated more than `older_than` ago.
    async fn delete_processed(&self, older_than: Duration, limit: u32) -> Result<u64>;

    /// Reads one row (for tests, tools and the DLQ API).
    async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>>;

    /// Row counts per type and status.
    async fn counts(&self) -> Result<OutboxCounts>;
}

/// The relay's and the DLQ API's access to the dead letter queue table.
#[async_trait]
pub trait DlqDao: Send + Sync {
    /// In one transaction: moves up to `limit` FAILED outbox rows into the DLQ as MOVED (same id,
    /// same data) and deletes them from the outbox. Returns the moved rows.
    async fn transfer_to_dlq(&self, limit: u32) -> Result<Vec<OutboxEvent>>;

    /// In one transaction: moves up to `limit` TO_RETRY DLQ rows back into the outbox as PENDING with
    /// 0 attempts (same id), and deletes them from the DLQ. Returns how many moved.
    async fn transfer_from_dlq(&self, limit: u32) -> Result<u64>;

    /// Deletes up to `limit` RESOLVED rows last updated more than `older_than` ago.
    async fn delete_resolved(&self, older_than: Duration, limit: u32) -> Result<u64>;

    /// Reads one DLQ row.
    async fn get(&self, id: Uuid) -> Result<Option<DlqEvent>>;

    /// Lists rows matching `filter`, ordered by `moved_at, id`, `limit` rows after skipping `offset`.
    async fn list(&self, filter: &DlqFilter, offset: u64, limit: u32) -> Result<Vec<DlqEvent>>;

    /// Counts rows matching `filter`.
    async fn count(&self, filter: &DlqFilter) -> Result<u64>;

    /// Sets `status` on the selected rows that are not IN_PROCESS; refuses IN_PROCESS as a target.
    /// Returns how many rows changed.
    async fn set_status(&self, selection: &DlqSelection, status: DlqStatus) -> Result<u64>;

    /// Deletes the selected rows that are not IN_PROCESS. Returns how many were deleted.
    async fn delete(&self, selection: &DlqSelection) -> Result<u64>;

    /// Of the selected rows that are not IN_PROCESS (those [`set_status`](Self::set_status)
    /// would change), how many were written (`created_at`) more than `age` ago, and how long ago
    /// the oldest of them was: what a re-drive of the selection is asked about
    /// ([`dlq::check_re_drive`](crate::dlq::check_re_drive)). Reads no payloads.
    ///
    /// The dialects answer with one aggregate statement on the database's clock, the clock that
    /// wrote `created_at`.
    async fn older_than(&self, selection: &DlqSelection, age: Duration) -> Result<OlderEvents>;

    /// Row counts per type and DLQ status.
    async fn counts(&self) -> Result<DlqCounts>;
}

/// The inbox table outside any caller transaction.
#[async_trait]
pub trait InboxDao: Send + Sync {
    /// Records `(consumer, id)`; `true` when it was new, `false` when it was already there.
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool>;

    /// Records several ids; returns the ones that were new, in input order. All or nothing: when
    /// it fails, none of the ids stays recorded, since the inbox forgets nothing after a failed
    /// batch and would skip the effects of ids left recorded.
    async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>>;

    /// Claims `(consumer, id)` for a non-transactional effect: a new record in flight under a
    /// fresh token, or one whose holder's `lease` ran out on the database clock (the holder
    /// crashed or stalled, so its effect may not have happened) taken over under a fresh token.
    /// A record in flight within its lease is [`InboxClaim::Held`]; an applied one
    /// [`InboxClaim::Done`].
    async fn claim(&self, consumer: &str, id: Uuid, lease: Duration) -> Result<InboxClaim>;

    /// Marks a claimed record applied; `false` when `token` no longer holds it (its lease ran out
    /// and another delivery took it over).
    async fn finish(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool>;

    /// Removes a claimed record after its effect failed, so the next delivery runs it; `false`
    /// when `token` no longer holds it.
    async fn release(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool>;

    /// Which of `ids` are recorded as applied for `consumer` (records in flight are not).
    async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>>;

    /// Deletes up to `limit` records older than `older_than`, over all consumers.
    async fn delete_older_than(&self, older_than: Duration, limit: u32) -> Result<u64>;
}

/// The durable inbox's table (`outbox_inbox_messages`, [`crate::stored`]) outside any caller
/// transaction. Every time is the database's.
#[async_trait]
pub trait StoredInboxDao: Send + Sync {
    /// Stores `message` as RECEIVED, due now; `true` when it was new, `false` when the consumer
    /// stored that id before (whatever its status: a redelivery never makes a second row).
    async fn store(&self, message: &NewInboxMessage) -> Result<bool>;

    /// Claims up to `limit` due RECEIVED messages of `consumer` and `event_type`, oldest
    /// `available_at` first, making them PROCESSING under one fresh token with `locked_at` = now.
    /// Rows a concurrent claimer holds are skipped, never shared.
    async fn claim(&self, consumer: &str, event_type: &str, limit: u32) -> Result<InboxBatch>;

    /// Ends the claim of one message as `settlement` says (a failed run counts one attempt);
    /// `false`, changing nothing, when `token` no longer holds it (its lease ran out and another
    /// poller took it over). A transactional handler settles PROCESSED inside its own transaction
    /// instead ([`StoredInboxTransactions::finish_in`]).
    async fn settle(
        &self,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        settlement: &InboxSettlement,
    ) -> Result<bool>;

    /// Returns every message of `consumer` PROCESSING since more than `lease` ago to RECEIVED, due
    /// now, under no token: its holder crashed or stalled. Only that consumer's rows: another
    /// consumer's processors run with their own lease and attempts. The lost run counts one attempt with
    /// [`LEASE_RAN_OUT`](crate::stored::LEASE_RAN_OUT) as its error, and the message whose attempts
    /// reach `max_attempts` that way becomes FAILED instead, so a message that kills every
    /// consumer running it is not run forever. Returns how many rows changed.
    async fn recover_stuck(&self, consumer: &str, lease: Duration, max_attempts: u32) -> Result<u64>;

    /// Deletes up to `limit` PROCESSED messages of `consumer` processed more than `older_than` ago
    /// (each consumer keeps its own deduplication window).
    async fn delete_processed(&self, consumer: &str, older_than: Duration, limit: u32) -> Result<u64>;

    /// Reads one message.
    async fn get(&self, consumer: &str, id: Uuid) -> Result<Option<InboxMessage>>;

    /// Row counts per consumer, event type and status.
    async fn counts(&self) -> Result<Vec<InboxCount>>;
}

/// Settles a claimed durable inbox message PROCESSED inside the transaction its transactional
/// handler ran in, so the effect and the new status commit together or not at all. Every dialect
/// implements it beside [`Transactions`].
pub trait StoredInboxTransactions: Transactions {
    /// Marks `(consumer, id)` PROCESSED in `tx` when `token` still holds its claim; `false` when it
    /// no longer does: the caller then rolls `tx` back, since another poller owns the message now.
    fn finish_in(
        &self,
        tx: &mut Self::Tx,
        consumer: &str,
        id: Uuid,
        token: Uuid,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// What [`InboxDao::claim`] found for an event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxClaim {
    /// The id is this delivery's to apply now, under this token: finish or release it with it.
    Taken(Uuid),
    /// The effect was applied before: skip it.
    Done,
    /// Another delivery is applying it and its lease has not run out: run this one again later.
    /// Never settle it as a duplicate: the holder's effect may still fail.
    Held,
}

/// A ShedLock-style lease on a named job, shared by every instance through the database.
#[async_trait]
pub trait JobLock: Send + Sync {
    /// Takes the lease on `job` for `owner` when it is free (its `locked_until` has passed on the
    /// database clock), holding it at most `lock_at_most_for`. Creates the job's row on first use.
    async fn try_lock(
        &self,
        job: &str,
        owner: Uuid,
        lock_at_least_for: Duration,
        lock_at_most_for: Duration,
    ) -> Result<Option<JobLease>>;

    /// Releases a lease: `locked_until` becomes the later of now and acquisition + at-least.
    /// A lease that is no longer the owner's changes nothing.
    async fn unlock(&self, lease: &JobLease) -> Result<()>;
}

/// Writes outbox rows inside the caller's open transaction, given as `Tx` (e.g.
/// `&mut sqlx::Transaction<'_, Sqlite>`). It never begins or commits.
pub trait OutboxWriter<Tx>: Send + Sync {
    /// Inserts `events` (one statement for a batch where the driver allows).
    fn write(&self, tx: Tx, events: &[NewOutboxEvent]) -> impl Future<Output = Result<()>> + Send;
}

/// Begins and ends the transactions a transactional handler runs in: a dialect's pool as a
/// listener sees it ([`Handlers::on_in`](crate::consume::Handlers::on_in)). Every dialect
/// implements it for its transaction type, the one its writer records inbox ids in.
pub trait Transactions: Send + Sync + 'static {
    /// The transaction.
    type Tx: Send + 'static;

    /// Begins a transaction.
    fn begin(&self) -> impl Future<Output = Result<Self::Tx>> + Send;

    /// Commits `tx`.
    fn commit(&self, tx: Self::Tx) -> impl Future<Output = Result<()>> + Send;

    /// Rolls `tx` back.
    fn rollback(&self, tx: Self::Tx) -> impl Future<Output = Result<()>> + Send;
}

/// Records inbox ids inside the caller's open transaction.
pub trait InboxWriter<Tx: ?Sized>: Send + Sync {
    /// Records `(consumer, id)` in `tx`; `true` when it was new.
    fn record(&self, tx: &mut Tx, consumer: &str, id: Uuid) -> impl Future<Output = Result<bool>> + Send;

    /// Records several ids in `tx`; returns the new ones in input order.
    fn record_many(
        &self,
        tx: &mut Tx,
        consumer: &str,
        ids: &[Uuid],
    ) -> impl Future<Output = Result<Vec<Uuid>>> + Send;
}

/// Which tables the engine needs, for auto-create.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchemaPlan {
    /// `outbox_events` (publisher side).
    pub outbox: bool,
    /// `outbox_dlq_events` (DLQ enabled).
    pub dlq: bool,
    /// `outbox_consumed_events` and `outbox_inbox_messages` (inbox side).
    pub inbox: bool,
    /// `outbox_jobs` (any clean-up under a job lock).
    pub jobs: bool,
}

impl SchemaPlan {
    /// Every table.
    pub const ALL: SchemaPlan = SchemaPlan { outbox: true, dlq: true, inbox: true, jobs: true };

    /// The tables a service with `config` uses: the outbox when it publishes, the DLQ when the DLQ
    /// is on, the inbox tables when it consumes, the job table when any clean-up runs under a job
    /// lock (a consumer's durable inbox cleans up under one, so every consumer gets it).
    pub fn for_config(config: &crate::Config) -> Self {
        let outbox = config.outbox.as_ref();
        let outbox_clean_up = outbox
            .is_some_and(|o| o.clean_up.is_some() || o.dlq.as_ref().is_some_and(|d| d.clean_up.is_some()));
        SchemaPlan {
            outbox: outbox.is_some(),
            dlq: outbox.is_some_and(|o| o.dlq.is_some()),
            inbox: config.inbox.is_some(),
            jobs: outbox_clean_up || config.inbox.is_some(),
        }
    }
}

/// A hint that an event type has new rows (e.g. PostgreSQL NOTIFY). Polling stays the
/// correctness backstop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeUp {
    /// New rows of this event type were committed.
    EventType(String),
    /// Hints may have been lost (listener reconnected): poll every type now.
    All,
}

/// A stream of wake-up hints provided by a dialect.
#[async_trait]
pub trait WakeSource: Send {
    /// The next hint; `None` when the source has ended for good.
    async fn next(&mut self) -> Option<WakeUp>;
}

/// The DAOs of one database, as a [`Dialect`] provides them; cheap to clone.
#[derive(Clone)]
pub struct Daos {
    /// The outbox DAO.
    pub outbox: Arc<dyn OutboxDao>,
    /// The DLQ DAO.
    pub dlq: Arc<dyn DlqDao>,
    /// The inbox DAO.
    pub inbox: Arc<dyn InboxDao>,
    /// The durable inbox DAO.
    pub stored_inbox: Arc<dyn StoredInboxDao>,
    /// The job lock.
    pub job_lock: Arc<dyn JobLock>,
}

impl std::fmt::Debug for Daos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daos").finish_non_exhaustive()
    }
}

/// Everything a database backend provides, assembled by the facade's builder.
#[async_trait]
pub trait Dialect: Send + Sync + 'static {
    /// The write side; implements [`OutboxWriter`] and [`InboxWriter`] for the driver's transactions.
    type Writer: Send + Sync + 'static;

    /// Short name for logs (`"sqlite"`, `"postgres"`, …).
    fn name(&self) -> &'static str;

    /// The same dialect over `tables` (from `oncebox.tables.prefix`): every statement rendered
    /// for them. A dialect's tables are fixed once it is built: the facade builds it this way
    /// before anything uses it, and a clone keeps the tables it was built with.
    #[must_use]
    fn with_tables(self, tables: &TableNames) -> Self
    where
        Self: Sized;

    /// The same dialect with database wake-ups off (`oncebox.outbox.wake-up: off`): its writer
    /// signals nothing on publish and [`wake_source`](Self::wake_source) gives none. A dialect
    /// without wake-ups is returned as it is.
    #[must_use]
    fn without_wake_ups(self) -> Self
    where
        Self: Sized,
    {
        self
    }

    /// Creates the planned tables and indexes if they do not exist (idempotent).
    async fn create_schema(&self, plan: SchemaPlan) -> Result<()>;

    /// Every DAO over this dialect's tables.
    fn daos(&self) -> Daos;

    /// The outbox DAO.
    fn outbox_dao(&self) -> Arc<dyn OutboxDao> {
        self.daos().outbox
    }

    /// The DLQ DAO.
    fn dlq_dao(&self) -> Arc<dyn DlqDao> {
        self.daos().dlq
    }

    /// The inbox DAO.
    fn inbox_dao(&self) -> Arc<dyn InboxDao> {
        self.daos().inbox
    }

    /// The durable inbox DAO.
    fn stored_inbox_dao(&self) -> Arc<dyn StoredInboxDao> {
        self.daos().stored_inbox
    }

    /// The job lock.
    fn job_lock(&self) -> Arc<dyn JobLock> {
        self.daos().job_lock
    }

    /// The write side.
    fn writer(&self) -> Self::Writer;

    /// Wake-up hints, when the database can send them.
    async fn wake_source(&self) -> Result<Option<Box<dyn WakeSource>>> {
        Ok(None)
    }

    /// The awake marks this dialect's writer consults before it signals a wake-up, for the engine
    /// to keep ([`crate::activity`]); `None` for a dialect whose writer signals nothing.
    fn poller_activity(&self) -> Option<Arc<PollerActivity>> {
        None
    }
}

impl<W: OutboxWriter<Tx> + Send + Sync, Tx> OutboxWriter<Tx> for Arc<W> {
    fn write(&self, tx: Tx, events: &[NewOutboxEvent]) -> impl Future<Output = Result<()>> + Send {
        (**self).write(tx, events)
    }
}

impl<W: InboxWriter<Tx> + Send + Sync, Tx: ?Sized> InboxWriter<Tx> for Arc<W> {
    fn record(&self, tx: &mut Tx, consumer: &str, id: Uuid) -> impl Future<Output = Result<bool>> + Send {
        (**self).record(tx, consumer, id)
    }

    fn record_many(
        &self,
        tx: &mut Tx,
        consumer: &str,
        ids: &[Uuid],
    ) -> impl Future<Output = Result<Vec<Uuid>>> + Send {
        (**self).record_many(tx, consumer, ids)
    }
}
