//! When is a new fact the same as a stored one?
//!
//! Dedup (SPEC §2) starts from the embedding: cosine ≥ the threshold (0.90 by default).
//! Similarity alone merges distinct facts that share their shape: "the grocery budget is 440
//! euros" and "… 1060 euros" are 0.94 apart with MiniLM, and a static embedder barely moves
//! for a changed number or name (benches/README.md, "Batch remember"). Merging them loses the
//! new fact, which is worse than keeping a duplicate, so a similar pair only counts as the
//! same fact when [`same_fact`] also agrees on the words:
//!
//! - the **numbers** (every token with a digit: years, amounts, times, chapters) are the same
//!   multiset — a changed number is a new value, never a confirmation;
//! - no **negation** word is in one text and not the other ("likes" / "does not like");
//! - most **words** are shared: the Jaccard index of the two word sets (|A ∩ B| / |A ∪ B|)
//!   is at least [`MIN_JACCARD`]. Facts share a frame ("The user …"), so a looser measure
//!   (overlap with the shorter text) lets "drives a cargo bike" confirm "drives a grey
//!   estate car bought from a neighbour".
//!
//! Tokens are lower-cased runs of letters and digits (Unicode-aware, any language); the
//! negation list covers the languages the extraction prompt is most used with. What the
//! guard rejects is not lost: explicit writes store it as a new fact, and the extraction
//! pipeline hands it to the LLM judge (pass 2), which sees both texts.

use std::collections::{BTreeMap, HashSet};

/// Smallest Jaccard index of the two word sets.
pub const MIN_JACCARD: f32 = 0.5;

/// Negation markers; a difference in any of them means opposite facts. `t` is the tail of
/// English contractions ("doesn't" splits into `doesn` + `t`).
const NEGATIONS: &[&str] = &[
    // English
    "not", "no", "never", "t", "nobody", "nothing", "none", "neither", "nor", "without", "dislikes",
    "hates", // German
    "nicht", "kein", "keine", "keinen", "nie", "niemals", // French
    "ne", "pas", "jamais", "aucun", "aucune", "sans", // Spanish, Portuguese, Italian
    "nunca", "nada", "nao", "não", "nem", "non", "mai", "senza", "sin", // Dutch
    "niet", "geen", "nooit",
];

fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn numbers(tokens: &[String]) -> BTreeMap<&str, usize> {
    let mut out = BTreeMap::new();
    for t in tokens.iter().filter(|t| t.chars().any(|c| c.is_ascii_digit())) {
        *out.entry(t.as_str()).or_insert(0) += 1;
    }
    out
}

/// Whether two texts that embed close together state the same fact (see the module doc).
pub fn same_fact(a: &str, b: &str) -> bool {
    let (ta, tb) = (tokens(a), tokens(b));
    if numbers(&ta) != numbers(&tb) {
        return false;
    }
    let sa: HashSet<&str> = ta.iter().map(String::as_str).collect();
    let sb: HashSet<&str> = tb.iter().map(String::as_str).collect();
    if sa.symmetric_difference(&sb).any(|t| NEGATIONS.contains(t)) {
        return false;
    }
    let union = sa.union(&sb).count();
    if union == 0 {
        return true;
    }
    sa.intersection(&sb).count() as f32 / union as f32 >= MIN_JACCARD
}

#[cfg(test)]
mod tests {
    use super::same_fact;

    #[test]
    fn rewordings_of_one_fact_are_the_same() {
        assert!(same_fact("The user lives in Berlin.", "The user lives in Berlin"));
        assert!(same_fact("The user lives in Berlin now.", "The user lives in Berlin."));
        assert!(same_fact("The user has a dog named Rex.", "User has a dog called Rex."));
        assert!(same_fact("Der Nutzer wohnt in Köln.", "Der Nutzer wohnt jetzt in Köln."));
        assert!(same_fact(
            "Meeting on 2026-02-23 at 10:00",
            "The meeting is on 2026-02-23 at 10:00."
        ));
    }

    #[test]
    fn a_changed_number_is_a_new_value() {
        assert!(!same_fact(
            "The user's grocery budget is 440 euros per month.",
            "The user's grocery budget is 1060 euros per month."
        ));
        assert!(!same_fact(
            "The user is reading The Left Hand of Darkness and is on chapter 5.",
            "The user is reading The Left Hand of Darkness and is on chapter 7."
        ));
        assert!(!same_fact("Dentist at 17:15", "Dentist at 17:45"));
        // A number added or dropped changes the fact too.
        assert!(!same_fact("The user has 2 cats.", "The user has cats."));
    }

    #[test]
    fn a_negation_flips_the_fact() {
        assert!(!same_fact("The user likes coffee.", "The user does not like coffee."));
        assert!(!same_fact("The user eats meat.", "The user doesn't eat meat."));
        assert!(!same_fact("Il aime le café.", "Il n'aime pas le café."));
        assert!(!same_fact("Er trinkt Kaffee.", "Er trinkt keinen Kaffee."));
    }

    #[test]
    fn facts_about_different_things_are_different() {
        assert!(!same_fact(
            "The user started learning Hindi in 2025 and practises 40 minutes a day.",
            "The user's daughter Leila is getting married in Bengaluru in October 2025."
        ));
        assert!(!same_fact(
            "The user drives a cargo bike.",
            "The user drives a grey estate car bought from a neighbour."
        ));
    }

    #[test]
    fn a_reworded_fact_is_left_to_the_judge() {
        // Deliberately strict: inflections and synonyms change too many words; explicit
        // writes keep both, extraction asks the LLM.
        assert!(!same_fact("The user lives in Berlin.", "User is living in Berlin now."));
    }
}
