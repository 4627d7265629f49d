//! The Grafana dashboard in `deploy/grafana/oncebox.json` only queries series oncebox records,
//! and covers what an on-call person looks at first.

use std::collections::BTreeSet;

use oncebox_metrics::names;
use serde_json::Value;

const DASHBOARD: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/grafana/oncebox.json"));

/// Every `expr` of every panel target.
fn expressions(dashboard: &Value) -> Vec<String> {
    let panels = dashboard["panels"].as_array().map(Vec::as_slice).unwrap_or_default();
    panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().map(Vec::as_slice).unwrap_or_default())
        .filter_map(|target| target["expr"].as_str().map(str::to_owned))
        .collect()
}

/// The metric names an expression uses: every `oncebox_…` word, without the histogram series
/// suffixes Prometheus adds.
fn metric_names(expression: &str) -> BTreeSet<String> {
    expression
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("oncebox_"))
        .map(|word| {
            ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix).filter(|base| base.ends_with("_seconds")))
                .unwrap_or(word)
                .to_owned()
        })
        .collect()
}

#[test]
fn every_query_of_the_dashboard_uses_a_name_oncebox_records() -> Result<(), serde_json::Error> {
    let dashboard: Value = serde_json::from_str(DASHBOARD)?;
    let panels = dashboard["panels"].as_array().map(Vec::len).unwrap_or_default();
    let expressions = expressions(&dashboard);
    assert!(panels >= 10 && expressions.len() >= panels, "{panels} panels, {} queries", expressions.len());
    let mut used = BTreeSet::new();
    for expression in &expressions {
        let found = metric_names(expression);
        assert!(!found.is_empty(), "a query without an oncebox series: {expression}");
        for name in &found {
            assert!(
                names::ALL.contains(&name.as_str()),
                "{name} is not recorded by oncebox (in {expression})"
            );
        }
        used.extend(found);
    }
    // What the panels must show: throughput, the stuck-delivery signal, latency, retries and
    // failures, the DLQ, refused settles, inbox outcomes and job runs.
    for needed in [
        names::EVENTS_SETTLED,
        names::OLDEST_PENDING_AGE,
        names::DELIVERY_DELAY,
        names::DLQ_ROWS,
        names::SETTLES_REFUSED,
        names::INBOX_EVENTS,
        names::TASK_RUNS,
        names::JOB_ROWS,
        names::STORED_MESSAGES,
        names::STORED_ROWS,
        names::STORED_LATENCY,
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }
    Ok(())
}

#[test]
fn a_misspelt_name_is_caught() {
    let found =
        metric_names("sum(rate(oncebox_event_settled_total[5m])) / oncebox_delivery_delay_seconds_bucket");
    assert!(found.contains("oncebox_delivery_delay_seconds"), "{found:?}");
    let unknown: Vec<&String> = found.iter().filter(|name| !names::ALL.contains(&name.as_str())).collect();
    assert_eq!(unknown, ["oncebox_event_settled_total"]);
}
