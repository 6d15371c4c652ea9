//! Times named relative to an event of the conversation ("two days before the wedding",
//! "the week after my birthday", "tre giorni prima del matrimonio"): the offset, its unit
//! and the words that name the event, which search looks up among the user's messages.

use time::{Date, OffsetDateTime};

use super::{Span, Unit, number, relative_matches, shift, unit, words};

/// A time named relative to an event of the conversation: "two days before the wedding",
/// "the week after my birthday", "tre giorni prima del matrimonio", "zwei Tage vor der
/// Hochzeit". Search finds the event among the user's messages and reads the time from its
/// date (`engine::dates`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTime {
    /// Signed: negative before the event.
    pub offset: i64,
    pub(super) unit: Unit,
    /// The words that name the event ("the wedding").
    pub event: String,
}

impl EventTime {
    /// The time it names, for an event on `day`.
    pub fn span(&self, day: Date) -> Span {
        shift(day, self.unit, self.offset)
    }

    /// The names to look the event up by: the words as written, then shorter by their last
    /// words ("der Hochzeit gemacht" → "der Hochzeit": a verb can close the clause), at
    /// most three, never articles alone.
    pub fn names(&self) -> Vec<String> {
        let words: Vec<&str> = self.event.split(' ').collect();
        (1..=words.len())
            .rev()
            .map(|n| &words[..n])
            .filter(|w| w.iter().any(|x| !is_article(x)))
            .take(3)
            .map(|w| w.join(" "))
            .collect()
    }

    /// "2 days before", for `explain`.
    pub fn describe(&self) -> String {
        let n = self.offset.abs();
        let unit = match self.unit {
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        };
        format!(
            "{n} {unit}{} {} {:?}",
            if n == 1 { "" } else { "s" },
            if self.offset < 0 { "before" } else { "after" },
            self.event
        )
    }
}

/// "before" (-1) or "after" (1), in the languages of [`relative_spans`].
fn before_after(w: &str) -> Option<i64> {
    match w {
        "before" | "prima" | "antes" | "avant" | "vor" => Some(-1),
        "after" | "dopo" | "después" | "despues" | "depois" | "après" | "nach" => Some(1),
        _ => None,
    }
}

/// Words between "before"/"after" and the event that are not part of it.
fn is_linking(w: &str) -> bool {
    matches!(
        w,
        "di" | "del"
            | "della"
            | "dello"
            | "dei"
            | "delle"
            | "de"
            | "du"
            | "des"
            | "da"
            | "do"
            | "dos"
            | "das"
            | "que"
    )
}

/// Words before an event's name that do not name it.
fn is_article(w: &str) -> bool {
    matches!(
        w,
        "the"
            | "my"
            | "our"
            | "a"
            | "an"
            | "der"
            | "die"
            | "das"
            | "dem"
            | "den"
            | "il"
            | "lo"
            | "la"
            | "le"
            | "les"
            | "el"
            | "los"
            | "las"
            | "o"
            | "os"
            | "mio"
            | "mia"
            | "mon"
            | "ma"
            | "mi"
            | "meiner"
            | "meinem"
            | "meine"
    )
}

/// Most words an event's name has.
const EVENT_WORDS: usize = 6;

/// [`EventTime`] in `query`, and the query without the words that named it (the event's
/// words included: the time is matched by dates). The event's name ends with its clause
/// ("two days before the wedding, what did I do?").
pub fn event_time(query: &str) -> Option<(EventTime, String)> {
    let clauses: Vec<Vec<String>> =
        clauses(query).into_iter().map(words).filter(|c| !c.is_empty()).collect();
    for (k, w) in clauses.iter().enumerate() {
        let Some((time, from, to)) = event_in(w) else { continue };
        let rest: Vec<&str> = clauses
            .iter()
            .enumerate()
            .flat_map(|(j, c)| {
                c.iter().enumerate().filter(move |(i, _)| j != k || *i < from || *i >= to)
            })
            .map(|(_, x)| x.as_str())
            .collect();
        return Some((time, rest.join(" ")));
    }
    None
}

/// The clauses of `text`: split at `; ? ! . :` and at commas, except a comma before a digit
/// ("August 3, 2023").
fn clauses(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let next_is_digit =
            || text[i + c.len_utf8()..].trim_start().starts_with(|d: char| d.is_ascii_digit());
        if matches!(c, ';' | '?' | '!' | '.' | ':') || (c == ',' && !next_is_digit()) {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&text[start..]);
    out
}

/// The event time in one clause's words, with the range of words that name it.
fn event_in(w: &[String]) -> Option<(EventTime, usize, usize)> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    for i in 0..w.len() {
        // "two days before", "the day after", "a week before", "il giorno prima"
        let (n, u, rel) = if let (Some(n), Some(u)) = (number(at(i)), unit(at(i + 1))) {
            (n, u, i + 2)
        } else if matches!(at(i), "the" | "il" | "el" | "le" | "la" | "der" | "am" | "o")
            && let Some(u) = unit(at(i + 1))
        {
            (1, u, i + 2)
        } else {
            continue;
        };
        let Some(sign) = before_after(at(rel)) else { continue };
        let mut from = rel + 1;
        while is_linking(at(from)) {
            from += 1;
        }
        let to = (from + EVENT_WORDS).min(w.len());
        let event = &w[from.min(to)..to];
        // "the day before yesterday" is a relative date, not an event.
        let named = event.iter().any(|e| !is_article(e));
        if !named || !relative_matches(event, OffsetDateTime::UNIX_EPOCH).is_empty() {
            continue;
        }
        // "the week before last" is a relative date too.
        if relative_matches(&w[i..to], OffsetDateTime::UNIX_EPOCH).iter().any(|m| m.1 <= 1) {
            continue;
        }
        let time = EventTime { offset: sign * n, unit: u, event: event.join(" ") };
        return Some((time, i, to));
    }
    None
}
