//! Who is calling: an `Authorization` header (or an MCP `--key`) becomes the [`Principal`]
//! its key stands for, the same way for every front door. What is the transport's own — the
//! local-mode `Host`/`Origin` check and rate-limit charges of HTTP — stays in the transport.

use engram_core::ErrorCode;
use engram_core::engine::Engine;
use engram_core::model::Principal;

use super::error::ApiError;

/// The caller of a request, as far as its credentials tell.
pub enum Caller {
    /// A valid, active key.
    Key(Principal),
    /// A key that is unknown or revoked; `foreign` when it is not an engram key at all (an
    /// SDK's placeholder or another service's key).
    UnknownKey { foreign: bool },
    /// No key at all.
    NoKey,
}

/// `Bearer <secret>` → the secret; the scheme is case-insensitive (RFC 9110 §11.1).
pub fn parse_bearer(h: &str) -> Option<&str> {
    h.trim_start()
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, k)| k.trim())
        .filter(|s| !s.is_empty())
}

/// Identify the caller of a request from its `Authorization` header value (`None`: no
/// header). A header that is not a bearer token is a 401.
pub async fn identify(engine: &Engine, authorization: Option<&[u8]>) -> Result<Caller, ApiError> {
    let Some(raw) = authorization else { return Ok(Caller::NoKey) };
    let h = std::str::from_utf8(raw)
        .map_err(|_| ApiError::new(ErrorCode::Unauthorized, "malformed Authorization header"))?;
    let Some(secret) = parse_bearer(h) else {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "expected 'Authorization: Bearer <key>'",
        ));
    };
    Ok(match engine.principal_for_key(&crate::keys::hash(secret)).await? {
        Some(p) => Caller::Key(p),
        None => Caller::UnknownKey { foreign: !secret.starts_with("engram_") },
    })
}
