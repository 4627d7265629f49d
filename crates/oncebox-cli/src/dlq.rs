//! `oncebox dlq …`: the REST API's operations from a shell, with its rules (`oncebox_core::dlq`).

use std::time::Duration;

use oncebox_core::dlq::{self, OneChange, ReDrive};
use oncebox_core::{Config, DlqDao, DlqEvent, DlqFilter, DlqSelection, DlqStatus};
use serde_json::{Value, json};

use crate::text::{instant, short, table};
use crate::{DlqCommand, Failure, Selected};

pub(crate) async fn run(command: DlqCommand) -> Result<(), Failure> {
    match command {
        DlqCommand::List { target, status, event_type, offset, limit, json } => {
            let (offset, limit) = dlq::page(offset, limit)?;
            let filter = dlq::filter(status, event_type)?;
            let (_, tables) = target.resolve()?;
            let dao = target.connect(&tables).await?.dlq();
            list(dao.as_ref(), &filter, offset, limit, json).await
        }
        DlqCommand::Show { target, id, json } => {
            let (_, tables) = target.resolve()?;
            let dao = target.connect(&tables).await?.dlq();
            let event = dao.get(id).await?.ok_or_else(|| Failure::work(format!("no DLQ event {id}")))?;
            if json {
                println!("{:#}", view(&event));
            } else {
                println!("{}", show(&event));
            }
            Ok(())
        }
        DlqCommand::Retry { selected, allow_older, re_drive_max_age } => {
            let re_drive = ReDriveFlags { allow_older, max_age: re_drive_max_age };
            change(selected, Some(DlqStatus::ToRetry), "retried", re_drive).await
        }
        DlqCommand::Resolve(selected) => {
            change(selected, Some(DlqStatus::Resolved), "resolved", ReDriveFlags::default()).await
        }
        DlqCommand::Delete { selected, yes } => {
            if !yes {
                return Err(Failure::usage(
                    "a delete cannot be undone: add --yes to delete (retry or resolve keep the event)",
                ));
            }
            change(selected, None, "deleted", ReDriveFlags::default()).await
        }
    }
}

async fn list(
    dao: &dyn DlqDao,
    filter: &DlqFilter,
    offset: u64,
    limit: u32,
    json: bool,
) -> Result<(), Failure> {
    let events = dao.list(filter, offset, limit).await?;
    let total = dao.count(filter).await?;
    if json {
        let events: Vec<Value> = events.iter().map(view).collect();
        println!("{}", json!({ "events": events, "total": total, "offset": offset, "limit": limit }));
        return Ok(());
    }
    if events.is_empty() {
        println!("no DLQ events ({total} match the filters)");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|dead| {
            vec![
                dead.event.id.to_string(),
                dead.event.event_type.clone(),
                dead.dlq_status.to_string(),
                dead.event.attempts.to_string(),
                instant(dead.moved_at),
                short(dead.event.last_error.as_deref().unwrap_or("-"), 60),
            ]
        })
        .collect();
    println!("{}", table(&["id", "event type", "status", "attempts", "moved at", "last error"], &rows));
    let first = offset + 1;
    let last = offset + events.len() as u64;
    println!("{first}–{last} of {total}");
    Ok(())
}

/// The event as the REST API shows it: the outbox row's fields with `dlq_status` and `moved_at`.
fn view(dead: &DlqEvent) -> Value {
    let event = &dead.event;
    json!({
        "id": event.id,
        "event_type": event.event_type,
        "payload_type": event.payload_type,
        "payload": event.payload,
        "headers": event.headers,
        "partition_key": event.partition_key,
        "attempts": event.attempts,
        "last_error": event.last_error,
        "created_at": event.created_at,
        "updated_at": event.updated_at,
        "dlq_status": dead.dlq_status,
        "moved_at": dead.moved_at,
    })
}

fn show(dead: &DlqEvent) -> String {
    let event = &dead.event;
    let mut rows = vec![
        vec!["id".to_owned(), event.id.to_string()],
        vec!["event type".to_owned(), event.event_type.clone()],
        vec!["payload type".to_owned(), event.payload_type.clone()],
        vec!["status".to_owned(), dead.dlq_status.to_string()],
        vec!["attempts".to_owned(), event.attempts.to_string()],
        vec!["last error".to_owned(), event.last_error.clone().unwrap_or_else(|| "-".to_owned())],
        vec!["partition key".to_owned(), event.partition_key.clone().unwrap_or_else(|| "-".to_owned())],
        vec!["created at".to_owned(), instant(event.created_at)],
        vec!["moved at".to_owned(), instant(dead.moved_at)],
    ];
    for (name, value) in &event.headers {
        rows.push(vec![format!("header {name}"), value.clone()]);
    }
    let payload = serde_json::from_str::<Value>(&event.payload)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| event.payload.clone());
    let fields = table(&["field", "value"], &rows);
    // The header line of the table says nothing here: the fields name themselves.
    let fields = fields.split_once('\n').map_or(fields.as_str(), |(_, rest)| rest);
    format!("{fields}\npayload:\n{payload}")
}

/// What `retry` was told about old events: `--allow-older`, and `--re-drive-max-age` when given.
#[derive(Debug, Clone, Copy, Default)]
struct ReDriveFlags {
    allow_older: bool,
    max_age: Option<Duration>,
}

impl ReDriveFlags {
    /// The rule in force: `--re-drive-max-age`, else `oncebox.outbox.dlq.re-drive-max-age` of the
    /// config file, else its default.
    fn rule(self, config: Option<&Config>) -> ReDrive {
        let max_age = self.max_age.unwrap_or_else(|| {
            config.map_or(oncebox_core::config::DEFAULT_RE_DRIVE_MAX_AGE, Config::dlq_re_drive_max_age)
        });
        ReDrive { max_age, allow_older: self.allow_older }
    }
}

/// Sets `status` on the selected events, or deletes them when it is `None`; `done` names the
/// change in what is printed. A re-drive of events older than the re-drive max age is refused
/// before anything changes unless `re_drive` allows older events.
async fn change(
    selected: Selected,
    status: Option<DlqStatus>,
    done: &str,
    re_drive: ReDriveFlags,
) -> Result<(), Failure> {
    let Selected { target, ids, event_type } = selected;
    let ids = (!ids.is_empty()).then_some(ids);
    let selection = dlq::selection(ids, event_type)?;
    if let Some(status) = status {
        dlq::settable(status)?;
    }
    let (config, tables) = target.resolve()?;
    let dao = target.connect(&tables).await?.dlq();
    if let Some(status) = status {
        dlq::check_re_drive(dao.as_ref(), &selection, status, re_drive.rule(config.as_ref()))
            .await?
            .map_err(|too_old| Failure::usage(too_old.explain("--allow-older")))?;
    }
    match selection {
        DlqSelection::EventType(event_type) => {
            let selection = DlqSelection::EventType(event_type.clone());
            let changed = match status {
                Some(status) => dao.set_status(&selection, status).await?,
                None => dao.delete(&selection).await?,
            };
            let events = if changed == 1 { "event" } else { "events" };
            println!("{done} {changed} DLQ {events} of type {event_type} (IN_PROCESS ones are left alone)");
            Ok(())
        }
        DlqSelection::Ids(ids) => {
            let mut missed = 0;
            for id in &ids {
                let outcome = match status {
                    Some(status) => dlq::set_one_status(dao.as_ref(), *id, status).await?,
                    None => dlq::delete_one(dao.as_ref(), *id).await?,
                };
                match outcome {
                    OneChange::Done => println!("{done} {id}"),
                    OneChange::NotFound => {
                        missed += 1;
                        eprintln!("{id}: no DLQ event has this id");
                    }
                    OneChange::InProcess => {
                        missed += 1;
                        eprintln!("{id}: IN_PROCESS (being moved back to the outbox): try again shortly");
                    }
                }
            }
            if missed == 0 {
                Ok(())
            } else {
                Err(Failure::work(format!("{done} {} of {} events", ids.len() - missed, ids.len())))
            }
        }
    }
}
