//! The DLQ API over a real (SQLite) DLQ: rows get there the engine's way (claimed, failed for
//! good, transferred), and going back to the outbox is checked by the outbox rows themselves.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use oncebox_core::event::{EventStatus, NewOutboxEvent};
use oncebox_core::{Dialect, OutboxWriter, SchemaPlan};
use oncebox_dlq_api::{ApiToken, BearerTokens, DlqApi, Role};
use oncebox_sqlite::SqliteDialect;
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The operator's token in these tests.
const OPERATOR: &str = "operator-secret-0001";
/// The read-only token in these tests.
const READER: &str = "reader-secret-000001";

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

fn tokens() -> oncebox_core::Result<BearerTokens> {
    BearerTokens::new([
        ApiToken::new("on-call", OPERATOR, Role::Operator)?,
        ApiToken::new("dashboard", READER, Role::ReadOnly)?,
    ])
}

/// `counts` events of each type, failed for good and moved to the DLQ, and the API over them
/// with an operator and a read-only token.
async fn fixture(
    counts: &[(&str, usize)],
) -> Result<(Fixture, Vec<Uuid>), Box<dyn std::error::Error + Send + Sync>> {
    fixture_with(counts, |_| {}).await
}

async fn fixture_with(
    counts: &[(&str, usize)],
    change: impl Fn(&mut NewOutboxEvent),
) -> Result<(Fixture, Vec<Uuid>), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::temp_dir().join(format!("oncebox-dlq-api-{}.db", Uuid::new_v4().simple()));
    let dialect = SqliteDialect::connect(&path.to_string_lossy()).await?;
    dialect.create_schema(SchemaPlan { outbox: true, dlq: true, inbox: false, jobs: false }).await?;
    let mut ids = Vec::new();
    for (event_type, count) in counts {
        let mut events: Vec<NewOutboxEvent> = (0..*count).map(|_| new_event(event_type)).collect();
        events.iter_mut().for_each(&change);
        ids.extend(events.iter().map(|e| e.id));
        let mut tx = dialect.pool().begin().await?;
        dialect.writer().write(&mut tx, &events).await?;
        tx.commit().await?;
    }
    let moved = oncebox_testkit::fail_into_dlq(&dialect, counts.iter().map(|(t, _)| *t)).await?;
    assert_eq!(moved.len(), ids.len());
    let app = DlqApi::with_tokens(dialect.dlq_dao(), tokens()?).router();
    Ok((Fixture { dialect, path, app }, ids))
}

/// Calls `app` with `token` (none when empty); the status, the body as JSON and the headers.
async fn send(
    app: &axum::Router,
    token: &str,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value, axum::http::HeaderMap), Box<dyn std::error::Error + Send + Sync>> {
    let mut request = Request::builder().method(method).uri(uri).header("content-type", "application/json");
    if !token.is_empty() {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request.body(body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty))?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await?.to_bytes();
    let value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes)? };
    Ok((status, value, headers))
}

/// Calls `app` as the operator.
async fn call(
    app: &axum::Router,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), Box<dyn std::error::Error + Send + Sync>> {
    let (status, value, _) = send(app, OPERATOR, method, uri, body).await?;
    Ok((status, value))
}

#[tokio::test]
async fn listing_filters_and_pages() -> TestResult {
    let (fx, _) = fixture(&[("order-created", 3), ("order-cancelled", 2)]).await?;
    let (status, page) = call(&fx.app, Method::GET, "/events?event_type=order-created&limit=2", None).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["total"], 3);
    assert_eq!(page["events"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["events"][0]["event_type"], "order-created");
    assert_eq!(page["events"][0]["dlq_status"], "MOVED");
    let (_, rest) =
        call(&fx.app, Method::GET, "/events?event_type=order-created&limit=2&offset=2", None).await?;
    assert_eq!(rest["events"].as_array().map(Vec::len), Some(1));
    let (_, moved) = call(&fx.app, Method::GET, "/events?status=MOVED", None).await?;
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
    assert_eq!(event["id"], ids[0].to_string());
    assert_eq!(event["last_error"], "broker said no");
    let missing = Uuid::now_v7();
    let (status, error) = call(&fx.app, Method::GET, &format!("/events/{missing}"), None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error["detail"].as_str().is_some_and(|e| e.contains(&missing.to_string())), "{error}");
    let (status, error) = call(&fx.app, Method::GET, "/events/not-an-id", None).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error["detail"].as_str().is_some_and(|e| e.contains("not-an-id")), "{error}");
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
        (json!({ "ids": [ids[0]], "status": "DONE" }), "unknown variant `DONE`"),
        (json!({ "ids": [ids[0]], "event_type": "order-created", "status": "RESOLVED" }), "not both"),
        (json!({ "status": "RESOLVED" }), "ids or event_type"),
        (json!({ "ids": ["nope"], "status": "RESOLVED" }), "ids"),
        (json!({ "ids": [ids[0]], "status": "RESOLVED", "extra": 1 }), "extra"),
    ];
    for (body, reason) in cases {
        let (status, error) = call(&fx.app, Method::POST, "/events/status", Some(body.clone())).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(error["detail"].as_str().is_some_and(|e| e.contains(reason)), "{body}: {error}");
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
    let body = json!({ "event_type": "order-cancelled", "status": "RESOLVED" });
    let (_, answer) = call(&fx.app, Method::POST, "/events/status", Some(body)).await?;
    assert_eq!(answer["updated"], 2);
    let (_, resolved) = call(&fx.app, Method::GET, "/events?status=RESOLVED", None).await?;
    assert_eq!(resolved["total"], 2);

    let (status, _) = call(&fx.app, Method::DELETE, &format!("/events/{}", ids[0]), None).await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&fx.app, Method::DELETE, &format!("/events/{}", ids[0]), None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "a second delete of the same event");
    assert!(fx.dialect.dlq_dao().get(ids[0]).await?.is_none());
    let (_, answer) =
        call(&fx.app, Method::POST, "/events/delete", Some(json!({ "event_type": "order-cancelled" })))
            .await?;
    assert_eq!(answer["deleted"], 2);
    let (_, rest) = call(&fx.app, Method::GET, "/events", None).await?;
    assert_eq!(rest["total"], 1);
    assert_eq!(rest["events"][0]["id"], ids[1].to_string());
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
    let app = DlqApi::with_tokens(fixture.dialect.dlq_dao(), tokens()?).metrics(changes.clone()).router();
    let retry = json!({ "ids": [ids[0], ids[1]], "status": "TO_RETRY" });
    assert_eq!(call(&app, Method::POST, "/events/status", Some(retry)).await?.0, StatusCode::OK);
    let resolve = json!({ "event_type": "payment-failed", "status": "RESOLVED" });
    assert_eq!(call(&app, Method::POST, "/events/status", Some(resolve)).await?.0, StatusCode::OK);
    let delete_one = call(&app, Method::DELETE, &format!("/events/{}", ids[2]), None).await?;
    assert_eq!(delete_one.0, StatusCode::NO_CONTENT);
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

#[tokio::test]
async fn without_a_known_token_nothing_is_read_or_changed() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 2)]).await?;
    let retry = json!({ "ids": [ids[0]], "status": "TO_RETRY" });
    for token in ["", "operator-secret-0002", "x"] {
        for (method, uri, body) in [
            (Method::GET, "/events".to_owned(), None),
            (Method::GET, format!("/events/{}", ids[0]), None),
            (Method::GET, "/events/count".to_owned(), None),
            (Method::GET, "/counts".to_owned(), None),
            (Method::POST, "/events/status".to_owned(), Some(retry.clone())),
            (Method::DELETE, format!("/events/{}", ids[0]), None),
        ] {
            let (status, problem, headers) = send(&fx.app, token, method.clone(), &uri, body).await?;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} with {token:?}");
            assert_eq!(
                headers.get("www-authenticate").and_then(|v| v.to_str().ok()),
                Some("Bearer realm=\"oncebox-dlq\"")
            );
            assert_eq!(problem["status"], 401);
        }
    }
    // A read-only token reads, and is refused every change with 403.
    let (status, page, _) = send(&fx.app, READER, Method::GET, "/events", None).await?;
    assert_eq!((status, page["total"].clone()), (StatusCode::OK, json!(2)));
    for (method, uri, body) in [
        (Method::POST, "/events/status".to_owned(), Some(retry.clone())),
        (Method::POST, "/events/delete".to_owned(), Some(json!({ "ids": [ids[0]] }))),
        (Method::PATCH, format!("/events/{}", ids[0]), Some(json!({ "status": "RESOLVED" }))),
        (Method::DELETE, format!("/events/{}", ids[0]), None),
    ] {
        let (status, problem, _) = send(&fx.app, READER, method.clone(), &uri, body).await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri}");
        assert!(
            problem["detail"].as_str().is_some_and(|d| d.contains("'dashboard' is read-only")),
            "{problem}"
        );
    }
    let (_, moved) = call(&fx.app, Method::GET, "/events/count?status=MOVED", None).await?;
    assert_eq!(moved["count"], 2, "a refused caller changed rows");
    Ok(())
}

#[tokio::test]
async fn errors_are_problem_documents_carrying_the_request_id() -> TestResult {
    let (fx, _) = fixture(&[("order-created", 1)]).await?;
    let (status, problem, headers) = send(&fx.app, OPERATOR, Method::GET, "/events?limit=9999", None).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(headers.get("content-type").and_then(|v| v.to_str().ok()), Some("application/problem+json"));
    let request_id = headers.get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(Uuid::parse_str(request_id).is_ok(), "{headers:?}");
    assert_eq!(problem["request_id"], request_id);
    assert_eq!(problem["type"], "urn:oncebox:dlq:bad-request");
    assert_eq!(problem["title"], "Bad Request");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("limit must be between 1 and 500")));
    let (status, problem, _) = send(&fx.app, OPERATOR, Method::GET, "/no-such-route", None).await?;
    assert_eq!((status, problem["status"].clone()), (StatusCode::NOT_FOUND, json!(404)));
    let (status, _, headers) = send(&fx.app, OPERATOR, Method::GET, "/events", None).await?;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.contains_key("x-request-id"), "a success carries the request id too");
    Ok(())
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_before_it_is_read() -> TestResult {
    let (fx, _) = fixture(&[("order-created", 1)]).await?;
    let huge = format!(r#"{{"event_type": "{}", "status": "RESOLVED"}}"#, "x".repeat(10 * 1024 * 1024));
    let request = Request::builder()
        .method(Method::POST)
        .uri("/events/status")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {OPERATOR}"))
        .body(Body::from(huge))?;
    let response = fx.app.clone().oneshot(request).await?;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let request = Request::builder()
        .method(Method::POST)
        .uri("/events/status")
        .header("content-type", "text/plain")
        .header("authorization", format!("Bearer {OPERATOR}"))
        .body(Body::from(r#"{"event_type": "order-created", "status": "RESOLVED"}"#))?;
    assert_eq!(fx.app.clone().oneshot(request).await?.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (_, moved) = call(&fx.app, Method::GET, "/events/count?status=MOVED", None).await?;
    assert_eq!(moved["count"], 1);
    Ok(())
}

#[tokio::test]
async fn one_event_changes_status_and_an_absent_or_busy_one_is_named() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 3)]).await?;
    let uri = format!("/events/{}", ids[0]);
    let (status, _) = call(&fx.app, Method::PATCH, &uri, Some(json!({ "status": "RESOLVED" }))).await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, event) = call(&fx.app, Method::GET, &uri, None).await?;
    assert_eq!(event["dlq_status"], "RESOLVED");

    let missing = format!("/events/{}", Uuid::now_v7());
    let (status, _) = call(&fx.app, Method::PATCH, &missing, Some(json!({ "status": "RESOLVED" }))).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, error) = call(&fx.app, Method::PATCH, &uri, Some(json!({ "status": "IN_PROCESS" }))).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");

    // A row the transfer job holds is neither changed nor deleted.
    sqlx::query("UPDATE outbox_dlq_events SET dlq_status = 'IN_PROCESS' WHERE id = ?")
        .bind(ids[1].to_string())
        .execute(fx.dialect.pool())
        .await?;
    let busy = format!("/events/{}", ids[1]);
    let (status, error) = call(&fx.app, Method::PATCH, &busy, Some(json!({ "status": "TO_RETRY" }))).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert!(error["detail"].as_str().is_some_and(|d| d.contains("IN_PROCESS")), "{error}");
    assert_eq!(call(&fx.app, Method::DELETE, &busy, None).await?.0, StatusCode::CONFLICT);
    let (_, counts) =
        call(&fx.app, Method::GET, "/events/count?status=IN_PROCESS&event_type=order-created", None).await?;
    assert_eq!(counts["count"], 1);
    Ok(())
}

#[tokio::test]
async fn a_re_drive_of_events_older_than_the_max_age_needs_allow_older() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 3)]).await?;
    // Events 0 and 2 were written two days ago: past the default re-drive max age of 24 h.
    for old in [ids[0], ids[2]] {
        sqlx::query(
            "UPDATE outbox_dlq_events SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days') WHERE id = ?",
        )
        .bind(old.to_string())
        .execute(fx.dialect.pool())
        .await?;
    }
    let to_retry = || async {
        let (_, count) = call(&fx.app, Method::GET, "/events/count?status=TO_RETRY", None).await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(count["count"].clone())
    };

    let refused = [
        (
            Method::POST,
            "/events/status".to_owned(),
            json!({ "ids": [ids[0], ids[1]], "status": "TO_RETRY" }),
            1,
        ),
        (
            Method::POST,
            "/events/status".to_owned(),
            json!({ "event_type": "order-created", "status": "TO_RETRY" }),
            2,
        ),
        (
            Method::PATCH,
            format!("/events/{}", ids[0]),
            json!({ "status": "TO_RETRY", "allow_older": false }),
            1,
        ),
    ];
    for (method, uri, body, older) in refused {
        let (status, problem) = call(&fx.app, method.clone(), &uri, Some(body.clone())).await?;
        assert_eq!(status, StatusCode::CONFLICT, "{method} {uri} {body}: {problem}");
        assert_eq!(problem["type"], "urn:oncebox:dlq:too-old");
        let detail = problem["detail"].as_str().unwrap_or_default();
        let were = if older == 1 { "was" } else { "were" };
        for says in [
            format!("{older} of the selected events {were} written more than 1day ago"),
            "oncebox.outbox.dlq.re-drive-max-age".to_owned(),
            "the oldest 2days".to_owned(),
            "\"allow_older\": true".to_owned(),
        ] {
            assert!(detail.contains(&says), "'{says}' missing from: {detail}");
        }
        assert_eq!(to_retry().await?, 0, "a refused re-drive changed rows");
    }

    // A young event is re-driven; other changes of old ones are not asked about.
    let young = format!("/events/{}", ids[1]);
    assert_eq!(
        call(&fx.app, Method::PATCH, &young, Some(json!({ "status": "TO_RETRY" }))).await?.0,
        StatusCode::NO_CONTENT
    );
    let resolve = json!({ "ids": [ids[0]], "status": "RESOLVED" });
    assert_eq!(call(&fx.app, Method::POST, "/events/status", Some(resolve)).await?.1["updated"], 1);
    let (status, error) =
        call(&fx.app, Method::PATCH, &young, Some(json!({ "status": "TO_RETRY", "allow_older": "yes" })))
            .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");

    // Allowed explicitly, old events are re-driven, one by one or in a batch.
    let allowed = json!({ "status": "TO_RETRY", "allow_older": true });
    let one = call(&fx.app, Method::PATCH, &format!("/events/{}", ids[2]), Some(allowed)).await?;
    assert_eq!(one.0, StatusCode::NO_CONTENT, "{}", one.1);
    let batch = json!({ "ids": [ids[0]], "status": "TO_RETRY", "allow_older": true });
    assert_eq!(call(&fx.app, Method::POST, "/events/status", Some(batch)).await?.1["updated"], 1);
    assert_eq!(to_retry().await?, 3);
    assert_eq!(fx.dialect.dlq_dao().transfer_from_dlq(100).await?, 3);
    for id in &ids {
        let row = fx.dialect.outbox_dao().get(*id).await?.ok_or("a re-driven event is not in the outbox")?;
        assert_eq!(row.status, EventStatus::Pending);
    }
    Ok(())
}

#[tokio::test]
async fn the_re_drive_max_age_comes_from_the_services_config() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 2)]).await?;
    sqlx::query("UPDATE outbox_dlq_events SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-2 days')")
        .execute(fx.dialect.pool())
        .await?;
    let config = oncebox_core::Config::from_yaml_str(
        "oncebox:\n  outbox:\n    events:\n      order-created:\n        topic: orders\n    dlq:\n      enabled: true\n      re-drive-max-age: 3d\n",
    )?;
    let app = DlqApi::with_tokens(fx.dialect.dlq_dao(), tokens()?)
        .re_drive_max_age(config.dlq_re_drive_max_age())
        .router();
    let by_type = json!({ "event_type": "order-created", "status": "TO_RETRY" });
    let (status, answer) = call(&app, Method::POST, "/events/status", Some(by_type)).await?;
    assert_eq!((status, answer["updated"].clone()), (StatusCode::OK, json!(2)), "{answer}");
    let strict = DlqApi::with_tokens(fx.dialect.dlq_dao(), tokens()?)
        .re_drive_max_age(std::time::Duration::from_secs(60))
        .router();
    let again = json!({ "ids": [ids[0]], "status": "TO_RETRY" });
    let (status, problem) = call(&strict, Method::POST, "/events/status", Some(again)).await?;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("more than 1m ago")), "{problem}");
    Ok(())
}

#[tokio::test]
async fn a_listing_cuts_long_payloads_and_one_event_shows_it_whole() -> TestResult {
    let long = format!(r#"{{"lines":"{}"}}"#, "é".repeat(3000));
    let (fx, ids) = fixture_with(&[("order-created", 1)], |event| event.payload = long.clone()).await?;
    let (_, page) = call(&fx.app, Method::GET, "/events", None).await?;
    let listed = &page["events"][0];
    assert_eq!(listed["payload_truncated"], true);
    let shown = listed["payload"].as_str().unwrap_or_default();
    assert!(shown.len() <= oncebox_dlq_api::MAX_LISTED_PAYLOAD && long.starts_with(shown), "{}", shown.len());
    let (_, event) = call(&fx.app, Method::GET, &format!("/events/{}", ids[0]), None).await?;
    assert_eq!(
        (event["payload"].as_str(), event["payload_truncated"].clone()),
        (Some(long.as_str()), json!(false))
    );
    let (status, error) = call(&fx.app, Method::GET, "/events?event_type=a%00b", None).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    Ok(())
}

#[tokio::test]
async fn the_openapi_document_describes_exactly_the_served_routes() -> TestResult {
    let (fx, ids) = fixture(&[("order-created", 1)]).await?;
    let (status, document, _) = send(&fx.app, "", Method::GET, "/openapi.json", None).await?;
    assert_eq!(status, StatusCode::OK, "the document is public");
    assert!(document["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", document["openapi"]);
    assert!(document["components"]["securitySchemes"]["bearer"].is_object());
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        for method in item.as_object().into_iter().flatten().map(|(method, _)| method.clone()) {
            operations.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    operations.sort();
    // Every operation documents the refusals every route can give, and each change the 403 of a
    // read-only token, as problem documents.
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        for (method, operation) in item.as_object().into_iter().flatten() {
            let mut expected = vec!["401", "500", "503"];
            if method != "get" {
                expected.push("403");
            }
            for status in expected {
                let content = &operation["responses"][status]["content"]["application/problem+json"];
                assert!(content["schema"].is_object(), "{method} {path}: no {status} problem: {operation}");
            }
        }
    }
    let served = [
        "DELETE /events/{id}",
        "GET /counts",
        "GET /events",
        "GET /events/count",
        "GET /events/{id}",
        "PATCH /events/{id}",
        "POST /events/delete",
        "POST /events/status",
    ];
    assert_eq!(operations, served);
    // A re-drive's `allow_older` is an optional flag of every body that can set TO_RETRY.
    for schema in ["StatusChange", "IdsToStatus", "TypeToStatus"] {
        let schema = &document["components"]["schemas"][schema];
        assert_eq!(schema["properties"]["allow_older"]["type"], "boolean", "{schema}");
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        assert!(!required.contains(&json!("allow_older")), "{schema}");
    }
    for (path, method) in [("/events/status", "post"), ("/events/{id}", "patch")] {
        let conflict = &document["paths"][path][method]["responses"]["409"];
        assert!(
            conflict["description"].as_str().is_some_and(|d| d.contains("re-drive max age")),
            "{conflict}"
        );
    }
    // Each documented operation is answered by a handler: not the fallback's 404, not a 405.
    for operation in served {
        let (method, path) = operation.split_once(' ').unwrap_or_default();
        let uri = path.replace("{id}", &Uuid::now_v7().to_string());
        let method = Method::from_bytes(method.as_bytes())?;
        let (status, answer, _) = send(&fx.app, READER, method, &uri, Some(json!({}))).await?;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{operation}");
        assert!(answer["detail"] != "no such route", "{operation}: {answer}");
    }
    assert!(!ids.is_empty());
    Ok(())
}

#[tokio::test]
async fn an_unauthenticated_api_is_a_visible_choice_that_needs_no_token() -> TestResult {
    let (fx, _) = fixture(&[("order-created", 1)]).await?;
    let open = DlqApi::unauthenticated(fx.dialect.dlq_dao()).router();
    let (status, page, _) = send(&open, "", Method::GET, "/events", None).await?;
    assert_eq!((status, page["total"].clone()), (StatusCode::OK, json!(1)));
    let (_, document, _) = send(&open, "", Method::GET, "/openapi.json", None).await?;
    assert!(document["security"].is_null(), "an open API documents no security");
    Ok(())
}

#[tokio::test]
async fn the_console_is_served_with_a_strict_content_policy() -> TestResult {
    let (fx, _) = fixture(&[("order-created", 1)]).await?;
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/style.css", "text/css"),
    ] {
        let request = Request::builder().uri(path).body(Body::empty())?;
        let response = fx.app.clone().oneshot(request).await?;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let header = |name: &str| {
            response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        assert!(header("content-security-policy").contains("script-src 'self'"), "{path}");
    }
    Ok(())
}
