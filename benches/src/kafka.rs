//! Kafka set-up the benchmarks share.

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use crate::{BenchResult, fresh_name};

/// Creates a fresh single-partition topic named `<stem><8 hex digits>` and returns its name.
pub async fn create_topic(bootstrap: &str, stem: &str) -> BenchResult<String> {
    let topic = fresh_name(stem);
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    for result in admin
        .create_topics(&[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await?
    {
        result.map_err(|(name, code)| format!("creating topic {name}: {code}"))?;
    }
    Ok(topic)
}
