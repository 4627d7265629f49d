//! The sender suite against the in-memory broker.

use std::process::ExitCode;
use std::sync::Arc;

use oncebox_testkit::runner::Suite;
use oncebox_testkit::sender_suite::{self, MemoryHarness};

fn main() -> ExitCode {
    Suite::new().add("sender", Arc::new(MemoryHarness::new()), sender_suite::cases()).run()
}
