//! The SQLite SQL of oncebox: every statement rendered once for the configured table names, how
//! values are bound, and the operations whose shape is SQLite's own.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::SecondsFormat;
use oncebox_core::event::last_error_text;
use oncebox_core::{ClaimedBatch, OutboxEvent, Result, SettleReport, Settlement, TableNames};
use oncebox_sqlx::{
    BoundQuery, DecodeRow, Param, Queries, SqlxResultExt, Statement, Statements, database_error, limit,
    sql_files,
};
use sqlx::sqlite::SqliteQueryResult;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr, Sqlite, SqlitePool};
use tracing::warn;
use uuid::Uuid;

use crate::error::SqliteServerErrors;
use crate::row::SqliteRowFormat;
use crate::time::{earlier_by, later_by};

/// The strftime format of every stored timestamp: UTC, milliseconds, one fixed width, so that text
/// order is time order.
const TIMESTAMP_FORMAT: &str = "'%Y-%m-%dT%H:%M:%fZ'";
/// The database clock's now in [`TIMESTAMP_FORMAT`]. SQLite keeps `'now'` fixed within one
/// statement step, so every use in a statement sees the same instant.
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// The migrations, in order, as shipped in `migrations/sqlite/`.
const MIGRATIONS: [(&str, &str); 7] = oncebox_sqlx::migrations!("sqlite");

/// Columns bound per row by the multi-row outbox insert.
pub(crate) const INSERT_EVENT_BINDS: usize = 6;

/// The SQL of the SQLite dialect for one set of table names: the statements the sqlx DAOs share,
/// and SQLite's own claim, settle and DLQ transfers, each one `BEGIN IMMEDIATE` transaction:
/// SQLite has one writer at a time, so a claim holds the write lock from its first read and no two
/// claimers see the same row, and a transferred row is in exactly one table at every commit.
#[derive(Debug)]
pub struct SqliteQueries {
    pub(crate) common: Statements,
    pub(crate) schema_events: SqlStr,
    pub(crate) schema_dlq: SqlStr,
    pub(crate) schema_consumed: SqlStr,
    pub(crate) schema_jobs: SqlStr,
    /// Adds `recoveries` to an outbox table that lacks it (run only after checking).
    pub(crate) schema_events_recoveries: SqlStr,
    /// Adds the claim columns to an inbox table that lacks them (run only after checking).
    pub(crate) schema_consumed_claims: SqlStr,
    pub(crate) schema_inbox: SqlStr,
    /// Whether a table (`?1`) has a column (`?2`).
    pub(crate) has_column: SqlStr,
    pub(crate) insert_events_head: String,
    pub(crate) insert_events_row: String,
    pub(crate) claim: Statement,
    pub(crate) settle_processed: Statement,
    pub(crate) settle_retry: Statement,
    pub(crate) settle_failed: Statement,
    pub(crate) fail_undecodable: Statement,
    pub(crate) delete_events_by_ids: Statement,
    pub(crate) dlq_insert_failed: Statement,
    pub(crate) dlq_mark_in_process: Statement,
    pub(crate) events_insert_from_dlq: Statement,
    pub(crate) dlq_delete_in_process: Statement,
    pub(crate) inbox_record_many: Statement,
}

impl SqliteQueries {
    /// The multi-row outbox insert for `rows` rows.
    pub(crate) fn insert_events(&self, rows: usize) -> SqlStr {
        let mut sql =
            String::with_capacity(self.insert_events_head.len() + rows * (self.insert_events_row.len() + 2));
        sql.push_str(&self.insert_events_head);
        for row in 0..rows {
            sql.push_str(if row == 0 { "\n" } else { ",\n" });
            sql.push_str(&self.insert_events_row);
        }
        // Built only from the rendered templates above.
        AssertSqlSafe(sql).into_sql_str()
    }
}

#[async_trait]
impl Queries for SqliteQueries {
    type Db = Sqlite;
    type Format = SqliteRowFormat;
    const NAME: &'static str = "Sqlite";

    fn new(tables: &TableNames) -> Self {
        let text =
            |template: &str| tables.render(&template.replace("{now}", NOW).replace("{ts}", TIMESTAMP_FORMAT));
        // Only validated table names and the constants above are spliced in; values are always bound.
        let sql = |template: &str| AssertSqlSafe(Arc::<str>::from(text(template))).into_sql_str();
        let numbered = |template: &str| Self::statement(text(template));
        Self {
            common: Statements::new(tables, sql_files!(), numbered),
            schema_events: sql(MIGRATIONS[0].1),
            schema_dlq: sql(MIGRATIONS[1].1),
            schema_consumed: sql(MIGRATIONS[2].1),
            schema_jobs: sql(MIGRATIONS[3].1),
            schema_events_recoveries: sql(MIGRATIONS[4].1),
            schema_consumed_claims: sql(MIGRATIONS[5].1),
            schema_inbox: sql(MIGRATIONS[6].1),
            has_column: sql("SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2"),
            insert_events_head: text(include_str!("../sql/insert_events.sql").trim_end()),
            insert_events_row: text(include_str!("../sql/insert_events_row.sql").trim_end()),
            claim: numbered(include_str!("../sql/claim.sql")),
            settle_processed: numbered(include_str!("../sql/settle_processed.sql")),
            settle_retry: numbered(include_str!("../sql/settle_retry.sql")),
            settle_failed: numbered(include_str!("../sql/settle_failed.sql")),
            fail_undecodable: numbered(include_str!("../sql/fail_undecodable.sql")),
            delete_events_by_ids: numbered(include_str!("../sql/delete_events_by_ids.sql")),
            dlq_insert_failed: numbered(include_str!("../sql/dlq_insert_failed.sql")),
            dlq_mark_in_process: numbered(include_str!("../sql/dlq_mark_in_process.sql")),
            events_insert_from_dlq: numbered(include_str!("../sql/events_insert_from_dlq.sql")),
            dlq_delete_in_process: numbered(include_str!("../sql/dlq_delete_in_process.sql")),
            inbox_record_many: numbered(include_str!("../sql/inbox_record_many.sql")),
        }
    }

    fn statements(&self) -> &Statements {
        &self.common
    }

    fn inbox_record_many(&self) -> Option<&Statement> {
        Some(&self.inbox_record_many)
    }

    fn bind<'q>(&self, statement: &Statement, params: &[Param<'_>]) -> Result<BoundQuery<'q, Sqlite>> {
        let mut query = sqlx::query(statement.sql_for(params));
        for param in params {
            query = match *param {
                Param::Text(text) => query.bind(text),
                Param::OptionalText(text) => query.bind(text),
                Param::Int(number) => query.bind(number),
                // Ids are stored as hyphenated text, and a list is one JSON array for `json_each`.
                Param::Id(id) => query.bind(id.hyphenated()),
                Param::Ids(ids) => query.bind(serde_json::to_string(ids)?),
                // Times are shifted with date modifiers of `strftime`.
                Param::Before(span) => query.bind(earlier_by(span)),
                Param::After(span) => query.bind(later_by(span)),
                // The stored form: fixed-width UTC text, so that text order is time order.
                Param::Time(time) => query.bind(time.to_rfc3339_opts(SecondsFormat::Millis, true)),
                Param::OptionalTime(time) => {
                    query.bind(time.map(|time| time.to_rfc3339_opts(SecondsFormat::Millis, true)))
                }
                Param::Bytes(bytes) => query.bind(bytes),
            };
        }
        Ok(query)
    }

    fn error(context: &str, error: sqlx::Error) -> oncebox_core::Error {
        database_error::<SqliteServerErrors>(context, error)
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    async fn begin_write(
        &self,
        pool: &SqlitePool,
        context: &str,
    ) -> Result<sqlx::Transaction<'static, Sqlite>> {
        pool.begin_with("BEGIN IMMEDIATE").await.context(context)
    }

    async fn claim(&self, pool: &SqlitePool, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let context = format!("claiming {event_type}");
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.context(&context)?;
        let params = [Param::Id(claim_token), Param::Text(event_type), limit(max_rows)];
        let rows = self.fetch_all(&mut *tx, &self.claim, &params, &context).await?;
        // Each row on its own: one that cannot be read is given up on in the claim's transaction,
        // and the others are sent.
        let decoded = SqliteRowFormat::decode_events(&rows, self.tables().events())?;
        // A row whose id is not a UUID is addressed by the id as stored.
        let failures = decoded
            .undecodable_failures()
            .into_iter()
            .map(|(id, error)| (id.hyphenated().to_string(), error))
            .chain(decoded.malformed_id_failures());
        for (id, error) in failures {
            warn!(event_type, %id, %error, "claimed an outbox row that cannot be decoded; marked FAILED");
            let params = [Param::Text(&id), Param::Id(claim_token), Param::Text(&error)];
            self.execute(&mut *tx, &self.fail_undecodable, &params, &context).await?;
        }
        tx.commit().await.context(&context)?;
        let mut events = decoded.rows;
        // RETURNING gives no order guarantee.
        events.sort_by_key(|event| (event.next_retry_at, event.id));
        Ok(ClaimedBatch { event_type: event_type.to_owned(), claim_token, events })
    }

    async fn settle(
        &self,
        pool: &SqlitePool,
        batch: &ClaimedBatch,
        settlements: &[Settlement],
    ) -> Result<SettleReport> {
        let context = format!("settling a batch of {}", batch.event_type);
        let token = Param::Id(batch.claim_token);
        let processed: Vec<Uuid> = settlements
            .iter()
            .filter_map(|settlement| match settlement {
                Settlement::Processed { id } => Some(*id),
                _ => None,
            })
            .collect();
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.context(&context)?;
        let mut settled = 0;
        if !processed.is_empty() {
            let params = [token, Param::Ids(&processed)];
            settled += self.execute(&mut *tx, &self.settle_processed, &params, &context).await?;
        }
        for settlement in settlements {
            let (retry, failed);
            let (statement, params): (_, &[Param<'_>]) = match settlement {
                Settlement::Processed { .. } => continue,
                Settlement::Retry { id, delay, error } => {
                    retry =
                        [Param::Id(*id), token, Param::After(*delay), Param::Text(last_error_text(error))];
                    (&self.settle_retry, &retry)
                }
                Settlement::Failed { id, error } => {
                    failed = [Param::Id(*id), token, Param::Text(last_error_text(error))];
                    (&self.settle_failed, &failed)
                }
            };
            settled += self.execute(&mut *tx, statement, params, &context).await?;
        }
        tx.commit().await.context(&context)?;
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn transfer_to_dlq(&self, pool: &SqlitePool, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        let context = "moving failed events to the DLQ";
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.context(context)?;
        let rows = self.fetch_all(&mut *tx, &self.dlq_insert_failed, &[limit(max_rows)], context).await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // A row that cannot be decoded moves like the others (it failed for that reason); only
        // the list handed back, for the DLQ handler, lacks it.
        let decoded = SqliteRowFormat::decode_events(&rows, self.tables().dlq())?;
        decoded.warn_left_out("a dead letter queue row");
        // Deleted by the id as stored, so a row whose id is not a UUID leaves the outbox too.
        let ids: Vec<String> = decoded
            .ids()
            .map(|id| id.hyphenated().to_string())
            .chain(decoded.malformed_ids.iter().map(|(stored_id, _)| stored_id.clone()))
            .collect();
        let ids = serde_json::to_string(&ids)?;
        self.execute(&mut *tx, &self.delete_events_by_ids, &[Param::Text(&ids)], context).await?;
        tx.commit().await.context(context)?;
        let mut moved = decoded.rows;
        moved.sort_by_key(|event| (event.updated_at, event.id));
        Ok(moved)
    }

    async fn transfer_from_dlq(&self, pool: &SqlitePool, max_rows: u32) -> Result<u64> {
        let context = "moving DLQ events back to the outbox";
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.context(context)?;
        let marked = self.execute(&mut *tx, &self.dlq_mark_in_process, &[limit(max_rows)], context).await?;
        if marked == 0 {
            return Ok(0);
        }
        self.execute(&mut *tx, &self.events_insert_from_dlq, &[], context).await?;
        let moved = self.execute(&mut *tx, &self.dlq_delete_in_process, &[], context).await?;
        tx.commit().await.context(context)?;
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_fully_rendered() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let statements = SqliteQueries::new(&names);
        let own = [
            statements.claim.as_str(),
            statements.schema_events.as_str(),
            statements.settle_retry.as_str(),
            statements.inbox_record_many.as_str(),
        ];
        let shared = statements.common.all().map(Statement::as_str);
        for sql in own.into_iter().chain(shared) {
            for placeholder in ["{events}", "{dlq}", "{consumed}", "{jobs}", "{now}", "{ts}"] {
                assert!(!sql.contains(placeholder), "{placeholder} left in {sql}");
            }
            assert!(sql.contains("shop_outbox_"), "{sql}");
        }
        let insert = statements.insert_events(3);
        assert_eq!(insert.as_str().matches('?').count(), 3 * INSERT_EVENT_BINDS);
        assert!(insert.as_str().starts_with("INSERT INTO shop_outbox_events"));
    }

    #[test]
    fn claims_recoveries_and_settles_re_check_the_status() {
        let statements = SqliteQueries::new(&TableNames::default());
        let fenced = [
            ("claim", &statements.claim),
            ("recover_stuck", &statements.common.recover_stuck),
            ("settle_processed", &statements.settle_processed),
            ("settle_retry", &statements.settle_retry),
            ("settle_failed", &statements.settle_failed),
            ("fail_undecodable", &statements.fail_undecodable),
        ];
        oncebox_testkit::statement_rules::assert_updates_check_status(
            fenced.map(|(name, statement)| (name, statement.as_str())),
        );
    }
}
