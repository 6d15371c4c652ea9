//! Alternative full-text set-ups, measured on private in-memory FTS5 tables.
//!
//! Each conversation's turns go into an in-memory SQLite FTS5 table (the bundled SQLite the
//! store uses, through sqlx) with a given tokenizer; each question is turned into an FTS5
//! query the way the store does it (`engram_store::sqlite::match_terms`: lowercased words,
//! English function words dropped, words of more than four characters cut to a prefix, OR-ed
//! as quoted terms) or with whole words only (`query_terms`, the store before the prefix
//! rule), with or without the store's frequency cut (drop any term found in half the rows or
//! more), and the top C rows by BM25 are the text list. The first variant replicates the
//! store, as a check that these tables rank like the real one.

use engram_store::sqlite::MatchTerm;
use sqlx::Row;
use sqlx::sqlite::SqlitePoolOptions;

use super::Conversation;

/// One full-text set-up.
#[derive(Debug, Clone, Copy)]
pub struct FtsVariant {
    pub name: &'static str,
    pub tokenize: &'static str,
    /// Words of more than four characters as prefixes (the store's `match_terms`), else whole
    /// words.
    pub truncate: bool,
    /// Drop query terms found in half the rows or more (the store's rule).
    pub frequency_cut: bool,
    /// Also drop the clitic fragments `s`, `t`, `d`, `ll`, `m`, `re`, `ve` ("Caroline's",
    /// "don't" split into two tokens by unicode61).
    pub drop_clitics: bool,
    /// Report a grid of fusions with the vector list (else only the engine's RRF).
    pub grid: bool,
}

pub const VARIANTS: &[FtsVariant] = &[
    FtsVariant {
        name: "store replica (unicode61, word forms by truncation, frequency cut)",
        tokenize: "unicode61 remove_diacritics 2",
        truncate: true,
        frequency_cut: true,
        drop_clitics: false,
        grid: true,
    },
    FtsVariant {
        name: "unicode61, truncation, no frequency cut",
        tokenize: "unicode61 remove_diacritics 2",
        truncate: true,
        frequency_cut: false,
        drop_clitics: false,
        grid: false,
    },
    FtsVariant {
        name: "unicode61, whole words, frequency cut (the store before the prefix rule)",
        tokenize: "unicode61 remove_diacritics 2",
        truncate: false,
        frequency_cut: true,
        drop_clitics: false,
        grid: false,
    },
    FtsVariant {
        name: "unicode61, whole words, no frequency cut",
        tokenize: "unicode61 remove_diacritics 2",
        truncate: false,
        frequency_cut: false,
        drop_clitics: false,
        grid: false,
    },
    FtsVariant {
        name: "unicode61, whole words, frequency cut, clitics dropped",
        tokenize: "unicode61 remove_diacritics 2",
        truncate: false,
        frequency_cut: true,
        drop_clitics: true,
        grid: false,
    },
    FtsVariant {
        name: "porter stemming, frequency cut",
        tokenize: "porter unicode61 remove_diacritics 2",
        truncate: false,
        frequency_cut: true,
        drop_clitics: false,
        grid: true,
    },
    FtsVariant {
        name: "porter stemming, frequency cut, clitics dropped",
        tokenize: "porter unicode61 remove_diacritics 2",
        truncate: false,
        frequency_cut: true,
        drop_clitics: true,
        grid: true,
    },
];

const CLITICS: &[&str] = &["s", "t", "d", "ll", "m", "re", "ve"];

/// The text list (top `k`, `(dia_id, -bm25)`) of every question, in conversation order.
pub async fn text_lists(
    convs: &[Conversation],
    v: &FtsVariant,
    k: usize,
) -> anyhow::Result<Vec<Vec<(String, f64)>>> {
    let mut out = Vec::new();
    for c in convs {
        let pool = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE VIRTUAL TABLE t USING fts5 (content, tokenize = '{}')",
            v.tokenize
        )))
        .execute(&pool)
        .await?;
        let mut tx = pool.begin().await?;
        for (i, (_, content)) in c.turns.iter().enumerate() {
            sqlx::query("INSERT INTO t (rowid, content) VALUES (?, ?)")
                .bind(i as i64 + 1)
                .bind(content)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        let n = c.turns.len() as i64;
        for q in &c.queries {
            let mut terms: Vec<MatchTerm> = if v.truncate {
                engram_store::sqlite::match_terms(&q.text)
            } else {
                engram_store::sqlite::query_terms(&q.text)
                    .into_iter()
                    .map(|text| MatchTerm { text, prefix: false })
                    .collect()
            };
            if v.drop_clitics {
                terms.retain(|t| !CLITICS.contains(&t.text.as_str()));
            }
            if v.frequency_cut && n >= 4 {
                let mut keep = Vec::new();
                for t in terms {
                    let df: i64 = sqlx::query("SELECT count(*) FROM t WHERE t MATCH ?")
                        .bind(t.fts5())
                        .fetch_one(&pool)
                        .await?
                        .get(0);
                    if df * 2 < n {
                        keep.push(t);
                    }
                }
                terms = keep;
            }
            if terms.is_empty() {
                out.push(Vec::new());
                continue;
            }
            let fq = terms.iter().map(MatchTerm::fts5).collect::<Vec<_>>().join(" OR ");
            let rows = sqlx::query(
                "SELECT rowid, bm25(t) AS score FROM t WHERE t MATCH ? ORDER BY score LIMIT ?",
            )
            .bind(fq)
            .bind(k as i64)
            .fetch_all(&pool)
            .await?;
            out.push(
                rows.iter()
                    .map(|r| {
                        let i = r.get::<i64, _>(0) as usize - 1;
                        (c.turns[i].0.clone(), -r.get::<f64, _>(1))
                    })
                    .collect(),
            );
        }
        pool.close().await;
    }
    Ok(out)
}
