//! A range of two times in a query: "between January 10 and January 16, 2022", "between
//! January 10 and 16, 2022", "January 10-16, 2022", "from May 2022 to July 2022", "zwischen
//! dem 3. und dem 9. Mai 2023", "du 3 au 9 mai 2023", "between the 10th and the 16th of
//! January"; and an open one, "since January 10, 2022", "from March 3 until now". The first
//! end may take its year (and month) from the second; a range read as the second time alone
//! named only its last day (found by a tester).

use time::{Date, Duration, OffsetDateTime};

use super::{Span, day_number, month, plain_time};

/// Words that open a range.
const OPEN: &[&str] = &[
    "between", "from", "zwischen", "von", "vom", "entre", "desde", "du", "dal", "dall", "tra",
    "fra",
];
/// Words that join its two ends.
const JOIN: &[&str] = &[
    "and", "to", "until", "till", "through", "und", "bis", "et", "au", "y", "hasta", "al", "a", "e",
];
/// Words that open a range up to now.
const SINCE: &[&str] = &["since", "seit", "depuis", "dal", "desde"];
/// "now" as the second end.
const NOW: &[&str] =
    &["now", "today", "heute", "jetzt", "maintenant", "hoy", "ahora", "oggi", "adesso"];
/// Articles before a day ("entre el 10 y el 16", "zwischen dem 3. und dem 9.").
const ARTICLES: &[&str] = &["the", "el", "le", "la", "il", "lo", "dem", "den", "der"];
/// Words at most between the opening word and the joining one.
const SPAN_WORDS: usize = 6;
/// Longest range read, in days: a longer one is not what a question about a time means.
const MAX_DAYS: i64 = 400;

fn bare(token: &str) -> String {
    token.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase()
}

/// Whether a range's end may start with `token`: a month, a day, a year, a date in digits.
fn time_like(token: &str) -> bool {
    let t = bare(token);
    month(&t).is_some()
        || day_number(&t).is_some()
        || super::year_number(&t).is_some()
        || (t.len() >= 7 && t.chars().all(|c| c.is_ascii_digit() || c == '-'))
}

fn today(anchor: Option<OffsetDateTime>) -> Date {
    anchor.unwrap_or_else(OffsetDateTime::now_utc).date()
}

/// The range `query` names and the query without it, or None.
pub(super) fn range_time(query: &str, anchor: Option<OffsetDateTime>) -> Option<(Span, String)> {
    let query = days_with_a_dash(query);
    let tokens: Vec<&str> = query.split_whitespace().collect();
    for i in 0..tokens.len() {
        let open = bare(tokens[i]);
        if SINCE.contains(&open.as_str())
            && let Some(found) = since(&tokens, i, anchor)
        {
            return Some(found);
        }
        if !OPEN.contains(&open.as_str()) {
            continue;
        }
        let last = (i + 1 + SPAN_WORDS).min(tokens.len());
        for j in i + 2..last {
            if JOIN.contains(&bare(tokens[j]).as_str())
                && let Some(found) = two_ends(&tokens, i, j, anchor)
            {
                return Some(found);
            }
        }
    }
    None
}

/// "January 10-16, 2022" → "between January 10 and January 16, 2022".
fn days_with_a_dash(query: &str) -> String {
    if !query.contains(['-', '–']) {
        return query.to_string();
    }
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(tokens.len() + 3);
    for (k, t) in tokens.iter().enumerate() {
        let named = k > 0 && month(&bare(tokens[k - 1])).is_some();
        let parts: Vec<&str> = t.split(['-', '–']).collect();
        if named
            && let [a, b] = parts[..]
            && day_number(a).is_some()
            && day_number(&bare(b)).is_some()
        {
            let m = out.pop().unwrap_or_default();
            out.extend(["between".to_string(), m.clone(), a.to_string(), "and".to_string(), m]);
            out.push(b.to_string());
            continue;
        }
        out.push((*t).to_string());
    }
    out.join(" ")
}

/// A range opened at `tokens[i]` and joined at `tokens[j]`.
fn two_ends(
    tokens: &[&str],
    i: usize,
    j: usize,
    anchor: Option<OffsetDateTime>,
) -> Option<(Span, String)> {
    let first: Vec<&str> = tokens[i + 1..j]
        .iter()
        .copied()
        .filter(|t| !ARTICLES.contains(&bare(t).as_str()))
        .collect();
    let mut second: Vec<String> = tokens[j + 1..]
        .iter()
        .skip_while(|t| ARTICLES.contains(&bare(t).as_str()))
        .map(|t| (*t).to_string())
        .collect();
    let starts = second.first()?;
    if !time_like(starts) && !NOW.contains(&bare(starts).as_str()) {
        return None;
    }
    // A number closes a range as a day only before a month or a year ("16th of January",
    // "9 mai", "16, 2022"), or with the month named by the first end: "from 3 to 5 people"
    // is no range.
    let next = second.get(1).map(|t| bare(t)).unwrap_or_default();
    let first_month = first.iter().any(|t| month(&bare(t)).is_some());
    if day_number(&bare(starts)).is_some()
        && !first_month
        && month(&next).is_none()
        && super::year_number(&next).is_none()
        && !matches!(next.as_str(), "of" | "de" | "del" | "di")
    {
        return None;
    }
    let (to, after) = if NOW.contains(&bare(starts).as_str()) {
        let rest = second[1..].join(" ");
        (Span::day(today(anchor)), rest)
    } else {
        // "between January 10 and 16, 2022": the second end's month from the first.
        if let Some(day) = second.first().filter(|t| day_number(&bare(t)).is_some()).cloned()
            && let Some(m) = first.iter().find(|t| month(&bare(t)).is_some())
            && !second.iter().skip(1).any(|t| month(&bare(t)).is_some())
        {
            second[0] = format!("{m} {day}");
        }
        plain_time(&second.join(" "), anchor)?
    };
    let first = first.join(" ");
    if let Some(day) = day_number(&bare(&first)) {
        // "du 3 au 9 mai 2023", "the 10th and the 16th of January": a day alone, in the
        // second end's month.
        let start = to.start.replace_day(day).ok()?;
        return range(Span { start, end: to.end }, &tokens[..i], &after);
    }
    // The first end reads its missing year from the second; read as a day ("on January
    // 10"), for a day without its year needs a word before it.
    let until = to.end.midnight().assume_utc() + Duration::days(1);
    let (from, left) = plain_time(&format!("on {first}"), Some(until))?;
    if left.split_whitespace().any(|w| bare(w) != "on" && w.chars().any(char::is_alphanumeric)) {
        // The first end says more than a time: not a range of two times.
        return None;
    }
    let mut span = Span { start: from.start, end: to.end };
    // Two ends written the wrong way round ("between January 16 and January 10, 2022"),
    // unless the range crosses a year's end ("between December 28 and January 3").
    if let Ok(same_year) = from.start.replace_year(to.end.year())
        && same_year > to.end
        && span.days() > (same_year - to.start).whole_days() + 1
    {
        span = Span { start: to.start, end: same_year };
    }
    range(span, &tokens[..i], &after)
}

/// "since January 10, 2022": from that time to now (the anchor).
fn since(tokens: &[&str], i: usize, anchor: Option<OffsetDateTime>) -> Option<(Span, String)> {
    // The time follows the word ("since the move, what did I do in May?" names no range).
    let next = tokens[i + 1..].iter().find(|t| !ARTICLES.contains(&bare(t).as_str()))?;
    if !time_like(next) {
        return None;
    }
    let (from, after) = plain_time(&format!("on {}", tokens[i + 1..].join(" ")), anchor)?;
    let end = today(anchor);
    if from.start > end {
        return None;
    }
    let rest = [tokens[..i].join(" "), after.trim_start_matches("on ").to_string()];
    Some((Span { start: from.start, end }, joined(&rest)))
}

fn range(span: Span, before: &[&str], after: &str) -> Option<(Span, String)> {
    if span.end < span.start || span.days() > MAX_DAYS {
        return None;
    }
    Some((span, joined(&[before.join(" "), after.to_string()])))
}

fn joined(parts: &[String]) -> String {
    parts.iter().filter(|p| !p.is_empty()).cloned().collect::<Vec<_>>().join(" ")
}
