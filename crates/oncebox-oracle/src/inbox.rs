//! The inbox DAO: a plain insert per id, where only ORA-00001 means "already recorded".

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::inbox::{distinct, in_input_order};
use oncebox_core::{Error, ErrorKind, InboxClaim, InboxDao, Result};
use oracle::Connection;
use uuid::Uuid;

use crate::error::{OraResultExt, database_error, is_unique_violation};
use crate::row::{id_bytes, id_from_bytes};
use crate::session::{Bind, execute, micros, query_over_ids, store_daos};
use crate::statements::Statements;

store_daos! {
    /// [`InboxDao`] on Oracle.
    OraInboxDao: consumed;
}

/// Records `(consumer, id)` on `connection`; `true` when it was new. A duplicate fails only its
/// own statement (Oracle rolls back the statement, not the transaction), so a caller's
/// transaction goes on.
pub(crate) fn record_on(
    statements: &Statements,
    connection: &Connection,
    consumer: &str,
    id: Uuid,
) -> Result<bool> {
    let id = id_bytes(id);
    let binds: [Bind<'_>; 2] = [("consumer", &consumer), ("id", &id)];
    match connection.execute_named(&statements.inbox_record, &binds) {
        Ok(_) => Ok(true),
        Err(error) if is_unique_violation(&error) => Ok(false),
        Err(error) => Err(database_error("recording a consumed event", error)),
    }
}

/// Records several ids on `connection`; the new ones in input order, each once.
pub(crate) fn record_many_on(
    statements: &Statements,
    connection: &Connection,
    consumer: &str,
    ids: &[Uuid],
) -> Result<Vec<Uuid>> {
    let mut new = Vec::new();
    for id in distinct(ids) {
        if record_on(statements, connection, consumer, id)? {
            new.push(id);
        }
    }
    Ok(new)
}

impl OraInboxDao {
    /// Runs the statement `pick` chooses on one claim, fenced by its token; whether it changed it.
    async fn fenced(
        &self,
        pick: fn(&Statements) -> &str,
        consumer: &str,
        id: Uuid,
        token: Uuid,
        context: &'static str,
    ) -> Result<bool> {
        let consumer = consumer.to_owned();
        self.0
            .call(context, move |connection, statements, context| {
                let (id, token) = (id_bytes(id), id_bytes(token));
                let binds: [Bind<'_>; 3] = [("consumer", &consumer), ("id", &id), ("claim_token", &token)];
                Ok(execute(connection, pick(statements), &binds, context)? == 1)
            })
            .await
    }
}

#[async_trait]
impl InboxDao for OraInboxDao {
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
        let consumer = consumer.to_owned();
        self.0
            .call("recording a consumed event", move |connection, statements, _| {
                record_on(statements, connection, &consumer, id)
            })
            .await
    }

    async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (consumer, ids) = (consumer.to_owned(), ids.to_vec());
        self.0
            .call("recording consumed events", move |connection, statements, _| {
                record_many_on(statements, connection, &consumer, &ids)
            })
            .await
    }

    async fn claim(&self, consumer: &str, id: Uuid, lease: Duration) -> Result<InboxClaim> {
        let consumer = consumer.to_owned();
        self.0
            .call("claiming a consumed event", move |connection, statements, context| {
                let token = Uuid::new_v4();
                let (raw_id, raw_token) = (id_bytes(id), id_bytes(token));
                let binds: [Bind<'_>; 3] =
                    [("consumer", &consumer), ("id", &raw_id), ("claim_token", &raw_token)];
                match connection.execute_named(&statements.inbox_claim, &binds) {
                    Ok(_) => return Ok(InboxClaim::Taken(token)),
                    Err(error) if is_unique_violation(&error) => {}
                    Err(error) => return Err(database_error(context, error)),
                }
                let lease = micros(lease);
                let binds: [Bind<'_>; 4] = [
                    ("consumer", &consumer),
                    ("id", &raw_id),
                    ("claim_token", &raw_token),
                    ("lease_micros", &lease),
                ];
                if execute(connection, &statements.inbox_take_over, &binds, context)? == 1 {
                    return Ok(InboxClaim::Taken(token));
                }
                let binds: [Bind<'_>; 1] = [("consumer", &consumer)];
                let rows =
                    query_over_ids(connection, &statements.inbox_consumed, &binds, &[raw_id], context)?;
                // Not applied: in flight within its lease, or released a moment ago. Either way
                // the delivery runs again later and claims it then.
                Ok(if rows.is_empty() { InboxClaim::Held } else { InboxClaim::Done })
            })
            .await
    }

    async fn finish(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        self.fenced(
            |statements| &statements.inbox_finish,
            consumer,
            id,
            token,
            "marking a consumed event applied",
        )
        .await
    }

    async fn release(&self, consumer: &str, id: Uuid, token: Uuid) -> Result<bool> {
        self.fenced(|statements| &statements.inbox_release, consumer, id, token, "releasing a consumed event")
            .await
    }

    async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (consumer, wanted) = (consumer.to_owned(), ids.to_vec());
        self.0
            .call("looking up consumed events", move |connection, statements, context| {
                let stored: Vec<Vec<u8>> = wanted.iter().copied().map(id_bytes).collect();
                let binds: [Bind<'_>; 1] = [("consumer", &consumer)];
                let rows = query_over_ids(connection, &statements.inbox_consumed, &binds, &stored, context)?;
                let mut recorded = HashSet::new();
                for row in rows {
                    let raw: Vec<u8> = row.get("ID").context(context)?;
                    let id = id_from_bytes(&raw).map_err(|problem| {
                        Error::new(
                            ErrorKind::Decode,
                            format!("{}.id: {problem}", statements.tables.consumed()),
                        )
                    })?;
                    recorded.insert(id);
                }
                Ok(in_input_order(&wanted, recorded))
            })
            .await
    }

    async fn delete_older_than(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        self.0
            .delete_aged(|s| &s.inbox_delete_older_than, older_than, max_rows, "deleting old consumed events")
            .await
    }
}
