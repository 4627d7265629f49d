//! The inbox table outside any caller transaction.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use oncebox_core::{InboxDao, Result};
use sqlx::SqlitePool;
use uuid::Uuid;

use crate::error::SqlxResultExt;
use crate::row::decode_id;
use crate::statements::Statements;
use crate::time::earlier_by;
use crate::writer::record_many;

/// [`InboxDao`] for SQLite: each call is one autocommitted statement.
#[derive(Clone)]
pub struct SqliteInboxDao {
    pool: SqlitePool,
    statements: Arc<Statements>,
}

impl std::fmt::Debug for SqliteInboxDao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteInboxDao").field("table", &self.statements.tables.consumed()).finish()
    }
}

impl SqliteInboxDao {
    pub(crate) fn new(pool: SqlitePool, statements: Arc<Statements>) -> Self {
        Self { pool, statements }
    }
}

#[async_trait]
impl InboxDao for SqliteInboxDao {
    async fn record(&self, consumer: &str, id: Uuid) -> Result<bool> {
        let result = sqlx::query(self.statements.inbox_record.clone())
            .bind(consumer)
            .bind(id.hyphenated())
            .execute(&self.pool)
            .await
            .context("recording a consumed event")?;
        Ok(result.rows_affected() == 1)
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
            .bind(id.hyphenated())
            .execute(&self.pool)
            .await
            .context("forgetting a consumed event")?;
        Ok(result.rows_affected() > 0)
    }

    async fn consumed(&self, consumer: &str, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String,)> = sqlx::query_as(self.statements.inbox_consumed.clone())
            .bind(consumer)
            .bind(serde_json::to_string(ids)?)
            .fetch_all(&self.pool)
            .await
            .context("looking up consumed events")?;
        let table = self.statements.tables.consumed();
        let mut recorded =
            rows.iter().map(|(text,)| decode_id(text, table)).collect::<Result<HashSet<Uuid>>>()?;
        Ok(ids.iter().copied().filter(|id| recorded.remove(id)).collect())
    }

    async fn delete_older_than(&self, older_than: Duration, limit: u32) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let result = sqlx::query(self.statements.inbox_delete_older_than.clone())
            .bind(earlier_by(older_than))
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await
            .context("deleting old consumed events")?;
        Ok(result.rows_affected())
    }
}
