//! The accounting both suites end with: what was committed and rolled back against what was
//! delivered, what took effect and how the outbox rows were left; for a durable inbox consumer
//! (`store_in`), also how its stored messages were left ([`StoredRows`]).
//!
//! [`Ledger::new`] takes plain inputs, so each suite reads them its own way (the matrix from its
//! listener's record, the chaos ledger from the consumers' deliveries table) and adds what only it
//! reports around the shared [`Ledger`].

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;

use uuid::Uuid;

/// The outbox status every row must end in.
const SETTLED: &str = "PROCESSED";

/// How many ids of one broken guarantee [`Ledger::violations`] names.
const IDS_SHOWN: usize = 10;

/// The durable inbox statuses a stored message ends in: PROCESSED (its effect committed with the
/// settle) or FAILED (given up, kept for a person). A row left in any other status is stuck.
const STORED_FINAL: [&str; 2] = ["PROCESSED", "FAILED"];

/// How a durable inbox consumer's (`store_in`) messages stand in `outbox_inbox_messages`: the
/// listener acknowledges the broker only once a message's row committed, so a committed event
/// without a row is lost, and the processor settles PROCESSED in the effect's own transaction, so
/// every committed event but the poison ones must end PROCESSED with exactly one effect row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredRows {
    /// The consumer's rows in all.
    pub rows: usize,
    /// The consumer's rows by status, sorted by status.
    pub by_status: Vec<(String, i64)>,
    /// Committed events without a row: never stored, although the broker may have been released.
    pub not_stored: Vec<Uuid>,
    /// Committed events, not poison, whose row is not PROCESSED, with the status it has.
    pub not_processed: Vec<(Uuid, String)>,
    /// Rolled-back events with a row: a message of a transaction that never committed was stored.
    pub rolled_back_stored: Vec<Uuid>,
    /// Rows of ids no publisher handed out.
    pub foreign_rows: Vec<Uuid>,
    /// Deliveries the listener answered as duplicates (the id was stored already): broker
    /// redeliveries and re-published copies the inbox absorbed. Shown, never a violation.
    pub duplicates_absorbed: u64,
    /// Handler runs that recorded their delivery but committed no outcome: killed, stopped past
    /// the lease and fenced, or failed by the database; each left the row to another run. Shown,
    /// never a violation (a second effect would be one).
    pub runs_unfinished: u64,
}

impl StoredRows {
    /// The accounting of `rows` (`(event id, status)`, one per stored message of the consumer)
    /// against the publishers' ids; `poison` are the committed events whose handler always fails,
    /// which must end FAILED instead of PROCESSED (checked with the ledger's poison accounting).
    pub fn new(committed: &[Uuid], rolled_back: &[Uuid], poison: &[Uuid], rows: &[(Uuid, String)]) -> Self {
        let status: HashMap<Uuid, &str> = rows.iter().map(|(id, status)| (*id, status.as_str())).collect();
        let poison: HashSet<&Uuid> = poison.iter().collect();
        let published: HashSet<&Uuid> = committed.iter().chain(rolled_back).collect();
        let mut by_status: HashMap<&str, i64> = HashMap::new();
        for (_, row_status) in rows {
            *by_status.entry(row_status.as_str()).or_default() += 1;
        }
        let mut by_status: Vec<(String, i64)> =
            by_status.into_iter().map(|(row_status, count)| (row_status.to_owned(), count)).collect();
        by_status.sort();
        let mut foreign_rows: Vec<Uuid> =
            rows.iter().map(|(id, _)| *id).filter(|id| !published.contains(id)).collect();
        foreign_rows.sort();
        Self {
            rows: rows.len(),
            by_status,
            not_stored: committed.iter().filter(|id| !status.contains_key(id)).copied().collect(),
            not_processed: committed
                .iter()
                .filter(|id| !poison.contains(id))
                .filter_map(|id| match status.get(id) {
                    Some(&"PROCESSED") | None => None,
                    Some(other) => Some((*id, (*other).to_owned())),
                })
                .collect(),
            rolled_back_stored: rolled_back.iter().filter(|id| status.contains_key(id)).copied().collect(),
            foreign_rows,
            duplicates_absorbed: 0,
            runs_unfinished: 0,
        }
    }

    /// The same accounting with what the deliveries table tells of the runs: `(event id, outcome,
    /// deliveries)` as [`Store::deliveries_by_outcome`](crate::Store::deliveries_by_outcome) reads
    /// it, where `duplicate` is a delivery the listener absorbed and no outcome a run that never
    /// committed one.
    #[must_use]
    pub fn with_deliveries(mut self, by_outcome: &[(String, String, i64)]) -> Self {
        let count = |wanted: &str| -> u64 {
            by_outcome
                .iter()
                .filter(|(_, outcome, _)| outcome == wanted)
                .map(|(_, _, count)| u64::try_from(*count).unwrap_or_default())
                .sum()
        };
        self.duplicates_absorbed = count("duplicate");
        self.runs_unfinished = count("");
        self
    }

    /// Rows still RECEIVED or PROCESSING (or in a status the inbox does not know): work the
    /// processors left behind.
    pub fn leftovers(&self) -> i64 {
        self.by_status
            .iter()
            .filter(|(status, _)| !STORED_FINAL.contains(&status.as_str()))
            .map(|(_, count)| count)
            .sum()
    }

    /// Rows in `status`.
    pub fn in_status(&self, status: &str) -> i64 {
        self.by_status.iter().filter(|(held, _)| held == status).map(|(_, count)| count).sum()
    }

    /// Whether the stored messages balance: every committed event stored, each that is not poison
    /// PROCESSED, nothing else stored and nothing left to do.
    pub fn holds(&self) -> bool {
        self.not_stored.is_empty()
            && self.not_processed.is_empty()
            && self.rolled_back_stored.is_empty()
            && self.foreign_rows.is_empty()
            && self.leftovers() == 0
    }
}

/// The accounting of one run: counts, and the ids behind each broken guarantee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// Events committed by the publishers.
    pub committed: usize,
    /// Events whose business transaction rolled back.
    pub rolled_back: usize,
    /// Distinct event ids the consumer saw.
    pub delivered_unique: usize,
    /// Deliveries beyond the first of each id.
    pub duplicates_delivered: u64,
    /// Effect rows in all.
    pub effects: i64,
    /// Ids with more than one effect row, with their row count.
    pub double_effects: Vec<(String, i64)>,
    /// Ids with an effect row that no committed event has.
    pub foreign_effects: Vec<String>,
    /// Committed events never delivered, in the order the committed ids were given.
    pub lost: Vec<Uuid>,
    /// Committed events without an effect row, in the order the committed ids were given.
    pub missing_effects: Vec<Uuid>,
    /// Rolled-back events that were delivered all the same.
    pub rolled_back_delivered: Vec<Uuid>,
    /// Outbox rows by status, for every status but `PROCESSED`.
    pub unsettled_rows: Vec<(String, i64)>,
    /// Outbox rows in all.
    pub outbox_rows: i64,
    /// Handler runs that failed on purpose (see [`Ledger::with_handler_failures`]).
    pub handler_failures: u64,
    /// Committed poison events found dead-lettered, as they must be.
    pub poison_dead_lettered: Vec<Uuid>,
    /// Committed poison events not dead-lettered.
    pub poison_not_dead_lettered: Vec<Uuid>,
    /// Committed poison events with an effect row.
    pub poison_with_effect: Vec<Uuid>,
    /// Dead-lettered events that are not poison: given up although their handler would succeed.
    pub dead_lettered_not_poison: Vec<Uuid>,
    /// Ids whose effect ran again after a consumer was killed in it or the inbox reported its
    /// claim left in flight (see [`Ledger::with_repeats_after_kills`]), with their effect rows; not
    /// in `double_effects`.
    pub repeated_after_kill: Vec<(String, i64)>,
    /// A durable inbox consumer's stored messages (see [`Ledger::with_stored_inbox`]); `None` for
    /// the other consumers. With it, the poison fields mean FAILED in the inbox where they say
    /// dead-lettered: such a consumer gives a message up in its table, not to the broker.
    pub stored: Option<StoredRows>,
}

impl Ledger {
    /// Computes the accounting.
    ///
    /// * `committed`, `rolled_back`: the publishers' event ids; the order of each is kept in the
    ///   lists of ids the ledger reports.
    /// * `deliveries`: how often the consumer saw each id, duplicates included.
    /// * `effects`: effect rows by event id, as the effects table groups them.
    /// * `outbox_statuses`: outbox rows by status.
    pub fn new(
        committed: impl IntoIterator<Item = Uuid>,
        rolled_back: impl IntoIterator<Item = Uuid>,
        deliveries: &HashMap<Uuid, u64>,
        effects: &[(String, i64)],
        outbox_statuses: &[(String, i64)],
    ) -> Self {
        let committed: Vec<Uuid> = committed.into_iter().collect();
        let rolled_back: Vec<Uuid> = rolled_back.into_iter().collect();
        let committed_text: HashSet<String> = committed.iter().map(Uuid::to_string).collect();
        let applied: HashSet<&str> = effects.iter().map(|(id, _)| id.as_str()).collect();
        Self {
            committed: committed.len(),
            rolled_back: rolled_back.len(),
            delivered_unique: deliveries.len(),
            duplicates_delivered: deliveries.values().map(|count| count.saturating_sub(1)).sum(),
            effects: effects.iter().map(|(_, count)| count).sum(),
            double_effects: effects.iter().filter(|(_, count)| *count > 1).cloned().collect(),
            foreign_effects: effects
                .iter()
                .filter(|(id, _)| !committed_text.contains(id))
                .map(|(id, _)| id.clone())
                .collect(),
            lost: committed.iter().filter(|id| !deliveries.contains_key(id)).copied().collect(),
            missing_effects: committed
                .iter()
                .filter(|id| !applied.contains(id.to_string().as_str()))
                .copied()
                .collect(),
            rolled_back_delivered: rolled_back.into_iter().filter(|id| deliveries.contains_key(id)).collect(),
            unsettled_rows: outbox_statuses.iter().filter(|(status, _)| status != SETTLED).cloned().collect(),
            outbox_rows: outbox_statuses.iter().map(|(_, count)| count).sum(),
            handler_failures: 0,
            poison_dead_lettered: Vec::new(),
            poison_not_dead_lettered: Vec::new(),
            poison_with_effect: Vec::new(),
            dead_lettered_not_poison: Vec::new(),
            repeated_after_kill: Vec::new(),
            stored: None,
        }
    }

    /// The accounting of a durable inbox consumer (`store_in`): its stored messages must balance
    /// too ([`StoredRows::holds`]). Call it after [`with_handler_failures`](Self::with_handler_failures)
    /// with the ids whose row is FAILED as the dead-lettered ones, so that a poison event counts as
    /// given up (not lost) only when its row is FAILED, and any other FAILED row breaks the ledger.
    /// No effect may be repeated: the effect commits with the settle, so no kill explains a second
    /// effect row.
    #[must_use]
    pub fn with_stored_inbox(mut self, stored: StoredRows) -> Self {
        self.stored = Some(stored);
        self
    }

    /// What the consumer did with an event it gave up: dead-lettered it, or (a durable inbox
    /// consumer) left its row FAILED.
    fn given_up(&self) -> &'static str {
        if self.stored.is_some() { "FAILED in the durable inbox" } else { "dead-lettered" }
    }

    /// The accounting of a consumer whose effect is not transactional (`on_once`): an effect may
    /// run again when an earlier run of it may have happened without the inbox knowing, so the
    /// claim was taken over after its lease or released for a retry. `explained` counts, by id,
    /// the earlier runs for which the run itself left evidence of that (a delivery in a process
    /// the harness killed, an inbox warning that the claim stayed in flight, an effect whose
    /// commit answer was lost). An id may have one effect row more per such run: those ids move
    /// from `double_effects` to `repeated_after_kill`; any row beyond stays a double effect.
    #[must_use]
    pub fn with_repeats_after_kills(mut self, explained: &HashMap<String, i64>) -> Self {
        let (allowed, doubled): (Vec<_>, Vec<_>) = std::mem::take(&mut self.double_effects)
            .into_iter()
            .partition(|(id, rows)| *rows <= 1 + explained.get(id).copied().unwrap_or(0));
        self.double_effects = doubled;
        self.repeated_after_kill = allowed;
        self
    }

    /// Effect rows beyond the first of the ids in `repeated_after_kill`.
    fn repeated_rows(&self) -> i64 {
        self.repeated_after_kill.iter().map(|(_, rows)| rows - 1).sum()
    }

    /// The accounting of a run whose handlers failed on purpose: `failures` failed runs in all;
    /// `poison`, the committed events whose handler always fails, must end in the dead-letter
    /// destination (`dead_lettered`: every event id found there) and never have an effect, and
    /// no other event may be dead-lettered. A poison event is not missing an effect.
    #[must_use]
    pub fn with_handler_failures(
        mut self,
        failures: u64,
        poison: &[Uuid],
        dead_lettered: &HashSet<Uuid>,
        effects: &[(String, i64)],
    ) -> Self {
        let poison_set: HashSet<Uuid> = poison.iter().copied().collect();
        let applied: HashSet<&str> = effects.iter().map(|(id, _)| id.as_str()).collect();
        self.handler_failures = failures;
        self.missing_effects.retain(|id| !poison_set.contains(id));
        (self.poison_dead_lettered, self.poison_not_dead_lettered) =
            poison.iter().partition(|id| dead_lettered.contains(id));
        self.poison_with_effect =
            poison.iter().filter(|id| applied.contains(id.to_string().as_str())).copied().collect();
        self.dead_lettered_not_poison =
            dead_lettered.iter().filter(|id| !poison_set.contains(id)).copied().collect();
        self.dead_lettered_not_poison.sort();
        self
    }

    /// Committed events that must have exactly one effect: all but the poison ones.
    pub fn expected_effects(&self) -> usize {
        self.committed.saturating_sub(self.poison_dead_lettered.len() + self.poison_not_dead_lettered.len())
    }

    /// Outbox rows not `PROCESSED`, whatever their status, and a durable inbox consumer's stored
    /// messages left RECEIVED or PROCESSING.
    pub fn stuck_rows(&self) -> i64 {
        let stored = self.stored.as_ref().map_or(0, StoredRows::leftovers);
        self.unsettled_rows.iter().map(|(_, count)| count).sum::<i64>() + stored
    }

    /// Whether every guarantee held: each committed event delivered and applied exactly once, no
    /// rolled-back event delivered, no other effect, one outbox row per committed event and every
    /// one of them `PROCESSED`; for a durable inbox consumer, its stored messages balanced too.
    pub fn holds(&self) -> bool {
        self.stored.as_ref().is_none_or(StoredRows::holds)
            && self.lost.is_empty()
            && self.rolled_back_delivered.is_empty()
            && self.double_effects.is_empty()
            && self.foreign_effects.is_empty()
            && self.missing_effects.is_empty()
            && self.unsettled_rows.is_empty()
            && self.poison_not_dead_lettered.is_empty()
            && self.poison_with_effect.is_empty()
            && self.dead_lettered_not_poison.is_empty()
            && usize::try_from(self.effects - self.repeated_rows())
                .is_ok_and(|effects| effects == self.expected_effects())
            && usize::try_from(self.outbox_rows).is_ok_and(|rows| rows == self.committed)
    }

    /// Each broken guarantee with (up to ten of) its ids, or `no guarantee broken`.
    pub fn violations(&self) -> String {
        fn some<T: Debug>(items: &[T]) -> String {
            format!("{} {:?}", items.len(), &items[..items.len().min(IDS_SHOWN)])
        }
        let mut found = Vec::new();
        if !self.lost.is_empty() {
            found.push(format!("lost (committed, never delivered): {}", some(&self.lost)));
        }
        if !self.rolled_back_delivered.is_empty() {
            found.push(format!("rolled back but delivered: {}", some(&self.rolled_back_delivered)));
        }
        if !self.double_effects.is_empty() {
            found.push(format!("double effects (id, rows): {}", some(&self.double_effects)));
        }
        if !self.foreign_effects.is_empty() {
            found.push(format!("effects of ids never committed: {}", some(&self.foreign_effects)));
        }
        if !self.missing_effects.is_empty() {
            found.push(format!("committed without effect: {}", some(&self.missing_effects)));
        }
        if !self.unsettled_rows.is_empty() {
            found.push(format!("outbox rows not PROCESSED (status, rows): {:?}", self.unsettled_rows));
        }
        let given_up = self.given_up();
        if !self.poison_not_dead_lettered.is_empty() {
            found.push(format!("poison not {given_up}: {}", some(&self.poison_not_dead_lettered)));
        }
        if !self.poison_with_effect.is_empty() {
            found.push(format!("poison with an effect: {}", some(&self.poison_with_effect)));
        }
        if !self.dead_lettered_not_poison.is_empty() {
            found.push(format!("{given_up} but not poison: {}", some(&self.dead_lettered_not_poison)));
        }
        if let Some(stored) = &self.stored {
            if !stored.not_stored.is_empty() {
                found.push(format!("committed but never stored: {}", some(&stored.not_stored)));
            }
            if !stored.not_processed.is_empty() {
                found.push(format!("stored but not PROCESSED (id, status): {}", some(&stored.not_processed)));
            }
            if !stored.rolled_back_stored.is_empty() {
                found.push(format!("rolled back but stored: {}", some(&stored.rolled_back_stored)));
            }
            if !stored.foreign_rows.is_empty() {
                found.push(format!("stored ids never published: {}", some(&stored.foreign_rows)));
            }
            if stored.leftovers() > 0 {
                found.push(format!(
                    "stored messages left RECEIVED or PROCESSING (status, rows): {:?}",
                    stored
                        .by_status
                        .iter()
                        .filter(|(status, _)| !STORED_FINAL.contains(&status.as_str()))
                        .collect::<Vec<_>>()
                ));
            }
        }
        if usize::try_from(self.effects - self.repeated_rows()).ok() != Some(self.expected_effects())
            && self.double_effects.is_empty()
        {
            found.push(format!(
                "{} effect rows ({} repeated after a kill) for {} events that must have one",
                self.effects,
                self.repeated_rows(),
                self.expected_effects()
            ));
        }
        if usize::try_from(self.outbox_rows).ok() != Some(self.committed) {
            found.push(format!("{} outbox rows for {} committed events", self.outbox_rows, self.committed));
        }
        if found.is_empty() { "no guarantee broken".to_owned() } else { found.join("; ") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn effect(n: u128, rows: i64) -> (String, i64) {
        (id(n).to_string(), rows)
    }

    fn processed(rows: i64) -> Vec<(String, i64)> {
        vec![(SETTLED.to_owned(), rows)]
    }

    #[test]
    fn a_clean_run_holds() {
        let deliveries = HashMap::from([(id(1), 1), (id(2), 3)]);
        let ledger =
            Ledger::new([id(1), id(2)], [id(9)], &deliveries, &[effect(1, 1), effect(2, 1)], &processed(2));
        assert!(ledger.holds(), "{}", ledger.violations());
        assert_eq!(ledger.violations(), "no guarantee broken");
        assert_eq!((ledger.delivered_unique, ledger.duplicates_delivered, ledger.effects), (2, 2, 2));
    }

    #[test]
    fn each_broken_guarantee_is_reported() {
        // 1 lost and without effect, 2 applied twice, 9 rolled back yet delivered and applied.
        let deliveries = HashMap::from([(id(2), 2), (id(9), 1)]);
        let statuses = vec![(SETTLED.to_owned(), 1), ("FAILED".to_owned(), 1), ("NEW".to_owned(), 1)];
        let ledger =
            Ledger::new([id(1), id(2)], [id(9)], &deliveries, &[effect(2, 2), effect(9, 1)], &statuses);
        assert!(!ledger.holds());
        assert_eq!(ledger.lost, vec![id(1)]);
        assert_eq!(ledger.missing_effects, vec![id(1)]);
        assert_eq!(ledger.rolled_back_delivered, vec![id(9)]);
        assert_eq!(ledger.double_effects, vec![effect(2, 2)]);
        assert_eq!(ledger.foreign_effects, vec![id(9).to_string()]);
        assert_eq!(ledger.stuck_rows(), 2);
        let violations = ledger.violations();
        for expected in [
            "lost (committed, never delivered): 1",
            "rolled back but delivered: 1",
            "double effects (id, rows): 1",
            "effects of ids never committed: 1",
            "committed without effect: 1",
            "outbox rows not PROCESSED (status, rows): [(\"FAILED\", 1), (\"NEW\", 1)]",
            "3 outbox rows for 2 committed events",
        ] {
            assert!(violations.contains(expected), "{expected:?} missing from {violations:?}");
        }
    }

    #[test]
    fn poison_must_be_dead_lettered_without_effect_and_nothing_else_dead_lettered() {
        // 1 applied after failures, 2 poison and dead-lettered: the ledger holds.
        let deliveries = HashMap::from([(id(1), 1), (id(2), 0)]);
        let effects = [effect(1, 1)];
        let ledger = Ledger::new([id(1), id(2)], [], &deliveries, &effects, &processed(2))
            .with_handler_failures(7, &[id(2)], &HashSet::from([id(2)]), &effects);
        assert!(ledger.holds(), "{}", ledger.violations());
        assert_eq!((ledger.handler_failures, ledger.poison_dead_lettered.clone()), (7, vec![id(2)]));
        assert!(ledger.lost.is_empty() && ledger.missing_effects.is_empty());

        // 2 poison but not dead-lettered, 1 dead-lettered although not poison.
        let wrong = Ledger::new([id(1), id(2)], [], &deliveries, &effects, &processed(2))
            .with_handler_failures(0, &[id(2)], &HashSet::from([id(1)]), &effects);
        assert!(!wrong.holds());
        let violations = wrong.violations();
        assert!(violations.contains("poison not dead-lettered: 1"), "{violations}");
        assert!(violations.contains("dead-lettered but not poison: 1"), "{violations}");

        // A poison event with an effect.
        let applied = [effect(1, 1), effect(2, 1)];
        let with_effect = Ledger::new([id(1), id(2)], [], &deliveries, &applied, &processed(2))
            .with_handler_failures(0, &[id(2)], &HashSet::from([id(2)]), &applied);
        assert!(!with_effect.holds());
        assert!(with_effect.violations().contains("poison with an effect: 1"));
    }

    #[test]
    fn an_effect_repeated_only_after_a_kill_in_it_is_allowed() {
        let deliveries = HashMap::from([(id(1), 2), (id(2), 2)]);
        let effects = [effect(1, 2), effect(2, 2)];
        // 1 had a delivery that never finished in a killed process; 2 had none.
        let unfinished = HashMap::from([(id(1).to_string(), 1)]);
        let ledger = Ledger::new([id(1), id(2)], [], &deliveries, &effects, &processed(2))
            .with_repeats_after_kills(&unfinished);
        assert_eq!(ledger.repeated_after_kill, vec![effect(1, 2)]);
        assert_eq!(ledger.double_effects, vec![effect(2, 2)]);
        assert!(!ledger.holds());
        let only_repeated = Ledger::new([id(1)], [], &deliveries, &[effect(1, 2)], &processed(1))
            .with_repeats_after_kills(&unfinished);
        assert!(only_repeated.holds(), "{}", only_repeated.violations());
        // A third row is one more than one earlier run explains; two explain it.
        let tripled = Ledger::new([id(1)], [], &deliveries, &[effect(1, 3)], &processed(1))
            .with_repeats_after_kills(&unfinished);
        assert_eq!(tripled.double_effects, vec![effect(1, 3)]);
        let twice = HashMap::from([(id(1).to_string(), 2)]);
        let explained = Ledger::new([id(1)], [], &deliveries, &[effect(1, 3)], &processed(1))
            .with_repeats_after_kills(&twice);
        assert!(explained.holds(), "{}", explained.violations());
    }

    /// A durable inbox consumer's ledger over committed 1, 2 and 3 (3 poison) and rolled-back 9,
    /// its outbox rows all PROCESSED, with the deliveries, effects and stored rows given.
    fn durable(deliveries: &[(u128, u64)], effects: &[(String, i64)], rows: &[(u128, &str)]) -> Ledger {
        let (committed, rolled_back, poison) = ([id(1), id(2), id(3)], [id(9)], [id(3)]);
        let deliveries: HashMap<Uuid, u64> = deliveries.iter().map(|&(n, count)| (id(n), count)).collect();
        let rows: Vec<(Uuid, String)> = rows.iter().map(|&(n, status)| (id(n), status.to_owned())).collect();
        let failed: HashSet<Uuid> =
            rows.iter().filter(|(_, status)| status == "FAILED").map(|(id, _)| *id).collect();
        Ledger::new(committed, rolled_back, &deliveries, effects, &processed(3))
            .with_handler_failures(4, &poison, &failed, effects)
            .with_stored_inbox(StoredRows::new(&committed, &rolled_back, &poison, &rows))
    }

    const BALANCED: [(u128, &str); 3] = [(1, "PROCESSED"), (2, "PROCESSED"), (3, "FAILED")];

    #[test]
    fn a_durable_consumer_balances_with_every_event_stored_processed_once_and_poison_failed() {
        let ledger = durable(&[(1, 1), (2, 2), (3, 0)], &[effect(1, 1), effect(2, 1)], &BALANCED);
        assert!(ledger.holds(), "{}", ledger.violations());
        assert_eq!(ledger.poison_dead_lettered, vec![id(3)], "the poison FAILED counts as given up");
        assert_eq!((ledger.stuck_rows(), ledger.stored.as_ref().map(|stored| stored.rows)), (0, Some(3)));
    }

    #[test]
    fn a_durable_consumer_with_a_double_effect_fails_even_after_a_kill() {
        let effects = [effect(1, 1), effect(2, 2)];
        let ledger = durable(&[(1, 1), (2, 2), (3, 0)], &effects, &BALANCED);
        assert!(!ledger.holds());
        assert_eq!(ledger.double_effects, vec![effect(2, 2)]);
        assert!(ledger.violations().contains("double effects (id, rows): 1"), "{}", ledger.violations());
    }

    #[test]
    fn a_durable_consumer_that_never_stored_an_event_lost_it() {
        let ledger = durable(&[(1, 1), (3, 0)], &[effect(1, 1)], &[(1, "PROCESSED"), (3, "FAILED")]);
        assert!(!ledger.holds());
        assert_eq!(ledger.lost, vec![id(2)]);
        assert_eq!(ledger.stored.as_ref().map(|stored| stored.not_stored.clone()), Some(vec![id(2)]));
        let violations = ledger.violations();
        for expected in ["lost (committed, never delivered): 1", "committed but never stored: 1"] {
            assert!(violations.contains(expected), "{expected:?} missing from {violations:?}");
        }
    }

    #[test]
    fn a_durable_consumer_with_leftover_wrongly_failed_or_rolled_back_rows_fails() {
        let deliveries = [(1, 1), (2, 1), (3, 0)];
        let effects = [effect(1, 1), effect(2, 1)];
        // 2 applied but its row still PROCESSING: a leftover, and not PROCESSED.
        let left = durable(&deliveries, &effects, &[(1, "PROCESSED"), (2, "PROCESSING"), (3, "FAILED")]);
        assert!(!left.holds());
        assert_eq!(left.stuck_rows(), 1);
        let violations = left.violations();
        assert!(violations.contains("stored messages left RECEIVED or PROCESSING"), "{violations}");
        assert!(violations.contains("stored but not PROCESSED (id, status): 1"), "{violations}");
        // 3 (poison) still waiting for a retry, 2 given up although it is not poison.
        let wrong = durable(
            &[(1, 1), (2, 1), (3, 0)],
            &[effect(1, 1)],
            &[(1, "PROCESSED"), (2, "FAILED"), (3, "RECEIVED")],
        );
        assert!(!wrong.holds());
        let violations = wrong.violations();
        for expected in [
            "poison not FAILED in the durable inbox: 1",
            "FAILED in the durable inbox but not poison: 1",
            "committed without effect: 1",
        ] {
            assert!(violations.contains(expected), "{expected:?} missing from {violations:?}");
        }
        // The rolled-back 9 stored, and a row of an id nobody published.
        let mut rows = BALANCED.to_vec();
        rows.extend([(9, "PROCESSED"), (42, "PROCESSED")]);
        let foreign = durable(&[(1, 1), (2, 1), (3, 0)], &effects, &rows);
        assert!(!foreign.holds());
        let violations = foreign.violations();
        assert!(violations.contains("rolled back but stored: 1"), "{violations}");
        assert!(violations.contains("stored ids never published: 1"), "{violations}");
    }

    #[test]
    fn a_wrong_effect_or_row_count_alone_breaks_it() {
        let deliveries = HashMap::from([(id(1), 1)]);
        let no_rows = Ledger::new([id(1)], [], &deliveries, &[effect(1, 1)], &processed(0));
        assert!(!no_rows.holds());
        assert_eq!(no_rows.violations(), "0 outbox rows for 1 committed events");
    }
}
