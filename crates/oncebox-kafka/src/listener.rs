//! [`KafkaListener`]: a consumer-group loop that hands each record to a typed handler, usually
//! through an [`Inbox`], and commits a record's offset only after its handler succeeded.
//!
//! What happens to a record:
//! * handler succeeded, or the inbox says the event was consumed before → its offset is committed;
//! * handler failed → nothing is committed; the record, kept in memory, runs again after a
//!   backoff (other partitions keep flowing); later records of its partition wait behind it in
//!   order (the partition is paused once 10,000 wait). Stopping the listener meanwhile commits
//!   nothing for the record, so it is delivered again. With
//!   [`max_attempts`](KafkaListenerConfig::with_max_attempts) the record is treated as poison once
//!   the attempts are used up;
//! * poison (missing or malformed `oncebox_event_id`, no `oncebox_event_type`, no handler for the
//!   type, a payload the handler's type cannot decode) → logged and counted, then produced to the
//!   dead-letter topic and committed when one is configured; otherwise the partition stops (is
//!   paused) at that record until the listener restarts or a rebalance moves the partition.
//!   Never committed silently.
//!
//! A rebalance that moves a partition drops what the listener held of it; whichever member gets
//! it, this one included, fetches it from the group's committed offset, paused or not before.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use oncebox_core::consume::{
    Ended, ListenerBuilder, ListenerConfig, Outcome, Pipeline, RetryPolicy, Verdict, stopped, until_shutdown,
};
use oncebox_core::{Error, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use uuid::Uuid;

use crate::config::KafkaListenerConfig;
use crate::error::{consumer_error, creation_error, produce_error};
use crate::record::{KafkaSource, dead_letter_headers, decode_record};

/// Pause after a consumer error before polling again, so a broken connection is not spun on.
const CONSUMER_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Records of a partition kept in memory behind a record that waits for a retry; at this many the
/// partition is paused until they ran.
const MAX_QUEUED_BEHIND: usize = 10_000;
/// Bound on producing one record to the dead-letter topic.
const DEAD_LETTER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the listener did with one record: the [`Outcome`] every transport reports. A poison record
/// without a dead-letter topic is [`Outcome::Held`] at `topic/partition@offset`: its partition
/// stops there (nothing after it is consumed or committed) until the listener restarts or a
/// rebalance moves the partition; fetched again from its committed offset, it stops at the same
/// record and is reported again.
pub type KafkaOutcome = Outcome;

/// Builds a [`KafkaListener`]: one typed handler per event type ([`ListenerBuilder::on`],
/// [`ListenerBuilder::on_once`]), then [`ListenerBuilder::build`].
pub type KafkaListenerBuilder = ListenerBuilder<KafkaListenerConfig>;

impl ListenerConfig for KafkaListenerConfig {
    type Source = KafkaSource;
    type Listener = KafkaListener;
    const SECTION: &'static str = "kafka.listener";

    fn consumer(&self) -> &str {
        &self.group_id
    }

    fn validate(&self) -> Result<()> {
        KafkaListenerConfig::validate(self)
    }

    fn retry(&self) -> RetryPolicy {
        // A record given up is dead-lettered, or its partition is held at it.
        // Finite by default only where a dead-letter topic keeps what is given up.
        let max_attempts =
            self.max_attempts.or(self.dead_letter_topic.as_ref().map(|_| crate::DEFAULT_MAX_ATTEMPTS));
        RetryPolicy { backoff: self.retry, max_attempts, can_give_up: true }
    }

    fn listener(self, pipeline: Pipeline<KafkaSource>) -> Result<KafkaListener> {
        let dead_letters = match &self.dead_letter_topic {
            Some(_) => {
                let client = self.dead_letter_producer_config();
                Some(
                    client
                        .create::<FutureProducer>()
                        .map_err(|error| creation_error("listener.dead-letter-producer", &client, error))?,
                )
            }
            None => None,
        };
        Ok(KafkaListener { config: self, pipeline, dead_letters })
    }
}

/// Consumes topics in a consumer group and hands each record to the handler of its event type.
///
/// Records run one at a time, in partition order; run more listeners in the same group for
/// parallelism across partitions.
pub struct KafkaListener {
    config: KafkaListenerConfig,
    pipeline: Pipeline<KafkaSource>,
    dead_letters: Option<FutureProducer>,
}

impl fmt::Debug for KafkaListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaListener")
            .field("config", &self.config)
            .field("event_types", &self.pipeline.event_types())
            .finish()
    }
}

/// What the rebalance callback and the consuming loop share: which partitions changed hands, and
/// which this consumer paused.
#[derive(Default)]
struct ListenerContext {
    /// Partitions whose assignment changed since the loop last looked: their holds no longer
    /// apply, because a (re)assigned partition starts at its committed offset (and unpaused, see
    /// `paused`), and neither do the offsets this consumer committed there before, because another
    /// member may have gone on from them while it owned the partition.
    reassigned: Mutex<Vec<PartitionKey>>,
    /// Partitions this consumer paused and has not resumed: exactly those whose application pause
    /// flag it set, since every pause and resume goes through [`pause`](Self::pause) and
    /// [`resume`](Self::resume). librdkafka keeps that flag across assignment changes, so a
    /// partition revoked while paused would come back paused and never be fetched again; an
    /// assignment therefore resumes those of its partitions found here.
    paused: Mutex<HashSet<PartitionKey>>,
}

impl ListenerContext {
    /// Pauses a partition held at `offset` so nothing more of it is fetched, unless this consumer
    /// paused it already.
    fn pause(&self, consumer: &impl Consumer<Self>, key: &PartitionKey, offset: i64, queued: usize) {
        // Recorded before the call and kept even when librdkafka refuses it, so a resume is always
        // attempted: resuming a partition that is not paused changes nothing.
        {
            let mut paused = lock(&self.paused);
            // A full queue asks again with every record; the key is copied only the first time.
            if paused.contains(key) {
                return;
            }
            paused.insert(key.clone());
        }
        let (topic, partition) = (&key.0, key.1);
        match consumer.pause(&partition_list(topic, partition)) {
            Ok(()) => tracing::info!(
                %topic,
                partition,
                offset,
                queued,
                "Kafka partition paused: nothing more of it is fetched until its held record ran or it is assigned again"
            ),
            Err(error) => tracing::warn!(%error, %topic, partition, "could not pause a Kafka partition"),
        }
    }

    /// Resumes a partition if this consumer paused it.
    fn resume(&self, consumer: &impl Consumer<Self>, key: &PartitionKey) {
        if !lock(&self.paused).remove(key) {
            return;
        }
        let (topic, partition) = (&key.0, key.1);
        match consumer.resume(&partition_list(topic, partition)) {
            Ok(()) => tracing::info!(%topic, partition, "Kafka partition resumed: its held records ran"),
            Err(error) => {
                lock(&self.paused).insert(key.clone());
                tracing::warn!(%error, %topic, partition, "could not resume a Kafka partition");
            }
        }
    }

    /// Resumes the partitions of an assignment that this consumer paused before it lost them. The
    /// loop drops their holds (they are in `reassigned`), so nothing else would resume them; once
    /// resumed they are fetched from the group's committed offset, where the assignment starts.
    ///
    /// Runs inside the rebalance callback, after the assignment took effect: `assigned` holds every
    /// partition of an eager assignment, or the added ones of an incremental (cooperative) one, so
    /// a partition kept through an incremental rebalance keeps its hold and its pause. Resuming
    /// there is allowed (librdkafka's own tests pause and resume in the rebalance callback); it
    /// waits only for librdkafka's own threads, never for a poll.
    fn resume_assigned(&self, consumer: &impl Consumer<Self>, assigned: &TopicPartitionList) {
        let resumed: Vec<PartitionKey> = {
            let mut paused = lock(&self.paused);
            partition_keys(assigned).into_iter().filter(|key| paused.remove(key)).collect()
        };
        if resumed.is_empty() {
            return;
        }
        let mut list = TopicPartitionList::new();
        for (topic, partition) in &resumed {
            list.add_partition(topic, *partition);
        }
        let named: Vec<String> =
            resumed.iter().map(|(topic, partition)| format!("{topic}/{partition}")).collect();
        match consumer.resume(&list) {
            Ok(()) => tracing::info!(
                partitions = ?named,
                "Kafka partitions this listener had paused were assigned to it again: resumed, each is fetched from the group's committed offset"
            ),
            Err(error) => {
                lock(&self.paused).extend(resumed);
                tracing::error!(
                    %error,
                    partitions = ?named,
                    "could not resume Kafka partitions assigned again after this listener paused them; they are not fetched until the next rebalance or a restart"
                );
            }
        }
    }
}

/// Locks `mutex`, going on after a panic elsewhere: every update of the context is a single
/// insert, remove or extend, so what it holds stays whole.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClientContext for ListenerContext {}

impl ConsumerContext for ListenerContext {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let (partitions, change) = match rebalance {
            Rebalance::Assign(list) => (list, "assigned"),
            Rebalance::Revoke(list) => (list, "revoked"),
            Rebalance::Error(error) => {
                tracing::warn!(%error, "Kafka consumer group rebalance failed");
                return;
            }
        };
        // Which member owns which partition is the first question when a partition stops moving.
        let named: Vec<String> = partitions
            .elements()
            .iter()
            .map(|element| format!("{}/{}", element.topic(), element.partition()))
            .collect();
        tracing::info!(partitions = ?named, "Kafka partitions {change}");
        lock(&self.reassigned).extend(partition_keys(partitions));
        if let Rebalance::Assign(assigned) = rebalance {
            self.resume_assigned(consumer, assigned);
        }
    }
}

type ListenerConsumer = StreamConsumer<ListenerContext>;

fn partition_keys(list: &TopicPartitionList) -> HashSet<PartitionKey> {
    list.elements().iter().map(|element| (element.topic().to_owned(), element.partition())).collect()
}

/// The offsets the final commit covers: only partitions still assigned. A partition lost to a
/// rebalance has a new owner that may have committed past this consumer's last record, and
/// committing the older offset over it would make the group consume those records again.
fn final_offsets(
    committed: &HashMap<PartitionKey, i64>,
    assigned: &HashSet<PartitionKey>,
) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for (key, next) in committed.iter().filter(|(key, _)| assigned.contains(*key)) {
        // Cannot fail for a new partition entry with a concrete offset.
        let _ = list.add_partition_offset(&key.0, key.1, Offset::Offset(*next));
    }
    list
}

/// A partition held back at a record that must wait: a failed handler's backoff, or a poison
/// record without a dead-letter topic.
///
/// The waiting record is kept in memory and run again from there, never fetched again: no seek,
/// and no pause while fewer than [`MAX_QUEUED_BEHIND`] records wait behind it, so a retry never
/// depends on the broker answering a fetch that starts inside a record batch (tansu 0.6 answers
/// none). Whether the partition is paused is kept once, in [`ListenerContext::paused`]; a
/// rebalance that moves the partition drops the hold and, when the partition comes back, resumes
/// it.
struct Hold {
    /// The record that runs again.
    record: OwnedMessage,
    /// Failed runs of that record so far.
    attempts: u32,
    /// When to run it again; `None` when the partition stopped at a poison record.
    retry_at: Option<Instant>,
    /// Records of the partition that arrived after it, in offset order.
    queued: VecDeque<OwnedMessage>,
}

impl Hold {
    /// Queues `record` behind the held one unless it is a copy of one already here.
    fn queue(&mut self, record: OwnedMessage) {
        let last = self.queued.back().map_or(self.record.offset(), OwnedMessage::offset);
        if record.offset() > last {
            self.queued.push_back(record);
        }
    }
}

type PartitionKey = (String, i32);

fn partition_list(topic: &str, partition: i32) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, partition);
    list
}

impl KafkaListener {
    /// A builder for a listener with `config`.
    pub fn builder(config: KafkaListenerConfig) -> KafkaListenerBuilder {
        ListenerBuilder::new(config)
    }

    /// What the listener does with each record, as it happens (a bounded broadcast: a slow
    /// subscriber misses old outcomes rather than slowing the listener).
    pub fn outcomes(&self) -> broadcast::Receiver<KafkaOutcome> {
        self.pipeline.outcomes()
    }

    /// Poison records met since the listener was built.
    pub fn poison_records(&self) -> u64 {
        self.pipeline.poison_seen()
    }

    /// Joins the group and consumes until `shutdown` completes, then finishes the record in hand
    /// (within the [shutdown grace](KafkaListenerConfig::with_shutdown_grace)), commits what
    /// succeeded on the partitions it still owns synchronously and leaves the group. Broker outages are
    /// logged and ridden out by librdkafka's reconnects; only shutdown or an unusable configuration ends
    /// the call.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let client = self.config.client_config();
        let consumer: ListenerConsumer = client
            .create_with_context(ListenerContext::default())
            .map_err(|error| creation_error("consumer", &client, error))?;
        let topics: Vec<&str> = self.config.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|error| consumer_error(format!("subscribing to {topics:?}"), error))?;
        tracing::info!(group = %self.config.group_id, ?topics, "Kafka listener consuming");
        let (stop, stopping) = watch::channel(false);
        let mut committed: HashMap<PartitionKey, i64> = HashMap::new();
        let consuming = self.consume(&consumer, stopping, &mut committed);
        let (grace, group) = (self.config.shutdown_grace, &self.config.group_id);
        let result = match until_shutdown(std::pin::pin!(shutdown), &stop, grace, group, consuming).await {
            Ended::Finished(result) | Ended::ShutDown(Some(result)) => result,
            Ended::ShutDown(None) => Ok(()),
        };
        // The per-record commits are asynchronous; one synchronous commit makes sure the last of
        // them reached the group coordinator before the consumer leaves. Partitions reassigned
        // since the loop last looked (it may have stopped right after a rebalance) are left out.
        let mut holds = HashMap::new();
        self.forget_reassigned(&consumer, &mut holds, &mut committed);
        let assigned = match consumer.assignment() {
            Ok(list) => partition_keys(&list),
            Err(error) => {
                tracing::warn!(%error, "could not read the Kafka assignment; the final commit is skipped and the last records will be redelivered");
                HashSet::new()
            }
        };
        let list = final_offsets(&committed, &assigned);
        if list.count() > 0
            && let Err(error) = consumer.commit(&list, CommitMode::Sync)
        {
            tracing::warn!(%error, "the final Kafka offset commit failed; the last records will be redelivered");
        }
        consumer.unsubscribe();
        result
    }

    /// Consumes until `stopping`; returns an error only for a fatal consumer error.
    async fn consume(
        &self,
        consumer: &ListenerConsumer,
        mut stopping: watch::Receiver<bool>,
        committed: &mut HashMap<PartitionKey, i64>,
    ) -> Result<()> {
        let mut holds: HashMap<PartitionKey, Hold> = HashMap::new();
        loop {
            let next_retry = holds.values().filter_map(|hold| hold.retry_at).min();
            let received = tokio::select! {
                biased;
                () = stopped(&mut stopping) => return Ok(()),
                () = sleep_until_some(next_retry) => None,
                received = consumer.recv() => Some(received.map(|message| message.detach())),
            };
            // Rebalance callbacks run inside `recv`, so this sees every change before the records
            // that follow it.
            self.forget_reassigned(consumer, &mut holds, committed);
            let Some(received) = received else {
                self.retry_due(consumer, &mut holds, committed).await;
                continue;
            };
            let record = match received {
                Ok(record) => record,
                Err(error) if crate::error::is_fatal(&error) => {
                    return Err(consumer_error("the Kafka consumer hit a fatal error", error));
                }
                Err(error) => {
                    tracing::warn!(%error, group = %self.config.group_id, "Kafka consumer error");
                    tokio::time::sleep(CONSUMER_ERROR_PAUSE).await;
                    continue;
                }
            };
            let key = (record.topic().to_owned(), record.partition());
            // A record handled before (a fetch from an older position) is not run again.
            if committed.get(&key).is_some_and(|next| record.offset() < *next) {
                continue;
            }
            if let Some(hold) = holds.get_mut(&key) {
                // The partition goes on being fetched while its record waits; what arrives waits,
                // in order, behind it, up to a bound on memory.
                hold.queue(record);
                if hold.queued.len() >= MAX_QUEUED_BEHIND {
                    consumer.context().pause(consumer, &key, hold.record.offset(), hold.queued.len());
                }
                continue;
            }
            // Not raced against `stopping`: a record in hand is handled and settled first.
            let fresh = Hold { record, attempts: 0, retry_at: None, queued: VecDeque::new() };
            // A partition without a hold was never paused by this consumer: nothing to resume.
            self.run_partition(consumer, key, fresh, false, &mut holds, committed).await;
        }
    }

    /// Runs the held record, then the records queued behind it, in order, until one must wait:
    /// that one becomes the partition's hold. When all succeeded, a paused partition is resumed.
    ///
    /// No rebalance can come in between: its callbacks run only inside `recv`.
    async fn run_partition(
        &self,
        consumer: &ListenerConsumer,
        key: PartitionKey,
        hold: Hold,
        was_held: bool,
        holds: &mut HashMap<PartitionKey, Hold>,
        committed: &mut HashMap<PartitionKey, i64>,
    ) {
        let Hold { record, attempts, mut queued, .. } = hold;
        let mut next = Some((record, attempts));
        while let Some((record, attempts)) = next {
            match self.process(consumer, &record, attempts).await {
                Settled::Committed => {
                    committed.insert(key.clone(), record.offset() + 1);
                    next = queued.pop_front().map(|record| (record, 0));
                }
                Settled::Wait { attempts, retry_at } => {
                    // A stopped partition fetches nothing more; a retried one pauses only once
                    // enough records wait behind it.
                    if retry_at.is_none() || queued.len() >= MAX_QUEUED_BEHIND {
                        consumer.context().pause(consumer, &key, record.offset(), queued.len());
                    }
                    holds.insert(key, Hold { record, attempts, retry_at, queued });
                    return;
                }
            }
        }
        // If it was paused, librdkafka resumes fetching after the last record it handed out,
        // which is the last one queued here, so nothing is skipped; a record fetched twice is
        // skipped by offset.
        if was_held {
            consumer.context().resume(consumer, &key);
        }
    }

    /// Runs again every held record whose backoff has passed.
    async fn retry_due(
        &self,
        consumer: &ListenerConsumer,
        holds: &mut HashMap<PartitionKey, Hold>,
        committed: &mut HashMap<PartitionKey, i64>,
    ) {
        let now = Instant::now();
        let due: Vec<PartitionKey> = holds
            .iter()
            .filter(|(_, hold)| hold.retry_at.is_some_and(|at| at <= now))
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            if let Some(hold) = holds.remove(&key) {
                self.run_partition(consumer, key, hold, true, holds, committed).await;
            }
        }
    }

    /// Drops what this consumer remembers of partitions revoked or assigned since it last looked:
    /// their holds, and the offsets it committed there. A revoked partition's next owner may
    /// commit past this consumer's last offset; if the partition comes back, the old offset would
    /// otherwise stay in `committed` and the final synchronous commit would write it over the
    /// newer one, rewinding the group. After an assignment the partition starts at the group's
    /// committed offset, so only records handled from then on belong in `committed`.
    fn forget_reassigned(
        &self,
        consumer: &ListenerConsumer,
        holds: &mut HashMap<PartitionKey, Hold>,
        committed: &mut HashMap<PartitionKey, i64>,
    ) {
        let reassigned: Vec<PartitionKey> = std::mem::take(&mut *lock(&consumer.context().reassigned));
        for key in reassigned {
            if let Some(hold) = holds.remove(&key) {
                tracing::info!(
                    topic = %key.0,
                    partition = key.1,
                    offset = hold.record.offset(),
                    queued = hold.queued.len(),
                    "a rebalance dropped the record waiting for a retry; the partition resumes at the group's committed offset"
                );
            }
            committed.remove(&key);
        }
    }

    /// Runs the handler for one record and decides what happens to its offset.
    async fn process(&self, consumer: &ListenerConsumer, record: &OwnedMessage, attempts: u32) -> Settled {
        let verdict = match decode_record(record) {
            Ok(event) => self.pipeline.run(event, attempts).await,
            Err(error) => self.pipeline.undecodable(error, attempts),
        };
        match verdict {
            Verdict::Settle(outcome) => {
                self.commit(consumer, record);
                self.pipeline.report(outcome);
                Settled::Committed
            }
            Verdict::Retry { attempts, retry_in } => {
                Settled::Wait { attempts, retry_at: Some(Instant::now() + retry_in) }
            }
            Verdict::Poison { id, reason, attempts } => {
                self.poison(consumer, record, id, reason, attempts).await
            }
        }
    }

    fn commit(&self, consumer: &ListenerConsumer, record: &OwnedMessage) {
        let mut list = TopicPartitionList::new();
        let next = Offset::Offset(record.offset() + 1);
        if list.add_partition_offset(record.topic(), record.partition(), next).is_ok()
            && let Err(error) = consumer.commit(&list, CommitMode::Async)
        {
            // The record was handled; if the commit is lost it is redelivered and the inbox skips it.
            tracing::warn!(%error, topic = record.topic(), partition = record.partition(), "Kafka offset commit failed");
        }
    }

    /// A record that can never be handled: dead-letter and commit it, or stop its partition.
    async fn poison(
        &self,
        consumer: &ListenerConsumer,
        record: &OwnedMessage,
        id: Option<Uuid>,
        reason: Error,
        attempts: u32,
    ) -> Settled {
        let (topic, partition, offset) = (record.topic().to_owned(), record.partition(), record.offset());
        tracing::error!(event_id = ?id, %topic, partition, offset, error = %reason, "poison Kafka record");
        let reason = reason.to_string();
        let (Some(producer), Some(dead_letter_topic)) = (&self.dead_letters, &self.config.dead_letter_topic)
        else {
            tracing::error!(%topic, partition, offset, "no dead-letter topic: the partition stops at the poison record");
            self.pipeline.report(Outcome::Held { id, at: format!("{topic}/{partition}@{offset}"), reason });
            return Settled::Wait { attempts, retry_at: None };
        };
        match self.dead_letter(producer, dead_letter_topic, record, &reason).await {
            Ok(()) => {
                self.commit(consumer, record);
                self.pipeline.report(Outcome::DeadLettered { id, to: dead_letter_topic.clone(), reason });
                Settled::Committed
            }
            Err(error) => {
                let attempts = attempts.saturating_add(1);
                let retry_in = self.pipeline.retry_delay(attempts);
                tracing::warn!(%error, ?retry_in, "could not dead-letter a poison record; trying again after a pause");
                Settled::Wait { attempts, retry_at: Some(Instant::now() + retry_in) }
            }
        }
    }

    async fn dead_letter(
        &self,
        producer: &FutureProducer,
        dead_letter_topic: &str,
        record: &OwnedMessage,
        reason: &str,
    ) -> Result<()> {
        let (headers, source) = dead_letter_headers(record, reason);
        let mut outgoing = FutureRecord::<[u8], [u8]>::to(dead_letter_topic).headers(headers);
        if let Some(key) = record.key() {
            outgoing = outgoing.key(key);
        }
        if let Some(payload) = record.payload() {
            outgoing = outgoing.payload(payload);
        }
        match producer.send(outgoing, DEAD_LETTER_TIMEOUT).await {
            Ok(_) => Ok(()),
            Err((error, _)) => {
                Err(produce_error(format!("dead-lettering record {source} to '{dead_letter_topic}'"), error))
            }
        }
    }
}

/// What to do with a record's partition after the record was handled.
enum Settled {
    Committed,
    /// The record waits: retried at `retry_at`, or never (`None`, a stopped partition).
    Wait {
        attempts: u32,
        retry_at: Option<Instant>,
    },
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_commit_leaves_out_partitions_lost_to_a_rebalance() {
        let key = |partition| ("orders".to_owned(), partition);
        let committed = HashMap::from([(key(0), 10), (key(1), 20), (key(2), 30)]);
        let assigned = HashSet::from([key(0), key(2), key(3)]);
        let list = final_offsets(&committed, &assigned);
        let mut offsets: Vec<(i32, Offset)> =
            list.elements().iter().map(|element| (element.partition(), element.offset())).collect();
        offsets.sort_by_key(|(partition, _)| *partition);
        assert_eq!(offsets, [(0, Offset::Offset(10)), (2, Offset::Offset(30))]);
        assert_eq!(final_offsets(&committed, &HashSet::new()).count(), 0);
    }

    /// The bookkeeping behind the pause flag; that librdkafka fetches a resumed partition again is
    /// shown against a broker by the listener tests.
    #[test]
    fn an_assignment_resumes_the_partitions_this_consumer_paused_and_no_others() {
        let consumer: BaseConsumer<ListenerContext> = rdkafka::ClientConfig::new()
            .set("group.id", "oncebox-unit")
            .create_with_context(ListenerContext::default())
            .expect("a consumer is created without a broker");
        let context = consumer.context();
        let key = |partition| ("orders".to_owned(), partition);
        context.pause(&consumer, &key(0), 5, 0);
        context.pause(&consumer, &key(0), 5, MAX_QUEUED_BEHIND);
        context.pause(&consumer, &key(1), 7, 0);
        assert_eq!(*lock(&context.paused), HashSet::from([key(0), key(1)]));

        // An incremental assignment adds partitions 0 (back after a revoke) and 2; partition 1,
        // kept through the rebalance, is in neither list and keeps its hold and its pause.
        let mut assigned = TopicPartitionList::new();
        assigned.add_partition("orders", 0);
        assigned.add_partition("orders", 2);
        context.post_rebalance(&consumer, &Rebalance::Assign(&assigned));
        assert_eq!(*lock(&context.paused), HashSet::from([key(1)]));
        let reassigned: HashSet<PartitionKey> = lock(&context.reassigned).iter().cloned().collect();
        assert_eq!(reassigned, HashSet::from([key(0), key(2)]), "the loop drops the holds of both");

        context.resume(&consumer, &key(1));
        context.resume(&consumer, &key(1));
        assert!(lock(&context.paused).is_empty());
    }

    #[test]
    fn building_needs_a_handler_and_a_valid_config() {
        let config = KafkaListenerConfig::new("127.0.0.1:9092", "billing", ["orders"]);
        let error = KafkaListener::builder(config).build().err().map(|error| error.to_string());
        assert!(error.is_some_and(|text| text.contains("no event type has a handler")));
    }

    #[test]
    fn listener_types_are_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<KafkaListener>();
        assert_send_sync::<KafkaListenerConfig>();
    }
}
