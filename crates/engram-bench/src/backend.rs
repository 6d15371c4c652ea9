//! Which store a benchmark writes to and searches: SQLite in a data dir (the default), or
//! PostgreSQL (`--database-url postgres://…`), where every run gets a database of its own on
//! that server (created with `CREATE DATABASE`, so the URL's user must be allowed to create
//! databases; `scripts/pg.sh start` gives such a server).

use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;
use engram_core::store::prelude::*;
use serde::Serialize;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// The backend named on a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn of(database_url: Option<&str>) -> Self {
        if database_url.is_some() { Backend::Postgres } else { Backend::Sqlite }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }
}

/// A database of its own on a PostgreSQL server; dropped on [`PgDatabase::cleanup`] unless
/// kept.
#[derive(Debug)]
pub struct PgDatabase {
    server: PgConnectOptions,
    pub name: String,
    /// The URL of the database (the server URL with its database replaced).
    pub url: String,
    keep: bool,
}

/// The options of `url` with another database.
fn with_database(url: &str, name: &str) -> anyhow::Result<(PgConnectOptions, String)> {
    let opts = PgConnectOptions::from_str(url).context("--database-url")?;
    let mut u = reqwest::Url::parse(url).context("--database-url")?;
    u.set_path(&format!("/{name}"));
    Ok((opts, u.to_string()))
}

impl PgDatabase {
    /// `CREATE DATABASE <name>` on the server of `url` (after dropping any database of that
    /// name).
    pub async fn create(url: &str, name: &str, keep: bool) -> anyhow::Result<Self> {
        anyhow::ensure!(
            name.len() <= 63 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad database name {name}"
        );
        let (server, db_url) = with_database(url, name)?;
        let mut c = server.connect().await.context("connecting to --database-url")?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut c)
            .await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut c)
            .await
            .with_context(|| format!("CREATE DATABASE {name}"))?;
        c.close().await?;
        if keep {
            eprintln!("database kept: {db_url}");
        }
        Ok(Self { server, name: name.to_string(), url: db_url, keep })
    }

    /// A fresh database with a unique name made from `prefix`.
    pub async fn fresh(url: &str, prefix: &str, keep: bool) -> anyhow::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("engram_bench_{prefix}_{}_{nanos}", std::process::id());
        Self::create(url, &name, keep).await
    }

    /// An existing database `name` whose comment starts with `marker` (a complete earlier
    /// fill), with that comment; `None` if there is none.
    pub async fn existing(
        url: &str,
        name: &str,
        marker: &str,
    ) -> anyhow::Result<Option<(Self, String)>> {
        let (server, db_url) = with_database(url, name)?;
        let mut c = server.connect().await.context("connecting to --database-url")?;
        let comment: Option<Option<String>> = sqlx::query_scalar(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1",
        )
        .bind(name)
        .fetch_optional(&mut c)
        .await?;
        c.close().await?;
        Ok(comment.flatten().filter(|c| c.starts_with(marker)).map(|comment| {
            (Self { server, name: name.to_string(), url: db_url, keep: true }, comment)
        }))
    }

    /// Mark the database complete (see [`PgDatabase::existing`]).
    pub async fn mark(&self, marker: &str) -> anyhow::Result<()> {
        let mut c = self.server.connect().await?;
        let marker = marker.replace('\'', "''");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "COMMENT ON DATABASE {} IS '{marker}'",
            self.name
        )))
        .execute(&mut c)
        .await?;
        c.close().await?;
        Ok(())
    }

    /// Drop the database unless it is kept.
    pub async fn cleanup(self) -> anyhow::Result<()> {
        if self.keep {
            return Ok(());
        }
        let mut c = self.server.connect().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut c)
        .await?;
        c.close().await?;
        Ok(())
    }
}

/// Open the store: PostgreSQL at `database_url`, else SQLite in `data_dir`.
pub async fn open(
    database_url: Option<&str>,
    data_dir: &std::path::Path,
) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match database_url {
        Some(url) => engram_store::open_postgres(url).await?,
        None => engram_store::open_sqlite(data_dir).await?,
    })
}
