//! A REST API for the oncebox dead letter queue, as an [`axum`] router to mount in your service.
//!
//! Events that failed their last retry move from the outbox to the DLQ (status `MOVED`). Through
//! this API an operator lists and inspects them, sends them back to the outbox (`TO_RETRY`: the
//! transfer-from job moves them as PENDING, with their attempts reset), marks them handled
//! (`RESOLVED`: the DLQ clean-up deletes them after its TTL) or deletes them.
//!
//! | method and path | body | answer |
//! |---|---|---|
//! | `GET /events?status=&event_type=&offset=&limit=` | | `{"events": [...], "total", "offset", "limit"}` |
//! | `GET /events/{id}` | | one event, or 404 |
//! | `DELETE /events/{id}` | | `{"deleted": n}` |
//! | `POST /events/status` | `{"ids": [...]}` or `{"event_type": "..."}`, plus `"status"` | `{"updated": n}` |
//! | `POST /events/delete` | `{"ids": [...]}` or `{"event_type": "..."}` | `{"deleted": n}` |
//! | `GET /counts` | | `[{"event_type", "status", "count"}]` |
//!
//! `IN_PROCESS` exists only inside the transfer job's transaction: it cannot be set, and rows in
//! it are neither changed nor deleted. Bad input (an unknown status, a malformed id, both or
//! neither of `ids` and `event_type`) is a 400 whose `error` says what was wrong; a database
//! outage is a 503, so a client can retry.
//!
//! The router has no authentication of its own: mount it behind your service's. With
//! [`router_with_metrics`], every change counts in `oncebox_dlq_manual_actions_total{action}` and
//! is logged at INFO with what it selected.
//!
//! ```no_run
//! # async fn example(dialect: oncebox_sqlite::SqliteDialect) -> Result<(), Box<dyn std::error::Error>> {
//! use oncebox_core::Dialect;
//!
//! let app = axum::Router::new().nest("/oncebox/dlq", oncebox_dlq_api::router(dialect.dlq_dao()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRef, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use oncebox_core::event::{DlqEvent, DlqFilter, DlqSelection, DlqStatus};
use oncebox_core::hooks::DlqManualAction;
use oncebox_core::{DlqDao, Error, ErrorKind, NoMetrics, OutboxMetrics};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Rows per page when `limit` is not given.
pub const DEFAULT_PAGE: u32 = 50;
/// The largest `limit` accepted.
pub const MAX_PAGE: u32 = 500;
/// The most ids one request may select.
pub const MAX_IDS: usize = 1_000;

/// The API's routes over `dlq`, relative to where they are nested.
pub fn router(dlq: Arc<dyn DlqDao>) -> Router {
    router_with_metrics(dlq, Arc::new(NoMetrics))
}

/// The API's routes over `dlq`, recording each manual change (deletes, status changes) in
/// `metrics`.
pub fn router_with_metrics(dlq: Arc<dyn DlqDao>, metrics: Arc<dyn OutboxMetrics>) -> Router {
    Router::new()
        .route("/events", get(list))
        .route("/events/{id}", get(get_one).delete(delete_one))
        .route("/events/status", post(set_status))
        .route("/events/delete", post(delete_selected))
        .route("/counts", get(counts))
        .with_state(Api { dlq, metrics })
}

/// The router's state: the DLQ, and where manual changes are counted.
#[derive(Clone)]
struct Api {
    dlq: Arc<dyn DlqDao>,
    metrics: Arc<dyn OutboxMetrics>,
}

impl FromRef<Api> for Arc<dyn DlqDao> {
    fn from_ref(api: &Api) -> Self {
        api.dlq.clone()
    }
}

impl Api {
    /// Counts and logs a manual change of `count` rows.
    fn record(&self, action: DlqManualAction, selection: &DlqSelection, count: u64) {
        self.metrics.dlq_manual(action, count);
        tracing::info!(action = action.as_str(), rows = count, selection = %describe(selection), "manual DLQ change");
    }
}

/// `3 ids` or `event type order-created`, for the log line of a manual change.
fn describe(selection: &DlqSelection) -> String {
    match selection {
        DlqSelection::Ids(ids) => format!("{} ids", ids.len()),
        DlqSelection::EventType(event_type) => format!("event type {event_type}"),
    }
}

/// An error answer: a status code and `{"error": "..."}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into() }
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        let status = match error.kind() {
            ErrorKind::InvalidInput | ErrorKind::Config => StatusCode::BAD_REQUEST,
            _ if error.is_temporary() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self { status, message: error.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(serde_json::json!({ "error": self.message }))).into_response()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// Accepts `TO_RETRY`, `to_retry` or `to-retry`.
fn parse_status(text: &str) -> Result<DlqStatus, ApiError> {
    let normalized = text.trim().to_ascii_uppercase().replace('-', "_");
    [DlqStatus::Moved, DlqStatus::InProcess, DlqStatus::Resolved, DlqStatus::ToRetry]
        .into_iter()
        .find(|status| status.as_str() == normalized)
        .ok_or_else(|| {
            ApiError::bad_request(format!("unknown DLQ status '{text}': use MOVED, TO_RETRY or RESOLVED"))
        })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    event_type: Option<String>,
    offset: Option<u64>,
    limit: Option<u32>,
}

#[derive(Debug, Serialize)]
struct Page {
    events: Vec<DlqEvent>,
    total: u64,
    offset: u64,
    limit: u32,
}

async fn list(
    State(dlq): State<Arc<dyn DlqDao>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult<Page> {
    let Query(query) = query.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!("limit must be between 1 and {MAX_PAGE}, not {limit}")));
    }
    let filter = DlqFilter {
        status: query.status.as_deref().map(parse_status).transpose()?,
        event_type: query.event_type,
    };
    let offset = query.offset.unwrap_or(0);
    let events = dlq.list(&filter, offset, limit).await?;
    let total = dlq.count(&filter).await?;
    Ok(Json(Page { events, total, offset, limit }))
}

fn event_id(id: Result<Path<String>, PathRejection>) -> Result<Uuid, ApiError> {
    let Path(text) = id.map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
    Uuid::parse_str(&text)
        .map_err(|error| ApiError::bad_request(format!("'{text}' is not an event id: {error}")))
}

async fn get_one(
    State(dlq): State<Arc<dyn DlqDao>>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult<DlqEvent> {
    let id = event_id(id)?;
    match dlq.get(id).await? {
        Some(event) => Ok(Json(event)),
        None => Err(ApiError { status: StatusCode::NOT_FOUND, message: format!("no DLQ event {id}") }),
    }
}

#[derive(Debug, Serialize)]
struct Deleted {
    deleted: u64,
}

async fn delete_one(State(api): State<Api>, id: Result<Path<String>, PathRejection>) -> ApiResult<Deleted> {
    let selection = DlqSelection::Ids(vec![event_id(id)?]);
    let deleted = api.dlq.delete(&selection).await?;
    api.record(DlqManualAction::Deleted, &selection, deleted);
    Ok(Json(Deleted { deleted }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectionBody {
    ids: Option<Vec<Uuid>>,
    event_type: Option<String>,
}

impl SelectionBody {
    fn selection(self) -> Result<DlqSelection, ApiError> {
        match (self.ids, self.event_type) {
            (Some(_), Some(_)) => Err(ApiError::bad_request("give either ids or event_type, not both")),
            (None, None) => Err(ApiError::bad_request("give ids or event_type")),
            (Some(ids), None) if ids.is_empty() => Err(ApiError::bad_request("ids is empty")),
            (Some(ids), None) if ids.len() > MAX_IDS => {
                Err(ApiError::bad_request(format!("{} ids in one request; at most {MAX_IDS}", ids.len())))
            }
            (Some(ids), None) => Ok(DlqSelection::Ids(ids)),
            (None, Some(event_type)) if event_type.trim().is_empty() => {
                Err(ApiError::bad_request("event_type is empty"))
            }
            (None, Some(event_type)) => Ok(DlqSelection::EventType(event_type)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusBody {
    ids: Option<Vec<Uuid>>,
    event_type: Option<String>,
    status: String,
}

#[derive(Debug, Serialize)]
struct Updated {
    updated: u64,
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(value)| value).map_err(|rejection| ApiError::bad_request(rejection.body_text()))
}

async fn set_status(
    State(api): State<Api>,
    request: Result<Json<StatusBody>, JsonRejection>,
) -> ApiResult<Updated> {
    let StatusBody { ids, event_type, status } = body(request)?;
    let status = parse_status(&status)?;
    let action = match status {
        DlqStatus::InProcess => {
            return Err(ApiError::bad_request(
                "status IN_PROCESS cannot be set: it exists only inside the transfer job's transaction",
            ));
        }
        DlqStatus::ToRetry => DlqManualAction::ToRetry,
        DlqStatus::Resolved => DlqManualAction::Resolved,
        DlqStatus::Moved => DlqManualAction::Moved,
    };
    let selection = SelectionBody { ids, event_type }.selection()?;
    let updated = api.dlq.set_status(&selection, status).await?;
    api.record(action, &selection, updated);
    Ok(Json(Updated { updated }))
}

async fn delete_selected(
    State(api): State<Api>,
    request: Result<Json<SelectionBody>, JsonRejection>,
) -> ApiResult<Deleted> {
    let selection = body(request)?.selection()?;
    let deleted = api.dlq.delete(&selection).await?;
    api.record(DlqManualAction::Deleted, &selection, deleted);
    Ok(Json(Deleted { deleted }))
}

#[derive(Debug, Serialize)]
struct Count {
    event_type: String,
    status: DlqStatus,
    count: u64,
}

async fn counts(State(dlq): State<Arc<dyn DlqDao>>) -> ApiResult<Vec<Count>> {
    let counts = dlq.counts().await?;
    Ok(Json(
        counts
            .by_type_and_status
            .into_iter()
            .map(|(event_type, status, count)| Count { event_type, status, count })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse_in_any_case_and_unknown_ones_are_named() {
        assert_eq!(parse_status("to-retry").ok(), Some(DlqStatus::ToRetry));
        assert_eq!(parse_status("RESOLVED").ok(), Some(DlqStatus::Resolved));
        let error = parse_status("DONE").err().map(|e| e.message).unwrap_or_default();
        assert!(error.contains("'DONE'") && error.contains("TO_RETRY"), "{error}");
    }

    #[test]
    fn a_selection_is_ids_or_an_event_type() {
        let both = SelectionBody { ids: Some(vec![Uuid::now_v7()]), event_type: Some("t".into()) };
        assert!(both.selection().err().is_some_and(|e| e.message.contains("not both")));
        assert!(SelectionBody { ids: None, event_type: None }.selection().is_err());
        assert!(SelectionBody { ids: Some(vec![]), event_type: None }.selection().is_err());
        let many = SelectionBody { ids: Some(vec![Uuid::nil(); MAX_IDS + 1]), event_type: None };
        assert!(many.selection().err().is_some_and(|e| e.message.contains("at most")));
        let by_type = SelectionBody { ids: None, event_type: Some("order-created".into()) }.selection();
        assert_eq!(by_type.ok(), Some(DlqSelection::EventType("order-created".into())));
    }

    #[test]
    fn temporary_errors_are_503_and_bad_input_400() {
        let outage = ApiError::from(Error::temporary(ErrorKind::Database, "pool timed out"));
        assert_eq!(outage.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ApiError::from(Error::invalid_input("x")).status, StatusCode::BAD_REQUEST);
        assert_eq!(
            ApiError::from(Error::new(ErrorKind::Database, "syntax")).status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
