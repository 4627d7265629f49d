//! The spans oncebox emits, and W3C trace context carried from the publisher to the consumer.
//!
//! Every unit of work runs in a `tracing` span with a stable name, so one event can be followed
//! from the business transaction to the consumer's effect:
//!
//! | span | fields |
//! |---|---|
//! | [`POLL`] | `event_type`, `claimed` (rows claimed by the run, across its batches) |
//! | [`SEND`] | `event_type`, `messages`, `delivered`, `failed` |
//! | [`SETTLE`] | `event_type`, `delivered`, `retried`, `failed`, `refused` |
//! | [`JOB`] | `job`, `rows` |
//! | [`CONSUME`] | `event_id`, `event_type`, `consumer`, `outcome` (`applied`, `duplicate`, `failed`, `poison`) |
//!
//! With the `otel` feature, [`Publisher`](crate::Publisher) writes the current span's context
//! into each event's headers as `traceparent` (and `tracestate`), unless the caller set one; the
//! relay's [`SEND`] span links to the context of every event it carries; a listener's
//! [`CONSUME`] span continues the publisher's trace. This needs a `tracing-opentelemetry` layer
//! in the subscriber. Without the feature, headers a caller sets by hand still flow through
//! unchanged, and nothing here does any work.

use tracing::Span;

use crate::event::Headers;

/// A poller's run over one event type: claims, sends and settles until the batches run short.
pub const POLL: &str = "oncebox.poll";
/// The send of one batch to the broker.
pub const SEND: &str = "oncebox.send";
/// The settle of one batch in the database.
pub const SETTLE: &str = "oncebox.settle";
/// One run of a background job (stuck recovery, a clean-up, a DLQ transfer).
pub const JOB: &str = "oncebox.job";
/// One consumed message, around its handler.
pub const CONSUME: &str = "oncebox.consume";

/// The header that carries the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
/// The header that carries vendor trace state beside [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// Writes the current span's trace context into `headers`, unless they carry one already (a
/// caller's own `traceparent` wins). Does nothing without the `otel` feature or outside a trace.
pub fn capture_current(headers: &mut Headers) {
    #[cfg(feature = "otel")]
    otel::capture_current(headers);
    #[cfg(not(feature = "otel"))]
    let _ = headers;
}

/// Makes `span` a child of the trace context in `headers`. Call it before the span is entered.
pub fn continue_trace(span: &Span, headers: &Headers) {
    #[cfg(feature = "otel")]
    otel::continue_trace(span, headers);
    #[cfg(not(feature = "otel"))]
    let _ = (span, headers);
}

/// Links `span` to the trace context in `headers` (a batch's send to each event's publisher).
pub fn link_to(span: &Span, headers: &Headers) {
    #[cfg(feature = "otel")]
    otel::link_to(span, headers);
    #[cfg(not(feature = "otel"))]
    let _ = (span, headers);
}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::Context;
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TRACEPARENT;
    use crate::event::Headers;

    struct Writer<'a>(&'a mut Headers);

    impl Injector for Writer<'_> {
        fn set(&mut self, key: &str, value: String) {
            self.0.insert(key.to_owned(), value);
        }
    }

    struct Reader<'a>(&'a Headers);

    impl Extractor for Reader<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).map(String::as_str)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }

    fn extract(headers: &Headers) -> Option<Context> {
        if !headers.contains_key(TRACEPARENT) {
            return None;
        }
        let context = TraceContextPropagator::new().extract(&Reader(headers));
        context.span().span_context().is_valid().then_some(context)
    }

    pub(super) fn capture_current(headers: &mut Headers) {
        if headers.contains_key(TRACEPARENT) {
            return;
        }
        let context = Span::current().context();
        if context.span().span_context().is_valid() {
            TraceContextPropagator::new().inject_context(&context, &mut Writer(headers));
        }
    }

    pub(super) fn continue_trace(span: &Span, headers: &Headers) {
        if let Some(parent) = extract(headers) {
            // Fails only without an OpenTelemetry layer, where there is no trace to continue.
            let _ = span.set_parent(parent);
        }
    }

    pub(super) fn link_to(span: &Span, headers: &Headers) {
        if let Some(context) = extract(headers) {
            span.add_link(context.span().span_context().clone());
        }
    }
}
