//! The rules of a person's work on the dead letter queue, shared by every tool that offers it (the
//! REST API, the command line): paging bounds, what a selection may be, when a single event
//! may be changed, and when a re-drive must be explicitly allowed.

use std::time::Duration;

use uuid::Uuid;

use crate::event::{DlqFilter, DlqSelection, DlqStatus, OlderEvents};
use crate::{DlqDao, Error, Result};

/// Events per page when no limit is given.
pub const DEFAULT_PAGE: u32 = 50;
/// The largest page.
pub const MAX_PAGE: u32 = 500;
/// The largest offset.
pub const MAX_OFFSET: u64 = 1_000_000_000;
/// The most ids one change may select.
pub const MAX_IDS: usize = 1_000;
/// The longest event type a filter may name, in characters (the column's width).
pub const MAX_EVENT_TYPE: usize = 255;

/// The page `limit` and `offset` stand for, or an error naming the value out of bounds.
pub fn page(offset: Option<u64>, limit: Option<u32>) -> Result<(u64, u32)> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(Error::invalid_input(format!("limit must be between 1 and {MAX_PAGE}, not {limit}")));
    }
    let offset = offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(Error::invalid_input(format!("offset must be at most {MAX_OFFSET}, not {offset}")));
    }
    Ok((offset, limit))
}

/// An event type as a filter or a selection names it: 1 to 255 characters, none a control
/// character (the databases' text columns refuse some of them). Surrounding spaces are kept: a
/// filter matches what is stored.
pub fn event_type(name: String) -> Result<String> {
    if name.is_empty() || name.chars().count() > MAX_EVENT_TYPE || name.chars().any(char::is_control) {
        return Err(Error::invalid_input(format!(
            "event_type must be 1 to {MAX_EVENT_TYPE} characters without control characters"
        )));
    }
    Ok(name)
}

/// A listing's or a count's filter, its event type checked.
pub fn filter(status: Option<DlqStatus>, event_type: Option<String>) -> Result<DlqFilter> {
    Ok(DlqFilter { status, event_type: event_type.map(self::event_type).transpose()? })
}

/// The events a batch change is about: `ids` (1 to [`MAX_IDS`]) or every event of `event_type`,
/// exactly one of the two.
pub fn selection(ids: Option<Vec<Uuid>>, event_type: Option<String>) -> Result<DlqSelection> {
    match (ids, event_type) {
        (Some(_), Some(_)) => Err(Error::invalid_input("give either ids or event_type, not both")),
        (None, None) => Err(Error::invalid_input("give ids or event_type")),
        (Some(ids), None) if ids.is_empty() => Err(Error::invalid_input("ids is empty")),
        (Some(ids), None) if ids.len() > MAX_IDS => {
            Err(Error::invalid_input(format!("{} ids in one request; at most {MAX_IDS}", ids.len())))
        }
        (Some(ids), None) => Ok(DlqSelection::Ids(ids)),
        (None, Some(name)) => Ok(DlqSelection::EventType(self::event_type(name)?)),
    }
}

/// A status a person may set: `IN_PROCESS` exists only inside the transfer job's transaction.
pub fn settable(status: DlqStatus) -> Result<DlqStatus> {
    if status.is_settable() {
        Ok(status)
    } else {
        Err(Error::invalid_input(format!(
            "{status} cannot be set: it belongs to the transfer job (use MOVED, RESOLVED or TO_RETRY)"
        )))
    }
}

/// The configuration key of the re-drive rule, for messages.
pub const RE_DRIVE_MAX_AGE_KEY: &str = "oncebox.outbox.dlq.re-drive-max-age";

/// How old an event a re-drive (a change to `TO_RETRY`) may send back to the outbox without
/// being told to, and whether this one was told to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReDrive {
    /// `oncebox.outbox.dlq.re-drive-max-age` ([`Config::dlq_re_drive_max_age`]).
    ///
    /// [`Config::dlq_re_drive_max_age`]: crate::Config::dlq_re_drive_max_age
    pub max_age: Duration,
    /// The person allowed older events (`allow_older` in the API, `--allow-older` on the command
    /// line).
    pub allow_older: bool,
}

/// A re-drive refused because it selects events older than the re-drive max age and older events
/// were not allowed. Nothing was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOldToReDrive {
    /// The selected events written longer ago than `max_age`.
    pub older: OlderEvents,
    /// The re-drive max age in force.
    pub max_age: Duration,
}

impl TooOldToReDrive {
    /// What to tell the person: how many selected events are older, the oldest age, the key, why
    /// it matters, and `flag`, how their tool allows older events (`--allow-older`,
    /// `"allow_older": true`).
    pub fn explain(&self, flag: &str) -> String {
        let were = if self.older.count == 1 { "was" } else { "were" };
        // Whole seconds: the age is for a person to read.
        let seconds = |age: Duration| humantime::format_duration(Duration::from_secs(age.as_secs()));
        let oldest = self.older.oldest_age.unwrap_or(self.max_age);
        format!(
            "{count} of the selected events {were} written more than {max_age} ago ({RE_DRIVE_MAX_AGE_KEY}), the \
             oldest {oldest} ago: a consumer whose inbox no longer keeps their ids (oncebox.inbox.clean-up.ttl) \
             refuses them as too old, and one without inbox retention may apply them a second time. Nothing \
             was changed; to re-drive them anyway, pass {flag}",
            count = self.older.count,
            max_age = seconds(self.max_age),
            oldest = seconds(oldest),
        )
    }
}

/// Whether setting `status` on `selection` may go ahead under `re_drive`: yes for any status but
/// `TO_RETRY`, when older events are allowed, or when no selected event (none `IN_PROCESS`, as a
/// change leaves those alone) was written more than `re_drive.max_age` ago; otherwise the older
/// events, to tell the person before anything changes. Reads no payloads
/// ([`DlqDao::older_than`]).
///
/// An event re-driven long after it was written reaches consumers that may have applied it and
/// forgotten its id since: an inbox with retention refuses it
/// ([`Inbox::admit`](crate::Inbox::admit)), one without may apply it twice.
pub async fn check_re_drive(
    dlq: &dyn DlqDao,
    selection: &DlqSelection,
    status: DlqStatus,
    re_drive: ReDrive,
) -> Result<std::result::Result<(), TooOldToReDrive>> {
    if status != DlqStatus::ToRetry || re_drive.allow_older {
        return Ok(Ok(()));
    }
    let older = dlq.older_than(selection, re_drive.max_age).await?;
    Ok(if older.count == 0 { Ok(()) } else { Err(TooOldToReDrive { older, max_age: re_drive.max_age }) })
}

/// What a change of one event came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneChange {
    /// Changed (or deleted).
    Done,
    /// No DLQ event has this id.
    NotFound,
    /// The transfer job is moving it back to the outbox right now; try again shortly.
    InProcess,
}

/// Sets the status of event `id`, unless it is absent or `IN_PROCESS`.
pub async fn set_one_status(dlq: &dyn DlqDao, id: Uuid, status: DlqStatus) -> Result<OneChange> {
    one(dlq, id, Some(settable(status)?)).await
}

/// Deletes event `id`, unless it is absent or `IN_PROCESS`.
pub async fn delete_one(dlq: &dyn DlqDao, id: Uuid) -> Result<OneChange> {
    one(dlq, id, None).await
}

/// Sets `status` on event `id`, or deletes it when `status` is `None`.
async fn one(dlq: &dyn DlqDao, id: Uuid, status: Option<DlqStatus>) -> Result<OneChange> {
    match dlq.get(id).await? {
        None => return Ok(OneChange::NotFound),
        Some(event) if event.dlq_status == DlqStatus::InProcess => return Ok(OneChange::InProcess),
        Some(_) => {}
    }
    let selection = DlqSelection::Ids(vec![id]);
    let changed = match status {
        Some(status) => dlq.set_status(&selection, status).await?,
        None => dlq.delete(&selection).await?,
    };
    // Found a moment ago and not changed now: the transfer job took it in between (the
    // statements leave IN_PROCESS rows alone).
    Ok(if changed == 0 { OneChange::InProcess } else { OneChange::Done })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::Utc;

    use super::*;
    use crate::event::{DlqCounts, DlqEvent, EventStatus, OutboxEvent};

    const DAY: Duration = Duration::from_secs(86_400);

    /// A DLQ in memory that answers [`DlqDao::older_than`] with the trait's default.
    #[derive(Default)]
    struct Shelf(Mutex<Vec<DlqEvent>>);

    impl Shelf {
        /// Adds an event of `event_type` written `age` ago, in `status`; its id.
        fn add(&self, event_type: &str, age: Duration, status: DlqStatus) -> Uuid {
            let written = Utc::now() - chrono::Duration::from_std(age).unwrap_or_default();
            let event = OutboxEvent {
                id: Uuid::now_v7(),
                event_type: event_type.into(),
                payload: "{}".into(),
                payload_type: "P".into(),
                headers: Default::default(),
                partition_key: None,
                status: EventStatus::Failed,
                attempts: 4,
                next_retry_at: written,
                created_at: written,
                updated_at: written,
                processed_at: None,
                last_error: None,
                claim_token: None,
            };
            let id = event.id;
            if let Ok(mut events) = self.0.lock() {
                events.push(DlqEvent { event, dlq_status: status, moved_at: Utc::now() });
            }
            id
        }

        fn events(&self) -> Vec<DlqEvent> {
            self.0.lock().map(|events| events.clone()).unwrap_or_default()
        }
    }

    #[async_trait::async_trait]
    impl DlqDao for Shelf {
        async fn transfer_to_dlq(&self, _limit: u32) -> Result<Vec<crate::OutboxEvent>> {
            Ok(Vec::new())
        }
        async fn transfer_from_dlq(&self, _limit: u32) -> Result<u64> {
            Ok(0)
        }
        async fn delete_resolved(&self, _older_than: Duration, _limit: u32) -> Result<u64> {
            Ok(0)
        }
        async fn get(&self, id: Uuid) -> Result<Option<DlqEvent>> {
            Ok(self.events().into_iter().find(|event| event.event.id == id))
        }
        async fn list(&self, filter: &DlqFilter, offset: u64, limit: u32) -> Result<Vec<DlqEvent>> {
            let matching = self.events().into_iter().filter(|event| {
                filter.event_type.as_ref().is_none_or(|wanted| &event.event.event_type == wanted)
            });
            Ok(matching.skip(offset as usize).take(limit as usize).collect())
        }
        async fn count(&self, _filter: &DlqFilter) -> Result<u64> {
            Ok(self.events().len() as u64)
        }
        async fn set_status(&self, _selection: &DlqSelection, _status: DlqStatus) -> Result<u64> {
            Ok(0)
        }
        async fn delete(&self, _selection: &DlqSelection) -> Result<u64> {
            Ok(0)
        }
        async fn counts(&self) -> Result<DlqCounts> {
            Ok(DlqCounts::default())
        }
        async fn older_than(&self, selection: &DlqSelection, age: Duration) -> Result<OlderEvents> {
            let now = Utc::now();
            let selected = |event: &DlqEvent| match selection {
                DlqSelection::Ids(ids) => ids.contains(&event.event.id),
                DlqSelection::EventType(event_type) => &event.event.event_type == event_type,
            };
            Ok(self.events().iter().filter(|event| selected(event)).fold(
                OlderEvents::default(),
                |found, event| {
                    let written = (now - event.event.created_at).to_std().unwrap_or_default();
                    let counted = event.dlq_status != DlqStatus::InProcess && written > age;
                    found.and(OlderEvents {
                        count: u64::from(counted),
                        oldest_age: counted.then_some(written),
                    })
                },
            ))
        }
    }

    #[tokio::test]
    async fn a_re_drive_of_events_older_than_the_max_age_needs_to_be_allowed() -> Result<()> {
        let shelf = Shelf::default();
        let young = shelf.add("orders", Duration::from_secs(3600), DlqStatus::Moved);
        let old = shelf.add("orders", 3 * DAY + Duration::from_secs(5), DlqStatus::Moved);
        let older_resolved = shelf.add("orders", 2 * DAY, DlqStatus::Resolved);
        let held = shelf.add("orders", 9 * DAY, DlqStatus::InProcess);
        let other_type = shelf.add("payments", 5 * DAY, DlqStatus::Moved);
        let rule = ReDrive { max_age: DAY, allow_older: false };
        let check = |selection: DlqSelection, status: DlqStatus, rule: ReDrive| {
            let shelf = &shelf;
            async move { check_re_drive(shelf, &selection, status, rule).await }
        };

        let ids = |ids: &[Uuid]| DlqSelection::Ids(ids.to_vec());
        assert_eq!(
            check(ids(&[young, held]), DlqStatus::ToRetry, rule).await?,
            Ok(()),
            "IN_PROCESS is left out"
        );
        assert_eq!(check(ids(&[]), DlqStatus::ToRetry, rule).await?, Ok(()));
        assert_eq!(check(ids(&[Uuid::now_v7()]), DlqStatus::ToRetry, rule).await?, Ok(()), "unknown ids");
        for status in [DlqStatus::Resolved, DlqStatus::Moved] {
            assert_eq!(check(ids(&[old]), status, rule).await?, Ok(()), "only a re-drive is asked about");
        }
        let allowed = ReDrive { allow_older: true, ..rule };
        assert_eq!(check(ids(&[old]), DlqStatus::ToRetry, allowed).await?, Ok(()));

        let refused = check(ids(&[young, old, older_resolved]), DlqStatus::ToRetry, rule).await?;
        let Err(too_old) = refused else { panic!("a re-drive of two old events went ahead") };
        assert_eq!(too_old.older.count, 2);
        assert!(too_old.older.oldest_age.is_some_and(|age| age >= 3 * DAY && age < 3 * DAY + DAY / 24));
        let message = too_old.explain("--allow-older");
        for says in [
            "2 of the selected events were written more than 1day ago",
            RE_DRIVE_MAX_AGE_KEY,
            "oldest 3days 5s ago",
            "pass --allow-older",
        ] {
            assert!(message.contains(says), "'{says}' missing from: {message}");
        }

        let by_type = check(DlqSelection::EventType("orders".into()), DlqStatus::ToRetry, rule).await?;
        assert_eq!(
            by_type.err().map(|too_old| too_old.older.count),
            Some(2),
            "one type, IN_PROCESS left out"
        );
        let one = check(ids(&[other_type]), DlqStatus::ToRetry, ReDrive { max_age: 6 * DAY, ..rule }).await?;
        assert_eq!(one, Ok(()), "younger than a longer max age");
        let one = check(ids(&[other_type]), DlqStatus::ToRetry, rule).await?;
        assert!(
            one.err().is_some_and(|too_old| too_old.explain("x").starts_with("1 of the selected events was"))
        );
        Ok(())
    }

    #[test]
    fn older_events_add_up_across_chunks() {
        let none = OlderEvents::from_aggregate(0, 0);
        assert_eq!(none, OlderEvents::default());
        let some = OlderEvents::from_aggregate(2, 90_000);
        assert_eq!(some.oldest_age, Some(Duration::from_secs(90)));
        let more = OlderEvents::from_aggregate(1, 120_000);
        assert_eq!(
            some.and(none).and(more),
            OlderEvents { count: 3, oldest_age: Some(Duration::from_secs(120)) }
        );
        assert_eq!(OlderEvents::from_aggregate(1, -5).oldest_age, Some(Duration::ZERO), "a clock step");
    }

    #[test]
    fn a_selection_is_ids_or_an_event_type() {
        let both = selection(Some(vec![Uuid::now_v7()]), Some("t".into()));
        assert!(both.err().is_some_and(|e| e.message().contains("not both")));
        assert!(selection(None, None).is_err());
        assert!(selection(Some(vec![]), None).is_err());
        let many = selection(Some(vec![Uuid::nil(); MAX_IDS + 1]), None);
        assert!(many.err().is_some_and(|e| e.message().contains("at most")));
        assert!(selection(None, Some(" ".into())).is_ok(), "a filter value needs no trimming");
        let empty = selection(None, Some(String::new()));
        assert!(empty.err().is_some_and(|e| e.message().starts_with("event_type must")));
        assert!(selection(None, Some("a\u{0}b".into())).is_err());
        assert!(selection(None, Some("é".repeat(255))).is_ok(), "255 characters, more bytes");
        assert!(selection(None, Some("e".repeat(256))).is_err());
        let by_type = selection(None, Some("order-created".into()));
        assert_eq!(by_type.ok(), Some(DlqSelection::EventType("order-created".into())));
    }

    #[test]
    fn pages_and_statuses_are_bounded() {
        assert_eq!(page(None, None).ok(), Some((0, DEFAULT_PAGE)));
        assert!(page(None, Some(0)).err().is_some_and(|e| e.message().contains("not 0")));
        assert!(page(None, Some(MAX_PAGE + 1)).is_err());
        assert!(page(Some(MAX_OFFSET + 1), None).err().is_some_and(|e| e.message().contains("offset")));
        assert!(settable(DlqStatus::InProcess).is_err());
        assert_eq!(settable(DlqStatus::ToRetry).ok(), Some(DlqStatus::ToRetry));
    }
}
