#![allow(unused_imports)]

use oncebox::Publisher;
use oncebox::sqlite::SqliteWriter;
use sqlx::{Sqlite, Transaction};

#[derive(serde::Serialize)]
struct Order {
    id: i64,
}

#[oncebox::publish("order-created", paylod = order)]
async fn record(
    outbox: &Publisher<SqliteWriter>,
    tx: &mut Transaction<'_, Sqlite>,
    order: &Order,
) -> Result<(), oncebox::Error> {
    Ok(())
}

fn main() {}
