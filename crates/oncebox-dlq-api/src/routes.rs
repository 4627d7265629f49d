//! The API's operations: each handler with its OpenAPI description, so the served document and
//! the routes come from the same code.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, response::IntoResponse};
use chrono::{DateTime, Utc};
use oncebox_core::dlq::{self, OneChange, ReDrive};
use oncebox_core::event::{DlqEvent, DlqFilter, DlqSelection, DlqStatus};
use oncebox_core::hooks::DlqManualAction;
use oncebox_core::{DlqDao, OutboxMetrics};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, IntoResponses, ToSchema};
use uuid::Uuid;

use crate::MAX_LISTED_PAYLOAD;
use crate::auth::Principal;
use crate::problem::Problem;

/// The handlers' state: the DLQ, where manual changes are counted, and the re-drive max age.
#[derive(Clone)]
pub(crate) struct Api {
    pub(crate) dlq: Arc<dyn DlqDao>,
    pub(crate) metrics: Arc<dyn OutboxMetrics>,
    pub(crate) re_drive_max_age: Duration,
}

impl Api {
    /// Refuses (409) a re-drive of `selection` that takes events older than the re-drive max age
    /// when `allow_older` is not set; any other change goes ahead.
    async fn check_re_drive(
        &self,
        selection: &DlqSelection,
        status: DlqStatus,
        allow_older: bool,
    ) -> Result<(), Problem> {
        let re_drive = ReDrive { max_age: self.re_drive_max_age, allow_older };
        dlq::check_re_drive(self.dlq.as_ref(), selection, status, re_drive)
            .await?
            .map_err(|too_old| Problem::too_old(&too_old))
    }

    /// The answer to a change of event `id`, counted and logged when it was made.
    fn one_changed(
        &self,
        by: &Principal,
        action: DlqManualAction,
        id: Uuid,
        outcome: OneChange,
    ) -> Result<StatusCode, Problem> {
        match outcome {
            OneChange::Done => {
                self.record(by, action, &DlqSelection::Ids(vec![id]), 1);
                Ok(StatusCode::NO_CONTENT)
            }
            OneChange::NotFound => Err(Problem::not_found(id)),
            OneChange::InProcess => Err(Problem::in_process(id)),
        }
    }

    /// Counts and logs a manual change of `count` rows made by `by`.
    fn record(&self, by: &Principal, action: DlqManualAction, selection: &DlqSelection, count: u64) {
        self.metrics.dlq_manual(action, count);
        tracing::info!(
            by = %by.name, action = action.as_str(), rows = count, selection = %describe(selection),
            "manual DLQ change"
        );
    }
}

/// `3 ids` or `event type order-created`, for the log line of a manual change.
fn describe(selection: &DlqSelection) -> String {
    match selection {
        DlqSelection::Ids(ids) if ids.len() == 1 => format!("id {}", ids[0]),
        DlqSelection::Ids(ids) => format!("{} ids", ids.len()),
        DlqSelection::EventType(event_type) => format!("event type {event_type}"),
    }
}

type Answer<T> = Result<Json<T>, Problem>;

/// A DLQ status in a filter.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum Status {
    /// Arrived from the outbox; waiting for a person.
    Moved,
    /// Being moved back to the outbox by the transfer job.
    InProcess,
    /// Handled; deleted by the DLQ clean-up after its TTL.
    Resolved,
    /// To be moved back to the outbox as PENDING.
    ToRetry,
}

impl From<Status> for DlqStatus {
    fn from(status: Status) -> Self {
        match status {
            Status::Moved => DlqStatus::Moved,
            Status::InProcess => DlqStatus::InProcess,
            Status::Resolved => DlqStatus::Resolved,
            Status::ToRetry => DlqStatus::ToRetry,
        }
    }
}

impl From<DlqStatus> for Status {
    fn from(status: DlqStatus) -> Self {
        match status {
            DlqStatus::Moved => Status::Moved,
            DlqStatus::InProcess => Status::InProcess,
            DlqStatus::Resolved => Status::Resolved,
            DlqStatus::ToRetry => Status::ToRetry,
        }
    }
}

/// A status a person may set (`IN_PROCESS` exists only inside the transfer job's transaction).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum NewStatus {
    /// Back to waiting for a person.
    Moved,
    /// Handled; deleted by the DLQ clean-up after its TTL.
    Resolved,
    /// Moved back to the outbox as PENDING by the transfer job, attempts reset.
    ToRetry,
}

impl NewStatus {
    /// The status to store and the action it counts as.
    fn change(self) -> (DlqStatus, DlqManualAction) {
        match self {
            NewStatus::Moved => (DlqStatus::Moved, DlqManualAction::Moved),
            NewStatus::Resolved => (DlqStatus::Resolved, DlqManualAction::Resolved),
            NewStatus::ToRetry => (DlqStatus::ToRetry, DlqManualAction::ToRetry),
        }
    }
}

/// Filters of the listing and the count.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct FilterQuery {
    /// Only events in this DLQ status.
    status: Option<Status>,
    /// Only events of this type.
    #[param(min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    event_type: Option<String>,
}

impl FilterQuery {
    fn filter(self) -> Result<DlqFilter, Problem> {
        Ok(dlq::filter(self.status.map(DlqStatus::from), self.event_type)?)
    }
}

/// Filters and paging of the listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only events in this DLQ status.
    status: Option<Status>,
    /// Only events of this type.
    #[param(min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    event_type: Option<String>,
    /// Events to skip (oldest first by arrival).
    #[param(minimum = 0, maximum = 1_000_000_000)]
    offset: Option<u64>,
    /// Events per page (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// One DLQ event. In a listing its payload is cut after 1,024 bytes (`payload_truncated` says
/// so); `GET /events/{id}` gives it whole.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventView {
    id: Uuid,
    event_type: String,
    payload_type: String,
    payload: String,
    /// Whether `payload` was cut short for the listing.
    payload_truncated: bool,
    headers: BTreeMap<String, String>,
    partition_key: Option<String>,
    /// Sends tried before the event failed for good.
    attempts: u32,
    /// The last send failure.
    last_error: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    dlq_status: Status,
    /// When the event arrived in the DLQ.
    moved_at: DateTime<Utc>,
}

impl EventView {
    fn new(dlq: DlqEvent, max_payload: usize) -> Self {
        let DlqEvent { event, dlq_status, moved_at } = dlq;
        let mut payload = event.payload;
        let payload_truncated = payload.len() > max_payload;
        if payload_truncated {
            let mut end = max_payload;
            while !payload.is_char_boundary(end) {
                end -= 1;
            }
            payload.truncate(end);
        }
        Self {
            id: event.id,
            event_type: event.event_type,
            payload_type: event.payload_type,
            payload,
            payload_truncated,
            headers: event.headers,
            partition_key: event.partition_key,
            attempts: event.attempts,
            last_error: event.last_error,
            created_at: event.created_at,
            updated_at: event.updated_at,
            dlq_status: Status::from(dlq_status),
            moved_at,
        }
    }
}

/// One page of the listing.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Page {
    events: Vec<EventView>,
    /// Events matching the filters, on every page.
    total: u64,
    offset: u64,
    limit: u32,
}

/// Answers every API route may give: the caller is unknown, or the server or its database failed.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum ApiFailures {
    /// Missing or unknown token.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// Server error; the log has the details under the request id.
    #[response(status = 500, content_type = "application/problem+json")]
    Internal(Problem),
    /// The database is unavailable; retry.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// The answer of a route that changes the DLQ to a read-only token.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum WriteRefusals {
    /// The token is read-only.
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
}

/// Refusals of a request body before it is read.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum BodyRefusals {
    /// The body is too large.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    /// The body is not JSON.
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
}

/// Lists DLQ events, oldest arrival first, with filters and paging.
#[utoipa::path(
    get, path = "/events", tag = "dlq", params(ListQuery),
    responses(
        (status = 200, description = "one page of events", body = Page),
        (status = 400, description = "a filter or paging value is wrong", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
    )
)]
pub(crate) async fn list(
    State(api): State<Api>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Answer<Page> {
    let Query(query) = query.map_err(|rejection| Problem::bad_request(rejection.body_text()))?;
    let (offset, limit) = dlq::page(query.offset, query.limit)?;
    let filter = FilterQuery { status: query.status, event_type: query.event_type }.filter()?;
    let events = api.dlq.list(&filter, offset, limit).await?;
    let total = api.dlq.count(&filter).await?;
    let events = events.into_iter().map(|event| EventView::new(event, MAX_LISTED_PAYLOAD)).collect();
    Ok(Json(Page { events, total, offset, limit }))
}

/// A number of events.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Count {
    count: u64,
}

/// Counts DLQ events matching the filters.
#[utoipa::path(
    get, path = "/events/count", tag = "dlq", params(FilterQuery),
    responses(
        (status = 200, description = "the number of matching events", body = Count),
        (status = 400, description = "a filter is wrong", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
    )
)]
pub(crate) async fn count(
    State(api): State<Api>,
    query: Result<Query<FilterQuery>, QueryRejection>,
) -> Answer<Count> {
    let Query(query) = query.map_err(|rejection| Problem::bad_request(rejection.body_text()))?;
    let count = api.dlq.count(&query.filter()?).await?;
    Ok(Json(Count { count }))
}

fn event_id(id: Result<Path<String>, PathRejection>) -> Result<Uuid, Problem> {
    let Path(text) = id.map_err(|rejection| Problem::bad_request(rejection.body_text()))?;
    Uuid::parse_str(&text)
        .map_err(|error| Problem::bad_request(format!("'{text}' is not an event id: {error}")))
}

/// Gives one DLQ event with its whole payload.
#[utoipa::path(
    get, path = "/events/{id}", tag = "dlq",
    params(("id" = Uuid, Path, description = "the event id")),
    responses(
        (status = 200, description = "the event", body = EventView),
        (status = 400, description = "the id is not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "no DLQ event has this id", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
    )
)]
pub(crate) async fn get_one(
    State(api): State<Api>,
    id: Result<Path<String>, PathRejection>,
) -> Answer<EventView> {
    let id = event_id(id)?;
    match api.dlq.get(id).await? {
        Some(event) => Ok(Json(EventView::new(event, usize::MAX))),
        None => Err(Problem::not_found(id)),
    }
}

/// The new status of one event.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusChange {
    status: NewStatus,
    /// Re-drive (`TO_RETRY`) the event even if it was written longer ago than the re-drive max
    /// age (`oncebox.outbox.dlq.re-drive-max-age`); without it such a re-drive is refused with 409.
    /// Read only with `TO_RETRY`.
    #[serde(default)]
    allow_older: bool,
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, Problem> {
    body.map(|Json(value)| value)
        .map_err(|rejection| Problem::rejected(rejection.status(), rejection.body_text()))
}

/// Changes the status of one DLQ event.
#[utoipa::path(
    patch, path = "/events/{id}", tag = "dlq",
    params(("id" = Uuid, Path, description = "the event id")),
    request_body = StatusChange,
    responses(
        (status = 204, description = "changed"),
        (status = 400, description = "the id or the status is wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "no DLQ event has this id", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "the event is IN_PROCESS, or a re-drive of an event older than the re-drive max age without allow_older", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
        WriteRefusals,
        BodyRefusals,
    )
)]
pub(crate) async fn patch_one(
    State(api): State<Api>,
    Extension(by): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
    request: Result<Json<StatusChange>, JsonRejection>,
) -> Result<StatusCode, Problem> {
    let id = event_id(id)?;
    let StatusChange { status, allow_older } = body(request)?;
    let (status, action) = status.change();
    api.check_re_drive(&DlqSelection::Ids(vec![id]), status, allow_older).await?;
    let outcome = dlq::set_one_status(api.dlq.as_ref(), id, status).await?;
    api.one_changed(&by, action, id, outcome)
}

/// Deletes one DLQ event.
#[utoipa::path(
    delete, path = "/events/{id}", tag = "dlq",
    params(("id" = Uuid, Path, description = "the event id")),
    responses(
        (status = 204, description = "deleted"),
        (status = 400, description = "the id is not a UUID", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "no DLQ event has this id", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "the event is IN_PROCESS", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
        WriteRefusals,
    )
)]
pub(crate) async fn delete_one(
    State(api): State<Api>,
    Extension(by): Extension<Principal>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, Problem> {
    let id = event_id(id)?;
    let outcome = dlq::delete_one(api.dlq.as_ref(), id).await?;
    api.one_changed(&by, DlqManualAction::Deleted, id, outcome)
}

/// Events chosen by their ids or by their type (exactly one of the two).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Selection {
    /// At most 1,000 ids.
    ids: Option<Vec<Uuid>>,
    /// Every event of this type.
    event_type: Option<String>,
}

impl Selection {
    fn selection(self) -> Result<DlqSelection, Problem> {
        Ok(dlq::selection(self.ids, self.event_type)?)
    }
}

/// The schema of a selection: exactly one of `ids` and `event_type`, which the OpenAPI
/// document can say as `oneOf` (requests are read as [`Selection`], whose refusals name the rule).
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum SelectionBody {
    /// These events.
    ByIds(ByIds),
    /// Every event of this type.
    ByType(ByType),
}

/// Events chosen by their ids.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct ByIds {
    /// 1 to 1,000 ids.
    #[schema(min_items = 1, max_items = 1000)]
    ids: Vec<Uuid>,
}

/// Every event of one type.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct ByType {
    /// The event type.
    #[schema(min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    event_type: String,
}

/// The schema of a batch status change: a selection (exactly one of `ids` and `event_type`) and
/// the new status.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum StatusChangeBody {
    /// These events.
    ByIds(IdsToStatus),
    /// Every event of this type.
    ByType(TypeToStatus),
}

/// A new status for events chosen by their ids.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct IdsToStatus {
    /// 1 to 1,000 ids.
    #[schema(min_items = 1, max_items = 1000)]
    ids: Vec<Uuid>,
    status: NewStatus,
    /// Re-drive (`TO_RETRY`) events written longer ago than the re-drive max age too; without it
    /// such a re-drive is refused with 409. Read only with `TO_RETRY`.
    #[serde(default)]
    allow_older: bool,
}

/// A new status for every event of one type.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct TypeToStatus {
    /// The event type.
    #[schema(min_length = 1, max_length = 255, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$")]
    event_type: String,
    status: NewStatus,
    /// Re-drive (`TO_RETRY`) events written longer ago than the re-drive max age too; without it
    /// such a re-drive is refused with 409. Read only with `TO_RETRY`.
    #[serde(default)]
    allow_older: bool,
}

/// A new status for events chosen by ids or by type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchStatusChange {
    /// At most 1,000 ids.
    ids: Option<Vec<Uuid>>,
    /// Every event of this type.
    event_type: Option<String>,
    status: NewStatus,
    /// Re-drive events older than the re-drive max age too.
    #[serde(default)]
    allow_older: bool,
}

/// How many events a batch change touched (`IN_PROCESS` events and unknown ids are left out).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Updated {
    updated: u64,
}

/// How many events a batch delete removed (`IN_PROCESS` events and unknown ids are left out).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Deleted {
    deleted: u64,
}

/// Changes the status of events chosen by ids or by type.
#[utoipa::path(
    post, path = "/events/status", tag = "dlq",
    request_body = StatusChangeBody,
    responses(
        (status = 200, description = "the number of events changed", body = Updated),
        (status = 400, description = "the selection or the status is wrong", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "a re-drive of events older than the re-drive max age without allow_older; nothing was changed", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
        WriteRefusals,
        BodyRefusals,
    )
)]
pub(crate) async fn set_status(
    State(api): State<Api>,
    Extension(by): Extension<Principal>,
    request: Result<Json<BatchStatusChange>, JsonRejection>,
) -> Answer<Updated> {
    let BatchStatusChange { ids, event_type, status, allow_older } = body(request)?;
    let (status, action) = status.change();
    let selection = Selection { ids, event_type }.selection()?;
    api.check_re_drive(&selection, status, allow_older).await?;
    let updated = api.dlq.set_status(&selection, status).await?;
    api.record(&by, action, &selection, updated);
    Ok(Json(Updated { updated }))
}

/// Deletes events chosen by ids or by type.
#[utoipa::path(
    post, path = "/events/delete", tag = "dlq",
    request_body = SelectionBody,
    responses(
        (status = 200, description = "the number of events deleted", body = Deleted),
        (status = 400, description = "the selection is wrong", body = Problem, content_type = "application/problem+json"),
        ApiFailures,
        WriteRefusals,
        BodyRefusals,
    )
)]
pub(crate) async fn delete_selected(
    State(api): State<Api>,
    Extension(by): Extension<Principal>,
    request: Result<Json<Selection>, JsonRejection>,
) -> Answer<Deleted> {
    let selection = body(request)?.selection()?;
    let deleted = api.dlq.delete(&selection).await?;
    api.record(&by, DlqManualAction::Deleted, &selection, deleted);
    Ok(Json(Deleted { deleted }))
}

/// The number of events of one type in one status.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TypeCount {
    event_type: String,
    status: Status,
    count: u64,
}

/// Counts DLQ events per event type and status.
#[utoipa::path(
    get, path = "/counts", tag = "dlq",
    responses(
        (status = 200, description = "one entry per event type and status present", body = Vec<TypeCount>),
        ApiFailures,
    )
)]
pub(crate) async fn counts(State(api): State<Api>) -> Answer<Vec<TypeCount>> {
    let counts = api.dlq.counts().await?;
    Ok(Json(
        counts
            .by_type_and_status
            .into_iter()
            .map(|(event_type, status, count)| TypeCount { event_type, status: Status::from(status), count })
            .collect(),
    ))
}

/// Answers unknown paths under the API with a problem, like every other refusal.
pub(crate) async fn not_found() -> impl IntoResponse {
    Problem::new(StatusCode::NOT_FOUND, "not-found", "no such route")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_payload_is_cut_on_a_character_boundary() {
        let event = oncebox_core::OutboxEvent {
            id: Uuid::nil(),
            event_type: "t".into(),
            payload: "é".repeat(600),
            payload_type: "P".into(),
            headers: Default::default(),
            partition_key: None,
            status: oncebox_core::EventStatus::Failed,
            attempts: 3,
            next_retry_at: Utc::now(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
            processed_at: None,
            last_error: None,
            claim_token: None,
        };
        let dlq = DlqEvent { event, dlq_status: DlqStatus::Moved, moved_at: Utc::now() };
        let view = EventView::new(dlq, 1023);
        assert!(view.payload_truncated);
        assert_eq!(view.payload.len(), 1022);
    }
}
