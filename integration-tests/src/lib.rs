//! Cross-crate suites of oncebox against real servers, through the facade `oncebox`.
//!
//! The suites live in `tests/`; this library holds what they share: a [`Store`] per SQL dialect
//! (connecting instances, the business writes that publish, the inbox-guarded effect, the counts
//! the accounting reads) and a [`Transport`] per broker (its sender, its listener, creating and
//! removing a run's topic or queue), plus the [`Ledger`] both suites end with. Each store and
//! transport is chosen by the environment variable that names its server, as in docs/testing.md; a
//! run gets its own table prefix, topic and queue.
//!
//! * `tests/matrix.rs` — one end-to-end scenario for every dialect x transport pair, checked by
//!   accounting: every committed event delivered at least once, no rolled-back event ever, each
//!   effect exactly once.
//! * `tests/chaos.rs` — the chaos ledger: relays and consumers as real OS processes (the
//!   `chaos_relay` and `chaos_consumer` binaries, sharing [`chaos`]), SIGKILLed, stopped and
//!   restarted while a publisher commits and rolls back, then the same accounting.
#![deny(missing_docs)]

/// Runs `$body::<S, T>(arguments)` with `S` and `T` the [`Store`] and [`Transport`] of the
/// `database` and `broker` fields of `$pair`: the one place a run's choice becomes types.
macro_rules! with_pair {
    ($pair:expr, $body:ident ( $($argument:expr),* )) => {{
        use $crate::chaos::{Broker, Database};
        use $crate::{KafkaTransport, MySqlStore, PgStore, RabbitTransport, SqliteStore};
        match ($pair.database, $pair.broker) {
            (Database::Postgres, Broker::Rabbit) => $body::<PgStore, RabbitTransport>($($argument),*).await,
            (Database::Postgres, Broker::Kafka) => $body::<PgStore, KafkaTransport>($($argument),*).await,
            (Database::Mysql, Broker::Rabbit) => $body::<MySqlStore, RabbitTransport>($($argument),*).await,
            (Database::Mysql, Broker::Kafka) => $body::<MySqlStore, KafkaTransport>($($argument),*).await,
            (Database::Sqlite, Broker::Rabbit) => $body::<SqliteStore, RabbitTransport>($($argument),*).await,
            (Database::Sqlite, Broker::Kafka) => $body::<SqliteStore, KafkaTransport>($($argument),*).await,
        }
    }};
}
pub(crate) use with_pair;

pub mod blackhole;
pub mod chaos;
pub mod harness;
pub mod ledger;
pub mod servers;
pub mod store;
pub mod transport;

pub use ledger::{Ledger, StoredRows};
pub use store::{MySqlStore, Names, Order, PgStore, Placed, SqliteStore, Store};
pub use transport::{EventHandler, KafkaTransport, Listening, RabbitTransport, Transport};

/// A name no other run (in this or a concurrent test process) uses, made of `[a-z0-9_]` so that it
/// is valid as a table prefix, a topic, a group and a queue.
pub fn fresh_name(prefix: &str) -> String {
    format!("{prefix}_{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// The event type every scenario publishes.
pub const EVENT_TYPE: &str = "order-placed";

/// The consumer of the durable inbox restart test and its `stored_consumer` process.
pub const STORED_CONSUMER: &str = "stored-restart";

/// Copies of the first `count` committed events, as the relay sends them to `destination`, for a
/// scenario to re-publish straight to the broker (what a lost acknowledgement leads to); each
/// order's event type is `event_type(order)`.
pub fn copies_of<'a>(
    committed: impl IntoIterator<Item = (&'a uuid::Uuid, &'a Order)>,
    destination: &str,
    count: usize,
    event_type: impl Fn(&Order) -> &'static str,
) -> oncebox::Result<Vec<oncebox::OutboundMessage>> {
    committed
        .into_iter()
        .take(count)
        .map(|(id, order)| {
            Ok(oncebox::OutboundMessage {
                id: *id,
                event_type: event_type(order).to_owned(),
                topic: destination.to_owned(),
                key: id.to_string(),
                payload: serde_json::to_string(order)
                    .map_err(|error| plumbing("serializing a copy", error))?,
                payload_type: "Order".to_owned(),
                headers: oncebox::Headers::new(),
                created_at: chrono::Utc::now(),
            })
        })
        .collect()
}

/// Maps any displayable failure of test plumbing to an oncebox error.
pub fn plumbing(context: &str, error: impl std::fmt::Display) -> oncebox::Error {
    oncebox::Error::new(oncebox::ErrorKind::Other, format!("{context}: {error}"))
}
