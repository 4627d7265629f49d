//! Trace continuity through the outbox, on the real brokers: an event published inside a span is
//! relayed and consumed, and the OpenTelemetry SDK's in-memory exporter shows the consumer's
//! `oncebox.consume` span in the publisher's trace (its child) and the relay's `oncebox.send` span
//! linked to that trace. SQLite holds the outbox; Kafka and RabbitMQ carry the event.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use oncebox::{Consumed, Dialect, Oncebox};
use oncebox_integration_tests::{
    EVENT_TYPE, EventHandler, KafkaTransport, Names, Order, Placed, RabbitTransport, SqliteStore, Store,
    Transport,
};
use oncebox_testkit::eventually;
use oncebox_testkit::runner::{Failed, TestResult, fail};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

/// The process-wide subscriber: every span goes to one in-memory exporter, and each test picks
/// its own trace out of it.
fn exporter() -> &'static InMemorySpanExporter {
    static TELEMETRY: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    let (exporter, _) = TELEMETRY.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("oncebox-trace-test"));
        // Only this file's process: nothing else sets a global subscriber here.
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));
        (exporter, provider)
    });
    exporter
}

fn finished() -> Result<Vec<SpanData>, Failed> {
    exporter().get_finished_spans().map_err(fail)
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
}

/// Publishes one order inside a `checkout` span and follows its event to the consumer.
async fn continuity<T: Transport>() -> TestResult {
    let Some(transport) = T::from_env() else {
        if oncebox_testkit::runner::in_ci() {
            return Err(fail(format!("{} is not set, and CI=true requires the broker", T::VARIABLE)));
        }
        eprintln!("skipped: {} is not set", T::VARIABLE);
        return Ok(());
    };
    exporter();
    let names = Names::fresh(&format!("trace_{}", T::NAME));
    let store = SqliteStore::from_env(&names).ok_or_else(|| fail("SQLite needs no server"))?;
    transport.prepare(&names).await.map_err(fail)?;
    let outbox = Oncebox::builder(names.config("10s", &[]).map_err(fail)?)
        .dialect(store.open().await.map_err(fail)?)
        .sender_arc(transport.sender().map_err(fail)?)
        .start()
        .await
        .map_err(fail)?;
    store.create_business_tables(outbox.dialect(), &names).await.map_err(fail)?;
    let consumed = Arc::new(Mutex::new(Vec::new()));
    let handler: EventHandler = {
        let consumed = consumed.clone();
        Arc::new(move |id, _order| {
            if let Ok(mut consumed) = consumed.lock() {
                consumed.push(id);
            }
            Box::pin(async { Ok(Consumed::Applied(())) })
        })
    };
    let listening = transport.listen(&names, &[EVENT_TYPE], handler).await.map_err(fail)?;
    transport.await_listener(&names).await.map_err(fail)?;

    let result = follow(&outbox, &names, &consumed).await;
    let stopped = listening.stop().await.map_err(fail);
    let shut = outbox.shutdown(Duration::from_secs(10)).await.map_err(fail);
    transport.dispose(&names).await.map_err(fail)?;
    result.and(stopped).and(shut)
}

async fn follow(
    outbox: &Oncebox<<SqliteStore as Store>::Dialect>,
    names: &Names,
    consumed: &Mutex<Vec<Uuid>>,
) -> TestResult {
    let checkout = tracing::info_span!("checkout");
    let (trace_id, checkout_id): (TraceId, SpanId) = {
        let context = checkout.context();
        let span = context.span();
        (span.span_context().trace_id(), span.span_context().span_id())
    };
    let order = Order { order: 7, total_cents: 4_200 };
    let placed = SqliteStore::place(outbox.dialect(), outbox.publisher(), names, EVENT_TYPE, &[order], true)
        .instrument(checkout.clone())
        .await;
    drop(checkout);
    let id = match placed {
        Placed::Committed(ids) => ids.first().copied().ok_or_else(|| fail("no id for the order"))?,
        other => return Err(fail(format!("the order was not committed: {other:?}"))),
    };
    let row = outbox.dialect().outbox_dao().get(id).await.map_err(fail)?;
    assert!(
        row.as_ref().is_some_and(|event| event.headers.contains_key("traceparent")),
        "the publish wrote no traceparent: {row:?}"
    );

    let event_id = id.to_string();
    eventually("the consumer's span is exported", WAIT, || async {
        Ok(finished()?.iter().any(|span| {
            span.name == "oncebox.consume"
                && attribute(span, "event_id").as_deref() == Some(event_id.as_str())
        }))
    })
    .await?;
    let spans = finished()?;
    let consume = spans
        .iter()
        .find(|span| {
            span.name == "oncebox.consume" && attribute(span, "event_id").as_deref() == Some(&event_id)
        })
        .ok_or_else(|| fail("no consume span"))?;
    assert_eq!(consume.span_context.trace_id(), trace_id, "the consumer continues the publisher's trace");
    assert_eq!(consume.parent_span_id, checkout_id, "the consume span is a child of the publishing span");
    assert_eq!(attribute(consume, "outcome").as_deref(), Some("applied"));
    assert_eq!(attribute(consume, "consumer").as_deref(), Some(names.consumer.as_str()));
    assert!(consumed.lock().is_ok_and(|ids| ids.contains(&id)), "the handler never saw {id}");

    // The broker may hand the event to the consumer before the relay's send span closes.
    let linked = |span: &SpanData| {
        span.name == "oncebox.send" && span.links.iter().any(|link| link.span_context.trace_id() == trace_id)
    };
    eventually("the relay's send span is exported", WAIT, || async { Ok(finished()?.iter().any(linked)) })
        .await?;
    let spans = finished()?;
    let send = spans
        .iter()
        .filter(|span| span.name == "oncebox.send")
        .find(|span| span.links.iter().any(|link| link.span_context.trace_id() == trace_id))
        .ok_or_else(|| fail("no send span links to the publisher's trace"))?;
    assert_ne!(send.span_context.trace_id(), trace_id, "the relay's send has a trace of its own");
    assert_eq!(attribute(send, "event_type").as_deref(), Some(EVENT_TYPE));
    assert_eq!(attribute(send, "delivered").as_deref(), Some("1"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_carries_the_trace_from_publish_to_consume() -> TestResult {
    continuity::<KafkaTransport>().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_carries_the_trace_from_publish_to_consume() -> TestResult {
    continuity::<RabbitTransport>().await
}
