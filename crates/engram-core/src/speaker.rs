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
//! fused rank; the relevance score, and with it `min_score`, is unchanged).
//!
//! A label is recognised only in the shape transcripts use: at most three capitalised words
//! (letters, digits, `'`, `.`, `-`) at the very start of the content, then `": "`. A label
//! that is a common word ("Note: …") is matched only when the query uses that word, and
//! then only re-orders candidates both lists already found.

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

/// The query's words, lowercased: what [`named`] looks labels up in.
pub fn query_words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether the query names the speaker of `label`: one of the label's words of two letters or
/// more ("Maria", "Ruiz"; not the "Dr." of a title) is a word of the query ("Maria's" counts).
pub fn named(words: &[String], label: &str) -> bool {
    label
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2 && !is_title(w))
        .any(|w| words.contains(&w.to_lowercase()))
}

/// Whether `content` opens with a speaker label that the query (its [`query_words`]) names.
pub fn speaks(words: &[String], content: &str) -> bool {
    label(content).is_some_and(|l| named(words, l))
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
        let q = query_words("what did ruiz prescribe");
        assert!(named(&q, "Dr. Ana Ruiz"));
        assert!(!named(&query_words("ask the dr about it"), "Dr. Ana Ruiz"));
        // Whole words only.
        assert!(!named(&query_words("Marianne's dog"), "Maria"));
    }
}
