//! How database errors become engine errors, per backend: what is the caller's fault, what
//! is worth a retry (`StoreUnavailable`, 503), what is a bug. Shared by the stores and the
//! migration runner.

use engram_core::error::Error;

/// Map a database error to an engine error (the cause is logged by the adapter): busy past
/// the busy timeout or no connection in time is `StoreUnavailable` (retryable), the rest
/// `Internal`.
pub fn sqlite(e: sqlx::Error) -> Error {
    // SQLite's primary result code is the low byte of the extended one: BUSY (5) and
    // LOCKED (6) pass; READONLY (8), IOERR (10), FULL (13) and CANTOPEN (14) are the
    // data dir's fault (permissions changed, disk full), not engram's: 503, not 500.
    let primary = e
        .as_database_error()
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i32>().ok())
        .map(|c| c & 0xff);
    let unavailable = matches!(&e, sqlx::Error::PoolTimedOut)
        || matches!(primary, Some(5 | 6 | 8 | 10 | 13 | 14));
    if unavailable {
        return Error::StoreUnavailable(format!("database: {e}"));
    }
    Error::internal(format!("database: {e}"))
}

/// Map a database error to an engine error: text PostgreSQL cannot store (U+0000, in text
/// or in a JSON string) is the caller's fault; anything else is internal (the cause is
/// logged by the adapter).
pub fn postgres(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(d) = &e
        && matches!(d.code().as_deref(), Some("22021" | "22P05"))
    {
        return Error::invalid(
            "content",
            "text must not contain the NUL character (U+0000)".to_string(),
        );
    }
    if unavailable(&e) {
        return Error::StoreUnavailable(format!("database: {e}"));
    }
    Error::internal(format!("database: {e}"))
}

/// The server cannot be reached, went away, or is starting or shutting down: worth a retry
/// (503 `store_unavailable`), not a bug. SQLSTATE class 08 (connection exception), 57P01–03
/// (shutdown, crash, cannot connect now), 53300 (too many connections), and I/O, TLS and
/// protocol failures of the connection itself.
fn unavailable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            // A connection cut mid-handshake reads as garbage ("unexpected response from
            // SSLRequest: 0x00" when the socket hits EOF).
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    ) || matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| {
        c.starts_with("08") || matches!(c.as_ref(), "57P01" | "57P02" | "57P03" | "53300")
    }))
}

/// PostgreSQL's `unique_violation`.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("23505"))
}
