//! What the tests against a live server share: a PostgreSQL DLQ filled the engine's way under a
//! fresh table prefix, the API served on a local port, and the tools the suites drive.

// Each suite uses its own part of this module.
#![allow(dead_code)]
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::event::NewOutboxEvent;
use oncebox_core::{Dialect, DlqDao, OutboxWriter, SchemaPlan, TableNames};
use oncebox_dlq_api::{ApiToken, BearerTokens, DlqApi, Role};
use oncebox_postgres::PgDialect;
use uuid::Uuid;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The operator's token of these suites.
pub const OPERATOR: &str = "console-operator-secret";
/// The read-only token of these suites.
pub const READER: &str = "console-reader-secret-1";
/// Where the API is nested, as a service would mount it.
pub const MOUNT: &str = "/oncebox/dlq";

/// A DLQ on PostgreSQL with `counts` events of each type, each with a JSON payload, failed for
/// good and moved the engine's way.
pub struct PgDlq {
    pub dialect: PgDialect,
    pub ids: Vec<Uuid>,
}

impl PgDlq {
    pub async fn new(url: &str, counts: &[(&str, usize)]) -> Result<Self, Error> {
        let tables = TableNames::with_prefix(&oncebox_testkit::random_prefix())?;
        let dialect = PgDialect::connect(url).await?.with_tables(&tables);
        dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: false, jobs: false }).await?;
        let mut ids = Vec::new();
        for (event_type, count) in counts {
            let events: Vec<NewOutboxEvent> = (0..*count)
                .map(|n| NewOutboxEvent {
                    id: Uuid::now_v7(),
                    event_type: (*event_type).to_owned(),
                    payload: format!(r#"{{"order":{n},"amount":{},"currency":"EUR"}}"#, 10 + n),
                    payload_type: "OrderEvent".to_owned(),
                    headers: [("correlation-id".to_owned(), format!("c-{n}"))].into(),
                    partition_key: Some(format!("customer-{n}")),
                })
                .collect();
            ids.extend(events.iter().map(|event| event.id));
            let mut tx = dialect.pool().begin().await?;
            dialect.writer().write(&mut tx, &events).await?;
            tx.commit().await?;
        }
        oncebox_testkit::fail_into_dlq(&dialect, counts.iter().map(|(event_type, _)| *event_type)).await?;
        Ok(Self { dialect, ids })
    }

    /// The API over this DLQ with an operator and a read-only token, nested at [`MOUNT`].
    pub fn app(&self) -> Result<axum::Router, Error> {
        let tokens = BearerTokens::new([
            ApiToken::new("on-call", OPERATOR, Role::Operator)?,
            ApiToken::new("dashboard", READER, Role::ReadOnly)?,
        ])?;
        let api = DlqApi::with_tokens(self.dialect.dlq_dao(), tokens).mounted_at(MOUNT);
        Ok(axum::Router::new().nest(MOUNT, api.router()))
    }

    /// Runs the transfer-from job every 100 ms, as a running engine would, until dropped.
    pub fn transfer_job(&self) -> tokio::task::JoinHandle<()> {
        let dlq: Arc<dyn DlqDao> = self.dialect.dlq_dao();
        tokio::spawn(async move {
            loop {
                if let Err(error) = dlq.transfer_from_dlq(100).await {
                    eprintln!("transfer from the DLQ failed: {error}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// Drops the tables.
    pub async fn dispose(self) -> Result<(), Error> {
        let tables = self.dialect.tables().clone();
        for table in [tables.events(), tables.dlq()] {
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                .execute(self.dialect.pool())
                .await?;
        }
        Ok(())
    }
}

/// Serves `app` on a free local port until the runtime ends.
pub async fn serve(app: axum::Router) -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("the test server stopped: {error}");
        }
    });
    Ok(address)
}

/// Runs `suite` on a new runtime and says `ok` or `FAILED` with the error, as its exit status
/// does.
pub fn run_suite(suite: &str, body: impl Future<Output = Result<(), Error>>) -> std::process::ExitCode {
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| Error::from(format!("no runtime: {error}")))
        .and_then(|runtime| runtime.block_on(body));
    match outcome {
        Ok(()) => {
            eprintln!("ok: {suite}");
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("FAILED: {suite}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `name` when it is an executable file.
pub fn executable(path: impl AsRef<Path>) -> Option<PathBuf> {
    let path = path.as_ref();
    path.is_file().then(|| path.to_path_buf())
}

/// The first `name` on the `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).find_map(|dir| executable(dir.join(name)))
}
