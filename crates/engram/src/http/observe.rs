//! HTTP request metrics for `/metrics` (issue 15, the operator's view):
//! `engram_http_requests_total{method, route, status}` and
//! `engram_http_request_seconds{method, route}` (a histogram of the time to the response's
//! head; a stream's body may go on after it).
//!
//! `route` is the matched route pattern (`/v1/memories/{id}`, never the id itself, so the
//! label set stays small); requests answered before routing — refused by the rate limit or
//! the load shedder, or matching no route — count as `route="none"`. Two layers make this:
//! [`tag_route`] runs inside the router, where the matched path is known, and puts it on the
//! response; [`observe`] wraps everything, so it also sees the 429s and 503s of the layers
//! outside the router.
//!
//! [`tag_route`] also opens the request's span, named `{method} {route}` (target
//! [`REQUEST_SPAN_TARGET`]; attributes method, route, status), the root of a trace when
//! traces are exported (`crate::telemetry`). A span's name is fixed once it starts, so it is
//! opened where the route is known: requests answered before routing are counted by the
//! metrics but have no span. The log lines leave the span out (the log is not an access log).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

use super::AppState;

/// The matched route of a request, carried on its response.
#[derive(Debug, Clone)]
struct Route(String);

/// The target of the HTTP request span.
pub const REQUEST_SPAN_TARGET: &str = "engram::http::request";

/// Inside the router: open the request's span and remember the matched route on the
/// response.
pub async fn tag_route(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let Some(route) = route else { return next.run(req).await };
    let method = req.method().clone();
    let span = tracing::info_span!(
        target: REQUEST_SPAN_TARGET,
        "http request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = method.as_str(),
        http.route = route.as_str(),
        http.response.status_code = tracing::field::Empty,
    );
    let mut resp = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", resp.status().as_u16());
    resp.extensions_mut().insert(Route(route));
    resp
}

/// Around everything: count the request and time it, by method, route and status.
pub async fn observe(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let method = req.method().as_str().to_string();
    let started = Instant::now();
    let resp = next.run(req).await;
    let route = resp.extensions().get::<Route>().map_or("none", |r| r.0.as_str());
    let m = st.engine.metrics();
    let labels = format!("method=\"{method}\",route=\"{route}\"");
    m.inc(
        "engram_http_requests_total",
        &format!("{labels},status=\"{}\"", resp.status().as_u16()),
        1,
    );
    m.observe("engram_http_request_seconds", &labels, started.elapsed());
    resp
}
