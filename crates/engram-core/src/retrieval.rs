//! Ranking: Reciprocal Rank Fusion (the one place ranked lists are merged), the relevance
//! score, temporal decay, importance and rating weights, and the context block's packing
//! into a token budget.
//!
//! Pure functions, so the scoring can be tested and explained without a store.
//!
//! **The order** of results is `rrf × temporal_weight × importance_weight × rating_weight`
//! (the `rank_score` of `explain`), where
//! - `rrf = Σ 1/(60 + rank)` over the vector and the full-text lists, and the date list of a
//!   query that names a time (rank from 1);
//! - `temporal = e^(−0.05·days_since_access) · (1 + 0.02·access_count)` (SPEC §3), applied as
//!   `temporal_weight = 0.95 + 0.05·min(temporal, 2)`;
//! - `importance_weight = 1 + 0.01·(importance − 5)` (1 → 0.96, 5 → 1.00, 10 → 1.05);
//! - `rating_weight = 1 + 0.05·tanh(rating / 2)` (−1 → 0.977, +1 → 1.023, bounded in 0.95..1.05).
//!
//! **The score** a caller reads (and `min_score` compares) is the row's *relevance*, 0 to 1
//! and comparable across queries, unlike an RRF sum (≈ 0.016 for a first place whatever the
//! query): `relevance = 1 − (1 − semantic)·(1 − lexical)` — support from either side counts,
//! from both counts more — where
//! - `semantic` is the cosine similarity read on the embedder's scale
//!   ([`crate::embed::SimilarityScale`]): 0 at or below what unrelated texts reach, 1 for a
//!   close paraphrase, linear between (0 for a row the vector list did not return);
//! - `lexical` is the square of the keyword coverage the store gives a row of the keyword
//!   list — the share of the query's IDF weight held by the query words found in it — and 0
//!   for a row the keyword list did not return. Squared because a row holding one word of a
//!   three-word query is weak evidence: unrelated queries ("Kubernetes pod eviction
//!   thresholds") often share one word with something the user said, and squaring keeps
//!   such a stray match (coverage ≈ 0.3 → 0.09) under the default threshold while a row
//!   with all the query's words keeps 1 (measured in `benches/README.md`, "Abstention").
//!
//! A query that names a time ("on March 16, 2022", "in May 2023", "last week") adds a third
//! list, of messages sent in it or whose own relative dates point into it (`crate::when`),
//! fused like the others, and date support to the relevance:
//! `1 − (1 − semantic)·(1 − lexical)·(1 − date_match)` ([`DATE_SAID`], [`DATE_WITHIN`]).
//!
//! A message also draws support from its context, the two messages numbered just before it
//! in its conversation, when they are candidates of the same search: [`CONTEXT_SUPPORT`]
//! times the best of their own relevances is the message's relevance when that is larger
//! ([`context_supports`]). A short answer ("Yes, last Friday") says
//! little by itself while the question before it matches; the keyword index reads a
//! message's context at the same weight (`engram_store::text::CONTEXT_WEIGHT`). Support only
//! flows from candidates' own relevance (never on along a conversation), and the relevance
//! is the larger of the two, not their product: a message passes a `min_score` on its
//! context only when a message before it passes four times over, so a query for which
//! nothing passes still returns nothing.
//!
//! A row with neither (a vector neighbour under the noise floor and no query word) has
//! relevance 0 and is dropped by default ([`DEFAULT_MIN_SCORE`]): a query about something
//! the user never mentioned returns nothing.
//!
//! Why the weights are so gentle: adjacent RRF ranks differ by only 1–2 % (1/61 vs 1/62), and
//! a fact found by both lists scores twice one found by one. Weights of ±5 % let recency,
//! importance and feedback move a fact a few places among equally relevant candidates — a +1
//! rated second hit overtakes a −1 rated first (Platos) — without letting an important but
//! unrelated fact outrank the relevant one, or a fact that merely filled out many earlier
//! result lists (and so collected access counts) outrank a better match.

use std::collections::HashMap;

use time::OffsetDateTime;

use crate::embed::SimilarityScale;
use crate::model::{Kind, Memory, MemoryId};
use crate::pipeline::messages::{CONTEXT_MESSAGES, within_context_gap};

/// The `min_score` of a search that names none: results need real support, lexical or
/// semantic. On LoCoMo it leaves nothing for about 9 in 10 queries on unrelated topics while
/// fewer than 3 in 100 answerable questions lose an evidence turn from their top 10
/// (`benches/README.md`, "Abstention").
pub const DEFAULT_MIN_SCORE: f64 = 0.05;

/// The RRF constant of SPEC §3.
pub const RRF_K: f64 = 60.0;

/// Every component of a memory's score, for `explain: true`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Explain {
    /// 1-based rank in the vector list, if present there.
    pub vector_rank: Option<usize>,
    /// Cosine similarity with the query as asked (a message list ranked by a vector without
    /// the speakers the query names still reads it against the query as asked).
    pub vector_similarity: Option<f32>,
    /// 1-based rank in the full-text list, if present there.
    pub text_rank: Option<usize>,
    /// Keyword coverage: the share of the query's IDF weight held by the query words found
    /// in the row (0 to 1), if the keyword list returned it.
    pub text_coverage: Option<f64>,
    /// Semantic support: the cosine on the embedder's scale (0 to 1).
    pub semantic: f64,
    /// Lexical support: the keyword coverage squared, 0 when the keyword list did not return
    /// it.
    pub lexical: f64,
    /// 1-based rank in the date list (a query that names a time: the messages sent in it
    /// or whose relative dates point into it), if present there.
    pub date_rank: Option<usize>,
    /// Support from the time the query names: [`DATE_SAID`] for a row whose own relative
    /// date ("yesterday", "last week") points into it, [`DATE_WITHIN`] for one written or
    /// observed within it, 0 otherwise.
    pub date_match: f64,
    /// A message's support from its context: [`CONTEXT_SUPPORT`] × the best own relevance
    /// of the two messages numbered just before it, when they are candidates too; 0 for
    /// memories, summaries and messages without such candidates.
    pub context_support: f64,
    /// `1 − (1 − semantic)·(1 − lexical)·(1 − date_match)`, or `context_support` when that
    /// is larger.
    pub relevance: f64,
    pub rrf: f64,
    pub days_since_access: f64,
    pub access_count: i64,
    pub temporal: f64,
    pub temporal_weight: f64,
    pub importance: u8,
    pub importance_weight: f64,
    pub rating: i64,
    pub rating_weight: f64,
    /// A message whose speaker (its content's `Name: ` label) the query names
    /// ([`crate::speaker`]).
    pub speaker_named: bool,
    /// [`crate::speaker::WEIGHT`] when `speaker_named`, else 1.
    pub speaker_weight: f64,
    /// What orders the results:
    /// `rrf × temporal_weight × importance_weight × rating_weight × speaker_weight`.
    pub rank_score: f64,
    /// The score a caller reads: the relevance (0 to 1).
    pub score: f64,
    /// For a message hit: the messages of the searched window that the vector list could
    /// not see because they wait for their vector (background embedding); None when not
    /// counted (a caller limited to one agent's pool, or no vector list).
    pub unembedded_messages: Option<u64>,
    /// The time the query names, as search read it (`2022-03-16`, `2022-03-07 to
    /// 2022-03-13`, and how: the words, the anchor, the event's message); None when the
    /// query names no time.
    pub time: Option<String>,
    /// Message results of a query that names speakers of the user's transcripts: how the
    /// vector list was searched (`crate::speaker::explain`); None otherwise.
    pub speakers: Option<String>,
}

/// RRF contribution of one 1-based rank.
pub fn rrf_term(rank: usize) -> f64 {
    1.0 / (RRF_K + rank as f64)
}

/// `e^(−0.05·days) · (1 + 0.02·access_count)`.
pub fn temporal(days_since_access: f64, access_count: i64) -> f64 {
    (-0.05 * days_since_access.max(0.0)).exp() * (1.0 + 0.02 * access_count.max(0) as f64)
}

pub fn temporal_weight(temporal: f64) -> f64 {
    0.95 + 0.05 * temporal.min(2.0)
}

pub fn importance_weight(importance: u8) -> f64 {
    1.0 + 0.01 * (f64::from(importance) - 5.0)
}

pub fn rating_weight(rating: i64) -> f64 {
    1.0 + 0.05 * (rating as f64 / 2.0).tanh()
}

/// Days between `since` and `now` (fractional, never negative).
pub fn days_between(since: OffsetDateTime, now: OffsetDateTime) -> f64 {
    ((now - since).as_seconds_f64() / 86_400.0).max(0.0)
}

/// `1 − (1 − semantic)·(1 − lexical)`, both in 0..=1.
pub fn relevance(semantic: f64, lexical: f64) -> f64 {
    (1.0 - (1.0 - semantic.clamp(0.0, 1.0)) * (1.0 - lexical.clamp(0.0, 1.0))).clamp(0.0, 1.0)
}

/// Date support of a row whose relative date ("yesterday", sent the next day) points into
/// the time the query names.
pub const DATE_SAID: f64 = 0.3;
/// Date support of a row written (or a fact observed) within the time the query names.
pub const DATE_WITHIN: f64 = 0.15;

/// Fill in the derived fields of `e` (everything after the ranks and raw scores), reading
/// its cosine on `scale`, and return the score a caller reads (the relevance).
pub fn finish(e: &mut Explain, scale: SimilarityScale) -> f64 {
    e.rrf = e.vector_rank.map_or(0.0, rrf_term)
        + e.text_rank.map_or(0.0, rrf_term)
        + e.date_rank.map_or(0.0, rrf_term);
    e.temporal = temporal(e.days_since_access, e.access_count);
    e.temporal_weight = temporal_weight(e.temporal);
    e.importance_weight = importance_weight(e.importance);
    e.rating_weight = rating_weight(e.rating);
    e.speaker_weight = if e.speaker_named { crate::speaker::WEIGHT } else { 1.0 };
    e.rank_score =
        e.rrf * e.temporal_weight * e.importance_weight * e.rating_weight * e.speaker_weight;
    e.semantic = e.vector_similarity.map_or(0.0, |c| scale.support(c));
    e.lexical = e.text_coverage.unwrap_or(0.0).clamp(0.0, 1.0).powi(2);
    e.relevance =
        1.0 - (1.0 - relevance(e.semantic, e.lexical)) * (1.0 - e.date_match.clamp(0.0, 1.0));
    // The larger, not one more factor: two supports under a threshold must not add up to
    // one over it, or a query with nothing relevant would return a context's stray match.
    e.relevance = e.relevance.max(e.context_support.clamp(0.0, 1.0));
    e.score = e.relevance;
    e.score
}

/// Share of a context message's relevance that the message after it draws
/// ([`context_supports`]); the weight at which the keyword index reads a message's context.
pub const CONTEXT_SUPPORT: f64 = 0.25;

/// The context support of each candidate message, given as `(conversation, seq, sent at,
/// own relevance)`: [`CONTEXT_SUPPORT`] × the best own relevance among the candidates of
/// its conversation numbered 1 to [`CONTEXT_MESSAGES`] before it (the context its vector and
/// its keyword index read) and sent at most [`CONTEXT_MAX_GAP`](crate::pipeline::messages::CONTEXT_MAX_GAP) before it, or 0. Read from
/// own relevances only, so support never chains along a conversation.
pub fn context_supports<K: Eq + std::hash::Hash>(
    rows: &[(K, i64, OffsetDateTime, f64)],
) -> Vec<f64> {
    let own: HashMap<(&K, i64), (OffsetDateTime, f64)> =
        rows.iter().map(|(c, seq, at, r)| ((c, *seq), (*at, *r))).collect();
    rows.iter()
        .map(|(c, seq, at, _)| {
            let best = (1..=CONTEXT_MESSAGES as i64)
                .filter_map(|back| own.get(&(c, seq - back)))
                .filter(|(before, _)| within_context_gap(*before, *at))
                .fold(0.0_f64, |a, (_, r)| a.max(*r));
            CONTEXT_SUPPORT * best
        })
        .collect()
}

/// The one place ranked lists are merged: every candidate of a vector list and a keyword list
/// (best first), with its rank and raw score in each, in first-seen order (the vector list,
/// then what only the keyword list found), so equal scores rank the same way on every call.
/// Any source with ids — memories, messages, and later summaries and entities — is fused
/// here; the caller then loads the rows and calls [`finish`].
pub fn fuse<K: Copy + Eq + std::hash::Hash>(
    vector: &[(K, f32)],
    text: &[(K, f64)],
) -> Vec<(K, Explain)> {
    let mut at: std::collections::HashMap<K, usize> =
        std::collections::HashMap::with_capacity(vector.len() + text.len());
    let mut out: Vec<(K, Explain)> = Vec::with_capacity(vector.len() + text.len());
    let mut slot = |id: K| -> usize {
        *at.entry(id).or_insert_with(|| {
            out.push((id, Explain::default()));
            out.len() - 1
        })
    };
    let mut vector_slots = Vec::with_capacity(vector.len());
    for (id, _) in vector {
        vector_slots.push(slot(*id));
    }
    let mut text_slots = Vec::with_capacity(text.len());
    for (id, _) in text {
        text_slots.push(slot(*id));
    }
    for (rank, (i, (_, sim))) in vector_slots.iter().zip(vector).enumerate() {
        let e = &mut out[*i].1;
        if e.vector_rank.is_none() {
            e.vector_rank = Some(rank + 1);
            e.vector_similarity = Some(*sim);
        }
    }
    for (rank, (i, (_, score))) in text_slots.iter().zip(text).enumerate() {
        let e = &mut out[*i].1;
        if e.text_rank.is_none() {
            e.text_rank = Some(rank + 1);
            // A store's 0 can be -0.0 (a weight rounded below zero): shown as 0.
            e.text_coverage = Some(if *score == 0.0 { 0.0 } else { *score });
        }
    }
    out
}

/// Add a third ranked list to fused candidates: the date list (ids best first), each
/// with its date support. Candidates it alone found are appended.
pub fn fuse_dates<K: Copy + Eq + std::hash::Hash>(
    fused: &mut Vec<(K, Explain)>,
    dates: &[(K, f64)],
) {
    let at: std::collections::HashMap<K, usize> =
        fused.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();
    for (rank, (id, support)) in dates.iter().enumerate() {
        let i = match at.get(id) {
            Some(i) => *i,
            None => {
                fused.push((*id, Explain::default()));
                fused.len() - 1
            }
        };
        let e = &mut fused[i].1;
        if e.date_rank.is_none() {
            e.date_rank = Some(rank + 1);
            e.date_match = e.date_match.max(*support);
        }
    }
}

/// Rough token count of a text for budgeting: about four characters per token, the usual
/// figure for BPE tokenizers on English, but one per Chinese, Japanese or Korean character
/// (BPE tokenizers spend about one on each: a tester's 36-character Chinese fact counted
/// 10 and blew the budget); never under one token per word.
pub fn estimate_tokens(text: &str) -> usize {
    TextSize::of(text).tokens()
}

/// Whether `c` is a character of a script written without spaces that tokenizers spend about
/// a token on: CJK ideographs, kana, Hangul syllables.
pub fn is_wide(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF | 0x20000..=0x3FFFF)
}

/// A text's size as [`estimate_tokens`] reads it, kept in parts so that texts can be added
/// exactly: the estimate of a whole is not the sum of its parts' estimates.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextSize {
    narrow: usize,
    wide: usize,
    words: usize,
}

impl TextSize {
    pub fn of(text: &str) -> TextSize {
        let wide = text.chars().filter(|c| is_wide(*c)).count();
        TextSize {
            narrow: text.chars().count() - wide,
            wide,
            words: text.split_whitespace().count(),
        }
    }

    /// `self`, a newline, then `text`.
    pub fn then_line(self, text: &str) -> TextSize {
        let t = TextSize::of(text);
        TextSize {
            narrow: self.narrow + 1 + t.narrow,
            wide: self.wide + t.wide,
            words: self.words + t.words,
        }
    }

    /// `self`, a blank line, then `other`.
    pub fn joined(self, other: TextSize) -> TextSize {
        TextSize {
            narrow: self.narrow + 2 + other.narrow,
            wide: self.wide + other.wide,
            words: self.words + other.words,
        }
    }

    pub fn tokens(self) -> usize {
        (self.wide + self.narrow.div_ceil(4)).max(self.words)
    }
}

/// The first line of every context block.
pub const CONTEXT_HEADER: &str = "Known facts about the user:";

/// A context block's facts: which of the candidates fit the budget, in the order they are
/// written, and whether any was left out.
#[derive(Debug, PartialEq)]
pub struct Packed<'a> {
    pub chosen: Vec<&'a Memory>,
    pub truncated: bool,
}

impl Packed<'_> {
    /// The block's text: the header, then one `- fact` line per chosen fact.
    pub fn text(&self) -> String {
        let mut text = String::from(CONTEXT_HEADER);
        for m in &self.chosen {
            text.push('\n');
            text.push_str(&line(m));
        }
        text
    }
}

fn line(m: &Memory) -> String {
    format!("- {}", m.content)
}

/// BM25's inverse document frequency of a term found in `df` of `n` rows, as FTS5 and the
/// PostgreSQL store compute it: `ln((n − df + 0.5) / (df + 0.5))`, at least 1e-6.
pub fn idf(n: f64, df: f64) -> f64 {
    ((n - df + 0.5) / (df + 0.5)).ln().max(1e-6)
}

/// A query term's share of the query's keyword weight (the stores' `QueryWeights`) when
/// `df` of the scope's `n` rows hold it: its [`idf`], except under [`MIN_ROWS_FOR_IDF`] rows, where
/// IDF says nothing: in a store of two facts a word of one of them has an IDF of 0, and a
/// word no row holds took the whole weight, so that "peanuts snack" did not find "The user
/// is allergic to peanuts." (found by a tester). There the smoothed
/// `ln(1 + (n − df + 0.5) / (df + 0.5))` (Lucene's), which stays positive.
///
/// Tried and not taken: a term no row holds weighing as one a single row holds (at any
/// size). On LoCoMo with the built-in embedder it kept a little more evidence at the
/// default `min_score` (answerable questions losing evidence 0.030 → 0.025) and let far
/// more unrelated queries through (empty 0.904 → 0.788): an unknown word is most of what
/// tells an unrelated query from a relevant one that shares a common word.
pub fn term_weight(n: f64, df: f64) -> f64 {
    if n < MIN_ROWS_FOR_IDF as f64 { (1.0 + (n - df + 0.5) / (df + 0.5)).ln() } else { idf(n, df) }
}

/// Rows a scope needs before a term in half of them or more counts as common (and is
/// dropped from the keyword query) and before IDF weighs the terms ([`term_weight`]).
pub const MIN_ROWS_FOR_IDF: i64 = 4;

/// Keep one fact of each text: a fact stored user-wide and an agent's private copy of it
/// (dedup keeps both, `dedup::seen_wherever`) are one line for whoever sees both. The
/// user-wide (or shared) copy stays, else the first.
pub fn drop_repeated_contents(all: &mut Vec<Memory>) {
    let wide = |m: &Memory| crate::dedup::seen_wherever(m, None);
    let mut keep: HashMap<&str, usize> = HashMap::new();
    for (i, m) in all.iter().enumerate() {
        let text = m.content.trim();
        match keep.get(text) {
            Some(&j) if !wide(&all[j]) && wide(m) => {
                keep.insert(text, i);
            }
            Some(_) => {}
            None => {
                keep.insert(text, i);
            }
        }
    }
    let kept: std::collections::HashSet<usize> = keep.into_values().collect();
    let mut i = 0;
    all.retain(|_| {
        i += 1;
        kept.contains(&(i - 1))
    });
}

/// Does the whole of `all` fit in `budget` tokens?
pub fn fits(all: &[Memory], budget: usize) -> bool {
    all.iter().fold(TextSize::of(CONTEXT_HEADER), |s, m| s.then_line(&line(m))).tokens() <= budget
}

/// Fit active facts into `budget` tokens. When all fit: profile facts first, then the rest
/// in the given order. Otherwise profile facts first while they fit, then the other facts
/// ranked by `relevance` (a position per id, lower first; unranked facts after) and then by
/// importance and recency, taken greedily while they fit, and written oldest first.
pub fn pack<'a>(
    all: &'a [Memory],
    budget: usize,
    relevance: Option<&HashMap<MemoryId, usize>>,
) -> Packed<'a> {
    let (profiles, facts): (Vec<&Memory>, Vec<&Memory>) =
        all.iter().partition(|m| m.kind == Kind::Profile);
    if fits(all, budget) {
        return Packed { chosen: profiles.into_iter().chain(facts).collect(), truncated: false };
    }
    let mut total = TextSize::of(CONTEXT_HEADER);
    let mut chosen: Vec<&Memory> = Vec::new();
    for m in profiles {
        if total.then_line(&line(m)).tokens() <= budget {
            total = total.then_line(&line(m));
            chosen.push(m);
        }
    }
    let mut ranked = facts;
    ranked.sort_by_key(|m| {
        (
            relevance.map_or(usize::MAX, |r| r.get(&m.id).copied().unwrap_or(usize::MAX)),
            std::cmp::Reverse(m.importance),
            std::cmp::Reverse(m.observed_at),
        )
    });
    let mut picked: Vec<&Memory> = Vec::new();
    for m in ranked {
        if total.then_line(&line(m)).tokens() <= budget {
            total = total.then_line(&line(m));
            picked.push(m);
        }
    }
    picked.sort_by_key(|m| (m.observed_at, m.id));
    chosen.extend(picked);
    Packed { chosen, truncated: true }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranking score of `e`.
    fn rank(e: &mut Explain) -> f64 {
        finish(e, SimilarityScale::DEFAULT);
        e.rank_score
    }

    #[test]
    fn a_message_draws_a_quarter_of_its_contexts_relevance() {
        // Conversation "a": 1 matches (0.6), 2 and 3 follow it, 4 is three places after it.
        // Conversation "b": 2 would follow a message numbered 1, which is not a candidate.
        let t = time::macros::datetime!(2024-03-05 10:00 UTC);
        let rows = [("a", 1, 0.6), ("a", 2, 0.0), ("a", 3, 0.1), ("a", 4, 0.0), ("b", 2, 0.0)]
            .map(|(c, seq, r)| (c, seq, t, r));
        let s = context_supports(&rows);
        assert_eq!(s[0], 0.0, "nothing before the first message");
        assert!((s[1] - 0.15).abs() < 1e-12, "the message after it: {}", s[1]);
        assert!((s[2] - 0.15).abs() < 1e-12, "two after it, the best of the two before: {}", s[2]);
        // 4 draws on 2 and 3 (own relevances 0 and 0.1), never on 1's support through them.
        assert!((s[3] - 0.025).abs() < 1e-12, "no chaining: {}", s[3]);
        assert_eq!(s[4], 0.0, "another conversation's numbers are not context");

        // The support joins the product; a message that has its own keeps more.
        let scale = SimilarityScale { floor: 0.3, full: 0.8 };
        let mut e = Explain { context_support: s[1], ..Default::default() };
        assert!((finish(&mut e, scale) - 0.15).abs() < 1e-12);
        assert!(e.score >= DEFAULT_MIN_SCORE, "an answer after a matching question passes");
        let mut e =
            Explain { text_coverage: Some(0.5), context_support: 0.15, ..Default::default() };
        assert!((finish(&mut e, scale) - 0.25).abs() < 1e-12, "its own support, the larger");
        // Two stray matches under the threshold, one after the other, do not add up to one
        // over it: a query with nothing relevant still returns nothing.
        let own = DEFAULT_MIN_SCORE - 0.001;
        let weak = [("a", 1, t, own), ("a", 2, t, own)];
        for support in context_supports(&weak) {
            let mut e = Explain {
                text_coverage: Some(own.sqrt()),
                context_support: support,
                ..Default::default()
            };
            assert!(finish(&mut e, scale) < DEFAULT_MIN_SCORE, "{}", e.score);
        }
    }

    #[test]
    fn a_message_sent_long_after_draws_nothing_from_before() {
        let t = time::macros::datetime!(2023-06-20 10:00 UTC);
        let next_day = t + time::Duration::hours(23);
        let months = t + time::Duration::days(259);
        let rows = [("a", 1, t, 0.6), ("a", 2, next_day, 0.0), ("a", 3, months, 0.0)];
        let s = context_supports(&rows);
        assert!((s[1] - 0.15).abs() < 1e-12, "an answer the next morning: {}", s[1]);
        assert_eq!(s[2], 0.0, "months later is a new talk");
        // Earlier in the conversation but sent later (an older created_at appended after).
        let rows = [("b", 1, months, 0.6), ("b", 2, t, 0.0)];
        assert_eq!(context_supports(&rows)[1], 0.0, "support from a message sent after it");
    }

    #[test]
    fn relevance_reads_support_from_either_side() {
        let scale = SimilarityScale { floor: 0.3, full: 0.8 };
        let mut e =
            Explain { vector_rank: Some(1), vector_similarity: Some(0.25), ..Default::default() };
        assert_eq!(finish(&mut e, scale), 0.0, "a neighbour under the noise floor");
        let mut e =
            Explain { vector_rank: Some(1), vector_similarity: Some(0.55), ..Default::default() };
        assert!((finish(&mut e, scale) - 0.5).abs() < 1e-6, "{e:?}");
        let mut e = Explain { vector_similarity: Some(0.95), ..Default::default() };
        assert_eq!(finish(&mut e, scale), 1.0);
        let mut e = Explain { text_rank: Some(4), text_coverage: Some(0.5), ..Default::default() };
        assert_eq!(finish(&mut e, scale), 0.25, "half the keyword weight: weak support");
        // Both: more than either alone, never above 1.
        let mut e = Explain {
            vector_rank: Some(2),
            vector_similarity: Some(0.55),
            text_rank: Some(1),
            text_coverage: Some(0.5),
            ..Default::default()
        };
        assert!((finish(&mut e, scale) - 0.625).abs() < 1e-6);
        assert_eq!((e.semantic, e.lexical), (0.5, 0.25));
        assert_eq!(relevance(2.0, 3.0), 1.0);
        assert_eq!(relevance(0.0, 0.0), 0.0);
        // The weights move the order, not the score.
        let mut liked = Explain { rating: 3, importance: 10, ..e.clone() };
        assert_eq!(finish(&mut liked, scale), e.score);
        assert!(liked.rank_score > e.rank_score);
    }

    #[test]
    fn fusion_keeps_both_ranks_in_first_seen_order() {
        let vector = [(1, 0.9f32), (2, 0.8), (3, 0.7)];
        let text = [(3, 12.0f64), (4, 11.0), (1, 10.0)];
        let fused = fuse(&vector, &text);
        let ids: Vec<i32> = fused.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 4], "vector list first, then what only text found");
        let e = |id: i32| &fused.iter().find(|(k, _)| *k == id).unwrap().1;
        assert_eq!((e(1).vector_rank, e(1).text_rank), (Some(1), Some(3)));
        assert_eq!((e(3).vector_rank, e(3).text_rank), (Some(3), Some(1)));
        assert_eq!((e(4).vector_rank, e(4).text_rank), (None, Some(2)));
        assert_eq!(e(2).text_coverage, None);
        assert_eq!(e(3).text_coverage, Some(12.0));
        // Scored, the two found by both lists lead; 3 (ranks 3 + 1) beats 1 (ranks 1 + 3)?
        // No: RRF is symmetric, they tie, and first-seen order keeps 1 first.
        let mut scored: Vec<(i32, f64)> = fused
            .into_iter()
            .map(|(id, mut e)| {
                e.importance = 5;
                (id, rank(&mut e))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(scored.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 3, 2, 4]);
    }

    #[test]
    fn fusion_of_empty_and_repeated_ids() {
        assert!(fuse::<i32>(&[], &[]).is_empty());
        // A list naming an id twice keeps its best (first) rank.
        let fused = fuse(&[(7, 0.5f32), (7, 0.4)], &[]);
        assert_eq!(fused.len(), 1);
        assert_eq!(fused[0].1.vector_rank, Some(1));
    }

    #[test]
    fn rrf_rewards_agreement_between_lists() {
        let mut both = Explain {
            vector_rank: Some(3),
            text_rank: Some(3),
            importance: 5,
            ..Default::default()
        };
        let mut one = Explain { vector_rank: Some(1), importance: 5, ..Default::default() };
        assert!(rank(&mut both) > rank(&mut one));
        assert!((both.rrf - 2.0 / 63.0).abs() < 1e-12);
    }

    #[test]
    fn decay_importance_and_rating_reorder_close_candidates() {
        let base = Explain { vector_rank: Some(1), importance: 5, ..Default::default() };
        let mut fresh = base.clone();
        let mut stale = Explain { days_since_access: 60.0, ..base.clone() };
        assert!(rank(&mut fresh) > rank(&mut stale));
        // Old but never below 95% of a fresh one.
        assert!(stale.rank_score > 0.95 * fresh.rank_score - 1e-12);
        let mut liked = Explain { rating: 1, ..base.clone() };
        let mut disliked = Explain { rating: -1, ..base.clone() };
        assert!(rank(&mut liked) > rank(&mut disliked));
        let mut important = Explain { importance: 10, ..base.clone() };
        let mut trivial = Explain { importance: 1, ..base };
        assert!(rank(&mut important) > rank(&mut trivial));
    }

    #[test]
    fn a_downvoted_top_hit_ranks_below_an_upvoted_second() {
        // Platos: a high-cosine row rated -1 ranks lower than a moderate one rated +1.
        let mut top =
            Explain { vector_rank: Some(1), importance: 5, rating: -1, ..Default::default() };
        let mut second =
            Explain { vector_rank: Some(2), importance: 5, rating: 1, ..Default::default() };
        assert!(rank(&mut second) > rank(&mut top));
    }

    #[test]
    fn relevance_dominates_importance() {
        // Found by both lists beats found by one, whatever the importance.
        let mut both = Explain {
            vector_rank: Some(5),
            text_rank: Some(5),
            importance: 1,
            ..Default::default()
        };
        let mut one =
            Explain { vector_rank: Some(1), importance: 10, rating: 3, ..Default::default() };
        assert!(rank(&mut both) > rank(&mut one));
    }

    #[test]
    fn token_estimate() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("- The user lives in Bengaluru."), 8);
    }

    fn fact(content: &str, kind: Kind, importance: i64, day: i64) -> Memory {
        use crate::model::{Importance, Source, SourceKind, TenantId, UserId};
        let at = OffsetDateTime::UNIX_EPOCH + time::Duration::days(day);
        Memory {
            kind,
            importance: Importance::clamped(importance),
            observed_at: at,
            ..Memory::new(
                TenantId::default_tenant(),
                UserId::parse("u").unwrap(),
                content.into(),
                Source { kind: SourceKind::Manual, conversation_id: None, message_ids: vec![] },
                at,
            )
        }
    }

    fn contents(p: &Packed<'_>) -> Vec<String> {
        p.chosen.iter().map(|m| m.content.clone()).collect()
    }

    #[test]
    fn everything_that_fits_is_written_profile_first() {
        let all = vec![
            fact("The user plays the cello.", Kind::Knowledge, 5, 2),
            fact("name: Asha", Kind::Profile, 5, 3),
            fact("The user lives in Porto.", Kind::Knowledge, 5, 1),
        ];
        let p = pack(&all, 1000, None);
        assert!(!p.truncated);
        assert_eq!(
            contents(&p),
            ["name: Asha", "The user plays the cello.", "The user lives in Porto."]
        );
        assert_eq!(
            p.text(),
            "Known facts about the user:\n- name: Asha\n- The user plays the cello.\n- The user lives in Porto."
        );
        assert!(estimate_tokens(&p.text()) <= 1000);
    }

    #[test]
    fn over_budget_the_relevant_then_important_facts_win_and_read_oldest_first() {
        let all = vec![
            fact("name: Asha", Kind::Profile, 5, 0),
            fact(
                "The user is allergic to shellfish and carries an epinephrine pen.",
                Kind::Knowledge,
                10,
                1,
            ),
            fact(
                "The user's favourite colour is a deep shade of teal green.",
                Kind::Knowledge,
                2,
                2,
            ),
            fact(
                "The user adopted a grey rescue cat called Miso last spring.",
                Kind::Knowledge,
                5,
                3,
            ),
        ];
        // Room for the profile fact and two of the three others, to the token.
        let three = Packed { chosen: vec![&all[0], &all[1], &all[3]], truncated: false };
        let budget = estimate_tokens(&three.text());
        assert!(!fits(&all, budget));
        let whole = Packed { chosen: all.iter().collect(), truncated: false };
        assert!(fits(&all, estimate_tokens(&whole.text())), "a block as long as the budget fits");
        assert!(!fits(&all, estimate_tokens(&whole.text()) - 1));
        // No query: by importance (10, 5), written oldest first.
        let p = pack(&all, budget, None);
        assert!(p.truncated);
        assert_eq!(contents(&p)[0], "name: Asha");
        assert_eq!(&contents(&p)[1..], [all[1].content.clone(), all[3].content.clone()]);
        // The query ranks the low-importance colour fact first: it gets in.
        let relevance: HashMap<MemoryId, usize> = [(all[2].id, 0)].into_iter().collect();
        let p = pack(&all, budget, Some(&relevance));
        assert!(p.chosen.iter().any(|m| m.id == all[2].id));
        assert!(estimate_tokens(&p.text()) <= budget);
        // Chosen facts (after the profile) are in observation order.
        let days: Vec<_> = p.chosen[1..].iter().map(|m| m.observed_at).collect();
        assert!(days.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_cjk_character_counts_a_token() {
        // 11 ideographs and a full-width comma.
        assert_eq!(estimate_tokens("用户住在北京，喜欢吃饺子"), 12);
        assert_eq!(estimate_tokens("ユーザーは東京に住んでいる"), 13);
        assert_eq!(estimate_tokens("The user lives in Porto."), 6);
        let whole = TextSize::of("用户").then_line("The user lives in Porto.");
        assert_eq!(whole.tokens(), estimate_tokens("用户\nThe user lives in Porto."));
    }

    #[test]
    fn a_budget_too_small_for_anything_gives_the_header_alone() {
        let all = vec![fact("The user lives in Porto.", Kind::Knowledge, 5, 1)];
        let p = pack(&all, 3, None);
        assert!(p.truncated && p.chosen.is_empty());
        assert_eq!(p.text(), CONTEXT_HEADER);
    }
}
