//! Statements as the dialects load them from their `sql/` files, and the values bound to them.
//!
//! Every dialect's file for one operation numbers its values the same way (`$1` on PostgreSQL,
//! `?1` on SQLite and in the MySQL files), so the shared operations bind one list of [`Param`]s
//! for all of them. MySQL has only positional `?`: [`Statement::positional`] turns each `?N` into
//! `?` and remembers which value goes there, so a MySQL file can use a value twice or in any order.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use oncebox_core::TableNames;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};
use uuid::Uuid;

/// A value bound to a statement, in the order the statement numbers its placeholders.
#[derive(Clone, Copy, Debug)]
pub enum Param<'a> {
    /// Text: a consumer, an event type, a status, a job name.
    Text(&'a str),
    /// Text or `NULL` (a filter that may be absent).
    OptionalText(Option<&'a str>),
    /// A whole number: a row limit, an offset, a count.
    Int(i64),
    /// One id.
    Id(Uuid),
    /// A non-empty list of ids, for `IN`/`ANY`: one array, one JSON text or one placeholder per id,
    /// as the database takes lists. Long lists are split with [`Queries::execute_over_ids`].
    ///
    /// [`Queries::execute_over_ids`]: crate::Queries::execute_over_ids
    Ids(&'a [Uuid]),
    /// A span before a time the statement names (usually the database's now).
    Before(Duration),
    /// A span after a time the statement names.
    After(Duration),
    /// A point in time read from the database earlier (a claim's time).
    Time(DateTime<Utc>),
    /// A point in time or `NULL` (an event's creation time, when its message said).
    OptionalTime(Option<DateTime<Utc>>),
    /// Bytes stored as they are (a durable inbox message's payload).
    Bytes(&'a [u8]),
}

/// One statement, its table names filled in.
#[derive(Clone, Debug)]
pub struct Statement {
    sql: SqlStr,
    positional: Option<Positional>,
}

/// A statement for a database with only positional placeholders: the text around them and, for
/// each, the index of its value in the [`Param`] list.
#[derive(Clone, Debug)]
struct Positional {
    parts: Vec<String>,
    order: Vec<usize>,
}

impl Statement {
    /// A statement whose placeholders the database numbers itself (`$1`, `?1`).
    ///
    /// The text must come from the dialect's own files with validated table names spliced in:
    /// values are always bound, never formatted into it.
    pub fn numbered(sql: String) -> Self {
        Self { sql: AssertSqlSafe(Arc::<str>::from(sql)).into_sql_str(), positional: None }
    }

    /// A statement for a database with only positional `?` placeholders, written with numbered
    /// ones (`?1`, `?2`, … outside quoted text): each becomes `?`, bound to the value it numbers.
    ///
    /// Only `'…'` text is recognised as quoted: the files keep `?N` out of comments (whole `--`
    /// lines are stripped before), double-quoted text and identifiers.
    pub fn positional(text: &str) -> Self {
        let mut parts = Vec::new();
        let mut order = Vec::new();
        let mut part = String::with_capacity(text.len());
        let mut quoted = false;
        let mut chars = text.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            if c == '\'' {
                quoted = !quoted;
            }
            let starts_number = chars.peek().is_some_and(|(_, next)| next.is_ascii_digit());
            if c != '?' || quoted || !starts_number {
                part.push(c);
                continue;
            }
            let mut digits = String::new();
            while let Some((_, digit)) = chars.next_if(|(_, next)| next.is_ascii_digit()) {
                digits.push(digit);
            }
            parts.push(std::mem::take(&mut part));
            // `?0` (or a number past usize) names no value: it gets an index no list has, so
            // binding it fails and names the statement.
            order.push(
                digits.parse::<usize>().ok().and_then(|number| number.checked_sub(1)).unwrap_or(usize::MAX),
            );
        }
        parts.push(part);
        let sql = parts.join("?");
        Self {
            sql: AssertSqlSafe(Arc::<str>::from(sql)).into_sql_str(),
            positional: Some(Positional { parts, order }),
        }
    }

    /// The statement's text.
    pub fn as_str(&self) -> &str {
        self.sql.as_str()
    }

    /// The text to run with `params`: the statement itself, or for a positional statement with a
    /// list of ids, the list's placeholder repeated [`id_slots`] times.
    pub fn sql_for(&self, params: &[Param<'_>]) -> SqlStr {
        let Some(positional) = &self.positional else {
            return self.sql.clone();
        };
        let list_len = |index: &usize| match params.get(*index) {
            Some(Param::Ids(ids)) => Some(ids.len()),
            _ => None,
        };
        if !positional.order.iter().any(|index| list_len(index).is_some()) {
            return self.sql.clone();
        }
        let mut sql = String::with_capacity(self.sql.as_str().len() + 64);
        for (part, index) in positional.parts.iter().zip(&positional.order) {
            sql.push_str(part);
            let slots = list_len(index).map_or(1, id_slots);
            sql.push_str(&vec!["?"; slots].join(", "));
        }
        if let Some(last) = positional.parts.last() {
            sql.push_str(last);
        }
        // Made only of the checked text above and placeholders.
        AssertSqlSafe(sql).into_sql_str()
    }

    /// For a positional statement, the index in the [`Param`] list of each placeholder's value,
    /// in text order; `None` for a numbered one, whose values are bound in list order.
    pub fn bind_order(&self) -> Option<&[usize]> {
        self.positional.as_ref().map(|positional| positional.order.as_slice())
    }
}

/// How many placeholders a list of `ids` ids gets where each id has its own: the next power of
/// two, the spare ones bound to the last id again. A repeated id changes nothing in `IN (…)`, and
/// the server and the driver's statement cache see a dozen texts instead of one per list length.
pub fn id_slots(ids: usize) -> usize {
    ids.max(1).next_power_of_two()
}

/// Declares the statements the shared operations run, each once: its field in [`SqlFiles`] and
/// [`Statements`], the file [`sql_files!`](crate::sql_files) reads it from, its place in
/// [`Statements::all`].
macro_rules! shared_statements {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The text of every statement the shared operations run, as read from a dialect's `sql/`
        /// directory by [`sql_files!`](crate::sql_files).
        #[derive(Clone, Copy, Debug)]
        pub struct SqlFiles {
            $($(#[doc = $doc])* pub $name: &'static str,)*
        }

        /// The statements the shared operations run, rendered for one set of table names.
        #[derive(Clone, Debug)]
        pub struct Statements {
            pub(crate) tables: TableNames,
            $($(#[doc = $doc])* pub $name: Statement,)*
        }

        /// How many statements the shared operations run.
        const SHARED: usize = [$(stringify!($name)),*].len();

        impl Statements {
            /// Prepares each of `files` with `prepare` (which renders the table names of `tables`
            /// and makes a [`Statement`] the way the database numbers placeholders).
            pub fn new(tables: &TableNames, files: SqlFiles, prepare: impl Fn(&str) -> Statement) -> Self {
                Self { tables: tables.clone(), $($name: prepare(files.$name),)* }
            }

            /// Every statement, for checks that each is fully rendered.
            pub fn all(&self) -> [&Statement; SHARED] {
                [$(&self.$name),*]
            }
        }

        /// The [`SqlFiles`] of the calling crate's `sql/` directory, embedded at compile time:
        /// every sqlx dialect keeps its statements under the same file names.
        #[macro_export]
        macro_rules! sql_files {
            () => {
                $crate::SqlFiles {
                    $($name: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/", stringify!($name), ".sql")),)*
                }
            };
        }
    };
}

shared_statements! {
    /// Returns stuck `IN_PROCESS` rows to `PENDING`, or fails them after too many recoveries.
    recover_stuck,
    /// Deletes old `PROCESSED` rows.
    delete_processed,
    /// Reads one outbox row.
    get_event,
    /// Counts outbox rows by event type and status.
    count_events,
    /// The age of the oldest PENDING row per event type.
    oldest_pending,
    /// Deletes old `RESOLVED` DLQ rows.
    dlq_delete_resolved,
    /// Reads one DLQ row.
    dlq_get,
    /// Lists DLQ rows by optional status and event type.
    dlq_list,
    /// Counts DLQ rows by optional status and event type.
    dlq_count,
    /// Counts DLQ rows by event type and DLQ status.
    dlq_counts,
    /// Sets the DLQ status of rows by id.
    dlq_set_status_by_ids,
    /// Sets the DLQ status of an event type's rows.
    dlq_set_status_by_type,
    /// Deletes DLQ rows by id.
    dlq_delete_by_ids,
    /// Deletes an event type's DLQ rows.
    dlq_delete_by_type,
    /// Counts the DLQ rows with given ids written more than an age ago, and the oldest's age.
    dlq_older_by_ids,
    /// Counts an event type's DLQ rows written more than an age ago, and the oldest's age.
    dlq_older_by_type,
    /// Claims one inbox id for a non-transactional effect: one changed row when it was new.
    inbox_claim,
    /// Takes over an inbox claim whose lease ran out: one changed row when taken.
    inbox_take_over,
    /// Marks an inbox claim applied, fenced by its token.
    inbox_finish,
    /// Removes an inbox claim after a failed effect, fenced by its token.
    inbox_release,
    /// Which of a list of ids a consumer recorded as applied.
    inbox_consumed,
    /// Deletes old inbox records.
    inbox_delete_older_than,
    /// Ends a job lease, keeping it at least its minimum.
    job_unlock,
    /// Records one inbox id: one changed row when it was new.
    inbox_record,
    /// Takes a job lease that is free or has run out: one changed row when it was taken.
    job_try_lock,
    /// Stores a durable inbox message as RECEIVED: one changed row when it was new.
    stored_insert,
    /// Selects (and, where the database can, locks) due RECEIVED messages for a claim.
    stored_due,
    /// Marks listed messages PROCESSING under a claim token.
    stored_mark,
    /// Reads the messages claimed under a token.
    stored_claimed,
    /// Reads one stored message.
    stored_get,
    /// Settles a claimed message PROCESSED, fenced by its token.
    stored_processed,
    /// Settles a failed run: RECEIVED again later, fenced by its token.
    stored_retry,
    /// Settles a message FAILED, fenced by its token.
    stored_failed,
    /// Returns messages whose claim's lease ran out, or fails them.
    stored_recover,
    /// Deletes old PROCESSED messages.
    stored_delete,
    /// Counts stored messages by consumer, event type and status.
    stored_counts,
}

/// The migrations of one dialect, in order, as `(file name, SQL)` pairs embedded at compile time
/// from `migrations/<dialect>/` at the workspace root: every dialect ships the same seven files,
/// written for the default table names so that any migration tool can run them as they are.
#[macro_export]
macro_rules! migrations {
    ($dialect:literal) => {
        $crate::migrations!(@files $dialect; "0001_outbox_events.sql", "0002_outbox_dlq_events.sql",
            "0003_outbox_consumed_events.sql", "0004_outbox_jobs.sql",
            "0005_outbox_events_recoveries.sql", "0006_outbox_consumed_events_claims.sql",
            "0007_outbox_inbox_messages.sql")
    };
    (@files $dialect:literal; $($file:literal),*) => {
        [$(($file, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/", $dialect, "/", $file)))),*]
    };
}

impl Statements {
    /// The table names the statements were rendered for.
    pub fn tables(&self) -> &TableNames {
        &self.tables
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_statements_bind_each_number_where_it_stands() {
        let statement = Statement::positional(
            "UPDATE t SET a = ?3, note = 'why?1' WHERE (?1 IS NULL OR s = ?1) AND b = ?2 LIMIT ?10",
        );
        assert_eq!(
            statement.as_str(),
            "UPDATE t SET a = ?, note = 'why?1' WHERE (? IS NULL OR s = ?) AND b = ? LIMIT ?"
        );
        assert_eq!(statement.bind_order(), Some(&[2, 0, 0, 1, 9][..]));
        assert_eq!(Statement::numbered("SELECT $1".into()).bind_order(), None);
        assert_eq!(Statement::positional("SELECT ?0").bind_order(), Some(&[usize::MAX][..]));
    }

    #[test]
    fn id_lists_of_positional_statements_get_one_placeholder_per_slot() {
        let statement = Statement::positional("DELETE FROM t WHERE s = ?1 AND id IN (?2)");
        let ids = [Uuid::nil(); 3];
        let sql = statement.sql_for(&[Param::Text("x"), Param::Ids(&ids)]);
        assert_eq!(sql.as_str(), "DELETE FROM t WHERE s = ? AND id IN (?, ?, ?, ?)");
        let single = statement.sql_for(&[Param::Text("x"), Param::Id(Uuid::nil())]);
        assert_eq!(single.as_str(), "DELETE FROM t WHERE s = ? AND id IN (?)");
    }

    #[test]
    fn id_lists_are_padded_to_powers_of_two() {
        assert_eq!(id_slots(0), 1);
        assert_eq!(id_slots(1), 1);
        assert_eq!(id_slots(3), 4);
        assert_eq!(id_slots(100), 128);
        assert_eq!(id_slots(4096), 4096);
    }
}
