//! The `oncebox` binary against real databases: SQLite always, PostgreSQL (`ONCEBOX_PG_URL`) and
//! MySQL/MariaDB (`ONCEBOX_MYSQL_URL`) when set (with `CI=true`, a missing server fails). Each
//! case works under its own table prefix, seeds rows the engine's way and reads the tables back
//! through the DAOs, so what the command printed is checked against what it did.

use std::process::ExitCode;
use std::sync::Arc;

use oncebox_cli::database::Database;
use oncebox_core::{Dialect, DlqStatus, EventStatus, NewOutboxEvent, OutboxWriter, TableNames};
use oncebox_testkit::runner::{Failed, Suite, TestResult, fail, server_missing};
use oncebox_testkit::{case, fail_into_dlq, random_prefix};
use serde_json::Value;
use uuid::Uuid;

const SUITE: &str = "oncebox command line";

/// One database to run the cases on.
struct Backend {
    /// The server's URL, or for SQLite the folder that gets one database file per case.
    url: String,
    sqlite: Option<std::path::PathBuf>,
}

/// What one run of the binary printed, and its exit status.
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self) -> Result<String, Failed> {
        if self.status == Some(0) {
            Ok(self.stdout)
        } else {
            Err(fail(format!("exit {:?}\nstdout: {}\nstderr: {}", self.status, self.stdout, self.stderr)))
        }
    }

    fn refused(self, status: i32, says: &str) -> TestResult {
        if self.status == Some(status) && self.stderr.contains(says) {
            Ok(())
        } else {
            Err(fail(format!(
                "expected exit {status} saying '{says}', got {:?}\nstdout: {}\nstderr: {}",
                self.status, self.stdout, self.stderr
            )))
        }
    }
}

async fn oncebox(args: &[&str]) -> Result<Run, Failed> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_oncebox"))
        .args(args)
        .env_remove("ONCEBOX_DATABASE_URL")
        .output()
        .await
        .map_err(fail)?;
    Ok(Run {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// A fresh table prefix on `backend`, with the arguments that point the binary at it.
struct Scope {
    url: String,
    prefix: String,
    tables: TableNames,
}

impl Scope {
    fn new(backend: &Backend) -> Result<Self, Failed> {
        let prefix = random_prefix();
        let tables = TableNames::with_prefix(&prefix).map_err(fail)?;
        // SQLite cases get a file each: several processes opening one file at once would wait on
        // each other's locks rather than test the command.
        let url = match &backend.sqlite {
            Some(folder) => format!("sqlite:{}", folder.join(format!("{prefix}.db")).display()),
            None => backend.url.clone(),
        };
        Ok(Self { url, prefix, tables })
    }

    /// `args` followed by this scope's `--database-url` and `--table-prefix`.
    async fn run(&self, args: &[&str]) -> Result<Run, Failed> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--database-url", &self.url, "--table-prefix", &self.prefix]);
        oncebox(&all).await
    }

    async fn database(&self) -> Result<Database, Failed> {
        Database::connect(&self.url, &self.tables).await.map_err(fail)
    }

    /// Commits `count` events of `event_type` through the dialect's writer.
    async fn publish(&self, event_type: &str, count: usize) -> Result<Vec<Uuid>, Failed> {
        let events: Vec<NewOutboxEvent> = (0..count)
            .map(|n| NewOutboxEvent {
                id: Uuid::now_v7(),
                event_type: event_type.to_owned(),
                payload: format!(r#"{{"order":{n},"amount":{}}}"#, 10 + n),
                payload_type: "OrderEvent".to_owned(),
                headers: [("correlation-id".to_owned(), format!("c-{n}"))].into(),
                partition_key: Some(format!("customer-{n}")),
            })
            .collect();
        match self.database().await? {
            Database::Sqlite(dialect) => {
                let mut tx = dialect.pool().begin().await.map_err(fail)?;
                dialect.writer().write(&mut tx, &events).await.map_err(fail)?;
                tx.commit().await.map_err(fail)?;
            }
            Database::Postgres(dialect) => {
                let mut tx = dialect.pool().begin().await.map_err(fail)?;
                dialect.writer().write(&mut tx, &events).await.map_err(fail)?;
                tx.commit().await.map_err(fail)?;
            }
            Database::MySql(dialect) => {
                let mut tx = dialect.pool().begin().await.map_err(fail)?;
                dialect.writer().write(&mut tx, &events).await.map_err(fail)?;
                tx.commit().await.map_err(fail)?;
            }
        }
        Ok(events.iter().map(|event| event.id).collect())
    }

    /// Fails every pending event of `event_types` and moves it to the DLQ, as the relay would.
    async fn fail_into_dlq(&self, event_types: &[&str]) -> TestResult {
        let types: Vec<&str> = event_types.to_vec();
        match self.database().await? {
            Database::Sqlite(dialect) => fail_into_dlq(&dialect, types).await.map(drop).map_err(fail),
            Database::Postgres(dialect) => fail_into_dlq(&dialect, types).await.map(drop).map_err(fail),
            Database::MySql(dialect) => fail_into_dlq(&dialect, types).await.map(drop).map_err(fail),
        }
    }

    /// Runs `sql` with `{events}` and `{dlq}` standing for this scope's tables.
    async fn execute(&self, sql: &str) -> TestResult {
        let sql = sql
            .replace("{events}", self.tables.events())
            .replace("{dlq}", self.tables.dlq())
            .replace("{consumed}", self.tables.consumed());
        let sql = sqlx::AssertSqlSafe(sql);
        match self.database().await? {
            Database::Sqlite(dialect) => sqlx::raw_sql(sql).execute(dialect.pool()).await.map(drop),
            Database::Postgres(dialect) => sqlx::raw_sql(sql).execute(dialect.pool()).await.map(drop),
            Database::MySql(dialect) => sqlx::raw_sql(sql).execute(dialect.pool()).await.map(drop),
        }
        .map_err(fail)
    }

    /// Moves the write time (`created_at`) of every DLQ row of `event_type` two days back.
    async fn written_two_days_earlier(&self, event_type: &str) -> TestResult {
        let sql = match self.database().await? {
            Database::Sqlite(_) => {
                "UPDATE {dlq} SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at, '-2 days')"
            }
            Database::Postgres(_) => "UPDATE {dlq} SET created_at = created_at - INTERVAL '2 days'",
            Database::MySql(_) => "UPDATE {dlq} SET created_at = created_at - INTERVAL 2 DAY",
        };
        self.execute(&format!("{sql} WHERE event_type = '{event_type}'")).await
    }

    /// The DLQ status of event `id`, `None` when it is not in the DLQ.
    async fn dlq_status(&self, id: Uuid) -> Result<Option<DlqStatus>, Failed> {
        let event = self.database().await?.dlq().get(id).await.map_err(fail)?;
        Ok(event.map(|event| event.dlq_status))
    }

    async fn dispose(&self) -> TestResult {
        for table in [
            self.tables.events(),
            self.tables.dlq(),
            self.tables.consumed(),
            self.tables.inbox(),
            self.tables.jobs(),
        ] {
            self.execute(&format!("DROP TABLE IF EXISTS {table}")).await?;
        }
        Ok(())
    }
}

/// Each database case runs in a fresh scope whose tables are dropped afterwards, whatever the
/// outcome: `name` runs `name_in`.
macro_rules! in_scope {
    ($($name:ident => $body:ident),* $(,)?) => {
        $(async fn $name(backend: Arc<Backend>) -> TestResult {
            let scope = Scope::new(&backend)?;
            let outcome = $body(&scope).await;
            let disposed = scope.dispose().await;
            outcome.and(disposed)
        })*
    };
}

in_scope! {
    status_counts_each_type_with_its_oldest_pending_age_and_the_dlq => status_counts_each_type_with_its_oldest_pending_age_and_the_dlq_in,
    migrate_creates_the_tables_once_and_says_so => migrate_creates_the_tables_once_and_says_so_in,
    migrate_adds_the_recoveries_column_to_an_old_table => migrate_adds_the_recoveries_column_to_an_old_table_in,
    migrate_adds_the_claim_columns_to_an_old_inbox_table => migrate_adds_the_claim_columns_to_an_old_inbox_table_in,
    migrate_with_a_config_creates_only_what_its_sections_use => migrate_with_a_config_creates_only_what_its_sections_use_in,
    dlq_commands_list_show_and_change_events_with_the_apis_rules => dlq_commands_list_show_and_change_events_with_the_apis_rules_in,
    dlq_retry_of_events_older_than_the_re_drive_max_age_needs_allow_older => dlq_retry_of_events_older_than_the_re_drive_max_age_needs_allow_older_in,
}

fn lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|line| line.contains(needle)).count()
}

async fn migrate_creates_the_tables_once_and_says_so_in(scope: &Scope) -> TestResult {
    let first = scope.run(&["migrate"]).await?.ok()?;
    for table in [
        scope.tables.events(),
        scope.tables.dlq(),
        scope.tables.consumed(),
        scope.tables.inbox(),
        scope.tables.jobs(),
    ] {
        let line = format!("table {table}: created");
        assert_eq!(lines_with(&first, &line), 1, "{line} in:\n{first}");
    }
    assert!(!first.contains("already there"), "{first}");
    let second = scope.run(&["migrate"]).await?.ok()?;
    assert_eq!(lines_with(&second, ": already there"), 7, "{second}");
    assert!(!second.contains("created"), "{second}");
    let status = scope.run(&["status"]).await?.ok()?;
    assert!(status.contains(&format!("outbox ({}): empty", scope.tables.events())), "{status}");
    Ok(())
}

async fn migrate_adds_the_recoveries_column_to_an_old_table_in(scope: &Scope) -> TestResult {
    scope.run(&["migrate"]).await?.ok()?;
    scope.execute("ALTER TABLE {events} DROP COLUMN recoveries").await?;
    let upgrade = scope.run(&["migrate"]).await?.ok()?;
    let line = format!("column {}.recoveries: added", scope.tables.events());
    assert_eq!(lines_with(&upgrade, &line), 1, "{upgrade}");
    scope.execute("SELECT recoveries FROM {events}").await?;
    Ok(())
}

async fn migrate_adds_the_claim_columns_to_an_old_inbox_table_in(scope: &Scope) -> TestResult {
    scope.run(&["migrate"]).await?.ok()?;
    for column in ["locked_at", "claim_token", "status"] {
        scope.execute(&format!("ALTER TABLE {{consumed}} DROP COLUMN {column}")).await?;
    }
    let upgrade = scope.run(&["migrate"]).await?.ok()?;
    let line = format!("columns {}.status, claim_token, locked_at: added", scope.tables.consumed());
    assert_eq!(lines_with(&upgrade, &line), 1, "{upgrade}");
    scope.execute("SELECT status, claim_token, locked_at FROM {consumed}").await?;
    Ok(())
}

async fn migrate_with_a_config_creates_only_what_its_sections_use_in(scope: &Scope) -> TestResult {
    let file = std::env::temp_dir().join(format!("oncebox-cli-{}.yaml", Uuid::now_v7()));
    let text = format!(
        "oncebox:\n  tables:\n    prefix: {}\n  inbox:\n    clean-up:\n      enabled: false\n",
        scope.prefix
    );
    std::fs::write(&file, text).map_err(fail)?;
    let path = file.to_string_lossy().into_owned();
    let run = oncebox(&["migrate", "--database-url", &scope.url, "--config", &path]).await;
    let _ = std::fs::remove_file(&file);
    let out = run?.ok()?;
    // An inbox section: the inbox tables and the job table its durable inbox's clean-up locks.
    assert_eq!(out.lines().filter(|line| line.contains(": created")).count(), 3, "{out}");
    for table in [scope.tables.consumed(), scope.tables.inbox(), scope.tables.jobs()] {
        assert!(out.contains(&format!("table {table}: created")), "{out}");
    }
    let status = scope.run(&["status"]).await?.ok()?;
    assert!(status.contains(&format!("no table {}", scope.tables.events())), "{status}");
    Ok(())
}

async fn status_counts_each_type_with_its_oldest_pending_age_and_the_dlq_in(scope: &Scope) -> TestResult {
    scope.run(&["migrate"]).await?.ok()?;
    scope.publish("payment-failed", 2).await?;
    scope.fail_into_dlq(&["payment-failed"]).await?;
    scope.publish("order-created", 3).await?;

    let json: Value = serde_json::from_str(&scope.run(&["status", "--json"]).await?.ok()?).map_err(fail)?;
    let outbox = json["outbox"].as_array().ok_or_else(|| fail(format!("no outbox in {json}")))?;
    let orders = outbox
        .iter()
        .find(|line| line["event_type"] == "order-created")
        .ok_or_else(|| fail("no order-created"))?;
    assert_eq!((orders["pending"].as_u64(), orders["failed"].as_u64()), (Some(3), Some(0)), "{json}");
    assert!(orders["oldest_pending_seconds"].as_f64().is_some_and(|age| age >= 0.0), "{json}");
    assert!(
        outbox.iter().all(|line| line["event_type"] != "payment-failed"),
        "moved rows left the outbox: {json}"
    );
    let dlq = json["dlq"].as_array().ok_or_else(|| fail(format!("no dlq in {json}")))?;
    assert_eq!(dlq.len(), 1, "{json}");
    assert_eq!((dlq[0]["event_type"].as_str(), dlq[0]["moved"].as_u64()), (Some("payment-failed"), Some(2)));

    let text = scope.run(&["status"]).await?.ok()?;
    let row =
        text.lines().find(|line| line.starts_with("order-created")).ok_or_else(|| fail(text.clone()))?;
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..5], ["3", "0", "0", "0"], "{text}");
    assert!(
        text.lines()
            .any(|line| line.starts_with("payment-failed") && line.split_whitespace().nth(1) == Some("2")),
        "{text}"
    );
    Ok(())
}

async fn dlq_commands_list_show_and_change_events_with_the_apis_rules_in(scope: &Scope) -> TestResult {
    scope.run(&["migrate"]).await?.ok()?;
    let ids = scope.publish("payment-failed", 4).await?;
    scope.fail_into_dlq(&["payment-failed"]).await?;
    let dao = scope.database().await?.dlq();
    let id = |n: usize| ids[n].to_string();

    let page: Value =
        serde_json::from_str(&scope.run(&["dlq", "list", "--json", "--limit", "2"]).await?.ok()?)
            .map_err(fail)?;
    assert_eq!(
        (page["total"].as_u64(), page["events"].as_array().map(Vec::len)),
        (Some(4), Some(2)),
        "{page}"
    );
    assert_eq!(page["events"][0]["last_error"], "broker said no");
    let listed =
        scope.run(&["dlq", "list", "--status", "moved", "--event-type", "payment-failed"]).await?.ok()?;
    assert!(listed.contains("1–4 of 4") && ids.iter().all(|id| listed.contains(&id.to_string())), "{listed}");
    let none = scope.run(&["dlq", "list", "--status", "RESOLVED"]).await?.ok()?;
    assert!(none.contains("no DLQ events (0 match"), "{none}");

    let shown = scope.run(&["dlq", "show", &id(0)]).await?.ok()?;
    assert!(shown.contains("\n  \"amount\": 10") && shown.contains("broker said no"), "{shown}");
    assert!(shown.contains("header correlation-id") && shown.contains("customer-0"), "{shown}");
    scope.run(&["dlq", "show", &Uuid::now_v7().to_string()]).await?.refused(1, "no DLQ event")?;

    scope.run(&["dlq", "retry", &id(0)]).await?.ok()?;
    scope.run(&["dlq", "resolve", &id(1)]).await?.ok()?;
    assert_eq!(scope.dlq_status(ids[0]).await?, Some(DlqStatus::ToRetry));
    assert_eq!(scope.dlq_status(ids[1]).await?, Some(DlqStatus::Resolved));

    scope.run(&["dlq", "delete", &id(2)]).await?.refused(2, "--yes")?;
    assert_eq!(scope.dlq_status(ids[2]).await?, Some(DlqStatus::Moved), "a delete without --yes deleted");
    scope.run(&["dlq", "delete", &id(2), "--yes"]).await?.ok()?;
    assert_eq!(scope.dlq_status(ids[2]).await?, None);
    let partly = scope.run(&["dlq", "resolve", &id(2), &id(3)]).await?;
    assert!(partly.stdout.contains(&format!("resolved {}", id(3))), "{}", partly.stdout);
    partly.refused(1, "resolved 1 of 2 events")?;
    assert!(scope.run(&["dlq", "resolve", &id(2)]).await?.stderr.contains("no DLQ event has this id"));

    // An event the transfer job holds is not changed, alone or by type.
    scope.execute("UPDATE {dlq} SET dlq_status = 'IN_PROCESS' WHERE dlq_status = 'RESOLVED'").await?;
    scope.run(&["dlq", "delete", &id(1), "--yes"]).await?.refused(1, "IN_PROCESS")?;
    let by_type = scope.run(&["dlq", "retry", "--event-type", "payment-failed"]).await?.ok()?;
    // The one event left to change is the one already TO_RETRY; the two held stay held.
    assert!(by_type.contains("retried 1 DLQ event of type payment-failed"), "{by_type}");
    assert_eq!(scope.dlq_status(ids[1]).await?, Some(DlqStatus::InProcess));
    assert_eq!(scope.dlq_status(ids[3]).await?, Some(DlqStatus::InProcess));

    // Refused before the database is touched, naming what is wrong.
    scope.run(&["dlq", "list", "--limit", "0"]).await?.refused(2, "limit must be between 1 and 500")?;
    scope.run(&["dlq", "retry"]).await?.refused(2, "--event-type")?;
    scope.run(&["dlq", "retry", &id(0), "--event-type", "x"]).await?.refused(2, "cannot be used with")?;
    scope.run(&["dlq", "retry", "not-an-id"]).await?.refused(2, "not-an-id")?;
    scope.run(&["dlq", "list", "--status", "LOST"]).await?.refused(2, "LOST")?;
    scope.run(&["dlq", "retry", "--event-type", ""]).await?.refused(2, "event_type must be 1 to 255")?;
    // Retried events go back to the outbox when the service's transfer job runs.
    dao.transfer_from_dlq(100).await.map_err(fail)?;
    let back = scope.database().await?.outbox().get(ids[0]).await.map_err(fail)?;
    assert_eq!(back.map(|event| event.status), Some(EventStatus::Pending));
    Ok(())
}

async fn dlq_retry_of_events_older_than_the_re_drive_max_age_needs_allow_older_in(
    scope: &Scope,
) -> TestResult {
    scope.run(&["migrate"]).await?.ok()?;
    let old = scope.publish("old-orders", 3).await?;
    let young = scope.publish("new-orders", 1).await?;
    scope.fail_into_dlq(&["old-orders", "new-orders"]).await?;
    scope.written_two_days_earlier("old-orders").await?;
    let id = |id: Uuid| id.to_string();

    // Refused before anything changes, the young event of the selection included.
    let refused = scope.run(&["dlq", "retry", &id(old[0]), &id(young[0])]).await?;
    for says in ["oncebox.outbox.dlq.re-drive-max-age", "the oldest 2days", "pass --allow-older"] {
        assert!(refused.stderr.contains(says), "'{says}' missing from: {}", refused.stderr);
    }
    refused.refused(2, "1 of the selected events was written more than 1day ago")?;
    for event in [old[0], young[0]] {
        assert_eq!(
            scope.dlq_status(event).await?,
            Some(DlqStatus::Moved),
            "a refused re-drive changed {event}"
        );
    }
    let by_type = scope.run(&["dlq", "retry", "--event-type", "old-orders"]).await?;
    by_type.refused(2, "3 of the selected events were written more than 1day ago")?;

    // A young event is re-driven; other changes of old ones are not asked about.
    scope.run(&["dlq", "retry", &id(young[0])]).await?.ok()?;
    scope.run(&["dlq", "resolve", &id(old[0])]).await?.ok()?;
    assert_eq!(scope.dlq_status(old[0]).await?, Some(DlqStatus::Resolved));
    // Asked for explicitly, an old event is re-driven.
    scope.run(&["dlq", "retry", &id(old[0]), "--allow-older"]).await?.ok()?;

    // The max age of the service's config file; --re-drive-max-age wins over it.
    let file = std::env::temp_dir().join(format!("oncebox-cli-{}.yaml", Uuid::now_v7()));
    let text = "oncebox:\n  outbox:\n    events:\n      old-orders:\n        topic: orders\n    dlq:\n      \
                enabled: true\n      re-drive-max-age: 3d\n";
    std::fs::write(&file, text).map_err(fail)?;
    let config = file.to_string_lossy().into_owned();
    let with_config = scope.run(&["dlq", "retry", &id(old[1]), "--config", &config]).await;
    let overridden =
        scope.run(&["dlq", "retry", &id(old[2]), "--config", &config, "--re-drive-max-age", "36h"]).await;
    let _ = std::fs::remove_file(&file);
    with_config?.ok()?;
    overridden?.refused(2, "written more than 1day 12h ago")?;
    scope
        .run(&["dlq", "retry", &id(old[2]), "--re-drive-max-age", "0s"])
        .await?
        .refused(2, "must be greater than 0")?;
    scope
        .run(&["dlq", "retry", &id(old[2]), "--re-drive-max-age", "soon"])
        .await?
        .refused(2, "'soon' is not a duration")?;
    scope.run(&["dlq", "retry", &id(old[2]), "--re-drive-max-age", "3d"]).await?.ok()?;

    let moved_back = scope.database().await?.dlq().transfer_from_dlq(100).await.map_err(fail)?;
    assert_eq!(moved_back, 4, "every event re-driven in the end");
    for event in old.iter().chain(&young) {
        let row = scope.database().await?.outbox().get(*event).await.map_err(fail)?;
        assert_eq!(row.map(|row| row.status), Some(EventStatus::Pending), "{event}");
    }
    Ok(())
}

async fn secrets_and_unknown_databases_are_named_without_the_password(_: Arc<Backend>) -> TestResult {
    let refused =
        oncebox(&["status", "--database-url", "postgres://app:hunter2-secret@127.0.0.1:1/app"]).await?;
    assert!(
        !refused.stderr.contains("hunter2") && refused.stderr.contains("app:***@127.0.0.1:1"),
        "{}",
        refused.stderr
    );
    refused.refused(1, "error:")?;
    let unknown = oncebox(&["status", "--database-url", "oracle://app:hunter2-secret@db/app"]).await?;
    assert!(!unknown.stderr.contains("hunter2"), "{}", unknown.stderr);
    unknown.refused(2, "use postgres://, mysql:// (or mariadb://) or sqlite:")
}

async fn check_config_prints_each_event_type_or_names_the_wrong_key(_: Arc<Backend>) -> TestResult {
    let dir = std::env::temp_dir().join(format!("oncebox-cli-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).map_err(fail)?;
    let write = |name: &str, text: &str| -> Result<String, Failed> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(fail)?;
        Ok(path.to_string_lossy().into_owned())
    };
    let good = write(
        "good.yaml",
        "oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: orders\n        batch-size: 100\n        \
         polling:\n          type: fixed\n          fixed-delay: 500ms\n      payment-failed:\n        topic: payments\n        \
         max-retries: 5\n    dlq:\n      enabled: true\n  kafka:\n    bootstrap-servers: 127.0.0.1:9092\n",
    )?;
    let toml = write("good.toml", "[oncebox.outbox.events.shipped]\ntopic = \"shipping\"\n")?;
    let short_window = write(
        "short-window.yaml",
        "oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: orders\n      payment-failed:\n        \
         topic: payments\n        max-retries: 10\n        backoff:\n          max-delay: 2h\n    dlq:\n      enabled: true\n  \
         inbox:\n    clean-up:\n      ttl: 6h\n",
    )?;
    let bad = write(
        "bad.yaml",
        "oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: orders\n        polling:\n          \
         min-fixed-delay: 2m\n          max-fixed-delay: 1m\n",
    )?;
    let typo = write("typo.toml", "[oncebox.outbox.events.shipped]\ntopic = \"shipping\"\nbatch-sise = 3\n")?;
    let moved = write(
        "moved.yaml",
        "oncebox:\n  outbox:\n    events:\n      a:\n        topic: t\n  kafka:\n    bootstrap-servers: h:9092\n    emergency-timeout: 5s\n",
    )?;
    let rabbit = write(
        "rabbit.yaml",
        "oncebox:\n  outbox:\n    events:\n      a:\n        topic: t\n  rabbitmq:\n    url: amqp://u:pw@h\n    connect-timeout: 30\n",
    )?;
    let outcome = async {
        let out = oncebox(&["check-config", &good]).await?.ok()?;
        let row =
            out.lines().find(|line| line.starts_with("order-created")).ok_or_else(|| fail(out.clone()))?;
        assert!(row.contains("orders") && row.contains("100") && row.contains("every 500ms"), "{out}");
        let row =
            out.lines().find(|line| line.starts_with("payment-failed")).ok_or_else(|| fail(out.clone()))?;
        assert!(row.contains("payments") && row.contains(" 5 ") && row.contains("adaptive"), "{out}");
        assert!(
            out.contains("dlq: on") && out.contains("oncebox.kafka") && out.contains("is valid"),
            "{out}"
        );
        assert!(oncebox(&["check-config", &toml]).await?.ok()?.contains("shipping"));
        assert!(!out.contains("warning:"), "no inbox in the file, nothing to compare: {out}");
        // 10 s, 30 s, 90 s, 270 s, 810 s, 2430 s, then 2 h four times: past the 6 h the inbox keeps ids.
        let out = oncebox(&["check-config", &short_window]).await?.ok()?;
        let warnings: Vec<&str> = out.lines().filter(|line| line.starts_with("warning:")).collect();
        assert_eq!(warnings.len(), 2, "{out}");
        assert!(
            warnings[0].contains("payment-failed") && warnings[0].contains("oncebox.inbox.clean-up.ttl"),
            "{out}"
        );
        assert!(warnings[1].contains("DLQ re-drive"), "{out}");
        oncebox(&["check-config", &bad])
            .await?
            .refused(2, "oncebox.outbox.events.order-created.polling.min-fixed-delay")?;
        oncebox(&["check-config", &typo]).await?.refused(2, "batch-sise")?;
        oncebox(&["check-config", &moved]).await?.refused(2, "oncebox.outbox.sender.emergency-timeout")?;
        oncebox(&["check-config", &rabbit]).await?.refused(2, "oncebox.rabbitmq.connect-timeout")?;
        oncebox(&["check-config", &dir.join("absent.yaml").to_string_lossy()])
            .await?
            .refused(2, "cannot read")
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn main() -> ExitCode {
    let in_ci = oncebox_testkit::runner::in_ci();
    let directory = std::env::temp_dir().join(format!("oncebox-cli-sqlite-{}", Uuid::now_v7()));
    if let Err(error) = std::fs::create_dir_all(&directory) {
        eprintln!("FAILED: {SUITE}: cannot create {}: {error}", directory.display());
        return ExitCode::FAILURE;
    }
    let sqlite = || Backend { url: String::new(), sqlite: Some(directory.clone()) };
    let per_database = || {
        vec![
            case!("migrate_creates_the_tables_once_and_says_so", migrate_creates_the_tables_once_and_says_so),
            case!(
                "migrate_adds_the_recoveries_column_to_an_old_table",
                migrate_adds_the_recoveries_column_to_an_old_table
            ),
            case!(
                "migrate_adds_the_claim_columns_to_an_old_inbox_table",
                migrate_adds_the_claim_columns_to_an_old_inbox_table
            ),
            case!(
                "migrate_with_a_config_creates_only_what_its_sections_use",
                migrate_with_a_config_creates_only_what_its_sections_use
            ),
            case!(
                "status_counts_each_type_with_its_oldest_pending_age_and_the_dlq",
                status_counts_each_type_with_its_oldest_pending_age_and_the_dlq
            ),
            case!(
                "dlq_commands_list_show_and_change_events_with_the_apis_rules",
                dlq_commands_list_show_and_change_events_with_the_apis_rules
            ),
            case!(
                "dlq_retry_of_events_older_than_the_re_drive_max_age_needs_allow_older",
                dlq_retry_of_events_older_than_the_re_drive_max_age_needs_allow_older
            ),
        ]
    };
    let mut suite = Suite::new().add("sqlite", Arc::new(sqlite()), per_database()).add(
        "any",
        Arc::new(sqlite()),
        vec![
            case!(
                "secrets_and_unknown_databases_are_named_without_the_password",
                secrets_and_unknown_databases_are_named_without_the_password
            ),
            case!(
                "check_config_prints_each_event_type_or_names_the_wrong_key",
                check_config_prints_each_event_type_or_names_the_wrong_key
            ),
        ],
    );
    let mut missing = false;
    for (name, variable) in [("postgres", "ONCEBOX_PG_URL"), ("mysql", "ONCEBOX_MYSQL_URL")] {
        match std::env::var(variable) {
            Ok(url) => suite = suite.add(name, Arc::new(Backend { url, sqlite: None }), per_database()),
            Err(_) => missing |= server_missing(&format!("{SUITE} on {name}"), variable) != ExitCode::SUCCESS,
        }
    }
    let code = suite.run();
    let _ = std::fs::remove_dir_all(&directory);
    if missing && in_ci { ExitCode::FAILURE } else { code }
}
