//! `search --text-sql`: the keyword-search SQL with the two join orders.
//!
//! On a filled data dir, every benchmark query is turned into the store's FTS5 query (its
//! own `query_terms`, then its rule of dropping terms found in half the rows or more), and
//! two statements are timed on a read-only connection of the bundled SQLite:
//!
//! - **planner's order** (`memories_fts JOIN memories`, the store's statement before commit
//!   3fe232b): SQLite 3.51 walks the user's rows through the `memories_scope` index and
//!   re-runs the full-text match for each of them, which grows with the scope;
//! - **FTS first** (`CROSS JOIN`, the store's statement since 3fe232b): the match runs once
//!   and the matching rows are looked up by rowid.
//!
//! Both must return the same ids (checked); `EXPLAIN QUERY PLAN` of both is reported. A
//! third timing runs the FTS-first statement on the query without the clitic fragments
//! `s`, `t`, `d`, `ll`, `m`, `re`, `ve` (unicode61 splits "user's" into "user" and "s",
//! and "s" then matches every possessive in the scope).

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Row, SqlitePool};

use crate::report::Latency;

#[derive(Debug, Serialize)]
pub struct TextSql {
    pub planner_join: Latency,
    pub fts_first: Latency,
    /// FTS first, with clitic fragments dropped from the query.
    pub fts_first_no_clitics: Latency,
    /// Queries whose two answers had the same ids in the same order.
    pub same_results: usize,
    pub queries: usize,
    pub plan_planner_join: Vec<String>,
    pub plan_fts_first: Vec<String>,
}

const SQL: &str = "SELECT m.id AS id, bm25(memories_fts, 1.0, 0.0) AS score FROM memories_fts {JOIN} memories m \
     ON m.rowid = memories_fts.rowid WHERE memories_fts MATCH ? AND m.tenant_id = ? AND user_id = ? \
     AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > ?) ORDER BY score LIMIT ?";

/// The store's FTS5 query for `q` in `user`'s scope (see `SqliteStore::informative_query`):
/// terms in half the user's rows or more dropped, the scope token ANDed in unless the user's
/// scope holds the whole index.
async fn fts_query(
    pool: &SqlitePool,
    q: &str,
    user: &str,
    drop_clitics: bool,
) -> anyhow::Result<Option<String>> {
    let mut terms = engram_store::sqlite::query_terms(q);
    if drop_clitics {
        terms.retain(|t| !["s", "t", "d", "ll", "m", "re", "ve"].contains(&t.as_str()));
    }
    if terms.is_empty() {
        return Ok(None);
    }
    let scope = sqlx::query(
        "SELECT s.id, s.memories, a.memories FROM keyword_scopes s, keyword_scopes a \
         WHERE s.tenant_id = 'default' AND s.user_id = ? AND a.tenant_id = '' AND a.user_id = ''",
    )
    .bind(user)
    .fetch_optional(pool)
    .await?;
    let Some(scope) = scope else { return Ok(None) };
    let (id, n, everything): (i64, i64, i64) = (scope.get(0), scope.get(1), scope.get(2));
    // As the store: no token when the user's scope holds the whole index.
    let token = if n == everything { String::new() } else { format!("scope : u{id} AND ") };
    let mut keep = terms.clone();
    if n >= 4 {
        for t in &terms {
            let doc: i64 =
                sqlx::query("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?")
                    .bind(format!("{token}{{content}} : \"{t}\""))
                    .fetch_one(pool)
                    .await?
                    .get(0);
            if doc * 2 >= n {
                keep.retain(|k| k != t);
            }
        }
    }
    if keep.is_empty() {
        return Ok(None);
    }
    let terms = keep.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR ");
    Ok(Some(format!("{token}{{content}} : ({terms})")))
}

async fn plan(pool: &SqlitePool, sql: &str, fq: &str, user: &str) -> anyhow::Result<Vec<String>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
        .bind(fq)
        .bind("default")
        .bind(user)
        .bind(0i64)
        .bind(50i64)
        .fetch_all(pool)
        .await?;
    Ok(rows.iter().map(|r| r.get::<String, _>("detail")).collect())
}

async fn run_one(
    pool: &SqlitePool,
    sql: &str,
    fq: &str,
    user: &str,
    k: usize,
) -> anyhow::Result<(Duration, Vec<String>)> {
    let now = engram_store::sqlite::ts(time::OffsetDateTime::now_utc());
    let t = Instant::now();
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(fq)
        .bind("default")
        .bind(user)
        .bind(now)
        .bind(k as i64)
        .fetch_all(pool)
        .await?;
    let elapsed = t.elapsed();
    Ok((elapsed, rows.iter().map(|r| r.get::<String, _>("id")).collect()))
}

pub async fn compare(
    data_dir: &Path,
    user: &str,
    queries: &[String],
    k: usize,
) -> anyhow::Result<TextSql> {
    let opts = SqliteConnectOptions::from_str("sqlite://")?
        .filename(data_dir.join("engram.db"))
        .read_only(true);
    let pool = SqlitePoolOptions::new().max_connections(1).connect_with(opts).await?;
    let store_sql = SQL.replace("{JOIN}", "JOIN");
    let cross_sql = SQL.replace("{JOIN}", "CROSS JOIN");
    let mut t_store = Vec::new();
    let mut t_cross = Vec::new();
    let mut t_clitics = Vec::new();
    let mut same = 0;
    let mut plans = None;
    for q in queries {
        let Some(fq) = fts_query(&pool, q, user, false).await? else { continue };
        if plans.is_none() {
            plans = Some((
                plan(&pool, &store_sql, &fq, user).await?,
                plan(&pool, &cross_sql, &fq, user).await?,
            ));
        }
        let (a, ids_a) = run_one(&pool, &store_sql, &fq, user, k).await?;
        let (b, ids_b) = run_one(&pool, &cross_sql, &fq, user, k).await?;
        t_store.push(a);
        t_cross.push(b);
        same += usize::from(ids_a == ids_b);
        if let Some(fq) = fts_query(&pool, q, user, true).await? {
            t_clitics.push(run_one(&pool, &cross_sql, &fq, user, k).await?.0);
        }
    }
    pool.close().await;
    anyhow::ensure!(!t_store.is_empty(), "no query had a full-text part");
    let (plan_store, plan_fts_first) = plans.unwrap_or_default();
    Ok(TextSql {
        planner_join: Latency::of(&t_store),
        fts_first: Latency::of(&t_cross),
        fts_first_no_clitics: Latency::of(&t_clitics),
        same_results: same,
        queries: t_store.len(),
        plan_planner_join: plan_store,
        plan_fts_first,
    })
}
