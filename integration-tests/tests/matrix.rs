//! The dialect x transport matrix: one end-to-end scenario, written once, run for every pair of
//! {PostgreSQL, MySQL/MariaDB, SQLite} x {Kafka, RabbitMQ}, each pair a test (`matrix::postgres_kafka`).
//!
//! Per pair: four publisher tasks commit orders with their events through the facade's publisher
//! (every fifth transaction rolls back, every third publishes three events with `publish_all`);
//! two relay instances on the same tables (one for SQLite) deliver them with the real sender; the
//! transport's listener applies each event through the inbox (`consume_in`) into an effects table,
//! failing the first attempt of about one event in eight after writing its effect, and sees copies
//! of delivered events re-published straight to the broker. The accounting at the end: every
//! committed event delivered, no rolled-back event ever, each committed event's effect exactly
//! once and no other, every outbox row PROCESSED. A one-line ledger per pair goes to stderr.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncebox::Oncebox;
use oncebox_integration_tests::{
    EVENT_TYPE, EventHandler, KafkaTransport, Ledger, MySqlStore, Names, Order, PgStore, Placed,
    RabbitTransport, SqliteStore, Store, Transport, copies_of,
};
use oncebox_testkit::case;
use oncebox_testkit::eventually;
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail, server_missing};
use uuid::Uuid;

/// The event's settings for these runs: batches of 50, and retries enough to outlast any broker
/// outage a run provokes.
const MATRIX_SETTINGS: &[&str] =
    &["batch-size: 50", "max-retries: 1000", "backoff: { delay: 50ms, multiplier: 2, max-delay: 1s }"];

const CONSUMER: &str = "effects";
/// Publisher tasks per pair.
const PUBLISHERS: i64 = 4;
/// Transactions per publisher task.
const TRANSACTIONS: i64 = 150;
/// Delivered events copied straight to the broker again.
const COPIES: usize = 10;
/// The bound on waiting for the expected accounting.
const WAIT: Duration = Duration::from_secs(120);
/// Shutdown deadline of each relay instance.
const SHUTDOWN: Duration = Duration::from_secs(10);

type Instance<S> = Arc<Oncebox<<S as Store>::Dialect>>;

/// Whether the listener fails the first attempt at `id` (about one event in eight: the low bits of
/// a UUIDv7 are random).
fn fails_first(id: Uuid) -> bool {
    id.as_u128().is_multiple_of(8)
}

/// What the listener saw: every delivery, duplicates included.
#[derive(Default)]
struct Deliveries {
    seen: Mutex<HashMap<Uuid, u64>>,
    failed_once: Mutex<HashSet<Uuid>>,
}

impl Deliveries {
    /// Records a delivery of `id`; `true` when this attempt is to fail on purpose.
    fn saw(&self, id: Uuid) -> bool {
        if let Ok(mut seen) = self.seen.lock() {
            *seen.entry(id).or_default() += 1;
        }
        fails_first(id) && self.failed_once.lock().is_ok_and(|mut failed| failed.insert(id))
    }

    fn snapshot(&self) -> Result<HashMap<Uuid, u64>, Failed> {
        self.seen.lock().map(|seen| seen.clone()).map_err(|_| fail("the delivery record is poisoned"))
    }

    fn forced_failures(&self) -> usize {
        self.failed_once.lock().map(|failed| failed.len()).unwrap_or_default()
    }
}

/// A pair whose server is not configured: skipped with a note on stderr, a failure under `CI=true`.
fn skipped(pair: &str, variable: &str) -> TestResult {
    if server_missing(pair, variable) == ExitCode::SUCCESS {
        Ok(())
    } else {
        Err(fail(format!("{pair}: {variable} is not set, and CI=true requires every pair to run")))
    }
}

/// One pair: sets up, runs the scenario, then stops and removes everything also when it failed.
async fn pair<S: Store, T: Transport>(_: Arc<()>) -> TestResult {
    let pair = format!("matrix::{}_{}", S::NAME, T::NAME);
    let names = Names::fresh(&format!("{}_{}", S::NAME, T::NAME));
    let Some(store) = S::from_env(&names) else {
        return skipped(&pair, S::VARIABLE.unwrap_or_default());
    };
    let Some(transport) = T::from_env() else {
        return skipped(&pair, T::VARIABLE);
    };
    let started = Instant::now();
    transport.prepare(&names).await.map_err(fail)?;
    let mut instances: Vec<Instance<S>> = Vec::new();
    let mut listening = None;
    let result = run::<S, T>(&pair, &transport, &store, &names, &mut instances, &mut listening).await;

    let mut teardown = Vec::new();
    for instance in &instances {
        teardown.push(instance.shutdown(SHUTDOWN).await.map_err(fail));
    }
    if let Some(listening) = listening {
        teardown.push(listening.stop().await.map_err(fail));
    }
    if let Some(primary) = instances.first() {
        teardown.push(store.dispose(primary.dialect(), &names).await.map_err(fail));
    }
    teardown.push(transport.dispose(&names).await.map_err(fail));
    eprintln!("{pair}: {:.1?}", started.elapsed());
    result?;
    teardown.into_iter().collect()
}

async fn run<S: Store, T: Transport>(
    pair: &str,
    transport: &T,
    store: &S,
    names: &Names,
    instances: &mut Vec<Instance<S>>,
    listening: &mut Option<oncebox_integration_tests::Listening>,
) -> TestResult {
    let names = Arc::new(names.clone());
    let primary = Oncebox::builder(names.config("5s", MATRIX_SETTINGS).map_err(fail)?)
        .dialect(store.open().await.map_err(fail)?)
        .sender_arc(transport.sender().map_err(fail)?)
        .start()
        .await
        .map_err(fail)?;
    let primary = Arc::new(primary);
    instances.push(primary.clone());
    store.create_business_tables(primary.dialect(), &names).await.map_err(fail)?;

    // The consumer: every delivery recorded, the effect applied through the inbox.
    let deliveries = Arc::new(Deliveries::default());
    let handler: EventHandler = {
        let (dialect, inbox) = (primary.dialect().clone(), primary.inbox(CONSUMER));
        let (names, deliveries) = (names.clone(), deliveries.clone());
        Arc::new(move |id, _order| {
            let (dialect, inbox, names) = (dialect.clone(), inbox.clone(), names.clone());
            let fail = deliveries.saw(id);
            Box::pin(async move { S::apply(&dialect, &inbox, &names, id, fail).await })
        })
    };
    *listening = Some(transport.listen(&names, &[EVENT_TYPE], handler).await.map_err(fail)?);

    // More relay instances on the same tables, each with its own pool and sender.
    for _ in 1..S::RELAYS {
        let instance = Oncebox::builder(names.config("5s", MATRIX_SETTINGS).map_err(fail)?)
            .dialect(store.open().await.map_err(fail)?)
            .sender_arc(transport.sender().map_err(fail)?)
            .start()
            .await
            .map_err(fail)?;
        instances.push(Arc::new(instance));
    }

    // The publishers, spread over the instances.
    let mut publishers = Vec::new();
    for publisher in 0..PUBLISHERS {
        let outbox = instances[publisher as usize % instances.len()].clone();
        let names = names.clone();
        publishers.push(tokio::spawn(async move { publish::<S>(&outbox, &names, publisher).await }));
    }
    let mut committed: BTreeMap<Uuid, Order> = BTreeMap::new();
    let mut rolled_back: HashSet<Uuid> = HashSet::new();
    for publisher in publishers {
        let (done, undone) = publisher.await.map_err(fail)??;
        committed.extend(done);
        rolled_back.extend(undone);
    }

    // Wait until every committed event has its effect and every outbox row is settled.
    let dialect = primary.dialect();
    let waited = eventually("every committed event applied and every outbox row PROCESSED", WAIT, || async {
        let effects = S::effects(dialect, &names).await.map_err(fail)?;
        let applied: HashSet<&str> = effects.iter().map(|(id, _)| id.as_str()).collect();
        let statuses = S::outbox_statuses(dialect, &names).await.map_err(fail)?;
        let settled = statuses.iter().all(|(status, _)| status == "PROCESSED");
        Ok(settled && committed.keys().all(|id| applied.contains(id.to_string().as_str())))
    })
    .await;
    if let Err(error) = waited {
        let statuses = S::outbox_statuses(dialect, &names).await.map_err(fail)?;
        let ledger = PairLedger::read::<S>(dialect, &names, &committed, &rolled_back, &deliveries).await?;
        eprintln!("{pair}: {ledger}");
        return Err(fail(format!(
            "{pair}: {}; outbox rows by status {statuses:?}; {}",
            error.message().unwrap_or_default(),
            ledger.accounts.violations()
        )));
    }

    // Copies of delivered events straight to the broker, as after a lost acknowledgement.
    let before = deliveries.snapshot()?;
    let copies = copies_of(&committed, &names.destination, COPIES, |_| EVENT_TYPE).map_err(fail)?;
    transport.republish(&copies).await.map_err(fail)?;
    eventually("every re-published copy delivered", WAIT, || async {
        let now = deliveries.snapshot()?;
        Ok(copies.iter().all(|copy| now.get(&copy.id) > before.get(&copy.id)))
    })
    .await?;

    let ledger = PairLedger::read::<S>(dialect, &names, &committed, &rolled_back, &deliveries).await?;
    let relayed: Vec<u64> = instances.iter().map(|instance| instance.stats().delivered).collect();
    eprintln!(
        "{pair}: {ledger}; delivered per relay {relayed:?}, forced failures {}, copies {COPIES}",
        deliveries.forced_failures()
    );
    if ledger.accounts.holds() {
        Ok(())
    } else {
        Err(fail(format!("{pair}: {}", ledger.accounts.violations())))
    }
}

/// One publisher task: `TRANSACTIONS` business transactions; every fifth rolls back, every third
/// publishes three events with `publish_all`. Returns the committed events and the rolled-back ids.
async fn publish<S: Store>(
    outbox: &Oncebox<S::Dialect>,
    names: &Names,
    publisher: i64,
) -> Result<(Vec<(Uuid, Order)>, Vec<Uuid>), Failed> {
    let (mut committed, mut rolled_back) = (Vec::new(), Vec::new());
    for transaction in 0..TRANSACTIONS {
        let size = if transaction % 3 == 2 { 3 } else { 1 };
        let first = publisher * 1_000_000 + transaction * 10;
        let orders: Vec<Order> =
            (first..first + size).map(|order| Order { order, total_cents: 1_000 + order % 997 }).collect();
        let commit = transaction % 5 != 4;
        let placed = S::place(outbox.dialect(), outbox.publisher(), names, EVENT_TYPE, &orders, commit).await;
        let (ids, committing) = match placed {
            Placed::Committed(ids) => (ids, true),
            Placed::RolledBack(ids) => (ids, false),
            // Nothing restarts the servers here, so any failure is one of the scenario.
            Placed::Failed(_, error) | Placed::InDoubt(_, error) => return Err(fail(error)),
        };
        if ids.len() != orders.len() {
            return Err(fail(format!("{} ids for {} events", ids.len(), orders.len())));
        }
        if committing {
            committed.extend(ids.into_iter().zip(orders));
        } else {
            rolled_back.extend(ids);
        }
    }
    Ok((committed, rolled_back))
}

/// The accounting of one pair: the shared [`Ledger`], read from this pair's tables and listener.
struct PairLedger {
    accounts: Ledger,
}

impl PairLedger {
    async fn read<S: Store>(
        dialect: &S::Dialect,
        names: &Names,
        committed: &BTreeMap<Uuid, Order>,
        rolled_back: &HashSet<Uuid>,
        deliveries: &Deliveries,
    ) -> Result<Self, Failed> {
        let seen = deliveries.snapshot()?;
        let effects = S::effects(dialect, names).await.map_err(fail)?;
        let statuses = S::outbox_statuses(dialect, names).await.map_err(fail)?;
        let accounts =
            Ledger::new(committed.keys().copied(), rolled_back.iter().copied(), &seen, &effects, &statuses);
        Ok(Self { accounts })
    }
}

impl std::fmt::Display for PairLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "committed {}, rolled back {}, delivered unique {}, duplicates delivered {}, effects {}, \
             double effects {}, lost {}, rolled-back-but-delivered {}",
            self.accounts.committed,
            self.accounts.rolled_back,
            self.accounts.delivered_unique,
            self.accounts.duplicates_delivered,
            self.accounts.effects,
            self.accounts.double_effects.len(),
            self.accounts.lost.len(),
            self.accounts.rolled_back_delivered.len(),
        )
    }
}

fn cases() -> Vec<Case<()>> {
    vec![
        case!("postgres_kafka", pair::<PgStore, KafkaTransport>),
        case!("postgres_rabbit", pair::<PgStore, RabbitTransport>),
        case!("mysql_kafka", pair::<MySqlStore, KafkaTransport>),
        case!("mysql_rabbit", pair::<MySqlStore, RabbitTransport>),
        case!("sqlite_kafka", pair::<SqliteStore, KafkaTransport>),
        case!("sqlite_rabbit", pair::<SqliteStore, RabbitTransport>),
    ]
}

fn main() -> ExitCode {
    Suite::new().add("matrix", Arc::new(()), cases()).run()
}
