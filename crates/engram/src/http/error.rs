//! The wire form of errors: `{"error": {"code": "...", "message": "..."}}` with the status
//! of its code, and the JSON/query extractors that turn every rejection into that form.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use engram_core::{Error, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

/// The error body.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `invalid_input`, `not_found`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Seconds after which a retry may succeed (`Retry-After`), for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), retry_after: None }
    }
    /// 429: this key (or client address) sent more requests than its limit.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self {
            code: ErrorCode::RateLimited,
            message: format!(
                "too many requests for this key; retry in {retry_after_secs} s (Retry-After)"
            ),
            retry_after: Some(retry_after_secs),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }
}

/// The one table from code to status (exhaustive: a new code must choose its status).
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidInput | ErrorCode::InvalidJson => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::EmbedderUnavailable | ErrorCode::StoreUnavailable | ErrorCode::Overloaded => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        if let Error::Internal(detail) = &e {
            tracing::error!(error = %detail, "internal error");
        } else if let Error::StoreUnavailable(detail) = &e {
            tracing::warn!(error = %detail, "database unavailable");
        }
        ApiError::new(e.code(), e.public_message())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail { code: self.code.as_str().to_string(), message: self.message },
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
        let bytes = axum::body::Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "request body is larger than the server's limit",
                )
            } else {
                ApiError::invalid(format!("cannot read request body: {}", e.body_text()))
            }
        })?;
        parse_body(&bytes).map(ApiJson)
    }
}

/// Parse a JSON object body: syntax errors are `invalid_json`; a body that is not an object
/// (serde would accept a positional array for a struct), unknown, duplicate, missing or
/// mistyped fields are `invalid_input` naming the field.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|b| *b != b'{') {
        // Still report malformed JSON as such.
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            return Err(ApiError::new(ErrorCode::InvalidJson, format!("malformed JSON: {e}")));
        }
        return Err(ApiError::invalid("the request body must be a JSON object"));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                ApiError::new(ErrorCode::InvalidJson, format!("malformed JSON: {inner}"))
            }
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                if path == "." {
                    ApiError::invalid(format!("invalid request body: {inner}"))
                } else {
                    ApiError::invalid(format!("invalid request body: {path}: {inner}"))
                }
            }
        }
    })?;
    de.end().map_err(|e| ApiError::new(ErrorCode::InvalidJson, format!("malformed JSON: {e}")))?;
    super::dto::check_no_nul(bytes)?;
    Ok(value)
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
    ApiError::invalid(format!("invalid query string: {}", e.body_text()))
}

pub type ApiResult<T> = Result<T, ApiError>;

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
