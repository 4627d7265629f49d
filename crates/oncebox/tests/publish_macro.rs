//! `#[oncebox::publish]` against real databases: SQLite always, PostgreSQL through
//! `ONCEBOX_PG_URL` (a missing server fails under `CI=true`). Each case works under its own table
//! prefix and reads the outbox back through the dialect's DAO.

use std::process::ExitCode;
use std::sync::Arc;

use oncebox::postgres::PgDialect;
use oncebox::sqlite::SqliteDialect;
use oncebox::{Dialect, EventStatus, OutboxWriter, Publisher, SchemaPlan, TableNames};
use oncebox_testkit::random_prefix;
use oncebox_testkit::runner::{Case, Failed, Suite, TestResult, fail};
use serde::Serialize;
use sqlx::{Database, Pool, Transaction};

const ORDER_CREATED: &str = "order-created";

#[derive(Debug, Clone, Serialize, PartialEq)]
struct Order {
    id: i64,
    amount_cents: i64,
}

/// A service's own error, with the conversion the attribute needs for a failed publish.
#[derive(Debug)]
enum AppError {
    Rejected(&'static str),
    Outbox(oncebox::Error),
}

impl From<oncebox::Error> for AppError {
    fn from(error: oncebox::Error) -> Self {
        Self::Outbox(error)
    }
}

// The functions under test are generic over the database, so one body serves every dialect (and
// the attribute is shown to work with generic parameters and `where` clauses).

#[oncebox::publish("order-created")]
async fn place_order<DB: Database, W>(
    outbox: &Publisher<W>,
    tx: &mut Transaction<'_, DB>,
    id: i64,
    amount_cents: i64,
) -> Result<Order, AppError>
where
    W: for<'t, 'c> OutboxWriter<&'t mut Transaction<'c, DB>>,
{
    if amount_cents <= 0 {
        return Err(AppError::Rejected("an order costs something"));
    }
    let checked = check_stock(id)?;
    Ok(Order { id: checked, amount_cents })
}

fn check_stock(id: i64) -> Result<i64, AppError> {
    if id == 13 { Err(AppError::Rejected("out of stock")) } else { Ok(id) }
}

#[oncebox::publish("order-created", payload = order)]
async fn import_order<DB: Database, W>(
    outbox: &Publisher<W>,
    tx: &mut Transaction<'_, DB>,
    order: &Order,
) -> Result<usize, AppError>
where
    W: for<'t, 'c> OutboxWriter<&'t mut Transaction<'c, DB>>,
{
    Ok(order.id.to_string().len())
}

#[oncebox::publish("order-shipped")]
async fn ship_order<DB: Database, W>(
    outbox: &Publisher<W>,
    tx: &mut Transaction<'_, DB>,
    id: i64,
) -> Result<Order, AppError>
where
    W: for<'t, 'c> OutboxWriter<&'t mut Transaction<'c, DB>>,
{
    Ok(Order { id, amount_cents: 0 })
}

/// A service holding its publisher, publishing from a method with `publisher = self.…` and the
/// transaction named explicitly.
struct Orders<W> {
    outbox: Publisher<W>,
}

impl<W> Orders<W> {
    #[oncebox::publish("order-created", publisher = self.outbox, tx = connection)]
    async fn place<DB: Database>(
        &self,
        connection: &mut Transaction<'_, DB>,
        id: i64,
    ) -> Result<Order, AppError>
    where
        W: for<'t, 'c> OutboxWriter<&'t mut Transaction<'c, DB>>,
    {
        Ok(Order { id, amount_cents: 100 })
    }
}

/// One database under its own prefix.
struct Backend<D: Dialect, DB: Database> {
    dialect: D,
    pool: Pool<DB>,
}

impl<D: WritesTo<DB>, DB: Database> Backend<D, DB> {
    async fn new(dialect: D, pool: Pool<DB>) -> Result<Self, Failed> {
        let dialect = dialect.with_tables(&TableNames::with_prefix(&random_prefix()).map_err(fail)?);
        dialect.create_schema(SchemaPlan::ALL).await.map_err(fail)?;
        Ok(Self { dialect, pool })
    }

    fn publisher(&self) -> Publisher<D::Writer> {
        Publisher::new(self.dialect.writer(), [ORDER_CREATED.to_owned()])
    }

    /// Every pending row of `order-created`, oldest first.
    async fn published(&self) -> Result<Vec<serde_json::Value>, Failed> {
        let batch = self.dialect.outbox_dao().claim(ORDER_CREATED, 100).await.map_err(fail)?;
        batch.events.iter().map(|event| serde_json::from_str(&event.payload).map_err(fail)).collect()
    }

    async fn total(&self) -> Result<u64, Failed> {
        let counts = self.dialect.outbox_dao().counts().await.map_err(fail)?;
        Ok([EventStatus::Pending, EventStatus::InProcess, EventStatus::Processed, EventStatus::Failed]
            .into_iter()
            .map(|status| counts.status_total(status))
            .sum())
    }
}

fn expect(condition: bool, message: impl std::fmt::Display) -> TestResult {
    if condition { Ok(()) } else { Err(fail(message)) }
}

type Checked<D, DB> = Backend<D, DB>;

/// A dialect whose writer writes into a sqlx transaction of `DB`: what every case needs.
trait WritesTo<DB: Database>:
    Dialect<Writer: Clone + for<'t, 'c> OutboxWriter<&'t mut Transaction<'c, DB>>>
{
}

impl<D, DB> WritesTo<DB> for D
where
    D: Dialect,
    D::Writer: Clone + for<'t, 'c> OutboxWriter<&'t mut Transaction<'c, DB>>,
    DB: Database,
{
}

async fn ok_publishes_the_value_in_the_same_transaction<D: WritesTo<DB>, DB: Database>(
    backend: Checked<D, DB>,
) -> TestResult {
    let outbox = backend.publisher();
    let mut tx = backend.pool.begin().await.map_err(fail)?;
    let order = place_order(&outbox, &mut tx, 7, 1250).await.map_err(|e| fail(format!("{e:?}")))?;
    tx.commit().await.map_err(fail)?;
    expect(order == Order { id: 7, amount_cents: 1250 }, "the function's value is returned")?;
    let published = backend.published().await?;
    expect(
        published == [serde_json::json!({"id": 7, "amount_cents": 1250})],
        format!("the Ok value is the one event: {published:?}"),
    )
}

async fn a_rolled_back_transaction_takes_the_event_with_it<D: WritesTo<DB>, DB: Database>(
    backend: Checked<D, DB>,
) -> TestResult {
    let outbox = backend.publisher();
    let mut tx = backend.pool.begin().await.map_err(fail)?;
    place_order(&outbox, &mut tx, 8, 100).await.map_err(|e| fail(format!("{e:?}")))?;
    tx.rollback().await.map_err(fail)?;
    expect(backend.total().await? == 0, "the event was written in the caller's transaction")
}

async fn an_err_publishes_nothing<D: WritesTo<DB>, DB: Database>(backend: Checked<D, DB>) -> TestResult {
    let outbox = backend.publisher();
    let mut tx = backend.pool.begin().await.map_err(fail)?;
    // `return Err` and `?` end the body: neither reaches the publish.
    let early = place_order(&outbox, &mut tx, 9, 0).await;
    expect(matches!(early, Err(AppError::Rejected("an order costs something"))), format!("{early:?}"))?;
    let questioned = place_order(&outbox, &mut tx, 13, 100).await;
    expect(matches!(questioned, Err(AppError::Rejected("out of stock"))), format!("{questioned:?}"))?;
    // The caller commits anyway: still nothing, since nothing was written.
    tx.commit().await.map_err(fail)?;
    expect(backend.total().await? == 0, "an Err wrote an event")
}

async fn a_payload_argument_is_published<D: WritesTo<DB>, DB: Database>(
    backend: Checked<D, DB>,
) -> TestResult {
    let outbox = backend.publisher();
    let order = Order { id: 4242, amount_cents: 990 };
    let mut tx = backend.pool.begin().await.map_err(fail)?;
    let digits = import_order(&outbox, &mut tx, &order).await.map_err(|e| fail(format!("{e:?}")))?;
    tx.commit().await.map_err(fail)?;
    expect(digits == 4, "the function's own value is returned")?;
    let published = backend.published().await?;
    expect(
        published == [serde_json::json!({"id": 4242, "amount_cents": 990})],
        format!("the argument is the event: {published:?}"),
    )
}

async fn a_failed_publish_is_the_functions_error<D: WritesTo<DB>, DB: Database>(
    backend: Checked<D, DB>,
) -> TestResult {
    // `order-shipped` is not configured: the publish refuses it and the function fails with it.
    let outbox = backend.publisher();
    let mut tx = backend.pool.begin().await.map_err(fail)?;
    let refused = ship_order(&outbox, &mut tx, 5).await;
    tx.commit().await.map_err(fail)?;
    match refused {
        Err(AppError::Outbox(error)) => {
            expect(error.kind() == oncebox::ErrorKind::InvalidInput, format!("{error}"))?;
            expect(error.to_string().contains("order-shipped"), format!("{error}"))?;
        }
        other => return Err(fail(format!("expected the publish's error, got {other:?}"))),
    }
    expect(backend.total().await? == 0, "a refused publish wrote nothing")
}

async fn a_method_names_its_publisher_and_transaction<D: WritesTo<DB>, DB: Database>(
    backend: Checked<D, DB>,
) -> TestResult {
    let orders = Orders { outbox: backend.publisher() };
    let mut tx = backend.pool.begin().await.map_err(fail)?;
    orders.place(&mut tx, 31).await.map_err(|e| fail(format!("{e:?}")))?;
    orders.place(&mut tx, 32).await.map_err(|e| fail(format!("{e:?}")))?;
    tx.commit().await.map_err(fail)?;
    let published = backend.published().await?;
    let ids: Vec<_> = published.iter().map(|event| event["id"].clone()).collect();
    expect(ids == [31, 32], format!("two events in call order: {published:?}"))
}

/// Where a case runs.
enum Target {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

async fn sqlite(folder: &std::path::Path) -> Result<Checked<SqliteDialect, sqlx::Sqlite>, Failed> {
    let url = format!("sqlite://{}", folder.join(format!("{}.db", uuid::Uuid::now_v7())).display());
    let dialect = SqliteDialect::connect(&url).await.map_err(fail)?;
    let pool = dialect.pool().clone();
    Backend::new(dialect, pool).await
}

async fn postgres(url: &str) -> Result<Checked<PgDialect, sqlx::Postgres>, Failed> {
    let dialect = PgDialect::connect(url).await.map_err(fail)?;
    let pool = dialect.pool().clone();
    Backend::new(dialect, pool).await
}

/// One [`Case`] per function, each run on a fresh backend of its target.
macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        fn cases() -> Vec<Case<Target>> {
            vec![$(Case {
                name: stringify!($name),
                run: |target| Box::pin(async move {
                    match &*target {
                        Target::Sqlite(folder) => $name(sqlite(folder).await?).await,
                        Target::Postgres(url) => $name(postgres(url).await?).await,
                    }
                }),
            }),*]
        }
    };
}

cases!(
    ok_publishes_the_value_in_the_same_transaction,
    a_rolled_back_transaction_takes_the_event_with_it,
    an_err_publishes_nothing,
    a_payload_argument_is_published,
    a_failed_publish_is_the_functions_error,
    a_method_names_its_publisher_and_transaction,
);

fn main() -> ExitCode {
    let folder = std::env::temp_dir().join("oncebox-publish-macro");
    if let Err(error) = std::fs::create_dir_all(&folder) {
        eprintln!("cannot create {}: {error}", folder.display());
        return ExitCode::FAILURE;
    }
    let mut suite = Suite::new().add("sqlite", Arc::new(Target::Sqlite(folder)), cases());
    match std::env::var("ONCEBOX_PG_URL") {
        Ok(url) => suite = suite.add("postgres", Arc::new(Target::Postgres(url)), cases()),
        Err(_) => {
            let code = oncebox_testkit::runner::server_missing("publish_macro::postgres", "ONCEBOX_PG_URL");
            if code == ExitCode::FAILURE {
                return code;
            }
        }
    }
    suite.run()
}
