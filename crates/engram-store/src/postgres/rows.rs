//! Rows to domain types for the PostgreSQL store: how it reads a column (`Columns` for its
//! rows), and the decoders both stores share (`crate::common::rows`) for its rows.
//!
//! Every column is read with `try_get`: a row that does not decode is an internal error,
//! never a panic.

use engram_core::error::{Error, Result};
use engram_core::model::{Agent, Job, Memory, MemoryEvent, Message};
use engram_core::store::ApiKey;
use sqlx::postgres::PgRow;
use sqlx::{Decode, Postgres, Row, Type};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::common::{self, rows::Columns};

/// The columns of `memories` that [`memory`] reads.
pub use crate::common::memories::MEMORY_COLS;

/// One column, decoded.
pub fn col<'r, T>(r: &'r PgRow, name: &str) -> Result<T>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    r.try_get(name).map_err(|e| Error::internal(format!("database: column {name}: {e}")))
}

/// Columns as PostgreSQL stores them: uuid, timestamptz, jsonb, uuid[], boolean.
impl Columns for PgRow {
    fn text(&self, name: &str) -> Result<String> {
        col(self, name)
    }

    fn opt_text(&self, name: &str) -> Result<Option<String>> {
        col(self, name)
    }

    fn int(&self, name: &str) -> Result<i64> {
        // bigint, or a narrower integer column (importance is a smallint).
        col::<i64>(self, name)
            .or_else(|_| col::<i32>(self, name).map(i64::from))
            .or_else(|_| col::<i16>(self, name).map(i64::from))
    }

    fn real(&self, name: &str) -> Result<f64> {
        col(self, name)
    }

    fn flag(&self, name: &str) -> Result<bool> {
        col(self, name)
    }

    fn id(&self, name: &str) -> Result<Uuid> {
        col(self, name)
    }

    fn opt_id(&self, name: &str) -> Result<Option<Uuid>> {
        col(self, name)
    }

    fn ids(&self, name: &str) -> Result<Vec<Uuid>> {
        Ok(col::<Option<Vec<Uuid>>>(self, name)?.unwrap_or_default())
    }

    fn ts(&self, name: &str) -> Result<OffsetDateTime> {
        col(self, name)
    }

    fn opt_ts(&self, name: &str) -> Result<Option<OffsetDateTime>> {
        col(self, name)
    }

    fn opt_json(&self, name: &str) -> Result<Option<serde_json::Value>> {
        col(self, name)
    }

    fn is_null(&self, name: &str) -> Result<bool> {
        use sqlx::ValueRef;
        Ok(self.try_get_raw(name).map_err(super::db)?.is_null())
    }
}

pub fn memory(r: &PgRow) -> Result<Memory> {
    common::rows::memory(r)
}

pub fn event(r: &PgRow) -> Result<MemoryEvent> {
    common::rows::event(r)
}

pub fn message(r: &PgRow) -> Result<Message> {
    common::rows::message(r)
}

pub fn agent(r: &PgRow) -> Result<Agent> {
    common::rows::agent(r)
}

pub fn api_key(r: &PgRow) -> Result<ApiKey> {
    common::rows::api_key(r)
}

pub fn job(r: &PgRow) -> Result<Job> {
    common::rows::job(r)
}
