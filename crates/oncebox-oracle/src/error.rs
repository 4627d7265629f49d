//! Turns `oracle` crate errors into the oncebox error at the crate boundary, deciding which are
//! temporary from the ORA- and DPI- codes.

use oncebox_core::{Error, ErrorKind};

/// ORA- codes after which trying again later may succeed: the session, the instance or the
/// network went away, a lock or resource was busy, or a read outlived its undo.
pub(crate) const TEMPORARY_ORA_CODES: &[i32] = &[
    18,    // maximum number of sessions exceeded
    20,    // maximum number of processes exceeded
    28,    // your session has been killed
    51,    // timeout occurred while waiting for a resource
    54,    // resource busy and acquire with NOWAIT specified or timeout expired
    60,    // deadlock detected while waiting for resource (the statement was rolled back)
    1012,  // not logged on
    1013,  // user requested cancel of current operation (also a call timeout)
    1033,  // ORACLE initialization or shutdown in progress
    1034,  // ORACLE not available
    1089,  // immediate shutdown or close in progress
    1090,  // shutdown in progress - connection is not permitted
    1555,  // snapshot too old
    3113,  // end-of-file on communication channel
    3114,  // not connected to ORACLE
    3135,  // connection lost contact
    3136,  // inbound connection timed out
    12170, // TNS: connect timeout occurred
    12514, // TNS: listener does not currently know of the service (instance starting)
    12516, // TNS: listener could not find an available handler
    12519, // TNS: no appropriate service handler found
    12520, // TNS: listener could not find an available handler for the server type
    12528, // TNS: all appropriate instances are blocking new connections
    12537, // TNS: connection closed
    12541, // TNS: no listener
    12543, // TNS: destination host unreachable
    12547, // TNS: lost contact
    12560, // TNS: protocol adapter error
    12571, // TNS: packet writer failure
    24418, // cannot open further sessions (session pool)
    24459, // timed out waiting for the pool to create new connections
    24496, // timed out waiting for a free connection
    25408, // cannot safely replay call
    30006, // resource busy; acquire with WAIT timeout expired
];

/// DPI- codes of ODPI-C that mean the connection broke or a call ran out of time.
pub(crate) const TEMPORARY_DPI_CODES: &[i32] = &[
    1010, // not connected
    1067, // call timeout exceeded
    1080, // connection was closed by an ORA- error
];

/// The unique-constraint error: for the inbox and job inserts, the answer "someone was first".
pub(crate) const UNIQUE_VIOLATION: i32 = 1;

/// Whether an error with these codes may pass when tried again.
pub(crate) fn is_temporary(ora_code: Option<i32>, dpi_code: Option<i32>) -> bool {
    ora_code.is_some_and(|code| TEMPORARY_ORA_CODES.contains(&code))
        || dpi_code.is_some_and(|code| TEMPORARY_DPI_CODES.contains(&code))
}

/// Whether `error` is ORA-00001.
pub(crate) fn is_unique_violation(error: &oracle::Error) -> bool {
    error.oci_code() == Some(UNIQUE_VIOLATION)
}

/// Wraps an `oracle` error with `context` (what was being done), keeping it as the source. A
/// value that could not be converted is a decode error; anything else a database error,
/// temporary as the codes say.
pub(crate) fn database_error(context: &str, error: oracle::Error) -> Error {
    match error.kind() {
        oracle::ErrorKind::NullValue
        | oracle::ErrorKind::ParseError
        | oracle::ErrorKind::OutOfRange
        | oracle::ErrorKind::InvalidTypeConversion => {
            Error::new(ErrorKind::Decode, format!("{context}: a value could not be converted"))
                .with_source(error)
        }
        _ => {
            let temporary = is_temporary(error.oci_code(), error.dpi_code());
            Error::database(context.to_owned(), temporary, error)
        }
    }
}

/// Adds context to an `oracle` result.
pub(crate) trait OraResultExt<T> {
    /// Converts the error, naming what was being done.
    fn context(self, context: &str) -> oncebox_core::Result<T>;
}

impl<T> OraResultExt<T> for oracle::Result<T> {
    fn context(self, context: &str) -> oncebox_core::Result<T> {
        self.map_err(|error| database_error(context, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_lock_and_undo_errors_are_temporary() {
        for code in [28, 54, 60, 1555, 3113, 3135, 12541, 24496] {
            assert!(is_temporary(Some(code), None), "ORA-{code:05}");
        }
        for code in [1010, 1067, 1080] {
            assert!(is_temporary(None, Some(code)), "DPI-{code}");
        }
    }

    #[test]
    fn constraint_syntax_and_privilege_errors_are_permanent() {
        // unique constraint, table or view does not exist, insufficient privileges, invalid
        // identifier, value too large, check constraint violated
        for code in [UNIQUE_VIOLATION, 942, 1031, 904, 12899, 2290] {
            assert!(!is_temporary(Some(code), None), "ORA-{code:05}");
        }
        // DPI-1047: the Oracle client library cannot be loaded; trying again will not load it.
        assert!(!is_temporary(None, Some(1047)));
        assert!(!is_temporary(None, None));
    }

    #[test]
    fn the_table_has_no_code_twice() {
        let mut codes = TEMPORARY_ORA_CODES.to_vec();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), TEMPORARY_ORA_CODES.len());
    }

    #[test]
    fn conversion_failures_are_decode_errors() {
        let error = database_error("reading", oracle::Error::new(oracle::ErrorKind::NullValue, "NULL"));
        assert_eq!(error.kind(), ErrorKind::Decode);
        let error = database_error("reading", oracle::Error::new(oracle::ErrorKind::InternalError, "x"));
        assert_eq!(error.kind(), ErrorKind::Database);
        assert!(!error.is_temporary());
    }
}
