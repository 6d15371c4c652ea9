//! Typo tolerance of keyword queries, the same on both backends: a query word that matches
//! nothing in the scope being searched is replaced by the scope's own words that are one
//! edit away from it (two for a word of [`LONG_CHARS`] characters or more), so "nurce" finds
//! "nurse" and "accomodation" finds "accommodation".
//!
//! - **Which words.** Words of [`MIN_CHARS`] letters or more (no digit: numbers, dates and
//!   codes stay exact; no character written without spaces) whose own match
//!   ([`crate::text::match_term`]: "nurce" → `nurc*`) finds no row of the scope.
//! - **Candidates.** The scope's indexed words that share the word's first [`HEAD_CHARS`]
//!   letters, read from at most [`ROWS`] rows holding such a word ([`PrefixWords::prefix_words`]);
//!   kept when within the distance (optimal string alignment: a swap of two neighbouring
//!   letters is one edit), not function words, and of [`crate::text::MATCH_MIN_CHARS`]
//!   characters or more; the [`MAX_CORRECTIONS`] nearest replace the word in the query. A typo
//!   in the first letters is not corrected, as spelling tools weigh first-letter typos higher.
//! - **What a caller sees.** The keyword list of the query spelled right, each hit's keyword
//!   coverage times [`GUESSED`] (a correction is a guess);
//!   the corrected words, like the query's own, are matched only within the scope, and the
//!   candidates come from the same user's rows as the search (for memories, every pool of
//!   the user: a candidate from a pool the caller cannot see matches only rows it can see,
//!   and every candidate within the distance is used, so which rows it cannot see does not
//!   change what it finds).
//! - **Cost.** Nothing when a keyword hit holds every query word (no word can be missing);
//!   otherwise one lookup per eligible word (one matching row is enough), the candidate read
//!   only for a word that found nothing, and a second keyword search only when a word was
//!   corrected (`benches/README.md`, "Typo tolerance").

use std::borrow::Cow;
use std::collections::HashMap;

use async_trait::async_trait;
use engram_core::error::Result;
use engram_core::model::TenantId;
use engram_core::words::is_function_word;

use crate::text::{MATCH_MIN_CHARS, fold_diacritics, match_term, query_terms};
use engram_core::retrieval::is_wide;

/// What a backend reads for the corrections.
#[async_trait]
pub(crate) trait PrefixWords {
    /// For each of `prefixes`, the words that start with it in the keyword index of one
    /// scope's rows of `table` (`memories`: the user's, or with `user` None the tenant's;
    /// `messages`, `summaries`: the user's), read from at most `rows` matching rows: their
    /// own words (a message's, not its context's), lowercased with diacritics folded
    /// ([`crate::text::index_text`]).
    async fn prefix_words(
        &self,
        tenant: &TenantId,
        user: Option<&str>,
        table: &'static str,
        prefixes: &[String],
        rows: usize,
    ) -> Result<Vec<Vec<String>>>;
}

/// Shorter words are never corrected (too many words are one edit from "cat").
pub(crate) const MIN_CHARS: usize = 5;
/// Words this long may carry two typos.
pub(crate) const LONG_CHARS: usize = 9;
/// Candidates share this many first letters with the word.
pub(crate) const HEAD_CHARS: usize = 2;
/// At most this many rows are read for the candidates of one word.
pub(crate) const ROWS: usize = 200;
/// At most this many corrections replace one word.
pub(crate) const MAX_CORRECTIONS: usize = 3;

/// The corrected query to search again with, after a keyword search of `query` found `hits`
/// (with their coverage): None when a hit holds every query word (none can be missing) or
/// when nothing is corrected.
pub(crate) async fn retry<D: PrefixWords + Sync, I>(
    d: &D,
    tenant: &TenantId,
    user: Option<&str>,
    table: &'static str,
    query: &str,
    hits: &[(I, f64)],
) -> Result<Option<String>> {
    if hits.iter().any(|h| h.1 >= WHOLE) {
        return Ok(None);
    }
    Ok(match corrected(d, tenant, user, table, query).await? {
        Cow::Owned(q) => Some(q),
        Cow::Borrowed(_) => None,
    })
}

/// The hits of a corrected query, their coverage times [`GUESSED`].
pub(crate) fn guessed<I>(mut hits: Vec<(I, f64)>) -> Vec<(I, f64)> {
    for h in &mut hits {
        h.1 *= GUESSED;
    }
    hits
}

/// What a corrected query's keyword coverage counts for: a correction is a guess. A word
/// written as it was meant, one edit from another real word ("state" and "stage", "plate" and
/// "place"), is corrected when the user never wrote it; the hits of such a stray correction
/// in a query on another topic hold a share of its words (≈ 0.3), which this keeps under the
/// default `min_score` once squared (0.3 × 0.7 = 0.21 → 0.044), while a query of one
/// misspelt word still scores 0.49 (`benches/README.md`, "Typo tolerance").
pub(crate) const GUESSED: f64 = 0.7;

/// A hit's coverage at or above this holds every query word.
const WHOLE: f64 = 1.0 - 1e-9;

/// `query` with every word that matches nothing in the scope replaced by its corrections
/// (the query itself when there is nothing to correct).
pub(crate) async fn corrected<'q, D: PrefixWords + Sync>(
    d: &D,
    tenant: &TenantId,
    user: Option<&str>,
    table: &'static str,
    query: &'q str,
) -> Result<Cow<'q, str>> {
    let words: Vec<String> = query_terms(query)
        .into_iter()
        .map(|w| fold_diacritics(&w))
        .filter(|w| eligible(w))
        .collect();
    if words.is_empty() {
        return Ok(Cow::Borrowed(query));
    }
    let own: Vec<String> = words.iter().map(|w| match_term(w).text).collect();
    let found = d.prefix_words(tenant, user, table, &own, 1).await?;
    let missing: Vec<&String> =
        words.iter().zip(&found).filter(|(_, f)| f.is_empty()).map(|(w, _)| w).collect();
    if missing.is_empty() {
        return Ok(Cow::Borrowed(query));
    }
    let heads: Vec<String> = missing.iter().map(|w| w.chars().take(HEAD_CHARS).collect()).collect();
    let candidates = d.prefix_words(tenant, user, table, &heads, ROWS).await?;
    let mut fixes: HashMap<&str, Vec<String>> = HashMap::new();
    for (w, cands) in missing.into_iter().zip(candidates) {
        let near = nearest(w, cands);
        if !near.is_empty() {
            fixes.insert(w.as_str(), near);
        }
    }
    if fixes.is_empty() {
        return Ok(Cow::Borrowed(query));
    }
    Ok(Cow::Owned(rewrite(query, &fixes)))
}

/// Whether a (folded) query word may be corrected.
fn eligible(w: &str) -> bool {
    w.chars().count() >= MIN_CHARS && w.chars().all(|c| c.is_alphabetic() && !is_wide(c))
}

/// The candidates within the word's distance, nearest first (then alphabetical), at most
/// [`MAX_CORRECTIONS`].
fn nearest(word: &str, candidates: Vec<String>) -> Vec<String> {
    let max = if word.chars().count() >= LONG_CHARS { 2 } else { 1 };
    let mut near: Vec<(usize, String)> = candidates
        .into_iter()
        .filter(|c| c.chars().count() >= MATCH_MIN_CHARS && !is_function_word(c))
        .map(|c| (strsim::osa_distance(word, &c), c))
        .filter(|(d, _)| (1..=max).contains(d))
        .collect();
    near.sort();
    near.dedup();
    near.truncate(MAX_CORRECTIONS);
    near.into_iter().map(|(_, c)| c).collect()
}

/// The query with each word found in `fixes` (compared lowercased, diacritics folded)
/// replaced by its corrections; everything else as written.
fn rewrite(query: &str, fixes: &HashMap<&str, Vec<String>>) -> String {
    let mut out = String::with_capacity(query.len() + 16);
    let mut rest = query;
    while let Some(start) = rest.find(|c: char| c.is_alphanumeric()) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail.find(|c: char| !c.is_alphanumeric()).unwrap_or(tail.len());
        let word = &tail[..end];
        match fixes.get(fold_diacritics(&word.to_lowercase()).as_str()) {
            Some(fix) => out.push_str(&fix.join(" ")),
            None => out.push_str(word),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn one_edit_for_short_words_two_for_long_ones() {
        assert_eq!(nearest("nurce", cands(&["nurse", "nurses", "number", "nuance"])), ["nurse"]);
        assert_eq!(nearest("recieve", cands(&["receive", "recipe"])), ["receive"]);
        assert_eq!(
            nearest("accomodation", cands(&["accommodation", "accord", "accommodations"])),
            ["accommodation", "accommodations"]
        );
        assert!(nearest("quantum", cands(&["quality", "quarter"])).is_empty());
        // A function word is no correction, nor a word too short to stand for one.
        assert!(nearest("thers", cands(&["there", "then"])).is_empty());
    }

    #[test]
    fn only_longer_words_of_letters_are_corrected() {
        assert!(eligible("nurce") && eligible("cafés") && eligible("straße"));
        assert!(!eligible("nurs") && !eligible("x1234") && !eligible("北京烤鸭店"));
    }

    #[test]
    fn the_rest_of_the_query_stays_as_written() {
        let fixes = HashMap::from([("nurce", vec!["nurse".to_string()])]);
        assert_eq!(rewrite("Is Del a Nurce?", &fixes), "Is Del a nurse?");
        let two = HashMap::from([("recieve", vec!["receive".into(), "recipe".into()])]);
        assert_eq!(rewrite("did recieve it", &two), "did receive recipe it");
        assert_eq!(rewrite("", &fixes), "");
    }
}
