//! Seasons, as the northern hemisphere's meteorological ones: spring is March to May,
//! summer June to August, autumn September to November, winter December to February (the
//! winter of a year is the one that starts in its December). Named relative to when they
//! were said ("last summer", "this winter", "l'estate scorsa", "el verano pasado",
//! "letzten Sommer", "cet été"), with a year ("summer 2023", "the summer of 2023", "verano
//! de 2023"), or alone after a preposition in a query ("in the summer": the latest one).

use time::{Date, Duration, Month};

use super::{Span, is_last, is_next, is_this, year_at};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Season {
    Spring,
    Summer,
    Autumn,
    Winter,
}

/// The season a word names, and whether the word is English (English season words are
/// also verbs and nouns — "fall", "spring" — so they are read only after a word that makes
/// them a time, never before "last" or "next").
pub(super) fn season(w: &str) -> Option<(Season, bool)> {
    Some(match w {
        "spring" => (Season::Spring, true),
        "summer" => (Season::Summer, true),
        "autumn" | "fall" => (Season::Autumn, true),
        "winter" => (Season::Winter, true),
        "primavera" | "printemps" | "frühling" => (Season::Spring, false),
        "estate" | "verano" | "été" | "sommer" | "verão" => (Season::Summer, false),
        "autunno" | "otoño" | "automne" | "herbst" | "outono" => (Season::Autumn, false),
        "inverno" | "invierno" | "hiver" => (Season::Winter, false),
        _ => return None,
    })
}

impl Season {
    fn first_month(self) -> Month {
        match self {
            Season::Spring => Month::March,
            Season::Summer => Month::June,
            Season::Autumn => Month::September,
            Season::Winter => Month::December,
        }
    }

    /// The one that starts in year `y`.
    pub(super) fn of_year(self, y: i32) -> Option<Span> {
        let start = Date::from_calendar_date(y, self.first_month(), 1).ok()?;
        let m = u8::from(self.first_month()) + 3;
        let (ey, em) = if m > 12 { (y + 1, m - 12) } else { (y, m) };
        let end =
            Date::from_calendar_date(ey, Month::try_from(em).ok()?, 1).ok()? - Duration::days(1);
        Some(Span { start, end })
    }

    /// The latest one over before `d` ("last summer" said in October is the one just past).
    fn last(self, d: Date) -> Option<Span> {
        let mut y = d.year();
        loop {
            let s = self.of_year(y)?;
            if s.end < d {
                return Some(s);
            }
            y -= 1;
        }
    }

    /// The first one to start after `d`.
    fn next(self, d: Date) -> Option<Span> {
        let mut y = d.year() - 1;
        loop {
            let s = self.of_year(y)?;
            if s.start > d {
                return Some(s);
            }
            y += 1;
        }
    }

    /// The one of `d`'s year ("this summer" is June to August of that year, whether said in
    /// April or in October); for winter, the one `d` is in or the coming one.
    fn this(self, d: Date) -> Option<Span> {
        let y = if self == Season::Winter && u8::from(d.month()) <= 2 {
            d.year() - 1
        } else {
            d.year()
        };
        self.of_year(y)
    }

    /// The one in progress on `d`, or else the latest before it.
    pub(super) fn latest(self, d: Date) -> Option<Span> {
        let mut y = d.year();
        loop {
            let s = self.of_year(y)?;
            if s.start <= d {
                return Some(s);
            }
            y -= 1;
        }
    }
}

/// A word that makes the season after it "this one" beyond [`is_this`]: "cet" (été,
/// hiver, automne), "quest" (quest'estate).
fn is_this_season(w: &str) -> bool {
    is_this(w) || matches!(w, "cet" | "quest" | "diesem")
}

/// A season named relative to `d` at word `i`: its span and its number of words.
pub(super) fn relative(w: &[String], i: usize, d: Date) -> Option<(Span, usize)> {
    let at = |j: usize| w.get(j).map(String::as_str).unwrap_or("");
    let (a, b) = (at(i), at(i + 1));
    // The season `s` as the word `rel` places it ("this" only before the season).
    let placed = |s: Season, rel: &str, before: bool| {
        if is_last(rel) {
            s.last(d)
        } else if is_next(rel) {
            s.next(d)
        } else if before && is_this_season(rel) {
            s.this(d)
        } else {
            None
        }
    };
    // "last summer", "this winter", "next spring", "letzten Sommer", "el próximo verano";
    // then "l'estate scorsa", "el verano pasado", "l'été dernier", "o verão passado"
    let span = season(b).and_then(|(s, _)| placed(s, a, true)).or_else(|| {
        season(a).filter(|(_, english)| !english).and_then(|(s, _)| placed(s, b, false))
    });
    span.map(|span| (span, 2))
}

/// A season with its year at word `i`: "summer 2023", "summer of 2023", "verano de 2023",
/// "l'estate del 2023", "Sommer 2023". The span, the index of its first word, its number of
/// words.
pub(super) fn with_year(w: &[String], i: usize) -> Option<(Span, usize, usize)> {
    let (s, _) = season(&w[i])?;
    let (y, n) = year_at(w, i + 1)?;
    Some((s.of_year(y)?, i, 1 + n))
}

/// A season named without a year after a preposition in a query ("in the summer", "during
/// winter", "en verano", "im Sommer", "nell'estate", "en été"): the season and the index of
/// its first word (the preposition).
pub(super) fn bare(w: &[String]) -> Option<(Season, usize, usize)> {
    let prep = |x: &str| {
        matches!(x, "in" | "during" | "over" | "en" | "durante" | "im" | "nel" | "nell" | "em")
    };
    let article = |x: &str| matches!(x, "the" | "el" | "la" | "l" | "o" | "der" | "dem");
    (0..w.len()).find_map(|i| {
        let (s, _) = season(&w[i])?;
        if w.get(i + 1).is_some_and(|y| super::year_number(y).is_some()) {
            return None;
        }
        if i >= 1 && prep(&w[i - 1]) {
            return Some((s, i - 1, 2));
        }
        if i >= 2 && article(&w[i - 1]) && prep(&w[i - 2]) {
            return Some((s, i - 2, 3));
        }
        None
    })
}
