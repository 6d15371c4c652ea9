//! Errors of the engine, and the one table of public error codes.
//!
//! [`Error`] is what every engine operation returns. [`ErrorCode`] is the closed set of
//! public `snake_case` codes; the HTTP adapter maps each code to a status with an exhaustive
//! `match` (no `_` arm), so adding a code forces a decision about its status.
//! Internal causes (`Error::Internal`) are logged with their chain and never sent to clients.

/// Who has to act on a failure of an external provider (embedder, LLM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultSource {
    /// Bad configuration or credentials: retrying will not help; tell the operator.
    User,
    /// Timeouts, rate limits, 5xx, malformed output: retry with backoff.
    Runtime,
    /// A defect in engram itself: fail loudly.
    Bug,
}

/// Public error codes. **Part of the API contract**: clients match on these strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidInput,
    InvalidJson,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    Unprocessable,
    RateLimited,
    EmbedderUnavailable,
    /// The LLM of a request-path operation (synthesis) failed or timed out.
    LlmUnavailable,
    StoreUnavailable,
    /// The server is handling as many requests as it may (503, retry shortly).
    Overloaded,
    /// The memory proxy's upstream LLM could not be reached (502).
    UpstreamUnavailable,
    /// The memory proxy's upstream LLM did not answer in time (504).
    UpstreamTimeout,
    /// The request's body stopped arriving (408).
    RequestTimeout,
    Internal,
}

impl ErrorCode {
    /// The wire name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Conflict => "conflict",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Unprocessable => "unprocessable",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::EmbedderUnavailable => "embedder_unavailable",
            ErrorCode::LlmUnavailable => "llm_unavailable",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Internal => "internal",
            ErrorCode::UpstreamUnavailable => "upstream_unavailable",
            ErrorCode::UpstreamTimeout => "upstream_timeout",
            ErrorCode::RequestTimeout => "request_timeout",
        }
    }
}

/// The error of every engine operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The caller sent something invalid; `field` names the offending input.
    #[error("{message}")]
    InvalidInput { field: String, message: String },
    /// Content or body over the configured limit.
    #[error("{0}")]
    TooLarge(String),
    /// Not found, or not visible to the caller (another tenant's id is indistinguishable).
    #[error("{what} not found")]
    NotFound { what: String },
    /// The caller is authenticated but its role may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// Missing or unknown credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// The request conflicts with the current state (e.g. editing a superseded fact).
    #[error("{0}")]
    Conflict(String),
    /// Well-formed but semantically unusable (e.g. a vector of the wrong dimension).
    #[error("{0}")]
    Unprocessable(String),
    /// The embedder failed; the write was not applied.
    #[error("embedder unavailable: {0}")]
    Embedder(#[from] EmbedError),
    /// The LLM of a request-path operation (synthesis) failed; nothing was written.
    #[error("LLM unavailable: {0}")]
    Llm(String),
    /// The database cannot be reached or is shutting down (connection refused or lost, pool
    /// exhausted, SQLite busy past its timeout). Retryable; the write was not applied. The
    /// detail (host names, driver text) is logged, never shown to clients.
    #[error("store unavailable: {0}")]
    StoreUnavailable(String),
    /// Anything else: storage failures, bugs. Logged, never shown to clients.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidInput { field: field.into(), message: message.into() }
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        Error::NotFound { what: what.into() }
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }

    /// The public code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::InvalidInput { .. } => ErrorCode::InvalidInput,
            Error::TooLarge(_) => ErrorCode::PayloadTooLarge,
            Error::NotFound { .. } => ErrorCode::NotFound,
            Error::Forbidden(_) => ErrorCode::Forbidden,
            Error::Unauthorized(_) => ErrorCode::Unauthorized,
            Error::Conflict(_) => ErrorCode::Conflict,
            Error::Unprocessable(_) => ErrorCode::Unprocessable,
            Error::Embedder(_) => ErrorCode::EmbedderUnavailable,
            Error::Llm(_) => ErrorCode::LlmUnavailable,
            Error::StoreUnavailable(_) => ErrorCode::StoreUnavailable,
            Error::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The message safe to show a client (internal details are hidden).
    pub fn public_message(&self) -> String {
        match self {
            Error::Internal(_) => "internal error; see the server log".to_string(),
            Error::StoreUnavailable(_) => {
                "the database is unavailable; retry later (details in the server log)".to_string()
            }
            Error::Embedder(e) => format!("the embedder failed: {}", e.message),
            // The detail names the LLM's address and quotes its answer: for the server log,
            // not for every caller (found by a tester with a user key).
            Error::Llm(_) => "the LLM failed; retry later (details in the server log)".to_string(),
            Error::InvalidInput { .. }
            | Error::TooLarge(_)
            | Error::NotFound { .. }
            | Error::Forbidden(_)
            | Error::Unauthorized(_)
            | Error::Conflict(_)
            | Error::Unprocessable(_) => self.to_string(),
        }
    }
}

/// Result alias of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed embedding call, classified by who must act.
#[derive(Debug, Clone, thiserror::Error)]
#[error("embedder error ({fault:?}): {message}")]
pub struct EmbedError {
    pub fault: FaultSource,
    pub message: String,
}

impl EmbedError {
    pub fn user(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::User, message: message.into() }
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::Runtime, message: message.into() }
    }
    pub fn bug(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::Bug, message: message.into() }
    }
}

/// A failed job run, classified like provider errors.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct JobError {
    pub fault: FaultSource,
    pub message: String,
    pub retry_after: Option<std::time::Duration>,
}

impl JobError {
    pub fn runtime(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::Runtime, message: message.into(), retry_after: None }
    }
    pub fn user(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::User, message: message.into(), retry_after: None }
    }
    pub fn bug(message: impl Into<String>) -> Self {
        Self { fault: FaultSource::Bug, message: message.into(), retry_after: None }
    }
}
