//! `engram export` / `engram import`: every row of a store (or of one tenant or user) as
//! backend-neutral JSON, and its restoration into either backend.
//!
//! The tables and their columns are those `engram migrate` copies ([`crate::transfer`]), so
//! a new table is added in one place for both. Left out: the per-user change counters
//! (`user_versions`, `memories.version`), which only tell in-process vector caches what
//! moved; a restore bumps the counter of every user it writes, so caches of running
//! processes pick the rows up. Also left out, as in `migrate`: tombstones, FTS tables, `meta`
//! (the embedding space travels in the export's header instead).
//!
//! Neutral representation of a value: timestamps as RFC 3339 (microseconds, as both stores
//! keep them), ids as strings, JSON columns as JSON, 0/1 as booleans, vectors as base64 of
//! little-endian f32 (exact: nothing is re-embedded).
//!
//! **Restoring.** Each batch is decoded and checked in full before anything is written
//! (unknown table or column, wrong type, an id or enum value the engine would not accept:
//! `Unprocessable`, naming table and column), then written in one transaction with `ON
//! CONFLICT DO NOTHING`: a row whose key exists stays as it is and is counted as skipped, so
//! an import can be re-run. Special cases:
//! - history (`memory_events`): an event keeps its id when that id is free (a restore into an
//!   empty store keeps history byte for byte), else gets a new one (ids only order history).
//!   An event is skipped as present by its own key, not its memory's: its id under the same
//!   tenant and memory, or (for one that got a new id) the same kind, time, actor and related
//!   fact. A re-run after an interrupted restore, which wrote a memory but not all of its
//!   events, so completes its history.
//! - an active profile value restored under a key where the store already has another active
//!   value for the same user and pool (a store keeps one, [`crate::common::unique`]): the
//!   newer statement stays active and the other becomes its history (superseded by it, at
//!   the newer one's time), so nothing is overwritten and no key has two values
//!   ([`place_profile`]).
//! - rows restored into another tenant (`--tenant`): API keys are not copied (a key is one
//!   tenant's credential; its secret hash is unique in the store); jobs get an id derived from
//!   the target tenant and their old id (jobs are claimed by id alone, store-wide), the same
//!   on every run, so a re-run skips them.

use std::collections::HashMap;

use base64::Engine as _;
use engram_core::error::{Error, Result};
use engram_core::model::{
    AgentId, Category, ConversationId, EventKind, JobKind, JobStatus, Kind, MessageRole,
    SourceKind, TenantId, UserId,
};
use engram_core::store::{BackupRow, BackupScope, RestoreState};

mod profile;
use futures_util::TryStreamExt;
use profile::place_profile;
use serde_json::{Map, Value};
use sqlx::postgres::PgRow;
use sqlx::query_builder::Separated;
use sqlx::sqlite::SqliteRow;
use sqlx::{PgPool, Postgres, QueryBuilder, Row, Sqlite, SqlitePool, Transaction};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::tables::{TABLES, Table, Ty, Val, bind_pg, blob_to_vec, vec_to_blob};
use crate::text::index_text;

/// The tables of a backup, in restore order.
fn tables() -> impl Iterator<Item = &'static Table> {
    TABLES.iter().filter(|t| t.name != "user_versions")
}

/// The columns of a table that a backup carries.
fn columns(t: &'static Table) -> impl Iterator<Item = &'static (&'static str, Ty)> {
    t.cols.iter().filter(move |c| !(t.name == "memories" && c.0 == "version"))
}

fn table(name: &str) -> Option<&'static Table> {
    tables().find(|t| t.name == name)
}

/// The key order of each table (the same on both backends).
fn order_by(table: &str) -> &'static str {
    match table {
        "messages" => "tenant_id, conversation_id, seq",
        "summary_sources" => "tenant_id, summary_id, source_id",
        "extraction_cursors" => "tenant_id, conversation_id",
        "recalls" => "tenant_id, turn_id, memory_id",
        "context_sessions" => "tenant_id, session_id, user_id, pool",
        "session_state" => "tenant_id, user_id, agent_id, session_id, key",
        "speakers" => "tenant_id, user_id, name",
        "message_dates" => "tenant_id, message_id",
        _ => "tenant_id, id",
    }
}

/// The WHERE clause of a table for a scope (`None`: the table is not part of it). `p(i)` is
/// the backend's i-th placeholder; binds are the scope's tenant and user, in this order.
fn scope_where(t: &Table, scope: &BackupScope, p: fn(usize) -> String) -> Option<String> {
    match scope {
        BackupScope::Store => Some(String::new()),
        BackupScope::Tenant(_) => Some(format!(" WHERE tenant_id = {}", p(1))),
        BackupScope::User(..) => {
            if t.name == "summary_sources" {
                Some(format!(
                    " WHERE tenant_id = {0} AND summary_id IN \
                     (SELECT CAST(id AS TEXT) FROM summaries WHERE tenant_id = {0} AND user_id = {1})",
                    p(1),
                    p(2)
                ))
            } else if t.name == "api_keys" || t.name == "agents" {
                None
            } else {
                Some(format!(" WHERE tenant_id = {} AND user_id = {}", p(1), p(2)))
            }
        }
    }
}

fn scope_binds(scope: &BackupScope) -> Vec<String> {
    match scope {
        BackupScope::Store => vec![],
        BackupScope::Tenant(t) => vec![t.as_str().to_string()],
        BackupScope::User(t, u) => vec![t.as_str().to_string(), u.as_str().to_string()],
    }
}

fn bad(table: &str, col: &str, what: impl std::fmt::Display) -> Error {
    Error::Unprocessable(format!("{table}.{col}: {what}"))
}

fn store_err(table: &str, e: sqlx::Error) -> Error {
    Error::internal(format!("backup of {table}: {e}"))
}

/// Counter columns added after the export format was first written: a line of an older
/// export without them imports with 0 (their database default).
const ADDED_COUNTERS: &[&str] = &["summarized_seq", "access_count"];

impl Val {
    fn into_json(self) -> Value {
        match self {
            Val::Text(v) => v.map_or(Value::Null, Value::String),
            Val::Int(v) => v.map_or(Value::Null, Value::from),
            Val::Real(v) => Value::from(v),
            Val::Bool(v) => Value::Bool(v),
            Val::Ts(v) => v.map_or(Value::Null, |t| {
                Value::String(t.format(&Rfc3339).unwrap_or_else(|_| t.to_string()))
            }),
            Val::Uuid(v) => v.map_or(Value::Null, |u| Value::String(u.to_string())),
            Val::Json(v) => v.unwrap_or(Value::Null),
            Val::Uuids(v) => Value::Array(v.iter().map(|u| Value::String(u.to_string())).collect()),
            Val::Vector(v) => v.map_or(Value::Null, |v| {
                Value::String(base64::engine::general_purpose::STANDARD.encode(vec_to_blob(&v)))
            }),
        }
    }

    fn from_json(table: &str, col: &str, ty: Ty, v: Option<&Value>) -> Result<Val> {
        if v.is_none() && ty == Ty::Int && ADDED_COUNTERS.contains(&col) {
            return Ok(Val::Int(Some(0)));
        }
        let v = v.unwrap_or(&Value::Null);
        let optional =
            matches!(ty, Ty::OptText | Ty::OptTs | Ty::OptUuid | Ty::OptJson | Ty::Vector);
        if v.is_null() && !optional && !matches!(ty, Ty::Json | Ty::UuidList) {
            return Err(bad(table, col, "missing (this column needs a value)"));
        }
        let text = |v: &Value| -> Result<Option<String>> {
            match v {
                Value::Null => Ok(None),
                Value::String(s) if s.contains('\0') => {
                    Err(bad(table, col, "contains a NUL character"))
                }
                Value::String(s) => Ok(Some(s.clone())),
                other
                @ (Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_)) => {
                    Err(bad(table, col, format!("expected a string, got {other}")))
                }
            }
        };
        let uuid = |s: &str| {
            Uuid::parse_str(s).map_err(|_| bad(table, col, format!("'{s}' is not a UUID")))
        };
        Ok(match ty {
            Ty::Text | Ty::OptText => Val::Text(text(v)?),
            Ty::Int => Val::Int(Some(
                v.as_i64()
                    .ok_or_else(|| bad(table, col, format!("expected an integer, got {v}")))?,
            )),
            Ty::Real => Val::Real(
                v.as_f64()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| bad(table, col, format!("expected a number, got {v}")))?,
            ),
            Ty::Bool => Val::Bool(
                v.as_bool()
                    .ok_or_else(|| bad(table, col, format!("expected true or false, got {v}")))?,
            ),
            Ty::Ts | Ty::OptTs => Val::Ts(
                text(v)?
                    .map(|s| {
                        OffsetDateTime::parse(&s, &Rfc3339)
                            .map(engram_core::model::micros)
                            .map_err(|_| bad(table, col, format!("'{s}' is not an RFC 3339 time")))
                    })
                    .transpose()?,
            ),
            Ty::Uuid | Ty::OptUuid => Val::Uuid(text(v)?.map(|s| uuid(&s)).transpose()?),
            Ty::Json | Ty::OptJson => {
                if has_nul(v) {
                    return Err(bad(table, col, "contains a NUL character"));
                }
                match (ty, v) {
                    (Ty::Json, Value::Null) => Val::Json(Some(Value::Object(Map::new()))),
                    (_, Value::Null) => Val::Json(None),
                    (_, v) => Val::Json(Some(v.clone())),
                }
            }
            Ty::UuidList => match v {
                Value::Null => Val::Uuids(vec![]),
                Value::Array(items) => Val::Uuids(
                    items
                        .iter()
                        .map(|i| match i {
                            Value::String(s) => uuid(s),
                            other @ (Value::Null
                            | Value::Bool(_)
                            | Value::Number(_)
                            | Value::Array(_)
                            | Value::Object(_)) => {
                                Err(bad(table, col, format!("expected an id, got {other}")))
                            }
                        })
                        .collect::<Result<_>>()?,
                ),
                other @ (Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Object(_)) => {
                    Err(bad(table, col, format!("expected a list of ids, got {other}")))?
                }
            },
            Ty::Vector => match text(v)? {
                None => Val::Vector(None),
                Some(s) => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(s.as_bytes())
                        .map_err(|_| bad(table, col, "not base64"))?;
                    if bytes.is_empty() || bytes.len() % 4 != 0 {
                        return Err(bad(table, col, "not a list of 32-bit floats"));
                    }
                    let v = blob_to_vec(&bytes);
                    if v.iter().any(|x| !x.is_finite()) {
                        return Err(bad(table, col, "holds a value that is not a finite number"));
                    }
                    Val::Vector(Some(v))
                }
            },
        })
    }

    fn text(&self) -> Option<&str> {
        if let Val::Text(Some(s)) = self { Some(s) } else { None }
    }
}

fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Values the engine would refuse to read back: ids, closed enums, ranges.
fn check_domain(table: &str, vals: &[(&'static str, Ty, Val)]) -> Result<()> {
    let get = |name: &str| vals.iter().find(|v| v.0 == name).map(|v| &v.2);
    let in_err = |col: &str, e: Error| bad(table, col, e.public_message());
    for (col, _, v) in vals {
        let Some(s) = v.text() else { continue };
        let checked = match *col {
            "tenant_id" => TenantId::parse(s).map(drop),
            "user_id" => UserId::parse(s).map(drop),
            // Working memory kept without an agent is stored under '' (its key's column).
            "agent_id" if table == "session_state" && s.is_empty() => Ok(()),
            "agent_id" => AgentId::parse(s).map(drop),
            "conversation_id" | "source_conversation_id" => ConversationId::parse(s).map(drop),
            "kind" if table == "memories" => Kind::parse(s).map(drop),
            "kind" if table == "jobs" => JobKind::parse(s).map(drop),
            "category" => Category::parse(s).map(drop),
            "source_kind" => SourceKind::parse(s).map(drop),
            "event" => EventKind::parse(s).map(drop),
            "role" if table == "messages" => MessageRole::parse(s).map(drop),
            "status" => JobStatus::parse(s).map(drop),
            _ => Ok(()),
        };
        checked.map_err(|e| in_err(col, e))?;
    }
    if table == "memories"
        && let Some(Val::Int(Some(i))) = get("importance")
        && !(1..=10).contains(i)
    {
        return Err(bad(table, "importance", format!("{i} is outside 1–10")));
    }
    if table == "api_keys" {
        let role = get("role").and_then(Val::text).unwrap_or_default();
        let needs = match role {
            "admin" => None,
            "agent" => Some("agent_id"),
            "user" => Some("user_id"),
            other => {
                return Err(bad(table, "role", format!("unknown role '{other}'")));
            }
        };
        if let Some(col) = needs
            && get(col).and_then(Val::text).is_none()
        {
            return Err(bad(table, col, format!("a {role} key needs its {col}")));
        }
    }
    Ok(())
}

/// A backup row checked and ready to write.
struct Decoded {
    table: &'static Table,
    vals: Vec<(&'static str, Ty, Val)>,
    /// Written into another tenant than its own.
    retargeted: bool,
}

impl Decoded {
    fn get(&self, name: &str) -> Option<&Val> {
        self.vals.iter().find(|v| v.0 == name).map(|v| &v.2)
    }
    fn text(&self, name: &str) -> String {
        match self.get(name) {
            Some(Val::Text(Some(s))) => s.clone(),
            Some(Val::Uuid(Some(u))) => u.to_string(),
            _ => String::new(),
        }
    }
    fn set(&mut self, name: &str, v: Val) {
        if let Some(slot) = self.vals.iter_mut().find(|x| x.0 == name) {
            slot.2 = v;
        }
    }
}

fn decode(row: &BackupRow, target: Option<&TenantId>) -> Result<Decoded> {
    let t = table(&row.table).ok_or_else(|| {
        Error::Unprocessable(format!(
            "unknown table '{}'; a backup holds: {}",
            row.table,
            tables().map(|t| t.name).collect::<Vec<_>>().join(", ")
        ))
    })?;
    if let Some(extra) = row.row.keys().find(|k| !columns(t).any(|c| c.0 == k.as_str())) {
        return Err(bad(t.name, extra, "unknown column"));
    }
    let mut vals = Vec::with_capacity(t.cols.len());
    for (col, ty) in columns(t) {
        vals.push((*col, *ty, Val::from_json(t.name, col, *ty, row.row.get(*col))?));
    }
    check_domain(t.name, &vals)?;
    let mut d = Decoded { table: t, vals, retargeted: false };
    if let Some(target) = target
        && d.text("tenant_id") != target.as_str()
    {
        d.retargeted = true;
        d.set("tenant_id", Val::Text(Some(target.as_str().to_string())));
    }
    Ok(d)
}

/// Check one backup row as a restore would, without writing: the CLI checks a whole file
/// before the first write, so a bad line anywhere writes nothing.
pub fn check_row(row: &BackupRow) -> Result<()> {
    decode(row, None).map(drop)
}

/// The id a job gets when copied into another tenant: derived from both, so a re-run finds it.
fn copied_job_id(target: &str, old: &str) -> String {
    Uuid::new_v5(&Uuid::NAMESPACE_OID, format!("engram-job\0{target}\0{old}").as_bytes())
        .to_string()
}

/// Numbered, as PostgreSQL's: a scope's WHERE clause may use a bind twice (a user's
/// summary sources name the tenant twice; with bare `?` the user's value went to the
/// second tenant and the sources of a per-user backup were lost).
fn sqlite_p(i: usize) -> String {
    format!("?{i}")
}

fn pg_p(i: usize) -> String {
    format!("${i}")
}

/// Every row of `scope`, table by table in restore order, read inside `tx` (the backend's
/// read transaction) and handed to `sink` in the neutral form; the number of rows. `p`
/// numbers placeholders, `select` names a column in the select list, `read` decodes one.
async fn backup_tables<DB: sqlx::Database>(
    tx: &mut Transaction<'static, DB>,
    scope: &BackupScope,
    sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
    p: fn(usize) -> String,
    select: impl Fn(&str, Ty) -> String,
    read: fn(&DB::Row, &str, &str, Ty) -> Result<Val>,
) -> Result<u64>
where
    for<'e> &'e mut DB::Connection: sqlx::Executor<'e, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let mut n = 0u64;
    for t in tables() {
        let Some(filter) = scope_where(t, scope, p) else { continue };
        let cols: Vec<String> = columns(t).map(|(c, ty)| select(c, *ty)).collect();
        let sql = format!(
            "SELECT {} FROM {}{filter} ORDER BY {}",
            cols.join(", "),
            t.name,
            order_by(t.name)
        );
        let mut q = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
        for b in scope_binds(scope) {
            q = q.bind(b);
        }
        let mut rows = q.fetch(&mut **tx);
        while let Some(r) = rows.try_next().await.map_err(|e| store_err(t.name, e))? {
            let mut row = Map::new();
            for (col, ty) in columns(t) {
                row.insert((*col).to_string(), read(&r, t.name, col, *ty)?.into_json());
            }
            sink(BackupRow { table: t.name.to_string(), row })?;
            n += 1;
        }
    }
    Ok(n)
}

// ---- SQLite ----

fn read_sqlite(r: &SqliteRow, table: &str, col: &str, ty: Ty) -> Result<Val> {
    let e = |e: sqlx::Error| store_err(table, e);
    let ts = |n: i64| {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(n))
            .map_err(|_| bad(table, col, "stored time out of range"))
    };
    let json = |s: Option<String>| -> Result<Option<Value>> {
        s.map(|s| serde_json::from_str(&s).map_err(|_| bad(table, col, "stored JSON is invalid")))
            .transpose()
    };
    let uuid = |s: &str| Uuid::parse_str(s).map_err(|_| bad(table, col, "stored id is not a UUID"));
    Ok(match ty {
        Ty::Text | Ty::OptText => Val::Text(r.try_get(col).map_err(e)?),
        Ty::Int => Val::Int(Some(r.try_get(col).map_err(e)?)),
        Ty::Real => Val::Real(r.try_get(col).map_err(e)?),
        Ty::Bool => Val::Bool(r.try_get::<i64, _>(col).map_err(e)? != 0),
        Ty::Ts | Ty::OptTs => {
            Val::Ts(r.try_get::<Option<i64>, _>(col).map_err(e)?.map(ts).transpose()?)
        }
        Ty::Uuid | Ty::OptUuid => Val::Uuid(
            r.try_get::<Option<String>, _>(col).map_err(e)?.as_deref().map(uuid).transpose()?,
        ),
        Ty::Json => {
            Val::Json(Some(json(r.try_get(col).map_err(e)?)?.unwrap_or(Value::Object(Map::new()))))
        }
        Ty::OptJson => Val::Json(json(r.try_get(col).map_err(e)?)?),
        Ty::UuidList => {
            let ids: Vec<String> = json(r.try_get(col).map_err(e)?)?.map_or(Ok(vec![]), |v| {
                serde_json::from_value(v).map_err(|_| bad(table, col, "stored ids invalid"))
            })?;
            Val::Uuids(ids.iter().map(|s| uuid(s)).collect::<Result<_>>()?)
        }
        Ty::Vector => {
            Val::Vector(r.try_get::<Option<Vec<u8>>, _>(col).map_err(e)?.map(|b| blob_to_vec(&b)))
        }
    })
}

fn bind_sqlite(q: &mut Separated<'_, Sqlite, &'static str>, v: Val) {
    let nanos = |t: OffsetDateTime| i64::try_from(t.unix_timestamp_nanos()).unwrap_or(i64::MAX);
    match v {
        Val::Text(v) => q.push_bind(v),
        Val::Int(v) => q.push_bind(v),
        Val::Real(v) => q.push_bind(v),
        Val::Bool(v) => q.push_bind(i64::from(v)),
        Val::Ts(v) => q.push_bind(v.map(nanos)),
        Val::Uuid(v) => q.push_bind(v.map(|u| u.to_string())),
        Val::Json(v) => q.push_bind(v.map(|v| v.to_string())),
        Val::Uuids(v) => q.push_bind(
            Value::Array(v.iter().map(|u| Value::String(u.to_string())).collect()).to_string(),
        ),
        Val::Vector(v) => q.push_bind(v.map(|v| vec_to_blob(&v))),
    };
}

/// [`engram_core::store::Store::backup`] on SQLite: one read transaction.
pub(crate) async fn sqlite_backup(
    pool: &SqlitePool,
    scope: &BackupScope,
    sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
) -> Result<u64> {
    let mut tx = pool.begin().await.map_err(|e| store_err("store", e))?;
    backup_tables(&mut tx, scope, sink, sqlite_p, |c, _| c.to_string(), read_sqlite).await
}

/// [`engram_core::store::Store::restore`] on SQLite: one write transaction.
pub(crate) async fn sqlite_restore(
    write: &SqlitePool,
    rows: &[BackupRow],
    state: &mut RestoreState,
) -> Result<()> {
    let decoded = decode_batch(rows, state)?;
    // What this batch adds, merged into `state` only once it is committed (a batch that
    // fails leaves the state as it was; nothing large is copied per batch).
    let mut next = RestoreState::default();
    let mut tx = write.begin_with("BEGIN IMMEDIATE").await.map_err(crate::fault::sqlite)?;
    let mut versions = HashMap::new();
    for key in memory_users(&decoded) {
        let v = crate::versions::bump_sqlite(&mut tx, &key.0, &key.1).await?;
        versions.insert(key, v);
    }
    for mut d in decoded {
        let Some(mut extra) = prepare(&mut d, &mut next, &versions) else { continue };
        let superseded = place_profile::<crate::sqlite::SqliteDb>(&mut tx, &mut d, &extra).await?;
        let name = d.table.name;
        if !d.table.fts.is_empty()
            && let Some(words) = crate::text::keyword_text(&d.text("content"))
        {
            // SQLite's keyword index reads it for text written without spaces (migration 19).
            extra.push(("keyword_text", Val::Text(Some(words))));
        }
        let insert = |skip_id: bool| {
            let mut q = insert_values::<Sqlite>(
                &d,
                &extra,
                |c| skip_id && c == "id",
                ("", &[]),
                bind_sqlite,
            );
            q.push(") ON CONFLICT DO NOTHING");
            q
        };
        let mut written =
            insert(false).build().execute(&mut *tx).await.map_err(|e| store_err(name, e))?;
        if written.rows_affected() == 0 && name == "memory_events" {
            let present = event_present::<Sqlite>(&d, "IS", bind_sqlite)
                .build()
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| store_err(name, e))?;
            if present.is_none() {
                // The id is taken (another tenant's history): a new id, same order.
                written =
                    insert(true).build().execute(&mut *tx).await.map_err(|e| store_err(name, e))?;
            }
        }
        if let Some((user, ev)) = superseded.filter(|_| written.rows_affected() > 0) {
            let tenant = d.text("tenant_id");
            crate::common::memories::insert_event::<crate::sqlite::SqliteDb>(
                &mut tx, &tenant, &user, &ev,
            )
            .await?;
        }
        count(&d, written.rows_affected() > 0, &mut next);
    }
    tx.commit().await.map_err(|e| store_err("store", e))?;
    merge(state, next);
    Ok(())
}

/// A batch, decoded and checked in full before anything is written.
fn decode_batch(rows: &[BackupRow], state: &RestoreState) -> Result<Vec<Decoded>> {
    rows.iter().map(|r| decode(r, state.target.as_ref())).collect()
}

/// The (tenant, user) of every memory the batch holds, once each, in order: a restore bumps
/// their change counters (on PostgreSQL the users' locks) before it writes.
fn memory_users(decoded: &[Decoded]) -> Vec<(String, String)> {
    let mut users: Vec<(String, String)> = Vec::new();
    for d in decoded.iter().filter(|d| d.table.name == "memories") {
        let key = (d.text("tenant_id"), d.text("user_id"));
        if !users.contains(&key) {
            users.push(key);
        }
    }
    users
}

/// `INSERT INTO table (columns) VALUES (values`, open for what a backend adds: the row's
/// values but those `skip` names, then `extra`, each bound by `bind`; `overriding` follows
/// the column list, which ends with the `computed` columns whose values the caller adds.
fn insert_values<DB: sqlx::Database>(
    d: &Decoded,
    extra: &[(&str, Val)],
    skip: impl Fn(&str) -> bool,
    (overriding, computed): (&str, &[&str]),
    bind: fn(&mut Separated<'_, DB, &'static str>, Val),
) -> QueryBuilder<DB> {
    let cols: Vec<_> = d.vals.iter().filter(|c| !skip(c.0)).cloned().collect();
    let names: Vec<&str> = cols.iter().map(|c| c.0).chain(extra.iter().map(|e| e.0)).collect();
    let names: Vec<&str> = names.into_iter().chain(computed.iter().copied()).collect();
    let mut q = QueryBuilder::<DB>::new(format!(
        "INSERT INTO {} ({}){overriding} VALUES (",
        d.table.name,
        names.join(", ")
    ));
    let mut s = q.separated(", ");
    for v in cols.into_iter().map(|c| c.2).chain(extra.iter().map(|e| e.1.clone())) {
        bind(&mut s, v);
    }
    q
}

/// `SELECT 1` when the event `d` is already in the store: under its tenant and memory, with
/// its id, or with its kind, time, actor and related fact (an event restored earlier under a
/// new id). `is`: the backend's null-safe equality.
fn event_present<DB: sqlx::Database>(
    d: &Decoded,
    is: &str,
    bind: fn(&mut Separated<'_, DB, &'static str>, Val),
) -> QueryBuilder<DB> {
    let mut q = QueryBuilder::<DB>::new("SELECT 1 FROM memory_events WHERE ");
    let cond = |q: &mut QueryBuilder<DB>, sql: String, col: &str| {
        q.push(sql);
        let v = d.get(col).cloned().unwrap_or(Val::Text(None));
        bind(&mut q.separated(""), v);
    };
    cond(&mut q, "tenant_id = ".into(), "tenant_id");
    cond(&mut q, " AND memory_id = ".into(), "memory_id");
    cond(&mut q, " AND (id = ".into(), "id");
    cond(&mut q, " OR (event = ".into(), "event");
    cond(&mut q, " AND at = ".into(), "at");
    cond(&mut q, " AND actor = ".into(), "actor");
    cond(&mut q, format!(" AND related_id {is} "), "related_id");
    q.push(")) LIMIT 1");
    q
}

/// Decide what to do with a row before writing it: None, not written (counted in `batch`);
/// else the columns to write besides the row's own (a memory's version, from `versions`).
/// `batch`: what this batch does so far.
fn prepare(
    d: &mut Decoded,
    batch: &mut RestoreState,
    versions: &HashMap<(String, String), i64>,
) -> Option<Vec<(&'static str, Val)>> {
    if !keep(d, batch) {
        return None;
    }
    let mut extra = Vec::new();
    if d.table.name == "memories" {
        let v = versions.get(&(d.text("tenant_id"), d.text("user_id"))).copied();
        extra.push(("version", Val::Int(v)));
    }
    Some(extra)
}

/// Whether to write a row at all (a row not written is counted in `batch`).
fn keep(d: &mut Decoded, batch: &mut RestoreState) -> bool {
    let name = d.table.name;
    match name {
        "api_keys" if d.retargeted => {
            batch.report.keys_not_copied += 1;
            false
        }
        "jobs" if d.retargeted => {
            let id = copied_job_id(&d.text("tenant_id"), &d.text("id"));
            d.set("id", Val::Text(Some(id)));
            true
        }
        _ => true,
    }
}

/// Add a committed batch's counts to the restore's state.
fn merge(state: &mut RestoreState, batch: RestoreState) {
    for (t, n) in batch.report.restored {
        *state.report.restored.entry(t).or_default() += n;
    }
    for (t, n) in batch.report.skipped {
        *state.report.skipped.entry(t).or_default() += n;
    }
    state.report.keys_not_copied += batch.report.keys_not_copied;
}

fn count(d: &Decoded, written: bool, state: &mut RestoreState) {
    let name = d.table.name.to_string();
    if written {
        *state.report.restored.entry(name).or_default() += 1;
    } else {
        *state.report.skipped.entry(name).or_default() += 1;
    }
}

// ---- PostgreSQL ----

fn read_pg(r: &PgRow, table: &str, col: &str, ty: Ty) -> Result<Val> {
    let e = |e: sqlx::Error| store_err(table, e);
    Ok(match ty {
        Ty::Text | Ty::OptText => Val::Text(r.try_get(col).map_err(e)?),
        Ty::Int => Val::Int(Some(r.try_get(col).map_err(e)?)),
        Ty::Real => Val::Real(r.try_get(col).map_err(e)?),
        Ty::Bool => Val::Bool(r.try_get(col).map_err(e)?),
        Ty::Ts | Ty::OptTs => Val::Ts(r.try_get(col).map_err(e)?),
        Ty::Uuid | Ty::OptUuid => Val::Uuid(r.try_get(col).map_err(e)?),
        Ty::Json => Val::Json(Some(
            r.try_get::<Option<Value>, _>(col).map_err(e)?.unwrap_or(Value::Object(Map::new())),
        )),
        Ty::OptJson => Val::Json(r.try_get(col).map_err(e)?),
        Ty::UuidList => {
            Val::Uuids(r.try_get::<Option<Vec<Uuid>>, _>(col).map_err(e)?.unwrap_or_default())
        }
        Ty::Vector => Val::Vector(
            r.try_get::<Option<pgvector::Vector>, _>(col).map_err(e)?.map(|v| v.to_vec()),
        ),
    })
}

/// [`engram_core::store::Store::backup`] on PostgreSQL: one repeatable-read transaction.
pub(crate) async fn pg_backup(
    pool: &PgPool,
    scope: &BackupScope,
    sink: &mut (dyn FnMut(BackupRow) -> Result<()> + Send),
) -> Result<u64> {
    let mut tx = pool.begin().await.map_err(|e| store_err("store", e))?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .map_err(|e| store_err("store", e))?;
    // Integers and reals are read at their widest.
    let select = |c: &str, ty: Ty| {
        if ty == Ty::Int {
            format!("{c}::int8 AS {c}")
        } else if ty == Ty::Real {
            format!("{c}::float8 AS {c}")
        } else {
            c.to_string()
        }
    };
    backup_tables(&mut tx, scope, sink, pg_p, select, read_pg).await
}

/// [`engram_core::store::Store::restore`] on PostgreSQL: one transaction.
pub(crate) async fn pg_restore(
    pool: &PgPool,
    rows: &[BackupRow],
    state: &mut RestoreState,
) -> Result<()> {
    let decoded = decode_batch(rows, state)?;
    // What this batch adds, merged into `state` only once it is committed (a batch that
    // fails leaves the state as it was; nothing large is copied per batch).
    let mut next = RestoreState::default();
    let mut tx = pool.begin().await.map_err(|e| store_err("store", e))?;
    let mut versions = HashMap::new();
    for key in memory_users(&decoded) {
        let v = crate::versions::bump_postgres(&mut tx, &key.0, &key.1).await?;
        versions.insert(key, v);
    }
    let mut events_with_ids = false;
    for mut d in decoded {
        let Some(mut extra) = prepare(&mut d, &mut next, &versions) else { continue };
        let superseded = place_profile::<crate::postgres::PgDb>(&mut tx, &mut d, &extra).await?;
        let name = d.table.name;
        if !d.table.fts.is_empty() {
            let parts: Vec<String> = d.table.fts.iter().map(|c| d.text(c)).collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            extra.push(("fts_text", Val::Text(Some(index_text(&parts)))));
        }
        let insert = |with_id: bool| {
            let events = name == "memory_events";
            let skip = |c: &str| events && !with_id && c == "id";
            let overriding = if events && with_id { " OVERRIDING SYSTEM VALUE" } else { "" };
            let computed: &[&str] = if name == "memories" { &["fts_len"] } else { &[] };
            let mut q =
                insert_values::<Postgres>(&d, &extra, skip, (overriding, computed), bind_pg);
            if name == "memories" {
                let text = extra.iter().find(|e| e.0 == "fts_text").and_then(|e| e.1.text());
                q.push(", length(to_tsvector('simple'::regconfig, ");
                q.push_bind(text.unwrap_or_default().to_string());
                q.push("))");
            }
            q.push(") ON CONFLICT DO NOTHING");
            q
        };
        let mut written =
            insert(true).build().execute(&mut *tx).await.map_err(|e| store_err(name, e))?;
        if name == "memory_events" {
            events_with_ids = true;
            let present = if written.rows_affected() == 0 {
                event_present::<Postgres>(&d, "IS NOT DISTINCT FROM", bind_pg)
                    .build()
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|e| store_err(name, e))?
            } else {
                None
            };
            if written.rows_affected() == 0 && present.is_none() {
                written = insert(false)
                    .build()
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| store_err(name, e))?;
            }
        }
        if let Some((user, ev)) = superseded.filter(|_| written.rows_affected() > 0) {
            let tenant = d.text("tenant_id");
            crate::common::memories::insert_event::<crate::postgres::PgDb>(
                &mut tx, &tenant, &user, &ev,
            )
            .await?;
        }
        count(&d, written.rows_affected() > 0, &mut next);
    }
    if events_with_ids {
        // New events continue after the restored ids.
        sqlx::query(
            "SELECT setval(pg_get_serial_sequence('memory_events', 'id'), \
             greatest((SELECT max(id) FROM memory_events), 1), (SELECT max(id) FROM memory_events) IS NOT NULL)",
        )
        .execute(&mut *tx)
        .await
        .map_err(|e| store_err("memory_events", e))?;
    }
    tx.commit().await.map_err(|e| store_err("store", e))?;
    merge(state, next);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_the_neutral_form() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_000).unwrap();
        let cases = [
            (Ty::Ts, Val::Ts(Some(t))),
            (Ty::OptTs, Val::Ts(None)),
            (Ty::Vector, Val::Vector(Some(vec![0.1, -2.5e-8, 3.0]))),
            (Ty::UuidList, Val::Uuids(vec![Uuid::now_v7()])),
            (Ty::Json, Val::Json(Some(serde_json::json!({"a": [1, "b"]})))),
            (Ty::Bool, Val::Bool(true)),
            (Ty::Real, Val::Real(0.85)),
        ];
        for (ty, v) in cases {
            let j = v.clone().into_json();
            assert_eq!(Val::from_json("t", "c", ty, Some(&j)).unwrap(), v, "{j}");
        }
    }

    #[test]
    fn bad_values_name_table_and_column() {
        let e = Val::from_json("memories", "created_at", Ty::Ts, Some(&Value::from("yesterday")))
            .unwrap_err();
        assert!(e.public_message().contains("memories.created_at"), "{e}");
        let e = Val::from_json("messages", "embedding", Ty::Vector, Some(&Value::from("AAA")))
            .unwrap_err();
        assert!(e.public_message().contains("messages.embedding"), "{e}");
        let e = Val::from_json("memories", "content", Ty::Text, Some(&Value::from("a\0b")))
            .unwrap_err();
        assert!(e.public_message().contains("NUL"), "{e}");
        assert!(Val::from_json("memories", "content", Ty::Text, None).is_err());
    }

    #[test]
    fn copied_job_ids_are_stable_and_per_tenant() {
        assert_eq!(copied_job_id("t2", "j1"), copied_job_id("t2", "j1"));
        assert_ne!(copied_job_id("t2", "j1"), copied_job_id("t3", "j1"));
    }
}
