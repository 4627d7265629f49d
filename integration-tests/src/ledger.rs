//! The accounting both suites end with: what was committed and rolled back against what was
//! delivered, what took effect and how the outbox rows were left.
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
        }
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

    /// Outbox rows not `PROCESSED`, whatever their status.
    pub fn stuck_rows(&self) -> i64 {
        self.unsettled_rows.iter().map(|(_, count)| count).sum()
    }

    /// Whether every guarantee held: each committed event delivered and applied exactly once, no
    /// rolled-back event delivered, no other effect, one outbox row per committed event and every
    /// one of them `PROCESSED`.
    pub fn holds(&self) -> bool {
        self.lost.is_empty()
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
        if !self.poison_not_dead_lettered.is_empty() {
            found.push(format!("poison not dead-lettered: {}", some(&self.poison_not_dead_lettered)));
        }
        if !self.poison_with_effect.is_empty() {
            found.push(format!("poison with an effect: {}", some(&self.poison_with_effect)));
        }
        if !self.dead_lettered_not_poison.is_empty() {
            found.push(format!("dead-lettered but not poison: {}", some(&self.dead_lettered_not_poison)));
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

    #[test]
    fn a_wrong_effect_or_row_count_alone_breaks_it() {
        let deliveries = HashMap::from([(id(1), 1)]);
        let no_rows = Ledger::new([id(1)], [], &deliveries, &[effect(1, 1)], &processed(0));
        assert!(!no_rows.holds());
        assert_eq!(no_rows.violations(), "0 outbox rows for 1 committed events");
    }
}
