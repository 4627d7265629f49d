//! The chaos ledger (docs/reliability.md): relays and consumers as real OS processes, killed,
//! stopped and restarted while a publisher commits and rolls back business transactions and the
//! broker and the database are paused and restarted, then an accounting that must balance.
//!
//! Two ways to run it:
//!
//! * as part of `cargo test --workspace`, two cases on the shared servers:
//!   * `chaos::smoke` — the `smoke` profile on PostgreSQL + RabbitMQ (process faults only);
//!     passes only with nothing lost, no double effect, no rolled-back event delivered and no
//!     outbox row left unsettled;
//!   * `chaos::broken_consumer_is_caught` — a shorter run whose consumers apply effects without
//!     the inbox (`ONCEBOX_CHAOS_BROKEN=1`) and no copies are re-published, so only the faults
//!     redeliver; passes only when the ledger reports double effects;
//!   * `chaos::dropping_relay_is_caught` — a shorter run whose relays mark one event in eight
//!     PROCESSED without sending it (`ONCEBOX_CHAOS_DROP_SENDS=1`); passes only when the ledger
//!     fails with exactly those events lost;
//!   * `chaos::a_broken_durable_ledger_fails_the_run` — no servers: reports made by hand whose
//!     durable inbox (`store_in`) ledger has a double effect, a lost event or a leftover row, the
//!     other flavours' balanced; passes only when [`judge`] fails each (and passes the balanced
//!     one).
//!
//!   `ONCEBOX_CHAOS_SEED=<seed>` replays a fault schedule.
//! * with a profile, as a command (what `.ci/run` does with `quick`):
//!
//!   ```sh
//!   cargo test -p oncebox-integration-tests --test chaos -- --profile quick [--pairs postgres-kafka,…] [--seed N] [--broken | --drop-sends]
//!   ```
//!
//!   runs the profile's pairs one after the other, prints each ledger and a table of all, and
//!   exits non-zero when any pair loses, doubles, delivers a rolled-back event or leaves a row
//!   unsettled (with `--broken`: when any pair shows no double effect; with `--drop-sends`: when
//!   any pair loses nothing).

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use oncebox_integration_tests::chaos::{Broker, Database, Flavour, dropped_by_a_broken_relay};
use oncebox_integration_tests::harness::{
    self, Binaries, Faults, Options, Pair, Profile, Relaying, Report, SMOKE, Sabotage, Timings,
    required_variables, seed_from_env,
};
use oncebox_integration_tests::{Ledger, StoredRows};
use oncebox_testkit::case;
use oncebox_testkit::runner::{Case, Suite, TestResult, fail, server_missing};
use uuid::Uuid;

/// The broken-consumer case: the faults alone must redeliver (no copies are re-published). The
/// rate keeps the two consumers, which acknowledge 50 ms after their effect, about busy, so each
/// consumer kill most likely meets an applied but unacknowledged event.
const BROKEN: Profile = Profile {
    name: "broken",
    window: Duration::from_secs(15),
    transactions_per_second: 30,
    relay_kills: 2,
    consumer_kills: 4,
    relay_stops: 1,
    copies: 0,
    handler_failures: None,
    once_consumers: false,
    durable_consumers: false,
    consumer_stops: 0,
    path_blackholes: 0,
    rebalance_storms: 0,
    ..SMOKE
};

/// The dropping-relay case: a few hundred events, a relay kill and a consumer kill so the drop is
/// met under faults, no copies (a copy would deliver a dropped event).
const DROPPING: Profile = Profile {
    name: "dropping",
    window: Duration::from_secs(8),
    relay_kills: 1,
    consumer_kills: 1,
    relay_stops: 0,
    copies: 0,
    handler_failures: None,
    once_consumers: false,
    durable_consumers: false,
    consumer_stops: 0,
    path_blackholes: 0,
    rebalance_storms: 0,
    ..SMOKE
};

const POSTGRES_RABBIT: Pair = Pair { database: Database::Postgres, broker: Broker::Rabbit };

fn binaries() -> Binaries {
    Binaries {
        relay: env!("CARGO_BIN_EXE_chaos_relay").into(),
        consumer: env!("CARGO_BIN_EXE_chaos_consumer").into(),
    }
}

/// The first variable of the pair that is not set, if any.
fn missing_variable(pair: Pair, profile: &Profile) -> Option<&'static str> {
    required_variables(pair, profile)
        .into_iter()
        .find(|variable| std::env::var(variable).map_or(true, |value| value.is_empty()))
}

/// Runs one pair for a case; `Ok(None)` when its servers are not configured outside CI.
async fn case_run(
    case: &str,
    profile: &Profile,
    sabotage: Sabotage,
) -> Result<Option<Report>, oncebox_testkit::runner::Failed> {
    if let Some(variable) = missing_variable(POSTGRES_RABBIT, profile) {
        return if server_missing(case, variable) == ExitCode::SUCCESS {
            Ok(None)
        } else {
            Err(fail(format!("{case}: {variable} is not set, and CI=true requires it")))
        };
    }
    let seed = seed_from_env().map_err(fail)?;
    eprintln!("{case}: seed {seed} (replay with ONCEBOX_CHAOS_SEED={seed})");
    let options = Options { seed, sabotage, binaries: binaries() };
    let report = harness::run(POSTGRES_RABBIT, profile, &options).await.map_err(fail)?;
    eprintln!("{case}:\n{}", report.text());
    Ok(Some(report))
}

async fn smoke(_: Arc<()>) -> TestResult {
    let Some(report) = case_run("chaos::smoke", &SMOKE, Sabotage::None).await? else { return Ok(()) };
    judge(Sabotage::None, &report).map_err(|why| fail(format!("chaos::smoke (seed {}): {why}", report.seed)))
}

async fn broken_consumer_is_caught(_: Arc<()>) -> TestResult {
    let case = "chaos::broken_consumer_is_caught";
    let Some(report) = case_run(case, &BROKEN, Sabotage::ConsumerWithoutInbox).await? else {
        return Ok(());
    };
    judge(Sabotage::ConsumerWithoutInbox, &report)
        .map_err(|why| fail(format!("{case} (seed {}): {why}", report.seed)))
}

async fn dropping_relay_is_caught(_: Arc<()>) -> TestResult {
    let case = "chaos::dropping_relay_is_caught";
    let Some(report) = case_run(case, &DROPPING, Sabotage::RelayDropsSends).await? else {
        return Ok(());
    };
    judge(Sabotage::RelayDropsSends, &report)
        .map_err(|why| fail(format!("{case} (seed {}): {why}", report.seed)))
}

/// Whether `report` is what a run with `sabotage` must show: a balanced ledger without one; with
/// one, a ledger that fails, and fails for the defect given.
fn judge(sabotage: Sabotage, report: &Report) -> Result<(), String> {
    // The defects are the transactional consumers' and the relays': the first ledger shows them.
    let ledger = report.ledger();
    match sabotage {
        Sabotage::None if !report.holds() => Err(report.violations()),
        Sabotage::None => report.fence_unshown().map_or(Ok(()), Err),
        Sabotage::ConsumerWithoutInbox if ledger.double_effects.is_empty() => {
            Err("the consumers ran without the inbox, yet the ledger shows no double effect".to_owned())
        }
        Sabotage::RelayDropsSends if ledger.holds() || ledger.lost.is_empty() => Err(format!(
            "the relays dropped {} committed events, yet the ledger shows none lost ({})",
            report.dropped_by_relays,
            ledger.violations()
        )),
        Sabotage::RelayDropsSends
            if ledger.lost.len() != report.dropped_by_relays
                || !ledger.lost.iter().all(|id| dropped_by_a_broken_relay(*id)) =>
        {
            Err(format!(
                "the relays dropped {} committed events, but the ledger reports {} others lost: {}",
                report.dropped_by_relays,
                ledger.lost.len(),
                ledger.violations()
            ))
        }
        Sabotage::ConsumerWithoutInbox | Sabotage::RelayDropsSends => Ok(()),
    }
}

/// `judge` fails a run on a broken `store_in` ledger alone: a double effect (no kill allows one,
/// the effect commits with the settle), an event never stored (lost, although the broker was
/// released), or a stored message left RECEIVED; a balanced one passes. The reports are made by
/// hand, so the check needs no server and runs in every `cargo test`.
async fn a_broken_durable_ledger_fails_the_run(_: Arc<()>) -> TestResult {
    let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
    let committed = [first, second];
    let processed = [("PROCESSED".to_owned(), 2)];
    let once_each = [(first.to_string(), 1), (second.to_string(), 1)];
    let delivered = HashMap::from([(first, 1), (second, 1)]);
    let balanced = Ledger::new(committed, [], &delivered, &once_each, &processed);
    let durable = |deliveries: &HashMap<Uuid, u64>, effects: &[(String, i64)], rows: &[(Uuid, &str)]| {
        let rows: Vec<(Uuid, String)> = rows.iter().map(|(id, status)| (*id, (*status).to_owned())).collect();
        Ledger::new(committed, [], deliveries, effects, &processed)
            .with_handler_failures(0, &[], &HashSet::new(), effects)
            .with_stored_inbox(StoredRows::new(&committed, &[], &[], &rows))
    };
    let report = |durable: Ledger| Report {
        pair: POSTGRES_RABBIT,
        profile: "hand-made",
        relaying: Relaying::SEQUENTIAL,
        seed: 0,
        ledgers: vec![
            (Flavour::Transactional, balanced.clone()),
            (Flavour::Once, balanced.clone()),
            (Flavour::Durable, durable),
        ],
        relays: Vec::new(),
        relay_slots: 2,
        faults: Faults::default(),
        in_doubt: (0, 0),
        failed_transactions: 0,
        copies: 0,
        committed_by_type: Vec::new(),
        dropped_by_relays: 0,
        notes: Vec::new(),
        timings: Timings::default(),
        elapsed: Duration::ZERO,
    };
    let both_processed = [(first, "PROCESSED"), (second, "PROCESSED")];
    judge(Sabotage::None, &report(durable(&delivered, &once_each, &both_processed)))
        .map_err(|why| fail(format!("a balanced store_in ledger was judged failed: {why}")))?;
    let doubled = [(first.to_string(), 1), (second.to_string(), 2)];
    let lost_delivery = HashMap::from([(first, 1)]);
    let cases = [
        ("a double effect", durable(&delivered, &doubled, &both_processed), "store_in: double effects"),
        (
            "an event never stored",
            durable(&lost_delivery, &once_each[..1], &[(first, "PROCESSED")]),
            "committed but never stored",
        ),
        (
            "a message left RECEIVED",
            durable(&delivered, &once_each[..1], &[(first, "PROCESSED"), (second, "RECEIVED")]),
            "stored messages left RECEIVED or PROCESSING",
        ),
    ];
    for (what, ledger, expected) in cases {
        match judge(Sabotage::None, &report(ledger)) {
            Ok(()) => return Err(fail(format!("a store_in ledger with {what} was judged balanced"))),
            Err(why) if why.contains(expected) => {}
            Err(why) => return Err(fail(format!("{what}: {expected:?} missing from the verdict {why:?}"))),
        }
    }
    Ok(())
}

/// The command form: `--profile <name> [--pairs a,b] [--seed N] [--broken | --drop-sends]`.
struct Command {
    profile: Profile,
    pairs: Vec<Pair>,
    seed: Option<u64>,
    sabotage: Sabotage,
}

impl Command {
    /// The command in `arguments`, `Ok(None)` when they carry no `--profile` (the test suite).
    fn parse(arguments: &[String]) -> Result<Option<Self>, String> {
        let mut profile = None;
        let (mut pairs, mut seed, mut sabotage) = (None, None, Sabotage::None);
        let mut rest = arguments.iter();
        while let Some(argument) = rest.next() {
            let mut value = |flag: &str| rest.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
            match argument.as_str() {
                "--profile" => {
                    profile = Some(Profile::named(&value("--profile")?).map_err(|e| e.to_string())?)
                }
                "--pairs" => {
                    let list = value("--pairs")?;
                    let parsed: Result<Vec<Pair>, _> = list.split(',').map(Pair::parse).collect();
                    pairs = Some(parsed.map_err(|error| error.to_string())?);
                }
                "--seed" => {
                    let text = value("--seed")?;
                    seed = Some(text.parse().map_err(|error| format!("--seed {text}: {error}"))?);
                }
                "--broken" => sabotage = Sabotage::ConsumerWithoutInbox,
                "--drop-sends" => sabotage = Sabotage::RelayDropsSends,
                _ => {}
            }
        }
        let Some(profile) = profile else {
            return if pairs.is_some() || seed.is_some() || sabotage != Sabotage::None {
                Err("--pairs, --seed, --broken and --drop-sends need --profile smoke|quick|full".to_owned())
            } else {
                Ok(None)
            };
        };
        Ok(Some(Self { pairs: pairs.unwrap_or_else(|| profile.default_pairs()), profile, seed, sabotage }))
    }

    async fn run(self) -> ExitCode {
        let seed = match self.seed.map_or_else(seed_from_env, Ok) {
            Ok(seed) => seed,
            Err(error) => {
                eprintln!("chaos: {error}");
                return ExitCode::FAILURE;
            }
        };
        let ci = oncebox_testkit::runner::in_ci();
        eprintln!(
            "chaos {}: seed {seed} (replay with --seed {seed}); pairs {}",
            self.profile.name,
            self.pairs.iter().map(Pair::name).collect::<Vec<_>>().join(", ")
        );
        let mut rows = Vec::new();
        let mut failures = Vec::new();
        for pair in &self.pairs {
            if let Some(variable) = missing_variable(*pair, &self.profile) {
                let message = format!("{}: {variable} is not set", pair.name());
                eprintln!("chaos {}: SKIPPED {message}", self.profile.name);
                if ci {
                    failures.push(format!("{message}, and CI=true requires it"));
                }
                continue;
            }
            let options = Options { seed, sabotage: self.sabotage, binaries: binaries() };
            match harness::run(*pair, &self.profile, &options).await {
                Ok(report) => {
                    eprintln!("{}\n", report.text());
                    if let Err(why) = judge(self.sabotage, &report) {
                        failures.push(format!("{} (seed {seed}): {why}", pair.name()));
                    }
                    rows.push(report.row());
                }
                Err(error) => {
                    eprintln!("chaos {} {}: FAILED: {error}\n", self.profile.name, pair.name());
                    failures.push(format!("{} (seed {seed}): {error}", pair.name()));
                }
            }
        }
        eprintln!("chaos {} (seed {seed}):\n{}\n{}", self.profile.name, Report::HEADER, rows.join("\n"));
        if failures.is_empty() {
            eprintln!("chaos {}: every ledger balances", self.profile.name);
            ExitCode::SUCCESS
        } else {
            eprintln!("chaos {}: FAILED:\n  {}", self.profile.name, failures.join("\n  "));
            ExitCode::FAILURE
        }
    }
}

fn cases() -> Vec<Case<()>> {
    vec![
        case!("smoke", smoke),
        case!("broken_consumer_is_caught", broken_consumer_is_caught),
        case!("dropping_relay_is_caught", dropping_relay_is_caught),
        case!("a_broken_durable_ledger_fails_the_run", a_broken_durable_ledger_fails_the_run),
    ]
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    match Command::parse(&arguments) {
        Ok(Some(command)) => match tokio::runtime::Runtime::new() {
            Ok(runtime) => runtime.block_on(command.run()),
            Err(error) => {
                eprintln!("chaos: starting the runtime: {error}");
                ExitCode::FAILURE
            }
        },
        Ok(None) => Suite::new().add("chaos", Arc::new(()), cases()).run(),
        Err(error) => {
            eprintln!("chaos: {error}");
            ExitCode::FAILURE
        }
    }
}
