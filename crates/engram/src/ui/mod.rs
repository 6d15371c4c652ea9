//! The web UI (SPEC §4, issue 12): server-rendered pages at `/` over the same engine
//! operations as REST and MCP, with the caller's key deciding what is shown.
//!
//! - [`session`]: sign-in with an API key kept in an HttpOnly, SameSite=Strict cookie (local
//!   mode signs in as the local admin), the [`session::Viewer`] extractor, CSRF tokens.
//! - [`memories`]: the memory screen (list, search with explanations, new, edit, rate,
//!   forget, purge, bulk forget) and a fact's history.
//! - [`conversations`]: the transcript viewer.
//! - [`agents`]: agent settings with seed 001's warnings.
//! - [`health`]: extraction health, failed jobs with a retry button, coverage and counts.
//!
//! - `/docs`: the API reference (Swagger UI, vendored) over `/openapi.json`.
//!
//! Templates are askama files under `crates/engram/templates/` (compiled into the binary,
//! every value escaped); the stylesheet is embedded from `crates/engram/assets/`. Pages work
//! with JavaScript off: every action is a form posted to the server, answered by a redirect.
//! Every response carries a Content-Security-Policy that allows no inline script and no
//! other origin.

pub mod agents;
pub mod charts;
pub mod conversations;
pub mod health;
pub mod memories;
pub mod session;

use std::sync::Arc;

use askama::Template;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

use crate::api::error::{ApiError, status_of};
use crate::http::AppState;

/// The UI's state: the REST state and the secret its CSRF tokens are made with.
pub struct UiState {
    pub app: Arc<AppState>,
    /// Random per process: tokens of a previous process are refused (sign in again).
    pub secret: [u8; 32],
}

/// The UI's routes, to be merged into the REST router (which owns the fallback).
pub fn router(app: Arc<AppState>) -> Router {
    let state = Arc::new(UiState { app, secret: rand::random() });
    Router::new()
        .route("/", get(memories::page))
        .route("/signin", get(session::signin_page).post(session::signin))
        .route("/signout", post(session::signout))
        .route("/memories", post(memories::create))
        .route("/memories/bulk-forget", post(memories::bulk_forget))
        .route("/memories/{id}", get(memories::history))
        .route("/export", get(memories::export))
        .route("/memories/{id}/edit", post(memories::edit))
        .route("/memories/{id}/{action}", post(memories::act))
        .route("/conversations", get(conversations::list))
        .route("/conversations/{id}", get(conversations::page))
        .route("/health", get(health::page))
        .route("/jobs/{id}/retry", post(health::retry))
        .route("/agents", get(agents::pick))
        .route("/agents/{id}", get(agents::page).post(agents::save))
        .route("/assets/ui.css", get(stylesheet))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(state)
        .merge(api_reference())
}

/// `/docs`: the API reference, Swagger UI's vendored assets (from the
/// `utoipa-swagger-ui` crate, embedded in the binary) reading `/openapi.json`.
fn api_reference() -> Router {
    let ui = utoipa_swagger_ui::SwaggerUi::new("/docs")
        .config(utoipa_swagger_ui::Config::new(["/openapi.json"]));
    Router::from(ui).layer(axum::middleware::map_response(docs_headers))
}

/// Swagger UI sets inline styles (never inline scripts): its pages allow those only.
pub const DOCS_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; font-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

async fn docs_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(DOCS_CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    res
}

/// The stylesheet, embedded in the binary.
async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("../../assets/ui.css"),
    )
}

/// No inline script, nothing from another origin, forms only to this server, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'; connect-src 'self'";

async fn security_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    res
}

/// A page, or the error page with the error's status.
pub type Page = Result<Response, UiError>;

/// An error shown as a page: the status and message of the one error format.
pub struct UiError(pub ApiError);

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        UiError(e)
    }
}

impl From<engram_core::Error> for UiError {
    fn from(e: engram_core::Error) -> Self {
        UiError(e.into())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    status: u16,
    code: &'a str,
    message: &'a str,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = status_of(self.0.code);
        let page = ErrorPage {
            status: status.as_u16(),
            code: self.0.code.as_str(),
            message: &self.0.message,
        };
        let mut res = (status, render(&page)).into_response();
        // A page refused for the rate says when to come back, as the API does.
        if let Some(secs) = self.0.retry_after {
            res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

/// How pages show a timestamp: `2026-11-24 14:04 UTC` from the API's RFC 3339 form (the full
/// value stays in the element's `datetime` attribute).
pub trait Dates {
    fn ts(&self, rfc3339: &str) -> String {
        match (rfc3339.get(..10), rfc3339.get(11..16)) {
            (Some(d), Some(t)) => format!("{d} {t} UTC"),
            _ => rfc3339.to_string(),
        }
    }
}

/// `s` as one path segment of a link (`/conversations/{id}`): percent-encoded, a space as
/// `%20` (a `+` is a plus sign in a path) and a `/` as `%2F`, so any id a client chose
/// leads back to its own page.
pub fn path_segment(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

/// Render a template to an HTML response (a template error is a 500 with a plain message).
pub fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template error");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error; see the server log")
                .into_response()
        }
    }
}
