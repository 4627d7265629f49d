//! The web console in a real browser: headless Chromium, driven by `tests/browser/console.mjs`
//! (playwright-core), against the API served over a PostgreSQL DLQ whose rows arrived the
//! engine's way, with the transfer-from job running as in a live service. The browser retries one
//! event and deletes another; this side checks the database: the retried event is PENDING in the
//! outbox and gone from the DLQ, the deleted one is in neither table.
//!
//! Needs `ONCEBOX_PG_URL`, `node`, Chromium (`/usr/bin/chromium` or `ONCEBOX_CHROMIUM`) and
//! `npm ci` in `tests/browser`; `.ci/run` provides them. Writes its screenshot to
//! `target/dlq-console.png`, or to `ONCEBOX_CONSOLE_SCREENSHOT` (how docs/images is refreshed).

mod support;

use std::path::PathBuf;
use std::process::ExitCode;

use oncebox_core::{Dialect, EventStatus};
use oncebox_testkit::runner::prerequisite_missing;
use support::{Error, OPERATOR, PgDlq, serve};

const SUITE: &str = "DLQ console in a browser";

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_PG_URL") else {
        return oncebox_testkit::runner::server_missing(SUITE, "ONCEBOX_PG_URL");
    };
    let Some(node) = support::on_path("node") else {
        return prerequisite_missing(SUITE, "node is not on the PATH");
    };
    let chromium = std::env::var("ONCEBOX_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if support::executable(&chromium).is_none() {
        return prerequisite_missing(SUITE, &format!("no Chromium at {chromium} (apt-get install chromium)"));
    }
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if !folder.join("node_modules/playwright-core").is_dir() {
        return prerequisite_missing(SUITE, "playwright-core is not installed (npm ci in tests/browser)");
    }
    support::run_suite(SUITE, run(&url, node, &chromium, &folder))
}

async fn run(url: &str, node: PathBuf, chromium: &str, folder: &std::path::Path) -> Result<(), Error> {
    let dlq = PgDlq::new(url, &[("order-created", 20), ("payment-failed", 5)]).await?;
    let result = drive(&dlq, node, chromium, folder).await;
    dlq.dispose().await?;
    result
}

async fn drive(dlq: &PgDlq, node: PathBuf, chromium: &str, folder: &std::path::Path) -> Result<(), Error> {
    let address = serve(dlq.app()?).await?;
    let job = dlq.transfer_job();
    let screenshot = std::env::var("ONCEBOX_CONSOLE_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/dlq-console.png"));
    let base = format!("http://{address}{}", support::MOUNT);
    let output = tokio::process::Command::new(node)
        .current_dir(folder)
        .env("ONCEBOX_CHROMIUM", chromium)
        .arg("console.mjs")
        .arg(&base)
        .arg(OPERATOR)
        .arg(&screenshot)
        .output()
        .await?;
    job.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the browser script failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let report: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())?;
    let id = |key: &str| -> Result<uuid::Uuid, Error> {
        Ok(uuid::Uuid::parse_str(report[key].as_str().ok_or_else(|| format!("no {key} in {report}"))?)?)
    };
    let (retried, deleted) = (id("retried")?, id("deleted")?);
    assert!(dlq.ids.contains(&retried) && dlq.ids.contains(&deleted) && retried != deleted);

    let (outbox, dead) = (dlq.dialect.outbox_dao(), dlq.dialect.dlq_dao());
    let back = outbox.get(retried).await?.ok_or("the retried event is not in the outbox")?;
    assert_eq!(back.status, EventStatus::Pending, "the retried event waits to be sent again");
    assert!(dead.get(retried).await?.is_none(), "the retried event is still in the DLQ");
    assert!(dead.get(deleted).await?.is_none(), "the deleted event is still in the DLQ");
    assert!(outbox.get(deleted).await?.is_none(), "the deleted event went back to the outbox");
    let left = dead.count(&Default::default()).await?;
    assert_eq!(left, 23, "the browser changed other events");
    eprintln!("screenshot: {}", screenshot.display());
    Ok(())
}
