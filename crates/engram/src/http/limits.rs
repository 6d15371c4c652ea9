//! Request limits: per API key, per client address, and for the whole server.
//!
//! - **Rate.** Every request with a key is charged to it (the SHA-256 of the bearer secret,
//!   so no secret is kept in memory); a request whose key is missing or unknown, when keys
//!   are required, is charged to its client address ([`Limits::charge_address`], called by
//!   the [`super::Auth`] extractor), so cycling through made-up keys does not escape the
//!   limit. Local mode (loopback, no keys) has no rate limit: it serves one trusted user. Over the limit: `429 rate_limited` with
//!   `Retry-After` (whole seconds, at least 1). The limiter is `governor`'s keyed GCRA
//!   (a token bucket without a timer task: `rate` per second, `burst` at once).
//! - **Concurrency.** At most `max_concurrent_requests` requests are handled at once; more
//!   are shed with `503 overloaded` right away rather than queued (tower's `LoadShed` over
//!   `ConcurrencyLimit`), so a saturated server answers quickly and clients back off.
//!
//! - **Bodies.** A request body that sends nothing for `--body-timeout-secs` is refused with
//!   `408 request_timeout` ([`guard_body`], tower-http's `TimeoutBody`): a client that
//!   stalls its upload does not hold a concurrency slot, or a shutdown, for ever.
//!
//! Keyed state grows with the keys and addresses seen; entries that are full again are
//! dropped every [`SWEEP_EVERY`] requests.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use engram_core::ErrorCode;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::AppState;
use super::error::ApiError;

/// A request body's rules: its size limit and how long it may send nothing.
#[derive(Debug, Clone, Copy)]
pub struct BodyRules {
    pub max_bytes: usize,
    pub idle: std::time::Duration,
}

/// Every request's body: timed out when it stalls, and its rules noted for the errors'
/// messages.
pub async fn guard_body(rules: BodyRules, mut req: Request, next: Next) -> Response {
    req.extensions_mut().insert(rules);
    let req =
        req.map(|b| axum::body::Body::new(tower_http::timeout::TimeoutBody::new(rules.idle, b)));
    next.run(req).await
}

/// The rules [`guard_body`] noted on a request.
pub fn body_rules(req: &Request) -> Option<BodyRules> {
    req.extensions().get::<BodyRules>().copied()
}

/// Whether a body read failed because the body stalled.
pub fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Requests between two sweeps of the keyed state.
pub const SWEEP_EVERY: u64 = 10_000;

/// The per-key and per-address rate limiter (None: limits off).
pub struct Limits {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    seen: AtomicU64,
}

impl Limits {
    /// `rate` requests per second with bursts of `burst`; a rate of 0 turns limits off.
    pub fn new(rate: u32, burst: u32) -> Self {
        let limiter = NonZeroU32::new(rate).map(|r| {
            let burst = NonZeroU32::new(burst).unwrap_or(r);
            RateLimiter::keyed(Quota::per_second(r).allow_burst(burst))
        });
        Self { limiter, seen: AtomicU64::new(0) }
    }

    /// Charge one request to `key`; the error is the 429 to send.
    fn charge(&self, key: String) -> Result<(), ApiError> {
        let Some(l) = &self.limiter else { return Ok(()) };
        if self.seen.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            l.retain_recent();
            l.shrink_to_fit();
        }
        l.check_key(&key).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ApiError::rate_limited(secs.max(1))
        })
    }

    /// Charge a request whose key was not valid to its client address as well.
    pub fn charge_address(&self, parts: &Parts) -> Result<(), ApiError> {
        self.charge(address_key(parts.extensions.get::<ConnectInfo<SocketAddr>>()))
    }

    /// Charge a sign-in attempt of the web UI to its client address, before its key is
    /// looked up: a guess that is refused for the rate is not tried at all.
    pub fn charge_signin(&self, peer: Option<&ConnectInfo<SocketAddr>>) -> Result<(), ApiError> {
        self.charge(address_key(peer))
    }
}

fn address_key(peer: Option<&ConnectInfo<SocketAddr>>) -> String {
    match peer {
        Some(ConnectInfo(a)) => format!("addr:{}", a.ip()),
        None => "addr:unknown".to_string(),
    }
}

/// The rate-limit middleware of the whole router: a request with a key is charged to it.
/// Requests without a key are charged to their address by [`super::Auth`] when keys are
/// required; local mode (loopback, no keys: one trusted user) has no rate limit.
pub async fn rate_limit(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(secret) = bearer_secret(&req) {
        let key = format!("key:{}", crate::keys::hash(secret));
        if let Err(e) = st.limits.charge(key) {
            return e.into_response();
        }
    }
    next.run(req).await
}

/// The secret of an `Authorization: Bearer <secret>` header (any case of the scheme).
pub fn bearer_secret<B>(req: &axum::http::Request<B>) -> Option<&str> {
    let h = req.headers().get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    parse_bearer(h)
}

pub use crate::api::auth::parse_bearer;

/// The answer to a request shed because the server is at `max_concurrent_requests`.
pub async fn overloaded(_: tower::BoxError) -> Response {
    let mut e = ApiError::new(
        ErrorCode::Overloaded,
        "the server is handling as many requests as it may; retry shortly",
    );
    e.retry_after = Some(1);
    e.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_limits_per_key_and_tells_when_to_retry() {
        let l = Limits::new(1, 3);
        for _ in 0..3 {
            assert!(l.charge("key:a".into()).is_ok());
        }
        let e = l.charge("key:a".into()).unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimited);
        assert_eq!(e.retry_after, Some(1));
        assert!(l.charge("key:b".into()).is_ok(), "keys have their own budget");
        let off = Limits::new(0, 0);
        for _ in 0..1000 {
            assert!(off.charge("key:a".into()).is_ok());
        }
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(parse_bearer("Bearer abc"), Some("abc"));
        assert_eq!(parse_bearer("bearer  abc "), Some("abc"));
        assert_eq!(parse_bearer("BEARER abc"), Some("abc"));
        assert_eq!(parse_bearer("Basic abc"), None);
        assert_eq!(parse_bearer("Bearer "), None);
        assert_eq!(parse_bearer("Bearer"), None);
    }
}
