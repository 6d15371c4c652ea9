//! Typo tolerance of keyword queries, the same on both backends: a query word that matches
//! nothing in the scope being searched is replaced by the scope's own word one edit away from
//! it (two for a word of [`LONG_CHARS`] characters or more), so "nurce" finds "nurse" and
//! "accomodation" finds "accommodation".
//!
//! - **When.** Only when no keyword hit holds every query word (then none can be missing),
//!   and never for a caller who sees part of the scope (an agent's pool): the words are read
//!   from the whole scope, and what another pool holds must not change what the caller finds.
//! - **Which words.** Words of [`MIN_CHARS`] letters or more (no digit: numbers, dates and
//!   codes stay exact; no character written without spaces) whose own match
//!   ([`crate::text::match_term`]: "nurce" → `nurc*`) finds no row of the scope (active
//!   memories only: a forgotten fact's words do not count).
//! - **The correction.** Among the scope's words that share the word's first [`HEAD_CHARS`]
//!   letters, read from at most [`ROWS`] rows holding such a word
//!   ([`PrefixWords::prefix_words`]), of [`crate::text::MATCH_MIN_CHARS`] characters or more
//!   and not function words: the nearest within the distance (optimal string alignment: a
//!   swap of two neighbouring letters is one edit), then the one the most of those rows hold.
//!   One word replaces one word, so a misspelling weighs what the word spelled right would. A
//!   typo in the first letters is not corrected, as spelling tools weigh first-letter typos
//!   higher.
//! - **What a caller sees.** The keyword list of the query spelled right, each hit's keyword
//!   coverage the larger of what it held of the query as written and what it holds of the
//!   corrected one times [`GUESSED`] per edit of the farthest correction (a guess); corrected words, like the
//!   query's own, match only within the scope.
//! - **Cost.** Nothing when a hit holds every query word; otherwise one lookup per eligible
//!   word (one matching row is enough), the candidate read only for a word that found
//!   nothing, and a second keyword search only when a word was corrected
//!   (`benches/README.md`, "Typo tolerance").

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
    /// scope's rows of `table` (`memories`: the user's active ones, or with `user` None the
    /// tenant's; `messages`, `summaries`: the user's), read from at most `rows` matching
    /// rows: their own words (a message's, not its context's), lowercased with diacritics
    /// folded ([`crate::text::index_text`]), each with the number of those rows holding it.
    async fn prefix_words(
        &self,
        tenant: &TenantId,
        user: Option<&str>,
        table: &'static str,
        prefixes: &[String],
        rows: usize,
    ) -> Result<Vec<Vec<(String, usize)>>>;
}

/// Shorter words are never corrected (too many words are one edit from "cat").
pub(crate) const MIN_CHARS: usize = 5;
/// Words this long may carry two typos.
pub(crate) const LONG_CHARS: usize = 9;
/// Candidates share this many first letters with the word.
pub(crate) const HEAD_CHARS: usize = 2;
/// At most this many rows are read for the candidates of one word.
pub(crate) const ROWS: usize = 200;

/// The corrected query to search again with and what its coverage counts for ([`GUESSED`]
/// per edit of its farthest correction), after a keyword search of `query` found `hits`
/// (with their coverage): None when a hit holds every query word (none can be missing), when
/// nothing is corrected, or when `words` is None — the caller sees only part of the scope (an
/// agent's pool), and a correction read from the whole scope would let the other part change
/// what it finds. `words`: the user (None: the tenant, memories only) and the table.
pub(crate) async fn retry<D: PrefixWords + Sync, I>(
    d: &D,
    tenant: &TenantId,
    words: Option<(Option<&str>, &'static str)>,
    query: &str,
    hits: &[(I, f64)],
) -> Result<Option<(String, f64)>> {
    let Some((user, table)) = words else { return Ok(None) };
    if hits.iter().any(|h| h.1 >= WHOLE) {
        return Ok(None);
    }
    let fixed = corrected(d, tenant, user, table, query).await?;
    Ok(fixed.map(|(q, edits)| (q, GUESSED.powi(edits as i32))))
}

/// The hits of the corrected query, each with the larger of its coverage before the
/// correction and `weight` ([`retry`]'s) times its coverage after it: a row that held the
/// query's words as written keeps that support.
pub(crate) fn guessed<I: Copy + Eq + std::hash::Hash>(
    before: &[(I, f64)],
    mut after: Vec<(I, f64)>,
    weight: f64,
) -> Vec<(I, f64)> {
    let before: HashMap<I, f64> = before.iter().copied().collect();
    for h in &mut after {
        h.1 = (h.1 * weight).max(before.get(&h.0).copied().unwrap_or(0.0));
    }
    after
}

/// What a corrected query's keyword coverage counts for, per edit: a correction is a guess,
/// and one of two edits a weaker one. A word written as it was meant, one edit from another
/// real word ("state" and "stage", "plate" and "place"), or two from a long one
/// ("congestion" and "connection"), is corrected when the user never wrote it; the hits of
/// such a stray correction in a query on another topic hold a share of its words (≈ 0.3),
/// which this keeps under the default `min_score` once squared (0.3 × 0.7 = 0.21 → 0.044),
/// while a query of one misspelt word still scores 0.49 (one edit) or 0.24 (two)
/// (`benches/README.md`, "Typo tolerance").
pub(crate) const GUESSED: f64 = 0.7;

/// A hit's coverage at or above this holds every query word.
const WHOLE: f64 = 1.0 - 1e-9;

/// `query` with every word that matches nothing in the scope replaced by its correction, and
/// the edits of the farthest one; None when there is nothing to correct.
pub(crate) async fn corrected<D: PrefixWords + Sync>(
    d: &D,
    tenant: &TenantId,
    user: Option<&str>,
    table: &'static str,
    query: &str,
) -> Result<Option<(String, usize)>> {
    let words: Vec<String> = query_terms(query)
        .into_iter()
        .map(|w| fold_diacritics(&w))
        .filter(|w| eligible(w))
        .collect();
    if words.is_empty() {
        return Ok(None);
    }
    let own: Vec<String> = words.iter().map(|w| match_term(w).text).collect();
    let found = d.prefix_words(tenant, user, table, &own, 1).await?;
    let missing: Vec<&String> =
        words.iter().zip(&found).filter(|(_, f)| f.is_empty()).map(|(w, _)| w).collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let heads: Vec<String> = missing.iter().map(|w| w.chars().take(HEAD_CHARS).collect()).collect();
    let candidates = d.prefix_words(tenant, user, table, &heads, ROWS).await?;
    let (mut fixes, mut edits) = (HashMap::new(), 0);
    for (w, cands) in missing.into_iter().zip(candidates) {
        if let Some((best, d)) = nearest(w, cands) {
            fixes.insert(w.as_str(), best);
            edits = edits.max(d);
        }
    }
    if fixes.is_empty() {
        return Ok(None);
    }
    Ok(Some((rewrite(query, &fixes), edits)))
}

/// Count, in `words`, each word of an indexed text (words separated by spaces) that starts
/// with `prefix`, once per text.
pub(crate) fn count_words(text: &str, prefix: &str, words: &mut Vec<(String, usize)>) {
    let mut seen: Vec<&str> = Vec::new();
    for w in text.split(' ').filter(|w| w.starts_with(prefix)) {
        if seen.contains(&w) {
            continue;
        }
        seen.push(w);
        match words.iter_mut().find(|(x, _)| x == w) {
            Some(found) => found.1 += 1,
            None => words.push((w.to_string(), 1)),
        }
    }
}

/// Whether a (folded) query word may be corrected.
fn eligible(w: &str) -> bool {
    w.chars().count() >= MIN_CHARS && w.chars().all(|c| c.is_alphabetic() && !is_wide(c))
}

/// The correction of a word: the nearest candidate within its distance, of those the most
/// rows hold (the likelier meaning), then the first in alphabetical order. One word, so a
/// misspelling weighs what the word spelled right would, however many near words the user
/// has.
fn nearest(word: &str, candidates: Vec<(String, usize)>) -> Option<(String, usize)> {
    let max = if word.chars().count() >= LONG_CHARS { 2 } else { 1 };
    candidates
        .into_iter()
        .filter(|(c, _)| c.chars().count() >= MATCH_MIN_CHARS && !is_function_word(c))
        .map(|(c, rows)| (strsim::osa_distance(word, &c), std::cmp::Reverse(rows), c))
        .filter(|(d, _, _)| (1..=max).contains(d))
        .min()
        .map(|(d, _, c)| (c, d))
}

/// The query with each word found in `fixes` (compared lowercased, diacritics folded)
/// replaced by its corrections; everything else as written.
fn rewrite(query: &str, fixes: &HashMap<&str, String>) -> String {
    let mut out = String::with_capacity(query.len() + 16);
    let mut rest = query;
    while let Some(start) = rest.find(|c: char| c.is_alphanumeric()) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail.find(|c: char| !c.is_alphanumeric()).unwrap_or(tail.len());
        let word = &tail[..end];
        match fixes.get(fold_diacritics(&word.to_lowercase()).as_str()) {
            Some(fix) => out.push_str(fix),
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

    #[test]
    fn one_edit_for_short_words_two_for_long_ones() {
        let cands = |words: &[(&str, usize)]| -> Vec<(String, usize)> {
            words.iter().map(|(w, n)| (w.to_string(), *n)).collect()
        };
        let one = |w: &str, c: &[(&str, usize)]| nearest(w, cands(c)).map(|(c, _)| c);
        assert_eq!(one("nurce", &[("nurse", 1), ("nurses", 3), ("number", 2)]).unwrap(), "nurse");
        assert_eq!(one("recieve", &[("receive", 1), ("recipe", 1)]).unwrap(), "receive");
        let long = [("accord", 1), ("accommodations", 5), ("accommodation", 1)];
        assert_eq!(one("accomodation", &long).unwrap(), "accommodation", "nearest first");
        assert_eq!(one("acomodations", &long).unwrap(), "accommodations");
        assert_eq!(one("kaxrin", &[("kavrin", 1), ("kabrin", 2)]).unwrap(), "kabrin", "more rows");
        assert_eq!(one("kaxrin", &[("kavrin", 1), ("kabrin", 1)]).unwrap(), "kabrin");
        assert_eq!(one("quantum", &[("quality", 9), ("quarter", 9)]), None);
        // A function word is no correction.
        assert_eq!(one("thers", &[("there", 9)]), None);
    }

    #[test]
    fn only_longer_words_of_letters_are_corrected() {
        assert!(eligible("nurce") && eligible("cafés") && eligible("straße"));
        assert!(!eligible("nurs") && !eligible("x1234") && !eligible("北京烤鸭店"));
    }

    #[test]
    fn the_rest_of_the_query_stays_as_written() {
        let fixes = HashMap::from([("nurce", "nurse".to_string())]);
        assert_eq!(rewrite("Is Del a Nurce?", &fixes), "Is Del a nurse?");
        assert_eq!(rewrite("nurce, nurce", &fixes), "nurse, nurse");
        assert_eq!(rewrite("", &fixes), "");
    }

    #[test]
    fn a_correction_never_lowers_what_the_words_as_written_held() {
        let before = [(1, 0.4), (2, 0.2)];
        let after = guessed(&before, vec![(3, 1.0), (1, 0.5), (2, 0.5)], GUESSED);
        assert_eq!(after, [(3, 0.7), (1, 0.4), (2, 0.35)]);
    }
}
