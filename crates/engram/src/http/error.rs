//! Errors over HTTP: the response of an [`ApiError`] (its status, the JSON body, `Retry-After`),
//! and the JSON, query and path extractors that turn every rejection into that form.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use engram_core::ErrorCode;
use serde::de::DeserializeOwned;

pub use crate::api::error::{ApiError, ApiResult, ErrorBody, ErrorDetail, parse_body, status_of};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.as_str().to_string(),
                message: crate::api::error::capped(self.message),
            },
        };
        let mut r = (status_of(self.code), Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

/// A JSON request body whose rejections are engram errors: malformed JSON → 400
/// `invalid_json`; a body of the wrong shape (not an object, unknown, duplicate, missing or
/// mistyped field) → 400 `invalid_input`; over the size limit → 413 `payload_too_large`;
/// wrong content type → 400 `invalid_json`.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                let m = m.trim();
                m.eq_ignore_ascii_case("application/json") || m.ends_with("+json")
            });
        if !json_type {
            return Err(ApiError::new(
                ErrorCode::InvalidJson,
                "expected a JSON body with Content-Type: application/json",
            ));
        }
        if let Some(e) = compressed_body(req.headers()) {
            return Err(e);
        }
        let ApiBytes(bytes) = ApiBytes::from_request(req, state).await?;
        parse_body(&bytes).map(ApiJson)
    }
}

/// The error of a body sent compressed (any `Content-Encoding` but `identity`), which
/// engram does not read: it would otherwise read as malformed JSON.
pub fn compressed_body(headers: &axum::http::HeaderMap) -> Option<ApiError> {
    let enc = headers.get(axum::http::header::CONTENT_ENCODING)?;
    (!enc.as_bytes().eq_ignore_ascii_case(b"identity")).then(|| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!(
                "Content-Encoding '{}' is not supported: send the JSON body uncompressed",
                String::from_utf8_lossy(enc.as_bytes())
            ),
        )
    })
}

/// A raw request body whose rejections are engram errors: over the size limit → 413
/// `payload_too_large` (naming the limit), stalled → 408 `request_timeout`, unreadable → 400
/// `invalid_input` (the proxy's bodies, passed on).
pub struct ApiBytes(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let rules = super::limits::body_rules(&req);
        axum::body::Bytes::from_request(req, state).await.map(ApiBytes).map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    match rules {
                        Some(r) => format!(
                            "request body is larger than the server's limit of {} bytes \
                             (--max-body-bytes)",
                            r.max_bytes
                        ),
                        None => "request body is larger than the server's limit".to_string(),
                    },
                )
            } else if super::limits::timed_out(&e) {
                ApiError::new(
                    ErrorCode::RequestTimeout,
                    format!(
                        "the request body stopped arriving: nothing for {} s \
                         (--body-timeout-secs)",
                        rules.map_or(0, |r| r.idle.as_secs())
                    ),
                )
            } else {
                ApiError::invalid(format!("cannot read request body: {}", e.body_text()))
            }
        })
    }
}

/// `Query<T>` whose rejections are engram errors (400 `invalid_input`).
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(e) => Err(query_rejection(e)),
        }
    }
}

fn query_rejection(e: QueryRejection) -> ApiError {
    ApiError::invalid(format!(
        "invalid query string: {}",
        crate::api::error::plain_types(&e.body_text())
    ))
}

/// `Path<T>` whose rejections are engram errors (400 `invalid_input`): a path segment that
/// is not valid UTF-8 once percent-decoded (`/v1/memories/%FF`) gets the one error format
/// instead of axum's plain-text body.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(ApiError::invalid(format!("invalid path: {}", e.body_text()))),
        }
    }
}
