//! The inbox table outside any caller transaction.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{InboxDao, Result};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::statements::Statements;
use crate::time::{limit, micros};

/// [`InboxDao`] for PostgreSQL: records are `INSERT … ON CONFLICT DO NOTHING`, so a duplicate is
/// detected by the primary key, also between instances racing on the same id.
#[derive(Clone)]
pub struct PgInboxDao {
    pool: PgPool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for PgInboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgInboxDao").field("table", &self.statements.tables.consumed()).finish()
    }
}

impl PgInboxDao {
    pub(crate) fn new(pool: PgPool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }
}

/// Records `(consumer, id)` on `connection`; `true` when it was new.
pub(crate) async fn record(
    statements: &Statements,
    connection: &mut PgConnection,
    consumer: &str,
    id: Uuid,
) -> Result<bool> {
    let result = sqlx::query(statements.inbox_record.clone())
        .bind(consumer)
        .bind(id)
        .execute(connection)
        .await
        .context("recording a consumed event")?;
    Ok(result.rows_affected() == 1)
}

/// Records `ids` for `consumer` in one statement; returns the new ones in input order, each once.
pub(crate) async fn record_many(
    statements: &Statements,
    connection: &mut PgConnection,
    consumer: &str,
    ids: &[Uuid],
) -> Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(Uuid,)> = sqlx::query_as(statements.inbox_record_many.clone())
        .bind(consumer)
        .bind(ids)
        .fetch_all(connection)
        .await
        .context("recording consumed events")?;
    let mut new: HashSet<Uuid> = rows.into_iter().map(|(id,)| id).collect();
    // `remove` keeps a duplicate in the input from being reported twice.
    Ok(ids.iter().copied().filter(|id| new.remove(id)).collect())
}

#[async_trait]
impl InboxDao for PgInboxDao {
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
        let mut connection = self.pool.acquire().await.context("recording a consumed event")?;
        record(&self.statements, &mut connection, consumer, id).await
    }

    async fn record_many(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.pool.acquire().await.context("recording consumed events")?;
        record_many(&self.statements, &mut connection, consumer, ids).await
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
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(Uuid,)> = sqlx::query_as(self.statements.inbox_consumed.clone())
            .bind(consumer)
            .bind(ids)
            .fetch_all(&self.pool)
            .await
            .context("looking up consumed events")?;
        let mut recorded: HashSet<Uuid> = rows.into_iter().map(|(id,)| id).collect();
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
