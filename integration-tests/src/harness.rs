//! The chaos ledger's harness: it runs oncebox the way production does — relays and consumers as
//! separate OS processes (the `chaos_relay` and `chaos_consumer` binaries of this crate, see
//! [`crate::chaos`]) — drives business transactions through them, breaks things on a schedule
//! drawn from a seed, and then accounts for every event ([`Ledger`]).
//!
//! Faults, each kind in its own equal segments of the publishing window so the counts are exact:
//!
//! * SIGKILL of a relay, restarted 0.2–1.5 s later;
//! * SIGKILL of a consumer, restarted 0.3–2 s later;
//! * SIGSTOP of a relay for [`Relaying::stop_for`], longer than the stuck threshold plus a recovery
//!   run, then SIGCONT: its late settles must be refused;
//! * a broker pause: RabbitMQ's application stopped and started again with `rabbitmqctl`, or a
//!   private Kafka-protocol broker frozen with SIGSTOP and thawed;
//! * a database restart: a private PostgreSQL cluster stopped with `pg_ctl -m immediate` (no
//!   checkpoint, as in a crash) and started again. The publisher then sees commits whose answer
//!   never came; it does not guess their outcome but reads it back from the business table.
//!
//! The machine's shared PostgreSQL and Kafka broker are never restarted: a profile with those
//! faults runs on private ones ([`crate::servers`]). RabbitMQ's application is stopped on the shared
//! node, always started again (also when the run fails), and only by profiles that `.ci/run` and
//! the documented commands run on their own.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncebox::stored::InboxStatus;
use oncebox::{Dialect, Publisher, Result};
use uuid::Uuid;

use crate::blackhole::Blackhole;
use crate::chaos::{
    BROKEN_VARIABLE, Broker, DROP_SENDS_VARIABLE, Database, FAILED, FREEZE_REQUEST_VALID, FREEZE_SIGNAL,
    Flavour, HandlerFailures, RelayStats, dropped_by_a_broken_relay, effects_in_doubt, left_in_flight,
};
use crate::servers::{PrivateKafka, PrivateMariadb, PrivatePostgres, RabbitApp};
use crate::{
    EVENT_TYPE, Ledger, Names, Order, Placed, Store, StoredRows, Transport, copies_of, fresh_name, plumbing,
};

/// The second event type of a run, relayed to the same topic or exchange as [`EVENT_TYPE`] by two
/// pollers (`concurrency: 2`); every third transaction publishes it.
pub const PAID_EVENT_TYPE: &str = "order-paid";
/// The pollers of [`PAID_EVENT_TYPE`] in each relay.
const PAID_CONCURRENCY: u32 = 2;

/// The event type of `order`'s events: [`PAID_EVENT_TYPE`] for the orders of every third
/// transaction, [`EVENT_TYPE`] for the others (the orders of one transaction share it, since
/// they share their number but for the last digit).
pub fn event_type_of(order: &Order) -> &'static str {
    if (order.order / 10) % 3 == 1 { PAID_EVENT_TYPE } else { EVENT_TYPE }
}

/// How long after the stuck threshold a stopped relay stays stopped: past the next recovery run
/// (stuck recovery is polled every 0.5–1 s), also when the relay froze as late as its freeze
/// request allows ([`FREEZE_REQUEST_VALID`]).
const STOPPED_PAST_STUCK: Duration = Duration::from_secs(4);
/// How long a stopped consumer stays stopped after the broker noticed its silence.
const CONSUMER_STOPPED_PAST: Duration = Duration::from_secs(4);
/// The engine's grace after a send's deadline (`SEND_OVERRUN_GRACE` of `oncebox-core`), for
/// telling whether a profile's relays claim ahead.
const SEND_OVERRUN_GRACE: Duration = Duration::from_secs(1);

/// The relay settings of a profile that decide how it pipelines and recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relaying {
    /// `oncebox.outbox.sender.emergency-timeout`.
    pub emergency_timeout: Duration,
    /// `stuck-recovery.max-batch-processing-time`: a claimed row older than this is recovered.
    pub stuck_after: Duration,
}

impl Relaying {
    /// Claim-ahead off: the stuck threshold (3 s) is not longer than twice the emergency timeout
    /// (1 s) plus the engine's grace, so each batch is claimed after the previous one was sent.
    pub const SEQUENTIAL: Self =
        Self { emergency_timeout: Duration::from_secs(1), stuck_after: Duration::from_secs(3) };
    /// Claim-ahead on: the stuck threshold (10 s) is longer than twice the emergency timeout (1 s)
    /// plus the engine's grace, so a draining poller claims the next batch while it sends one.
    pub const CLAIMING_AHEAD: Self =
        Self { emergency_timeout: Duration::from_secs(1), stuck_after: Duration::from_secs(10) };

    /// Whether the engine claims ahead with these settings: the rule of `oncebox-core`'s engine
    /// (docs/architecture.md), `max-batch-processing-time > 2 × (emergency-timeout + 1 s)`.
    pub fn claims_ahead(&self) -> bool {
        self.stuck_after > (self.emergency_timeout + SEND_OVERRUN_GRACE) * 2
    }

    /// How long a stopped relay stays stopped: past the stuck threshold and the next recovery run,
    /// so its rows are recovered and re-sent and its late settles meet the claim-token fence.
    pub fn stop_for(&self) -> Duration {
        self.stuck_after + STOPPED_PAST_STUCK
    }
}
/// The inbox consumer name of a run.
const INBOX_CONSUMER: &str = "effects";
/// The inbox consumer name of a run's `on_once` consumers.
const ONCE_INBOX_CONSUMER: &str = "once-effects";
/// The durable inbox consumer name of a run's `store_in` consumers.
const DURABLE_INBOX_CONSUMER: &str = "durable-effects";
/// Consumer processes of a run (of each flavour).
const CONSUMERS: usize = 2;
/// The consumer slot of rebalance storms, after the others.
const STORM_SLOT: usize = CONSUMERS;
/// The bound on waiting for start-up steps (tables created, queue declared).
const START_UP: Duration = Duration::from_secs(60);
/// After the faults, the recovery fails when neither effects nor settled rows grew for this long.
const STALL: Duration = Duration::from_secs(90);
/// How often the recovery and the copies are checked.
const POLL: Duration = Duration::from_millis(250);

/// The size of a run and its faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// Printed with every report.
    pub name: &'static str,
    /// How long the publisher commits; the faults fall inside this window.
    pub window: Duration,
    /// Business transactions started per second (each fourth publishes two events), by all
    /// publishers together.
    pub transactions_per_second: u32,
    /// Publisher tasks sharing the rate, each committing one transaction at a time.
    pub publishers: u32,
    /// SIGKILLs of a relay, each followed by a restart.
    pub relay_kills: u64,
    /// SIGKILLs of a consumer, each followed by a restart.
    pub consumer_kills: u64,
    /// SIGSTOPs of a relay past the stuck threshold.
    pub relay_stops: u64,
    /// Broker pauses (RabbitMQ `stop_app`/`start_app`; SIGSTOP/SIGCONT of a private Kafka broker).
    pub broker_pauses: u64,
    /// Restarts of a private PostgreSQL cluster (other databases: reported as not run).
    pub database_restarts: u64,
    /// Delivered events re-published straight to the broker after the recovery.
    pub copies: usize,
    /// The relays' emergency timeout and stuck threshold, which switch claim-ahead on or off.
    pub relaying: Relaying,
    /// Handler failures on purpose, in events per thousand: `(failing, poison)`, where a failing
    /// event's handler fails its first 1–3 runs and a poison event's every run (dead-lettered).
    pub handler_failures: Option<(u32, u32)>,
    /// Whether `on_once` consumers run beside the transactional ones, on a queue or group of
    /// their own, with their own ledger.
    pub once_consumers: bool,
    /// Whether durable inbox consumers (`store_in`) run beside the transactional ones, on a queue
    /// or group of their own, with their own inbox consumer name and ledger.
    pub durable_consumers: bool,
    /// SIGSTOPs of a consumer slot (its consumer of each flavour) for longer than the broker takes
    /// to give a silent consumer's messages to another ([`Transport::SILENT_CONSUMER_NOTICED_AFTER`]),
    /// then SIGCONT: the stopped consumer comes back to deliveries the other one took over.
    pub consumer_stops: u64,
    /// Blackholes of one relay's network path, alternately to its database and to its broker: a
    /// TCP proxy of the harness ([`Blackhole`]) stops forwarding without closing anything, then
    /// forwards again. A database path stays silent past the stuck threshold, so the other relay
    /// recovers the rows and the late settles meet the fence.
    pub path_blackholes: u64,
    /// Rebalance storms: an extra consumer of each flavour joins and leaves gracefully
    /// [`STORM_ROUNDS`] times in a row, each join and leave a rebalance of the group (on Kafka,
    /// while partitions may be held at failing records).
    pub rebalance_storms: u64,
}

/// The run `cargo test --workspace` makes on the shared servers: process faults only, so nothing
/// else that runs at the same time is disturbed.
pub const SMOKE: Profile = Profile {
    name: "smoke",
    window: Duration::from_secs(30),
    transactions_per_second: 80,
    publishers: 1,
    relay_kills: 4,
    consumer_kills: 2,
    relay_stops: 2,
    broker_pauses: 0,
    database_restarts: 0,
    copies: 20,
    relaying: Relaying::SEQUENTIAL,
    handler_failures: Some((30, 2)),
    once_consumers: true,
    durable_consumers: true,
    consumer_stops: 1,
    path_blackholes: 1,
    rebalance_storms: 1,
};

/// What `.ci/run` runs: about 17,000 events per pair, every kind of fault, claim-ahead on, both
/// consumer flavours; 70 s of publishing keep the two pairs under four minutes.
pub const QUICK: Profile = Profile {
    name: "quick",
    window: Duration::from_secs(70),
    transactions_per_second: 200,
    publishers: 2,
    relay_kills: 6,
    consumer_kills: 2,
    relay_stops: 1,
    broker_pauses: 1,
    database_restarts: 1,
    copies: 50,
    relaying: Relaying::CLAIMING_AHEAD,
    handler_failures: Some((30, 1)),
    once_consumers: true,
    durable_consumers: true,
    consumer_stops: 1,
    path_blackholes: 2,
    rebalance_storms: 1,
};

/// The documented long run: about 100,000 events per pair, 20 relay kills, 3 broker restarts.
pub const FULL: Profile = Profile {
    name: "full",
    window: Duration::from_secs(300),
    transactions_per_second: 400,
    publishers: 4,
    relay_kills: 20,
    consumer_kills: 4,
    relay_stops: 2,
    broker_pauses: 3,
    database_restarts: 1,
    copies: 100,
    relaying: Relaying::SEQUENTIAL,
    handler_failures: Some((30, 1)),
    once_consumers: true,
    durable_consumers: true,
    consumer_stops: 2,
    path_blackholes: 4,
    rebalance_storms: 2,
};

impl Profile {
    /// The profile called `name`.
    pub fn named(name: &str) -> Result<Self> {
        [SMOKE, QUICK, FULL].into_iter().find(|profile| profile.name == name).ok_or_else(|| {
            oncebox::Error::new(
                oncebox::ErrorKind::Config,
                format!("unknown chaos profile {name:?}: expected smoke, quick or full"),
            )
        })
    }

    /// The pairs the profile runs when none are named: PostgreSQL with both brokers for `smoke`
    /// and `quick`, every pair for `full`.
    pub fn default_pairs(&self) -> Vec<Pair> {
        if self.name == FULL.name {
            Pair::all()
        } else {
            Broker::ALL.iter().map(|&broker| Pair { database: Database::Postgres, broker }).collect()
        }
    }
}

/// A dialect and a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pair {
    /// The SQL database.
    pub database: Database,
    /// The broker.
    pub broker: Broker,
}

impl Pair {
    /// Every pair, databases first.
    pub fn all() -> Vec<Self> {
        Database::ALL
            .iter()
            .flat_map(|&database| Broker::ALL.iter().map(move |&broker| Self { database, broker }))
            .collect()
    }

    /// `postgres-rabbit`, `sqlite-kafka`, …
    pub fn name(&self) -> String {
        format!("{}-{}", self.database.name(), self.broker.name())
    }

    /// Parses a pair's [name](Self::name).
    pub fn parse(text: &str) -> Result<Self> {
        Self::all().into_iter().find(|pair| pair.name() == text.trim()).ok_or_else(|| {
            let known: Vec<String> = Self::all().iter().map(Self::name).collect();
            oncebox::Error::new(
                oncebox::ErrorKind::Config,
                format!("unknown pair {text:?}: expected one of {}", known.join(", ")),
            )
        })
    }
}

/// Where the process binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `chaos_relay`.
    pub relay: PathBuf,
    /// `chaos_consumer`.
    pub consumer: PathBuf,
}

/// A deliberate defect given to a run's processes, to show that the ledger catches it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sabotage {
    /// None: the ledger must balance.
    #[default]
    None,
    /// The consumers apply effects without the inbox ([`BROKEN_VARIABLE`]): the ledger must
    /// report double effects.
    ConsumerWithoutInbox,
    /// The relays mark one event in eight PROCESSED without sending it ([`DROP_SENDS_VARIABLE`],
    /// [`dropped_by_a_broken_relay`]): the ledger must report exactly those events lost.
    RelayDropsSends,
}

/// One run's choices besides the profile.
#[derive(Debug, Clone)]
pub struct Options {
    /// The fault schedule's seed.
    pub seed: u64,
    /// The defect the run is given, if any.
    pub sabotage: Sabotage,
    /// The process binaries.
    pub binaries: Binaries,
}

/// The faults a run made, counted when they were made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Relays SIGKILLed.
    pub relay_kills: u32,
    /// Consumers SIGKILLed.
    pub consumer_kills: u32,
    /// Relays stopped past the stuck threshold.
    pub relay_stops: u32,
    /// Of those, the stops aimed at a held claim: the relay froze itself right after a send, before
    /// its settle ([`FREEZE_SIGNAL`]). The others were plain SIGSTOPs, given when a relay sent
    /// nothing within [`FREEZE_REQUEST_VALID`] of the request.
    pub aimed_relay_stops: u32,
    /// Consumer slots SIGSTOPped past the broker's consumer timeout.
    pub consumer_stops: u32,
    /// Blackholes of a relay's path to its database.
    pub database_blackholes: u32,
    /// Blackholes of a relay's path to its broker.
    pub broker_blackholes: u32,
    /// Extra consumers that joined and left in rebalance storms.
    pub storm_members: u32,
    /// Broker pauses or restarts.
    pub broker_pauses: u32,
    /// Database restarts.
    pub database_restarts: u32,
}

/// The outcome of one run: the accounting and what led to it.
#[derive(Debug, Clone)]
pub struct Report {
    /// The pair run.
    pub pair: Pair,
    /// The profile's name.
    pub profile: &'static str,
    /// The profile's relay settings.
    pub relaying: Relaying,
    /// The seed of the fault schedule.
    pub seed: u64,
    /// The accounting of each consumer flavour, the transactional one first.
    pub ledgers: Vec<(Flavour, Ledger)>,
    /// Each relay process's counters, as its stats file last had them.
    pub relays: Vec<(String, RelayStats)>,
    /// Relay processes running at once.
    pub relay_slots: usize,
    /// The faults made.
    pub faults: Faults,
    /// Transactions whose commit answer was lost, and how many of them had committed.
    pub in_doubt: (usize, usize),
    /// Transactions that failed before their commit (nothing committed).
    pub failed_transactions: usize,
    /// Copies of delivered events re-published after the recovery.
    pub copies: usize,
    /// Committed events by event type.
    pub committed_by_type: Vec<(&'static str, usize)>,
    /// Committed events that relays sabotaged with [`Sabotage::RelayDropsSends`] never sent (0 in
    /// any other run): the ledger must report exactly these lost.
    pub dropped_by_relays: usize,
    /// What the profile asked for that this pair could not do, said out loud.
    pub notes: Vec<String>,
    /// How long the phases after the publishing took.
    pub timings: Timings,
    /// How long the run took, set-up and teardown included.
    pub elapsed: Duration,
}

/// How long a run took to settle after its publishers and its fault schedule were done, each time
/// counted from then: what a consumer flavour that falls behind costs the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timings {
    /// Per consumer flavour, when every awaited effect was in (the check runs every 250 ms).
    pub effects_complete: Vec<(Flavour, Duration)>,
    /// When the recovery was done: every effect in, every outbox row settled, every poison event
    /// given up (dead-lettered, or FAILED in the durable inbox).
    pub recovered: Duration,
    /// When every flavour had handled every re-published copy.
    pub copies_handled: Duration,
    /// When every queue or group had no backlog and no durable inbox message was left to run.
    pub drained: Duration,
}

impl Timings {
    /// One line: `effects complete after record_in 1.2s, …; recovered after …`.
    fn text(&self) -> String {
        let effects: Vec<String> = self
            .effects_complete
            .iter()
            .map(|(flavour, after)| format!("{} {:.1?}", flavour.name(), after))
            .collect();
        format!(
            "after the publishing: effects complete after {}; recovered (outbox settled, poison given up) after \
             {:.1?}; copies handled after {:.1?}; drained after {:.1?}",
            effects.join(", "),
            self.recovered,
            self.copies_handled,
            self.drained
        )
    }
}

impl Report {
    /// The header of [`Report::row`].
    pub const HEADER: &'static str = "| pair | consumer | seed | committed | rolled back | delivered unique \
         | duplicates delivered | effects | double effects | repeated after a kill or stall | lost \
         | rolled back but delivered | stuck rows | handler failures | poison dead-lettered | refused settles |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

    /// The transactional consumers' ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledgers[0].1
    }

    /// Whether every flavour's ledger holds.
    pub fn holds(&self) -> bool {
        self.ledgers.iter().all(|(_, ledger)| ledger.holds())
    }

    /// Settles the relays' claim-token fence refused.
    pub fn refused_settles(&self) -> u64 {
        self.relays.iter().map(|(_, stats)| stats.refused_settles).sum()
    }

    /// What the faults made must have shown besides the ledger, or `None`: a relay stopped while
    /// it held a claim the broker had acknowledged (an aimed stop), with another relay running to
    /// recover its rows, must have had its late settle refused by the fence.
    pub fn fence_unshown(&self) -> Option<String> {
        let aimed = self.faults.aimed_relay_stops;
        (aimed > 0 && self.relay_slots > 1 && self.refused_settles() == 0).then(|| {
            format!(
                "{aimed} relays stopped while holding a sent batch, past the stuck threshold with another relay \
                 running, yet no settle was refused: the claim-token fence was not shown"
            )
        })
    }

    /// The broken guarantees of each flavour, or `no guarantee broken`.
    pub fn violations(&self) -> String {
        let broken: Vec<String> = self
            .ledgers
            .iter()
            .filter(|(_, ledger)| !ledger.holds())
            .map(|(flavour, ledger)| format!("{}: {}", flavour.name(), ledger.violations()))
            .collect();
        if broken.is_empty() { "no guarantee broken".to_owned() } else { broken.join("; ") }
    }

    /// One Markdown table row per flavour's ledger.
    pub fn row(&self) -> String {
        let refused = self.refused_settles();
        let rows: Vec<String> = self
            .ledgers
            .iter()
            .map(|(flavour, ledger)| {
                format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    self.pair.name(),
                    flavour.name(),
                    self.seed,
                    ledger.committed,
                    ledger.rolled_back,
                    ledger.delivered_unique,
                    ledger.duplicates_delivered,
                    ledger.effects,
                    ledger.double_effects.len(),
                    ledger.repeated_after_kill.len(),
                    ledger.lost.len(),
                    ledger.rolled_back_delivered.len(),
                    ledger.stuck_rows(),
                    ledger.handler_failures,
                    ledger.poison_dead_lettered.len(),
                    refused,
                )
            })
            .collect();
        rows.join("\n")
    }

    /// The table with this run's row, then the faults and counters behind it.
    pub fn text(&self) -> String {
        let recovered: u64 = self.relays.iter().map(|(_, stats)| stats.recovered).sum();
        let acknowledged: u64 = self.relays.iter().map(|(_, stats)| stats.delivered).sum();
        let faults = self.faults;
        let mut text = format!(
            "{} {} (seed {}, {:.0?}, claim-ahead {}: emergency timeout {:?}, stuck after {:?}):\n{}\n{}\n\
             faults: {} relay kills, {} consumer kills (each also of the on_once and store_in consumers of its slot, \
             when they run), \
             {} relay stops of {:?} ({} aimed: frozen after a send, before its settle), {} consumer stops, \
             {} blackholes of a relay's database path and {} of its broker path, {} storm members joined and left, \
             {} broker pauses, {} database restarts; commits in doubt {} (committed {}), transactions failed \
             before commit {}; copies re-published {}; relay processes {}, events the broker acknowledged \
             {acknowledged}, rows recovered as stuck {recovered} (as each relay's stats file last had them)",
            self.profile,
            self.pair.name(),
            self.seed,
            self.elapsed,
            if self.relaying.claims_ahead() { "on" } else { "off" },
            self.relaying.emergency_timeout,
            self.relaying.stuck_after,
            Self::HEADER,
            self.row(),
            faults.relay_kills,
            faults.consumer_kills,
            faults.relay_stops,
            self.relaying.stop_for(),
            faults.aimed_relay_stops,
            faults.consumer_stops,
            faults.database_blackholes,
            faults.broker_blackholes,
            faults.storm_members,
            faults.broker_pauses,
            faults.database_restarts,
            self.in_doubt.0,
            self.in_doubt.1,
            self.failed_transactions,
            self.copies,
            self.relays.len(),
        );
        let by_type: Vec<String> = self
            .committed_by_type
            .iter()
            .map(|(event_type, count)| format!("{event_type} {count}"))
            .collect();
        let _ = write!(text, "\ncommitted by event type (one topic or exchange): {}", by_type.join(", "));
        let _ = write!(text, "\n{}", self.timings.text());
        for (flavour, ledger) in &self.ledgers {
            if let Some(stored) = &ledger.stored {
                let _ = write!(
                    text,
                    "\n{}: {} messages stored in the durable inbox, by status {:?}; deliveries the listener \
                     absorbed as duplicates {}; handler runs that committed no outcome (killed, fenced after \
                     the lease, or failed by the database) {}",
                    flavour.name(),
                    stored.rows,
                    stored.by_status,
                    stored.duplicates_absorbed,
                    stored.runs_unfinished
                );
            }
            if !ledger.poison_dead_lettered.is_empty() {
                let ids: Vec<String> = ledger.poison_dead_lettered.iter().map(Uuid::to_string).collect();
                let given_up =
                    if ledger.stored.is_some() { "FAILED in the durable inbox" } else { "dead-lettered" };
                let _ = write!(text, "\n{}: poison events {given_up}: {}", flavour.name(), ids.join(", "));
            }
            if !ledger.repeated_after_kill.is_empty() {
                let _ = write!(
                    text,
                    "\n{}: effects repeated after a consumer was killed in them or the inbox left their claim in flight (id, rows): {:?}",
                    flavour.name(),
                    ledger.repeated_after_kill
                );
            }
        }
        if self.dropped_by_relays > 0 {
            let _ = write!(
                text,
                "\nSABOTAGED: the relays marked {} committed events PROCESSED without sending them",
                self.dropped_by_relays
            );
        }
        for note in &self.notes {
            let _ = write!(text, "\nNOT RUN: {note}");
        }
        text
    }
}

/// Runs `profile` on `pair`: sets up (private servers when the profile's faults need them),
/// drives and breaks the processes, waits for the recovery, re-publishes copies, accounts, and
/// removes everything it made — also when the run failed, keeping only the process logs then.
///
/// `Ok` carries the report whatever the ledger says; judging it is the caller's
/// ([`Ledger::holds`], or double effects expected of a broken consumer). `Err` is a run that could
/// not finish: a process that exited by itself, a server that could not be set up, a recovery
/// that stalled (its message carries the ledger as it stood).
pub async fn run(pair: Pair, profile: &Profile, options: &Options) -> Result<Report> {
    crate::with_pair!(pair, run_pair(pair, profile, options))
}

/// The variables that name the pair's servers: a run cannot start without them.
pub fn required_variables(pair: Pair, profile: &Profile) -> Vec<&'static str> {
    let mut variables = Vec::new();
    match pair.database {
        // A private server replaces the shared one when the database restarts.
        Database::Postgres if profile.database_restarts == 0 => variables.push("ONCEBOX_PG_URL"),
        Database::Mysql if profile.database_restarts == 0 => variables.push("ONCEBOX_MYSQL_URL"),
        Database::Postgres | Database::Mysql | Database::Sqlite => {}
    }
    match pair.broker {
        Broker::Rabbit => variables.push("ONCEBOX_AMQP_URL"),
        // A private broker replaces the shared one when the broker pauses.
        Broker::Kafka if profile.broker_pauses == 0 => variables.push("ONCEBOX_KAFKA_BOOTSTRAP"),
        Broker::Kafka => {}
    }
    variables
}

/// A database server of the run's own, restarted like a crash.
enum PrivateDatabase {
    Postgres(PrivatePostgres),
    Mariadb(PrivateMariadb),
}

impl PrivateDatabase {
    async fn stop_immediately(&mut self) -> Result<()> {
        match self {
            Self::Postgres(cluster) => cluster.stop_immediately().await,
            Self::Mariadb(server) => server.stop_immediately().await,
        }
    }

    async fn start(&mut self) -> Result<()> {
        match self {
            Self::Postgres(cluster) => cluster.start().await,
            Self::Mariadb(server) => server.start().await,
        }
    }
}

/// The blackhole proxies between one relay slot and its servers.
#[derive(Default)]
struct RelayPaths {
    database: Option<Blackhole>,
    broker: Option<Blackhole>,
}

/// The servers a run uses and the handles that break them.
struct Servers {
    /// Each relay slot's proxies, when the profile blackholes paths.
    paths: Vec<RelayPaths>,
    /// The paths a blackhole can cut on this pair.
    blackholable: &'static [Path],
    /// The private database server, when the database restarts.
    database: Option<PrivateDatabase>,
    /// The private Kafka-protocol broker, when the broker pauses.
    kafka: Option<PrivateKafka>,
    /// The shared RabbitMQ node's application.
    rabbit: RabbitApp,
    /// Server variables handed to the processes (the private servers' addresses).
    variables: Vec<(&'static str, String)>,
}

async fn run_pair<S: Store, T: Transport>(
    pair: Pair,
    profile: &Profile,
    options: &Options,
) -> Result<Report> {
    let started = Instant::now();
    let names = fresh_names();
    let mut notes = Vec::new();
    let mut servers = Servers {
        paths: Vec::new(),
        blackholable: &[],
        database: None,
        kafka: None,
        rabbit: RabbitApp::new(),
        variables: Vec::new(),
    };
    if profile.database_restarts > 0 {
        match pair.database {
            Database::Postgres => {
                let cluster = PrivatePostgres::create().await?;
                servers.variables.push(("ONCEBOX_PG_URL", cluster.url()));
                servers.database = Some(PrivateDatabase::Postgres(cluster));
            }
            Database::Mysql => {
                let server = PrivateMariadb::create().await?;
                servers.variables.push(("ONCEBOX_MYSQL_URL", server.url()));
                servers.database = Some(PrivateDatabase::Mariadb(server));
            }
            Database::Sqlite => notes.push(format!(
                "{} database restarts on sqlite: an embedded database has no server to restart; \
                 its processes are killed instead",
                profile.database_restarts
            )),
        }
    }
    if profile.broker_pauses > 0 {
        match pair.broker {
            Broker::Kafka => {
                let broker = PrivateKafka::start().await?;
                servers.variables.push(("ONCEBOX_KAFKA_BOOTSTRAP", broker.bootstrap()));
                servers.kafka = Some(broker);
            }
            Broker::Rabbit if !RabbitApp::available().await => {
                return Err(plumbing(
                    "pausing RabbitMQ",
                    "`rabbitmqctl status` fails here, so its application cannot be stopped and started",
                ));
            }
            Broker::Rabbit => {}
        }
    }
    // The harness sees the servers as its processes do: the private ones in place of the shared.
    let overrides = servers.variables.clone();
    let variable = move |name: &str| {
        overrides
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, value)| value.clone())
            .or_else(|| std::env::var(name).ok().filter(|value| !value.is_empty()))
    };
    let store = S::from_variables(&variable, &names)
        .ok_or_else(|| plumbing(&pair.name(), format!("{} is not set", S::VARIABLE.unwrap_or_default())))?;
    let transport = T::from_variables(&variable)
        .ok_or_else(|| plumbing(&pair.name(), format!("{} is not set", T::VARIABLE)))?;

    let run = Run {
        deliveries: format!("{}deliveries", names.prefix),
        once: profile.once_consumers.then(|| {
            let once = Names {
                effects: format!("{}once_effects", names.prefix),
                consumer: fresh_name("oncebox_chaos_once"),
                dead_letter: Some(fresh_name("oncebox_chaos_once_dead")),
                ..names.clone()
            };
            (once, format!("{}once_deliveries", names.prefix))
        }),
        // No dead-letter destination: the listener only stores, and a store that fails (the
        // database away) must be retried until it succeeds, never given up to the broker.
        durable: profile.durable_consumers.then(|| {
            let durable = Names {
                effects: format!("{}durable_effects", names.prefix),
                consumer: fresh_name("oncebox_chaos_durable"),
                dead_letter: None,
                ..names.clone()
            };
            (durable, format!("{}durable_deliveries", names.prefix))
        }),
        dir: std::env::temp_dir().join(fresh_name("oncebox_chaos")),
        names,
        pair,
    };
    std::fs::create_dir_all(&run.dir).map_err(|error| plumbing("creating the run's directory", error))?;
    let mut configs = HashMap::new();
    for flavour in run.flavours() {
        let config = run.dir.join(format!("chaos-{}.yaml", flavour.name()));
        std::fs::write(&config, run.config_text(profile, options.seed, flavour))
            .map_err(|error| plumbing("writing the run's configuration", error))?;
        configs.insert(flavour, config);
    }
    let mut fleet = Fleet::new(configs, run.dir.clone(), options, servers.variables.clone(), S::RELAYS);
    for role in [Role::Consumer, Role::OnceConsumer, Role::DurableConsumer] {
        fleet.role_variables.insert((role, None), T::consumer_variables(&variable));
    }
    if profile.path_blackholes > 0 {
        let (paths, path_notes) = blackholable(pair);
        notes.extend(path_notes);
        servers.blackholable = paths;
        for slot in 0..S::RELAYS {
            let mut proxied = RelayPaths::default();
            let mut overrides = Vec::new();
            for &path in paths {
                let name = match path {
                    Path::Database => S::VARIABLE,
                    Path::Broker => Some(T::VARIABLE),
                };
                let Some((name, url)) = name.and_then(|name| Some((name, variable(name)?))) else {
                    return Err(plumbing(
                        "blackholing a relay's path",
                        format!("no server address for {path:?}"),
                    ));
                };
                let (proxy, through) = proxied_url(&url).await?;
                overrides.push((name, through));
                match path {
                    Path::Database => proxied.database = Some(proxy),
                    Path::Broker => proxied.broker = Some(proxy),
                }
            }
            fleet.role_variables.insert((Role::Relay, Some(slot)), overrides);
            servers.paths.push(proxied);
        }
    }
    let dialect = store.open().await?;

    let driven =
        drive::<S, T>(profile, options, &run, &store, &transport, &dialect, &mut fleet, &mut servers).await;

    // The logs are kept for a run that failed, or whose ledger fails without a defect given.
    let failed = driven.as_ref().map_or(true, |report| options.sabotage == Sabotage::None && !report.holds());
    drop(fleet);
    // A broker left paused by a failed run is resumed before anything else.
    let mut teardown = Vec::new();
    if servers.rabbit.is_stopped() {
        teardown.push(servers.rabbit.start_app().await);
    }
    if let Some(kafka) = servers.kafka.as_mut() {
        teardown.push(kafka.resume());
    }
    // The deliveries table first: disposing of an embedded database closes its pool.
    teardown.push(S::drop_table(&dialect, &run.deliveries).await);
    if let Some((once, deliveries)) = &run.once {
        teardown.push(S::drop_table(&dialect, deliveries).await);
        teardown.push(S::drop_table(&dialect, &once.effects).await);
        if servers.kafka.is_none() {
            teardown.push(transport.dispose_listener(once).await);
        }
    }
    if let Some((durable, deliveries)) = &run.durable {
        teardown.push(S::drop_table(&dialect, deliveries).await);
        teardown.push(S::drop_table(&dialect, &durable.effects).await);
        if servers.kafka.is_none() {
            teardown.push(transport.dispose_listener(durable).await);
        }
    }
    teardown.push(store.dispose(&dialect, &run.names).await);
    if servers.kafka.is_none() {
        teardown.push(transport.dispose(&run.names).await);
    }
    if failed {
        eprintln!("chaos {} {}: process logs kept in {}", profile.name, pair.name(), run.dir.display());
    } else {
        teardown.push(
            std::fs::remove_dir_all(&run.dir).map_err(|error| plumbing("removing the run's files", error)),
        );
    }
    drop(servers);
    let mut report = driven?;
    teardown.into_iter().collect::<Result<()>>()?;
    report.notes.extend(notes);
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Everything one run creates, fresh per run.
struct Run {
    names: Names,
    deliveries: String,
    /// The `on_once` consumers' own names (effects table, queue or group, dead-letter
    /// destination) and deliveries table, when they run.
    once: Option<(Names, String)>,
    /// The durable inbox consumers' own names (effects table, queue or group; no dead-letter
    /// destination) and deliveries table, when they run.
    durable: Option<(Names, String)>,
    dir: PathBuf,
    pair: Pair,
}

impl Run {
    /// The handler failures of `profile` for a run with `seed`.
    fn failures(&self, profile: &Profile, seed: u64) -> Option<HandlerFailures> {
        profile.handler_failures.map(|(failing_per_mille, poison_per_mille)| HandlerFailures {
            seed,
            failing_per_mille,
            poison_per_mille,
        })
    }

    /// The consumer flavours of the run: the transactional one, then `on_once` and `store_in`
    /// when they run.
    fn flavours(&self) -> Vec<Flavour> {
        let mut flavours = vec![Flavour::Transactional];
        flavours.extend(self.once.as_ref().map(|_| Flavour::Once));
        flavours.extend(self.durable.as_ref().map(|_| Flavour::Durable));
        flavours
    }

    /// The names and deliveries table of the consumers of `flavour`.
    fn of(&self, flavour: Flavour) -> (&Names, &str) {
        match (flavour, &self.once, &self.durable) {
            (Flavour::Once, Some((names, deliveries)), _)
            | (Flavour::Durable, _, Some((names, deliveries))) => (names, deliveries),
            _ => (&self.names, &self.deliveries),
        }
    }

    /// The file of the relays (which read only its `oncebox:` block and the run's names) and of
    /// the consumers of `flavour`.
    fn config_text(&self, profile: &Profile, seed: u64, flavour: Flavour) -> String {
        let relaying = profile.relaying;
        let (names, deliveries) = self.of(flavour);
        let failures = self.failures(profile, seed).map_or_else(String::new, |failures| {
            format!(
                "  handler-failures: {{ seed: {}, failing-per-mille: {}, poison-per-mille: {} }}\n",
                failures.seed, failures.failing_per_mille, failures.poison_per_mille
            )
        });
        let dead_letter =
            names.dead_letter.as_ref().map_or_else(String::new, |name| format!("  dead-letter: {name}\n"));
        format!(
            "oncebox:
  tables:
    prefix: {prefix}
  outbox:
    sender: {{ emergency-timeout: {emergency_timeout}ms }}
    events:
      {EVENT_TYPE}:
        topic: {destination}
      {PAID_EVENT_TYPE}:
        topic: {destination}
        concurrency: {PAID_CONCURRENCY}
    defaults:
      batch-size: 50
      max-retries: 1000
      backoff: {{ delay: 100ms, multiplier: 2, max-delay: 1s }}
      polling: {{ min-fixed-delay: 20ms, max-fixed-delay: 200ms }}
    stuck-recovery:
      max-batch-processing-time: {stuck}ms
      max-recoveries: 50
      polling: {{ initial-delay: 0s, min-fixed-delay: 500ms, max-fixed-delay: 1s }}
  inbox: {{}}
chaos:
  database: {database}
  broker: {broker}
  event-types: [{EVENT_TYPE}, {PAID_EVENT_TYPE}]
  orders-table: {orders}
  effects-table: {effects}
  deliveries-table: {deliveries}
  listener-group: {group}
  inbox-consumer: {inbox_consumer}
  flavour: {flavour}
{dead_letter}{failures}  stats-dir: {dir}
  exit-on-stdin-eof: true
",
            prefix = self.names.prefix,
            destination = self.names.destination,
            emergency_timeout = relaying.emergency_timeout.as_millis(),
            stuck = relaying.stuck_after.as_millis(),
            database = self.pair.database.name(),
            broker = self.pair.broker.name(),
            orders = names.orders,
            effects = names.effects,
            group = names.consumer,
            inbox_consumer = inbox_consumer(flavour),
            flavour = flavour.config_value(),
            dir = self.dir.display(),
        )
    }
}

/// The inbox consumer name of the consumers of `flavour`.
fn inbox_consumer(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::Transactional => INBOX_CONSUMER,
        Flavour::Once => ONCE_INBOX_CONSUMER,
        Flavour::Durable => DURABLE_INBOX_CONSUMER,
    }
}

/// Fresh names of one run: a table prefix `c_<random>_` and its own topic or exchange, group or
/// queue, and dead-letter topic or queue.
fn fresh_names() -> Names {
    let prefix = format!("{}_", fresh_name("c"));
    Names {
        orders: format!("{prefix}orders"),
        effects: format!("{prefix}effects"),
        destination: fresh_name("oncebox_chaos"),
        consumer: fresh_name("oncebox_chaos_effects"),
        dead_letter: Some(fresh_name("oncebox_chaos_dead")),
        prefix,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    Relay,
    /// A transactional consumer; the schedule's consumer faults name these, and each also
    /// strikes the `on_once` and `store_in` consumers of the same slot when they run.
    Consumer,
    OnceConsumer,
    DurableConsumer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Relay => "relay",
            Role::Consumer => "consumer",
            Role::OnceConsumer => "once-consumer",
            Role::DurableConsumer => "durable-consumer",
        }
    }

    /// The consumer flavour of the role; `None` for a relay.
    fn flavour(self) -> Option<Flavour> {
        match self {
            Role::Relay => None,
            Role::Consumer => Some(Flavour::Transactional),
            Role::OnceConsumer => Some(Flavour::Once),
            Role::DurableConsumer => Some(Flavour::Durable),
        }
    }
}

/// Environment variables handed to a process: name and value.
type Variables = Vec<(&'static str, String)>;

/// A network path of a relay that a blackhole can cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Database,
    Broker,
}

/// One scheduled fault or its undoing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Kill(Role, usize),
    Start(Role, usize),
    Stop(usize),
    Continue(usize),
    StopConsumer(usize),
    ContinueConsumer(usize),
    Blackhole(Path, usize),
    Forward(Path, usize),
    /// The storm slot's consumers join the group, or leave it gracefully.
    Join,
    Leave,
    PauseBroker,
    ResumeBroker,
    StopDatabase,
    StartDatabase,
}

/// Spreads `count` faults over `window` ms, one in each equal segment, at a random offset of
/// `within` (a fraction range of the segment, in per mille); returns the offsets.
fn spread(rng: &mut fastrand::Rng, window: u64, count: u64, within: (u64, u64), lasting: u64) -> Vec<u64> {
    let segment = window / count.max(1);
    (0..count)
        .map(|index| {
            let earliest = segment * within.0 / 1_000;
            let latest = (segment * within.1 / 1_000).min(segment.saturating_sub(lasting)).max(earliest + 1);
            index * segment + rng.u64(earliest..latest)
        })
        .collect()
}

/// What a run's servers and broker allow the schedule to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Abilities {
    /// Relay processes.
    relays: usize,
    /// Whether the database can restart (a private server).
    restarts: bool,
    /// How long a killed consumer stays down at least.
    consumer_down: Duration,
    /// How long a consumer is stopped: past the broker's consumer timeout.
    consumer_stopped: Duration,
    /// The relay paths a blackhole can cut (none on SQLite's, which is no network).
    paths: &'static [Path],
}

/// The joins and leaves of one rebalance storm.
pub const STORM_ROUNDS: u64 = 3;
/// How long a storm's extra consumer stays in the group before it leaves, and out before it joins
/// again: long enough for the group to rebalance each time.
const STORM_STEP: Duration = Duration::from_millis(2_500);

/// The fault schedule of `profile` on a run with `abilities`, drawn from `seed`: offsets from the
/// publisher's start.
///
/// Each kind of fault has its own equal segments of the window, one fault per segment, so counts
/// are exact and a slot is never killed twice before its restart; a relay kill never meets a stop
/// of the same relay (it takes the other relay, or waits until the stopped one is continued), and
/// a consumer stop never meets a kill of the same slot.
fn schedule(profile: &Profile, seed: u64, abilities: Abilities) -> Vec<(Duration, Action)> {
    let Abilities { relays, restarts, consumer_down, .. } = abilities;
    let mut rng = fastrand::Rng::with_seed(seed);
    let window = u64::try_from(profile.window.as_millis()).unwrap_or(u64::MAX);
    let stop_for = u64::try_from(profile.relaying.stop_for().as_millis()).unwrap_or(u64::MAX);
    let mut plan: Vec<(u64, Action)> = Vec::new();
    let mut stops: Vec<(u64, u64, usize)> = Vec::new();
    for at in spread(&mut rng, window, profile.relay_stops, (100, 900), stop_for + 1_000) {
        let slot = rng.usize(0..relays);
        stops.push((at, at + stop_for, slot));
        plan.push((at, Action::Stop(slot)));
        plan.push((at + stop_for, Action::Continue(slot)));
    }
    // When each relay is back from its last kill: a kill moved past a stop (which may outlast a
    // segment) must not fall before that, or it would kill a relay that is not running.
    let mut back_from_kill = vec![0_u64; relays];
    for mut at in spread(&mut rng, window, profile.relay_kills, (100, 500), 0) {
        let mut back = at + rng.u64(200..1_500);
        let mut slot = rng.usize(0..relays);
        let meets = |slot: usize, at: u64, back: u64| {
            stops.iter().find(|&&(from, to, stopped)| stopped == slot && at <= to + 500 && from <= back + 500)
        };
        if meets(slot, at, back).is_some() || at <= back_from_kill[slot] + 500 {
            slot = (slot + 1) % relays;
        }
        loop {
            let later = match meets(slot, at, back) {
                Some(&(_, to, _)) => to + 600,
                None if at <= back_from_kill[slot] + 500 => back_from_kill[slot] + 600,
                None => break,
            };
            (at, back) = (later, later + (back - at));
        }
        back_from_kill[slot] = back;
        plan.push((at, Action::Kill(Role::Relay, slot)));
        plan.push((back, Action::Start(Role::Relay, slot)));
    }
    let mut consumer_kills: Vec<(u64, u64, usize)> = Vec::new();
    for at in spread(&mut rng, window, profile.consumer_kills, (200, 500), 0) {
        let back = at + rng.u64(300..2_000).max(u64::try_from(consumer_down.as_millis()).unwrap_or(u64::MAX));
        let slot = rng.usize(0..CONSUMERS);
        consumer_kills.push((at, back, slot));
        plan.push((at, Action::Kill(Role::Consumer, slot)));
        plan.push((back, Action::Start(Role::Consumer, slot)));
    }
    let stopped = u64::try_from(abilities.consumer_stopped.as_millis()).unwrap_or(u64::MAX);
    for mut at in spread(&mut rng, window, profile.consumer_stops, (100, 400), stopped) {
        // A slot that is down (or comes down) meanwhile cannot be stopped: the other slot, or later.
        let meets = |slot: usize, at: u64| {
            consumer_kills
                .iter()
                .filter(|&&(from, to, killed)| killed == slot && at <= to + 500 && from <= at + stopped + 500)
                .map(|&(_, to, _)| to)
                .max()
        };
        let mut slot = rng.usize(0..CONSUMERS);
        loop {
            match (meets(slot, at), meets((slot + 1) % CONSUMERS, at)) {
                (None, _) => break,
                (Some(_), None) => {
                    slot = (slot + 1) % CONSUMERS;
                    break;
                }
                (Some(to), Some(_)) => at = to + 600,
            }
        }
        plan.push((at, Action::StopConsumer(slot)));
        plan.push((at + stopped, Action::ContinueConsumer(slot)));
    }
    if !abilities.paths.is_empty() {
        let blackholes = spread(&mut rng, window, profile.path_blackholes, (100, 500), stop_for + 1_000);
        for (index, mut at) in blackholes.into_iter().enumerate() {
            let path = abilities.paths[index % abilities.paths.len()];
            // A database path stays silent past the stuck threshold; a broker path past the send's
            // emergency timeout, so sends time out and are retried.
            let lasting = match path {
                Path::Database => stop_for,
                Path::Broker => rng.u64(3_000..6_000),
            };
            let mut slot = rng.usize(0..relays);
            // A stopped relay must freeze after a send, which a relay cut off from its database or
            // broker cannot make; and while one relay is stopped, the other must reach its database
            // to recover the stopped one's rows. So a blackhole never meets a stop of its relay, and
            // a database blackhole no stop at all.
            let meets = |slot: usize, at: u64| {
                stops
                    .iter()
                    .filter(|&&(from, to, stopped)| {
                        (stopped == slot || path == Path::Database)
                            && at <= to + 500
                            && from <= at + lasting + 500
                    })
                    .map(|&(_, to, _)| to)
                    .max()
            };
            if meets(slot, at).is_some() && meets((slot + 1) % relays, at).is_none() {
                slot = (slot + 1) % relays;
            }
            while let Some(to) = meets(slot, at) {
                at = to + 600;
            }
            plan.push((at, Action::Blackhole(path, slot)));
            plan.push((at + lasting, Action::Forward(path, slot)));
        }
    }
    let step = u64::try_from(STORM_STEP.as_millis()).unwrap_or(u64::MAX);
    let storm = step * STORM_ROUNDS * 2;
    for at in spread(&mut rng, window, profile.rebalance_storms, (100, 400), storm) {
        for round in 0..STORM_ROUNDS {
            plan.push((at + round * 2 * step, Action::Join));
            plan.push((at + round * 2 * step + step, Action::Leave));
        }
    }
    for at in spread(&mut rng, window, profile.broker_pauses, (200, 600), 8_000) {
        plan.push((at, Action::PauseBroker));
        plan.push((at + rng.u64(3_000..8_000), Action::ResumeBroker));
    }
    if restarts {
        for mut at in spread(&mut rng, window, profile.database_restarts, (300, 600), 4_000) {
            let down = rng.u64(1_000..4_000);
            // While a relay is stopped the other must reach the database to recover its rows in
            // time, before the stopped one is continued, so that its late settle meets the fence.
            while let Some(&(_, to, _)) =
                stops.iter().find(|&&(from, to, _)| at <= to + 500 && from <= at + down + 500)
            {
                at = to + 600;
            }
            plan.push((at, Action::StopDatabase));
            plan.push((at + down, Action::StartDatabase));
        }
    }
    // Stable: an undoing never sorts before its fault when both fall on the same millisecond.
    plan.sort_by_key(|&(at, _)| at);
    plan.into_iter().map(|(at, action)| (Duration::from_millis(at), action)).collect()
}

/// The run's child processes; dropping it SIGKILLs and reaps every one still running, also when
/// the run fails or panics.
struct Fleet {
    /// The file of each consumer flavour that runs; the relays read the transactional one's.
    configs: HashMap<Flavour, PathBuf>,
    logs: PathBuf,
    sabotage: Sabotage,
    binaries: Binaries,
    variables: Vec<(&'static str, String)>,
    /// Variables for one role, or one relay slot, over the shared ones: the relays' addresses
    /// through their blackhole proxies, the consumers' broker address with a short heartbeat.
    role_variables: HashMap<(Role, Option<usize>), Variables>,
    relays: Vec<Option<Child>>,
    /// The consumers of each slot, then the storm slot ([`STORM_SLOT`]).
    consumers: Vec<Option<Child>>,
    once_consumers: Vec<Option<Child>>,
    durable_consumers: Vec<Option<Child>>,
    /// Storm consumers told to leave (their standard input closed), reaped when they are gone.
    leaving: Vec<Child>,
    /// The process ids of the consumers SIGKILLed.
    killed_consumers: HashSet<u32>,
    started: usize,
    faults: Faults,
}

impl Fleet {
    fn new(
        configs: HashMap<Flavour, PathBuf>,
        logs: PathBuf,
        options: &Options,
        variables: Vec<(&'static str, String)>,
        relays: usize,
    ) -> Self {
        // The consumers of each slot and the storm slot, for each flavour that runs.
        let slots = |flavour| if configs.contains_key(&flavour) { CONSUMERS + 1 } else { 0 };
        let (once, durable) = (slots(Flavour::Once), slots(Flavour::Durable));
        Self {
            configs,
            logs,
            sabotage: options.sabotage,
            binaries: options.binaries.clone(),
            variables,
            role_variables: HashMap::new(),
            relays: (0..relays).map(|_| None).collect(),
            consumers: (0..=CONSUMERS).map(|_| None).collect(),
            once_consumers: (0..once).map(|_| None).collect(),
            durable_consumers: (0..durable).map(|_| None).collect(),
            leaving: Vec::new(),
            killed_consumers: HashSet::new(),
            started: 0,
            faults: Faults::default(),
        }
    }

    fn slots(&mut self, role: Role) -> &mut Vec<Option<Child>> {
        match role {
            Role::Relay => &mut self.relays,
            Role::Consumer => &mut self.consumers,
            Role::OnceConsumer => &mut self.once_consumers,
            Role::DurableConsumer => &mut self.durable_consumers,
        }
    }

    /// The consumer roles that run in each slot beside the transactional consumer, which the
    /// schedule's consumer faults name: each fault strikes them too.
    fn companions(&self) -> Vec<Role> {
        let mut roles = Vec::new();
        if !self.once_consumers.is_empty() {
            roles.push(Role::OnceConsumer);
        }
        if !self.durable_consumers.is_empty() {
            roles.push(Role::DurableConsumer);
        }
        roles
    }

    fn slot(&mut self, role: Role, slot: usize) -> Result<&mut Option<Child>> {
        self.slots(role)
            .get_mut(slot)
            .ok_or_else(|| plumbing("the fleet", format!("no {} {slot}", role.name())))
    }

    fn start(&mut self, role: Role, slot: usize) -> Result<()> {
        let binary = match role {
            Role::Relay => self.binaries.relay.clone(),
            Role::Consumer | Role::OnceConsumer | Role::DurableConsumer => self.binaries.consumer.clone(),
        };
        let config = self.configs.get(&role.flavour().unwrap_or(Flavour::Transactional));
        let config =
            config.cloned().ok_or_else(|| plumbing("the fleet", format!("no file for {}", role.name())))?;
        self.started += 1;
        let log = self.logs.join(format!("{:03}-{}-{slot}.log", self.started, role.name()));
        let stderr =
            File::create(&log).map_err(|error| plumbing(&format!("creating {}", log.display()), error))?;
        let mut command = Command::new(&binary);
        command.arg("--config").arg(&config).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(stderr);
        command.env_remove(BROKEN_VARIABLE).env_remove(DROP_SENDS_VARIABLE);
        match (self.sabotage, role) {
            (Sabotage::ConsumerWithoutInbox, Role::Consumer) => {
                command.env(BROKEN_VARIABLE, "1");
            }
            (Sabotage::RelayDropsSends, Role::Relay) => {
                command.env(DROP_SENDS_VARIABLE, "1");
            }
            _ => {}
        }
        let own = [(role, None), (role, Some(slot))];
        let own = own.iter().filter_map(|key| self.role_variables.get(key)).flatten();
        for (variable, value) in self.variables.iter().chain(own) {
            command.env(variable, value);
        }
        let child =
            command.spawn().map_err(|error| plumbing(&format!("starting {}", binary.display()), error))?;
        *self.slot(role, slot)? = Some(child);
        Ok(())
    }

    fn kill(&mut self, role: Role, slot: usize) -> Result<()> {
        let Some(mut child) = self.slot(role, slot)?.take() else {
            return Err(plumbing("the fleet", format!("{} {slot} is not running", role.name())));
        };
        if role != Role::Relay {
            self.killed_consumers.insert(child.id());
        }
        child.kill().map_err(|error| plumbing(&format!("SIGKILL {} {slot}", role.name()), error))?;
        child.wait().map_err(|error| plumbing(&format!("reaping {} {slot}", role.name()), error))?;
        match role {
            Role::Relay => self.faults.relay_kills += 1,
            Role::Consumer => self.faults.consumer_kills += 1,
            Role::OnceConsumer | Role::DurableConsumer => {}
        }
        Ok(())
    }

    /// Sends `signal` (`-STOP`, `-CONT`, …) to the process in `role`'s `slot` through the `kill`
    /// command; returns its process id.
    fn signal(&mut self, role: Role, slot: usize, signal: &str) -> Result<u32> {
        let Some(child) = self.slot(role, slot)?.as_ref() else {
            return Err(plumbing("the fleet", format!("{} {slot} is not running", role.name())));
        };
        let pid = child.id();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .map_err(|error| plumbing(&format!("kill {signal}"), error))?;
        if !status.success() {
            return Err(plumbing(&format!("kill {signal} {} {slot}", role.name()), status));
        }
        Ok(pid)
    }

    /// Stops relay `slot` where it holds a claim the broker acknowledged: asks it to freeze itself
    /// after its next send ([`FREEZE_SIGNAL`]) and waits until it has; a relay that sent nothing
    /// meanwhile (its request has expired then) gets a plain SIGSTOP.
    async fn freeze_relay(&mut self, slot: usize) -> Result<()> {
        let pid = self.signal(Role::Relay, slot, FREEZE_SIGNAL)?;
        let deadline = tokio::time::Instant::now() + FREEZE_REQUEST_VALID + Duration::from_millis(500);
        let aimed = loop {
            if process_stopped(pid) {
                break true;
            }
            if tokio::time::Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if !aimed {
            self.signal(Role::Relay, slot, "-STOP")?;
        }
        self.faults.relay_stops += 1;
        self.faults.aimed_relay_stops += u32::from(aimed);
        Ok(())
    }

    /// Stops or continues consumer slot `slot` (its consumer of each flavour).
    fn signal_consumers(&mut self, slot: usize, signal: &str) -> Result<()> {
        self.signal(Role::Consumer, slot, signal)?;
        for role in self.companions() {
            self.signal(role, slot, signal)?;
        }
        Ok(())
    }

    /// Kills consumer slot `slot` (its consumer of each flavour).
    fn kill_consumers(&mut self, slot: usize) -> Result<()> {
        self.kill(Role::Consumer, slot)?;
        for role in self.companions() {
            self.kill(role, slot)?;
        }
        Ok(())
    }

    /// Starts consumer slot `slot` (its consumer of each flavour).
    fn start_consumers(&mut self, slot: usize) -> Result<()> {
        self.start(Role::Consumer, slot)?;
        for role in self.companions() {
            self.start(role, slot)?;
        }
        Ok(())
    }

    /// The storm slot's consumers leave: their standard input is closed, so each shuts down as on
    /// SIGTERM (a Kafka member leaves its group), and they are reaped once gone.
    fn leave(&mut self) -> Result<()> {
        for role in [vec![Role::Consumer], self.companions()].concat() {
            let Some(mut child) = self.slot(role, STORM_SLOT)?.take() else {
                return Err(plumbing("the fleet", format!("the storm's {} is not running", role.name())));
            };
            drop(child.stdin.take());
            self.leaving.push(child);
        }
        self.leaving.retain_mut(|child| !matches!(child.try_wait(), Ok(Some(_))));
        Ok(())
    }

    /// Fails when a process exited that the schedule did not kill, with the end of its log.
    /// (A storm consumer told to leave is no longer in a slot.)
    fn check_alive(&mut self) -> Result<()> {
        for role in [Role::Relay, Role::Consumer, Role::OnceConsumer, Role::DurableConsumer] {
            for slot in 0..self.slots(role).len() {
                if let Some(child) = self.slot(role, slot)?.as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    let tail = self.last_log_lines(role, slot);
                    return Err(plumbing(
                        &format!("{} {slot}", role.name()),
                        format!("exited by itself ({status}); its log ends:\n{tail}"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn last_log_lines(&self, role: Role, slot: usize) -> String {
        let wanted = format!("{}-{slot}.log", role.name());
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.logs)
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default();
        // `NNN-<role>-<slot>.log`: the role after the first dash, so `consumer` is not `once-consumer`.
        logs.retain(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| name.split_once('-'))
                .is_some_and(|(_, rest)| rest == wanted)
        });
        logs.sort();
        let text = logs.last().and_then(|path| std::fs::read_to_string(path).ok()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in self
            .relays
            .iter_mut()
            .chain(self.consumers.iter_mut())
            .chain(self.once_consumers.iter_mut())
            .chain(self.durable_consumers.iter_mut())
            .flatten()
            .chain(self.leaving.iter_mut())
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The relay paths a blackhole can cut on `pair`, and what it cannot, said out loud.
fn blackholable(pair: Pair) -> (&'static [Path], Vec<String>) {
    let mut notes = Vec::new();
    if pair.database == Database::Sqlite {
        notes.push("database path blackholes on sqlite: an embedded database has no network path".to_owned());
    }
    if pair.broker == Broker::Kafka {
        notes.push(
            "broker path blackholes on kafka: clients connect to the address the broker advertises, which \
             one proxy cannot split per relay; the broker pause (the private broker frozen, every \
             connection open and silent) is that fault for every client at once"
                .to_owned(),
        );
    }
    let paths: &'static [Path] = match (pair.database, pair.broker) {
        (Database::Sqlite, Broker::Kafka) => &[],
        (Database::Sqlite, Broker::Rabbit) => &[Path::Broker],
        (_, Broker::Kafka) => &[Path::Database],
        (_, Broker::Rabbit) => &[Path::Database, Path::Broker],
    };
    (paths, notes)
}

/// A blackhole proxy in front of the server `url` names, and `url` with the proxy's address in
/// place of the server's (`scheme://[user[:password]@]host[:port]/…`; a bare `host:port`, as a
/// Kafka bootstrap, too).
async fn proxied_url(url: &str) -> Result<(Blackhole, String)> {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[after_scheme..];
    let authority_end = rest.find(['/', '?']).map_or(url.len(), |at| after_scheme + at);
    let host_start =
        url[after_scheme..authority_end].rfind('@').map_or(after_scheme, |at| after_scheme + at + 1);
    let host_port = &url[host_start..authority_end];
    let has_port = host_port.rsplit_once(':').is_some_and(|(_, port)| !port.contains(']'));
    let target = if has_port {
        host_port.to_owned()
    } else {
        let default = match &url[..after_scheme] {
            "postgres://" | "postgresql://" => 5432,
            "mysql://" | "mariadb://" => 3306,
            "amqp://" => 5672,
            _ => return Err(plumbing("proxying a server", format!("no port in {host_port:?}"))),
        };
        format!("{host_port}:{default}")
    };
    let address = tokio::net::lookup_host(&target)
        .await
        .map_err(|error| plumbing(&format!("resolving {target}"), error))?
        .next()
        .ok_or_else(|| plumbing("proxying a server", format!("{target} resolves to no address")))?;
    let proxy =
        Blackhole::start(address).await.map_err(|error| plumbing("starting a blackhole proxy", error))?;
    let through = format!("{}{}{}", &url[..host_start], proxy.addr(), &url[authority_end..]);
    Ok((proxy, through))
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`, after the command name,
/// which may itself hold spaces and parentheses).
fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('T')))
        .unwrap_or(false)
}

impl Servers {
    /// The proxy of relay `slot`'s `path`.
    fn proxy(&self, path: Path, slot: usize) -> Result<&Blackhole> {
        let paths = self.paths.get(slot);
        let proxy = match path {
            Path::Database => paths.and_then(|paths| paths.database.as_ref()),
            Path::Broker => paths.and_then(|paths| paths.broker.as_ref()),
        };
        proxy.ok_or_else(|| plumbing("the fleet", format!("relay {slot} has no proxy for {path:?}")))
    }

    async fn apply(&mut self, action: Action, fleet: &mut Fleet) -> Result<()> {
        match action {
            Action::Kill(Role::Consumer, slot) => fleet.kill_consumers(slot),
            Action::Start(Role::Consumer, slot) => fleet.start_consumers(slot),
            Action::Kill(role, slot) => fleet.kill(role, slot),
            Action::Start(role, slot) => fleet.start(role, slot),
            Action::Stop(slot) => fleet.freeze_relay(slot).await,
            Action::Continue(slot) => fleet.signal(Role::Relay, slot, "-CONT").map(drop),
            Action::StopConsumer(slot) => {
                fleet.signal_consumers(slot, "-STOP")?;
                fleet.faults.consumer_stops += 1;
                Ok(())
            }
            Action::ContinueConsumer(slot) => fleet.signal_consumers(slot, "-CONT"),
            Action::Blackhole(path, slot) => {
                self.proxy(path, slot)?.blackhole();
                match path {
                    Path::Database => fleet.faults.database_blackholes += 1,
                    Path::Broker => fleet.faults.broker_blackholes += 1,
                }
                Ok(())
            }
            Action::Forward(path, slot) => {
                self.proxy(path, slot)?.resume();
                Ok(())
            }
            Action::Join => {
                fleet.start_consumers(STORM_SLOT)?;
                fleet.faults.storm_members += 1;
                Ok(())
            }
            Action::Leave => fleet.leave(),
            Action::PauseBroker => {
                match self.kafka.as_mut() {
                    Some(kafka) => kafka.pause()?,
                    None => self.rabbit.stop_app().await?,
                }
                fleet.faults.broker_pauses += 1;
                Ok(())
            }
            Action::ResumeBroker => match self.kafka.as_mut() {
                Some(kafka) => kafka.resume(),
                None => self.rabbit.start_app().await,
            },
            Action::StopDatabase => {
                if let Some(database) = self.database.as_mut() {
                    database.stop_immediately().await?;
                    fleet.faults.database_restarts += 1;
                }
                Ok(())
            }
            Action::StartDatabase => match self.database.as_mut() {
                Some(database) => database.start().await,
                None => Ok(()),
            },
        }
    }
}

/// What the publisher did.
#[derive(Debug, Default)]
struct Published {
    committed: BTreeMap<Uuid, Order>,
    rolled_back: HashSet<Uuid>,
    /// Transactions whose commit answer was lost, with their events.
    in_doubt: Vec<Vec<(Uuid, Order)>>,
    /// Transactions that failed before their commit.
    failed: usize,
    /// The last failure, for the report when every transaction failed.
    last_error: Option<String>,
}

/// One of a run's publishers: its order numbers are those equal to `index` modulo `of`, so no two
/// publishers place the same order.
#[derive(Debug, Clone, Copy)]
struct Lane {
    index: u32,
    of: u32,
}

impl Published {
    /// Adds what another publisher did.
    fn merge(&mut self, other: Published) {
        self.committed.extend(other.committed);
        self.rolled_back.extend(other.rolled_back);
        self.in_doubt.extend(other.in_doubt);
        self.failed += other.failed;
        self.last_error = other.last_error.or(self.last_error.take());
    }

    /// Settles the transactions in doubt by the business table: one whose order rows are
    /// `present` committed (its events join the committed ones), any other rolled back. Returns
    /// how many committed.
    fn resolve_in_doubt(&mut self, present: &HashSet<i64>) -> usize {
        let mut committed_transactions = 0;
        for events in std::mem::take(&mut self.in_doubt) {
            let committed = events.first().is_some_and(|(_, order)| present.contains(&order.order));
            committed_transactions += usize::from(committed);
            for (id, order) in events {
                if committed {
                    self.committed.insert(id, order);
                } else {
                    self.rolled_back.insert(id);
                }
            }
        }
        committed_transactions
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive<S: Store, T: Transport>(
    profile: &Profile,
    options: &Options,
    run: &Run,
    store: &S,
    transport: &T,
    dialect: &S::Dialect,
    fleet: &mut Fleet,
    servers: &mut Servers,
) -> Result<Report> {
    let (names, seed) = (&run.names, options.seed);
    transport.prepare(names).await?;
    store.create_business_tables(dialect, names).await?;
    S::create_deliveries_table(dialect, &run.deliveries).await?;
    for (flavour_names, deliveries) in run.once.iter().chain(&run.durable) {
        transport.prepare(flavour_names).await?;
        S::create_effects_table(dialect, &flavour_names.effects).await?;
        S::create_deliveries_table(dialect, deliveries).await?;
    }

    // The first relay creates the oncebox tables; the others start once they exist.
    fleet.start(Role::Relay, 0)?;
    oncebox_testkit::eventually("the first relay to create the oncebox tables", START_UP, || async {
        Ok(S::outbox_statuses(dialect, names).await.is_ok())
    })
    .await
    .map_err(|failed| plumbing("starting the relays", failed.message().unwrap_or_default()))?;
    fleet.check_alive()?;
    for slot in 1..fleet.relays.len() {
        fleet.start(Role::Relay, slot)?;
    }
    for slot in 0..CONSUMERS {
        fleet.start_consumers(slot)?;
    }
    for flavour in run.flavours() {
        transport.await_listener(run.of(flavour).0).await?;
    }
    fleet.check_alive()?;

    // The publishers, in this process, on their own pool; each takes its share of the rate.
    let publishing = store.open().await?.with_tables(&names.outbox_tables()?);
    let publisher: crate::store::StorePublisher<S> =
        Publisher::new(Arc::new(publishing.writer()), [EVENT_TYPE.to_owned(), PAID_EVENT_TYPE.to_owned()]);
    let shared = Arc::new((publishing, publisher, names.clone()));
    let lanes = profile.publishers.max(1);
    let rate = (profile.transactions_per_second / lanes).max(1);
    let publisher_tasks: Vec<_> = (0..lanes)
        .map(|lane| {
            let (shared, window) = (Arc::clone(&shared), profile.window);
            tokio::spawn(async move {
                let (publishing, publisher, names) = &*shared;
                publish::<S>(publishing, publisher, names, window, rate, Lane { index: lane, of: lanes })
                    .await
            })
        })
        .collect();

    // The faults, on the publisher's clock.
    let abilities = Abilities {
        relays: fleet.relays.len(),
        restarts: servers.database.is_some(),
        consumer_down: T::CONSUMER_DOWN_AT_LEAST,
        consumer_stopped: T::SILENT_CONSUMER_NOTICED_AFTER + CONSUMER_STOPPED_PAST,
        paths: servers.blackholable,
    };
    let plan = schedule(profile, seed, abilities);
    let begin = tokio::time::Instant::now();
    for (at, action) in plan {
        tokio::time::sleep_until(begin + at).await;
        fleet.check_alive()?;
        servers.apply(action, fleet).await?;
    }
    let mut published = Published::default();
    for task in publisher_tasks {
        published.merge(task.await.map_err(|error| plumbing("a publisher task", error))?);
    }
    let published_at = Instant::now();
    fleet.check_alive()?;
    if published.committed.is_empty() {
        return Err(plumbing(
            "the publisher",
            format!("nothing committed; last failure: {}", published.last_error.unwrap_or_default()),
        ));
    }

    // Commits whose answer was lost: the business table says which happened.
    let in_doubt = published.in_doubt.len();
    let present: HashSet<i64> = S::orders(dialect, names).await?.into_iter().collect();
    let resolved_committed = published.resolve_in_doubt(&present);

    // Recovery: every committed event applied and every outbox row settled, as long as either
    // keeps growing. Events a sabotaged relay dropped never arrive: the ledger must find them lost.
    // Poison events are awaited in the dead-letter destination instead of among the effects.
    let failures = run.failures(profile, seed);
    let is_poison = |id: &Uuid| failures.is_some_and(|failures| failures.is_poison(*id));
    let arrives =
        |id: &Uuid| options.sabotage != Sabotage::RelayDropsSends || !dropped_by_a_broken_relay(*id);
    let awaited: Vec<String> =
        published.committed.keys().filter(|id| arrives(id) && !is_poison(id)).map(Uuid::to_string).collect();
    let poison: Vec<Uuid> = published.committed.keys().filter(|id| is_poison(id)).copied().collect();
    let awaited_poison: Vec<Uuid> = poison.iter().filter(|id| arrives(id)).copied().collect();
    let flavours = run.flavours();
    // What each flavour's dead-letter destination held so far (a RabbitMQ queue is emptied as read).
    let dead_lettered = std::sync::Mutex::new(HashMap::<Flavour, HashSet<Uuid>>::new());
    // When each flavour first had every awaited effect.
    let effects_complete = std::sync::Mutex::new(Vec::<(Flavour, Duration)>::new());
    let recovered = wait_while_progressing(|| async {
        let statuses = S::outbox_statuses(dialect, names).await?;
        let settled: i64 =
            statuses.iter().filter(|(status, _)| status == "PROCESSED").map(|(_, count)| count).sum();
        let mut done = statuses.iter().all(|(status, _)| status == "PROCESSED");
        let mut progress = vec![settled];
        for &flavour in &flavours {
            let (flavour_names, _) = run.of(flavour);
            let effects = S::effects(dialect, flavour_names).await?;
            let applied: HashSet<&str> = effects.iter().map(|(id, _)| id.as_str()).collect();
            let complete = awaited.iter().all(|id| applied.contains(id.as_str()));
            if complete {
                let mut noted =
                    effects_complete.lock().map_err(|error| plumbing("the effects' timings", error))?;
                if noted.iter().all(|(known, _)| *known != flavour) {
                    noted.push((flavour, published_at.elapsed()));
                }
            }
            done &= complete;
            progress.push(i64::try_from(effects.len()).unwrap_or(i64::MAX));
        }
        // Read only once the rest is done: a Kafka dead-letter topic is read from its start. A
        // durable inbox consumer gives poison up in its table (FAILED), not to the broker.
        if done && !awaited_poison.is_empty() {
            for &flavour in &flavours {
                let found = match flavour {
                    Flavour::Durable => failed_in_inbox::<S>(dialect, run.of(flavour).0).await?,
                    Flavour::Transactional | Flavour::Once => {
                        transport.dead_lettered(run.of(flavour).0).await?
                    }
                };
                let mut seen =
                    dead_lettered.lock().map_err(|error| plumbing("the dead-lettered ids", error))?;
                let seen = seen.entry(flavour).or_default();
                seen.extend(found);
                done &= awaited_poison.iter().all(|id| seen.contains(id));
            }
        }
        let dead = dead_lettered.lock().map_or(0, |seen| seen.values().map(HashSet::len).sum::<usize>());
        progress.push(i64::try_from(dead).unwrap_or(i64::MAX));
        Ok((done, progress))
    })
    .await;
    let mut timings = Timings {
        effects_complete: effects_complete.into_inner().unwrap_or_default(),
        recovered: published_at.elapsed(),
        ..Timings::default()
    };
    fleet.check_alive()?;
    let faults = fleet.faults;
    let fleet_relays = fleet.relays.len();
    let report = |ledgers: Vec<(Flavour, Ledger)>, relays, copies, faults| Report {
        pair: run.pair,
        profile: profile.name,
        relaying: profile.relaying,
        seed,
        ledgers,
        relays,
        relay_slots: fleet_relays,
        faults,
        in_doubt: (in_doubt, resolved_committed),
        failed_transactions: published.failed,
        copies,
        committed_by_type: [EVENT_TYPE, PAID_EVENT_TYPE]
            .into_iter()
            .map(|wanted| {
                (wanted, published.committed.values().filter(|order| event_type_of(order) == wanted).count())
            })
            .collect(),
        dropped_by_relays: published.committed.keys().filter(|id| !arrives(id)).count(),
        notes: Vec::new(),
        timings: Timings::default(),
        elapsed: Duration::ZERO,
    };
    if let Err(error) = recovered {
        let dead = dead_lettered.into_inner().unwrap_or_default();
        let ledgers =
            read_ledgers::<S>(dialect, run, &published, &poison, &dead, &fleet.killed_consumers).await?;
        let mut stalled = report(ledgers, RelayStats::read_all(&run.dir)?, 0, faults);
        stalled.timings = timings;
        let lost: Vec<Uuid> = stalled.ledger().lost.iter().take(10).copied().collect();
        // The publishers' dialect: it reads the run's outbox tables, not the default ones.
        let rows = outbox_rows(&shared.0, &lost).await;
        let broker = transport.describe(names, &lost).await;
        return Err(plumbing(
            &format!("chaos {} {} (seed {seed})", profile.name, run.pair.name()),
            format!(
                "{error}\n{}\n{}\noutbox rows of the first lost events: {rows}\nbroker: {broker}",
                stalled.text(),
                stalled.violations()
            ),
        ));
    }

    // Copies of delivered events straight to the broker, as after a lost acknowledgement (none
    // when relays drop events: a copy would deliver a dropped one). Each flavour's consumers must
    // handle every copy: a finished delivery more of its id (the `on_once` consumers note the
    // duplicates their listener reports).
    let mut before = Vec::new();
    for &flavour in &flavours {
        before.push(finished::<S>(dialect, run.of(flavour).1).await?);
    }
    let count = if options.sabotage == Sabotage::RelayDropsSends { 0 } else { profile.copies };
    let copies = copies_of(
        published.committed.iter().filter(|(id, _)| !is_poison(id)),
        &names.destination,
        count,
        event_type_of,
    )?;
    if !copies.is_empty() {
        transport.republish(&copies).await?;
        wait_while_progressing(|| async {
            let mut handled = Vec::new();
            for (&flavour, before) in flavours.iter().zip(&before) {
                let now = finished::<S>(dialect, run.of(flavour).1).await?;
                let more = |copy: &&oncebox::OutboundMessage| {
                    now.get(&copy.id.to_string()) > before.get(&copy.id.to_string())
                };
                handled.push(copies.iter().filter(more).count());
            }
            Ok((handled.iter().all(|&count| count == copies.len()), handled))
        })
        .await?;
        fleet.check_alive()?;
    }
    timings.copies_handled = published_at.elapsed();

    // Duplicates are counted only once nothing is left to deliver: each flavour's queue empty, or
    // its group's lag zero, so no redelivery still on its way is missed; and the durable inbox
    // consumers' stored messages all PROCESSED or FAILED, none still waiting or running.
    let stored = shared.0.stored_inbox_dao();
    wait_while_progressing(|| async {
        let mut backlogs = Vec::new();
        for &flavour in &flavours {
            backlogs.push(transport.backlog(run.of(flavour).0).await?);
        }
        if run.durable.is_some() {
            backlogs.push(stored_unfinished(&*stored).await?);
        }
        Ok((backlogs.iter().all(|&backlog| backlog == 0), backlogs))
    })
    .await
    .map_err(|error| {
        error.context(
            "waiting for every queue to empty (RabbitMQ) or every group's lag to reach zero (Kafka), and \
             every durable inbox message to be PROCESSED or FAILED",
        )
    })?;
    timings.drained = published_at.elapsed();
    fleet.check_alive()?;

    let mut dead = dead_lettered.into_inner().map_err(|error| plumbing("the dead-lettered ids", error))?;
    for &flavour in &flavours {
        dead.entry(flavour).or_default().extend(transport.dead_lettered(run.of(flavour).0).await?);
    }
    let ledgers =
        read_ledgers::<S>(dialect, run, &published, &poison, &dead, &fleet.killed_consumers).await?;
    let mut report = report(ledgers, RelayStats::read_all(&run.dir)?, copies.len(), fleet.faults);
    report.timings = timings;
    Ok(report)
}

/// The durable inbox messages of the run's `store_in` consumers still RECEIVED or PROCESSING, by
/// the inbox's own counts.
async fn stored_unfinished(stored: &dyn oncebox::StoredInboxDao) -> Result<u64> {
    Ok(stored
        .counts()
        .await?
        .iter()
        .filter(|count| {
            count.consumer == DURABLE_INBOX_CONSUMER
                && matches!(count.status, InboxStatus::Received | InboxStatus::Processing)
        })
        .map(|count| count.rows)
        .sum())
}

/// The ids whose durable inbox message the run's `store_in` consumers gave up (FAILED), in the
/// run's tables of `names`.
async fn failed_in_inbox<S: Store>(dialect: &S::Dialect, names: &Names) -> Result<Vec<Uuid>> {
    let rows = S::stored_messages(dialect, names, DURABLE_INBOX_CONSUMER).await?;
    Ok(rows.into_iter().filter(|(_, status)| status == "FAILED").map(|(id, _)| id).collect())
}

/// The logs of the run's `on_once` consumer processes (`NNN-once-consumer-<slot>.log`).
fn once_consumer_logs(dir: &std::path::Path) -> Vec<String> {
    let suffix = format!("{}-", Role::OnceConsumer.name());
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| name.split_once('-'))
                .is_some_and(|(_, rest)| rest.starts_with(&suffix) && rest.ends_with(".log"))
        })
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect()
}

/// The ledger of each consumer flavour of the run. The `on_once` one allows an effect repeated
/// after a consumer was killed in it, or after the inbox reported its claim left in flight
/// ([`Ledger::with_repeats_after_kills`]); the transactional one allows nothing of the kind, nor
/// does the durable inbox one, whose effect commits with the settle of its row: its ledger also
/// accounts for the stored messages ([`Ledger::with_stored_inbox`]), poison counting as given up
/// when its row is FAILED.
async fn read_ledgers<S: Store>(
    dialect: &S::Dialect,
    run: &Run,
    published: &Published,
    poison: &[Uuid],
    dead_lettered: &HashMap<Flavour, HashSet<Uuid>>,
    killed: &HashSet<u32>,
) -> Result<Vec<(Flavour, Ledger)>> {
    let mut ledgers = Vec::new();
    for flavour in run.flavours() {
        let (names, deliveries) = run.of(flavour);
        if flavour == Flavour::Durable {
            let rows = S::stored_messages(dialect, names, DURABLE_INBOX_CONSUMER).await?;
            let failed: HashSet<Uuid> =
                rows.iter().filter(|(_, status)| status == "FAILED").map(|(id, _)| *id).collect();
            let committed: Vec<Uuid> = published.committed.keys().copied().collect();
            let rolled_back: Vec<Uuid> = published.rolled_back.iter().copied().collect();
            let runs = S::deliveries_by_outcome(dialect, deliveries).await?;
            let stored = StoredRows::new(&committed, &rolled_back, poison, &rows).with_deliveries(&runs);
            let ledger = read_ledger::<S>(dialect, names, deliveries, published, poison, &failed)
                .await?
                .with_stored_inbox(stored);
            ledgers.push((flavour, ledger));
            continue;
        }
        let dead = dead_lettered.get(&flavour).cloned().unwrap_or_default();
        let mut ledger = read_ledger::<S>(dialect, names, deliveries, published, poison, &dead).await?;
        if flavour == Flavour::Once {
            // Earlier runs of an effect the inbox may not know about: in a killed process, reported
            // by the inbox as left in flight, or with its commit answer lost.
            let mut explained: HashMap<String, i64> = HashMap::new();
            for (id, pid, count) in S::effect_deliveries_by_process(dialect, deliveries).await? {
                if u32::try_from(pid).is_ok_and(|pid| killed.contains(&pid)) {
                    *explained.entry(id).or_default() += count;
                }
            }
            let logs = once_consumer_logs(&run.dir);
            let reported = logs.iter().flat_map(|text| left_in_flight(text));
            for id in reported.chain(effects_in_doubt(&run.dir)?) {
                *explained.entry(id.to_string()).or_default() += 1;
            }
            ledger = ledger.with_repeats_after_kills(&explained);
        }
        ledgers.push((flavour, ledger));
    }
    Ok(ledgers)
}

/// How the outbox rows of `ids` stand (status, attempts, times, last error), for a run that
/// lost them: a PROCESSED row means a relay saw the broker acknowledge the event.
async fn outbox_rows<D: Dialect>(dialect: &D, ids: &[Uuid]) -> String {
    let outbox = dialect.outbox_dao();
    let mut rows = Vec::new();
    for id in ids {
        rows.push(match outbox.get(*id).await {
            Ok(Some(row)) => format!(
                "{id}: {:?}, {} attempts, created {}, processed {:?}, last error {:?}",
                row.status, row.attempts, row.created_at, row.processed_at, row.last_error
            ),
            Ok(None) => format!("{id}: no row"),
            Err(error) => format!("{id}: unreadable ({error})"),
        });
    }
    rows.join("; ")
}

/// Deliveries whose handler finished (applied or duplicate), by event id.
async fn finished<S: Store>(dialect: &S::Dialect, table: &str) -> Result<HashMap<String, i64>> {
    Ok(S::finished_deliveries(dialect, table).await?.into_iter().collect())
}

/// The ledger of the run as its tables stand.
/// A delivery whose handler failed on purpose counts as a handler failure, not as a delivery
/// (an event whose every delivery failed is delivered, with none beyond the first); `poison` are
/// the committed events planned to fail every run, `dead_lettered` every id found dead-lettered.
async fn read_ledger<S: Store>(
    dialect: &S::Dialect,
    names: &Names,
    deliveries: &str,
    published: &Published,
    poison: &[Uuid],
    dead_lettered: &HashSet<Uuid>,
) -> Result<Ledger> {
    let mut seen: HashMap<Uuid, u64> = HashMap::new();
    let mut failures = 0;
    for (id, outcome, count) in S::deliveries_by_outcome(dialect, deliveries).await? {
        let parsed =
            Uuid::parse_str(&id).map_err(|error| plumbing(&format!("delivered event id {id:?}"), error))?;
        let count = u64::try_from(count).unwrap_or_default();
        let deliveries = seen.entry(parsed).or_default();
        if outcome == FAILED {
            failures += count;
        } else {
            *deliveries += count;
        }
    }
    let effects = S::effects(dialect, names).await?;
    let statuses = S::outbox_statuses(dialect, names).await?;
    Ok(Ledger::new(
        published.committed.keys().copied(),
        published.rolled_back.iter().copied(),
        &seen,
        &effects,
        &statuses,
    )
    .with_handler_failures(failures, poison, dead_lettered, &effects))
}

/// Polls `check` (done, progress) until done; fails once the progress has not changed for
/// [`STALL`]. A failed check (a database still restarting) counts as no progress.
async fn wait_while_progressing<F, Fut, P>(mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(bool, P)>>,
    P: PartialEq + std::fmt::Debug,
{
    let mut last: Option<P> = None;
    let mut since = tokio::time::Instant::now();
    loop {
        match check().await {
            Ok((true, _)) => return Ok(()),
            Ok((false, progress)) => {
                if last.as_ref() != Some(&progress) {
                    last = Some(progress);
                    since = tokio::time::Instant::now();
                }
            }
            Err(error) => eprintln!("chaos: a recovery check failed, retrying: {error}"),
        }
        if since.elapsed() >= STALL {
            return Err(plumbing("the recovery", format!("no progress for {STALL:?} (last seen {last:?})")));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One publisher: business transactions at `rate` per second for `window` (orders of its `lane`); every fifth rolls
/// back, every fourth publishes two events with `publish_all`. A transaction that fails (the
/// database restarting) is counted and the next one tried at its tick; a commit whose answer
/// was lost is kept in doubt for the business table to settle.
async fn publish<S: Store>(
    dialect: &S::Dialect,
    publisher: &crate::store::StorePublisher<S>,
    names: &Names,
    window: Duration,
    rate: u32,
    lane: Lane,
) -> Published {
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = tokio::time::Instant::now() + window;
    let mut published = Published::default();
    let mut transaction: i64 = 0;
    while tokio::time::Instant::now() < end {
        ticker.tick().await;
        let size = if transaction % 4 == 3 { 2 } else { 1 };
        let first = (transaction * i64::from(lane.of) + i64::from(lane.index)) * 10;
        let orders: Vec<Order> =
            (first..first + size).map(|order| Order { order, total_cents: 1_000 + order % 997 }).collect();
        let commit = transaction % 5 != 4;
        let event_type = orders.first().map_or(EVENT_TYPE, event_type_of);
        match S::place(dialect, publisher, names, event_type, &orders, commit).await {
            Placed::Committed(ids) => published.committed.extend(ids.into_iter().zip(orders)),
            Placed::RolledBack(ids) => published.rolled_back.extend(ids),
            Placed::Failed(ids, error) => {
                published.rolled_back.extend(ids);
                published.failed += 1;
                published.last_error = Some(error.to_string());
            }
            Placed::InDoubt(ids, error) => {
                published.in_doubt.push(ids.into_iter().zip(orders).collect());
                published.last_error = Some(error.to_string());
            }
        }
        transaction += 1;
    }
    published
}

/// The seed of a run: `ONCEBOX_CHAOS_SEED`, or a fresh one.
pub fn seed_from_env() -> Result<u64> {
    match std::env::var("ONCEBOX_CHAOS_SEED") {
        Ok(text) if !text.trim().is_empty() => text.trim().parse().map_err(|error| {
            oncebox::Error::new(oncebox::ErrorKind::Config, format!("ONCEBOX_CHAOS_SEED={text}: {error}"))
        }),
        _ => Ok(fastrand::u64(..)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(plan: &[(Duration, Action)], wanted: fn(&Action) -> bool) -> usize {
        plan.iter().filter(|(_, action)| wanted(action)).count()
    }

    /// What a pair with every fault allows, with `relays` relays and consumers down at least `down`.
    fn abilities(relays: usize, down: Duration) -> Abilities {
        Abilities {
            relays,
            restarts: true,
            consumer_down: down,
            consumer_stopped: Duration::from_secs(8),
            paths: &[Path::Database, Path::Broker],
        }
    }

    #[test]
    fn a_commit_in_doubt_counts_as_the_business_table_says() {
        let order = |order| Order { order, total_cents: 1_000 };
        let (kept, kept_too, lost) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let mut published = Published {
            in_doubt: vec![vec![(kept, order(10)), (kept_too, order(11))], vec![(lost, order(20))]],
            ..Published::default()
        };
        // The rows of order 10 are in the business table (the commit happened); order 20's are not.
        let committed = published.resolve_in_doubt(&HashSet::from([10, 11]));
        assert_eq!(committed, 1);
        assert!(published.in_doubt.is_empty());
        assert_eq!(
            published.committed.keys().copied().collect::<HashSet<_>>(),
            HashSet::from([kept, kept_too])
        );
        assert_eq!(published.rolled_back, HashSet::from([lost]));
    }

    #[test]
    fn a_schedule_has_exactly_the_profiles_faults_and_repeats_from_its_seed() {
        for profile in [SMOKE, QUICK, FULL] {
            for relays in [1, 2] {
                let plan = schedule(&profile, 42, abilities(relays, Duration::ZERO));
                assert_eq!(
                    plan,
                    schedule(&profile, 42, abilities(relays, Duration::ZERO)),
                    "{}: same seed, same plan",
                    profile.name
                );
                let kills = count(&plan, |action| matches!(action, Action::Kill(Role::Relay, _)));
                assert_eq!(kills as u64, profile.relay_kills, "{}", profile.name);
                let stops = count(&plan, |action| matches!(action, Action::Stop(_)));
                assert_eq!(stops as u64, profile.relay_stops, "{}", profile.name);
                let pauses = count(&plan, |action| matches!(action, Action::PauseBroker));
                assert_eq!(pauses as u64, profile.broker_pauses, "{}", profile.name);
                let restarts = count(&plan, |action| matches!(action, Action::StopDatabase));
                assert_eq!(restarts as u64, profile.database_restarts, "{}", profile.name);
                let stops = count(&plan, |action| matches!(action, Action::StopConsumer(_)));
                assert_eq!(stops as u64, profile.consumer_stops, "{}", profile.name);
                let holes = count(&plan, |action| matches!(action, Action::Blackhole(..)));
                assert_eq!(holes as u64, profile.path_blackholes, "{}", profile.name);
                let database = count(&plan, |action| matches!(action, Action::Blackhole(Path::Database, _)));
                assert_eq!(
                    database as u64,
                    profile.path_blackholes.div_ceil(2),
                    "{}: alternating",
                    profile.name
                );
                let joins = count(&plan, |action| matches!(action, Action::Join));
                assert_eq!(joins as u64, profile.rebalance_storms * STORM_ROUNDS, "{}", profile.name);
                let forwards = count(&plan, |action| matches!(action, Action::Forward(..)));
                assert_eq!(forwards, holes, "{}: every blackhole ends", profile.name);
            }
        }
    }

    #[test]
    fn a_killed_consumer_stays_down_as_long_as_its_transport_needs_and_is_not_killed_again_meanwhile() {
        let down = Duration::from_secs(8);
        for profile in [SMOKE, QUICK, FULL] {
            for seed in 0..200 {
                let mut killed_at: Vec<Option<Duration>> = vec![None; CONSUMERS];
                let mut kills = 0;
                let mut stopped: Vec<bool> = vec![false; CONSUMERS];
                for (at, action) in schedule(&profile, seed, abilities(2, down)) {
                    match action {
                        Action::StopConsumer(slot) => {
                            assert!(
                                killed_at[slot].is_none(),
                                "{} seed {seed}: stop of a dead consumer",
                                profile.name
                            );
                            stopped[slot] = true;
                        }
                        Action::ContinueConsumer(slot) => stopped[slot] = false,
                        Action::Kill(Role::Consumer, slot) => {
                            assert!(
                                !stopped[slot],
                                "{} seed {seed}: kill of a stopped consumer",
                                profile.name
                            );
                            assert!(killed_at[slot].is_none(), "{} seed {seed}: killed twice", profile.name);
                            killed_at[slot] = Some(at);
                            kills += 1;
                        }
                        Action::Start(Role::Consumer, slot) => {
                            let since = killed_at[slot].take().map(|killed| at - killed);
                            assert!(
                                since >= Some(down),
                                "{} seed {seed}: back after {since:?}",
                                profile.name
                            );
                        }
                        _ => {}
                    }
                }
                assert_eq!(kills, profile.consumer_kills, "{}", profile.name);
                assert!(
                    killed_at.iter().all(Option::is_none),
                    "{} seed {seed}: never restarted",
                    profile.name
                );
            }
        }
    }

    #[test]
    fn a_relay_is_never_killed_while_it_is_stopped_or_dead_nor_stopped_while_a_path_it_needs_is_cut() {
        for (profile, seed) in
            [SMOKE, QUICK, FULL].into_iter().flat_map(|profile| (0..500).map(move |seed| (profile, seed)))
        {
            for relays in [1, 2] {
                let plan = schedule(&profile, seed, abilities(relays, Duration::ZERO));
                let mut stopped = vec![false; relays];
                let mut running = vec![true; relays];
                let mut cut: Vec<(Path, usize)> = Vec::new();
                for (at, action) in plan {
                    match action {
                        Action::Stop(slot) => {
                            assert!(running[slot], "seed {seed}: stop of a dead relay at {at:?}");
                            let needed = |&(path, cut_slot): &(Path, usize)| {
                                path == Path::Database || cut_slot == slot
                            };
                            assert!(
                                !cut.iter().any(needed),
                                "seed {seed}: stop of relay {slot} while {cut:?} cut at {at:?}"
                            );
                            stopped[slot] = true;
                        }
                        Action::Continue(slot) => stopped[slot] = false,
                        Action::StopDatabase => {
                            assert!(
                                !stopped.contains(&true),
                                "seed {seed}: database restart while a relay is stopped at {at:?}"
                            );
                        }
                        Action::Blackhole(path, slot) => {
                            let meets = |stopped_slot: usize| path == Path::Database || stopped_slot == slot;
                            let any_stopped =
                                stopped.iter().enumerate().any(|(index, &is)| is && meets(index));
                            assert!(
                                !any_stopped,
                                "seed {seed}: {path:?} of relay {slot} cut while a relay is stopped at {at:?}"
                            );
                            cut.push((path, slot));
                        }
                        Action::Forward(path, slot) => cut.retain(|&held| held != (path, slot)),
                        Action::Kill(Role::Relay, slot) => {
                            assert!(!stopped[slot], "seed {seed}: kill of a stopped relay at {at:?}");
                            assert!(running[slot], "seed {seed}: kill of a dead relay at {at:?}");
                            running[slot] = false;
                        }
                        Action::Start(Role::Relay, slot) => running[slot] = true,
                        _ => {}
                    }
                }
            }
        }
    }

    #[test]
    fn quick_claims_ahead_and_smoke_and_full_do_not() {
        assert!(QUICK.relaying.claims_ahead(), "quick runs with claim-ahead on");
        assert!(!SMOKE.relaying.claims_ahead() && !FULL.relaying.claims_ahead());
        // The boundary is strict, as in the engine: twice (1 s + 1 s of grace) is not enough.
        let at_bound =
            Relaying { emergency_timeout: Duration::from_secs(1), stuck_after: Duration::from_secs(4) };
        assert!(!at_bound.claims_ahead());
        for profile in [SMOKE, QUICK, FULL] {
            assert!(profile.relaying.stop_for() > profile.relaying.stuck_after, "{}", profile.name);
        }
    }

    #[test]
    fn pairs_parse_from_their_names_and_unknown_ones_are_named() {
        for pair in Pair::all() {
            assert_eq!(Pair::parse(&pair.name()).ok(), Some(pair));
        }
        let error = Pair::parse("oracle-kafka").err().map(|error| error.to_string()).unwrap_or_default();
        assert!(error.contains("oracle-kafka") && error.contains("postgres-rabbit"), "{error}");
    }
}
