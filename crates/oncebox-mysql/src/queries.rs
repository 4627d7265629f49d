//! The MySQL SQL of oncebox: every statement rendered once for the configured table names, how
//! values are bound to MySQL's positional placeholders, and the operations whose shape is MySQL's
//! own. Statements over a list of rows are finished per call with the right number of
//! placeholders.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use oncebox_core::event::last_error_text;
use oncebox_core::{
    ClaimedBatch, Error, EventStatus, OutboxEvent, Result, SettleReport, Settlement, TableNames,
};
use oncebox_sqlx::{
    BoundQuery, DecodeRow, Param, Queries, Statement, Statements, id_slots, limit, micros, sql_files,
};
use sqlx::mysql::MySqlQueryResult;
use sqlx::{AssertSqlSafe, MySql, MySqlConnection, MySqlPool, Row, SqlSafeStr, SqlStr};
use tracing::warn;
use uuid::Uuid;

use crate::error::{DUPLICATE_KEY, SqlxResultExt, database_error, error_number};
use crate::row::MySqlRowFormat;

/// The migrations, in order, as shipped in `migrations/mysql/`.
pub(crate) const MIGRATIONS: [(&str, &str); 7] = oncebox_sqlx::migrations!("mysql");

/// Indexes in [`MIGRATIONS`] of the migrations that are not idempotent by themselves (MySQL 8 has
/// no `ADD COLUMN IF NOT EXISTS`): auto-create runs each only when its column is missing.
pub(crate) const ADD_RECOVERIES: usize = 4;
/// See [`ADD_RECOVERIES`]: the inbox's claim columns.
pub(crate) const ADD_CLAIMS: usize = 5;

/// Rows per multi-row insert: six placeholders each, far below the server's 65,535 per
/// statement, and few enough that a batch of ordinary events stays well inside the default
/// `max_allowed_packet` (16 MiB on MariaDB, 64 MiB on MySQL 8).
pub(crate) const INSERT_CHUNK_ROWS: usize = 500;
/// A chunk is also cut when its payloads and headers pass this many bytes, whatever its row count.
pub(crate) const INSERT_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Ids per `IN (…)` list; longer lists are split.
const MAX_IDS_PER_STATEMENT: usize = 4096;
/// Retries and failures per settle statement (four placeholders each).
const OUTCOMES_PER_STATEMENT: usize = 1000;

/// One row of the multi-row insert.
const INSERT_ROW: &str =
    "(?, ?, ?, ?, ?, ?, 'PENDING', 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";
/// One row of the settle's outcome table (the first names the columns).
const OUTCOME_FIRST_ROW: &str = "SELECT ? AS id, ? AS status, ? AS delay_micros, ? AS error";
const OUTCOME_ROW: &str = " UNION ALL SELECT ?, ?, ?, ?";

/// A statement with one list-shaped hole (`{rows}` or `{outcomes}`) to fill per call.
#[derive(Debug)]
pub(crate) struct Template {
    before: String,
    after: String,
}

impl Template {
    fn new(rendered: &str, hole: &str) -> Self {
        match rendered.split_once(hole) {
            Some((before, after)) => Self { before: before.to_owned(), after: after.to_owned() },
            None => Self { before: rendered.to_owned(), after: String::new() },
        }
    }

    fn fill(&self, list: &str) -> SqlStr {
        let mut sql = String::with_capacity(self.before.len() + list.len() + self.after.len());
        sql.push_str(&self.before);
        sql.push_str(list);
        sql.push_str(&self.after);
        // Only validated table names and our own placeholders are spliced in; values are bound.
        AssertSqlSafe(sql).into_sql_str()
    }

    /// The insert with `rows` rows.
    pub(crate) fn with_rows(&self, rows: usize) -> SqlStr {
        self.fill(&vec![INSERT_ROW; rows].join(", "))
    }

    /// The settle with an outcome table of `rows` rows.
    pub(crate) fn with_outcomes(&self, rows: usize) -> SqlStr {
        let mut list = String::from(OUTCOME_FIRST_ROW);
        for _ in 1..rows {
            list.push_str(OUTCOME_ROW);
        }
        self.fill(&list)
    }
}

/// The SQL of the MySQL dialect for one set of table names: the statements the sqlx DAOs share,
/// and MySQL's own claim, settle, transfers, records and leases. There is no `UPDATE … RETURNING`
/// and no `UPDATE … WHERE id IN (SELECT … LIMIT n)`, so a claim and each DLQ transfer is one short
/// transaction that locks its rows with `SELECT … FOR UPDATE SKIP LOCKED` and then changes them
/// by id; locks last only for that transaction, never while the broker is called.
#[derive(Debug)]
pub struct MySqlQueries {
    pub(crate) common: Statements,
    pub(crate) schema: [SqlStr; 7],
    /// Whether a table (first `?`) of the current database has a column (second `?`).
    pub(crate) has_column: SqlStr,
    pub(crate) insert_events: Template,
    pub(crate) claim_select: Statement,
    pub(crate) claim_update: Statement,
    pub(crate) settle_processed: Statement,
    pub(crate) settle_outcomes: Template,
    pub(crate) fail_undecodable: Statement,
    pub(crate) dlq_lock_failed: Statement,
    pub(crate) dlq_copy_failed: Statement,
    pub(crate) delete_events_by_ids: Statement,
    pub(crate) dlq_lock_to_retry: Statement,
    pub(crate) events_insert_from_dlq: Statement,
    pub(crate) dlq_delete_by_ids: Statement,
    pub(crate) job_insert: Statement,
}

/// `template` for `tables`, without its comment lines: the comments document the files, and the
/// server need not parse them on every prepare.
fn render(tables: &TableNames, template: &str) -> String {
    let code: Vec<&str> = template.lines().filter(|line| !line.trim_start().starts_with("--")).collect();
    tables.render(&code.join("\n"))
}

impl MySqlQueries {
    /// Runs every statement of a settle on `connection` (a transaction when there are several).
    async fn settle_all(
        &self,
        connection: &mut MySqlConnection,
        token: Uuid,
        processed: &[Uuid],
        others: &[&Settlement],
        context: &str,
    ) -> Result<u64> {
        let mut settled = 0;
        if !processed.is_empty() {
            let params = [Param::Id(token), Param::Ids(processed)];
            settled += self.execute_over_ids(connection, &self.settle_processed, &params, context).await?;
        }
        for chunk in others.chunks(OUTCOMES_PER_STATEMENT) {
            let mut query = sqlx::query(self.settle_outcomes.with_outcomes(chunk.len()));
            for settlement in chunk {
                let (status, delay, error) = match settlement {
                    Settlement::Processed { .. } => (EventStatus::Processed, 0, ""),
                    Settlement::Retry { delay, error, .. } => {
                        (EventStatus::Pending, micros(*delay), last_error_text(error))
                    }
                    Settlement::Failed { error, .. } => (EventStatus::Failed, 0, last_error_text(error)),
                };
                query = query.bind(settlement.id()).bind(status.as_str()).bind(delay).bind(error.to_owned());
            }
            settled += query.bind(token).execute(&mut *connection).await.context(context)?.rows_affected();
        }
        Ok(settled)
    }
}

#[async_trait]
impl Queries for MySqlQueries {
    type Db = MySql;
    type Format = MySqlRowFormat;
    const NAME: &'static str = "MySql";
    const MAX_IDS: usize = MAX_IDS_PER_STATEMENT;

    fn new(tables: &TableNames) -> Self {
        let sql = |template: &str| AssertSqlSafe(render(tables, template)).into_sql_str();
        let numbered = |template: &str| Self::statement(render(tables, template));
        let migration =
            |index: usize| AssertSqlSafe(tables.render_migration(MIGRATIONS[index].1)).into_sql_str();
        Self {
            common: Statements::new(tables, sql_files!(), numbered),
            schema: [
                migration(0),
                migration(1),
                migration(2),
                migration(3),
                migration(ADD_RECOVERIES),
                migration(ADD_CLAIMS),
                migration(6),
            ],
            has_column: sql("SELECT COUNT(*) FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?"),
            insert_events: Template::new(&render(tables, include_str!("../sql/insert_events.sql")), "{rows}"),
            claim_select: numbered(include_str!("../sql/claim_select.sql")),
            claim_update: numbered(include_str!("../sql/claim_update.sql")),
            settle_processed: numbered(include_str!("../sql/settle_processed.sql")),
            settle_outcomes: Template::new(
                &render(tables, include_str!("../sql/settle_outcomes.sql")),
                "{outcomes}",
            ),
            fail_undecodable: numbered(include_str!("../sql/fail_undecodable.sql")),
            dlq_lock_failed: numbered(include_str!("../sql/dlq_lock_failed.sql")),
            dlq_copy_failed: numbered(include_str!("../sql/dlq_copy_failed.sql")),
            delete_events_by_ids: numbered(include_str!("../sql/delete_events_by_ids.sql")),
            dlq_lock_to_retry: numbered(include_str!("../sql/dlq_lock_to_retry.sql")),
            events_insert_from_dlq: numbered(include_str!("../sql/events_insert_from_dlq.sql")),
            dlq_delete_by_ids: numbered(include_str!("../sql/dlq_delete_by_ids.sql")),
            job_insert: numbered(include_str!("../sql/job_insert.sql")),
        }
    }

    /// MySQL has only positional `?`: the files' numbered `?N` are turned into them.
    fn statement(sql: String) -> Statement {
        Statement::positional(&sql)
    }

    fn statements(&self) -> &Statements {
        &self.common
    }

    fn bind<'q>(&self, statement: &Statement, params: &[Param<'_>]) -> Result<BoundQuery<'q, MySql>> {
        let mut query = sqlx::query(statement.sql_for(params));
        // Every MySQL statement is made with `Statement::positional`, which knows its order.
        let Some(order) = statement.bind_order() else {
            return Err(Error::invalid_input(format!("not a positional statement: {}", statement.as_str())));
        };
        for &index in order {
            let param = match params.get(index) {
                Some(Param::Ids([])) => {
                    return Err(Error::invalid_input(format!(
                        "an empty id list for: {}",
                        statement.as_str()
                    )));
                }
                Some(param) => param,
                None => {
                    return Err(Error::invalid_input(format!(
                        "a placeholder names value {} of the {} given: {}",
                        index.saturating_add(1),
                        params.len(),
                        statement.as_str()
                    )));
                }
            };
            query = match *param {
                Param::Text(text) => query.bind(text),
                Param::OptionalText(text) => query.bind(text),
                Param::Int(number) => query.bind(number),
                Param::Id(id) => query.bind(id),
                // One placeholder per slot (see `Statement::sql_for`), the spare ones repeating
                // the last id.
                Param::Ids(ids) => {
                    let spare = id_slots(ids.len()).saturating_sub(ids.len());
                    let padding = ids.last().into_iter().cycle().take(spare);
                    ids.iter().chain(padding).fold(query, |query, id| query.bind(*id))
                }
                Param::Before(span) | Param::After(span) => query.bind(micros(span)),
                Param::Time(time) => query.bind(time),
                Param::OptionalTime(time) => query.bind(time),
                Param::Bytes(bytes) => query.bind(bytes),
            };
        }
        Ok(query)
    }

    fn error(context: &str, error: sqlx::Error) -> Error {
        database_error(context, error)
    }

    fn rows_affected(result: &MySqlQueryResult) -> u64 {
        result.rows_affected()
    }

    async fn claim(&self, pool: &MySqlPool, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let mut batch = ClaimedBatch { event_type: event_type.to_owned(), claim_token, events: Vec::new() };
        let context = format!("claiming {event_type}");
        let mut tx = pool.begin().await.context(&context)?;
        let params = [Param::Text(event_type), limit(max_rows)];
        let rows = self.fetch_all(&mut *tx, &self.claim_select, &params, &context).await?;
        let Some(first) = rows.first() else {
            // Nothing locked; ending the transaction now returns the connection sooner.
            tx.commit().await.context(&context)?;
            return Ok(batch);
        };
        let claimed_at: DateTime<Utc> =
            first.try_get("claimed_at").map_err(|error| database_error(&context, error))?;
        // Each row on its own: one that cannot be read is claimed with the others and given up on
        // in the same transaction, and the others are sent.
        let decoded = MySqlRowFormat::decode_events(&rows, self.tables().events())?;
        let ids: Vec<Uuid> = decoded.ids().collect();
        let params = [Param::Id(claim_token), Param::Time(claimed_at), Param::Ids(&ids)];
        self.execute_over_ids(&mut tx, &self.claim_update, &params, &context).await?;
        for (id, error) in decoded.undecodable_failures() {
            warn!(event_type, %id, %error, "claimed an outbox row that cannot be decoded; marked FAILED");
            let params = [Param::Text(&error), Param::Id(id), Param::Id(claim_token)];
            self.execute(&mut *tx, &self.fail_undecodable, &params, &context).await?;
        }
        tx.commit().await.context(&context)?;
        let mut events = decoded.rows;
        for event in &mut events {
            event.status = EventStatus::InProcess;
            event.claim_token = Some(claim_token);
            event.updated_at = claimed_at;
        }
        batch.events = events;
        Ok(batch)
    }

    async fn settle(
        &self,
        pool: &MySqlPool,
        batch: &ClaimedBatch,
        settlements: &[Settlement],
    ) -> Result<SettleReport> {
        let context = format!("settling a batch of {}", batch.event_type);
        let mut processed = Vec::new();
        let mut others = Vec::new();
        for settlement in settlements {
            match settlement {
                Settlement::Processed { id } => processed.push(*id),
                _ => others.push(settlement),
            }
        }
        let statements =
            processed.len().div_ceil(MAX_IDS_PER_STATEMENT) + others.len().div_ceil(OUTCOMES_PER_STATEMENT);
        let settled = if statements == 1 {
            // The common case (every row delivered, one chunk) is one statement, atomic on its own:
            // no BEGIN and COMMIT round trips on the relay's hot path.
            let mut connection = pool.acquire().await.context(&context)?;
            self.settle_all(&mut connection, batch.claim_token, &processed, &others, &context).await?
        } else {
            // Several statements run in one transaction: when a later one fails, the engine
            // retries the whole settle, and it must find every row still under its token. Rows an
            // earlier, committed statement had already settled would match nothing and be counted
            // as refused, as if another worker had claimed them. The rows are the batch's own:
            // claims skip them (SKIP LOCKED) and no other batch's settle touches them, so only stuck
            // recovery can meet these short-held locks.
            let mut tx = pool.begin().await.context(&context)?;
            let settled = self.settle_all(&mut tx, batch.claim_token, &processed, &others, &context).await?;
            tx.commit().await.context(&context)?;
            settled
        };
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn transfer_to_dlq(&self, pool: &MySqlPool, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        let context = "moving failed events to the DLQ";
        let mut tx = pool.begin().await.context(context)?;
        let rows = self.fetch_all(&mut *tx, &self.dlq_lock_failed, &[limit(max_rows)], context).await?;
        if rows.is_empty() {
            tx.commit().await.context(context)?;
            return Ok(Vec::new());
        }
        // A row that cannot be decoded moves like the others (it failed for that reason); only
        // the list handed back, for the DLQ handler, lacks it.
        let decoded = MySqlRowFormat::decode_events(&rows, self.tables().events())?;
        decoded.warn_left_out("a dead letter queue row");
        let ids: Vec<Uuid> = decoded.ids().collect();
        let params = [Param::Ids(&ids)];
        self.execute_over_ids(&mut tx, &self.dlq_copy_failed, &params, context).await?;
        self.execute_over_ids(&mut tx, &self.delete_events_by_ids, &params, context).await?;
        tx.commit().await.context(context)?;
        Ok(decoded.rows)
    }

    async fn transfer_from_dlq(&self, pool: &MySqlPool, max_rows: u32) -> Result<u64> {
        let context = "moving DLQ events back to the outbox";
        let mut tx = pool.begin().await.context(context)?;
        let rows = self.fetch_all(&mut *tx, &self.dlq_lock_to_retry, &[limit(max_rows)], context).await?;
        let ids = Self::read_ids(&rows, self.tables().dlq(), context)?;
        if ids.is_empty() {
            tx.commit().await.context(context)?;
            return Ok(0);
        }
        let params = [Param::Ids(&ids)];
        self.execute_over_ids(&mut tx, &self.events_insert_from_dlq, &params, context).await?;
        let moved = self.execute_over_ids(&mut tx, &self.dlq_delete_by_ids, &params, context).await?;
        tx.commit().await.context(context)?;
        Ok(moved)
    }

    /// A plain `INSERT`: only the duplicate-key error on the primary key means "already
    /// there". InnoDB rolls back only the failed statement, so a caller's transaction goes on
    /// unharmed.
    async fn insert_new_on(
        &self,
        connection: &mut MySqlConnection,
        statement: &Statement,
        params: &[Param<'_>],
        context: &str,
    ) -> Result<bool> {
        match self.bind(statement, params)?.execute(connection).await {
            Ok(_) => Ok(true),
            Err(error) if error_number(&error) == Some(DUPLICATE_KEY) => Ok(false),
            Err(error) => Err(database_error(context, error)),
        }
    }

    /// Updates the job's row only when its lease has run out on `UTC_TIMESTAMP(6)`, or inserts the
    /// row when there is none; of several instances trying at once exactly one succeeds. (An
    /// upsert would be one statement, but under the CLIENT_FOUND_ROWS flag it reports "unchanged"
    /// and "inserted" alike.)
    async fn try_lock(
        &self,
        pool: &MySqlPool,
        job: &str,
        owner: Uuid,
        lock_at_most_for: Duration,
    ) -> Result<bool> {
        let context = format!("locking job {job}");
        let params = [Param::Text(job), Param::After(lock_at_most_for), Param::Id(owner)];
        if self.execute(pool, &self.common.job_try_lock, &params, &context).await? == 1 {
            return Ok(true);
        }
        match self.bind(&self.job_insert, &params)?.execute(pool).await {
            Ok(_) => Ok(true),
            // The row exists: its lease is still running, or another instance was just first.
            Err(error) if error_number(&error) == Some(DUPLICATE_KEY) => Ok(false),
            Err(error) => Err(database_error(&context, error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_fully_rendered() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let statements = MySqlQueries::new(&names);
        let ids = [Uuid::nil(); 4];
        let filled = [
            statements.claim_select.sql_for(&[]),
            statements.claim_update.sql_for(&[Param::Int(0), Param::Int(0), Param::Ids(&ids)]),
            statements.settle_outcomes.with_outcomes(3),
            statements.insert_events.with_rows(2),
        ];
        let shared = statements.common.all().map(|statement| statement.sql_for(&[]));
        for sql in filled.iter().map(SqlStr::as_str).chain(shared.iter().map(SqlStr::as_str)) {
            for placeholder in
                ["{events}", "{dlq}", "{consumed}", "{jobs}", "{prefix}", "{ids}", "{rows}", "{outcomes}"]
            {
                assert!(!sql.contains(placeholder), "{placeholder} left in {sql}");
            }
            assert!(sql.contains("shop_outbox_"), "{sql}");
        }
        assert!(statements.claim_select.as_str().contains("FORCE INDEX (shop_outbox_events_claim)"));
    }

    #[test]
    fn placeholders_match_the_bound_values() {
        let statements = MySqlQueries::new(&TableNames::default());
        let count = |sql: SqlStr| sql.as_str().matches('?').count();
        // Comment lines are stripped, so every '?' left is a placeholder.
        let ids = [Uuid::nil(); 8];
        let claim = [Param::Int(0), Param::Int(0), Param::Ids(&ids)];
        assert_eq!(count(statements.claim_update.sql_for(&claim)), 2 + 8);
        assert_eq!(count(statements.insert_events.with_rows(3)), 18);
        assert_eq!(count(statements.settle_outcomes.with_outcomes(5)), 4 * 5 + 1);
        assert_eq!(statements.settle_processed.bind_order(), Some(&[0, 1][..]));
        // Each operation of MySQL's own binds its values in the order its runner passes them; a
        // bare `?` left in a file would be text no value is bound to.
        let own = [
            (&statements.claim_select, &[0, 1][..]),
            (&statements.claim_update, &[0, 1, 2][..]),
            (&statements.dlq_copy_failed, &[0][..]),
            (&statements.delete_events_by_ids, &[0][..]),
            (&statements.events_insert_from_dlq, &[0][..]),
            (&statements.dlq_delete_by_ids, &[0][..]),
            (&statements.fail_undecodable, &[0, 1, 2][..]),
            (&statements.dlq_lock_failed, &[0][..]),
            (&statements.dlq_lock_to_retry, &[0][..]),
            (&statements.common.inbox_record, &[0, 1][..]),
            (&statements.common.job_try_lock, &[1, 2, 0][..]),
            (&statements.job_insert, &[0, 1, 2][..]),
        ];
        for (statement, order) in own {
            assert_eq!(statement.bind_order(), Some(order), "{}", statement.as_str());
            assert_eq!(count(statement.sql_for(&[])), order.len(), "{}", statement.as_str());
        }
        // The shared statements number their values as the other dialects do: recover_stuck
        // takes the cut-off, the limit and max-recoveries; MySQL reads max-recoveries twice.
        assert_eq!(statements.common.all()[0].bind_order(), Some(&[2, 2, 0, 1][..]));
        for statement in statements.common.all() {
            let order = statement.bind_order().unwrap_or_default();
            let used: std::collections::BTreeSet<usize> = order.iter().copied().collect();
            assert!(used.iter().copied().eq(0..used.len()), "values skipped in {}", statement.as_str());
            assert_eq!(order.len(), count(statement.sql_for(&[])), "{}", statement.as_str());
        }
    }

    #[test]
    fn binding_refuses_missing_values_and_empty_lists() {
        let queries = MySqlQueries::new(&TableNames::default());
        let inbox_consumed = &queries.common.inbox_consumed;
        let refused =
            |params: &[Param<'_>]| queries.bind(inbox_consumed, params).err().map(|error| error.to_string());
        assert!(
            refused(&[Param::Text("billing"), Param::Ids(&[])])
                .is_some_and(|text| text.contains("empty id list"))
        );
        assert!(
            refused(&[Param::Text("billing")])
                .is_some_and(|text| text.contains("names value 2 of the 1 given"))
        );
        assert!(queries.bind(inbox_consumed, &[Param::Text("billing"), Param::Ids(&[Uuid::nil()])]).is_ok());
        let zero = Statement::positional("SELECT ?0");
        assert!(queries.bind(&zero, &[Param::Int(1)]).is_err());
    }

    #[test]
    fn claims_recoveries_and_settles_re_check_the_status() {
        let statements = MySqlQueries::new(&TableNames::default());
        let fenced = [
            ("claim_update", statements.claim_update.sql_for(&[])),
            ("recover_stuck", statements.common.recover_stuck.sql_for(&[])),
            ("settle_processed", statements.settle_processed.sql_for(&[])),
            ("settle_outcomes", statements.settle_outcomes.with_outcomes(2)),
            ("fail_undecodable", statements.fail_undecodable.sql_for(&[])),
        ];
        oncebox_testkit::statement_rules::assert_updates_check_status(
            fenced.iter().map(|(name, sql)| (*name, sql.as_str())),
        );
    }

    #[test]
    fn migrations_get_the_prefix_on_every_table_and_index() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let rendered = names.render_migration(MIGRATIONS[0].1);
        assert!(rendered.contains("CREATE TABLE IF NOT EXISTS shop_outbox_events ("), "{rendered}");
        assert!(rendered.contains("INDEX shop_outbox_events_claim"), "{rendered}");
        assert!(!rendered.contains(" outbox_events"), "{rendered}");
    }
}
