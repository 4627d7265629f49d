//! Connection settings: the `oracle://` URL, the pool's size and the call timeout. The password
//! never reaches `Debug`, a log line or an error.

use std::fmt;
use std::time::Duration;

use oncebox_core::{Error, Result};

/// Connections the pool opens at most by default, and so the blocking calls that run at once. A
/// draining relay holds up to 2 × min(`thread-pool-size`, event types) of them, as on the other
/// dialects.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// How long one database call may run before the client cancels it (ORA-01013, a temporary
/// error the relay retries), so a hung network never holds a blocking thread for good.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to connect: user, password, an Easy Connect string (`host:port/service`), the
/// pool size and the call timeout.
#[derive(Clone, PartialEq, Eq)]
pub struct OraConnectOptions {
    /// The database user.
    pub username: String,
    /// The user's password (shown as `***` by `Debug`).
    pub password: String,
    /// Easy Connect (`host[:port]/service`) or a TNS alias.
    pub connect_string: String,
    /// Connections in the pool at most, and so blocking calls at once.
    pub max_connections: u32,
    /// The longest one call may run; `None` for no limit.
    pub call_timeout: Option<Duration>,
}

impl fmt::Debug for OraConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OraConnectOptions")
            .field("username", &self.username)
            .field("password", &"***")
            .field("connect_string", &self.connect_string)
            .field("max_connections", &self.max_connections)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

impl OraConnectOptions {
    /// Options from `oracle://user:password@host:port/service` (user and password
    /// percent-encoded where they hold `@`, `:` or `/`), with optional query parameters
    /// `max_connections` (a positive integer) and `call_timeout_ms` (0 for none). The error
    /// names what was wrong and never repeats the URL, which holds a password.
    pub fn from_url(url: &str) -> Result<Self> {
        let invalid = |what: &str| Error::invalid_input(format!("the Oracle database URL {what}"));
        let rest = url.strip_prefix("oracle://").ok_or_else(|| invalid("must start with oracle://"))?;
        let (address, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (user_info, connect_string) = address
            .rsplit_once('@')
            .ok_or_else(|| invalid("has no user (oracle://user:password@host/service)"))?;
        let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
        let username = percent_decode(user).ok_or_else(|| invalid("has a malformed %-escape in the user"))?;
        let password =
            percent_decode(password).ok_or_else(|| invalid("has a malformed %-escape in the password"))?;
        if username.is_empty() {
            return Err(invalid("has an empty user"));
        }
        if connect_string.is_empty() || connect_string.starts_with('/') {
            return Err(invalid("has no host (oracle://user:password@host:port/service)"));
        }
        let mut options = Self {
            username,
            password,
            connect_string: connect_string.to_owned(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            call_timeout: Some(DEFAULT_CALL_TIMEOUT),
        };
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "max_connections" => {
                    options.max_connections = value
                        .parse()
                        .ok()
                        .filter(|size| *size > 0)
                        .ok_or_else(|| invalid("parameter max_connections must be a positive integer"))?;
                }
                "call_timeout_ms" => {
                    let millis: u64 = value.parse().map_err(|_| {
                        invalid("parameter call_timeout_ms must be a whole number of milliseconds")
                    })?;
                    options.call_timeout = (millis > 0).then(|| Duration::from_millis(millis));
                }
                other => {
                    return Err(invalid(&format!(
                        "has an unknown parameter '{other}' (known: max_connections, call_timeout_ms)"
                    )));
                }
            }
        }
        Ok(options)
    }
}

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_url_is_read() {
        let options = OraConnectOptions::from_url(
            "oracle://shop:s%40cret%3A1@db.example:1521/FREEPDB1?max_connections=4",
        )
        .unwrap();
        assert_eq!(options.username, "shop");
        assert_eq!(options.password, "s@cret:1");
        assert_eq!(options.connect_string, "db.example:1521/FREEPDB1");
        assert_eq!(options.max_connections, 4);
        assert_eq!(options.call_timeout, Some(DEFAULT_CALL_TIMEOUT));
        let options =
            OraConnectOptions::from_url("oracle://shop:pw@localhost/FREEPDB1?call_timeout_ms=0").unwrap();
        assert_eq!(options.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(options.call_timeout, None);
    }

    #[test]
    fn the_password_never_shows() {
        let url = "oracle://shop:hunter2@localhost:1521/FREEPDB1";
        let options = OraConnectOptions::from_url(url).unwrap();
        let debug = format!("{options:?}");
        assert!(!debug.contains("hunter2") && debug.contains("***"), "{debug}");
        for bad in [
            "oracle://shop:hunter2@localhost/FREEPDB1?max_connections=0",
            "oracle://shop:hunter2@localhost/FREEPDB1?pool=3",
            "oracle://shop:hunter2%zz@localhost/FREEPDB1",
            "oracle://shop:hunter2@",
            "postgres://shop:hunter2@localhost/db",
        ] {
            let error = OraConnectOptions::from_url(bad).unwrap_err().to_string();
            assert!(!error.contains("hunter2"), "{error}");
            assert!(error.contains("Oracle database URL"), "{error}");
        }
    }

    #[test]
    fn each_mistake_is_named() {
        let message = |url: &str| OraConnectOptions::from_url(url).unwrap_err().to_string();
        assert!(message("oracle://localhost/FREEPDB1").contains("no user"));
        assert!(message("oracle://:pw@localhost/FREEPDB1").contains("empty user"));
        assert!(message("oracle://u:p@/FREEPDB1").contains("no host"));
        assert!(message("oracle://u:p@h/s?max_connections=x").contains("max_connections"));
        assert!(message("oracle://u:p@h/s?call_timeout_ms=-1").contains("call_timeout_ms"));
        assert!(message("oracle://u:p@h/s?pool=3").contains("unknown parameter 'pool'"));
    }
}
