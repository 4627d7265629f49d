#![allow(unused_imports)]

use oncebox::Publisher;
use oncebox::sqlite::SqliteWriter;
use sqlx::{Sqlite, Transaction};

#[derive(serde::Serialize)]
struct Order {
    id: i64,
}

#[oncebox::publish("order-created")]
async fn place_order(
    outbox: &Publisher<SqliteWriter>,
    tx: Transaction<'static, Sqlite>,
    id: i64,
) -> Result<Order, oncebox::Error> {
    tx.commit().await?;
    Ok(Order { id })
}

fn main() {}
