//! Validated table names: the only identifiers that ever reach SQL.

use crate::error::{Error, Result};

/// The five table names, derived from a validated prefix.
///
/// The fields are private: these names are spliced into SQL, so the only way to make one is
/// [`with_prefix`](Self::with_prefix), which validates the prefix; nothing can change them after.
///
/// ```compile_fail
/// let mut names = oncebox_core::TableNames::default();
/// names.events = "outbox_events; DROP TABLE orders".to_owned(); // private: does not compile
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames {
    events: String,
    dlq: String,
    consumed: String,
    inbox: String,
    jobs: String,
    prefix: String,
}

impl TableNames {
    /// Table names for `prefix` (may be empty). A prefix must match `[a-z_][a-z0-9_]*` and keep the
    /// longest name within 63 characters (PostgreSQL's identifier limit).
    pub fn with_prefix(prefix: &str) -> Result<Self> {
        validate_prefix(prefix).map_err(|problem| Error::config("oncebox.tables.prefix", problem))?;
        Ok(Self {
            events: format!("{prefix}outbox_events"),
            dlq: format!("{prefix}outbox_dlq_events"),
            consumed: format!("{prefix}outbox_consumed_events"),
            inbox: format!("{prefix}outbox_inbox_messages"),
            jobs: format!("{prefix}outbox_jobs"),
            prefix: prefix.to_owned(),
        })
    }

    /// Outbox rows (`outbox_events`).
    pub fn events(&self) -> &str {
        &self.events
    }

    /// Dead letter queue (`outbox_dlq_events`).
    pub fn dlq(&self) -> &str {
        &self.dlq
    }

    /// Inbox records (`outbox_consumed_events`).
    pub fn consumed(&self) -> &str {
        &self.consumed
    }

    /// Durable inbox messages (`outbox_inbox_messages`).
    pub fn inbox(&self) -> &str {
        &self.inbox
    }

    /// Job locks (`outbox_jobs`).
    pub fn jobs(&self) -> &str {
        &self.jobs
    }

    /// The prefix these names were built from.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Replaces `{events}`, `{dlq}`, `{consumed}`, `{inbox}`, `{jobs}` and `{prefix}` in a SQL
    /// template.
    pub fn render(&self, sql: &str) -> String {
        sql.replace("{events}", &self.events)
            .replace("{dlq}", &self.dlq)
            .replace("{consumed}", &self.consumed)
            .replace("{inbox}", &self.inbox)
            .replace("{jobs}", &self.jobs)
            .replace("{prefix}", &self.prefix)
    }

    /// A shipped migration (written for the default names) for these tables: every identifier
    /// that starts with `outbox_` (tables and indexes) gets the prefix. The shipped files never
    /// use such a word in a comment or string literal, and a prefix is validated before it gets
    /// here.
    pub fn render_migration(&self, sql: &str) -> String {
        let prefix = self.prefix();
        if prefix.is_empty() {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 16 * prefix.len());
        let bytes = sql.as_bytes();
        let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let mut index = 0;
        while index < sql.len() {
            let starts_word = index == 0 || !is_word(bytes[index - 1]);
            if starts_word && sql[index..].starts_with("outbox_") {
                out.push_str(prefix);
            }
            let next = sql[index..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&sql[index..index + next]);
            index += next;
        }
        out
    }
}

impl Default for TableNames {
    fn default() -> Self {
        Self {
            events: "outbox_events".into(),
            dlq: "outbox_dlq_events".into(),
            consumed: "outbox_consumed_events".into(),
            inbox: "outbox_inbox_messages".into(),
            jobs: "outbox_jobs".into(),
            prefix: String::new(),
        }
    }
}

/// Longest table suffix appended to the prefix.
const LONGEST_SUFFIX: usize = "outbox_consumed_events".len();
/// Room left for index names such as `<prefix>outbox_consumed_events_by_consumed_at`.
const MAX_PREFIX: usize = 63 - LONGEST_SUFFIX - "_by_consumed_at".len();

fn validate_prefix(prefix: &str) -> std::result::Result<(), String> {
    if prefix.is_empty() {
        return Ok(());
    }
    let mut chars = prefix.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok {
        return Err(format!("invalid table prefix '{prefix}': it must match [a-z_][a-z0-9_]*"));
    }
    if prefix.len() > MAX_PREFIX {
        return Err(format!("table prefix '{prefix}' is longer than {MAX_PREFIX} characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_validated_and_applied() {
        let names = TableNames::with_prefix("shop_").ok();
        assert_eq!(names.as_ref().map(TableNames::events), Some("shop_outbox_events"));
        assert_eq!(
            names.map(|n| n.render("DELETE FROM {jobs}")),
            Some("DELETE FROM shop_outbox_jobs".into())
        );
        for bad in ["Shop", "1shop", "shop-", "shop;drop table x", "a b"] {
            let message = TableNames::with_prefix(bad).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains("oncebox.tables.prefix"), "{bad}: {message}");
        }
        assert!(TableNames::with_prefix(&"a".repeat(40)).is_err());
    }
}
