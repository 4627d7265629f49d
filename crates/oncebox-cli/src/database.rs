//! The database a command works on, chosen by its URL's scheme, and what `migrate` reads of it
//! before and after.

use std::sync::Arc;

use oncebox_core::redact::redact_url;
use oncebox_core::{Dialect, DlqDao, Error, OutboxDao, Result, SchemaPlan, TableNames};
use oncebox_mysql::MySqlDialect;
use oncebox_postgres::PgDialect;
use oncebox_sqlite::SqliteDialect;

/// One of the dialects, connected.
pub enum Database {
    /// `sqlite:` URLs and file paths.
    Sqlite(SqliteDialect),
    /// `postgres://` and `postgresql://`.
    Postgres(PgDialect),
    /// `mysql://` and `mariadb://`.
    MySql(MySqlDialect),
}

/// The parts of the schema, each with the statement that answers only when it is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The outbox table.
    Events,
    /// The outbox table's `recoveries` column (added to tables made before it existed).
    Recoveries,
    /// The DLQ table.
    Dlq,
    /// The inbox table.
    Consumed,
    /// The inbox table's claim columns (`status`, `claim_token`, `locked_at`; added to tables
    /// made before they existed).
    Claims,
    /// The durable inbox table.
    Inbox,
    /// The job lock table.
    Jobs,
}

impl Part {
    /// The parts `plan` creates, in creation order.
    pub fn planned(plan: SchemaPlan) -> Vec<Part> {
        [
            (plan.outbox, Part::Events),
            (plan.outbox, Part::Recoveries),
            (plan.dlq, Part::Dlq),
            (plan.inbox, Part::Consumed),
            (plan.inbox, Part::Claims),
            (plan.inbox, Part::Inbox),
            (plan.jobs, Part::Jobs),
        ]
        .into_iter()
        .filter_map(|(wanted, part)| wanted.then_some(part))
        .collect()
    }

    /// How the part is named in what `migrate` prints.
    pub fn describe(self, tables: &TableNames) -> String {
        match self {
            Part::Events => format!("table {}", tables.events()),
            Part::Recoveries => format!("column {}.recoveries", tables.events()),
            Part::Dlq => format!("table {}", tables.dlq()),
            Part::Consumed => format!("table {}", tables.consumed()),
            Part::Claims => format!("columns {}.status, claim_token, locked_at", tables.consumed()),
            Part::Inbox => format!("table {}", tables.inbox()),
            Part::Jobs => format!("table {}", tables.jobs()),
        }
    }

    /// A query that every dialect answers (with no rows) exactly when the part exists.
    fn probe(self, tables: &TableNames) -> String {
        let (column, table) = match self {
            Part::Events => ("id", tables.events()),
            Part::Recoveries => ("recoveries", tables.events()),
            Part::Dlq => ("id", tables.dlq()),
            Part::Consumed => ("id", tables.consumed()),
            Part::Claims => ("status, claim_token, locked_at", tables.consumed()),
            Part::Inbox => ("id", tables.inbox()),
            Part::Jobs => ("name", tables.jobs()),
        };
        format!("SELECT {column} FROM {table} WHERE 1 = 0")
    }
}

impl Database {
    /// Connects to `url` using `tables`; an unknown scheme is refused naming the ones known.
    pub async fn connect(url: &str, tables: &TableNames) -> Result<Self> {
        let shown = redact_url(url);
        let context = |error: Error| error.context(&shown);
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(PgDialect::connect(url).await.map_err(context)?.with_tables(tables)))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Ok(Self::MySql(MySqlDialect::connect(url).await.map_err(context)?.with_tables(tables)))
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite(SqliteDialect::connect(url).await.map_err(context)?.with_tables(tables)))
        } else {
            Err(Error::invalid_input(format!(
                "unsupported database URL '{shown}': use postgres://, mysql:// (or mariadb://) or sqlite:"
            )))
        }
    }

    /// The outbox DAO.
    pub fn outbox(&self) -> Arc<dyn OutboxDao> {
        match self {
            Self::Sqlite(dialect) => dialect.outbox_dao(),
            Self::Postgres(dialect) => dialect.outbox_dao(),
            Self::MySql(dialect) => dialect.outbox_dao(),
        }
    }

    /// The DLQ DAO.
    pub fn dlq(&self) -> Arc<dyn DlqDao> {
        match self {
            Self::Sqlite(dialect) => dialect.dlq_dao(),
            Self::Postgres(dialect) => dialect.dlq_dao(),
            Self::MySql(dialect) => dialect.dlq_dao(),
        }
    }

    /// Creates what `plan` names and is missing, the way a starting service does.
    pub async fn create_schema(&self, plan: SchemaPlan) -> Result<()> {
        match self {
            Self::Sqlite(dialect) => dialect.create_schema(plan).await,
            Self::Postgres(dialect) => dialect.create_schema(plan).await,
            Self::MySql(dialect) => dialect.create_schema(plan).await,
        }
    }

    /// Whether `part` exists. The database is asked once first, so a lost connection is an
    /// error rather than a missing table.
    pub async fn has(&self, part: Part, tables: &TableNames) -> Result<bool> {
        self.answers("SELECT 1".to_owned()).await.map_err(|error| error.context("asking the database"))?;
        Ok(self.answers(part.probe(tables)).await.is_ok())
    }

    async fn answers(&self, sql: String) -> Result<()> {
        let outcome = match self {
            Self::Sqlite(dialect) => execute(dialect.pool(), sql).await,
            Self::Postgres(dialect) => execute(dialect.pool(), sql).await,
            Self::MySql(dialect) => execute(dialect.pool(), sql).await,
        };
        outcome.map_err(|error| Error::database("the statement failed", false, error))
    }
}

async fn execute<DB>(pool: &sqlx::Pool<DB>, sql: String) -> std::result::Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(pool).await.map(|_| ())
}
