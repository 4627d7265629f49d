//! lapin errors mapped to [`oncebox_core::Error`] at the crate boundary.

use lapin::ErrorKind as LapinKind;
use oncebox_core::{Error, ErrorKind};

/// Whether retrying later may help: I/O, connection state, heartbeat and connection-level (hard)
/// AMQP errors are temporary; a channel-level (soft) refusal such as NOT_FOUND or ACCESS_REFUSED
/// repeats until someone changes the topology or permissions.
pub(crate) fn is_temporary(error: &lapin::Error) -> bool {
    match error.kind() {
        LapinKind::ProtocolError(_) => !error.is_amqp_soft_error(),
        LapinKind::IOError(_)
        | LapinKind::RuntimeShutdownError(_)
        | LapinKind::InvalidChannelState(..)
        | LapinKind::InvalidConnectionState(_)
        | LapinKind::InvalidChannel(_)
        | LapinKind::ChannelsLimitReached
        | LapinKind::MissingHeartbeatError => true,
        _ => false,
    }
}

/// A broker error with `context`, temporary as [`is_temporary`] decides, carrying `error` as source.
pub(crate) fn broker(context: impl Into<String>, error: lapin::Error) -> Error {
    let context = context.into();
    let mapped = if is_temporary(&error) {
        Error::temporary(ErrorKind::Broker, context)
    } else {
        Error::new(ErrorKind::Broker, context)
    };
    mapped.with_source(error)
}
