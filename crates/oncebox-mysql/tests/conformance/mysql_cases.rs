//! Cases only MySQL/MariaDB have.

use oncebox_testkit::runner::Case;

use super::MySqlHarness;

/// Every MySQL-only case.
pub fn cases() -> Vec<Case<MySqlHarness>> {
    vec![]
}
