//! The DLQ API over a real (SQLite) DLQ: rows get there the engine's way (claimed, failed for
//! good, transferred), and going back to the outbox is checked by the outbox rows themselves.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use oncebox_core::event::{EventStatus, NewOutboxEvent, Settlement};
use oncebox_core::{Dialect, OutboxWriter, SchemaPlan};
use oncebox_sqlite::SqliteDialect;
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

struct Fixture {
    dialect: SqliteDialect,
    path: std::path::PathBuf,
    app: axum::Router,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.to_string_lossy()));
        }
    }
}

fn new_event(event_type: &str) -> NewOutboxEvent {
    NewOutboxEvent {
        id: Uuid::now_v7(),
        event_type: event_type.to_owned(),
        payload: r#"{"order":1}"#.to_owned(),
        payload_type: "OrderCreated".to_owned(),
        headers: Default::default(),
        partition_key: None,
    }
}

/// `counts` events of each type, failed for good and moved to the DLQ.
async fn fixture(
    counts: &[(&str, usize)],
) -> Result<(Fixture, Vec<Uuid>), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::temp_dir().join(format!("oncebox-dlq-api-{}.db", Uuid::new_v4().simple()));
    let dialect = SqliteDialect::connect(&path.to_string_lossy()).await?;
    dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: false, jobs: false }).await?;
    let mut ids = Vec::new();
    for (event_type, count) in counts {
        let events: Vec<NewOutboxEvent> = (0..*count).map(|_| new_event(event_type)).collect();
        ids.extend(events.iter().map(|e| e.id));
        let mut tx = dialect.pool().begin().await?;
        dialect.writer().write(&mut tx, &events).await?;
        tx.commit().await?;
        let batch = dialect.outbox_dao().claim(event_type, 100).await?;
        let failed: Vec<Settlement> = batch
            .events
            .iter()
            .map(|e| Settlement::Failed { id: e.id, error: "broker said no".into() })
            .collect();
        dialect.outbox_dao().settle(&batch, &failed).await?;
    }
    let moved = dialect.dlq_dao().transfer_to_dlq(1000).await?;
    assert_eq!(moved.len(), ids.len());
    let app = oncebox_dlq_api::router(dialect.dlq_dao());
    Ok((Fixture { dialect, path, app }, ids))
}

async fn call(
    app: &axum::Router,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), Box<dyn std::error::Error + Send + Sync>> {
    let request = Request::builder().method(method).uri(uri).header("content-type", "application/json");
    let request = request.body(body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty))?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    let value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes)? };
    Ok((status, value))
}

#[tokio::test]
async fn listing_filters_and_pages() -> TestResult {
    let (fx, _) = fixture(&[("order-created", 3), ("order-cancelled", 2)]).await?;
    let (status, page) = call(&fx.app, Method::GET, "/events?event_type=order-created&limit=2", None).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["total"], 3);
    assert_eq!(page["events"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["events"][0]["event"]["event_type"], "order-created");
    assert_eq!(page["events"][0]["dlq_status"], "MOVED");
    let (_, rest) =
        call(&fx.app, Method::GET, "/events?event_type=order-created&limit=2&offset=2", None).await?;
    assert_eq!(rest["events"].as_array().map(Vec::len), Some(1));
    let (_, moved) = call(&fx.app, Method::GET, "/events?status=moved", None).await?;
    assert_eq!(moved["total"], 5);
    let (_, counts) = call(&fx.app, Method::GET, "/counts", None).await?;
    let mut pairs: Vec<(String, u64)> = counts
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["event_type"].as_str().unwrap_or("").to_owned(), c["count"].as_u64().unwrap_or(0)))
        .collect();
    pairs.sort();
    assert_eq!(pairs, [("order-cancelled".to_owned(), 2), ("order-created".to_owned(), 3)]);
    Ok(())
}

#[tokio::test]
async fn one_event_is_read_and_a_missing_or_malformed_id_is_named() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 1)]).await?;
    let (status, event) = call(&fx.app, Method::GET, &format!("/events/{}", ids[0]), None).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(event["event"]["id"], ids[0].to_string());
    assert_eq!(event["event"]["last_error"], "broker said no");
    let missing = Uuid::now_v7();
    let (status, error) = call(&fx.app, Method::GET, &format!("/events/{missing}"), None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error["error"].as_str().is_some_and(|e| e.contains(&missing.to_string())), "{error}");
    let (status, error) = call(&fx.app, Method::GET, "/events/not-an-id", None).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error["error"].as_str().is_some_and(|e| e.contains("not-an-id")), "{error}");
    Ok(())
}

#[tokio::test]
async fn a_retried_event_goes_back_to_the_outbox_as_pending() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 3)]).await?;
    let body = json!({ "ids": [ids[0], ids[1]], "status": "TO_RETRY" });
    let (status, answer) = call(&fx.app, Method::POST, "/events/status", Some(body)).await?;
    assert_eq!((status, answer["updated"].clone()), (StatusCode::OK, json!(2)));
    let moved_back = fx.dialect.dlq_dao().transfer_from_dlq(100).await?;
    assert_eq!(moved_back, 2);
    for id in &ids[..2] {
        let row = fx.dialect.outbox_dao().get(*id).await?.ok_or("the retried event is not in the outbox")?;
        assert_eq!(row.status, EventStatus::Pending);
    }
    assert!(fx.dialect.outbox_dao().get(ids[2]).await?.is_none(), "an event not retried left the DLQ");
    let (_, rest) = call(&fx.app, Method::GET, "/events", None).await?;
    assert_eq!(rest["total"], 1);
    Ok(())
}

#[tokio::test]
async fn bad_changes_are_refused_with_the_reason_and_change_nothing() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 2)]).await?;
    let cases = [
        (json!({ "ids": [ids[0]], "status": "IN_PROCESS" }), "IN_PROCESS"),
        (json!({ "ids": [ids[0]], "status": "DONE" }), "'DONE'"),
        (json!({ "ids": [ids[0]], "event_type": "order-created", "status": "RESOLVED" }), "not both"),
        (json!({ "status": "RESOLVED" }), "ids or event_type"),
        (json!({ "ids": ["nope"], "status": "RESOLVED" }), "ids"),
        (json!({ "ids": [ids[0]], "status": "RESOLVED", "extra": 1 }), "extra"),
    ];
    for (body, reason) in cases {
        let (status, error) = call(&fx.app, Method::POST, "/events/status", Some(body.clone())).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(error["error"].as_str().is_some_and(|e| e.contains(reason)), "{body}: {error}");
    }
    let (_, moved) = call(&fx.app, Method::GET, "/events?status=MOVED", None).await?;
    assert_eq!(moved["total"], 2, "a refused request changed rows");
    let (status, _) = call(&fx.app, Method::GET, "/events?limit=0", None).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn resolving_and_deleting_by_id_and_by_type() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 2), ("order-cancelled", 2)]).await?;
    let body = json!({ "event_type": "order-cancelled", "status": "resolved" });
    let (_, answer) = call(&fx.app, Method::POST, "/events/status", Some(body)).await?;
    assert_eq!(answer["updated"], 2);
    let (_, resolved) = call(&fx.app, Method::GET, "/events?status=RESOLVED", None).await?;
    assert_eq!(resolved["total"], 2);

    let (status, answer) = call(&fx.app, Method::DELETE, &format!("/events/{}", ids[0]), None).await?;
    assert_eq!((status, answer["deleted"].clone()), (StatusCode::OK, json!(1)));
    assert!(fx.dialect.dlq_dao().get(ids[0]).await?.is_none());
    let (_, answer) =
        call(&fx.app, Method::POST, "/events/delete", Some(json!({ "event_type": "order-cancelled" })))
            .await?;
    assert_eq!(answer["deleted"], 2);
    let (_, rest) = call(&fx.app, Method::GET, "/events", None).await?;
    assert_eq!(rest["total"], 1);
    assert_eq!(rest["events"][0]["event"]["id"], ids[1].to_string());
    Ok(())
}

/// Counts manual DLQ changes by action.
#[derive(Default)]
struct ManualChanges(std::sync::Mutex<Vec<(oncebox_core::hooks::DlqManualAction, u64)>>);

impl oncebox_core::OutboxMetrics for ManualChanges {
    fn dlq_manual(&self, action: oncebox_core::hooks::DlqManualAction, count: u64) {
        if let Ok(mut changes) = self.0.lock() {
            changes.push((action, count));
        }
    }
}

#[tokio::test]
async fn every_manual_change_is_counted_by_action() -> TestResult {
    use oncebox_core::hooks::DlqManualAction;
    let (fixture, ids) = fixture(&[("order-created", 4), ("payment-failed", 2)]).await?;
    let changes = std::sync::Arc::new(ManualChanges::default());
    let app = oncebox_dlq_api::router_with_metrics(fixture.dialect.dlq_dao(), changes.clone());
    let retry = json!({ "ids": [ids[0], ids[1]], "status": "TO_RETRY" });
    assert_eq!(call(&app, Method::POST, "/events/status", Some(retry)).await?.0, StatusCode::OK);
    let resolve = json!({ "event_type": "payment-failed", "status": "resolved" });
    assert_eq!(call(&app, Method::POST, "/events/status", Some(resolve)).await?.0, StatusCode::OK);
    assert_eq!(call(&app, Method::DELETE, &format!("/events/{}", ids[2]), None).await?.0, StatusCode::OK);
    let delete = json!({ "ids": [ids[3]] });
    assert_eq!(call(&app, Method::POST, "/events/delete", Some(delete)).await?.0, StatusCode::OK);
    // A refused change counts nothing.
    let refused = json!({ "ids": [ids[3]], "status": "IN_PROCESS" });
    assert_eq!(call(&app, Method::POST, "/events/status", Some(refused)).await?.0, StatusCode::BAD_REQUEST);
    let recorded = changes.0.lock().map(|changes| changes.clone()).unwrap_or_default();
    assert_eq!(
        recorded,
        [
            (DlqManualAction::ToRetry, 2),
            (DlqManualAction::Resolved, 2),
            (DlqManualAction::Deleted, 1),
            (DlqManualAction::Deleted, 1),
        ]
    );
    Ok(())
}
