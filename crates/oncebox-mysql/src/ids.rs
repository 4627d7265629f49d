//! Binding id lists to `IN (…)` placeholders.

use sqlx::MySql;
use sqlx::mysql::MySqlArguments;
use sqlx::query::Query;
use uuid::Uuid;

use crate::statements::id_slots;

/// A statement over a list of ids.
pub(crate) type MySqlQuery<'q> = Query<'q, MySql, MySqlArguments>;

/// Binds `ids` to the `IN (…)` list of a statement made for [`id_slots`]`(ids.len())` slots,
/// repeating the last id in the spare ones.
pub(crate) fn bind_ids<'q>(mut query: MySqlQuery<'q>, ids: &[Uuid]) -> MySqlQuery<'q> {
    for id in ids {
        query = query.bind(*id);
    }
    if let Some(last) = ids.last() {
        for _ in ids.len()..id_slots(ids.len()) {
            query = query.bind(*last);
        }
    }
    query
}

/// The ids of `ids` without repeats, in first-seen order: a batch that names an id twice records it
/// once.
pub(crate) fn distinct(ids: &[Uuid]) -> Vec<Uuid> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter().copied().filter(|id| seen.insert(*id)).collect()
}
