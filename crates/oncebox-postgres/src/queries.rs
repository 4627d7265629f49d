//! The PostgreSQL SQL of oncebox: every statement rendered once for the configured table names,
//! how values are bound, and the operations whose shape is PostgreSQL's own.

use std::sync::Arc;

use async_trait::async_trait;
use oncebox_core::event::last_error_text;
use oncebox_core::{ClaimedBatch, EventStatus, OutboxEvent, Result, SettleReport, Settlement, TableNames};
use oncebox_sqlx::{
    BoundQuery, DecodeRow, Param, Queries, SqlxResultExt, Statement, Statements, database_error, limit,
    micros, sql_files,
};
use sqlx::postgres::PgQueryResult;
use sqlx::{AssertSqlSafe, PgPool, Postgres, SqlSafeStr, SqlStr};
use tracing::warn;
use uuid::Uuid;

use crate::error::PgServerErrors;
use crate::row::PgRowFormat;

/// The migrations, in order, as shipped in `migrations/postgres/`.
pub(crate) const MIGRATIONS: [(&str, &str); 7] = oncebox_sqlx::migrations!("postgres");

/// The SQL of the PostgreSQL dialect for one set of table names: the statements the sqlx DAOs
/// share, and PostgreSQL's own claim (one `UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED)`),
/// settle (one `UPDATE` per batch, fenced by the claim token), DLQ transfers (one statement whose
/// CTEs lock, delete and insert, so a row is in exactly one table at every commit), inbox records
/// (`INSERT … ON CONFLICT DO NOTHING`) and job leases (one upsert that changes the row only when
/// the lease has run out on `clock_timestamp()`).
#[derive(Debug)]
pub struct PgQueries {
    pub(crate) common: Statements,
    /// The NOTIFY channel of these tables.
    pub(crate) channel: String,
    pub(crate) schema_events: SqlStr,
    pub(crate) schema_dlq: SqlStr,
    pub(crate) schema_consumed: SqlStr,
    pub(crate) schema_jobs: SqlStr,
    pub(crate) schema_events_recoveries: SqlStr,
    pub(crate) schema_consumed_claims: SqlStr,
    pub(crate) schema_inbox: SqlStr,
    pub(crate) insert_events: SqlStr,
    pub(crate) insert_events_notify: SqlStr,
    pub(crate) insert_event: SqlStr,
    pub(crate) insert_event_notify: SqlStr,
    pub(crate) claim: Statement,
    pub(crate) settle: SqlStr,
    pub(crate) settle_processed: Statement,
    pub(crate) fail_undecodable: SqlStr,
    pub(crate) dlq_transfer_to: Statement,
    pub(crate) dlq_transfer_from: Statement,
    pub(crate) inbox_record_many: Statement,
}

/// The NOTIFY channel for the tables with `prefix`: one per prefix, so two oncebox installations
/// sharing a database do not wake each other.
pub(crate) fn channel_for(prefix: &str) -> String {
    format!("{prefix}oncebox_wake_ups")
}

/// The settle statement's parameter arrays, one element per settlement.
struct SettleArrays {
    ids: Vec<Uuid>,
    statuses: Vec<&'static str>,
    delays: Vec<i64>,
    errors: Vec<Option<String>>,
}

impl SettleArrays {
    fn new(settlements: &[Settlement]) -> Self {
        let mut arrays = Self {
            ids: Vec::with_capacity(settlements.len()),
            statuses: Vec::with_capacity(settlements.len()),
            delays: Vec::with_capacity(settlements.len()),
            errors: Vec::with_capacity(settlements.len()),
        };
        for settlement in settlements {
            let (status, delay, error) = match settlement {
                Settlement::Processed { .. } => (EventStatus::Processed, 0, None),
                Settlement::Retry { delay, error, .. } => {
                    (EventStatus::Pending, micros(*delay), Some(last_error_text(error).to_owned()))
                }
                Settlement::Failed { error, .. } => {
                    (EventStatus::Failed, 0, Some(last_error_text(error).to_owned()))
                }
            };
            arrays.ids.push(settlement.id());
            arrays.statuses.push(status.as_str());
            arrays.delays.push(delay);
            arrays.errors.push(error);
        }
        arrays
    }
}

#[async_trait]
impl Queries for PgQueries {
    type Db = Postgres;
    type Format = PgRowFormat;
    const NAME: &'static str = "Pg";

    fn new(tables: &TableNames) -> Self {
        // Only validated table names are spliced in; values are always bound.
        let sql = |template: &str| AssertSqlSafe(Arc::<str>::from(tables.render(template))).into_sql_str();
        let numbered = |template: &str| Self::statement(tables.render(template));
        let migration = |index: usize| {
            AssertSqlSafe(Arc::<str>::from(tables.render_migration(MIGRATIONS[index].1))).into_sql_str()
        };
        Self {
            common: Statements::new(tables, sql_files!(), numbered),
            channel: channel_for(tables.prefix()),
            schema_events: migration(0),
            schema_dlq: migration(1),
            schema_consumed: migration(2),
            schema_jobs: migration(3),
            schema_events_recoveries: migration(4),
            schema_consumed_claims: migration(5),
            schema_inbox: migration(6),
            insert_events: sql(include_str!("../sql/insert_events.sql")),
            insert_events_notify: sql(include_str!("../sql/insert_events_notify.sql")),
            insert_event: sql(include_str!("../sql/insert_event.sql")),
            insert_event_notify: sql(include_str!("../sql/insert_event_notify.sql")),
            claim: numbered(include_str!("../sql/claim.sql")),
            settle: sql(include_str!("../sql/settle.sql")),
            settle_processed: numbered(include_str!("../sql/settle_processed.sql")),
            fail_undecodable: sql(include_str!("../sql/fail_undecodable.sql")),
            dlq_transfer_to: numbered(include_str!("../sql/dlq_transfer_to.sql")),
            dlq_transfer_from: numbered(include_str!("../sql/dlq_transfer_from.sql")),
            inbox_record_many: numbered(include_str!("../sql/inbox_record_many.sql")),
        }
    }

    fn statements(&self) -> &Statements {
        &self.common
    }

    fn inbox_record_many(&self) -> Option<&Statement> {
        Some(&self.inbox_record_many)
    }

    fn bind<'q>(&self, statement: &Statement, params: &[Param<'_>]) -> Result<BoundQuery<'q, Postgres>> {
        let mut query = sqlx::query(statement.sql_for(params));
        for param in params {
            query = match *param {
                Param::Text(text) => query.bind(text),
                Param::OptionalText(text) => query.bind(text),
                Param::Int(number) => query.bind(number),
                Param::Id(id) => query.bind(id),
                Param::Ids(ids) => query.bind(ids),
                // The statements shift the database's own times by a bound number of microseconds.
                Param::Before(span) | Param::After(span) => query.bind(micros(span)),
                Param::Time(time) => query.bind(time),
                Param::OptionalTime(time) => query.bind(time),
                Param::Bytes(bytes) => query.bind(bytes),
            };
        }
        Ok(query)
    }

    fn error(context: &str, error: sqlx::Error) -> oncebox_core::Error {
        database_error::<PgServerErrors>(context, error)
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    async fn claim(&self, pool: &PgPool, event_type: &str, max_rows: u32) -> Result<ClaimedBatch> {
        let claim_token = Uuid::now_v7();
        let params = [Param::Text(event_type), limit(max_rows), Param::Id(claim_token)];
        let rows = self.fetch_all(pool, &self.claim, &params, &format!("claiming {event_type}")).await?;
        // Each row on its own: one that cannot be read is given up on, and the others are sent.
        // The claim has committed, so this is a second statement fenced by the claim token. If it
        // fails, the healthy rows are still returned and sent (failing the claim would leave them
        // IN_PROCESS and charge each a recovery); the bad ones wait for stuck recovery, which
        // fails them after `max-recoveries`.
        let decoded = PgRowFormat::decode_events(&rows, self.tables().events())?;
        if !decoded.undecodable.is_empty() {
            let (ids, errors): (Vec<Uuid>, Vec<String>) = decoded.undecodable_failures().into_iter().unzip();
            for (id, error) in ids.iter().zip(&errors) {
                warn!(event_type, %id, %error, "claimed an outbox row that cannot be decoded; marking it FAILED");
            }
            let failed = sqlx::query(self.fail_undecodable.clone())
                .bind(claim_token)
                .bind(&ids)
                .bind(errors)
                .execute(pool)
                .await;
            if let Err(error) = failed {
                warn!(
                    event_type, ids = ?ids, %error,
                    "could not mark undecodable outbox rows FAILED; stuck recovery will return them and \
                     fail them after max-recoveries"
                );
            }
        }
        let mut events = decoded.rows;
        // RETURNING gives no order guarantee.
        events.sort_by_key(|event| (event.next_retry_at, event.id));
        Ok(ClaimedBatch { event_type: event_type.to_owned(), claim_token, events })
    }

    async fn settle(
        &self,
        pool: &PgPool,
        batch: &ClaimedBatch,
        settlements: &[Settlement],
    ) -> Result<SettleReport> {
        let context = format!("settling a batch of {}", batch.event_type);
        let all_delivered = settlements.iter().all(|s| matches!(s, Settlement::Processed { .. }));
        let settled = if all_delivered {
            let ids: Vec<Uuid> = settlements.iter().map(Settlement::id).collect();
            let params = [Param::Id(batch.claim_token), Param::Ids(&ids)];
            self.execute(pool, &self.settle_processed, &params, &context).await?
        } else {
            // Arrays of several types, which `Param` does not carry: bound here.
            let arrays = SettleArrays::new(settlements);
            sqlx::query(self.settle.clone())
                .bind(batch.claim_token)
                .bind(arrays.ids)
                .bind(arrays.statuses)
                .bind(arrays.delays)
                .bind(arrays.errors)
                .execute(pool)
                .await
                .context(&context)?
                .rows_affected()
        };
        let total = settlements.len() as u64;
        Ok(SettleReport { settled, refused: total.saturating_sub(settled) })
    }

    async fn transfer_to_dlq(&self, pool: &PgPool, max_rows: u32) -> Result<Vec<OutboxEvent>> {
        let context = "moving failed events to the DLQ";
        let rows = self.fetch_all(pool, &self.dlq_transfer_to, &[limit(max_rows)], context).await?;
        // The rows have moved whatever they hold; one that cannot be decoded (it failed for that
        // reason) is only left out of the list handed back, for the DLQ handler.
        let decoded = PgRowFormat::decode_events(&rows, self.tables().events())?;
        decoded.warn_left_out("a dead letter queue row");
        let mut moved = decoded.rows;
        moved.sort_by_key(|event| (event.updated_at, event.id));
        Ok(moved)
    }

    async fn transfer_from_dlq(&self, pool: &PgPool, max_rows: u32) -> Result<u64> {
        let context = "moving DLQ events back to the outbox";
        self.execute(pool, &self.dlq_transfer_from, &[limit(max_rows)], context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_fully_rendered() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let statements = PgQueries::new(&names);
        let own = [
            statements.claim.as_str(),
            statements.settle.as_str(),
            statements.settle_processed.as_str(),
            statements.inbox_record_many.as_str(),
        ];
        let shared = statements.common.all().map(Statement::as_str);
        for sql in own.into_iter().chain(shared) {
            for placeholder in ["{events}", "{dlq}", "{consumed}", "{jobs}", "{prefix}"] {
                assert!(!sql.contains(placeholder), "{placeholder} left in {sql}");
            }
            assert!(sql.contains("shop_outbox_"), "{sql}");
        }
        assert_eq!(statements.channel, "shop_oncebox_wake_ups");
    }

    #[test]
    fn claims_recoveries_and_settles_re_check_the_status() {
        let statements = PgQueries::new(&TableNames::default());
        let fenced = [
            ("claim", statements.claim.as_str()),
            ("recover_stuck", statements.common.recover_stuck.as_str()),
            ("settle", statements.settle.as_str()),
            ("settle_processed", statements.settle_processed.as_str()),
            ("fail_undecodable", statements.fail_undecodable.as_str()),
        ];
        oncebox_testkit::statement_rules::assert_updates_check_status(fenced);
    }

    #[test]
    fn migrations_get_the_prefix_on_every_table_and_index() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let rendered = names.render_migration(MIGRATIONS[0].1);
        assert!(rendered.contains("CREATE TABLE IF NOT EXISTS shop_outbox_events ("), "{rendered}");
        assert!(rendered.contains("shop_outbox_events_pending"), "{rendered}");
        assert!(rendered.contains("ON shop_outbox_events (updated_at, id)"), "{rendered}");
        assert!(!rendered.contains(" outbox_events"), "{rendered}");
        assert!(!rendered.contains("shop_shop_"), "{rendered}");
        assert_eq!(TableNames::default().render_migration(MIGRATIONS[3].1), MIGRATIONS[3].1);
    }
}
