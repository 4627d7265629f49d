//! Conformance suites for oncebox backends, and an in-memory broker.
//!
//! Every dialect runs the [DAO suite](dao_suite) and the [engine suite](engine_suite) against a real
//! server from its `tests/conformance.rs`; every transport runs the [sender suite](sender_suite)
//! against a real broker. The [in-memory broker](memory) is for core tests and the quickstart only.
//!
//! ```no_run
//! // tests/conformance.rs of a dialect crate, with `harness = false`:
//! # struct MyHarness;
//! # fn my_harness() -> std::sync::Arc<MyHarness> { unimplemented!() }
//! fn main() -> std::process::ExitCode {
//!     let Ok(_url) = std::env::var("MY_DB_URL") else {
//!         return oncebox_testkit::runner::server_missing("my-dialect conformance", "MY_DB_URL");
//!     };
//!     oncebox_testkit::runner::Suite::new()
//!         // .add("dao", my_harness(), oncebox_testkit::dao_suite::cases())
//!         .run()
//! }
//! ```
#![deny(missing_docs)]

pub mod background;
pub mod dao_suite;
pub mod engine_suite;
pub mod harness;
pub mod memory;
pub mod runner;
pub mod sender_suite;
#[cfg(feature = "sqlx")]
pub mod sqlx_harness;
pub mod statement_rules;

pub use background::Background;
pub use harness::{AgedTable, DaoHarness, eventually, fail_into_dlq, random_prefix, with_fresh};
pub use memory::MemoryBroker;
