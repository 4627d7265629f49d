//! The oncebox conformance suites against SQLite. SQLite needs no server, so they always run: each
//! test gets its own database file under the system temp directory, and every other test uses a
//! random table prefix as well.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use oncebox_core::{Dialect, Error, Result, TableNames};
use oncebox_sqlite::{SqliteDialect, SqliteQueries};
use oncebox_sqlx::SqlxStore;
use oncebox_testkit::runner::Suite;
use oncebox_testkit::sqlx_harness::{SqlxBackend, SqlxHarness};
use oncebox_testkit::{dao_suite, engine_suite, random_prefix};
use uuid::Uuid;

#[path = "conformance/sqlite_cases.rs"]
mod sqlite_cases;

/// Fresh SQLite databases, one file per test.
pub struct SqliteBackend {
    directory: PathBuf,
    created: AtomicUsize,
}

/// The SQLite harness of the suites.
pub type SqliteHarness = SqlxHarness<SqliteBackend>;

impl SqliteBackend {
    fn new() -> Self {
        Self { directory: std::env::temp_dir().join("oncebox-sqlite-tests"), created: AtomicUsize::new(0) }
    }
}

/// The database file behind a dialect's pool.
fn database_file(dialect: &SqliteDialect) -> PathBuf {
    dialect.pool().connect_options().get_filename().to_path_buf()
}

#[async_trait]
impl SqlxBackend for SqliteBackend {
    type Queries = SqliteQueries;
    type Dialect = SqliteDialect;

    const ID_IN_LIST: &'static str = "id IN (SELECT value FROM json_each(?2))";
    const SET_HEADERS: &'static str = "headers = ?1 WHERE id = ?2";

    fn store(dialect: &SqliteDialect) -> &SqlxStore<SqliteQueries> {
        dialect.store()
    }

    fn earlier(column: &str) -> String {
        // NULL stays NULL: strftime of NULL is NULL.
        format!("{column} = strftime('%Y-%m-%dT%H:%M:%fZ', {column}, ?1)")
    }

    /// Every other test keeps the default table names.
    fn prefix(&self) -> String {
        if self.created.fetch_add(1, Ordering::Relaxed) % 2 == 1 { random_prefix() } else { String::new() }
    }

    /// A second pool on the same file and tables: what a second process on one host would open.
    async fn another_instance(&self, dialect: &SqliteDialect) -> Result<Option<SqliteDialect>> {
        let other = SqliteDialect::connect(&database_file(dialect).to_string_lossy()).await?;
        Ok(Some(other.with_tables(dialect.tables())))
    }

    async fn dispose(&self, dialect: SqliteDialect) -> Result<()> {
        let file = database_file(&dialect);
        dialect.pool().close().await;
        for suffix in ["", "-wal", "-shm"] {
            let mut path = file.clone().into_os_string();
            path.push(suffix);
            match std::fs::remove_file(&path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::invalid_input("deleting a test database").with_source(error));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A new database file: SQLite has no server whose database tests could share.
    async fn connect(&self, prefix: &str, _pool_size: u32) -> Result<SqliteDialect> {
        std::fs::create_dir_all(&self.directory)
            .map_err(|error| Error::invalid_input("creating the test directory").with_source(error))?;
        let path = self.directory.join(format!("{}.db", Uuid::now_v7()));
        let dialect = SqliteDialect::connect(&path.to_string_lossy()).await?;
        Ok(dialect.with_tables(&TableNames::with_prefix(prefix)?))
    }
}

fn main() -> ExitCode {
    let harness = Arc::new(SqlxHarness(SqliteBackend::new()));
    Suite::new()
        .add("dao", harness.clone(), dao_suite::cases())
        .add("engine", harness.clone(), engine_suite::cases())
        .add("sqlite", harness, sqlite_cases::cases())
        .run()
}
