//! The chaos ledger: relays and consumers as real OS processes, SIGKILLed, SIGSTOPped and restarted
//! while a publisher commits and rolls back business transactions, then an accounting that must
//! balance (docs/reliability.md).
//!
//! Per case: two `chaos_relay` processes (PostgreSQL + `RabbitSender`) and two `chaos_consumer`
//! processes (the RabbitMQ listener, effects through the inbox) start from one config file; a
//! publisher task in this process commits orders with their events at a steady rate (every fifth
//! transaction rolls back, every fourth publishes two events); faults drawn from a seed kill and
//! restart relays and consumers and stop a relay for longer than `max-batch-processing-time`.
//! After the faults, once every committed event has its effect and every outbox row is settled,
//! copies of delivered events are re-published straight to the exchange, then the ledger is read.
//!
//! * `chaos::quick` passes only with nothing lost, no double effect, no rolled-back event delivered
//!   and no outbox row left unsettled.
//! * `chaos::broken_consumer_is_caught` runs the consumers with `ONCEBOX_CHAOS_BROKEN=1` (effects
//!   without the inbox) and passes only when the ledger reports double effects.
//!
//! The seed is printed at the start; `ONCEBOX_CHAOS_SEED=<seed>` replays the same fault schedule.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncebox::postgres::{PgDialect, PgWriter};
use oncebox::{Dialect, Publisher};
use oncebox_integration_tests::chaos::{BROKEN_VARIABLE, RelayStats, create_deliveries_table};
use oncebox_integration_tests::{
    EVENT_TYPE, Ledger, Names, Order, PgStore, RabbitTransport, Store, Transport, copies_of, fresh_name,
};
use oncebox_testkit::case;
use oncebox_testkit::eventually;
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail, server_missing};
use sqlx::AssertSqlSafe;
use uuid::Uuid;

const CONSUMER: &str = "effects";
/// `stuck-recovery.max-batch-processing-time` of the run.
const STUCK_AFTER: Duration = Duration::from_secs(3);
/// How long a stopped relay stays stopped: past the stuck threshold and the next recovery run.
const STOP_FOR: Duration = Duration::from_secs(5);
/// The bound on waiting for every committed event to have its effect after the faults.
const RECOVERY: Duration = Duration::from_secs(90);
/// The bound on waiting for start-up steps (tables created, queue declared).
const START_UP: Duration = Duration::from_secs(60);
/// Delivered events re-published straight to the exchange after the recovery.
const COPIES: usize = 20;
/// Relay and consumer processes of each kind.
const PROCESSES: usize = 2;

/// The size of a run and its faults.
#[derive(Debug, Clone, Copy)]
struct Profile {
    name: &'static str,
    /// How long the publisher commits; the faults fall inside this window.
    window: Duration,
    transactions_per_second: u32,
    relay_kills: u64,
    consumer_kills: u64,
    relay_stops: u64,
    /// Consumers without the inbox check.
    broken: bool,
}

const QUICK: Profile = Profile {
    name: "chaos::quick",
    window: Duration::from_secs(40),
    transactions_per_second: 80,
    relay_kills: 4,
    consumer_kills: 2,
    relay_stops: 2,
    broken: false,
};

const BROKEN: Profile = Profile {
    name: "chaos::broken_consumer_is_caught",
    window: Duration::from_secs(15),
    transactions_per_second: 80,
    relay_kills: 3,
    consumer_kills: 1,
    relay_stops: 1,
    broken: true,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Relay,
    Consumer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Relay => "relay",
            Role::Consumer => "consumer",
        }
    }
}

/// One scheduled fault or restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Kill(Role, usize),
    Start(Role, usize),
    Stop(usize),
    Continue(usize),
}

/// The fault schedule of `profile`, drawn from `seed`: offsets from the publisher's start.
///
/// Each kind of fault gets its own equal segments of the window, one fault per segment, so counts
/// are exact and a slot is never killed twice before its restart; a relay kill that would meet
/// a stop of its slot takes the other relay.
fn schedule(profile: &Profile, seed: u64) -> Vec<(Duration, Action)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let window = u64::try_from(profile.window.as_millis()).unwrap_or(u64::MAX);
    let stop_for = u64::try_from(STOP_FOR.as_millis()).unwrap_or(u64::MAX);
    let mut plan: Vec<(u64, Action)> = Vec::new();
    let mut stops: Vec<(u64, u64, usize)> = Vec::new();
    let segment = window / profile.relay_stops.max(1);
    for stop in 0..profile.relay_stops {
        let latest = segment.saturating_sub(stop_for + 1_000).max(1_001);
        let at = stop * segment + rng.u64(1_000..=latest);
        let slot = rng.usize(0..PROCESSES);
        stops.push((at, at + stop_for, slot));
        plan.push((at, Action::Stop(slot)));
        plan.push((at + stop_for, Action::Continue(slot)));
    }
    let segment = window / profile.relay_kills.max(1);
    for kill in 0..profile.relay_kills {
        let at = kill * segment + rng.u64(segment / 10..segment / 2);
        let back = at + rng.u64(200..1_500);
        let mut slot = rng.usize(0..PROCESSES);
        if stops.iter().any(|&(from, to, stopped)| stopped == slot && at <= to + 500 && from <= back) {
            slot = (slot + 1) % PROCESSES;
        }
        plan.push((at, Action::Kill(Role::Relay, slot)));
        plan.push((back, Action::Start(Role::Relay, slot)));
    }
    let segment = window / profile.consumer_kills.max(1);
    for kill in 0..profile.consumer_kills {
        let at = kill * segment + rng.u64(segment / 5..segment / 2);
        let back = at + rng.u64(300..2_000);
        let slot = rng.usize(0..PROCESSES);
        plan.push((at, Action::Kill(Role::Consumer, slot)));
        plan.push((back, Action::Start(Role::Consumer, slot)));
    }
    plan.sort_by_key(|&(at, _)| at);
    plan.into_iter().map(|(at, action)| (Duration::from_millis(at), action)).collect()
}

/// The seed of the run: `ONCEBOX_CHAOS_SEED`, or a fresh one.
fn seed() -> Result<u64, Failed> {
    match std::env::var("ONCEBOX_CHAOS_SEED") {
        Ok(text) if !text.is_empty() => {
            text.trim().parse().map_err(|error| fail(format!("ONCEBOX_CHAOS_SEED={text}: {error}")))
        }
        _ => Ok(fastrand::u64(..)),
    }
}

/// The run's child processes; dropping it SIGKILLs and reaps every one still running, also when
/// the case fails or panics.
struct Fleet {
    config: PathBuf,
    logs: PathBuf,
    broken: bool,
    relays: Vec<Option<Child>>,
    consumers: Vec<Option<Child>>,
    stopped: Vec<bool>,
    started: usize,
    kills: HashMap<&'static str, u32>,
    stops: u32,
}

impl Fleet {
    fn new(config: PathBuf, logs: PathBuf, broken: bool) -> Self {
        Self {
            config,
            logs,
            broken,
            relays: (0..PROCESSES).map(|_| None).collect(),
            consumers: (0..PROCESSES).map(|_| None).collect(),
            stopped: vec![false; PROCESSES],
            started: 0,
            kills: HashMap::new(),
            stops: 0,
        }
    }

    fn slot(&mut self, role: Role, slot: usize) -> &mut Option<Child> {
        match role {
            Role::Relay => &mut self.relays[slot],
            Role::Consumer => &mut self.consumers[slot],
        }
    }

    fn start(&mut self, role: Role, slot: usize) -> TestResult {
        let binary = match role {
            Role::Relay => env!("CARGO_BIN_EXE_chaos_relay"),
            Role::Consumer => env!("CARGO_BIN_EXE_chaos_consumer"),
        };
        self.started += 1;
        let log = self.logs.join(format!("{:03}-{}-{slot}.log", self.started, role.name()));
        let stderr =
            File::create(&log).map_err(|error| fail(format!("creating {}: {error}", log.display())))?;
        let mut command = Command::new(binary);
        command.arg("--config").arg(&self.config).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(stderr);
        command.env_remove(BROKEN_VARIABLE);
        if self.broken && role == Role::Consumer {
            command.env(BROKEN_VARIABLE, "1");
        }
        let child = command.spawn().map_err(|error| fail(format!("starting {binary}: {error}")))?;
        *self.slot(role, slot) = Some(child);
        if role == Role::Relay {
            self.stopped[slot] = false;
        }
        Ok(())
    }

    fn kill(&mut self, role: Role, slot: usize) -> TestResult {
        let Some(mut child) = self.slot(role, slot).take() else {
            return Err(fail(format!("{} {slot} is not running", role.name())));
        };
        child.kill().map_err(|error| fail(format!("SIGKILL {} {slot}: {error}", role.name())))?;
        child.wait().map_err(|error| fail(format!("reaping {} {slot}: {error}", role.name())))?;
        *self.kills.entry(role.name()).or_default() += 1;
        Ok(())
    }

    /// Sends `-STOP` or `-CONT` to relay `slot` through the `kill` command.
    fn signal_relay(&mut self, slot: usize, signal: &str) -> TestResult {
        let Some(child) = self.relays[slot].as_ref() else {
            return Err(fail(format!("relay {slot} is not running")));
        };
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .map_err(|error| fail(format!("kill {signal}: {error}")))?;
        if !status.success() {
            return Err(fail(format!("kill {signal} relay {slot}: {status}")));
        }
        self.stopped[slot] = signal == "-STOP";
        if self.stopped[slot] {
            self.stops += 1;
        }
        Ok(())
    }

    fn apply(&mut self, action: Action) -> TestResult {
        match action {
            Action::Kill(role, slot) => self.kill(role, slot),
            Action::Start(role, slot) => self.start(role, slot),
            Action::Stop(slot) => self.signal_relay(slot, "-STOP"),
            Action::Continue(slot) => self.signal_relay(slot, "-CONT"),
        }
    }

    /// Fails when a process exited that the schedule did not kill, with the end of its log.
    fn check_alive(&mut self) -> TestResult {
        for role in [Role::Relay, Role::Consumer] {
            for slot in 0..PROCESSES {
                if let Some(child) = self.slot(role, slot).as_mut()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    let tail = self.last_log_lines(role, slot);
                    return Err(fail(format!(
                        "{} {slot} exited by itself ({status}); its log ends:\n{tail}",
                        role.name()
                    )));
                }
            }
        }
        Ok(())
    }

    fn last_log_lines(&self, role: Role, slot: usize) -> String {
        let suffix = format!("-{}-{slot}.log", role.name());
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.logs)
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default();
        logs.retain(|path| path.to_string_lossy().ends_with(&suffix));
        logs.sort();
        let text = logs.last().and_then(|path| std::fs::read_to_string(path).ok()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in self.relays.iter_mut().chain(self.consumers.iter_mut()).flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Everything one run creates, fresh per run.
struct Run {
    names: Names,
    deliveries: String,
    dir: PathBuf,
}

impl Run {
    fn config_text(&self) -> String {
        format!(
            "oncebox:
  tables:
    prefix: {prefix}
  outbox:
    sender: {{ emergency-timeout: 1s }}
    events:
      {EVENT_TYPE}:
        topic: {exchange}
        batch-size: 50
        max-retries: 1000
        backoff: {{ delay: 100ms, multiplier: 2, max-delay: 1s }}
        polling: {{ min-fixed-delay: 20ms, max-fixed-delay: 200ms }}
    stuck-recovery:
      max-batch-processing-time: {stuck}s
      max-recoveries: 10
      polling: {{ initial-delay: 0s, min-fixed-delay: 500ms, max-fixed-delay: 1s }}
  inbox: {{}}
chaos:
  event-type: {EVENT_TYPE}
  queue: {queue}
  consumer: {CONSUMER}
  effects-table: {effects}
  deliveries-table: {deliveries}
  stats-dir: {dir}
  exit-on-stdin-eof: true
",
            prefix = self.names.prefix,
            exchange = self.names.destination,
            stuck = STUCK_AFTER.as_secs(),
            queue = self.names.consumer,
            effects = self.names.effects,
            deliveries = self.deliveries,
            dir = self.dir.display(),
        )
    }
}

/// Fresh names of one run: a table prefix `c_<random>_` and its own exchange and queue.
fn fresh_names() -> Names {
    let prefix = format!("{}_", fresh_name("c"));
    Names {
        orders: format!("{prefix}orders"),
        effects: format!("{prefix}effects"),
        destination: fresh_name("oncebox_chaos"),
        consumer: fresh_name("oncebox_chaos_effects"),
        prefix,
    }
}

/// A case whose server is not configured: skipped with a note on stderr, a failure under `CI=true`.
fn skipped(case: &str, variable: &str) -> TestResult {
    if server_missing(case, variable) == ExitCode::SUCCESS {
        Ok(())
    } else {
        Err(fail(format!("{case}: {variable} is not set, and CI=true requires it")))
    }
}

async fn quick(_: Arc<()>) -> TestResult {
    scenario(QUICK).await
}

async fn broken_consumer_is_caught(_: Arc<()>) -> TestResult {
    scenario(BROKEN).await
}

/// Sets up, runs `profile`, then kills the processes and removes tables, queue and files, also
/// when the run failed.
async fn scenario(profile: Profile) -> TestResult {
    let names = fresh_names();
    let Some(store) = PgStore::from_env(&names) else {
        return skipped(profile.name, "ONCEBOX_PG_URL");
    };
    let Some(transport) = RabbitTransport::from_env() else {
        return skipped(profile.name, "ONCEBOX_AMQP_URL");
    };
    let seed = seed()?;
    eprintln!("{}: seed {seed} (replay with ONCEBOX_CHAOS_SEED={seed})", profile.name);
    let run = Run {
        deliveries: format!("{}deliveries", names.prefix),
        dir: std::env::temp_dir().join(fresh_name("oncebox_chaos")),
        names,
    };
    std::fs::create_dir_all(&run.dir).map_err(fail)?;
    let config = run.dir.join("chaos.yaml");
    std::fs::write(&config, run.config_text()).map_err(fail)?;
    let mut fleet = Fleet::new(config, run.dir.clone(), profile.broken);
    let dialect = store.open().await.map_err(fail)?;
    let started = Instant::now();

    let result = drive(&profile, seed, &run, &store, &transport, &dialect, &mut fleet).await;

    let keep_logs = result.is_err();
    drop(fleet);
    let mut teardown = vec![store.dispose(&dialect, &run.names).await.map_err(fail)];
    let drop_deliveries = format!("DROP TABLE IF EXISTS {}", run.deliveries);
    teardown.push(
        sqlx::raw_sql(AssertSqlSafe(drop_deliveries)).execute(dialect.pool()).await.map(|_| ()).map_err(fail),
    );
    teardown.push(transport.dispose(&run.names).await.map_err(fail));
    if keep_logs {
        eprintln!("{}: process logs kept in {}", profile.name, run.dir.display());
    } else {
        teardown.push(std::fs::remove_dir_all(&run.dir).map_err(fail));
    }
    eprintln!("{}: {:.1?} (seed {seed})", profile.name, started.elapsed());
    result?;
    teardown.into_iter().collect()
}

async fn drive(
    profile: &Profile,
    seed: u64,
    run: &Run,
    store: &PgStore,
    transport: &RabbitTransport,
    dialect: &PgDialect,
    fleet: &mut Fleet,
) -> TestResult {
    let names = &run.names;
    store.create_business_tables(dialect, names).await.map_err(fail)?;
    create_deliveries_table(dialect.pool(), &run.deliveries).await.map_err(fail)?;

    // The first relay creates the oncebox tables; the others start once they exist.
    fleet.start(Role::Relay, 0)?;
    let tables = names.outbox_tables().map_err(fail)?;
    let inbox_table = tables.consumed().to_owned();
    eventually("the first relay created the oncebox tables", START_UP, || async {
        let found: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .bind(&inbox_table)
            .fetch_one(dialect.pool())
            .await
            .map_err(fail)?;
        Ok(found.is_some())
    })
    .await?;
    fleet.check_alive()?;
    for slot in 1..PROCESSES {
        fleet.start(Role::Relay, slot)?;
    }
    for slot in 0..PROCESSES {
        fleet.start(Role::Consumer, slot)?;
    }
    transport.await_queue(&names.consumer).await.map_err(fail)?;
    fleet.check_alive()?;

    // The publisher, in this process, on its own pool.
    let mut publishing = store.open().await.map_err(fail)?;
    publishing.use_tables(&tables);
    let publisher = Publisher::new(Arc::new(publishing.writer()), [EVENT_TYPE.to_owned()]);
    let orders = names.orders.clone();
    let (window, rate) = (profile.window, profile.transactions_per_second);
    let publisher_task =
        tokio::spawn(async move { publish(publishing.pool(), &publisher, &orders, window, rate).await });

    // The faults, on the publisher's clock.
    let plan = schedule(profile, seed);
    let begin = tokio::time::Instant::now();
    for (at, action) in &plan {
        tokio::time::sleep_until(begin + *at).await;
        fleet.check_alive()?;
        fleet.apply(*action)?;
    }
    let (committed, rolled_back) = publisher_task.await.map_err(fail)??;
    fleet.check_alive()?;
    eprintln!(
        "{}: faults done: {} relay kills, {} consumer kills, {} relay stops of {STOP_FOR:?}; {} committed, {} rolled back",
        profile.name,
        fleet.kills.get("relay").copied().unwrap_or_default(),
        fleet.kills.get("consumer").copied().unwrap_or_default(),
        fleet.stops,
        committed.len(),
        rolled_back.len(),
    );

    // Recovery: every committed event applied and every outbox row settled.
    let waited =
        eventually("every committed event applied and every outbox row PROCESSED", RECOVERY, || async {
            let effects = PgStore::effects(dialect, names).await.map_err(fail)?;
            let applied: HashSet<&str> = effects.iter().map(|(id, _)| id.as_str()).collect();
            let statuses = PgStore::outbox_statuses(dialect, names).await.map_err(fail)?;
            let settled = statuses.iter().all(|(status, _)| status == "PROCESSED");
            Ok(settled && committed.keys().all(|id| applied.contains(id.to_string().as_str())))
        })
        .await;
    fleet.check_alive()?;
    if let Err(error) = waited {
        let ledger = RunLedger::read(dialect, run, &committed, &rolled_back).await?;
        eprintln!("{}: seed {seed}\n{}", profile.name, ledger.table());
        return Err(fail(format!(
            "{} (seed {seed}): {}; {}",
            profile.name,
            error.message().unwrap_or_default(),
            ledger.accounts.violations()
        )));
    }

    // Copies of delivered events straight to the exchange, as after a lost acknowledgement.
    let before = finished_deliveries(dialect, &run.deliveries).await?;
    let copies = copies_of(&committed, &names.destination, COPIES).map_err(fail)?;
    transport.republish(&copies).await.map_err(fail)?;
    eventually("every re-published copy handled", RECOVERY, || async {
        let now = finished_deliveries(dialect, &run.deliveries).await?;
        Ok(copies.iter().all(|copy| now.get(&copy.id.to_string()) > before.get(&copy.id.to_string())))
    })
    .await?;
    fleet.check_alive()?;

    let ledger = RunLedger::read(dialect, run, &committed, &rolled_back).await?;
    eprintln!("{}: seed {seed}, copies re-published {COPIES}\n{}", profile.name, ledger.table());
    if profile.broken {
        if ledger.accounts.double_effects.is_empty() {
            return Err(fail(format!(
                "{} (seed {seed}): the consumers ran without the inbox, yet the ledger shows no double effect",
                profile.name
            )));
        }
        return Ok(());
    }
    if ledger.accounts.holds() {
        Ok(())
    } else {
        Err(fail(format!("{} (seed {seed}): {}", profile.name, ledger.accounts.violations())))
    }
}

/// Deliveries whose handler finished (applied or duplicate), by event id.
async fn finished_deliveries(dialect: &PgDialect, table: &str) -> Result<HashMap<String, i64>, Failed> {
    let sql = format!("SELECT event_id, COUNT(*) FROM {table} WHERE outcome IS NOT NULL GROUP BY event_id");
    let rows: Vec<(String, i64)> =
        sqlx::query_as(AssertSqlSafe(sql)).fetch_all(dialect.pool()).await.map_err(fail)?;
    Ok(rows.into_iter().collect())
}

/// The publisher: business transactions at `rate` per second for `window`; every fifth rolls back,
/// every fourth publishes two events with `publish_all`. Returns the committed events and the
/// rolled-back ids.
async fn publish(
    pool: &sqlx::PgPool,
    publisher: &Publisher<Arc<PgWriter>>,
    orders_table: &str,
    window: Duration,
    rate: u32,
) -> Result<(BTreeMap<Uuid, Order>, HashSet<Uuid>), Failed> {
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = tokio::time::Instant::now() + window;
    let insert = format!("INSERT INTO {orders_table} (id, total_cents) VALUES ($1, $2)");
    let (mut committed, mut rolled_back) = (BTreeMap::new(), HashSet::new());
    let mut transaction: i64 = 0;
    while tokio::time::Instant::now() < end {
        ticker.tick().await;
        let size = if transaction % 4 == 3 { 2 } else { 1 };
        let orders: Vec<Order> = (transaction * 10..transaction * 10 + size)
            .map(|order| Order { order, total_cents: 1_000 + order % 997 })
            .collect();
        let commit = transaction % 5 != 4;
        let mut tx = pool.begin().await.map_err(fail)?;
        for order in &orders {
            sqlx::query(AssertSqlSafe(insert.clone()))
                .bind(order.order)
                .bind(order.total_cents)
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
        }
        let ids = match orders.as_slice() {
            [order] => vec![publisher.publish(&mut tx, EVENT_TYPE, order).await.map_err(fail)?],
            _ => publisher.publish_all(&mut tx, EVENT_TYPE, &orders).await.map_err(fail)?,
        };
        if commit {
            tx.commit().await.map_err(fail)?;
            committed.extend(ids.into_iter().zip(orders));
        } else {
            tx.rollback().await.map_err(fail)?;
            rolled_back.extend(ids);
        }
        transaction += 1;
    }
    Ok((committed, rolled_back))
}

/// The accounting of one run: the shared [`Ledger`] read from the run's tables, and the relays'
/// counters from their stats files.
struct RunLedger {
    accounts: Ledger,
    relays: Vec<(String, RelayStats)>,
}

impl RunLedger {
    async fn read(
        dialect: &PgDialect,
        run: &Run,
        committed: &BTreeMap<Uuid, Order>,
        rolled_back: &HashSet<Uuid>,
    ) -> Result<Self, Failed> {
        let sql = format!("SELECT event_id, COUNT(*) FROM {} GROUP BY event_id", run.deliveries);
        let rows: Vec<(String, i64)> =
            sqlx::query_as(AssertSqlSafe(sql)).fetch_all(dialect.pool()).await.map_err(fail)?;
        let mut seen: HashMap<Uuid, u64> = HashMap::with_capacity(rows.len());
        for (id, count) in rows {
            let parsed =
                Uuid::parse_str(&id).map_err(|error| fail(format!("delivered event id {id:?}: {error}")))?;
            seen.insert(parsed, u64::try_from(count).map_err(fail)?);
        }
        let effects = PgStore::effects(dialect, &run.names).await.map_err(fail)?;
        let statuses = PgStore::outbox_statuses(dialect, &run.names).await.map_err(fail)?;
        Ok(Self {
            accounts: Ledger::new(
                committed.keys().copied(),
                rolled_back.iter().copied(),
                &seen,
                &effects,
                &statuses,
            ),
            relays: RelayStats::read_all(&run.dir).map_err(fail)?,
        })
    }

    /// The ledger as a Markdown table, with the relays' fencing counters below.
    fn table(&self) -> String {
        let refused: u64 = self.relays.iter().map(|(_, stats)| stats.refused_settles).sum();
        let recovered: u64 = self.relays.iter().map(|(_, stats)| stats.recovered).sum();
        let delivered: u64 = self.relays.iter().map(|(_, stats)| stats.delivered).sum();
        format!(
            "| committed | rolled back | delivered unique | duplicates delivered | effects | double effects | lost | rolled back but delivered | stuck rows | refused settles |\n\
             |---|---|---|---|---|---|---|---|---|---|\n\
             | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n\
             relay processes {}, events the broker acknowledged {delivered}, rows recovered as stuck {recovered} \
             (counters as each relay's stats file last had them; a SIGKILLed relay's last 200 ms are missing)",
            self.accounts.committed,
            self.accounts.rolled_back,
            self.accounts.delivered_unique,
            self.accounts.duplicates_delivered,
            self.accounts.effects,
            self.accounts.double_effects.len(),
            self.accounts.lost.len(),
            self.accounts.rolled_back_delivered.len(),
            self.accounts.stuck_rows(),
            refused,
            self.relays.len(),
        )
    }
}

fn cases() -> Vec<Case<()>> {
    vec![case!("quick", quick), case!("broken_consumer_is_caught", broken_consumer_is_caught)]
}

fn main() -> ExitCode {
    Suite::new().add("chaos", Arc::new(()), cases()).run()
}
