//! The private database servers the chaos ledger crashes: a row committed before the crash is
//! there after the restart, a stopped server refuses connections, and dropping the handle removes
//! the server's directory.
//!
//! They need the servers' own tools (`initdb`/`pg_ctl`, `mariadb-install-db`/`mariadbd`); a machine
//! without them skips loudly, and under `CI=true` fails.

use std::error::Error;
use std::future::Future;
use std::path::PathBuf;

use oncebox_integration_tests::servers::{PrivateMariadb, PrivatePostgres};
use sqlx::{Connection, MySqlConnection, PgConnection};

type TestResult = Result<(), Box<dyn Error>>;

/// A server handle, or `None` when its tools are missing on a machine outside CI.
async fn created<S>(
    what: &str,
    create: impl Future<Output = oncebox::Result<S>>,
) -> Result<Option<S>, Box<dyn Error>> {
    match create.await {
        Ok(server) => Ok(Some(server)),
        Err(error) if oncebox_testkit::runner::in_ci() => Err(error.into()),
        Err(error) => {
            eprintln!("SKIPPED: a private {what} cannot be created here: {error}");
            Ok(None)
        }
    }
}

/// Creates the server with `$create`, commits a row over `$connection`, crashes the server with
/// `stop_immediately`, checks that it refuses connections, starts it again and finds the row;
/// then drops the handle and checks its directory is gone. A macro because the two servers'
/// handles and connection types share no trait.
macro_rules! crash_keeps_a_committed_row {
    ($what:literal, $create:expr, $connection:ty) => {{
        let Some(mut server) = created($what, $create).await? else {
            return Ok(());
        };
        let url = server.url();
        let mut connection = <$connection>::connect(&url).await?;
        sqlx::query("CREATE TABLE kept (id INT PRIMARY KEY)").execute(&mut connection).await?;
        sqlx::query("INSERT INTO kept (id) VALUES (7)").execute(&mut connection).await?;
        drop(connection);

        server.stop_immediately().await?;
        assert!(<$connection>::connect(&url).await.is_err(), "a crashed {} still accepts connections", $what);
        server.start().await?;

        let mut connection = <$connection>::connect(&url).await?;
        let ids: Vec<i32> = sqlx::query_scalar("SELECT id FROM kept").fetch_all(&mut connection).await?;
        assert_eq!(ids, [7], "the committed row after the crash and restart");
        drop(connection);

        let directory: PathBuf = server.directory().to_owned();
        drop(server);
        assert!(!directory.exists(), "{} is left behind", directory.display());
        Ok(())
    }};
}

#[tokio::test]
async fn a_private_mariadb_keeps_a_committed_row_across_a_kill() -> TestResult {
    crash_keeps_a_committed_row!("MariaDB server", PrivateMariadb::create(), MySqlConnection)
}

#[tokio::test]
async fn a_private_postgres_keeps_a_committed_row_across_an_immediate_stop() -> TestResult {
    crash_keeps_a_committed_row!("PostgreSQL cluster", PrivatePostgres::create(), PgConnection)
}
