//! The REST API (SPEC §4): router, shared state, authentication and the OpenAPI document;
//! the router also serves MCP at `/mcp` ([`crate::mcp`]) with the same authentication.
//!
//! **API Boundary:** handlers only parse wire input into core types, call one
//! [`engram_core::engine::Engine`] method with the caller's [`Principal`], and render the
//! result; every rule lives in the engine.
//!
//! Authentication: `Authorization: Bearer <key>`; the key's SHA-256 is looked up in the store.
//! With no active key in the store and a loopback listener, the server is in **local mode**:
//! requests without a key (or with one that is not an engram key, as the LLM SDKs send) act
//! as admin of tenant `default`.

pub mod conversations;
pub mod error;
pub mod limits;
pub mod mcp;
pub mod memories;
pub mod metrics;
pub mod observe;
pub mod openapi;
pub mod other;
pub mod proxy;
pub mod search;
pub mod serve;
pub mod state;
pub mod summaries;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::request::Parts;
use axum::routing::{get, post};
use axum::{Json, Router};
use engram_core::ErrorCode;
use engram_core::engine::Engine;
use engram_core::model::{KeyRole, Principal, TenantId};
use utoipa::OpenApi;

use crate::api::auth::Caller;
use crate::api::{dto, results};
use error::ApiError;

/// State shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    /// True when the listener is on a loopback address (local mode is allowed).
    pub loopback: bool,
    /// Cancelled at shutdown: ends the open MCP streams so the server can stop.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Per-key and per-address request limits ([`limits`]).
    pub limits: Arc<limits::Limits>,
    /// The memory proxy's upstreams ([`proxy`]).
    pub proxy: proxy::Upstreams,
}

/// The authenticated caller of a request.
pub struct Auth(pub Principal);

impl FromRequestParts<Arc<AppState>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        // Two keys in one request: which one counts would be a guess.
        if parts.headers.get_all(axum::http::header::AUTHORIZATION).iter().count() > 1
            || parts.headers.get_all("x-api-key").iter().count() > 1
        {
            return Err(ApiError::invalid("send one API key header, not several"));
        }
        // The Anthropic SDKs send their key as `x-api-key` (the memory proxy's clients).
        let api_key = parts.headers.get("x-api-key").map(|k| [b"Bearer ", k.as_bytes()].concat());
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .map(|h| h.as_bytes())
            .or(api_key.as_deref());
        match crate::api::auth::identify(&state.engine, header).await? {
            Caller::Key(p) => Ok(Auth(p)),
            // The OpenAI and Anthropic SDKs always send a key: in local mode one that is
            // not an engram key is no credential, as if none were sent (an unknown or
            // revoked engram key is still refused: its sender expects it to count).
            Caller::UnknownKey { foreign: false } => {
                // Made-up keys each have a fresh budget: charge the client address too.
                state.limits.charge_address(parts)?;
                Err(ApiError::new(ErrorCode::Unauthorized, "unknown or revoked API key"))
            }
            caller @ (Caller::NoKey | Caller::UnknownKey { foreign: true }) => {
                if state.loopback && !state.engine.keys_exist().await? {
                    check_local_request(parts)?;
                    Ok(Auth(Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin }))
                } else {
                    state.limits.charge_address(parts)?;
                    let message = match caller {
                        Caller::NoKey => "missing API key: send 'Authorization: Bearer <key>'",
                        Caller::Key(_) | Caller::UnknownKey { .. } => "unknown or revoked API key",
                    };
                    Err(ApiError::new(ErrorCode::Unauthorized, message))
                }
            }
        }
    }
}

/// Local mode trusts every process of the machine, not every web page its browser opens: a
/// request without a key must be addressed to a loopback name (`Host`), which defeats DNS
/// rebinding (a page of `attacker.example` whose name now resolves to 127.0.0.1 still sends
/// `Host: attacker.example`), and must not come from a page of another site (`Origin`).
pub(crate) fn check_local_request(parts: &Parts) -> Result<(), ApiError> {
    let host = parts
        .headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()));
    let host_ok = host.as_deref().is_some_and(|h| is_loopback_name(strip_port(h)));
    if !host_ok {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "local mode (no API keys) only answers requests addressed to localhost, 127.0.0.1 or [::1]; this one was addressed to '{}'. Create an API key (`engram keys create`) to serve other names",
                host.unwrap_or_default().chars().take(100).collect::<String>()
            ),
        ));
    }
    if let Some(origin) = parts.headers.get(axum::http::header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let ok = origin
            .split_once("://")
            .is_some_and(|(_, rest)| is_loopback_name(strip_port(rest.trim_end_matches('/'))));
        if !ok {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "local mode (no API keys) does not answer requests from web pages of other sites (Origin header); create an API key to allow them",
            ));
        }
    }
    Ok(())
}

/// `host:port`, `[v6]:port`, `host` or `[v6]` → the name alone.
fn strip_port(h: &str) -> &str {
    if let Some(rest) = h.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(name, _)| name);
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => h,
    }
}

fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[derive(OpenApi)]
#[openapi(
    info(title = "engram", description = "Long-term memory for LLM agents. Errors are {\"error\": {\"code\", \"message\"}}."),
    paths(
        memories::create, memories::batch, memories::list, memories::get_one, memories::patch, memories::delete,
        memories::history, memories::rate, search::search, search::context, conversations::append,
        conversations::browse, conversations::get, summaries::get, conversations::end, conversations::rate_message, other::put_agent, other::get_agent,
        other::erase_user, other::export_user, other::stats, state::put, state::get, state::delete,
        state::list, healthz
    ),
    components(schemas(error::ErrorBody, dto::MemoryDto, dto::EventDto, dto::MessageDto, results::SearchResultDto, dto::ContextDto, dto::AgentDto)),
    modifiers(&SecurityAddon)
)]
pub struct ApiDoc;

struct SecurityAddon;
impl utoipa::Modify for SecurityAddon {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Liveness: 200 when the server can reach its store.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "ok")))]
pub async fn healthz(State(st): State<Arc<AppState>>) -> Result<Json<serde_json::Value>, ApiError> {
    st.engine.health().await?;
    Ok(Json(serde_json::json!({ "status": "ok" })))
}

async fn openapi_json(State(st): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(openapi::document(st.engine.config().max_content_bytes))
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such endpoint")
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(ErrorCode::MethodNotAllowed, format!("{method} is not allowed on {}", uri.path()))
}

/// The whole HTTP application: at most `max_concurrent` requests at once (more are shed
/// with 503), each charged to its key's rate limit first.
/// The whole HTTP surface: REST, MCP at `/mcp`, and the pages `pages` builds (the web UI;
/// passed in so that `http` does not import the UI, which imports `http`'s state).
pub fn router(
    state: AppState,
    body: limits::BodyRules,
    max_concurrent: usize,
    pages: fn(Arc<AppState>) -> Router,
) -> Router {
    let state = Arc::new(state);
    let max_body_bytes = body.max_bytes;
    let mcp = mcp::service(&state, max_body_bytes);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi_json))
        .route("/metrics", get(metrics::metrics))
        .route("/v1/memories", post(memories::create).get(memories::list))
        .route("/v1/memories/batch", post(memories::batch))
        .route(
            "/v1/memories/{id}",
            get(memories::get_one).patch(memories::patch).delete(memories::delete),
        )
        .route("/v1/memories/{id}/history", get(memories::history))
        .route("/v1/memories/{id}/rating", post(memories::rate))
        .route("/v1/search", post(search::search))
        .route("/v1/context", post(search::context))
        .route(
            "/v1/conversations/{id}/messages",
            post(conversations::append).get(conversations::browse),
        )
        .route("/v1/conversations/{id}", get(conversations::get))
        .route("/v1/summaries/{id}", get(summaries::get))
        .route("/v1/conversations/{id}/end", post(conversations::end))
        .route("/v1/messages/{id}/rating", post(conversations::rate_message))
        .route("/v1/agents/{id}", get(other::get_agent).put(other::put_agent))
        .route("/v1/users/{user_id}", axum::routing::delete(other::erase_user))
        .route("/v1/users/{user_id}/export", get(other::export_user))
        .route("/v1/stats", get(other::stats))
        .route("/v1/chat/completions", post(proxy::chat_completions))
        .route("/v1/messages", post(proxy::messages))
        .route("/v1/models", get(proxy::models))
        .route("/v1/models/{id}", get(proxy::model))
        .route("/v1/sessions/{id}/state", get(state::list))
        .route(
            "/v1/sessions/{id}/state/{key}",
            axum::routing::put(state::put).get(state::get).delete(state::delete),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state.clone())
        .merge(mcp)
        .merge(pages(state.clone()).layer(DefaultBodyLimit::max(max_body_bytes)))
        .route_layer(axum::middleware::from_fn(observe::tag_route))
        .layer(axum::middleware::from_fn_with_state(state.clone(), limits::rate_limit))
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(limits::overloaded))
                .load_shed()
                // One semaphore for every route (`Router::layer` clones the layer per route).
                .layer(tower::limit::GlobalConcurrencyLimitLayer::new(max_concurrent)),
        )
        .layer(axum::middleware::from_fn(move |req, next| limits::guard_body(body, req, next)))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn_with_state(state, observe::observe))
}

#[cfg(test)]
mod tests {
    use super::{is_loopback_name, strip_port};

    #[test]
    fn loopback_names_with_and_without_ports() {
        for h in [
            "localhost:8420",
            "127.0.0.1:1",
            "[::1]:8420",
            "[::1]",
            "LOCALHOST",
            "a.localhost:9",
            "127.8.0.1",
            "localhost.",
        ] {
            assert!(is_loopback_name(strip_port(h)), "{h}");
        }
        for h in [
            "attacker.example:8420",
            "10.0.0.1:8420",
            "localhost.attacker.example",
            "[2001:db8::1]:80",
            "",
            "0.0.0.0:8420",
            "127.0.0.1.nip.io",
        ] {
            assert!(!is_loopback_name(strip_port(h)), "{h}");
        }
    }
}
