//! The SQL of every statement, rendered once for the configured table names.

use std::sync::Arc;

use oncebox_core::TableNames;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

/// The strftime format of every stored timestamp: UTC, milliseconds, one fixed width, so that text
/// order is time order.
const TIMESTAMP_FORMAT: &str = "'%Y-%m-%dT%H:%M:%fZ'";
/// The database clock's now in [`TIMESTAMP_FORMAT`]. SQLite keeps `'now'` fixed within one
/// statement step, so every use in a statement sees the same instant.
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// Columns bound per row by the multi-row outbox insert.
pub(crate) const INSERT_EVENT_BINDS: usize = 6;

/// Every statement, with the table names filled in.
pub(crate) struct Statements {
    pub(crate) tables: TableNames,
    pub(crate) schema_events: SqlStr,
    pub(crate) schema_dlq: SqlStr,
    pub(crate) schema_consumed: SqlStr,
    pub(crate) schema_jobs: SqlStr,
    /// Adds `recoveries` to an outbox table that lacks it (run only after checking).
    pub(crate) schema_events_recoveries: SqlStr,
    /// Whether the outbox table has `recoveries`: `?1` is the table name.
    pub(crate) events_have_recoveries: SqlStr,
    pub(crate) insert_events_head: String,
    pub(crate) insert_events_row: String,
    pub(crate) claim: SqlStr,
    pub(crate) settle_processed: SqlStr,
    pub(crate) settle_retry: SqlStr,
    pub(crate) settle_failed: SqlStr,
    pub(crate) fail_undecodable: SqlStr,
    pub(crate) recover_stuck: SqlStr,
    pub(crate) delete_processed: SqlStr,
    pub(crate) get_event: SqlStr,
    pub(crate) count_events: SqlStr,
    pub(crate) delete_events_by_ids: SqlStr,
    pub(crate) dlq_insert_failed: SqlStr,
    pub(crate) dlq_mark_in_process: SqlStr,
    pub(crate) events_insert_from_dlq: SqlStr,
    pub(crate) dlq_delete_in_process: SqlStr,
    pub(crate) dlq_delete_resolved: SqlStr,
    pub(crate) dlq_get: SqlStr,
    pub(crate) dlq_list: SqlStr,
    pub(crate) dlq_count: SqlStr,
    pub(crate) dlq_set_status_by_ids: SqlStr,
    pub(crate) dlq_set_status_by_type: SqlStr,
    pub(crate) dlq_delete_by_ids: SqlStr,
    pub(crate) dlq_delete_by_type: SqlStr,
    pub(crate) dlq_counts: SqlStr,
    pub(crate) inbox_record: SqlStr,
    pub(crate) inbox_record_many: SqlStr,
    pub(crate) inbox_forget: SqlStr,
    pub(crate) inbox_consumed: SqlStr,
    pub(crate) inbox_delete_older_than: SqlStr,
    pub(crate) job_try_lock: SqlStr,
    pub(crate) job_unlock: SqlStr,
}

impl Statements {
    /// Renders every template for `tables`.
    pub(crate) fn new(tables: &TableNames) -> Arc<Self> {
        let text =
            |template: &str| tables.render(&template.replace("{now}", NOW).replace("{ts}", TIMESTAMP_FORMAT));
        // Only validated table names and the constants above are spliced in; values are always bound.
        let sql = |template: &str| AssertSqlSafe(Arc::<str>::from(text(template))).into_sql_str();
        Arc::new(Self {
            tables: tables.clone(),
            schema_events: sql(include_str!("../../../migrations/sqlite/0001_outbox_events.sql")),
            schema_dlq: sql(include_str!("../../../migrations/sqlite/0002_outbox_dlq_events.sql")),
            schema_consumed: sql(include_str!("../../../migrations/sqlite/0003_outbox_consumed_events.sql")),
            schema_jobs: sql(include_str!("../../../migrations/sqlite/0004_outbox_jobs.sql")),
            schema_events_recoveries: sql(include_str!(
                "../../../migrations/sqlite/0005_outbox_events_recoveries.sql"
            )),
            events_have_recoveries: sql(
                "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = 'recoveries'",
            ),
            insert_events_head: text(include_str!("../sql/insert_events.sql").trim_end()),
            insert_events_row: text(include_str!("../sql/insert_events_row.sql").trim_end()),
            claim: sql(include_str!("../sql/claim.sql")),
            settle_processed: sql(include_str!("../sql/settle_processed.sql")),
            settle_retry: sql(include_str!("../sql/settle_retry.sql")),
            settle_failed: sql(include_str!("../sql/settle_failed.sql")),
            fail_undecodable: sql(include_str!("../sql/fail_undecodable.sql")),
            recover_stuck: sql(include_str!("../sql/recover_stuck.sql")),
            delete_processed: sql(include_str!("../sql/delete_processed.sql")),
            get_event: sql(include_str!("../sql/get_event.sql")),
            count_events: sql(include_str!("../sql/count_events.sql")),
            delete_events_by_ids: sql(include_str!("../sql/delete_events_by_ids.sql")),
            dlq_insert_failed: sql(include_str!("../sql/dlq_insert_failed.sql")),
            dlq_mark_in_process: sql(include_str!("../sql/dlq_mark_in_process.sql")),
            events_insert_from_dlq: sql(include_str!("../sql/events_insert_from_dlq.sql")),
            dlq_delete_in_process: sql(include_str!("../sql/dlq_delete_in_process.sql")),
            dlq_delete_resolved: sql(include_str!("../sql/dlq_delete_resolved.sql")),
            dlq_get: sql(include_str!("../sql/dlq_get.sql")),
            dlq_list: sql(include_str!("../sql/dlq_list.sql")),
            dlq_count: sql(include_str!("../sql/dlq_count.sql")),
            dlq_set_status_by_ids: sql(include_str!("../sql/dlq_set_status_by_ids.sql")),
            dlq_set_status_by_type: sql(include_str!("../sql/dlq_set_status_by_type.sql")),
            dlq_delete_by_ids: sql(include_str!("../sql/dlq_delete_by_ids.sql")),
            dlq_delete_by_type: sql(include_str!("../sql/dlq_delete_by_type.sql")),
            dlq_counts: sql(include_str!("../sql/dlq_counts.sql")),
            inbox_record: sql(include_str!("../sql/inbox_record.sql")),
            inbox_record_many: sql(include_str!("../sql/inbox_record_many.sql")),
            inbox_forget: sql(include_str!("../sql/inbox_forget.sql")),
            inbox_consumed: sql(include_str!("../sql/inbox_consumed.sql")),
            inbox_delete_older_than: sql(include_str!("../sql/inbox_delete_older_than.sql")),
            job_try_lock: sql(include_str!("../sql/job_try_lock.sql")),
            job_unlock: sql(include_str!("../sql/job_unlock.sql")),
        })
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_fully_rendered() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let statements = Statements::new(&names);
        for sql in
            [&statements.claim, &statements.schema_events, &statements.job_unlock, &statements.dlq_list]
        {
            for placeholder in ["{events}", "{dlq}", "{consumed}", "{jobs}", "{now}", "{ts}"] {
                assert!(!sql.as_str().contains(placeholder), "{placeholder} left in {}", sql.as_str());
            }
            assert!(sql.as_str().contains("shop_outbox_"), "{}", sql.as_str());
        }
        let insert = statements.insert_events(3);
        assert_eq!(insert.as_str().matches('?').count(), 3 * INSERT_EVENT_BINDS);
        assert!(insert.as_str().starts_with("INSERT INTO shop_outbox_events"));
    }
}
