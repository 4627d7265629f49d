//! The durable inbox DAO: messages stored as a plain insert (ORA-00001 means "stored before"),
//! claimed as the outbox's rows are (a locking cursor that fetches the batch and an `UPDATE` by
//! ids in one short transaction), settled by single `UPDATE`s fenced by the claim token.

use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::event::last_error_text;
use oncebox_core::stored::{
    InboxBatch, InboxCount, InboxMessage, InboxSettlement, LEASE_RAN_OUT, NewInboxMessage,
};
use oncebox_core::{Error, ErrorKind, Result, StoredInboxDao};
use oracle::Connection;
use oracle::sql_type::OracleType;
use uuid::Uuid;

use crate::error::{OraResultExt, database_error, is_unique_violation};
use crate::row::{Decoded, headers_to_text, id_bytes};
use crate::session::{
    Bind, execute, execute_over_ids, lock_ids, micros, query, query_over_ids, rows, store_daos,
};
use crate::statements::Statements;

store_daos! {
    /// [`StoredInboxDao`] on Oracle.
    OraStoredInboxDao: inbox;
}

/// Settles `(consumer, id)` PROCESSED on `connection` while `token` still holds its claim; whether
/// it did. Runs in whatever transaction the connection has open: the DAO's own, or a
/// transactional handler's, where it commits or rolls back with the handler's effect.
pub(crate) fn finish_on(
    statements: &Statements,
    connection: &Connection,
    consumer: &str,
    id: Uuid,
    token: Uuid,
    context: &str,
) -> Result<bool> {
    let (id, token) = (id_bytes(id), id_bytes(token));
    let binds: [Bind<'_>; 3] = [("consumer", &consumer), ("id", &id), ("claim_token", &token)];
    Ok(execute(connection, &statements.stored_processed, &binds, context)? == 1)
}

/// A message as `stored_insert.sql` binds it. The payload is `None` when empty: Oracle keeps zero
/// bytes as NULL anyway (as it keeps `''`), and the row reads NULL back as the empty payload.
struct StoredRow {
    consumer: String,
    id: Vec<u8>,
    event_type: String,
    payload_type: Option<String>,
    payload: Option<Vec<u8>>,
    headers: String,
    source: String,
    correlation_id: Option<String>,
    /// The message's creation time as UTC wall time: a `DateTime<Utc>` would be bound as a
    /// `TIMESTAMP WITH TIME ZONE` and converted to the session's zone on the way into the
    /// zone-less column.
    created_at: Option<chrono::NaiveDateTime>,
}

impl StoredRow {
    fn of(message: &NewInboxMessage) -> Result<Self> {
        Ok(Self {
            consumer: message.consumer.clone(),
            id: id_bytes(message.id),
            event_type: message.event_type.clone(),
            payload_type: message.payload_type.clone(),
            payload: (!message.payload.is_empty()).then(|| message.payload.clone()),
            headers: headers_to_text(&message.headers)?,
            source: message.source.clone(),
            correlation_id: message.correlation_id.clone(),
            created_at: message.created_at.map(|time| time.naive_utc()),
        })
    }

    /// Inserts the row; `false` on ORA-00001 (the consumer stored this id before). A duplicate
    /// fails only its own statement, so nothing else in the transaction is lost.
    fn insert(&self, statements: &Statements, connection: &Connection, context: &str) -> Result<bool> {
        // Bound as LOBs, so neither is cut at a VARCHAR2 bind's 32,767 bytes.
        let payload = (&self.payload, &OracleType::BLOB);
        let headers = (&self.headers, &OracleType::CLOB);
        let binds: [Bind<'_>; 9] = [
            ("consumer", &self.consumer),
            ("id", &self.id),
            ("event_type", &self.event_type),
            ("payload_type", &self.payload_type),
            ("payload", &payload),
            ("headers", &headers),
            ("source", &self.source),
            ("correlation_id", &self.correlation_id),
            ("created_at", &self.created_at),
        ];
        match connection.execute_named(&statements.stored_insert, &binds) {
            Ok(_) => Ok(true),
            Err(error) if is_unique_violation(&error) => Ok(false),
            Err(error) => Err(database_error(context, error)),
        }
    }
}

/// Chooses one of the statements.
type Pick = fn(&Statements) -> &str;

/// A settlement as bound: the statement's pick, the retry delay in microseconds (for
/// `stored_retry.sql` only) and the error text, cut to what `last_error` holds.
fn settle_binds(settlement: &InboxSettlement) -> (Pick, Option<i64>, Option<String>) {
    match settlement {
        InboxSettlement::Processed => (|s| &s.stored_processed, None, None),
        InboxSettlement::Retry { after, error } => {
            (|s| &s.stored_retry, Some(micros(*after)), Some(last_error_text(error).to_owned()))
        }
        InboxSettlement::Failed { error } => {
            (|s| &s.stored_failed, None, Some(last_error_text(error).to_owned()))
        }
    }
}

#[async_trait]
impl StoredInboxDao for OraStoredInboxDao {
    async fn store(&self, message: &NewInboxMessage) -> Result<bool> {
        let row = StoredRow::of(message)?;
        self.0
            .call("storing an inbox message", move |connection, statements, context| {
                row.insert(statements, connection, context)
            })
            .await
    }

    async fn claim(&self, consumer: &str, event_type: &str, max_rows: u32) -> Result<InboxBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = InboxBatch { claim_token, messages: Vec::new() };
        if max_rows == 0 {
            return Ok(batch);
        }
        let context = format!("claiming inbox messages of {consumer} ({event_type})");
        let (owner, kind) = (consumer.to_owned(), event_type.to_owned());
        // One short transaction: lock the batch, mark it, commit.
        let taken = self
            .0
            .call(context.clone(), move |connection, statements, context| {
                let binds: [Bind<'_>; 2] = [("consumer", &owner), ("event_type", &kind)];
                let ids = lock_ids(connection, &statements.stored_due, &binds, max_rows, context)?;
                if ids.is_empty() {
                    return Ok(ids);
                }
                let token = id_bytes(claim_token);
                let first: [Bind<'_>; 2] = [("claim_token", &token), ("consumer", &owner)];
                execute_over_ids(connection, &statements.stored_mark, &first, &ids, context)?;
                Ok(ids)
            })
            .await?;
        if taken.is_empty() {
            return Ok(batch);
        }
        // Read after the commit, as the other dialects do: the rows are the claim's whatever
        // happens next, and a read that fails leaves them to stuck recovery, which counts the
        // lost run, instead of rolling back a claim that would be taken again at once.
        let owner = consumer.to_owned();
        batch.messages = self
            .0
            .call(context, move |connection, statements, context| {
                let token = id_bytes(claim_token);
                let binds: [Bind<'_>; 2] = [("consumer", &owner), ("claim_token", &token)];
                let rows = query_over_ids(connection, &statements.stored_claimed, &binds, &taken, context)?;
                let decoded =
                    Decoded::of(&rows, statements.tables.inbox(), |columns, id| columns.inbox_message(id))?;
                // The batch is all or nothing, as on the other dialects.
                match decoded.undecodable.into_iter().next() {
                    Some((_, error)) => Err(error),
                    None => Ok(decoded.rows),
                }
            })
            .await?;
        // Read in chunks of ids: put back in claim order.
        batch.sort_oldest_first();
        Ok(batch)
    }

    async fn settle(
        &self,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        settlement: &InboxSettlement,
    ) -> Result<bool> {
        let consumer = consumer.to_owned();
        let (pick, after, error) = settle_binds(settlement);
        self.0
            .call("settling an inbox message", move |connection, statements, context| {
                let (id, token) = (id_bytes(id), id_bytes(token));
                let mut binds: Vec<Bind<'_>> = Vec::with_capacity(5);
                binds.push(("consumer", &consumer));
                binds.push(("id", &id));
                binds.push(("claim_token", &token));
                if let Some(after) = &after {
                    binds.push(("after_micros", after));
                }
                if let Some(error) = &error {
                    binds.push(("last_error", error));
                }
                Ok(execute(connection, pick(statements), &binds, context)? == 1)
            })
            .await
    }

    async fn recover_stuck(&self, consumer: &str, lease: Duration, max_attempts: u32) -> Result<u64> {
        let consumer = consumer.to_owned();
        self.0
            .call("recovering stuck inbox messages", move |connection, statements, context| {
                let (lease, max_attempts) = (micros(lease), i64::from(max_attempts));
                let binds: [Bind<'_>; 4] = [
                    ("consumer", &consumer),
                    ("max_attempts", &max_attempts),
                    ("last_error", &LEASE_RAN_OUT),
                    ("lease_micros", &lease),
                ];
                execute(connection, &statements.stored_recover, &binds, context)
            })
            .await
    }

    async fn delete_processed(&self, consumer: &str, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let consumer = consumer.to_owned();
        self.0
            .call("deleting processed inbox messages", move |connection, statements, context| {
                let (older, limit) = (micros(older_than), rows(max_rows));
                let binds: [Bind<'_>; 3] =
                    [("consumer", &consumer), ("older_than_micros", &older), ("max_rows", &limit)];
                execute(connection, &statements.stored_delete, &binds, context)
            })
            .await
    }

    async fn get(&self, consumer: &str, id: Uuid) -> Result<Option<InboxMessage>> {
        let consumer = consumer.to_owned();
        self.0
            .call("reading an inbox message", move |connection, statements, context| {
                let id = id_bytes(id);
                let binds: [Bind<'_>; 2] = [("consumer", &consumer), ("id", &id)];
                let rows = query(connection, &statements.stored_get, &binds, context)?;
                Decoded::one(&rows, statements.tables.inbox(), |columns, id| columns.inbox_message(id))
            })
            .await
    }

    async fn counts(&self) -> Result<Vec<InboxCount>> {
        self.0
            .call("counting inbox messages", move |connection, statements, context| {
                let table = statements.tables.inbox();
                query(connection, &statements.stored_counts, &[], context)?
                    .iter()
                    .map(|row| {
                        let (consumer, event_type, status, count): (String, String, String, i64) =
                            row.get_as().context(context)?;
                        let status = status.parse().map_err(|_| {
                            Error::new(
                                ErrorKind::Decode,
                                format!("{table}.status: unknown inbox status '{status}'"),
                            )
                        })?;
                        Ok(InboxCount {
                            consumer,
                            event_type,
                            status,
                            rows: u64::try_from(count).unwrap_or_default(),
                        })
                    })
                    .collect()
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::TableNames;

    #[test]
    fn settlements_pick_their_statement_and_bind_delay_and_error() {
        let statements = Statements::new(&TableNames::default());
        let (pick, after, error) = settle_binds(&InboxSettlement::Processed);
        assert_eq!((pick(&statements), after, error), (statements.stored_processed.as_str(), None, None));
        let retry = InboxSettlement::Retry { after: Duration::from_millis(1500), error: "timeout".into() };
        let (pick, after, error) = settle_binds(&retry);
        assert_eq!(pick(&statements), statements.stored_retry);
        assert_eq!((after, error.as_deref()), (Some(1_500_000), Some("timeout")));
        let failed = InboxSettlement::Failed { error: "é".repeat(5_000) };
        let (pick, after, error) = settle_binds(&failed);
        assert_eq!((pick(&statements), after), (statements.stored_failed.as_str(), None));
        // last_error is VARCHAR2(1000 CHAR): the text is cut to what the column holds.
        assert_eq!(error.map(|text| text.chars().count()), Some(oncebox_core::event::LAST_ERROR_MAX_CHARS));
    }

    #[test]
    fn messages_bind_an_empty_payload_as_null_and_times_as_utc() {
        let created = chrono::DateTime::parse_from_rfc3339("2026-12-06T10:11:12.123456+02:00").unwrap();
        let message = NewInboxMessage {
            consumer: "billing".into(),
            id: Uuid::now_v7(),
            event_type: "order-created".into(),
            payload_type: None,
            payload: Vec::new(),
            headers: Default::default(),
            source: "queue 'billing'".into(),
            correlation_id: None,
            created_at: Some(created.with_timezone(&chrono::Utc)),
        };
        let row = StoredRow::of(&message).unwrap();
        assert_eq!(row.payload, None);
        assert_eq!(row.headers, "{}");
        assert_eq!(row.id, message.id.as_bytes());
        assert_eq!(
            row.created_at.map(|time| time.to_string()).as_deref(),
            Some("2026-12-06 08:11:12.123456")
        );
        let bytes = NewInboxMessage { payload: vec![0xff, 0x00], ..message };
        assert_eq!(StoredRow::of(&bytes).unwrap().payload, Some(vec![0xff, 0x00]));
    }
}
