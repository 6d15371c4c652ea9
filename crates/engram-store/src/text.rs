//! Keyword-query handling shared by both stores.
//!
//! A free-text query becomes a list of terms the same way for SQLite and PostgreSQL
//! ([`query_terms`]): words are runs of alphanumeric characters (Unicode, any script),
//! lowercased, deduplicated, at most 64, without English function words unless nothing else
//! is left. SQLite turns them into an FTS5 query ([`fts_query`]); PostgreSQL additionally
//! folds diacritics ([`fold_diacritics`]) on both sides, because FTS5's tokenizer does that
//! itself (`remove_diacritics 2`) and PostgreSQL's `simple` configuration does not, and it
//! indexes [`index_text`] (the content split exactly like a query) so that what matches does
//! not depend on the database's locale.

use unicode_normalization::UnicodeNormalization;

/// English function words dropped from keyword queries (never from the index, which stays
/// language-neutral). They carry no meaning of their own, yet in a small store a word like
/// "is" can be rare enough to get a real BM25 weight and pull an unrelated fact to the top of
/// the keyword list. Function words of other languages are left to the document-frequency
/// rule (terms found in half the rows or more are dropped); a list for every language would
/// drop real words (German "die", Italian "come").
pub const STOPWORDS: &[&str] = &[
    "a", "about", "am", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could",
    "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how",
    "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so",
    "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "us", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "whose",
    "why", "will", "with", "would", "you", "your",
];

/// The words of a query as FTS5 sees them (lowercased, deduplicated, at most 64), without
/// English function words unless nothing else is left.
pub fn query_terms(q: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for t in words(q) {
        let t = t.to_lowercase();
        if !terms.contains(&t) {
            terms.push(t);
        }
        if terms.len() == 64 {
            break;
        }
    }
    let content: Vec<String> =
        terms.iter().filter(|t| !STOPWORDS.contains(&t.as_str())).cloned().collect();
    if content.is_empty() { terms } else { content }
}

/// Turn free text into an FTS5 query that can never be a syntax error: every word becomes a
/// quoted term, terms are OR-ed (BM25 ranks documents matching more and rarer terms first).
pub fn fts_query(q: &str) -> Option<String> {
    let terms = query_terms(q);
    if terms.is_empty() {
        None
    } else {
        Some(terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR "))
    }
}

/// Runs of alphanumeric characters: the tokenization of both queries and indexed text.
fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty())
}

/// Remove the combining diacritical marks (U+0300–U+036F) of a lowercased word: "café" and
/// "cafe" become the same term, as with FTS5's `remove_diacritics 2`. Other combining marks
/// (e.g. the kana voicing marks) are meaningful and kept.
pub fn fold_diacritics(word: &str) -> String {
    if word.is_ascii() {
        return word.to_string();
    }
    word.nfd().filter(|c| !('\u{300}'..='\u{36f}').contains(c)).nfc().collect()
}

/// The searchable form of a text for PostgreSQL: its words, lowercased, diacritics folded,
/// joined by single spaces (fed to `to_tsvector('simple', …)`).
pub fn index_text(parts: &[&str]) -> String {
    let mut out = String::new();
    for p in parts {
        for w in words(p) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&fold_diacritics(&w.to_lowercase()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_drop_function_words_unless_nothing_is_left() {
        assert_eq!(
            query_terms("What is the user's favourite Tea?"),
            ["user", "s", "favourite", "tea"]
        );
        assert_eq!(query_terms("what is it"), ["what", "is", "it"]);
        assert!(query_terms(" \"*(): ").is_empty());
        assert_eq!(fts_query("NEAR(a b) OR c*"), Some("\"near\" OR \"b\" OR \"c\"".into()));
    }

    #[test]
    fn index_text_splits_like_queries_and_folds_accents() {
        assert_eq!(
            index_text(&["Café résumé: a@b.com Москва 東京に住んでいます", "tool_name"]),
            "cafe resume a b com москва 東京に住んでいます tool name"
        );
        assert_eq!(fold_diacritics("zürich"), "zurich");
        assert_eq!(fold_diacritics("が"), "が");
    }
}
