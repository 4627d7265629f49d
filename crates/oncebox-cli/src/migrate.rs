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
    let mut events_created = false;
    for (part, existed) in parts.into_iter().zip(before) {
        let name = part.describe(&tables);
        if !database.has(part, &tables).await? {
            return Err(Failure::work(format!("{name} is still missing after the migration")));
        }
        let done = match (existed, part) {
            (true, _) => "already there",
            // A new table has every column: only an old one is upgraded.
            (false, Part::Recoveries) if events_created => continue,
            (false, Part::Recoveries) => "added",
            (false, part) => {
                events_created |= part == Part::Events;
                "created"
            }
        };
        println!("{name}: {done}");
    }
    Ok(())
}
