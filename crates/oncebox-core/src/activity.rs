//! Which event types this process's pollers are certain to claim again soon, so a writer in the
//! same process can leave out its wake-up signal (PostgreSQL's `NOTIFY`, whose commit-time cost
//! every publishing transaction would otherwise pay).
//!
//! The engine marks a type *awake* only when a claim is already certain to follow: after a run
//! that delivered events it runs again at once, and after the first run that finds nothing it
//! clears the mark and claims once more [`WAKE_GRACE`] later (or sooner, if its schedule says so).
//! So an event whose writer saw the type awake is claimed by a claim that starts after its
//! transaction committed, as long as the commit came within [`WAKE_GRACE`] of the write; one that
//! committed later waits for the next scheduled poll, never longer. Only latency is at stake:
//! the row is in the outbox either way.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long after its last empty claim an awake poller claims once more, for the events whose
/// writers saw it awake and left out their wake-up.
pub const WAKE_GRACE: Duration = Duration::from_millis(100);

/// The awake marks of one process's pollers, shared by a dialect's writer and the engine.
#[derive(Default)]
pub struct PollerActivity {
    by_type: RwLock<HashMap<String, Arc<AtomicBool>>>,
}

impl fmt::Debug for PollerActivity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let awake: Vec<String> = self
            .by_type
            .read()
            .map(|map| {
                map.iter().filter(|(_, flag)| flag.load(Ordering::Relaxed)).map(|(t, _)| t.clone()).collect()
            })
            .unwrap_or_default();
        f.debug_struct("PollerActivity").field("awake", &awake).finish()
    }
}

impl PollerActivity {
    /// No poller registered: every type is asleep, so writers signal every event.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a poller of this process is certain to claim `event_type` again soon.
    pub fn is_awake(&self, event_type: &str) -> bool {
        self.by_type
            .read()
            .ok()
            .and_then(|map| map.get(event_type).map(|flag| flag.load(Ordering::Acquire)))
            .unwrap_or(false)
    }

    /// The mark of `event_type`, registered on first use (asleep). The engine keeps it and sets
    /// it; `None` only if the map's lock was poisoned, and then the type counts as asleep.
    pub fn mark(&self, event_type: &str) -> Option<Arc<AtomicBool>> {
        if let Some(flag) = self.by_type.read().ok()?.get(event_type) {
            return Some(flag.clone());
        }
        let mut map = self.by_type.write().ok()?;
        Some(map.entry(event_type.to_owned()).or_default().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_is_asleep_until_its_poller_marks_it() {
        let activity = PollerActivity::new();
        assert!(!activity.is_awake("a"));
        let mark = activity.mark("a").expect("a mark");
        assert!(!activity.is_awake("a"));
        mark.store(true, Ordering::Release);
        assert!(activity.is_awake("a"));
        assert!(!activity.is_awake("b"));
        assert!(Arc::ptr_eq(&mark, &activity.mark("a").expect("the same mark")));
        assert!(format!("{activity:?}").contains("\"a\""));
    }
}
