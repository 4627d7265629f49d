//! Helpers shared by the test binaries: broker address, fresh names, a raw lapin connection and
//! `rabbitmqctl` access.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lapin::types::AMQPValue;
use lapin::{Channel, Connection, ConnectionProperties};
use oncebox_core::{Error, ErrorKind, Result};

/// The variable naming the broker under test.
pub const URL_VARIABLE: &str = "ONCEBOX_AMQP_URL";

/// The broker URL, when configured.
pub fn amqp_url() -> Option<String> {
    std::env::var(URL_VARIABLE).ok().filter(|url| !url.is_empty())
}

static NAMES: AtomicU64 = AtomicU64::new(0);

/// A name no other test (in this or a concurrent run) uses.
pub fn fresh_name(prefix: &str) -> String {
    let run = uuid::Uuid::new_v4().simple().to_string();
    format!("oncebox-test-{prefix}-{}-{}", &run[..8], NAMES.fetch_add(1, Ordering::Relaxed))
}

/// Maps any displayable failure of test plumbing to an error.
pub fn plumbing(context: &str, error: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("{context}: {error}"))
}

/// A raw connection and channel for test set-up, independent of the code under test.
pub async fn raw_channel(url: &str) -> Result<(Connection, Channel)> {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|error| plumbing("test connection", error))?;
    let channel = connection.create_channel().await.map_err(|error| plumbing("test channel", error))?;
    Ok((connection, channel))
}

/// A header value as text.
pub fn header_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        AMQPValue::ShortString(text) => Some(text.as_str().to_owned()),
        _ => None,
    }
}

pub fn rabbitmqctl(arguments: &[&str]) -> Result<String> {
    let output = std::process::Command::new("rabbitmqctl")
        .args(arguments)
        .output()
        .map_err(|error| plumbing("running rabbitmqctl", error))?;
    if !output.status.success() {
        return Err(plumbing(
            &format!("rabbitmqctl {}", arguments.join(" ")),
            String::from_utf8_lossy(&output.stderr),
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Closes, from the broker's side, every connection whose client-provided name is `name`;
/// returns how many there were.
pub fn close_connections_named(name: &str) -> Result<usize> {
    // JSON shows the client properties but renders pids in a form `close_connection` refuses, so the
    // connection's `name` (its address pair) links the JSON listing to the plain one with usable pids.
    let listing = rabbitmqctl(&["list_connections", "--formatter", "json", "name", "client_properties"])?;
    let connections: Vec<serde_json::Value> =
        serde_json::from_str(&listing).map_err(|error| plumbing("parsing list_connections", error))?;
    let addresses: Vec<String> = connections
        .iter()
        .filter(|connection| connection_name(connection).is_some_and(|found| found == name))
        .filter_map(|connection| connection.get("name").and_then(|value| value.as_str()).map(str::to_owned))
        .collect();
    let plain = rabbitmqctl(&["list_connections", "--quiet", "--no-table-headers", "pid", "name"])?;
    let mut closed = 0;
    for line in plain.lines() {
        if let Some((pid, address)) = line.split_once('\t')
            && addresses.iter().any(|wanted| wanted == address.trim())
        {
            rabbitmqctl(&["close_connection", pid.trim(), "closed by an oncebox test"])?;
            closed += 1;
        }
    }
    Ok(closed)
}

/// How many connections the broker has whose client-provided name is `name`.
pub fn connections_named(name: &str) -> Result<usize> {
    let listing = rabbitmqctl(&["list_connections", "--formatter", "json", "client_properties"])?;
    let connections: Vec<serde_json::Value> =
        serde_json::from_str(&listing).map_err(|error| plumbing("parsing list_connections", error))?;
    Ok(connections
        .iter()
        .filter(|connection| connection_name(connection).is_some_and(|found| found == name))
        .count())
}

/// `client_properties` is rendered as a list of `[key, type, value]` triples (or an object).
fn connection_name(connection: &serde_json::Value) -> Option<String> {
    let properties = connection.get("client_properties")?;
    if let Some(name) = properties.get("connection_name").and_then(|value| value.as_str()) {
        return Some(name.to_owned());
    }
    properties.as_array()?.iter().find_map(|entry| {
        let entry = entry.as_array()?;
        if entry.first()?.as_str()? == "connection_name" {
            entry.last()?.as_str().map(str::to_owned)
        } else {
            None
        }
    })
}

/// Waits until `check` returns true, polling every 50 ms, for at most `limit`.
pub async fn eventually(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops the broker's RabbitMQ application and starts it again when dropped, so a failing
/// restart test never leaves the broker down for everything else on the machine.
pub struct StoppedBroker {
    started: bool,
}

impl StoppedBroker {
    /// `rabbitmqctl stop_app`.
    pub fn stop() -> Result<Self> {
        // Armed before stopping: even a stop that fails half-way is followed by a start.
        let guard = Self { started: false };
        rabbitmqctl(&["stop_app"])?;
        Ok(guard)
    }

    /// `rabbitmqctl start_app`, then waits until the broker accepts connections again.
    pub fn start(mut self) -> Result<()> {
        // On failure the guard is dropped still unstarted and tries `start_app` once more.
        rabbitmqctl(&["start_app"])?;
        self.started = true;
        rabbitmqctl(&["await_startup"]).map(|_| ())
    }
}

impl Drop for StoppedBroker {
    fn drop(&mut self) {
        if !self.started
            && let Err(error) = rabbitmqctl(&["start_app"])
        {
            eprintln!("could not restart the RabbitMQ application: {error}");
        }
    }
}
