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

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;

/// The matched route of a request, carried on its response.
#[derive(Debug, Clone)]
struct Route(String);

/// Inside the router: remember the matched route on the response.
pub async fn tag_route(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let mut resp = next.run(req).await;
    if let Some(r) = route {
        resp.extensions_mut().insert(Route(r));
    }
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
