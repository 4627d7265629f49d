//! The Prometheus recorder.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use oncebox_core::{Error, ErrorKind, Result};

/// Bucket bounds (seconds) of every `_seconds` histogram: a poll of an idle type takes about a
/// millisecond, a batch sent to a slow broker can take up to the emergency timeout.
pub const DURATION_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// Bucket bounds (seconds) of the commit-to-acknowledgement histogram: from a wake-up delivered
/// in a millisecond to an event stuck for ten minutes.
pub const DELIVERY_DELAY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];

/// A Prometheus builder with [`DURATION_BUCKETS`] for oncebox's histograms ([`DELIVERY_DELAY_BUCKETS`]
/// for the commit-to-acknowledgement delay). Finish it the
/// exporter's way: `build_recorder()` plus [`metrics::set_global_recorder`] and your own scrape
/// route, or (feature `prometheus-http`) `with_http_listener(addr).install()`.
pub fn prometheus_builder() -> Result<PrometheusBuilder> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), DURATION_BUCKETS)
        .and_then(|builder| {
            builder.set_buckets_for_metric(
                Matcher::Full(crate::names::DELIVERY_DELAY.to_owned()),
                DELIVERY_DELAY_BUCKETS,
            )
        })
        .and_then(|builder| {
            builder.set_buckets_for_metric(
                Matcher::Full(crate::names::STORED_LATENCY.to_owned()),
                DELIVERY_DELAY_BUCKETS,
            )
        })
        .map_err(|error| Error::new(ErrorKind::Other, format!("configuring Prometheus buckets: {error}")))
}
