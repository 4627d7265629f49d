#![allow(unused_imports)]

use oncebox::Publisher;
use oncebox::sqlite::SqliteWriter;
use sqlx::{Sqlite, Transaction};

#[derive(serde::Serialize)]
struct Order {
    id: i64,
}

#[oncebox::publish("order-created")]
async fn place_order(outbox: &Publisher<SqliteWriter>, tx: &mut Transaction<'_, Sqlite>, id: i64) -> Order {
    Order { id }
}

fn main() {}
