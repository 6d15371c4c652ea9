//! When is a new fact the same as a stored one?
//!
//! Dedup (SPEC §2) starts from the embedding: cosine ≥ the threshold (0.90 by default).
//! Similarity alone merges distinct facts that share their shape: "the grocery budget is 440
//! euros" and "… 1060 euros" are 0.94 apart with MiniLM, and the built-in static embedder
//! puts "runs 15 km on Saturday mornings" and "… Tuesday mornings" at 0.99 (benches/README.md,
//! "Batch remember"). Merging them loses the new fact, which is worse than keeping a
//! duplicate, so a similar pair only counts as the same fact when [`same_fact`] finds the
//! same words up to spelling, case, punctuation and a couple of short words:
//!
//! - the **numbers** (every token with a digit: years, amounts, times, chapters) are the same
//!   multiset — a changed number is a new value, never a confirmation;
//! - no **negation** word is in one text and not the other ("is vegan" / "is not vegan");
//! - every other word of one text is in the other, or pairs with a **spelling variant** there
//!   (one edit for words of 5+ letters, two for 8+: favourite/favorite, colour/color,
//!   marries/married — never short words or names like Anna/Anne);
//! - what is left is an **addition on one side only** of at most [`MAX_ADDED`] words of at
//!   most 3 letters ("the", "now", "a"). A substituted word (cat/dog, Saturday/Tuesday) or a
//!   longer addition ("has a dog" / "has a dog named Rex") is a different fact;
//! - the shared words come in the **same order** ("prefers tea over coffee" is not "prefers
//!   coffee over tea").
//!
//! Tokens are lower-cased runs of letters and digits (Unicode-aware, any language); the
//! negation list covers the languages the extraction prompt is most used with. The check is
//! strict on purpose — a reworded fact ("lives in" / "is living in") is not a repeat here —
//! and what it rejects is not lost: explicit writes store it as a new fact, and the
//! extraction pipeline hands it to the LLM judge (pass 2), which sees both texts.

use std::collections::BTreeMap;

/// Most short words one text may add to the other and still state the same fact.
pub const MAX_ADDED: usize = 2;

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

/// Whether a stored fact `m` may stand for a new one written into `pool` (None: user-wide):
/// only when everyone who would see the new fact sees `m` — a user-wide or shared fact, or
/// one of the same pool. A user-wide fact is never merged into one agent's private copy,
/// which the other agents cannot see.
pub fn seen_wherever(m: &crate::model::Memory, pool: Option<&str>) -> bool {
    m.pool.is_none() || m.kind == crate::model::Kind::Shared || m.pool.as_deref() == pool
}

/// Whether two texts that embed close together state the same fact (see the module doc).
pub fn same_fact(a: &str, b: &str) -> bool {
    let (ta, tb) = (tokens(a), tokens(b));
    if numbers(&ta) != numbers(&tb) {
        return false;
    }
    let words = |t: &[String]| -> Vec<String> {
        let mut w: Vec<String> =
            t.iter().filter(|t| !t.chars().any(|c| c.is_ascii_digit())).cloned().collect();
        w.sort();
        w.dedup();
        w
    };
    let (wa, wb) = (words(&ta), words(&tb));
    let mut only_a: Vec<&str> = wa.iter().filter(|w| !wb.contains(w)).map(String::as_str).collect();
    let mut only_b: Vec<&str> = wb.iter().filter(|w| !wa.contains(w)).map(String::as_str).collect();
    if only_a.iter().chain(&only_b).any(|t| NEGATIONS.contains(t)) {
        return false;
    }
    // Pair spelling variants off, greedily; B's variant is read as A's word from here on.
    let mut variant_of: Vec<(&str, &str)> = Vec::new();
    only_a.retain(|x| match only_b.iter().position(|y| spelling_variant(x, y)) {
        Some(i) => {
            variant_of.push((only_b.remove(i), x));
            false
        }
        None => true,
    });
    let added = match (only_a.is_empty(), only_b.is_empty()) {
        (true, _) => &only_b,
        (_, true) => &only_a,
        _ => return false, // a word was replaced
    };
    if added.len() > MAX_ADDED || added.iter().any(|w| w.chars().count() > 3) {
        return false;
    }
    // The shared words in the same order: "prefers tea over coffee" is not "prefers coffee
    // over tea".
    let canonical = |t: &str| -> String {
        variant_of.iter().find(|(b, _)| *b == t).map_or(t, |(_, a)| a).to_string()
    };
    let shared = |t: &[String]| -> Vec<String> {
        t.iter()
            .map(|w| canonical(w))
            .filter(|w| !only_a.contains(&w.as_str()) && !only_b.contains(&w.as_str()))
            .collect()
    };
    shared(&ta) == shared(&tb)
}

/// Two words that differ by a typo or a regional spelling: one edit for 5+ letters, two for
/// 8+. Shorter words (and so most names) must match exactly.
fn spelling_variant(a: &str, b: &str) -> bool {
    let shorter = a.chars().count().min(b.chars().count());
    let allowed = match shorter {
        0..=4 => return false,
        5..=7 => 1,
        _ => 2,
    };
    levenshtein(a, b) <= allowed
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(row[j]).min(cur) };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::same_fact;

    #[test]
    fn rewordings_of_one_fact_are_the_same() {
        assert!(same_fact("The user lives in Berlin.", "The user lives in Berlin"));
        assert!(same_fact("The user lives in Berlin now.", "The user lives in Berlin."));
        assert!(same_fact(
            "The user's favourite colour is blue.",
            "the user's favorite color is blue"
        ));
        assert!(same_fact("The user is allergic to peanuts.", "the user is allergic to peanuts"));
        assert!(same_fact("Der Nutzer wohnt in Köln.", "Nutzer wohnt in Köln"));
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
        assert!(!same_fact("The user has 2 cats.", "The user has 3 cats."));
    }

    #[test]
    fn a_negation_flips_the_fact() {
        assert!(!same_fact("The user likes coffee.", "The user does not like coffee."));
        assert!(!same_fact("The user is vegan.", "The user is not vegan."));
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
        assert!(!same_fact(
            "The user runs on Saturday mornings.",
            "The user runs on Tuesday mornings."
        ));
        assert!(!same_fact("The user has a cat.", "The user has a dog."));
        assert!(!same_fact(
            "The user prefers matcha over hot chocolate in the morning.",
            "The user prefers hot chocolate over matcha in the morning."
        ));
        assert!(!same_fact(
            "The user dislikes goulash but loves dim sum.",
            "The user dislikes goulash but loves goulash."
        ));
        assert!(!same_fact("Her sister is Anna.", "Her sister is Anne."));
        // An added detail is new information.
        assert!(!same_fact("The user has a dog.", "The user has a dog named Rex."));
    }

    #[test]
    fn a_reworded_fact_is_left_to_the_judge() {
        // Deliberately strict: inflections and synonyms change too many words; explicit
        // writes keep both, extraction asks the LLM.
        assert!(!same_fact("The user lives in Berlin.", "User is living in Berlin now."));
        assert!(!same_fact("The user has a dog named Rex.", "User has a dog called Rex."));
    }
}
