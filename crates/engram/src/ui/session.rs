//! Who is looking: the API key in the `engram_key` cookie (HttpOnly, SameSite=Strict, set by
//! the sign-in form) becomes the [`Principal`] through the same lookup as a bearer key; in
//! local mode (no keys, loopback listener, a loopback `Host`) a browser without the cookie is
//! the local admin. A page asked for without a valid session redirects to `/signin`.
//!
//! CSRF: every form carries a token derived from the process's secret and the session's key
//! ([`Viewer::csrf`]); a post whose token does not match, or whose `Origin` is another site,
//! is refused (403) before anything is done. The cookie's SameSite=Strict is the first line;
//! the token is the second.

use std::sync::Arc;

use askama::Template;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use engram_core::ErrorCode;
use engram_core::model::{KeyRole, Principal, TenantId};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{Page, UiError, UiState, render};
use crate::api::auth::Caller;
use crate::api::error::ApiError;

/// The cookie that holds the signed-in API key.
pub const COOKIE: &str = "engram_key";

/// The signed-in caller of a page.
pub struct Viewer {
    pub principal: Principal,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    /// Signed in as the local admin (no keys exist).
    pub local: bool,
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
            let bearer = format!("Bearer {}", c.value());
            return match crate::api::auth::identify(engine, Some(bearer.as_bytes())).await {
                Ok(Caller::Key(p)) => {
                    let csrf = token(&state.secret, &crate::keys::hash(c.value()));
                    Ok(Viewer { principal: p, csrf, local: false })
                }
                // Revoked or unknown: sign in again.
                Ok(Caller::UnknownKey { .. } | Caller::NoKey) | Err(_) => {
                    Err((jar.remove(Cookie::build(COOKIE).path("/")), Redirect::to("/signin"))
                        .into_response())
                }
            };
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
    jar: CookieJar,
    axum_extra::extract::Form(form): axum_extra::extract::Form<SigninForm>,
) -> Page {
    check_origin(&headers)?;
    let key = form.key.trim();
    let bearer = format!("Bearer {key}");
    let ok = !key.is_empty()
        && matches!(
            crate::api::auth::identify(&state.app.engine, Some(bearer.as_bytes())).await,
            Ok(Caller::Key(_))
        );
    if !ok {
        let mut res = render(&SigninPage { error: Some("unknown or revoked API key") });
        *res.status_mut() = axum::http::StatusCode::UNAUTHORIZED;
        return Ok(res);
    }
    // Behind a TLS-terminating proxy (it says `X-Forwarded-Proto: https`) the cookie is
    // `Secure`, so a browser never sends the key over plain HTTP; served over HTTP itself
    // (loopback, a LAN) it cannot be, or the browser would drop it.
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let cookie = Cookie::build((COOKIE, key.to_string()))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(https)
        .build();
    Ok((jar.add(cookie), Redirect::to("/")).into_response())
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// Forget the session cookie.
pub async fn signout(
    viewer: Viewer,
    jar: CookieJar,
    axum_extra::extract::Form(form): axum_extra::extract::Form<CsrfForm>,
) -> Page {
    viewer.check_csrf(&form.csrf)?;
    Ok((jar.remove(Cookie::build(COOKIE).path("/")), Redirect::to("/signin")).into_response())
}
