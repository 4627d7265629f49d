//! `oncebox migrate`: the tables a service would create at start, made ahead of it.

use oncebox_core::SchemaPlan;
use oncebox_core::redact::redact_url;

use crate::database::Part;
use crate::{Failure, Target};

pub(crate) async fn run(target: &Target) -> Result<(), Failure> {
    let (config, tables) = target.resolve()?;
    let plan = config.as_ref().map_or(SchemaPlan::ALL, SchemaPlan::for_config);
    let parts = Part::planned(plan);
    if parts.is_empty() {
        return Err(Failure::usage(
            "the config file uses no table (no oncebox.outbox and no oncebox.inbox section): nothing to create",
        ));
    }
    let database = target.connect(&tables).await?;
    println!("database {}", redact_url(&target.database_url));
    let mut before = Vec::with_capacity(parts.len());
    for part in &parts {
        before.push(database.has(*part, &tables).await?);
    }
    database.create_schema(plan).await?;
    // A new table has every column: only an old one is upgraded.
    let (mut events_created, mut consumed_created) = (false, false);
    for (part, existed) in parts.into_iter().zip(before) {
        let name = part.describe(&tables);
        if !database.has(part, &tables).await? {
            return Err(Failure::work(format!("{name} is still missing after the migration")));
        }
        let done = match (existed, part) {
            (true, _) => "already there",
            (false, Part::Recoveries) if events_created => continue,
            (false, Part::Claims) if consumed_created => continue,
            (false, Part::Recoveries | Part::Claims) => "added",
            (false, part) => {
                events_created |= part == Part::Events;
                consumed_created |= part == Part::Consumed;
                "created"
            }
        };
        println!("{name}: {done}");
    }
    Ok(())
}
