//! Who said a message, when a transcript names its speakers, and whether a query names them.
//!
//! A conversation between people (a group chat, a meeting, a call transcript, LoCoMo's
//! dialogues) reaches engram as messages whose content opens with the speaker's name:
//! `Maria: I got a puppy two weeks ago!`. Roles cannot tell such speakers apart, yet a
//! question usually names the person it is about ("What are Maria's dogs' names?"), and
//! what that person said is nearly always where the answer is: on the public LoCoMo data, 96%
//! of the evidence of a question naming one speaker was said by that speaker
//! (`benches/README.md`, "LoCoMo: the speaker a question names"). So message search ranks the
//! candidates of a speaker the query names ahead of equally ranked others ([`WEIGHT`] on the
//! fused rank; the relevance score, and with it `min_score`, is unchanged), and searches the
//! transcript's vectors mostly with what the query asks, apart from whom ([`blend`]). The
//! store records each user's speakers as messages are appended (`MessageStore::speakers`),
//! so a search knows the names before it has any candidate.
//!
//! A label is recognised only in the shape transcripts use: at most three capitalised words
//! (letters, digits, `'`, `.`, `-`) at the very start of the content, then `": "`. A query
//! names a speaker only with a capitalised word, as names are written: a label that is a
//! common word ("Note: …") is matched only when the query writes "Note", and then it
//! re-orders candidates and leaves that word out of most of the messages' query vector.

/// Factor on the fused rank of a message whose speaker the query names: a candidate found
/// by one list ranks with one found by both, so the named speaker's turns lead among
/// comparable candidates without reaching past the two lists (measured on LoCoMo: 1.5 and 2
/// were tried, `benches/README.md`).
pub const WEIGHT: f64 = 2.0;

/// Longest label read, in bytes.
const MAX_LABEL: usize = 40;

/// The speaker label that opens `content`, if it has one: `"Maria"` for
/// `"Maria: hello"`, `"Dr. Ana Ruiz"` for `"Dr. Ana Ruiz: …"`.
pub fn label(content: &str) -> Option<&str> {
    let (end, _) = content
        .char_indices()
        .take_while(|(i, _)| *i <= MAX_LABEL)
        .find(|(i, c)| *c == ':' && content[i + 1..].starts_with(' '))?;
    let label = &content[..end];
    let words: Vec<&str> = label.split(' ').collect();
    let word_ok = |w: &str| {
        w.chars().next().is_some_and(char::is_uppercase)
            && w.chars().all(|c| c.is_alphanumeric() || matches!(c, '\'' | '.' | '-'))
    };
    (end > 0 && words.len() <= 3 && words.iter().all(|w| word_ok(w))).then_some(label)
}

/// The query's capitalised words, lowercased: what [`named`] looks labels up in. A name is
/// written with a capital; a lower-case "note" or "order" is a word, even for a user whose
/// transcripts have `Note: ` or `Order A12: ` lines.
pub fn query_words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| capitalised(w))
        .map(str::to_lowercase)
        .collect()
}

fn capitalised(word: &str) -> bool {
    word.chars().next().is_some_and(char::is_uppercase)
}

/// Whether the query names the speaker of `label`: one of the label's words of two letters or
/// more ("Maria", "Ruiz"; not the "Dr." of a title) is a capitalised word of the query
/// ("Maria's" counts).
pub fn named(words: &[String], label: &str) -> bool {
    names_of(label).any(|w| words.contains(&w.to_lowercase()))
}

/// The words of a label that name its speaker: two letters or more, not a title.
fn names_of(label: &str) -> impl Iterator<Item = &str> {
    label.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= 2 && !is_title(w))
}

/// Whether `content` opens with a speaker label that the query (its [`query_words`]) names.
pub fn speaks(words: &[String], content: &str) -> bool {
    label(content).is_some_and(|l| named(words, l))
}

/// `query` without the capitalised words that name one of `speakers` (a possessive `'s`
/// goes with the name): what a query asks about, apart from whom. None when it names none of them, or
/// is nothing but names.
pub fn without_names(query: &str, speakers: &[String]) -> Option<String> {
    let names: Vec<String> =
        speakers.iter().flat_map(|l| names_of(l)).map(str::to_lowercase).collect();
    let names_someone = |token: &str| {
        let core = token.trim_matches(|c: char| !c.is_alphanumeric());
        let core = ["'s", "’s"].iter().find_map(|s| core.strip_suffix(s)).unwrap_or(core);
        capitalised(core) && names.contains(&core.to_lowercase())
    };
    let kept: Vec<&str> = query.split_whitespace().filter(|t| !names_someone(t)).collect();
    let dropped = kept.len() < query.split_whitespace().count();
    (dropped && !kept.is_empty()).then(|| kept.join(" "))
}

/// Share of the query's own vector in the vector that searches a transcript whose speakers
/// the query names; the rest is the vector of the query without their names
/// ([`without_names`]). Measured on LoCoMo (`benches/README.md`): without the names
/// MiniLM's Recall@10 rises from 0.739 to 0.780, while the built-in static embedder, whose
/// vector is a sum over tokens, does not move beyond noise (0.727–0.739) whatever the share
/// (0, 0.3, 0.5 and 1 were tried); a little of the name keeps what it says about the person.
pub const NAMED_SHARE: f32 = 0.3;

/// `NAMED_SHARE · named + (1 − NAMED_SHARE) · unnamed`, normalised: the vector a transcript
/// search uses when the query names its speakers.
pub fn blend(named: &[f32], unnamed: &[f32]) -> Vec<f32> {
    let mut v: Vec<f32> =
        named.iter().zip(unnamed).map(|(n, u)| NAMED_SHARE * n + (1.0 - NAMED_SHARE) * u).collect();
    crate::embed::normalize(&mut v);
    v
}

/// What `explain.speakers` says of a query that names speakers: the text whose vector,
/// with [`NAMED_SHARE`] of the query's own, searched the transcript.
pub fn explain(query: &str, unnamed: &str) -> String {
    format!(
        "the query names speakers of the transcript; messages were searched by meaning as \
         \"{unnamed}\" (the names at a share of {NAMED_SHARE} from \"{query}\")"
    )
}

/// Titles and honorifics, which name nobody on their own.
fn is_title(w: &str) -> bool {
    matches!(w.to_lowercase().as_str(), "dr" | "mr" | "mrs" | "ms" | "prof" | "sir" | "st")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_a_few_capitalised_words_before_a_colon() {
        assert_eq!(label("Maria: I got a puppy!"), Some("Maria"));
        assert_eq!(label("Dr. Ana Ruiz: take two a day"), Some("Dr. Ana Ruiz"));
        assert_eq!(label("O'Neil: sure"), Some("O'Neil"));
        assert_eq!(label("Jean-Luc: engage"), Some("Jean-Luc"));
        assert_eq!(label("Zoë: ciao"), Some("Zoë"));
        // Not labels: lower case, too many words, no space after the colon, a sentence.
        assert_eq!(label("maria: hi"), None);
        assert_eq!(label("My Best Friend Ever: hi"), None);
        assert_eq!(label("Time 10:30 is fine"), None);
        assert_eq!(label("I said this: it works"), None);
        assert_eq!(label("Maria:no space"), None);
        assert_eq!(label(": empty"), None);
        assert_eq!(label("no label at all"), None);
        assert_eq!(label(""), None);
        // A colon far into the text is no label, whatever comes before it.
        assert_eq!(label(&format!("{}: x", "A".repeat(60))), None);
        // Multi-byte text around the byte limit does not panic.
        assert_eq!(label(&"é".repeat(50)), None);
    }

    #[test]
    fn a_query_names_a_speaker_by_any_word_of_the_label_but_a_title() {
        let q = query_words("What are Maria's dogs' names?");
        assert!(named(&q, "Maria"));
        assert!(!named(&q, "John"));
        let q = query_words("what did Ruiz prescribe");
        assert!(named(&q, "Dr. Ana Ruiz"));
        assert!(!named(&query_words("ask the Dr about it"), "Dr. Ana Ruiz"));
        // A name is written with a capital: "note" and "order" are words.
        assert!(!named(&query_words("what did ruiz prescribe"), "Dr. Ana Ruiz"));
        assert!(!named(&query_words("my note about the order"), "Note"));
        assert!(named(&query_words("Note about the order"), "Note"));
        // Whole words only.
        assert!(!named(&query_words("Marianne's dog"), "Maria"));
    }

    #[test]
    fn a_query_without_its_speakers_keeps_what_it_asks() {
        let speakers = ["Maria".to_string(), "Dr. Ana Ruiz".to_string()];
        let w = |q: &str| without_names(q, &speakers);
        assert_eq!(
            w("What European countries has Maria been to?").as_deref(),
            Some("What European countries has been to?")
        );
        assert_eq!(w("What are Maria's dogs' names?").as_deref(), Some("What are dogs' names?"));
        assert_eq!(
            w("what did Ruiz prescribe, and when?").as_deref(),
            Some("what did prescribe, and when?")
        );
        assert_eq!(w("what did ruiz prescribe?"), None);
        // "Dr." names nobody; "Marianne" is not "Maria".
        assert_eq!(w("Ask the Dr. about Marianne"), None);
        // Only names: nothing would be left to ask.
        assert_eq!(w("Maria?"), None);
        assert_eq!(without_names("Maria's trip", &[]), None);
    }
}
