#![allow(unused_imports)]

use oncebox::Publisher;
use oncebox::sqlite::SqliteWriter;
use sqlx::{Sqlite, Transaction};

#[derive(serde::Serialize)]
struct Order {
    id: i64,
}

#[derive(Debug)]
struct AppError;

#[oncebox::publish("order-created")]
async fn place_order(
    outbox: &Publisher<SqliteWriter>,
    tx: &mut Transaction<'_, Sqlite>,
    id: i64,
) -> Result<Order, AppError> {
    Ok(Order { id })
}

fn main() {}
