//! `/mcp` over HTTP: the MCP tools of [`crate::mcp`] served as streamable HTTP inside the
//! axum application, each request authenticated like a REST request ([`super::Auth`]) and
//! each session bound to the key that opened it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use engram_core::model::Principal;

use super::{AppState, Auth};
use crate::api::error::ApiError;

/// `/mcp`: the MCP tools over streamable HTTP ([`crate::mcp`]), each request authenticated
/// like the REST API. On a loopback listener only loopback `Host` names are accepted (DNS
/// rebinding protection for local mode); elsewhere every request needs a key anyway.
pub fn service(state: &Arc<AppState>, max_body_bytes: usize) -> Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let engine = state.engine.clone();
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown.child_token())
        .with_max_request_body_bytes(max_body_bytes);
    if !state.loopback {
        config = config.disable_allowed_hosts();
    }
    let svc = StreamableHttpService::new(
        move || Ok(crate::mcp::McpServer::http(engine.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new().route_service("/mcp", svc).layer(axum::middleware::from_fn_with_state(
        (state.clone(), SessionOwners::default(), max_body_bytes),
        auth_layer,
    ))
}

/// A `POST` body that is not JSON gets JSON-RPC's parse error (-32700) in a 400, not the
/// transport's plain-text 415 (a compressed one says so); one over `max` bytes gets the REST
/// 413.
async fn json_body(
    headers: &axum::http::HeaderMap,
    body: axum::body::Body,
    max: usize,
) -> Result<axum::body::Body, Response> {
    if let Some(e) = super::error::compressed_body(headers) {
        return Err(parse_error(&e.message));
    }
    let bytes = axum::body::to_bytes(body, max).await.map_err(|_| {
        ApiError::new(
            engram_core::ErrorCode::PayloadTooLarge,
            format!("the request body is over {max} bytes"),
        )
        .into_response()
    })?;
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return Err(parse_error(&format!("the body is not JSON: {e}")));
    }
    Ok(axum::body::Body::from(bytes))
}

/// JSON-RPC's parse error (-32700) in a 400.
fn parse_error(why: &str) -> Response {
    let error = serde_json::json!({ "jsonrpc": "2.0", "id": null,
        "error": { "code": -32700, "message": format!("Parse error: {why}") } });
    (axum::http::StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
}

/// The principal each HTTP MCP session was opened with, by session id (issue 10: a session
/// belongs to the key that sent its `initialize`, not to whoever calls a tool first).
pub type SessionOwners = Arc<Mutex<HashMap<String, Principal>>>;

const SESSION_HEADER: &str = "mcp-session-id";

/// Authenticate a `/mcp` request like any REST request and hand its [`Principal`] to the
/// tools (through the request's extensions); refuse it with the REST 401 body otherwise.
/// A session is bound to the principal of the request that opened it (the one whose
/// response carries the new `mcp-session-id`): every later request of that session (tool
/// calls, listings, the event stream, its `DELETE`) with another key is refused with 403
/// before it reaches the session, so a key that learns a session id can neither take the
/// session over nor lock its owner out.
pub async fn auth_layer(
    State((st, owners, max_body)): State<(Arc<AppState>, SessionOwners, usize)>,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    match Auth::from_request_parts(&mut parts, &st).await {
        Ok(Auth(p)) => {
            let body = if parts.method == axum::http::Method::POST {
                match json_body(&parts.headers, body, max_body).await {
                    Ok(b) => b,
                    Err(refused) => return refused,
                }
            } else {
                body
            };
            let session =
                parts.headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
            if let Some(id) = &session {
                let owners = owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if owners.get(id).is_some_and(|owner| owner != &p) {
                    return ApiError::new(
                        engram_core::ErrorCode::Forbidden,
                        "this MCP session was opened with another key; open a new session",
                    )
                    .into_response();
                }
            }
            let deleting = parts.method == axum::http::Method::DELETE;
            parts.extensions.insert(p.clone());
            let response = next.run(Request::from_parts(parts, body)).await;
            let mut owners = owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match &session {
                None => {
                    if let Some(id) =
                        response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
                    {
                        owners.insert(id.to_string(), p);
                    }
                }
                Some(id) => {
                    // Closed, or unknown to the transport (expired): forget the binding.
                    if (deleting && response.status().is_success())
                        || response.status() == axum::http::StatusCode::NOT_FOUND
                    {
                        owners.remove(id);
                    }
                }
            }
            response
        }
        Err(e) => {
            let mut r = e.into_response();
            if r.status() == axum::http::StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
            }
            r
        }
    }
}
