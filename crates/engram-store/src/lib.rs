//! engram-store: persistence, the only crate that speaks SQL.
//!
//! [`sqlite::SqliteStore`] implements [`engram_core::store::Store`] on one SQLite database in
//! WAL mode: FTS5 for full-text search, vectors as blobs next to their rows, and an
//! in-process exact vector index per user ([`sqlite::vectors`]) that catches up with the
//! database through a per-user change counter, so several processes (server, CLI) can share
//! one data dir without stale search results.
//!
//! [`postgres::PgStore`] implements the same contract on PostgreSQL + pgvector, for several
//! processes sharing one database; the conformance suite (`tests/conformance`) runs the same
//! tests against both. [`text`] holds the keyword-query handling they share.
//!
//! Schema changes are numbered SQL files under `migrations/`, applied at start-up by
//! [`migrate`]; a database newer than the binary is refused.

pub mod backup;
mod common;
pub mod fault;
pub mod migrate;
pub mod postgres;
pub mod sqlite;
pub mod tables;
pub mod text;
pub mod transfer;
pub mod versions;

pub use common::SqlStore;

use std::path::Path;
use std::sync::Arc;

use engram_core::Result;

/// Open (creating if needed) the embedded store in `data_dir`.
pub async fn open_sqlite(data_dir: &Path) -> Result<Arc<sqlite::SqliteStore>> {
    Ok(Arc::new(sqlite::SqliteStore::open(data_dir).await?))
}

/// Connect to PostgreSQL (`postgres://…`; needs pgvector ≥ 0.8) and apply migrations.
pub async fn open_postgres(url: &str) -> Result<Arc<postgres::PgStore>> {
    Ok(Arc::new(postgres::PgStore::open(url).await?))
}

/// [`open_postgres`] with connection options (pool size).
pub async fn open_postgres_with(
    url: &str,
    options: postgres::PgOptions,
) -> Result<Arc<postgres::PgStore>> {
    Ok(Arc::new(postgres::PgStore::open_with(url, options).await?))
}
