//! The SQL of every statement, rendered once for the configured table names; statements over a
//! list of ids or rows are finished per call with the right number of placeholders.

use std::sync::Arc;

use oncebox_core::TableNames;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

/// The migrations, in order, as shipped in `migrations/mysql/` (written for the default table
/// names, so any migration tool can run them as they are).
pub(crate) const MIGRATIONS: [(&str, &str); 5] = [
    ("0001_outbox_events.sql", include_str!("../../../migrations/mysql/0001_outbox_events.sql")),
    ("0002_outbox_dlq_events.sql", include_str!("../../../migrations/mysql/0002_outbox_dlq_events.sql")),
    (
        "0003_outbox_consumed_events.sql",
        include_str!("../../../migrations/mysql/0003_outbox_consumed_events.sql"),
    ),
    ("0004_outbox_jobs.sql", include_str!("../../../migrations/mysql/0004_outbox_jobs.sql")),
    (
        "0005_outbox_events_recoveries.sql",
        include_str!("../../../migrations/mysql/0005_outbox_events_recoveries.sql"),
    ),
];

/// Index in [`MIGRATIONS`] of the one migration that is not idempotent by itself (MySQL 8 has no
/// `ADD COLUMN IF NOT EXISTS`): auto-create runs it only when the column is missing.
pub(crate) const ADD_RECOVERIES: usize = 4;

/// Rows per multi-row insert: six placeholders each, far below the server's 65,535 per
/// statement, and few enough that a batch of ordinary events stays well inside the default
/// `max_allowed_packet` (16 MiB on MariaDB, 64 MiB on MySQL 8).
pub(crate) const INSERT_CHUNK_ROWS: usize = 500;
/// A chunk is also cut when its payloads and headers pass this many bytes, whatever its row count.
pub(crate) const INSERT_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Ids per `IN (…)` list; longer lists are split.
pub(crate) const MAX_IDS_PER_STATEMENT: usize = 4096;

/// One row of the multi-row insert.
const INSERT_ROW: &str =
    "(?, ?, ?, ?, ?, ?, 'PENDING', 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";
/// One row of the settle's outcome table (the first names the columns).
const OUTCOME_FIRST_ROW: &str = "SELECT ? AS id, ? AS status, ? AS delay_micros, ? AS error";
const OUTCOME_ROW: &str = " UNION ALL SELECT ?, ?, ?, ?";

/// A statement with one list-shaped hole (`{ids}`, `{rows}` or `{outcomes}`) to fill per call.
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

    /// The statement with `slots` id placeholders (see [`id_slots`]).
    pub(crate) fn with_ids(&self, slots: usize) -> SqlStr {
        self.fill(&vec!["?"; slots].join(", "))
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

/// How many id placeholders a list of `ids` ids gets: the next power of two, the extra slots
/// bound to the last id again. A repeated id changes nothing in `IN (…)`, and the server and the
/// driver's statement cache then see a dozen statement texts instead of one per list length.
pub(crate) fn id_slots(ids: usize) -> usize {
    ids.max(1).next_power_of_two()
}

/// Every statement, with the table names filled in.
pub(crate) struct Statements {
    pub(crate) tables: TableNames,
    pub(crate) schema: [SqlStr; 5],
    /// Whether the outbox table (`?`) of the current database has `recoveries`.
    pub(crate) events_have_recoveries: SqlStr,
    pub(crate) insert_events: Template,
    pub(crate) claim_select: SqlStr,
    pub(crate) claim_update: Template,
    pub(crate) settle_processed: Template,
    pub(crate) settle_outcomes: Template,
    pub(crate) fail_undecodable: SqlStr,
    pub(crate) recover_stuck: SqlStr,
    pub(crate) delete_processed: SqlStr,
    pub(crate) get_event: SqlStr,
    pub(crate) count_events: SqlStr,
    pub(crate) dlq_lock_failed: SqlStr,
    pub(crate) dlq_copy_failed: Template,
    pub(crate) delete_events_by_ids: Template,
    pub(crate) dlq_lock_to_retry: SqlStr,
    pub(crate) events_insert_from_dlq: Template,
    pub(crate) dlq_delete_resolved: SqlStr,
    pub(crate) dlq_get: SqlStr,
    pub(crate) dlq_list: SqlStr,
    pub(crate) dlq_count: SqlStr,
    pub(crate) dlq_counts: SqlStr,
    pub(crate) dlq_set_status_by_ids: Template,
    pub(crate) dlq_set_status_by_type: SqlStr,
    pub(crate) dlq_delete_by_ids: Template,
    pub(crate) dlq_delete_by_type: SqlStr,
    pub(crate) inbox_record: SqlStr,
    pub(crate) inbox_forget: SqlStr,
    pub(crate) inbox_consumed: Template,
    pub(crate) inbox_delete_older_than: SqlStr,
    pub(crate) job_take_expired: SqlStr,
    pub(crate) job_insert: SqlStr,
    pub(crate) job_unlock: SqlStr,
}

/// `template` for `tables`, without its comment lines: the comments document the files, and the
/// server need not parse them on every prepare.
fn render(tables: &TableNames, template: &str) -> String {
    let code: Vec<&str> = template.lines().filter(|line| !line.trim_start().starts_with("--")).collect();
    tables.render(&code.join("\n"))
}

impl Statements {
    /// Renders every template for `tables`.
    pub(crate) fn new(tables: &TableNames) -> Arc<Self> {
        let sql = |template: &str| AssertSqlSafe(render(tables, template)).into_sql_str();
        let ids = |template: &str| Template::new(&render(tables, template), "{ids}");
        let migration =
            |index: usize| AssertSqlSafe(tables.render_migration(MIGRATIONS[index].1)).into_sql_str();
        Arc::new(Self {
            tables: tables.clone(),
            schema: [migration(0), migration(1), migration(2), migration(3), migration(ADD_RECOVERIES)],
            events_have_recoveries: sql("SELECT COUNT(*) FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'recoveries'"),
            insert_events: Template::new(&render(tables, include_str!("../sql/insert_events.sql")), "{rows}"),
            claim_select: sql(include_str!("../sql/claim_select.sql")),
            claim_update: ids(include_str!("../sql/claim_update.sql")),
            settle_processed: ids(include_str!("../sql/settle_processed.sql")),
            settle_outcomes: Template::new(
                &render(tables, include_str!("../sql/settle_outcomes.sql")),
                "{outcomes}",
            ),
            fail_undecodable: sql(include_str!("../sql/fail_undecodable.sql")),
            recover_stuck: sql(include_str!("../sql/recover_stuck.sql")),
            delete_processed: sql(include_str!("../sql/delete_processed.sql")),
            get_event: sql(include_str!("../sql/get_event.sql")),
            count_events: sql(include_str!("../sql/count_events.sql")),
            dlq_lock_failed: sql(include_str!("../sql/dlq_lock_failed.sql")),
            dlq_copy_failed: ids(include_str!("../sql/dlq_copy_failed.sql")),
            delete_events_by_ids: ids(include_str!("../sql/delete_events_by_ids.sql")),
            dlq_lock_to_retry: sql(include_str!("../sql/dlq_lock_to_retry.sql")),
            events_insert_from_dlq: ids(include_str!("../sql/events_insert_from_dlq.sql")),
            dlq_delete_resolved: sql(include_str!("../sql/dlq_delete_resolved.sql")),
            dlq_get: sql(include_str!("../sql/dlq_get.sql")),
            dlq_list: sql(include_str!("../sql/dlq_list.sql")),
            dlq_count: sql(include_str!("../sql/dlq_count.sql")),
            dlq_counts: sql(include_str!("../sql/dlq_counts.sql")),
            dlq_set_status_by_ids: ids(include_str!("../sql/dlq_set_status_by_ids.sql")),
            dlq_set_status_by_type: sql(include_str!("../sql/dlq_set_status_by_type.sql")),
            dlq_delete_by_ids: ids(include_str!("../sql/dlq_delete_by_ids.sql")),
            dlq_delete_by_type: sql(include_str!("../sql/dlq_delete_by_type.sql")),
            inbox_record: sql(include_str!("../sql/inbox_record.sql")),
            inbox_forget: sql(include_str!("../sql/inbox_forget.sql")),
            inbox_consumed: ids(include_str!("../sql/inbox_consumed.sql")),
            inbox_delete_older_than: sql(include_str!("../sql/inbox_delete_older_than.sql")),
            job_take_expired: sql(include_str!("../sql/job_take_expired.sql")),
            job_insert: sql(include_str!("../sql/job_insert.sql")),
            job_unlock: sql(include_str!("../sql/job_unlock.sql")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_fully_rendered() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let statements = Statements::new(&names);
        let filled = [
            statements.claim_select.clone(),
            statements.claim_update.with_ids(4),
            statements.settle_outcomes.with_outcomes(3),
            statements.insert_events.with_rows(2),
            statements.job_unlock.clone(),
            statements.dlq_list.clone(),
        ];
        for sql in &filled {
            for placeholder in
                ["{events}", "{dlq}", "{consumed}", "{jobs}", "{prefix}", "{ids}", "{rows}", "{outcomes}"]
            {
                assert!(!sql.as_str().contains(placeholder), "{placeholder} left in {}", sql.as_str());
            }
            assert!(sql.as_str().contains("shop_outbox_"), "{}", sql.as_str());
        }
        assert!(statements.claim_select.as_str().contains("FORCE INDEX (shop_outbox_events_claim)"));
    }

    #[test]
    fn placeholders_match_the_bound_values() {
        let statements = Statements::new(&TableNames::default());
        let count = |sql: SqlStr| sql.as_str().matches('?').count();
        // Comment lines are stripped, so every '?' left is a placeholder.
        assert_eq!(count(statements.claim_update.with_ids(8)), 2 + 8);
        assert_eq!(count(statements.insert_events.with_rows(3)), 18);
        assert_eq!(count(statements.settle_outcomes.with_outcomes(5)), 4 * 5 + 1);
        assert_eq!(count(statements.settle_processed.with_ids(1)), 2);
    }

    #[test]
    fn id_lists_are_padded_to_powers_of_two() {
        assert_eq!(id_slots(0), 1);
        assert_eq!(id_slots(1), 1);
        assert_eq!(id_slots(3), 4);
        assert_eq!(id_slots(100), 128);
        assert_eq!(id_slots(MAX_IDS_PER_STATEMENT), MAX_IDS_PER_STATEMENT);
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
