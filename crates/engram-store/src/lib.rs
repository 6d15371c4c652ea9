//! engram-store: persistence, the only crate that speaks SQL.
//!
//! [`sqlite::SqliteStore`] implements [`engram_core::store::Store`] on one SQLite database in
//! WAL mode: FTS5 for full-text search, vectors as blobs next to their rows, and an
//! in-process exact vector index per user ([`sqlite::vectors`]) that catches up with the
//! database through a per-user change counter, so several processes (server, CLI) can share
//! one data dir without stale search results.
//!
//! [`text`] holds the keyword-query handling the stores share.
//!
//! Schema changes are numbered SQL files under `migrations/`, applied at start-up by
//! [`migrate`]; a database newer than the binary is refused.

pub mod migrate;
pub mod sqlite;
pub mod text;

use std::path::Path;
use std::sync::Arc;

use engram_core::Result;

/// Open (creating if needed) the embedded store in `data_dir`.
pub async fn open_sqlite(data_dir: &Path) -> Result<Arc<sqlite::SqliteStore>> {
    Ok(Arc::new(sqlite::SqliteStore::open(data_dir).await?))
}
