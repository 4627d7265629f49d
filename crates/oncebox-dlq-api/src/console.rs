//! The web console: three static files embedded in the crate, served beside the API. The page
//! holds no data of its own; it asks for a token and calls the API's routes with it.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;

const PAGE: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/style.css");

/// Only the console's own files may run or style the page; nothing may frame it.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
}

/// `GET /console` and its script and style, relative to where the API is nested (the page's
/// links are relative, so it works under any prefix).
pub(crate) fn routes() -> Router {
    Router::new()
        .route("/console", get(|| async { file("text/html; charset=utf-8", PAGE) }))
        .route("/console/app.js", get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/console/style.css", get(|| async { file("text/css; charset=utf-8", STYLE) }))
}
