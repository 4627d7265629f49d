//! `oncebox status`: what waits, what is being sent, what failed, and how long the oldest
//! pending event has waited, per event type; then the DLQ.

use std::collections::BTreeMap;
use std::time::Duration;

use oncebox_core::{DlqStatus, EventStatus};
use serde_json::{Value, json};

use crate::database::Part;
use crate::text::{age, table};
use crate::{Failure, Target};

/// Per event type: pending, in process, processed, failed, and the oldest pending age.
#[derive(Default)]
struct OutboxLine {
    counts: [u64; 4],
    oldest_pending: Option<Duration>,
}

const OUTBOX_STATUSES: [EventStatus; 4] =
    [EventStatus::Pending, EventStatus::InProcess, EventStatus::Processed, EventStatus::Failed];
const DLQ_STATUSES: [DlqStatus; 4] =
    [DlqStatus::Moved, DlqStatus::ToRetry, DlqStatus::InProcess, DlqStatus::Resolved];

pub(crate) async fn run(target: &Target, json: bool) -> Result<(), Failure> {
    let (_, tables) = target.resolve()?;
    let database = target.connect(&tables).await?;

    let outbox = if database.has(Part::Events, &tables).await? {
        let counts = database.outbox().counts().await?;
        let mut lines: BTreeMap<String, OutboxLine> = BTreeMap::new();
        for (event_type, status, count) in counts.by_type_and_status {
            if let Some(at) = OUTBOX_STATUSES.iter().position(|known| *known == status) {
                lines.entry(event_type).or_default().counts[at] += count;
            }
        }
        for (event_type, waited) in counts.oldest_pending {
            lines.entry(event_type).or_default().oldest_pending = Some(waited);
        }
        Some(lines)
    } else {
        None
    };
    let dlq = if database.has(Part::Dlq, &tables).await? {
        let mut lines: BTreeMap<String, [u64; 4]> = BTreeMap::new();
        for (event_type, status, count) in database.dlq().counts().await?.by_type_and_status {
            if let Some(at) = DLQ_STATUSES.iter().position(|known| *known == status) {
                lines.entry(event_type).or_default()[at] += count;
            }
        }
        Some(lines)
    } else {
        None
    };

    if json {
        println!("{}", as_json(outbox.as_ref(), dlq.as_ref()));
        return Ok(());
    }
    match outbox {
        None => println!("outbox: no table {} (run `oncebox migrate`)", tables.events()),
        Some(lines) if lines.is_empty() => println!("outbox ({}): empty", tables.events()),
        Some(lines) => {
            let rows: Vec<Vec<String>> = lines
                .into_iter()
                .map(|(event_type, line)| {
                    let mut row = vec![event_type];
                    row.extend(line.counts.iter().map(u64::to_string));
                    row.push(line.oldest_pending.map_or_else(|| "-".to_owned(), age));
                    row
                })
                .collect();
            println!("outbox ({})", tables.events());
            println!(
                "{}",
                table(
                    &["event type", "pending", "in process", "processed", "failed", "oldest pending"],
                    &rows
                )
            );
        }
    }
    println!();
    match dlq {
        None => println!("dlq: no table {}", tables.dlq()),
        Some(lines) if lines.is_empty() => println!("dlq ({}): empty", tables.dlq()),
        Some(lines) => {
            let rows: Vec<Vec<String>> = lines
                .into_iter()
                .map(|(event_type, counts)| {
                    let mut row = vec![event_type];
                    row.extend(counts.iter().map(u64::to_string));
                    row
                })
                .collect();
            println!("dlq ({})", tables.dlq());
            println!("{}", table(&["event type", "moved", "to retry", "in process", "resolved"], &rows));
        }
    }
    Ok(())
}

fn as_json(outbox: Option<&BTreeMap<String, OutboxLine>>, dlq: Option<&BTreeMap<String, [u64; 4]>>) -> Value {
    let outbox = outbox.map(|lines| {
        lines
            .iter()
            .map(|(event_type, line)| {
                let mut entry = json!({ "event_type": event_type, "oldest_pending_seconds": line.oldest_pending.map(|waited| waited.as_secs_f64()) });
                for (status, count) in OUTBOX_STATUSES.iter().zip(line.counts) {
                    entry[status.as_str().to_ascii_lowercase()] = json!(count);
                }
                entry
            })
            .collect::<Vec<Value>>()
    });
    let dlq = dlq.map(|lines| {
        lines
            .iter()
            .map(|(event_type, counts)| {
                let mut entry = json!({ "event_type": event_type });
                for (status, count) in DLQ_STATUSES.iter().zip(counts) {
                    entry[status.as_str().to_ascii_lowercase()] = json!(count);
                }
                entry
            })
            .collect::<Vec<Value>>()
    });
    json!({ "outbox": outbox, "dlq": dlq })
}
