//! Who is looking: a sign-in (the `engram_session` cookie: HttpOnly, SameSite=Strict, set by
//! the sign-in form) becomes the [`Principal`] of the API key it was made with; in local mode
//! (no keys, loopback listener, a loopback `Host`) a browser without the cookie is the local
//! admin. A page asked for without a live sign-in redirects to `/signin`.
//!
//! The cookie holds a random token, never the key: the store keeps the token's SHA-256 with
//! the key's id (`ui_sessions`), so a copied cookie is worth one sign-in, not the key, and the
//! sign-in ends at sign-out (the row is deleted), after [`UI_SESSION_TTL`], or when the key
//! is revoked — on every process serving the UI, across restarts. A cookie of an older
//! version that held the key itself (`engram_key`) is cleared and asks for a new sign-in.
//!
//! CSRF: every form carries the sign-in's own random token (stored with it; local mode's is
//! derived from the process's secret) ([`Viewer::csrf`]); a post whose token does not match,
//! or whose `Origin` is another site, is refused (403) before anything is done. The cookie's
//! SameSite=Strict is the first line; the token is the second.

use std::sync::Arc;

use askama::Template;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use engram_core::ErrorCode;
use engram_core::engine::UI_SESSION_TTL;
use engram_core::model::{KeyRole, Principal, TenantId};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{Page, UiError, UiState, render};
use crate::api::error::ApiError;

/// The cookie that holds the sign-in's token.
pub const COOKIE: &str = "engram_session";
/// The cookie of versions that kept the API key itself in the browser: cleared on sight.
const LEGACY_COOKIE: &str = "engram_key";

/// The signed-in caller of a page.
pub struct Viewer {
    pub principal: Principal,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    /// Signed in as the local admin (no keys exist).
    pub local: bool,
    /// The hash of the sign-in's token (None in local mode).
    session: Option<String>,
}

impl Viewer {
    /// "admin", "agent support-bot", "user alice".
    pub fn who(&self) -> String {
        match &self.principal.role {
            KeyRole::Admin => "admin".into(),
            KeyRole::Agent(a) => format!("agent {a}"),
            KeyRole::User(u) => format!("user {u}"),
        }
    }
    /// The user a `user` key is bound to.
    pub fn bound_user(&self) -> Option<String> {
        match &self.principal.role {
            KeyRole::User(u) => Some(u.to_string()),
            KeyRole::Admin | KeyRole::Agent(_) => None,
        }
    }
    /// The agent an `agent` key is bound to.
    pub fn bound_agent(&self) -> Option<String> {
        match &self.principal.role {
            KeyRole::Agent(a) => Some(a.to_string()),
            KeyRole::Admin | KeyRole::User(_) => None,
        }
    }
    /// Refuse a post whose CSRF token is not this session's.
    pub fn check_csrf(&self, token: &str) -> Result<(), UiError> {
        if constant_time_eq(token.as_bytes(), self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                "the form's security token is missing or stale; reload the page and try again",
            )
            .into())
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn token(secret: &[u8; 32], session: &str) -> String {
    let mut h = Sha256::new();
    h.update(secret);
    h.update(b"\0csrf\0");
    h.update(session.as_bytes());
    hex::encode(h.finalize())
}

/// A post from a page of another site (its `Origin` is not this server) is refused.
fn check_origin(headers: &HeaderMap) -> Result<(), UiError> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let same = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .is_some_and(|(_, rest)| rest.trim_end_matches('/').eq_ignore_ascii_case(host));
    if same {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Forbidden,
            "forms are only accepted from this server's own pages",
        )
        .into())
    }
}

impl FromRequestParts<Arc<UiState>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<UiState>,
    ) -> Result<Self, Self::Rejection> {
        if parts.method == axum::http::Method::POST {
            check_origin(&parts.headers).map_err(IntoResponse::into_response)?;
        }
        let jar = CookieJar::from_headers(&parts.headers);
        let engine = &state.app.engine;
        if let Some(c) = jar.get(COOKIE) {
            let hash = crate::keys::hash(c.value());
            return match engine.ui_session(&hash).await {
                Ok(Some((principal, csrf))) => {
                    Ok(Viewer { principal, csrf, local: false, session: Some(hash) })
                }
                // Signed out, expired or revoked: sign in again.
                Ok(None) => Err(signed_out(jar)),
                // The store is down: say so, and keep the sign-in for when it is back.
                Err(e) => Err(UiError::from(e).into_response()),
            };
        }
        if jar.get(LEGACY_COOKIE).is_some() {
            return Err(signed_out(jar));
        }
        let local = state.app.loopback
            && !engine.keys_exist().await.map_err(|e| UiError::from(e).into_response())?;
        if local {
            crate::http::check_local_request(parts)
                .map_err(|e| UiError::from(e).into_response())?;
            return Ok(Viewer {
                principal: Principal { tenant: TenantId::default_tenant(), role: KeyRole::Admin },
                csrf: token(&state.secret, "local"),
                local: true,
                session: None,
            });
        }
        Err(Redirect::to("/signin").into_response())
    }
}

#[derive(Template)]
#[template(path = "signin.html")]
struct SigninPage<'a> {
    error: Option<&'a str>,
}

pub async fn signin_page() -> Response {
    render(&SigninPage { error: None })
}

#[derive(Deserialize)]
pub struct SigninForm {
    #[serde(default)]
    key: String,
}

/// Check the key and keep it in the session cookie.
pub async fn signin(
    State(state): State<Arc<UiState>>,
    headers: HeaderMap,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    jar: CookieJar,
    axum_extra::extract::Form(form): axum_extra::extract::Form<SigninForm>,
) -> Page {
    check_origin(&headers)?;
    // Every attempt counts against the client address's rate (`--rate-limit`), as requests
    // with a missing or unknown key do, and before the key is looked up.
    state.app.limits.charge_signin(peer.as_ref().map(|p| &p.0))?;
    let key = form.key.trim();
    let token = random_hex();
    let started = if key.is_empty() {
        None
    } else {
        let (key_hash, token_hash) = (crate::keys::hash(key), crate::keys::hash(&token));
        state.app.engine.start_ui_session(&key_hash, &token_hash, &random_hex()).await?
    };
    if started.is_none() {
        let mut res = render(&SigninPage { error: Some("unknown or revoked API key") });
        *res.status_mut() = axum::http::StatusCode::UNAUTHORIZED;
        return Ok(res);
    }
    // Behind a TLS-terminating proxy (it says `X-Forwarded-Proto: https`) the cookie is
    // `Secure`, so a browser never sends it over plain HTTP; served over HTTP itself
    // (loopback, a LAN) it cannot be, or the browser would drop it.
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let cookie = Cookie::build((COOKIE, token))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(https)
        .max_age(UI_SESSION_TTL)
        .build();
    let jar = match jar.get(LEGACY_COOKIE) {
        Some(_) => jar.remove(Cookie::build(LEGACY_COOKIE).path("/")),
        None => jar,
    };
    Ok((jar.add(cookie), Redirect::to("/")).into_response())
}

/// 32 random bytes, hex: a sign-in's token or its CSRF token.
fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Clear the sign-in cookies the browser sent and go to the sign-in page.
fn signed_out(mut jar: CookieJar) -> Response {
    for name in [COOKIE, LEGACY_COOKIE] {
        if jar.get(name).is_some() {
            jar = jar.remove(Cookie::build(name).path("/"));
        }
    }
    (jar, Redirect::to("/signin")).into_response()
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// End the sign-in: its row is deleted, so the token is worth nothing any more, wherever it
/// was copied to.
pub async fn signout(
    State(state): State<Arc<UiState>>,
    viewer: Viewer,
    jar: CookieJar,
    axum_extra::extract::Form(form): axum_extra::extract::Form<CsrfForm>,
) -> Page {
    viewer.check_csrf(&form.csrf)?;
    if let Some(session) = &viewer.session {
        state.app.engine.end_ui_session(session).await?;
    }
    Ok(signed_out(jar))
}
