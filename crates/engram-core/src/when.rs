//! Time in words: the relative dates a message names ("yesterday", "last week", "three years
//! ago", "ieri", "la semana pasada", "vor zwei Tagen"), resolved against the message's own
//! `created_at`; and the time a query names ("on March 16, 2022", "in May 2023",
//! "2023-05-08", "last week" — the relative ones against an anchor the caller gives: the
//! conversation's own latest date, never the server clock). Pure functions over words.
//!
//! Search uses both (`engine::search`): a query that names a day or month finds the
//! messages that were sent in it and those whose relative dates point into it ("yesterday I
//! went bowling", sent the day after), as a third ranked list beside vectors and keywords,
//! and `explain` shows the match.

use time::{Date, Duration, Month, OffsetDateTime, UtcOffset, Weekday};

mod event;
mod range;
mod season;

pub use event::{EventTime, event_time};

/// A span of whole days, both ends included (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: Date,
    pub end: Date,
}

impl Span {
    fn day(d: Date) -> Self {
        Span { start: d, end: d }
    }

    fn month_of(d: Date) -> Self {
        let start = d.replace_day(1).unwrap_or(d);
        let end = start.replace_day(d.month().length(d.year())).unwrap_or(start);
        Span { start, end }
    }

    fn year_of(y: i32) -> Option<Self> {
        Some(Span {
            start: Date::from_calendar_date(y, Month::January, 1).ok()?,
            end: Date::from_calendar_date(y, Month::December, 31).ok()?,
        })
    }

    /// Monday to Sunday of the week of `d`.
    fn week_of(d: Date) -> Self {
        let start = d - Duration::days(i64::from(d.weekday().number_days_from_monday()));
        Span { start, end: start + Duration::days(6) }
    }

    pub fn overlaps(&self, other: &Span) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    pub fn contains(&self, d: Date) -> bool {
        self.start <= d && d <= self.end
    }

    /// Days in the span.
    pub fn days(&self) -> i64 {
        (self.end - self.start).whole_days() + 1
    }
}

/// Lowercase words (letters and digits; apostrophes and punctuation split).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn number(w: &str) -> Option<i64> {
    if let Ok(n) = w.parse::<i64>() {
        return (1..=100).contains(&n).then_some(n);
    }
    Some(match w {
        "a" | "an" | "one" | "uno" | "una" | "un" | "une" | "ein" | "einem" | "einer" | "um"
        | "uma" => 1,
        "two" | "couple" | "due" | "dos" | "deux" | "zwei" | "dois" | "duas" => 2,
        "three" | "few" | "tre" | "tres" | "trois" | "drei" | "três" => 3,
        "four" | "quattro" | "cuatro" | "quatre" | "vier" | "quatro" => 4,
        "five" | "cinque" | "cinco" | "cinq" | "fünf" => 5,
        "six" | "sei" | "seis" | "sechs" => 6,
        "seven" | "sette" | "siete" | "sept" | "sieben" | "sete" => 7,
        "eight" | "otto" | "ocho" | "huit" | "acht" | "oito" => 8,
        "nine" | "nove" | "nueve" | "neuf" | "neun" => 9,
        "ten" | "dieci" | "diez" | "dix" | "zehn" | "dez" => 10,
        _ => return None,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Day,
    Week,
    Month,
    Year,
}

fn unit(w: &str) -> Option<Unit> {
    Some(match w {
        "day" | "days" | "giorno" | "giorni" | "día" | "días" | "dia" | "dias" | "jour"
        | "jours" | "tag" | "tagen" | "tage" => Unit::Day,
        "week" | "weeks" | "settimana" | "settimane" | "semana" | "semanas" | "semaine"
        | "semaines" | "woche" | "wochen" => Unit::Week,
        "month" | "months" | "mese" | "mesi" | "mes" | "meses" | "mois" | "monat" | "monaten"
        | "monate" | "mês" => Unit::Month,
        "year" | "years" | "anno" | "anni" | "año" | "años" | "an" | "ans" | "année" | "années"
        | "jahr" | "jahren" | "jahre" | "ano" | "anos" => Unit::Year,
        _ => return None,
    })
}

fn weekday(w: &str) -> Option<Weekday> {
    Some(match w {
        "monday" | "lunedì" | "lunes" | "lundi" | "montag" => Weekday::Monday,
        "tuesday" | "martedì" | "martes" | "mardi" | "dienstag" => Weekday::Tuesday,
        "wednesday" | "mercoledì" | "miércoles" | "mercredi" | "mittwoch" => Weekday::Wednesday,
        "thursday" | "giovedì" | "jueves" | "jeudi" | "donnerstag" => Weekday::Thursday,
        "friday" | "venerdì" | "viernes" | "vendredi" | "freitag" => Weekday::Friday,
        "saturday" | "sabato" | "sábado" | "samedi" | "samstag" => Weekday::Saturday,
        "sunday" | "domenica" | "domingo" | "dimanche" | "sonntag" => Weekday::Sunday,
        _ => return None,
    })
}

/// Words that make the following (or preceding) unit "the previous one".
fn is_last(w: &str) -> bool {
    matches!(
        w,
        "last"
            | "past"
            | "previous"
            | "scorso"
            | "scorsa"
            | "passato"
            | "passata"
            | "pasado"
            | "pasada"
            | "dernier"
            | "dernière"
            | "letzte"
            | "letzten"
            | "letztes"
            | "letzter"
            | "vergangene"
            | "vergangenen"
            | "vergangenes"
            | "passado"
            | "passada"
    )
}

fn is_next(w: &str) -> bool {
    matches!(
        w,
        "next"
            | "prossimo"
            | "prossima"
            | "próximo"
            | "próxima"
            | "prochain"
            | "prochaine"
            | "nächste"
            | "nächsten"
            | "nächstes"
            | "proximo"
            | "proxima"
    )
}

fn is_this(w: &str) -> bool {
    matches!(
        w,
        "this"
            | "questo"
            | "questa"
            | "este"
            | "esta"
            | "ce"
            | "cette"
            | "diese"
            | "diesen"
            | "dieses"
    )
}

fn shift(d: Date, u: Unit, n: i64) -> Span {
    match u {
        Unit::Day => Span::day(d + Duration::days(n)),
        Unit::Week => Span::week_of(d + Duration::days(7 * n)),
        Unit::Month => {
            let months = i64::from(d.year()) * 12 + i64::from(u8::from(d.month())) - 1 + n;
            let (y, m) = (months.div_euclid(12) as i32, (months.rem_euclid(12) + 1) as u8);
            let first = Month::try_from(m)
                .ok()
                .and_then(|m| Date::from_calendar_date(y, m, 1).ok())
                .unwrap_or(d);
            Span::month_of(first)
        }
        Unit::Year => Span::year_of(d.year() + n as i32).unwrap_or(Span::day(d)),
    }
}

/// The most recent `w` strictly before `d`.
fn previous_weekday(d: Date, w: Weekday) -> Date {
    let back = (7 + i64::from(d.weekday().number_days_from_monday())
        - i64::from(w.number_days_from_monday()))
        % 7;
    d - Duration::days(if back == 0 { 7 } else { back })
}

/// The relative dates `text` names, resolved against `anchor` (when it was said).
pub fn relative_spans(text: &str, anchor: OffsetDateTime) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for (span, _, _) in relative_matches(&words(text), anchor) {
        if !out.contains(&span) {
            out.push(span);
        }
    }
    out
}

/// Every relative date in `w`: its span, the index of its first word and its word count.
fn relative_matches(w: &[String], anchor: OffsetDateTime) -> Vec<(Span, usize, usize)> {
    let d = anchor.to_offset(UtcOffset::UTC).date();
    let mut out = Vec::new();
    let at = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let mut i = 0;
    while i < w.len() {
        let (a, b, c) = (at(i), at(i + 1), at(i + 2));
        let mut found: Option<(Span, usize)> = match a {
            "yesterday" | "ieri" | "ayer" | "hier" | "gestern" | "ontem" => {
                Some((Span::day(d - Duration::days(1)), 1))
            }
            "vorgestern" | "anteayer" | "anteontem" | "altroieri" => {
                Some((Span::day(d - Duration::days(2)), 1))
            }
            "today" | "tonight" | "oggi" | "hoy" | "heute" | "hoje" | "stasera" | "stamattina" => {
                Some((Span::day(d), 1))
            }
            "tomorrow" | "domani" | "demain" | "amanhã" => {
                Some((Span::day(d + Duration::days(1)), 1))
            }
            "aujourd" if b == "hui" => Some((Span::day(d), 2)),
            "avant" if b == "hier" => Some((Span::day(d - Duration::days(2)), 2)),
            _ => None,
        };
        // "the day before yesterday"
        if a == "day" && b == "before" && c == "yesterday" {
            found = Some((Span::day(d - Duration::days(2)), 3));
        }
        // "last night", "this morning"
        if found.is_none() && (a == "last" && b == "night") {
            found = Some((Span::day(d - Duration::days(1)), 2));
        }
        if found.is_none() && is_this(a) && matches!(b, "morning" | "afternoon" | "evening") {
            found = Some((Span::day(d), 2));
        }
        // "last weekend", "letztes Wochenende", "le dernier week-end" (before "last week"
        // takes "last week-end"); "el fin de semana pasado", "le week-end dernier".
        if found.is_none()
            && is_last(a)
            && let Some(k) = weekend_words(w, i + 1)
        {
            found = Some((last_weekend(d), 1 + k));
        }
        if found.is_none()
            && let Some(k) = weekend_words(w, i)
            && is_last(at(i + k))
        {
            found = Some((last_weekend(d), k + 1));
        }
        // "the week before last", "the weekend before last", "vorletzte Woche", "la semana
        // antepasada", "o mês retrasado"
        if found.is_none() {
            found = before_last(w, i, d);
        }
        // "last summer", "this winter", "l'estate scorsa", "el verano pasado"
        if found.is_none() {
            found = season::relative(w, i, d);
        }
        // "last week", "next month", "this year", "last friday"
        if found.is_none() && (is_last(a) || is_next(a) || is_this(a)) {
            let n = if is_last(a) {
                -1
            } else if is_next(a) {
                1
            } else {
                0
            };
            if let Some(u) = unit(b) {
                found = Some((shift(d, u, n), 2));
            } else if let Some(wd) = weekday(b).filter(|_| n == -1) {
                found = Some((Span::day(previous_weekday(d, wd)), 2));
            } else if let Some(m) = month(b).filter(|_| n != 0 && (b != "may" || may_ends(c))) {
                // "last May": the latest May before this month; "next May" the first after
                // it ("this may" is a verb as often as a month, and is left alone, as is
                // "the last may be…": "may" is a month only at the end or before a number or
                // a word that cannot follow the verb).
                found = named_month(d, m, n).map(|s| (s, 2));
            }
        }
        // "la settimana scorsa", "le mois dernier", "el año pasado": unit then "last".
        if found.is_none()
            && let Some(u) = unit(a)
            && (is_last(b) || is_next(b))
        {
            found = Some((shift(d, u, if is_last(b) { -1 } else { 1 }), 2));
        }
        // "two weekends ago"
        if found.is_none()
            && let Some(n) = number(a)
            && let Some(k) = weekend_words(w, i + 1)
            && at(i + 1 + k) == "ago"
        {
            let (back, last) = (Duration::days(7 * (n - 1)), last_weekend(d));
            found = Some((Span { start: last.start - back, end: last.end - back }, k + 2));
        }
        // "three days ago", "2 weeks ago", "a couple of years ago"
        if found.is_none()
            && let Some(n) = number(a)
        {
            let (u, skip) = match (unit(b), unit(c)) {
                (Some(u), _) => (Some(u), 2),
                (None, Some(u)) if b == "of" => (Some(u), 3),
                _ => (None, 0),
            };
            if let Some(u) = u
                && matches!(at(i + skip), "ago" | "fa")
            {
                found = Some((shift(d, u, -n), skip + 1));
            }
        }
        // "hace tres días", "vor zwei Tagen", "há dois dias", "il y a trois jours"
        if found.is_none()
            && matches!(a, "hace" | "vor" | "há" | "ha")
            && let (Some(n), Some(u)) = (number(b), unit(c))
        {
            found = Some((shift(d, u, -n), 3));
        }
        if found.is_none()
            && a == "il"
            && b == "y"
            && c == "a"
            && let (Some(n), Some(u)) = (number(at(i + 3)), unit(at(i + 4)))
        {
            found = Some((shift(d, u, -n), 5));
        }
        match found {
            Some((span, used)) => {
                out.push((span, i, used));
                i += used;
            }
            None => i += 1,
        }
    }
    out
}

/// A unit or a weekend "before last" at word `i`: its span two back from `d`, and its
/// number of words.
fn before_last(w: &[String], i: usize, d: Date) -> Option<(Span, usize)> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    let second_last =
        |x: &str| matches!(x, "antepasado" | "antepasada" | "retrasado" | "retrasada");
    let weekend_back = |span: Span| Span {
        start: span.start - Duration::days(7),
        end: span.end - Duration::days(7),
    };
    // "vorletzte Woche", "vorletztes Wochenende"
    if matches!(at(i), "vorletzte" | "vorletzten" | "vorletztes" | "vorletzter") {
        if let Some(u) = unit(at(i + 1)) {
            return Some((shift(d, u, -2), 2));
        }
        if let Some(k) = weekend_words(w, i + 1) {
            return Some((weekend_back(last_weekend(d)), 1 + k));
        }
    }
    // "week before last", "la semana antepasada"
    if let Some(u) = unit(at(i)) {
        if at(i + 1) == "before" && is_last(at(i + 2)) {
            return Some((shift(d, u, -2), 3));
        }
        if second_last(at(i + 1)) {
            return Some((shift(d, u, -2), 2));
        }
    }
    // "weekend before last", "el fin de semana antepasado"
    let k = weekend_words(w, i)?;
    if at(i + k) == "before" && is_last(at(i + k + 1)) {
        return Some((weekend_back(last_weekend(d)), k + 2));
    }
    second_last(at(i + k)).then(|| (weekend_back(last_weekend(d)), k + 1))
}

/// The words of "weekend" at `i` ("weekend", "week-end", "Wochenende", "fine settimana",
/// "fin de semana", "fim de semana"): how many.
fn weekend_words(w: &[String], i: usize) -> Option<usize> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    match (at(i), at(i + 1), at(i + 2)) {
        ("weekend" | "weekends" | "wochenende" | "wochenenden", _, _) => Some(1),
        ("week", "end", _) | ("fine", "settimana", _) => Some(2),
        ("fin" | "fim", "de", "semana") => Some(3),
        _ => None,
    }
}

/// The last weekend before `d` (Saturday and Sunday; said on a Sunday, the one before).
fn last_weekend(d: Date) -> Span {
    let sat = previous_weekday(d, Weekday::Saturday);
    let sat = if d.weekday() == Weekday::Sunday { sat - Duration::days(7) } else { sat };
    Span { start: sat, end: sat + Duration::days(1) }
}

/// Whether the word after "last may" / "next may" leaves "may" a month.
fn may_ends(next: &str) -> bool {
    next.is_empty()
        || next.chars().all(|c| c.is_ascii_digit())
        || matches!(
            next,
            "and"
                | "or"
                | "with"
                | "in"
                | "at"
                | "on"
                | "for"
                | "when"
                | "while"
                | "during"
                | "before"
                | "after"
                | "th"
                | "st"
                | "nd"
                | "rd"
        )
}

/// The month `m` nearest before (`n` = −1) or after (`n` = 1) the month of `d`, never that
/// month itself.
fn named_month(d: Date, m: Month, n: i64) -> Option<Span> {
    let (now, want) = (d.month() as u8, m as u8);
    let year = match n {
        -1 if want < now => d.year(),
        -1 => d.year() - 1,
        _ if want > now => d.year(),
        _ => d.year() + 1,
    };
    Date::from_calendar_date(year, m, 1).ok().map(Span::month_of)
}

fn month(w: &str) -> Option<Month> {
    Some(match w {
        "january" | "jan" | "gennaio" | "enero" | "janvier" | "januar" | "janeiro" => {
            Month::January
        }
        "february" | "feb" | "febbraio" | "febrero" | "février" | "februar" | "fevereiro" => {
            Month::February
        }
        "march" | "mar" | "marzo" | "mars" | "märz" | "março" => Month::March,
        "april" | "apr" | "aprile" | "abril" | "avril" => Month::April,
        "may" | "maggio" | "mayo" | "mai" | "maio" => Month::May,
        "june" | "jun" | "giugno" | "junio" | "juin" | "juni" | "junho" => Month::June,
        "july" | "jul" | "luglio" | "julio" | "juillet" | "juli" | "julho" => Month::July,
        "august" | "aug" | "agosto" | "août" => Month::August,
        "september" | "sep" | "sept" | "settembre" | "septiembre" | "septembre" | "setembro" => {
            Month::September
        }
        "october" | "oct" | "ottobre" | "octubre" | "octobre" | "oktober" | "outubro" => {
            Month::October
        }
        "november" | "nov" | "novembre" | "noviembre" | "novemberr" | "novembro" => Month::November,
        "december" | "dec" | "dicembre" | "diciembre" | "décembre" | "dezember" | "dezembro" => {
            Month::December
        }
        _ => return None,
    })
}

fn day_number(w: &str) -> Option<u8> {
    // The first of a month in words ("le premier août", "il primo maggio").
    if matches!(w, "premier" | "primo" | "primero" | "erster" | "ersten") {
        return Some(1);
    }
    let digits: String = w.chars().take_while(char::is_ascii_digit).collect();
    let rest = &w[digits.len()..];
    // English ordinals, and French "1er" / "1re", Spanish and Italian "1º" / "1°".
    if !matches!(rest, "" | "st" | "nd" | "rd" | "th" | "er" | "re" | "º" | "°") {
        return None;
    }
    digits.parse::<u8>().ok().filter(|d| (1..=31).contains(d))
}

/// A year as the stores keep them (1678–2261: a message may be dated 1750, and a query
/// naming "January 1, 1750" lost its year when only 1900–2200 were years).
fn year_number(w: &str) -> Option<i32> {
    w.parse::<i32>().ok().filter(|y| (1678..=2261).contains(y))
}

/// The time a query names: a day ("March 16, 2022", "16 March 2022", "2022-03-16"), a month
/// ("May 2023", "2023-05"), or — with an `anchor`, the conversation's latest date — a
/// relative one ("yesterday", "last week") or a month without its year ("in June": the
/// latest June up to the anchor). The first one found.
pub fn query_span(query: &str, anchor: Option<OffsetDateTime>) -> Option<Span> {
    query_time(query, anchor).map(|(span, _)| span)
}

/// [`query_span`] and the query without the words that named the time ("What did James do
/// yesterday?" → "what did james do"), for keyword search: a time is matched by dates, not
/// by rows that happen to say "yesterday".
pub fn query_time(query: &str, anchor: Option<OffsetDateTime>) -> Option<(Span, String)> {
    // "the week before August 3, 2023": a time relative to a date.
    if let Some((event, rest)) = event_time(query)
        && let Some((on, after)) = plain_time(&event.event, None)
    {
        let day = if event.offset < 0 { on.start } else { on.end };
        // The words the event took that were not the date go back to the query.
        let rest = [rest, after].iter().filter(|p| !p.is_empty()).cloned().collect::<Vec<_>>();
        return Some((event.span(day), rest.join(" ")));
    }
    range::range_time(query, anchor).or_else(|| plain_time(query, anchor))
}

/// [`query_time`] without times relative to a date; a month named with "early", "mid" or
/// "late" before it ("in early March", "mid-May 2023") narrowed to its first, middle or
/// last ten days or so.
fn plain_time(query: &str, anchor: Option<OffsetDateTime>) -> Option<(Span, String)> {
    let (span, rest) = whole_time(query, anchor)?;
    let whole_month = span.start.day() == 1 && span == Span::month_of(span.start);
    let w = words(query);
    let part = (0..w.len().saturating_sub(1)).find_map(|i| {
        let third = match w[i].as_str() {
            "early" | "inizio" | "principios" | "début" | "anfang" => 0,
            "mid" | "middle" | "metà" | "mediados" | "mitte" => 1,
            "late" | "fine" | "finales" | "fin" | "ende" => 2,
            _ => return None,
        };
        (month(&w[i + 1]) == Some(span.start.month())).then_some((third, w[i].clone()))
    });
    let Some((third, word)) = part.filter(|_| whole_month) else { return Some((span, rest)) };
    let day = |d: u8| span.start.replace_day(d).ok();
    let narrowed = match third {
        0 => Span { start: span.start, end: day(10)? },
        1 => Span { start: day(11)?, end: day(20)? },
        _ => Span { start: day(21)?, end: span.end },
    };
    // The part's word goes with the time, and so do the words that introduce it ("in").
    let mut kept: Vec<&str> = rest.split(' ').filter(|x| !x.is_empty()).collect();
    if let Some(at) = kept.iter().position(|x| *x == word) {
        let mut from = at;
        while from > 0 && at - from < 2 && is_intro(kept[from - 1]) {
            from -= 1;
        }
        kept.drain(from..=at);
    }
    Some((narrowed, kept.join(" ")))
}

/// [`plain_time`] before a part of a month is read.
fn whole_time(query: &str, anchor: Option<OffsetDateTime>) -> Option<(Span, String)> {
    let w = words(query);
    // The query without the time's words and the (at most two) words that introduce it
    // ("on the", "in", "le", "em"): alone, they would be the whole keyword query.
    let rest = |from: usize, n: usize| -> String {
        let mut start = from;
        while start > 0 && from - start < 2 && is_intro(&w[start - 1]) {
            start -= 1;
        }
        let n = n + (from - start);
        let from = start;
        w.iter()
            .enumerate()
            .filter(|(i, _)| *i < from || *i >= from + n)
            .map(|(_, x)| x.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    for i in 0..w.len() {
        let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
        // 2022-03-16 / 2022-03 (split on '-' into words)
        if let Some(y) = year_number(at(i))
            && at(i + 1).len() == 2
            && let Some(m) = at(i + 1).parse::<u8>().ok().and_then(|m| Month::try_from(m).ok())
        {
            if at(i + 2).len() == 2
                && let Some(d) = day_number(at(i + 2))
                && let Ok(date) = Date::from_calendar_date(y, m, d)
            {
                return Some((Span::day(date), rest(i, 3)));
            }
            if let Ok(date) = Date::from_calendar_date(y, m, 1) {
                return Some((Span::month_of(date), rest(i, 2)));
            }
        }
        if let Some((span, n)) = numeric_date(query, &w, i) {
            return Some((span, rest(i, n)));
        }
        if let Some((span, from, n)) = named_date(&w, i) {
            return Some((span, rest(from, n)));
        }
        if let Some((span, from, n)) = season::with_year(&w, i) {
            return Some((span, rest(from, n)));
        }
    }
    if let Some((span, from)) = bare_year(&w) {
        return Some((span, rest(from, 2)));
    }
    let anchor = anchor?;
    let today = anchor.to_offset(UtcOffset::UTC).date();
    // "on March 16", "el 16 de marzo": the latest such day up to the anchor.
    if let Some((m, d, from, n)) = (0..w.len()).find_map(|i| day_without_year(&w, i)) {
        let year = if (u8::from(m), d) <= (u8::from(today.month()), today.day()) {
            today.year()
        } else {
            today.year() - 1
        };
        if let Ok(date) = Date::from_calendar_date(year, m, d) {
            return Some((Span::day(date), rest(from, n)));
        }
    }
    if let Some((span, from, n)) = relative_matches(&w, anchor).into_iter().next() {
        return Some((span, rest(from, n)));
    }
    // "in the summer": the one in progress at the anchor, or the latest before it.
    if let Some((season, from, n)) = season::bare(&w)
        && let Some(span) = season.latest(today)
    {
        return Some((span, rest(from, n)));
    }
    // "in June": the latest June up to the anchor.
    let (m, i, n) = bare_month(&w)?;
    let year = if u8::from(m) <= u8::from(today.month()) { today.year() } else { today.year() - 1 };
    let first = Date::from_calendar_date(year, m, 1).ok()?;
    Some((Span::month_of(first), rest(i, n)))
}

/// A day written in digits with its year at word `i`, as it stands in `query` ("16/03/2023",
/// "03/16/2023", "16.03.2023"), when the day and the month cannot be mistaken for each other
/// (one of them over 12, or both the same): the day and its number of words. "05/04/2023"
/// is 5 April in most of the world and May 4 in the United States: no day is read.
fn numeric_date(query: &str, w: &[String], i: usize) -> Option<(Span, usize)> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    let (a, b, y) = (at(i), at(i + 1), at(i + 2));
    let short = |x: &str| (1..=2).contains(&x.len()) && x.bytes().all(|c| c.is_ascii_digit());
    if !short(a) || !short(b) {
        return None;
    }
    let year = year_number(y)?;
    if !['/', '.', '-'].iter().any(|sep| query.contains(&format!("{a}{sep}{b}{sep}{y}"))) {
        return None;
    }
    let (a, b): (u8, u8) = (a.parse().ok()?, b.parse().ok()?);
    let (day, month) = match (a > 12, b > 12) {
        (true, false) => (a, b),
        (false, true) => (b, a),
        (false, false) if a == b => (a, b),
        _ => return None,
    };
    let date = Date::from_calendar_date(year, Month::try_from(month).ok()?, day).ok()?;
    Some((Span::day(date), 3))
}

/// A word that introduces a time ("on", "in the", "during", "el", "le", "am", "em", "nel").
fn is_intro(w: &str) -> bool {
    matches!(
        w,
        "on" | "the"
            | "in"
            | "during"
            | "throughout"
            | "over"
            | "el"
            | "al"
            | "del"
            | "en"
            | "durante"
            | "am"
            | "im"
            | "vom"
            | "le"
            | "la"
            | "l"
            | "du"
            | "au"
            | "pendant"
            | "il"
            | "nel"
            | "nell"
            | "em"
            | "no"
            | "na"
            | "dia"
            | "o"
    )
}

/// A word that links a day, a month and a year: "16 de marzo de 2023", "16th of March",
/// "marzo del 2023".
fn is_date_link(w: &str) -> bool {
    matches!(w, "de" | "del" | "of" | "do" | "da")
}

/// The day number written before the month at `i` ("16 March", "16. März", "16 de marzo",
/// "the 16th of March"): the day and its index.
fn day_before(w: &[String], i: usize) -> Option<(u8, usize)> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    if i >= 1
        && let Some(d) = day_number(at(i - 1))
    {
        return Some((d, i - 1));
    }
    if i >= 2 && is_date_link(at(i - 1)) {
        return day_number(at(i - 2)).map(|d| (d, i - 2));
    }
    None
}

/// The year written at `j`, or after a linking word there ("de 2023"): the year and the
/// number of words it took.
fn year_at(w: &[String], j: usize) -> Option<(i32, usize)> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    if let Some(y) = year_number(at(j)) {
        return Some((y, 1));
    }
    if is_date_link(at(j)) {
        return year_number(at(j + 1)).map(|y| (y, 2));
    }
    None
}

/// A date with its year whose month name is the word at `i`: "March 16, 2022", "16 March
/// 2022", "16 de marzo de 2022", "the 16th of March 2022" (a day), "May 2023", "mayo de
/// 2023" (a month). The span, the index of its first word and its number of words.
fn named_date(w: &[String], i: usize) -> Option<(Span, usize, usize)> {
    let m = month(&w[i])?;
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    // March 16, 2022 / March 16th 2022
    if let Some(d) = day_number(at(i + 1))
        && let Some((y, n)) = year_at(w, i + 2)
        && let Ok(date) = Date::from_calendar_date(y, m, d)
    {
        return Some((Span::day(date), i, 2 + n));
    }
    // 16 March 2022 / 16 de marzo de 2022
    if let Some((d, from)) = day_before(w, i)
        && let Some((y, n)) = year_at(w, i + 1)
        && let Ok(date) = Date::from_calendar_date(y, m, d)
    {
        return Some((Span::day(date), from, i + 1 + n - from));
    }
    // May 2023 / mayo de 2023 ("may" alone is a verb: only with a year)
    if let Some((y, n)) = year_at(w, i + 1)
        && let Ok(date) = Date::from_calendar_date(y, m, 1)
    {
        return Some((Span::month_of(date), i, 1 + n));
    }
    None
}

/// A day and month without a year, after a word that introduces a date ("on March 16",
/// "on the 16th of March", "el 16 de marzo", "am 16. März", "le 16 mars", "il 16 marzo"):
/// the month, the day, the index of the first word of the date and its number of words
/// (the introducing word stays in the query, as with a full date).
fn day_without_year(w: &[String], i: usize) -> Option<(Month, u8, usize, usize)> {
    let m = month(&w[i])?;
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    let intro = |j: Option<usize>| {
        j.is_some_and(|j| {
            matches!(
                at(j),
                "on" | "the"
                    | "el"
                    | "al"
                    | "del"
                    | "am"
                    | "vom"
                    | "bis"
                    | "le"
                    | "du"
                    | "au"
                    | "il"
                    | "em"
                    | "no"
                    | "dia"
                    | "since"
                    | "until"
            )
        })
    };
    if let Some(d) = day_number(at(i + 1))
        && intro(i.checked_sub(1))
    {
        return Some((m, d, i, 2));
    }
    if let Some((d, from)) = day_before(w, i)
        && intro(from.checked_sub(1))
    {
        return Some((m, d, from, i + 1 - from));
    }
    None
}

/// A year alone after a preposition where the query or its clause ends ("What did we do in
/// 2023?", "durante 2022 con los niños"): the year and the preposition's index. A number
/// that goes on with a noun ("in 2000 words") is no year.
fn bare_year(w: &[String]) -> Option<(Span, usize)> {
    (0..w.len().saturating_sub(1)).find_map(|i| {
        let prep = matches!(
            w[i].as_str(),
            "in" | "during" | "throughout" | "en" | "durante" | "im" | "nel" | "em" | "pendant"
        );
        let ends = matches!(
            w.get(i + 2).map(String::as_str),
            None | Some(
                "and"
                    | "or"
                    | "with"
                    | "when"
                    | "while"
                    | "for"
                    | "at"
                    | "to"
                    | "as"
                    | "y"
                    | "e"
                    | "und"
                    | "et"
                    | "con"
                    | "mit"
                    | "avec"
                    | "com"
            )
        );
        if prep && ends { Span::year_of(year_number(&w[i + 1])?).map(|s| (s, i)) } else { None }
    })
}

/// A month named without a year after a preposition ("in June", "during March", "a giugno",
/// "en junio", "im Juni"): the month and the preposition's index.
/// "in June", "in late June": the month, the index of its preposition and the number of
/// words.
fn bare_month(w: &[String]) -> Option<(Month, usize, usize)> {
    (0..w.len().saturating_sub(1)).find_map(|i| {
        let prep =
            matches!(w[i].as_str(), "in" | "during" | "en" | "a" | "im" | "em" | "nel" | "di");
        let part = matches!(w[i + 1].as_str(), "early" | "mid" | "middle" | "late");
        let at = i + 1 + usize::from(part);
        let after = w.get(at + 1).map(String::as_str).unwrap_or("");
        if prep && year_number(after).is_none() {
            month(w.get(at)?).map(|m| (m, i, at + 1 - i))
        } else {
            None
        }
    })
}

/// Does reading the time `query` names need an anchor (a relative time, or a month or a day
/// without its year)?
pub fn needs_anchor(query: &str) -> bool {
    let w = words(query);
    bare_month(&w).is_some()
        || season::bare(&w).is_some()
        || (0..w.len()).any(|i| day_without_year(&w, i).is_some())
        || !relative_matches(&w, OffsetDateTime::UNIX_EPOCH).is_empty()
}

#[cfg(test)]
mod tests;
