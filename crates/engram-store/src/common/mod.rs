//! What the two stores share: statements written once, with `?` placeholders (PostgreSQL
//! numbers them, [`numbered`]), the values they bind ([`Arg`], each represented per backend
//! the way [`crate::tables::Ty`] describes), and the parts of the store contract whose logic
//! is the same on SQLite and PostgreSQL ([`messages`], [`memories`], [`access`], [`jobs`]),
//! written once over [`Backend`].
//!
//! [`store::SqlStore`] implements the whole store contract once over a backend that
//! implements [`Backend`] and the few operations it does its own way ([`store::Native`]).
//!
//! A backend implements [`Backend`]: how it binds an [`Arg`] and where it reads and writes
//! (the SQLite store writes through its one writer connection with `BEGIN IMMEDIATE`,
//! PostgreSQL through its pool); its row type implements [`rows::Columns`], how it reads a
//! column, so that rows become domain types once ([`rows`]).

pub(crate) mod access;
pub(crate) mod jobs;
pub(crate) mod memories;
pub(crate) mod messages;
pub(crate) mod rows;
pub(crate) mod scan;
pub(crate) mod state;
pub(crate) mod store;
pub(crate) mod summaries;
pub(crate) mod transcript_vectors;
pub(crate) mod typos;
pub(crate) mod unique;

pub use store::SqlStore;

use async_trait::async_trait;
use engram_core::error::{Error, Result};
use engram_core::model::{Memory, Message};
use time::OffsetDateTime;
use uuid::Uuid;

/// One value a shared statement binds, represented per backend.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    /// Text the statement owns (PostgreSQL's `fts_text`).
    Owned(String),
    Int(i64),
    /// 0/1 on SQLite, `boolean` on PostgreSQL.
    Bool(bool),
    Real(f64),
    /// `smallint` on PostgreSQL.
    Small(i16),
    /// Text on SQLite, `uuid` on PostgreSQL.
    Id(Uuid),
    OptId(Option<Uuid>),
    /// A JSON array of id strings on SQLite, `uuid[]` on PostgreSQL.
    Ids(Vec<Uuid>),
    /// A JSON array of strings on SQLite, `text[]` on PostgreSQL.
    Texts(Vec<&'a str>),
    /// Unix nanoseconds on SQLite, `timestamptz` on PostgreSQL.
    Ts(OffsetDateTime),
    OptTs(Option<OffsetDateTime>),
    /// JSON text on SQLite, `jsonb` on PostgreSQL.
    Json(&'a serde_json::Value),
    OptJson(Option<&'a serde_json::Value>),
    /// A little-endian f32 blob on SQLite, `vector` on PostgreSQL.
    OptVector(Option<&'a [f32]>),
}

/// The rows of one tenant whose `id` is one of `ids` (`ids` bound as one list), read with
/// `select` ("SELECT … FROM table") and decoded by `decode`; any order.
pub(crate) async fn by_ids<B: Backend, T>(
    b: &B,
    select: &str,
    tenant: &str,
    ids: Arg<'_>,
    decode: fn(&B::Row) -> Result<T>,
) -> Result<Vec<T>> {
    let sql = format!("{select} WHERE tenant_id = ? AND id{}", B::IN_LIST);
    let rows = b.read_all(&sql, &[Arg::Text(tenant), ids]).await?;
    rows.iter().map(decode).collect()
}

/// A row limit, written into the statement (`LIMIT {}`): `usize` past `i64::MAX` means no
/// limit.
///
/// **Never bind a `LIMIT` on SQLite.** Since its `LIMIT` optimisation reads the value of a
/// `LIMIT` parameter while planning (SQLite 3.51, `sqlite3ExprIsInteger` with a parse context),
/// SQLite marks the statement to be re-prepared whenever that parameter is bound again: every
/// execution of a cached statement with a bound limit was parsed and planned twice (a third
/// of a small query's time; 4 % of the embedding lane's). A literal keeps the plan cached;
/// the few distinct limits each get their own cached statement. Checked by a test over the
/// SQLite and shared sources.
pub(crate) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A shared statement with PostgreSQL's placeholders: outside quotes, the n-th bare `?`
/// becomes `$n` and a numbered `?n` (one value used twice) becomes `$n`.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let (mut n, mut quoted) = (0, false);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '?' if !quoted => {
                out.push('$');
                if chars.peek().is_some_and(char::is_ascii_digit) {
                    continue;
                }
                n += 1;
                out.push_str(&n.to_string());
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// A store that runs the shared statements. Statements are this crate's own text (never a
/// caller's), so they are taken as `&str`.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    type Row: rows::Columns + Send + Sync;
    /// A write transaction.
    type Tx: Send;

    /// What orders text bytewise after `ORDER BY col` (SQLite's default already does).
    const BYTE_ORDER: &'static str;
    /// What locks the rows a read inside a write transaction decides on (SQLite's one
    /// writer needs nothing).
    const LOCK: &'static str;
    /// What follows a column to test it against a bound list ([`Arg::Ids`], [`Arg::Texts`]).
    const IN_LIST: &'static str;
    /// The jobs table read through its index of finished jobs (`jobs_done`, migration 15).
    const FINISHED_JOBS: &'static str;
    /// Writers take the user's change counter as the user's lock before anything else
    /// (PostgreSQL), even when they add no row.
    const USER_LOCK: bool;

    /// SQL for the day of timestamp column `col`, as days since the Unix epoch (UTC).
    fn day(col: &str) -> String;

    /// Every row of a read.
    async fn read_all(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Self::Row>>;
    /// The row of a read of at most one row, if any.
    async fn read_opt(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Self::Row>> {
        Ok(self.read_all(sql, args).await?.into_iter().next())
    }
    /// One write statement of at most one row, in a transaction of its own; the row it
    /// returns, if any.
    async fn write_opt(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Self::Row>> {
        let mut tx = self.begin_write().await?;
        let row = Self::tx_opt(&mut tx, sql, args).await?;
        Self::commit(tx).await?;
        Ok(row)
    }
    /// One write statement on its own; the rows it changed.
    async fn write(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64>;

    async fn begin_write(&self) -> Result<Self::Tx>;
    async fn commit(tx: Self::Tx) -> Result<()>;
    /// Every row of a statement inside `tx`.
    async fn tx_all(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Self::Row>>;
    /// The row of a statement of at most one row inside `tx`, if any.
    async fn tx_opt(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> Result<Option<Self::Row>> {
        Ok(Self::tx_all(tx, sql, args).await?.into_iter().next())
    }
    /// Run a statement inside `tx`: the rows it changed, or the database's error as it is
    /// (for callers that tell a duplicate apart, [`Backend::is_duplicate`]).
    async fn tx_run(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> sqlx::Result<u64>;
    /// Run a statement inside `tx` that may fail without spoiling the transaction
    /// (PostgreSQL: in a savepoint; SQLite undoes a failed statement by itself).
    async fn tx_attempt(tx: &mut Self::Tx, sql: &str, args: &[Arg<'_>]) -> sqlx::Result<u64>;
    /// Bump a user's change counter inside `tx` ([`crate::versions`]); the new version.
    async fn bump(tx: &mut Self::Tx, tenant: &str, user: &str) -> Result<i64>;

    /// A database error as an engine error ([`crate::fault`]).
    fn fault(e: sqlx::Error) -> Error;
    /// The error is a unique-key violation.
    fn is_duplicate(e: &sqlx::Error) -> bool;

    /// Columns the backend adds to a new memory row (PostgreSQL: its keyword index), their
    /// values in SQL, and what those bind.
    fn memory_index(m: &Memory) -> (&'static str, &'static str, Vec<Arg<'static>>);
    /// The same for a new message.
    fn message_index(m: &Message) -> (&'static str, &'static str, Vec<Arg<'static>>);
    /// The same for a new summary of this content.
    fn summary_index(content: &str) -> (&'static str, &'static str, Vec<Arg<'static>>);
}

#[cfg(test)]
mod tests {
    /// No SQLite statement binds its `LIMIT` (see [`super::limit`]).
    #[test]
    fn sqlite_statements_write_their_limit() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut checked = 0;
        for sub in ["common", "sqlite"] {
            for entry in std::fs::read_dir(format!("{dir}/{sub}")).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                // Built here, so this test's own text does not match.
                let bad_forms =
                    ["?", "\").push_bind", "$"].map(|tail| format!("{} {tail}", "LIMIT"));
                for bad in &bad_forms {
                    assert!(!flat.contains(bad), "{} binds a LIMIT ({bad})", path.display());
                }
                checked += 1;
            }
        }
        let transfer = std::fs::read_to_string(format!("{dir}/transfer.rs")).unwrap();
        assert!(!transfer.contains(&format!("{} ?", "LIMIT")), "transfer.rs binds a LIMIT");
        assert!(checked >= 10, "the sources were not found: {checked}");
    }

    #[test]
    fn numbered_placeholders() {
        assert_eq!(super::numbered("a = ? AND b = '?' AND c = ?"), "a = $1 AND b = '?' AND c = $2");
        assert_eq!(super::numbered("a = ?1 OR b = ?1 OR c = ?2"), "a = $1 OR b = $1 OR c = $2");
    }
}
