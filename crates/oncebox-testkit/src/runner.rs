//! Runs suites through `libtest-mimic` from a backend's `tests/conformance.rs` (`harness = false`).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

use libtest_mimic::{Arguments, Trial};

/// A test failure (re-exported so backend test helpers can name it).
pub use libtest_mimic::Failed;

/// The result of one conformance test.
pub type TestResult = Result<(), Failed>;

/// A boxed test future.
pub type TestFuture = Pin<Box<dyn Future<Output = TestResult> + Send>>;

/// One named test over a harness `H`.
pub struct Case<H> {
    /// Test name, unique within its suite.
    pub name: &'static str,
    /// The test body.
    pub run: fn(Arc<H>) -> TestFuture,
}

impl<H> Clone for Case<H> {
    fn clone(&self) -> Self {
        Self { name: self.name, run: self.run }
    }
}

/// Boxes an async test function into a [`Case`]'s body.
#[macro_export]
macro_rules! case {
    ($name:literal, $function:path) => {
        $crate::runner::Case { name: $name, run: |harness| Box::pin($function(harness)) }
    };
}

/// Converts any displayable error into a test failure.
pub fn fail(message: impl std::fmt::Display) -> Failed {
    Failed::from(message.to_string())
}

/// A set of trials to run in one test binary.
#[derive(Default)]
pub struct Suite {
    trials: Vec<Trial>,
}

impl Suite {
    /// An empty suite.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `cases` over `harness`, each named `<prefix>::<case>` and run on its own tokio runtime.
    pub fn add<H: Send + Sync + 'static>(
        mut self,
        prefix: &str,
        harness: Arc<H>,
        cases: Vec<Case<H>>,
    ) -> Self {
        for case in cases {
            let harness = harness.clone();
            let name = format!("{prefix}::{}", case.name);
            self.trials.push(Trial::test(name, move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(fail)?;
                runtime.block_on((case.run)(harness))
            }));
        }
        self
    }

    /// Runs the trials with the command line's arguments.
    pub fn run(self) -> ExitCode {
        let arguments = Arguments::from_args();
        libtest_mimic::run(&arguments, self.trials).exit_code()
    }
}

/// The backend's server is not configured: says so on stderr and exits successfully, unless
/// `CI=true`, where a missing server is a failure.
pub fn server_missing(suite: &str, variable: &str) -> ExitCode {
    prerequisite_missing(
        suite,
        &format!("{variable} is not set (set it to run this suite against a real server)"),
    )
}

/// Something a suite needs (a server, a browser, a tool) is missing, as `what` says: says so on
/// stderr and exits successfully, unless `CI=true`, where it is a failure.
pub fn prerequisite_missing(suite: &str, what: &str) -> ExitCode {
    if in_ci() {
        eprintln!("FAILED: {suite}: {what}, and CI=true requires every suite to run");
        ExitCode::FAILURE
    } else {
        eprintln!("SKIPPED: {suite}: {what}");
        ExitCode::SUCCESS
    }
}

/// The suite of a server that no CI machine of this project has (Oracle): its variable is not
/// set, so it says loudly that it did not run, with how many cases of each part would have run,
/// and exits successfully even under `CI=true`. This is the one exception to the rule of
/// [`server_missing`]; every other suite fails in CI without its server.
pub fn server_absent_from_ci(suite: &str, variable: &str, parts: &[(&str, usize)]) -> ExitCode {
    let cases: Vec<String> = parts.iter().map(|(part, count)| format!("{count} {part}")).collect();
    eprintln!(
        "NOT RUN: {suite}: {variable} is not set. No CI machine of this project has this server, so \
         CI=true does not fail this suite; set {variable} to run its {} cases ({}).",
        parts.iter().map(|(_, count)| count).sum::<usize>(),
        cases.join(", ")
    );
    ExitCode::SUCCESS
}

/// Whether `CI=true` (or `1`) asks every suite to run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}

/// [`server_missing`] for one test of a libtest suite: says it skipped and passes, unless
/// `CI=true`, where the test fails naming `variable`.
pub fn test_server_missing(test: &str, variable: &str) -> TestResult {
    if in_ci() {
        return Err(fail(format!("{test}: {variable} is not set, and CI=true requires the server")));
    }
    eprintln!("SKIPPED: {test}: {variable} is not set");
    Ok(())
}
