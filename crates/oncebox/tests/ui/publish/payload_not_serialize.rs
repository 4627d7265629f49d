#![allow(unused_imports)]

use oncebox::Publisher;
use oncebox::sqlite::SqliteWriter;
use sqlx::{Sqlite, Transaction};

struct Order {
    id: i64,
}

#[oncebox::publish("order-created")]
async fn place_order(
    outbox: &Publisher<SqliteWriter>,
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
) -> Result<Order, oncebox::Error> {
    Ok(Order { id })
}

fn main() {}
