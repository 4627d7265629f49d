//! A REST API for the oncebox dead letter queue, with a web console, as an [`axum`] router to
//! mount in your service.
//!
//! Events that failed their last retry move from the outbox to the DLQ (status `MOVED`). Through
//! this API an operator lists and inspects them, sends them back to the outbox (`TO_RETRY`: the
//! transfer-from job moves them as PENDING, with their attempts reset), marks them handled
//! (`RESOLVED`: the DLQ clean-up deletes them after its TTL) or deletes them.
//!
//! The router cannot be built without an access decision: [`DlqApi::with_tokens`] (bearer tokens
//! with a read-only or an operator role), [`DlqApi::with_authorizer`] (your own check of the
//! request's headers) or, visibly, [`DlqApi::unauthenticated`] (logged at WARN when the router is
//! built). Errors are RFC 9457 problem details that never hold driver or SQL text; every answer
//! carries an `x-request-id` that the server's log lines of the request carry too.
//!
//! | method and path | who | answer |
//! |---|---|---|
//! | `GET /events?status=&event_type=&offset=&limit=` | read | a page of events, payloads cut after 1 KiB |
//! | `GET /events/count?status=&event_type=` | read | `{"count": n}` |
//! | `GET /events/{id}` | read | one event with its whole payload, or 404 |
//! | `PATCH /events/{id}` `{"status": "TO_RETRY"}` | operator | 204, 404, or 409 while `IN_PROCESS` or [too old](#re-driving-old-events) |
//! | `DELETE /events/{id}` | operator | 204, 404, or 409 while `IN_PROCESS` |
//! | `POST /events/status` `{"ids"\|"event_type", "status"}` | operator | `{"updated": n}`, or 409 when [too old](#re-driving-old-events) |
//! | `POST /events/delete` `{"ids"\|"event_type"}` | operator | `{"deleted": n}` |
//! | `GET /counts` | read | `[{"event_type", "status", "count"}]` |
//! | `GET /openapi.json` | anyone | the OpenAPI 3.1 document of the routes above |
//! | `GET /console` | anyone | the web console (it asks for a token and uses the routes above) |
//!
//! ```no_run
//! # async fn example(dialect: oncebox_sqlite::SqliteDialect) -> Result<(), Box<dyn std::error::Error>> {
//! use oncebox_core::Dialect;
//! use oncebox_dlq_api::{ApiToken, BearerTokens, DlqApi, Role};
//!
//! let tokens = BearerTokens::new([
//!     ApiToken::new("on-call", std::env::var("DLQ_OPERATOR_TOKEN")?, Role::Operator)?,
//!     ApiToken::new("dashboard", std::env::var("DLQ_READER_TOKEN")?, Role::ReadOnly)?,
//! ])?;
//! let dlq = DlqApi::with_tokens(dialect.dlq_dao(), tokens)
//!     // oncebox.outbox.dlq.re-drive-max-age of the service's config (with the facade:
//!     // `oncebox.config().dlq_re_drive_max_age()`).
//!     .re_drive_max_age(std::time::Duration::from_secs(24 * 3600))
//!     .mounted_at("/oncebox/dlq");
//! let app = axum::Router::new().nest("/oncebox/dlq", dlq.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Re-driving old events
//!
//! A change to `TO_RETRY` of events written longer ago than the re-drive max age
//! ([`re_drive_max_age`](DlqApi::re_drive_max_age), `oncebox.outbox.dlq.re-drive-max-age`,
//! default 24 h) is refused with 409 (`urn:oncebox:dlq:too-old`, naming how many selected events
//! are older and the oldest age) unless the body says `"allow_older": true`: a consumer whose
//! inbox has forgotten their ids refuses such events as too old, and one without inbox retention
//! may apply them a second time. The rule is [`oncebox_core::dlq::check_re_drive`], shared with
//! the command line.

mod auth;
mod console;
mod problem;
mod routes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::get;
use oncebox_core::config::DEFAULT_RE_DRIVE_MAX_AGE;
use oncebox_core::{DlqDao, NoMetrics, OutboxMetrics};
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{ApiToken, Authorize, BearerTokens, MIN_SECRET_LEN, Principal, Role};
pub use problem::{Problem, REQUEST_ID_HEADER};

use auth::Access;
use routes::Api;

pub use oncebox_core::dlq::{DEFAULT_PAGE, MAX_IDS, MAX_OFFSET, MAX_PAGE};
/// The largest request body accepted, in bytes (1,000 ids take about 40 KB); a larger one is
/// refused with 413 before it is parsed.
pub const MAX_BODY: usize = 64 * 1024;
/// Payload bytes shown per event in a listing; `GET /events/{id}` shows the whole payload.
pub const MAX_LISTED_PAYLOAD: usize = 1024;

/// The DLQ API and console over one DLQ, with its access rule: build it with
/// [`with_tokens`](Self::with_tokens), [`with_authorizer`](Self::with_authorizer) or
/// [`unauthenticated`](Self::unauthenticated), then take its [`router`](Self::router).
pub struct DlqApi {
    dlq: Arc<dyn DlqDao>,
    metrics: Arc<dyn OutboxMetrics>,
    access: Access,
    mounted_at: Option<String>,
    re_drive_max_age: Duration,
}

impl std::fmt::Debug for DlqApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let access = match self.access {
            Access::Checked(_) => "checked",
            Access::Open => "unauthenticated",
        };
        f.debug_struct("DlqApi")
            .field("access", &access)
            .field("mounted_at", &self.mounted_at)
            .field("re_drive_max_age", &self.re_drive_max_age)
            .finish()
    }
}

impl DlqApi {
    fn build(dlq: Arc<dyn DlqDao>, access: Access) -> Self {
        Self {
            dlq,
            metrics: Arc::new(NoMetrics),
            access,
            mounted_at: None,
            re_drive_max_age: DEFAULT_RE_DRIVE_MAX_AGE,
        }
    }

    /// Callers send `Authorization: Bearer <secret>` of one of `tokens`.
    pub fn with_tokens(dlq: Arc<dyn DlqDao>, tokens: BearerTokens) -> Self {
        Self::build(dlq, Access::Checked(Arc::new(tokens)))
    }

    /// Callers are recognized by `authorize` (e.g. your session check or a header set by your
    /// gateway).
    pub fn with_authorizer(dlq: Arc<dyn DlqDao>, authorize: impl Authorize) -> Self {
        Self::build(dlq, Access::Checked(Arc::new(authorize)))
    }

    /// Anyone who reaches the router may read and change the DLQ; for a router that only a
    /// trusted network or an outer authentication layer can reach. Logged at WARN when the
    /// router is built.
    pub fn unauthenticated(dlq: Arc<dyn DlqDao>) -> Self {
        Self::build(dlq, Access::Open)
    }

    /// Counts every manual change in `oncebox_dlq_manual_actions_total{action}` of `metrics`
    /// (e.g. `oncebox.metrics()` of the facade).
    pub fn metrics(mut self, metrics: Arc<dyn OutboxMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// How old an event a change to `TO_RETRY` may send back to the outbox unless the request
    /// says `"allow_older": true`: `oncebox.outbox.dlq.re-drive-max-age` of the configuration the
    /// service runs with (`config.dlq_re_drive_max_age()`). Default 24 h, the default of
    /// `oncebox.inbox.clean-up.ttl`. See [Re-driving old events](crate#re-driving-old-events).
    pub fn re_drive_max_age(mut self, max_age: Duration) -> Self {
        self.re_drive_max_age = max_age;
        self
    }

    /// The path the router is nested at (e.g. `/oncebox/dlq`), written as the server of the
    /// OpenAPI document so clients generated from it call the right URLs.
    pub fn mounted_at(mut self, path: impl Into<String>) -> Self {
        self.mounted_at = Some(path.into());
        self
    }

    /// The OpenAPI 3.1 document of the API (served at `/openapi.json`).
    pub fn openapi(&self) -> utoipa::openapi::OpenApi {
        self.parts().1
    }

    fn parts(&self) -> (Router<Api>, utoipa::openapi::OpenApi) {
        let (routes, mut document) = OpenApiRouter::<Api>::with_openapi(ApiDoc::openapi())
            .routes(routes!(routes::list))
            .routes(routes!(routes::count))
            .routes(routes!(routes::get_one, routes::patch_one, routes::delete_one))
            .routes(routes!(routes::set_status))
            .routes(routes!(routes::delete_selected))
            .routes(routes!(routes::counts))
            .split_for_parts();
        if let Access::Checked(_) = self.access {
            let components = document.components.get_or_insert_with(Default::default);
            components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
            document.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
                "bearer",
                Vec::<String>::new(),
            )]);
        }
        if let Some(path) = &self.mounted_at {
            document.servers = Some(vec![Server::new(path.clone())]);
        }
        (routes, document)
    }

    /// The routes of the API, the console and the OpenAPI document, relative to where they are
    /// nested.
    pub fn router(self) -> Router {
        if let Access::Open = self.access {
            tracing::warn!(
                "the DLQ API is built without authentication: anyone who reaches it can read, retry and \
                 delete dead letters"
            );
        }
        let (routes, document) = self.parts();
        let document = Arc::new(document.to_pretty_json().unwrap_or_default());
        let api = Api { dlq: self.dlq, metrics: self.metrics, re_drive_max_age: self.re_drive_max_age };
        routes
            .route_layer(middleware::from_fn_with_state(self.access, auth::require))
            .with_state(api)
            .route("/openapi.json", get(move || openapi_json(document.clone())))
            .merge(console::routes())
            .fallback(routes::not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .layer(middleware::from_fn(problem::with_request_id))
    }
}

async fn openapi_json(document: Arc<String>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], document.as_str().to_owned())
}

/// The document's fixed part; the paths come from the handlers' `#[utoipa::path]`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "oncebox DLQ API",
        description = "List, inspect, retry, resolve and delete the events of the oncebox dead letter queue."
    ),
    tags((name = "dlq", description = "Dead letter queue events"))
)]
struct ApiDoc;
