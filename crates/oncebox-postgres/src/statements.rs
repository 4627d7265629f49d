//! The SQL of every statement, rendered once for the configured table names.

use std::sync::Arc;

use oncebox_core::TableNames;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

/// The migrations, in order, as shipped in `migrations/postgres/` (written for the default table
/// names, so any migration tool can run them as they are).
pub(crate) const MIGRATIONS: [(&str, &str); 5] = [
    ("0001_outbox_events.sql", include_str!("../../../migrations/postgres/0001_outbox_events.sql")),
    ("0002_outbox_dlq_events.sql", include_str!("../../../migrations/postgres/0002_outbox_dlq_events.sql")),
    (
        "0003_outbox_consumed_events.sql",
        include_str!("../../../migrations/postgres/0003_outbox_consumed_events.sql"),
    ),
    ("0004_outbox_jobs.sql", include_str!("../../../migrations/postgres/0004_outbox_jobs.sql")),
    (
        "0005_outbox_events_recoveries.sql",
        include_str!("../../../migrations/postgres/0005_outbox_events_recoveries.sql"),
    ),
];

/// Every statement, with the table names filled in.
pub(crate) struct Statements {
    pub(crate) tables: TableNames,
    /// The NOTIFY channel of these tables.
    pub(crate) channel: String,
    pub(crate) schema_events: SqlStr,
    pub(crate) schema_dlq: SqlStr,
    pub(crate) schema_consumed: SqlStr,
    pub(crate) schema_jobs: SqlStr,
    pub(crate) schema_events_recoveries: SqlStr,
    pub(crate) insert_events: SqlStr,
    pub(crate) insert_events_notify: SqlStr,
    pub(crate) claim: SqlStr,
    pub(crate) settle: SqlStr,
    pub(crate) settle_processed: SqlStr,
    pub(crate) fail_undecodable: SqlStr,
    pub(crate) recover_stuck: SqlStr,
    pub(crate) delete_processed: SqlStr,
    pub(crate) get_event: SqlStr,
    pub(crate) count_events: SqlStr,
    pub(crate) dlq_transfer_to: SqlStr,
    pub(crate) dlq_transfer_from: SqlStr,
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

/// The NOTIFY channel for the tables with `prefix`: one per prefix, so two oncebox installations
/// sharing a database do not wake each other.
pub(crate) fn channel_for(prefix: &str) -> String {
    format!("{prefix}oncebox_wake_ups")
}

impl Statements {
    /// Renders every template for `tables`.
    pub(crate) fn new(tables: &TableNames) -> Arc<Self> {
        // Only validated table names are spliced in; values are always bound.
        let sql = |template: &str| AssertSqlSafe(Arc::<str>::from(tables.render(template))).into_sql_str();
        let migration = |index: usize| {
            AssertSqlSafe(Arc::<str>::from(tables.render_migration(MIGRATIONS[index].1))).into_sql_str()
        };
        let insert_events_text = tables.render(include_str!("../sql/insert_events.sql"));
        let insert_events_notify_text = tables.render(include_str!("../sql/insert_events_notify.sql"));
        Arc::new(Self {
            tables: tables.clone(),
            channel: channel_for(tables.prefix()),
            schema_events: migration(0),
            schema_dlq: migration(1),
            schema_consumed: migration(2),
            schema_jobs: migration(3),
            schema_events_recoveries: migration(4),
            insert_events: AssertSqlSafe(Arc::<str>::from(insert_events_text.as_str())).into_sql_str(),
            insert_events_notify: AssertSqlSafe(Arc::<str>::from(insert_events_notify_text.as_str()))
                .into_sql_str(),
            claim: sql(include_str!("../sql/claim.sql")),
            settle: sql(include_str!("../sql/settle.sql")),
            settle_processed: sql(include_str!("../sql/settle_processed.sql")),
            fail_undecodable: sql(include_str!("../sql/fail_undecodable.sql")),
            recover_stuck: sql(include_str!("../sql/recover_stuck.sql")),
            delete_processed: sql(include_str!("../sql/delete_processed.sql")),
            get_event: sql(include_str!("../sql/get_event.sql")),
            count_events: sql(include_str!("../sql/count_events.sql")),
            dlq_transfer_to: sql(include_str!("../sql/dlq_transfer_to.sql")),
            dlq_transfer_from: sql(include_str!("../sql/dlq_transfer_from.sql")),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_fully_rendered() {
        let names = TableNames::with_prefix("shop_").unwrap_or_default();
        let statements = Statements::new(&names);
        for sql in [
            &statements.claim,
            &statements.settle,
            &statements.settle_processed,
            &statements.job_unlock,
            &statements.dlq_list,
        ] {
            for placeholder in ["{events}", "{dlq}", "{consumed}", "{jobs}", "{prefix}"] {
                assert!(!sql.as_str().contains(placeholder), "{placeholder} left in {}", sql.as_str());
            }
            assert!(sql.as_str().contains("shop_outbox_"), "{}", sql.as_str());
        }
        assert_eq!(statements.channel, "shop_oncebox_wake_ups");
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
