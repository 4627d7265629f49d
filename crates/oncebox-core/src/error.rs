//! The one error type that crosses every oncebox crate boundary.

use std::fmt;

/// Result alias used throughout oncebox.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely. Retry and dead-letter decisions read only this and
/// [`Error::is_temporary`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The configuration is invalid; the message names the key.
    Config,
    /// A caller passed something unusable (unknown event type, empty batch where one is required, …).
    InvalidInput,
    /// A payload could not be serialized or deserialized.
    Serialization,
    /// The database refused or failed a statement.
    Database,
    /// The broker refused or failed a delivery.
    Broker,
    /// A message received from a broker cannot be decoded (missing or malformed headers).
    Decode,
    /// An operation did not finish within its deadline.
    Timeout,
    /// The engine is not in a state that allows the operation.
    Lifecycle,
    /// Another delivery of the same event is being handled right now: nothing failed, and the
    /// message runs again later (never settled as a duplicate, never counted as a failed run).
    InFlight,
    /// The event is older than the inbox keeps ids ([`Inbox::admit`](crate::Inbox::admit)): it may
    /// have been applied and forgotten, so it is not applied; the message is held or dead-lettered.
    TooOld,
    /// A handler said the event can never be handled (a business rule refuses it, say): a
    /// listener gives the message up at once, dead-lettered or held like poison, without retries.
    Permanent,
    /// Anything else.
    Other,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ErrorKind::Config => "configuration error",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Serialization => "serialization error",
            ErrorKind::Database => "database error",
            ErrorKind::Broker => "broker error",
            ErrorKind::Decode => "decode error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Lifecycle => "lifecycle error",
            ErrorKind::InFlight => "in flight elsewhere",
            ErrorKind::TooOld => "older than the inbox keeps ids",
            ErrorKind::Permanent => "permanent failure",
            ErrorKind::Other => "error",
        };
        f.write_str(name)
    }
}

/// Any error, boxed: what a handler may fail with, and the source an [`Error`] keeps.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An oncebox error: a kind, whether retrying may help, a message with context, and the
/// underlying driver error as [`std::error::Error::source`].
pub struct Error {
    kind: ErrorKind,
    temporary: bool,
    message: String,
    source: Option<BoxError>,
}

impl Error {
    /// A permanent error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, temporary: false, message: message.into(), source: None }
    }

    /// A temporary error of `kind`: retrying later may succeed.
    pub fn temporary(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, temporary: true, message: message.into(), source: None }
    }

    /// A handler's failure that no retry can mend ([`ErrorKind::Permanent`]): the listener gives
    /// the message up at once. Attach the cause with [`with_source`](Self::with_source).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Permanent, message)
    }

    /// A configuration error naming `key`.
    pub fn config(key: impl fmt::Display, problem: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Config, format!("{key}: {problem}"))
    }

    /// An invalid-input error.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// A database error wrapping the driver's error; temporary when the caller says so.
    pub fn database(
        message: impl Into<String>,
        temporary: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self { kind: ErrorKind::Database, temporary, message: message.into(), source: Some(Box::new(source)) }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Attaches an underlying error that is already boxed (a `Box<dyn Error>` is not itself an
    /// `Error`, so [`with_source`](Self::with_source) cannot take it).
    pub fn with_boxed_source(mut self, source: BoxError) -> Self {
        self.source = Some(source);
        self
    }

    /// Prefixes the message with context (`"claiming order-created: …"`).
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether retrying the same operation later may succeed.
    pub fn is_temporary(&self) -> bool {
        self.temporary
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("temporary", &self.temporary)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Error::new(ErrorKind::Serialization, "JSON serialization failed").with_source(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_kind_message_and_source() {
        let io = std::io::Error::other("socket closed");
        let error =
            Error::temporary(ErrorKind::Broker, "publish failed").with_source(io).context("order-created");
        assert_eq!(error.to_string(), "broker error: order-created: publish failed (socket closed)");
        assert!(error.is_temporary());
        assert!(std::error::Error::source(&error).is_some());
    }

    #[test]
    fn error_is_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
    }
}
