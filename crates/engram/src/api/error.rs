//! The one error format of every front door: `{"error": {"code", "message"}}` with the
//! HTTP status of its code (REST, MCP over HTTP), the same code and message in an MCP tool
//! result, and the same message on the command line. Engine errors become [`ApiError`]
//! here only; the transports render it ([`crate::http::error`] for axum).

use axum::http::StatusCode;
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
        ErrorCode::EmbedderUnavailable
        | ErrorCode::LlmUnavailable
        | ErrorCode::StoreUnavailable
        | ErrorCode::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::UpstreamUnavailable => StatusCode::BAD_GATEWAY,
        ErrorCode::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        if let Error::Internal(detail) = &e {
            tracing::error!(error = %detail, "internal error");
        } else if let Error::StoreUnavailable(detail) = &e {
            tracing::warn!(error = %detail, "database unavailable");
        } else if let Error::Llm(detail) = &e {
            tracing::warn!(error = %detail, "LLM failed");
        }
        ApiError::new(e.code(), e.public_message())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Parse a JSON object body: syntax errors are `invalid_json`; a body that is not an object
/// (serde would accept a positional array for a struct), unknown, duplicate, missing or
/// mistyped fields are `invalid_input` naming the field.
/// A serde message in the words of the API, not of Rust's types: "expected usize" is
/// "expected a whole number, 0 or more" (found by a tester: `expected i64`, `expected f64`).
pub fn plain_types(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, words) in [
        ("invalid digit found in string", "not a whole number"),
        ("number too large to fit in target type", "the number is too large"),
        ("number too small to fit in target type", "the number is too small"),
        ("cannot parse integer from empty string", "expected a whole number, got nothing"),
    ] {
        out = out.replace(rust, words);
    }
    for (rust, words) in [
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected u32", "expected a whole number, 0 or more"),
        ("expected u16", "expected a whole number, 0 or more"),
        ("expected u8", "expected a whole number, 0 or more"),
        ("expected i64", "expected a whole number"),
        ("expected i32", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
    ] {
        out = out.replace(rust, words);
    }
    out
}

/// An error message as it is sent: whole up to [`MAX_MESSAGE_CHARS`], else cut with an
/// ellipsis (a 5,000-character category or field name came back whole, twice).
pub fn capped(message: String) -> String {
    if message.chars().count() <= MAX_MESSAGE_CHARS {
        return message;
    }
    let mut cut: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

/// Characters of an error message at most.
pub const MAX_MESSAGE_CHARS: usize = 400;

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
                let inner = plain_types(&inner.to_string());
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

/// The command line's rendering: the operator sees the whole message (internal causes
/// included) and the code.
pub fn cli_error(e: Error) -> anyhow::Error {
    anyhow::Error::new(CliError { message: e.to_string(), code: e.code().as_str() })
}

/// An engine error as the CLI reports it: `message (code)` in plain output, both fields
/// with `--json`.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: &'static str,
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for CliError {}
