//! The inbox table outside any caller transaction.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{InboxDao, Result};
use sqlx::{MySqlConnection, MySqlPool, Row};
use uuid::Uuid;

use crate::error::{DUPLICATE_KEY, SqlxResultExt, database_error, error_number};
use crate::ids::{bind_ids, distinct};
use crate::statements::{MAX_IDS_PER_STATEMENT, Statements, id_slots};
use crate::time::{limit, micros};

/// [`InboxDao`] for MySQL and MariaDB: a record is a plain `INSERT`, and only the duplicate-key
/// error on the primary key `(consumer, id)` means "already recorded", so two instances racing on
/// the same id agree on which was first and every other failure still surfaces.
#[derive(Clone)]
pub struct MySqlInboxDao {
    pool: MySqlPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for MySqlInboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlInboxDao").field("table", &self.statements.tables.consumed()).finish()
    }
}

impl MySqlInboxDao {
    pub(crate) fn new(pool: MySqlPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }
}

/// Records `(consumer, id)` on `connection`; `true` when it was new. InnoDB rolls back only the
/// failed statement on a duplicate key, so a caller's transaction goes on unharmed.
pub(crate) async fn record(
    statements: &Statements,
    connection: &mut MySqlConnection,
    consumer: &str,
    id: Uuid,
) -> Result<bool> {
    let outcome =
        sqlx::query(statements.inbox_record.clone()).bind(consumer).bind(id).execute(connection).await;
    match outcome {
        Ok(_) => Ok(true),
        Err(error) if error_number(&error) == Some(DUPLICATE_KEY) => Ok(false),
        Err(error) => Err(database_error("recording a consumed event", error)),
    }
}

/// Records `ids` for `consumer` one by one on `connection` (each insert must tell new from
/// duplicate on its own); returns the new ones in input order, each once.
pub(crate) async fn record_many(
    statements: &Statements,
    connection: &mut MySqlConnection,
    consumer: &str,
    ids: &[Uuid],
) -> Result<Vec<Uuid>> {
    let mut new = Vec::new();
    for id in distinct(ids) {
        if record(statements, connection, consumer, id).await? {
            new.push(id);
        }
    }
    Ok(new)
}

#[async_trait]
impl InboxDao for MySqlInboxDao {
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
        let mut connection = self.pool.acquire().await.context("recording a consumed event")?;
        record(&self.statements, &mut connection, consumer, id).await
    }

    async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let context = "recording consumed events";
        // One transaction: all of the batch is recorded, or none of it.
        let mut tx = self.pool.begin().await.context(context)?;
        let new = record_many(&self.statements, &mut tx, consumer, ids).await?;
        tx.commit().await.context(context)?;
        Ok(new)
    }

    async fn forget(&self, consumer: &str, id: Uuid) -> Result<bool> {
        let result = sqlx::query(self.statements.inbox_forget.clone())
            .bind(consumer)
            .bind(id)
            .execute(&self.pool)
            .await
            .context("forgetting a consumed event")?;
        Ok(result.rows_affected() > 0)
    }

    async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let context = "looking up consumed events";
        let mut recorded = HashSet::new();
        for chunk in ids.chunks(MAX_IDS_PER_STATEMENT) {
            let statement = self.statements.inbox_consumed.with_ids(id_slots(chunk.len()));
            let rows = bind_ids(sqlx::query(statement).bind(consumer), chunk)
                .fetch_all(&self.pool)
                .await
                .context(context)?;
            for row in rows {
                recorded
                    .insert(row.try_get::<Uuid, _>("id").map_err(|error| database_error(context, error))?);
            }
        }
        Ok(ids.iter().copied().filter(|id| recorded.remove(id)).collect())
    }

    async fn delete_older_than(&self, older_than: Duration, max_rows: u32) -> Result<u64> {
        if max_rows == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.inbox_delete_older_than.clone())
            .bind(micros(older_than))
            .bind(limit(max_rows))
            .execute(&self.pool)
            .await
            .context("deleting old consumed events")?;
        Ok(result.rows_affected())
    }
}
