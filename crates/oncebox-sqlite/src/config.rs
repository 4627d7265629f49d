//! Connection settings used by [`SqliteDialect::connect`](crate::SqliteDialect::connect).

use std::str::FromStr;
use std::time::Duration;

use oncebox_core::{Error, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

/// How long a statement waits for another connection's write lock before failing with a
/// temporary "database is locked" error.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `url_or_path` names an in-memory database.
fn is_in_memory(url_or_path: &str) -> bool {
    url_or_path.contains(":memory:") || url_or_path.contains("mode=memory")
}

/// Connection options for a `sqlite:` URL or a plain file path: the file is created when missing,
/// WAL journal (readers never block the writer), `synchronous = NORMAL` (durable at every
/// checkpoint, safe against corruption in WAL mode) and [`DEFAULT_BUSY_TIMEOUT`].
pub fn connect_options(url_or_path: &str) -> Result<SqliteConnectOptions> {
    let options = if url_or_path.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(url_or_path).map_err(|error| {
            Error::invalid_input(format!("'{url_or_path}' is not a SQLite URL")).with_source(error)
        })?
    } else {
        SqliteConnectOptions::new().filename(url_or_path)
    };
    let options = options.create_if_missing(true).busy_timeout(DEFAULT_BUSY_TIMEOUT);
    Ok(if is_in_memory(url_or_path) {
        options
    } else {
        options.journal_mode(SqliteJournalMode::Wal).synchronous(SqliteSynchronous::Normal)
    })
}

/// Pool settings: an in-memory database lives only as long as a connection to it, and its
/// connections share one cache whose table locks do not wait, so it gets a single connection
/// that is never closed for being idle.
pub(crate) fn pool_options(url_or_path: &str) -> SqlitePoolOptions {
    let options = SqlitePoolOptions::new();
    if is_in_memory(url_or_path) {
        options.max_connections(1).min_connections(1).idle_timeout(None).max_lifetime(None)
    } else {
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_are_accepted() {
        for input in ["sqlite://app.db", "sqlite::memory:", "relative/app.db", "/tmp/app.db"] {
            assert!(connect_options(input).is_ok(), "{input}");
        }
        let options = connect_options("/tmp/oncebox.db").map(|o| o.get_filename().to_path_buf());
        assert_eq!(options.ok(), Some(std::path::PathBuf::from("/tmp/oncebox.db")));
    }
}
