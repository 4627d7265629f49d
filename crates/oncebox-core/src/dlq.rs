//! The rules of a person's work on the dead letter queue, shared by every tool that offers it (the
//! REST API, the command line): paging bounds, what a selection may be, and when a single event
//! may be changed.

use uuid::Uuid;

use crate::event::{DlqFilter, DlqSelection, DlqStatus};
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
    use super::*;

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
