//! What the two stores share: statements written once, with `?` placeholders (PostgreSQL
//! numbers them, [`numbered`]), the values they bind ([`Arg`], each represented per backend
//! the way [`crate::tables::Ty`] describes), and the parts of the store contract whose logic
//! is the same on SQLite and PostgreSQL ([`messages`]), written once over
//! [`Backend`].
//!
//! A backend implements [`Backend`]: how it binds an [`Arg`], where it reads and writes (the
//! SQLite store writes through its one writer connection with `BEGIN IMMEDIATE`, PostgreSQL
//! through its pool), and how it reads a column of its rows.

pub(crate) mod messages;

use async_trait::async_trait;
use engram_core::error::Result;
use engram_core::model::Message;
use time::OffsetDateTime;
use uuid::Uuid;

/// One value a shared statement binds, represented per backend.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    Int(i64),
    /// Text on SQLite, `uuid` on PostgreSQL.
    Id(Uuid),
    /// Unix nanoseconds on SQLite, `timestamptz` on PostgreSQL.
    Ts(OffsetDateTime),
    /// JSON text on SQLite, `jsonb` on PostgreSQL.
    Json(&'a serde_json::Value),
    OptJson(Option<&'a serde_json::Value>),
}

/// A row limit as bound: `usize` past `i64::MAX` means no limit.
pub(crate) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A statement of this module with PostgreSQL's placeholders: the n-th `?` outside quotes
/// becomes `$n`.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let (mut n, mut quoted) = (0, false);
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// A store that runs the shared statements.
#[async_trait]
pub(crate) trait Backend: Sync {
    type Row: Send + Sync;

    /// Every row of a read.
    async fn read_all(&self, sql: &'static str, args: &[Arg<'_>]) -> Result<Vec<Self::Row>>;
    /// The first row of a read, if any.
    async fn read_opt(&self, sql: &'static str, args: &[Arg<'_>]) -> Result<Option<Self::Row>>;
    /// One write statement on its own; the first row it returns, if any.
    async fn write_opt(&self, sql: &'static str, args: &[Arg<'_>]) -> Result<Option<Self::Row>>;
    /// One write statement on its own; the rows it changed.
    async fn write(&self, sql: &'static str, args: &[Arg<'_>]) -> Result<u64>;

    fn text(r: &Self::Row, col: &str) -> Result<String>;
    fn opt_text(r: &Self::Row, col: &str) -> Result<Option<String>>;
    fn int(r: &Self::Row, col: &str) -> Result<i64>;
    fn id(r: &Self::Row, col: &str) -> Result<Uuid>;
    fn message(r: &Self::Row) -> Result<Message>;
}
