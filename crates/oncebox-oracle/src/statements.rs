//! Every statement of the dialect, rendered once for the configured table names from the
//! same-named files in `sql/`, and the shipped migrations in `migrations/oracle/`.

use oncebox_core::TableNames;

/// The migrations, in order, as shipped in `migrations/oracle/`.
pub(crate) const MIGRATIONS: [(&str, &str); 7] = [
    ("0001_outbox_events.sql", include_str!("../../../migrations/oracle/0001_outbox_events.sql")),
    ("0002_outbox_dlq_events.sql", include_str!("../../../migrations/oracle/0002_outbox_dlq_events.sql")),
    (
        "0003_outbox_consumed_events.sql",
        include_str!("../../../migrations/oracle/0003_outbox_consumed_events.sql"),
    ),
    ("0004_outbox_jobs.sql", include_str!("../../../migrations/oracle/0004_outbox_jobs.sql")),
    (
        "0005_outbox_events_recoveries.sql",
        include_str!("../../../migrations/oracle/0005_outbox_events_recoveries.sql"),
    ),
    (
        "0006_outbox_consumed_events_claims.sql",
        include_str!("../../../migrations/oracle/0006_outbox_consumed_events_claims.sql"),
    ),
    (
        "0007_outbox_inbox_messages.sql",
        include_str!("../../../migrations/oracle/0007_outbox_inbox_messages.sql"),
    ),
];

/// The most expressions Oracle takes in one `IN` list (ORA-01795); longer id lists are split.
pub(crate) const MAX_IDS: usize = 1_000;

macro_rules! statements {
    ($($name:ident),* $(,)?) => {
        /// The dialect's SQL for one set of table names (`{ids}` stands for an id list, filled in
        /// by [`with_ids`]).
        #[derive(Debug, Clone)]
        pub(crate) struct Statements {
            pub(crate) tables: TableNames,
            /// The migrations' PL/SQL blocks, in order.
            pub(crate) schema: [String; MIGRATIONS.len()],
            $(pub(crate) $name: String,)*
        }

        impl Statements {
            /// Renders every file for `tables`. Only validated table names are spliced in;
            /// values are always bound.
            pub(crate) fn new(tables: &TableNames) -> Self {
                Self {
                    tables: tables.clone(),
                    schema: MIGRATIONS.map(|(_, sql)| tables.render_migration(sql)),
                    $($name: tables.render(include_str!(concat!("../sql/", stringify!($name), ".sql"))),)*
                }
            }

            /// Every statement (not the migrations), for checks over all of them.
            #[cfg(test)]
            pub(crate) fn all(&self) -> impl Iterator<Item = (&'static str, &str)> {
                [$((stringify!($name), self.$name.as_str())),*].into_iter()
            }
        }
    };
}

statements! {
    claim_lock, claim_update, claim_taken, fail_undecodable, settle, recover_lock, recover_update,
    delete_processed, get_event, count_events, oldest_pending,
    dlq_lock_failed, dlq_remove_ids, dlq_copy_failed, delete_events_by_ids, dlq_lock_to_retry,
    events_insert_from_dlq, dlq_delete_resolved, dlq_get, dlq_list, dlq_count, dlq_counts,
    dlq_set_status_by_ids, dlq_set_status_by_type, dlq_delete_by_ids, dlq_delete_by_type,
    dlq_older_by_ids, dlq_older_by_type,
    inbox_record, inbox_consumed, inbox_claim, inbox_take_over, inbox_finish, inbox_release,
    inbox_delete_older_than,
    stored_insert, stored_due, stored_mark, stored_claimed, stored_get, stored_processed, stored_retry,
    stored_failed, stored_recover, stored_delete, stored_counts,
    insert_events, job_take_expired, job_insert, job_unlock,
}

/// The bind names of an id list of `count` ids: `id0`, `id1`, …
pub(crate) fn id_names(count: usize) -> Vec<String> {
    (0..count).map(|index| format!("id{index}")).collect()
}

/// `sql` with `{ids}` replaced by the placeholders of `count` ids (`:id0, :id1, …`). An empty
/// list becomes `NULL`, which matches nothing.
pub(crate) fn with_ids(sql: &str, count: usize) -> String {
    let list = if count == 0 {
        "NULL".to_owned()
    } else {
        id_names(count).iter().map(|name| format!(":{name}")).collect::<Vec<_>>().join(", ")
    };
    sql.replace("{ids}", &list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> Statements {
        Statements::new(&TableNames::with_prefix("shop_").unwrap())
    }

    #[test]
    fn every_statement_is_rendered_for_the_prefix() {
        let statements = shop();
        for (name, sql) in statements.all() {
            for placeholder in ["{events}", "{dlq}", "{consumed}", "{inbox}", "{jobs}", "{prefix}"] {
                assert!(!sql.contains(placeholder), "{placeholder} left in {name}");
            }
            assert!(sql.contains("shop_outbox_"), "{name} names no prefixed table");
            // A SQL statement sent through OCI must not end with a semicolon.
            assert!(!sql.trim_end().ends_with(';'), "{name} ends with ';'");
            // Positional binds would bind a name used twice as two values; every bind is named.
            let sql = code(sql);
            assert!(!sql.contains(":1") && !sql.contains('?'), "{name} has a positional bind");
        }
    }

    /// `sql` without its comment lines.
    fn code(sql: &str) -> String {
        sql.lines().filter(|line| !line.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn claims_and_transfers_never_limit_a_locking_cursor() {
        // ORA-02014: FETCH FIRST with FOR UPDATE is refused; the row count is the fetch's.
        let statements = shop();
        for (name, sql) in statements.all() {
            let sql = code(sql);
            if sql.contains("FOR UPDATE") {
                assert!(sql.contains("SKIP LOCKED"), "{name} would wait on other claimers");
                assert!(!sql.contains("FETCH FIRST") && !sql.contains("ROWNUM"), "{name} limits its cursor");
            }
        }
        for sql in [
            &statements.claim_lock,
            &statements.recover_lock,
            &statements.dlq_lock_failed,
            &statements.stored_due,
        ] {
            assert!(sql.contains("FOR UPDATE SKIP LOCKED"), "{sql}");
        }
    }

    #[test]
    fn claims_recoveries_and_settles_re_check_the_status() {
        // A row the cursor locked may have been settled between the cursor's open and its fetch.
        let statements = shop();
        let fenced = [
            ("claim_update", &statements.claim_update),
            ("recover_update", &statements.recover_update),
            ("settle", &statements.settle),
            ("fail_undecodable", &statements.fail_undecodable),
            ("stored_mark", &statements.stored_mark),
            ("stored_processed", &statements.stored_processed),
            ("stored_retry", &statements.stored_retry),
            ("stored_failed", &statements.stored_failed),
            ("stored_recover", &statements.stored_recover),
        ];
        let rendered = fenced.map(|(name, sql)| (name, with_ids(sql, 2)));
        oncebox_testkit::statement_rules::assert_updates_check_status(
            rendered.iter().map(|(name, sql)| (*name, sql.as_str())),
        );
    }

    #[test]
    fn migrations_are_plsql_blocks_with_prefixed_names() {
        let statements = shop();
        for (sql, (file, _)) in statements.schema.iter().zip(MIGRATIONS) {
            assert!(sql.trim_end().ends_with("END;"), "{file} is not one PL/SQL block");
            assert!(!sql.contains(" outbox_"), "{file} left a name without the prefix");
        }
        let events = &statements.schema[0];
        assert!(events.contains("CREATE TABLE shop_outbox_events ("), "{events}");
        assert!(events.contains("CONSTRAINT shop_outbox_events_pk PRIMARY KEY (id)"), "{events}");
        assert!(events.contains("CREATE INDEX shop_outbox_events_claim ON shop_outbox_events"), "{events}");
        assert!(events.contains("id            RAW(16)"), "{events}");
        // Re-running a file is harmless: it ignores exactly "already exists" errors.
        assert!(events.contains("-955, -1408, -1430"), "{events}");
        assert_eq!(TableNames::default().render_migration(MIGRATIONS[3].1), MIGRATIONS[3].1);
        let inbox = &statements.schema[6];
        assert!(inbox.contains("CREATE TABLE shop_outbox_inbox_messages ("), "{inbox}");
        assert!(
            inbox.contains("CONSTRAINT shop_outbox_inbox_messages_pk PRIMARY KEY (consumer, id)"),
            "{inbox}"
        );
        assert!(
            inbox.contains("CREATE INDEX shop_outbox_inbox_messages_due ON shop_outbox_inbox_messages"),
            "{inbox}"
        );
    }

    #[test]
    fn the_durable_inbox_statements_name_its_table() {
        // Every stored_* statement works on the durable inbox's table, and settles are fenced by
        // the token as well as the status.
        let statements = shop();
        for (name, sql) in statements.all().filter(|(name, _)| name.starts_with("stored_")) {
            assert!(sql.contains("shop_outbox_inbox_messages"), "{name} names another table");
        }
        for sql in [&statements.stored_processed, &statements.stored_retry, &statements.stored_failed] {
            assert!(code(sql).contains("claim_token = :claim_token"), "{sql}");
        }
    }

    #[test]
    fn publishing_works_on_a_table_from_before_recoveries() {
        // The conformance case drops `recoveries` and publishes before create_schema adds it.
        assert!(!code(&shop().insert_events).contains("recoveries"));
    }

    #[test]
    fn indexed_text_lookups_cast_the_nvarchar_bind() {
        let statements = shop();
        for sql in [
            &statements.claim_lock,
            &statements.inbox_consumed,
            &statements.job_take_expired,
            &statements.stored_due,
            &statements.stored_processed,
        ] {
            assert!(sql.contains("CAST(:") && sql.contains("AS VARCHAR2(255 CHAR))"), "{sql}");
        }
    }

    #[test]
    fn id_lists_are_named_placeholders() {
        assert_eq!(
            with_ids("DELETE FROM t WHERE id IN ({ids})", 3),
            "DELETE FROM t WHERE id IN (:id0, :id1, :id2)"
        );
        assert_eq!(with_ids("x IN ({ids})", 0), "x IN (NULL)");
        assert_eq!(id_names(2), ["id0", "id1"]);
    }
}
