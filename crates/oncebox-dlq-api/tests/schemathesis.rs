//! Schemathesis against the served OpenAPI document, over a PostgreSQL DLQ: once with the
//! operator's token (every check: no 5xx, every status, content type and body as documented,
//! authentication enforced) and once without a token, counting on the server side that no
//! request without a valid token got a successful answer from an API route.
//!
//! Needs `ONCEBOX_PG_URL` and the `schemathesis` command (`ONCEBOX_SCHEMATHESIS`, or on the
//! `PATH`); `.ci/run` installs it into a virtual environment. `ONCEBOX_SCHEMATHESIS_EXAMPLES`
//! sets the examples per operation (default 30).

mod support;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use oncebox_testkit::runner::prerequisite_missing;
use support::{Error, MOUNT, OPERATOR, PgDlq, READER, serve};

const SUITE: &str = "DLQ API schemathesis";

fn main() -> ExitCode {
    let Ok(url) = std::env::var("ONCEBOX_PG_URL") else {
        return oncebox_testkit::runner::server_missing(SUITE, "ONCEBOX_PG_URL");
    };
    let tool = std::env::var_os("ONCEBOX_SCHEMATHESIS")
        .map(PathBuf::from)
        .or_else(|| support::on_path("schemathesis"));
    let Some(tool) = tool.filter(|path| path.is_file()) else {
        return prerequisite_missing(
            SUITE,
            "schemathesis is not installed (pip install schemathesis, or set ONCEBOX_SCHEMATHESIS)",
        );
    };
    support::run_suite(SUITE, run(&url, &tool))
}

/// Answers to requests that carried no valid token: all of them, and the successful ones among
/// those that reached an API route.
#[derive(Default)]
struct Unauthorized {
    answered: AtomicU64,
    succeeded: AtomicU64,
}

async fn run(url: &str, tool: &PathBuf) -> Result<(), Error> {
    let dlq = PgDlq::new(url, &[("order-created", 20), ("payment-failed", 10)]).await?;
    let result = fuzz(&dlq, tool).await;
    dlq.dispose().await?;
    result
}

async fn fuzz(dlq: &PgDlq, tool: &PathBuf) -> Result<(), Error> {
    let unauthorized = Arc::new(Unauthorized::default());
    let counter = unauthorized.clone();
    let app = dlq.app()?.layer(middleware::from_fn(move |request: Request, next: Next| {
        let counter = counter.clone();
        async move {
            let authorization = request.headers().get("authorization").and_then(|v| v.to_str().ok());
            let valid =
                [OPERATOR, READER].iter().any(|token| authorization == Some(&format!("Bearer {token}")));
            let public =
                request.uri().path().ends_with("/openapi.json") || request.uri().path().contains("/console");
            let response: Response = next.run(request).await;
            if !valid && !public {
                counter.answered.fetch_add(1, Ordering::Relaxed);
                if response.status().is_success() {
                    counter.succeeded.fetch_add(1, Ordering::Relaxed);
                }
            }
            response
        }
    }));
    let address = serve(app).await?;
    let base = format!("http://{address}{MOUNT}");
    let examples = std::env::var("ONCEBOX_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "30".to_owned());
    let report = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/schemathesis");

    let with_token = schemathesis(tool, &base, &examples, &report, Some(OPERATOR)).await?;
    let before = unauthorized.answered.load(Ordering::Relaxed);
    let without_token = schemathesis(tool, &base, &examples, &report, None).await?;
    let answered = unauthorized.answered.load(Ordering::Relaxed) - before;
    let succeeded = unauthorized.succeeded.load(Ordering::Relaxed);
    eprintln!(
        "{SUITE}: {answered} requests without a valid token answered, {succeeded} of them successfully"
    );
    let mut failures = Vec::new();
    if !with_token.0 {
        failures.push(format!("the run with a token failed:\n{}", with_token.1));
    }
    if !without_token.0 {
        failures.push(format!("the run without a token failed:\n{}", without_token.1));
    }
    if answered == 0 {
        failures.push("the run without a token sent no request to an API route".to_owned());
    }
    if succeeded > 0 {
        failures.push(format!("{succeeded} requests without a valid token got a successful answer"));
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n").into()) }
}

/// One schemathesis run: whether it passed, and its output.
async fn schemathesis(
    tool: &PathBuf,
    base: &str,
    examples: &str,
    report: &std::path::Path,
    token: Option<&str>,
) -> Result<(bool, String), Error> {
    let mut command = tokio::process::Command::new(tool);
    command
        .arg("run")
        .arg(format!("{base}/openapi.json"))
        .args(["--url", base, "--checks", "all", "--max-examples", examples, "--seed", "20261205"])
        // One worker: CPython 3.11's `ast.parse` keeps its recursion count per interpreter, so two
        // threads parsing at once (hypothesis parses sources to describe its filters) can fail
        // with "AST constructor recursion depth mismatch", a runtime error of the tool and not a
        // finding about the API.
        .args(["--generation-database", "none", "--no-color", "--workers", "1", "--report", "junit"])
        .arg("--report-dir")
        .arg(report)
        .env("PYTHONIOENCODING", "utf-8");
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let output = command.output().await?;
    // Reproductions can hold a thousand ids on one line: long lines are cut, and only the end of
    // the output (failures and summary) is kept.
    let text: Vec<String> =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
            .lines()
            .map(|line| {
                if line.chars().count() > 300 {
                    format!("{}…", line.chars().take(300).collect::<String>())
                } else {
                    line.to_owned()
                }
            })
            .collect();
    let text = text[text.len().saturating_sub(120)..].join("\n");
    let summary: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("generated") || line.contains(" in ") && line.starts_with('='))
        .collect();
    eprintln!(
        "{SUITE} ({}): {}",
        if token.is_some() { "with a token" } else { "without a token" },
        summary.join(" | ")
    );
    Ok((output.status.success(), text))
}
