//! A range of two times in a query: "between January 10 and January 16, 2022", "from May
//! 2022 to July 2022", "zwischen dem 3. und dem 9. Mai 2023", "du 3 au 9 mai 2023". The
//! first may take its year (and month) from the second; a range read as the second time
//! alone named only its last day (found by a tester).

use time::{Duration, OffsetDateTime};

use super::{Span, plain_time};

/// Words that open a range.
const OPEN: &[&str] = &[
    "between", "from", "zwischen", "von", "vom", "entre", "desde", "du", "dal", "dall", "tra",
    "fra",
];
/// Words that join its two ends.
const JOIN: &[&str] = &[
    "and", "to", "until", "till", "through", "und", "bis", "et", "au", "y", "hasta", "al", "a", "e",
];
/// Articles before a day ("entre el 10 y el 16", "zwischen dem 3. und dem 9.").
const ARTICLES: &[&str] = &["the", "el", "le", "la", "il", "lo", "dem", "den", "der"];
/// Words at most between the opening word and the joining one.
const SPAN_WORDS: usize = 6;
/// Longest range read, in days: a longer one is not what a question about a time means.
const MAX_DAYS: i64 = 400;

fn bare(token: &str) -> String {
    token.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()
}

/// The range `query` names and the query without it, or None.
pub(super) fn range_time(query: &str, anchor: Option<OffsetDateTime>) -> Option<(Span, String)> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    for i in 0..tokens.len() {
        if !OPEN.contains(&bare(tokens[i]).as_str()) {
            continue;
        }
        let last = (i + 1 + SPAN_WORDS).min(tokens.len());
        for j in i + 2..last {
            if !JOIN.contains(&bare(tokens[j]).as_str()) {
                continue;
            }
            let Some((to, after)) = plain_time(&tokens[j + 1..].join(" "), anchor) else {
                continue;
            };
            let first: Vec<&str> = tokens[i + 1..j]
                .iter()
                .copied()
                .filter(|t| !ARTICLES.contains(&bare(t).as_str()))
                .collect();
            let first = first.join(" ");
            if !first.is_empty() && first.chars().all(|c| c.is_ascii_digit() || c == '.') {
                // "du 3 au 9 mai 2023": a day alone, in the second end's month.
                let Some(start) = first
                    .trim_end_matches('.')
                    .parse::<u8>()
                    .ok()
                    .and_then(|d| to.start.replace_day(d).ok())
                else {
                    continue;
                };
                return range(Span { start, end: to.end }, &tokens[..i], &after);
            }
            // The first end reads its missing year from the second.
            let until = to.end.midnight().assume_utc() + Duration::days(1);
            // Read as a day ("on January 10"): a day without its year needs a word before it.
            let Some((from, left)) = plain_time(&format!("on {first}"), Some(until)) else {
                continue;
            };
            if left
                .split_whitespace()
                .any(|w| bare(w) != "on" && w.chars().any(char::is_alphanumeric))
            {
                // The first end says more than a time: not a range of two times.
                continue;
            }
            return range(Span { start: from.start, end: to.end }, &tokens[..i], &after);
        }
    }
    None
}

fn range(span: Span, before: &[&str], after: &str) -> Option<(Span, String)> {
    if span.end < span.start || span.days() > MAX_DAYS {
        return None;
    }
    let rest = [before.join(" "), after.to_string()];
    Some((span, rest.iter().filter(|p| !p.is_empty()).cloned().collect::<Vec<_>>().join(" ")))
}
