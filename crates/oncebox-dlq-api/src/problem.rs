//! Error answers as RFC 9457 problem details, and the request id that ties one to its log line.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oncebox_core::dlq::TooOldToReDrive;
use oncebox_core::{Error, ErrorKind};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

/// The header that carries a request's id on every answer.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

tokio::task_local! {
    /// The id of the request being answered, so an error answer and its log line carry it
    /// without every handler passing it along.
    static REQUEST_ID: Uuid;
}

/// An error answer (`application/problem+json`, RFC 9457). It never holds driver or SQL text:
/// a database failure is described in general terms here and in full in the log, under the same
/// `request_id`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// What kind of problem: `urn:oncebox:dlq:<slug>` (e.g. `urn:oncebox:dlq:bad-request`).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What was wrong with this request.
    pub detail: String,
    /// The id of the request, also in the `x-request-id` header and in the server's log.
    pub request_id: Option<String>,
}

impl Problem {
    /// A problem of kind `slug` answered with `status`.
    pub(crate) fn new(status: StatusCode, slug: &str, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("urn:oncebox:dlq:{slug}"),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            request_id: REQUEST_ID.try_with(Uuid::to_string).ok(),
        }
    }

    /// 400: the request itself was wrong, as `detail` says.
    pub(crate) fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad-request", detail)
    }

    /// 404: no DLQ event has this id.
    pub(crate) fn not_found(id: Uuid) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", format!("no DLQ event {id}"))
    }

    /// 409: the event exists but is being moved back to the outbox right now.
    pub(crate) fn in_process(id: Uuid) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "in-process",
            format!("DLQ event {id} is IN_PROCESS (being moved back to the outbox): try again shortly"),
        )
    }

    /// 409: a re-drive selects events older than the re-drive max age, and the request did not
    /// allow older events.
    pub(crate) fn too_old(too_old: &TooOldToReDrive) -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "too-old",
            too_old.explain("\"allow_older\": true in the request body"),
        )
    }

    /// An extractor's refusal: its own status for a body too large (413) or of the wrong media
    /// type (415), 400 for anything else, with axum's text (which names the field, never data).
    pub(crate) fn rejected(status: StatusCode, text: String) -> Self {
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(status, "too-large", text),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::new(status, "unsupported-media-type", text),
            _ => Self::bad_request(text),
        }
    }
}

impl From<Error> for Problem {
    fn from(error: Error) -> Self {
        match error.kind() {
            ErrorKind::InvalidInput | ErrorKind::Config => Self::bad_request(error.message()),
            _ => {
                let temporary = error.is_temporary();
                let problem = if temporary {
                    Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "unavailable",
                        "the database is unavailable; retry the request later",
                    )
                } else {
                    Self::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        "the request failed on the server; its log has the details under this request id",
                    )
                };
                tracing::error!(request_id = problem.request_id.as_deref(), temporary, %error, "DLQ API request failed");
                problem
            }
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        response
    }
}

/// Middleware: gives each request an id, answered in `x-request-id` and carried by every problem
/// and error log line of the request.
pub(crate) async fn with_request_id(request: Request, next: Next) -> Response {
    let id = Uuid::now_v7();
    let mut response = REQUEST_ID.scope(id, next.run(request)).await;
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_errors_never_reach_the_client() {
        let outage = Problem::from(Error::temporary(ErrorKind::Database, "pool timed out on 10.0.0.7"));
        assert_eq!(outage.status, 503);
        let broken = Problem::from(Error::new(ErrorKind::Database, "syntax error at or near SELECT"));
        assert_eq!(broken.status, 500);
        for problem in [&outage, &broken] {
            assert!(
                !problem.detail.contains("10.0.0.7") && !problem.detail.contains("SELECT"),
                "{problem:?}"
            );
        }
        let bad = Problem::from(Error::invalid_input("limit must be between 1 and 500"));
        assert_eq!((bad.status, bad.detail.contains("limit")), (400, true));
        assert_eq!(bad.kind, "urn:oncebox:dlq:bad-request");
    }
}
