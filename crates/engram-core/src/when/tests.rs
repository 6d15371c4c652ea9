//! Tests of `when`: relative dates in messages, times named in queries, times relative to
//! events.

use super::*;
use time::macros::{date, datetime};

fn span(a: Date, b: Date) -> Span {
    Span { start: a, end: b }
}

#[test]
fn relative_dates_resolve_against_when_they_were_said() {
    // Thursday 17 March 2022.
    let t = datetime!(2022-03-17 20:15 UTC);
    let one = |s: &str| relative_spans(s, t);
    assert_eq!(one("Yesterday I went bowling!"), [Span::day(date!(2022 - 03 - 16))]);
    assert_eq!(one("the day before yesterday"), [Span::day(date!(2022 - 03 - 15))]);
    assert_eq!(
        one("I did it today, tomorrow more"),
        [Span::day(date!(2022 - 03 - 17)), Span::day(date!(2022 - 03 - 18))]
    );
    assert_eq!(one("three days ago"), [Span::day(date!(2022 - 03 - 14))]);
    assert_eq!(one("a couple of weeks ago"), [span(date!(2022 - 02 - 28), date!(2022 - 03 - 06))]);
    assert_eq!(one("last week we moved"), [span(date!(2022 - 03 - 07), date!(2022 - 03 - 13))]);
    assert_eq!(one("last month"), [span(date!(2022 - 02 - 01), date!(2022 - 02 - 28))]);
    assert_eq!(one("Three years ago"), [span(date!(2019 - 01 - 01), date!(2019 - 12 - 31))]);
    assert_eq!(one("last Friday"), [Span::day(date!(2022 - 03 - 11))]);
    assert_eq!(one("last Thursday"), [Span::day(date!(2022 - 03 - 10))]);
    assert_eq!(one("last weekend"), [span(date!(2022 - 03 - 12), date!(2022 - 03 - 13))]);
    for said in [
        "last week-end",
        "letztes Wochenende",
        "vergangenes Wochenende",
        "le week-end dernier",
        "le dernier week-end",
        "el fin de semana pasado",
        "no fim de semana passado",
        "lo scorso fine settimana",
        "il fine settimana scorso",
    ] {
        assert_eq!(one(said), [span(date!(2022 - 03 - 12), date!(2022 - 03 - 13))], "{said}");
    }
    // Said on a Sunday: the weekend before, not the one under way.
    assert_eq!(
        relative_spans("el fin de semana pasado", datetime!(2022-03-20 10:00 UTC)),
        [span(date!(2022 - 03 - 12), date!(2022 - 03 - 13))]
    );
    assert_eq!(one("next year"), [span(date!(2023 - 01 - 01), date!(2023 - 12 - 31))]);
    // Other languages.
    assert_eq!(one("Ieri sono andato al mare"), [Span::day(date!(2022 - 03 - 16))]);
    assert_eq!(one("la settimana scorsa"), [span(date!(2022 - 03 - 07), date!(2022 - 03 - 13))]);
    assert_eq!(one("hace dos días"), [Span::day(date!(2022 - 03 - 15))]);
    assert_eq!(one("el mes pasado"), [span(date!(2022 - 02 - 01), date!(2022 - 02 - 28))]);
    assert_eq!(one("il y a trois jours"), [Span::day(date!(2022 - 03 - 14))]);
    assert_eq!(one("aujourd'hui"), [Span::day(date!(2022 - 03 - 17))]);
    assert_eq!(one("vor zwei Tagen"), [Span::day(date!(2022 - 03 - 15))]);
    assert_eq!(one("letzte Woche"), [span(date!(2022 - 03 - 07), date!(2022 - 03 - 13))]);
    assert_eq!(one("ontem"), [Span::day(date!(2022 - 03 - 16))]);
    assert_eq!(one("due anni fa"), [span(date!(2020 - 01 - 01), date!(2020 - 12 - 31))]);
    // Nothing relative.
    assert!(one("I love bowling with my friends").is_empty());
    assert!(one("I have two cats").is_empty());
}

#[test]
fn queries_name_days_months_and_relative_times() {
    let q = |s: &str| query_span(s, None);
    assert_eq!(q("What did James do on March 16, 2022?"), Some(Span::day(date!(2022 - 03 - 16))));
    assert_eq!(q("what happened on 16th March 2022"), Some(Span::day(date!(2022 - 03 - 16))));
    assert_eq!(q("events of 2022-03-16"), Some(Span::day(date!(2022 - 03 - 16))));
    assert_eq!(
        q("What did we do in May 2023?"),
        Some(span(date!(2023 - 05 - 01), date!(2023 - 05 - 31)))
    );
    assert_eq!(q("notes from 2023-05"), Some(span(date!(2023 - 05 - 01), date!(2023 - 05 - 31))));
    assert_eq!(q("cosa è successo il 16 marzo 2022"), Some(Span::day(date!(2022 - 03 - 16))));
    assert_eq!(q("May I ask about the trip?"), None);
    // A year alone after a preposition, at the end of the query or of a clause.
    let y2023 = Some(span(date!(2023 - 01 - 01), date!(2023 - 12 - 31)));
    assert_eq!(q("What did we do in 2023?"), y2023);
    assert_eq!(q("what trips did we take in 2023 with the kids"), y2023);
    assert_eq!(q("¿Qué hicimos durante 2023?"), y2023);
    assert_eq!(q("Write the summary in 2000 words"), None);
    assert_eq!(q("room 2023 booking"), None);
    let (_, rest) = query_time("What did we do in 2023?", None).unwrap();
    assert_eq!(rest, "what did we do");
    // Dates linked by "de" / "of" (Spanish, Portuguese, English).
    assert_eq!(q("¿Qué hice el 16 de marzo de 2023?"), Some(Span::day(date!(2023 - 03 - 16))));
    assert_eq!(q("o que fiz em 16 de março de 2023"), Some(Span::day(date!(2023 - 03 - 16))));
    assert_eq!(q("on the 16th of March 2023"), Some(Span::day(date!(2023 - 03 - 16))));
    assert_eq!(
        q("¿Qué pasó en mayo de 2023?"),
        Some(span(date!(2023 - 05 - 01), date!(2023 - 05 - 31)))
    );
    assert_eq!(q("was war am 16. März 2023"), Some(Span::day(date!(2023 - 03 - 16))));
    let (_, rest) = query_time("¿Qué hice el 16 de marzo de 2023?", None).unwrap();
    assert_eq!(rest, "qué hice");
    // A day without its year: the latest one up to the anchor, after a word that
    // introduces a date.
    assert_eq!(q("What did I do on March 16?"), None);
    let march_20 = datetime!(2023-03-20 09:00 UTC);
    for query in [
        "What did I do on March 16?",
        "what happened on the 16th of March",
        "¿Qué hice el 16 de marzo?",
        "Was habe ich am 16. März gemacht?",
        "qu'est-ce que j'ai fait le 16 mars",
        "cosa ho fatto il 16 marzo",
    ] {
        assert!(needs_anchor(query), "{query}");
        assert_eq!(
            query_span(query, Some(march_20)),
            Some(Span::day(date!(2023 - 03 - 16))),
            "{query}"
        );
    }
    // Not yet reached in the anchor's year: the year before.
    assert_eq!(
        query_span("What did I do on March 21?", Some(march_20)),
        Some(Span::day(date!(2022 - 03 - 21)))
    );
    let (_, rest) = query_time("¿Qué hice el 16 de marzo?", Some(march_20)).unwrap();
    assert_eq!(rest, "qué hice");
    // A number next to a month name with no word that introduces a date is not one.
    assert!(!needs_anchor("I bought 3 march tickets"));
    assert!(!needs_anchor("May 5 people come?"));
    assert_eq!(q("What did I do yesterday?"), None, "relative needs an anchor");
    let anchor = datetime!(2022-03-17 09:00 UTC);
    assert_eq!(
        query_span("What did I do yesterday?", Some(anchor)),
        Some(Span::day(date!(2022 - 03 - 16)))
    );
    assert_eq!(
        query_span("anything last week?", Some(anchor)),
        Some(span(date!(2022 - 03 - 07), date!(2022 - 03 - 13)))
    );
    assert_eq!(Span::day(date!(2022 - 03 - 16)).days(), 1);
    // The words that named the time are left out of the keyword query.
    let (_, rest) = query_time("What did James do yesterday?", Some(anchor)).unwrap();
    assert_eq!(rest, "what did james do");
    let (_, rest) = query_time("What did James do on March 16, 2022?", None).unwrap();
    assert_eq!(rest, "what did james do");
    // A month without its year: the latest one up to the anchor.
    assert_eq!(q("When did Melanie go camping in June?"), None);
    assert!(needs_anchor("When did Melanie go camping in June?"));
    assert!(needs_anchor("What did I do yesterday?"));
    assert!(!needs_anchor("May I ask about the trip?"));
    let later = datetime!(2023-10-20 09:00 UTC);
    assert_eq!(
        query_time("When did Melanie go camping in June?", Some(later)),
        Some((
            span(date!(2023 - 06 - 01), date!(2023 - 06 - 30)),
            "when did melanie go camping".to_string()
        ))
    );
    assert_eq!(
        query_span("what happened in December?", Some(later)),
        Some(span(date!(2022 - 12 - 01), date!(2022 - 12 - 31)))
    );
    assert!(span(date!(2022 - 03 - 07), date!(2022 - 03 - 13)).contains(date!(2022 - 03 - 10)));
}

#[test]
fn queries_name_times_relative_to_events() {
    let e =
        |s: &str| event_time(s).map(|(t, rest)| (t.offset, format!("{:?}", t.unit), t.event, rest));
    assert_eq!(
        e("What did I do two days before the wedding?"),
        Some((-2, "Day".into(), "the wedding".into(), "what did i do".into()))
    );
    assert_eq!(
        e("the week after my birthday, where was I"),
        Some((1, "Week".into(), "my birthday".into(), "where was i".into()))
    );
    assert_eq!(
        e("cosa ho fatto tre giorni prima del matrimonio"),
        Some((-3, "Day".into(), "matrimonio".into(), "cosa ho fatto".into()))
    );
    assert_eq!(
        e("Was habe ich zwei Tage vor der Hochzeit gemacht"),
        Some((-2, "Day".into(), "der hochzeit gemacht".into(), "was habe ich".into()))
    );
    assert_eq!(e("qué hice el día después de la boda").map(|x| x.0), Some(1));
    // Relative dates and plain text are not events.
    assert_eq!(e("the day before yesterday"), None);
    assert_eq!(e("What did I do two days ago?"), None);
    assert_eq!(e("I have two cats before breakfast"), None);
    assert_eq!(e("vor zwei Tagen"), None);
    // A time relative to a date (LoCoMo asks so).
    assert_eq!(
        query_time("What did John do the week before August 3, 2023 involving his kids?", None),
        Some((
            span(date!(2023 - 07 - 24), date!(2023 - 07 - 30)),
            "what did john do involving his kids".to_string()
        ))
    );
    assert_eq!(
        query_span("Where was Tim in the week before 16 November 2023?", None),
        Some(span(date!(2023 - 11 - 06), date!(2023 - 11 - 12)))
    );
    assert_eq!(
        query_span("three days after 2023-05-08", None),
        Some(Span::day(date!(2023 - 05 - 11)))
    );
    // The names an event is looked up by.
    let (t, _) = event_time("Was habe ich zwei Tage vor der Hochzeit gemacht").unwrap();
    assert_eq!(t.names(), ["der hochzeit gemacht", "der hochzeit"]);
    let (t, _) = event_time("the week after my sister's big wedding party").unwrap();
    assert_eq!(
        t.names(),
        ["my sister s big wedding party", "my sister s big wedding", "my sister s big"]
    );
    // The span, from the event's day.
    let (t, _) = event_time("two days before the wedding").unwrap();
    assert_eq!(t.span(date!(2023 - 05 - 08)), Span::day(date!(2023 - 05 - 06)));
    assert_eq!(t.describe(), "2 days before \"the wedding\"");
    let (t, _) = event_time("the week after the move").unwrap();
    assert_eq!(t.span(date!(2022 - 03 - 17)), span(date!(2022 - 03 - 21), date!(2022 - 03 - 27)));
}

#[test]
fn the_one_before_last_is_two_back() {
    // Thursday 17 March 2022.
    let t = datetime!(2022-03-17 20:15 UTC);
    let one = |s: &str| relative_spans(s, t);
    let week = [span(date!(2022 - 02 - 28), date!(2022 - 03 - 06))];
    for said in
        ["the week before last", "vorletzte Woche", "la semana antepasada", "a semana retrasada"]
    {
        assert_eq!(one(said), week, "{said}");
    }
    let weekend = [span(date!(2022 - 03 - 05), date!(2022 - 03 - 06))];
    for said in ["the weekend before last", "vorletztes Wochenende", "el fin de semana antepasado"]
    {
        assert_eq!(one(said), weekend, "{said}");
    }
    assert_eq!(one("the month before last"), [span(date!(2022 - 01 - 01), date!(2022 - 01 - 31))]);
    assert_eq!(one("the year before last"), [span(date!(2020 - 01 - 01), date!(2020 - 12 - 31))]);
    // Not an event named "last", and the query keeps its other words.
    assert_eq!(event_time("what did I do the week before last"), None);
    assert_eq!(
        query_time("what did I do the week before last?", Some(t)),
        Some((week[0], "what did i do".to_string()))
    );
    // "before" with anything else is unchanged.
    assert_eq!(one("the week before the wedding"), []);
    assert_eq!(one("last week"), [span(date!(2022 - 03 - 07), date!(2022 - 03 - 13))]);
}

#[test]
fn seasons_are_read_in_words_with_a_year_and_alone() {
    // Said on 20 October 2023: last summer is the one just over.
    let oct = datetime!(2023-10-20 09:00 UTC);
    let summer_2023 = span(date!(2023 - 06 - 01), date!(2023 - 08 - 31));
    for said in [
        "last summer we went to Crete",
        "l'estate scorsa",
        "el verano pasado",
        "l'été dernier",
        "letzten Sommer",
        "o verão passado",
        "this summer",
        "cet été",
    ] {
        assert_eq!(relative_spans(said, oct), [summer_2023], "{said}");
    }
    // Said in July, last summer is the year before; this summer the one under way.
    let july = datetime!(2023-07-10 09:00 UTC);
    assert_eq!(
        relative_spans("last summer", july),
        [span(date!(2022 - 06 - 01), date!(2022 - 08 - 31))]
    );
    assert_eq!(relative_spans("this summer", july), [summer_2023]);
    // Winter spans the new year.
    let winter = span(date!(2022 - 12 - 01), date!(2023 - 02 - 28));
    assert_eq!(relative_spans("last winter", oct), [winter]);
    assert_eq!(relative_spans("this winter", datetime!(2023-01-15 09:00 UTC)), [winter]);
    assert_eq!(
        relative_spans("next winter", oct),
        [span(date!(2023 - 12 - 01), date!(2024 - 02 - 29))]
    );
    assert_eq!(
        relative_spans("last fall", oct),
        [span(date!(2022 - 09 - 01), date!(2022 - 11 - 30))]
    );
    assert_eq!(
        relative_spans("la prossima primavera", oct),
        [span(date!(2024 - 03 - 01), date!(2024 - 05 - 31))]
    );
    // English season words are verbs and nouns too: read only after last / this / next.
    assert!(relative_spans("I do not want to fall next to him", oct).is_empty());
    assert!(relative_spans("the spring in my step", oct).is_empty());
    // With a year, in a query: no anchor needed.
    let q = |s: &str| query_span(s, None);
    assert_eq!(q("What did we do in the summer of 2023?"), Some(summer_2023));
    assert_eq!(q("trips in summer 2023"), Some(summer_2023));
    assert_eq!(q("¿Qué hicimos en el verano de 2023?"), Some(summer_2023));
    assert_eq!(q("winter 2022"), Some(winter));
    let (_, rest) = query_time("What did we do in the summer of 2023?", None).unwrap();
    assert_eq!(rest, "what did we do");
    // A date and the words that introduce it leave nothing to match by keyword.
    for q in ["in May 2023", "le 16 mars 2023", "em 16 de março de 2023", "on March 16, 2023"] {
        assert_eq!(query_time(q, None).map(|x| x.1), Some(String::new()), "{q}");
    }
    // Alone after a preposition: the one under way at the anchor, or the latest.
    assert!(needs_anchor("What did Melanie paint in the summer?"));
    assert!(!needs_anchor("a summer dress"));
    assert_eq!(
        query_time("What did Melanie paint in the summer?", Some(oct)),
        Some((summer_2023, "what did melanie paint".to_string()))
    );
    assert_eq!(query_span("cosa abbiamo fatto in inverno", Some(oct)), Some(winter));
    assert_eq!(query_span("im Sommer", Some(july)), Some(summer_2023));
    assert_eq!(query_span("a summer dress", Some(oct)), None);
}

#[test]
fn weekends_ago_and_days_in_digits() {
    // Thursday 17 March 2022.
    let t = datetime!(2022-03-17 20:15 UTC);
    assert_eq!(
        relative_spans("two weekends ago", t),
        [span(date!(2022 - 03 - 05), date!(2022 - 03 - 06))]
    );
    assert_eq!(
        relative_spans("a weekend ago", t),
        [span(date!(2022 - 03 - 12), date!(2022 - 03 - 13))]
    );
    let q = |s: &str| query_span(s, None);
    let day = Some(Span::day(date!(2023 - 03 - 16)));
    assert_eq!(q("what did I do on 16/03/2023?"), day);
    assert_eq!(q("what did I do on 03/16/2023?"), day);
    assert_eq!(q("Was war am 16.03.2023?"), day);
    assert_eq!(q("on 05/05/2023"), Some(Span::day(date!(2023 - 05 - 05))));
    // Day and month that could be either: no day is read, nor from plain numbers.
    assert_eq!(q("what did I do on 05/04/2023?"), None);
    assert_eq!(q("I scored 16 03 2023 points"), None);
    assert_eq!(query_time("on 16/03/2023", None).map(|x| x.1), Some(String::new()));
}

#[test]
fn last_and_next_name_a_month() {
    let sept = datetime!(2024-09-10 09:00 UTC);
    let may = datetime!(2024-05-20 09:00 UTC);
    let q = |s: &str, at| query_time(s, Some(at)).map(|(span, _)| span);
    let may_2024 = span(date!(2024 - 05 - 01), date!(2024 - 05 - 31));
    assert!(needs_anchor("what happened last May?"));
    assert_eq!(q("what happened last May?", sept), Some(may_2024));
    assert_eq!(
        q("what happened last May?", may),
        Some(span(date!(2023 - 05 - 01), date!(2023 - 05 - 31))),
        "in May, last May is a year back"
    );
    assert_eq!(
        q("plans for last December", sept),
        Some(span(date!(2023 - 12 - 01), date!(2023 - 12 - 31)))
    );
    assert_eq!(
        q("the trip next March", sept),
        Some(span(date!(2025 - 03 - 01), date!(2025 - 03 - 31)))
    );
    // "this may" is as often a verb, and so is "last may" before one.
    assert_eq!(q("this may take a while", sept), None);
    assert_eq!(q("the last may be the best one", sept), None);
    assert_eq!(q("which one at last may I pick?", sept), None);
    assert_eq!(q("what did we do last May with Anna?", sept), Some(may_2024));
    let (_, rest) = query_time("what did I buy last May?", Some(sept)).unwrap();
    assert_eq!(rest, "what did i buy");
}

#[test]
fn early_mid_and_late_narrow_a_month() {
    let q = |s: &str| query_time(s, Some(datetime!(2023-06-10 09:00 UTC)));
    assert_eq!(
        q("what did we do in early March 2023?").map(|x| x.0),
        Some(span(date!(2023 - 03 - 01), date!(2023 - 03 - 10)))
    );
    assert_eq!(
        q("mid-May 2023 plans").map(|x| x.0),
        Some(span(date!(2023 - 05 - 11), date!(2023 - 05 - 20)))
    );
    assert_eq!(
        q("the trip in late April").map(|x| x.0),
        Some(span(date!(2023 - 04 - 21), date!(2023 - 04 - 30)))
    );
    let (_, rest) = q("what did we do in early March 2023?").unwrap();
    assert_eq!(rest, "what did we do");
    // Not a part of the month named: the whole month.
    assert_eq!(
        q("late for the meeting in May 2023").map(|x| x.0),
        Some(span(date!(2023 - 05 - 01), date!(2023 - 05 - 31)))
    );
}

#[test]
fn a_range_of_two_times_is_read_whole() {
    let t = datetime!(2023-06-01 10:00 UTC);
    let q = |s: &str| query_time(s, Some(t)).map(|(s, rest)| (s.start, s.end, rest));
    assert_eq!(
        q("What did I do between January 10 and January 16, 2022?"),
        Some((date!(2022 - 01 - 10), date!(2022 - 01 - 16), "What did I do".into()))
    );
    assert_eq!(
        q("where did she travel from May 2022 to July 2022"),
        Some((date!(2022 - 05 - 01), date!(2022 - 07 - 31), "where did she travel".into()))
    );
    assert_eq!(
        q("du 3 au 9 mai 2023").map(|x| (x.0, x.1)),
        Some((date!(2023 - 05 - 03), date!(2023 - 05 - 09)))
    );
    assert_eq!(
        q("entre el 10 y el 16 de enero de 2022").map(|x| (x.0, x.1)),
        Some((date!(2022 - 01 - 10), date!(2022 - 01 - 16)))
    );
    // Across a year's end, the first end's year from the second.
    assert_eq!(
        q("between December 28 and January 3, 2023").map(|x| (x.0, x.1)),
        Some((date!(2022 - 12 - 28), date!(2023 - 01 - 03)))
    );
    // Not ranges: the first end is no time, or the range is years long.
    assert_eq!(
        q("between the kids and me, what happened on May 3, 2023?").map(|x| (x.0, x.1)),
        Some((date!(2023 - 05 - 03), date!(2023 - 05 - 03)))
    );
    assert_eq!(q("what changed from 1990 to 2020"), None);
    // Forms a tester found unread, or read as one day.
    let jan = Some((date!(2022 - 01 - 10), date!(2022 - 01 - 16)));
    assert_eq!(q("What did I do between January 10 and 16, 2022?").map(|x| (x.0, x.1)), jan);
    assert_eq!(
        q("museum January 10-16, 2022").map(|x| (x.0, x.2)),
        Some((date!(2022 - 01 - 10), "museum".into()))
    );
    assert_eq!(q("museum January 10-16, 2022").map(|x| (x.0, x.1)), jan);
    assert_eq!(q("between the 10th and the 16th of January 2022").map(|x| (x.0, x.1)), jan);
    assert_eq!(q("between January 16 and January 10, 2022").map(|x| (x.0, x.1)), jan, "reversed");
    assert_eq!(
        q("What did I do since January 10, 2023?"),
        Some((date!(2023 - 01 - 10), date!(2023 - 06 - 01), "What did I do".into()))
    );
    assert_eq!(
        q("from March 3, 2023 until now").map(|x| (x.0, x.1)),
        Some((date!(2023 - 03 - 03), date!(2023 - 06 - 01)))
    );
    // Ends that are no times leave the query to the other rules.
    let may = Some((date!(2023 - 05 - 01), date!(2023 - 05 - 31)));
    assert_eq!(q("since the move, what did I do in May 2023?").map(|x| (x.0, x.1)), may);
    assert_eq!(
        q("from 3 to 5 people came on May 4, 2023").map(|x| (x.0, x.1)),
        Some((date!(2023 - 05 - 04), date!(2023 - 05 - 04)))
    );
}

#[test]
fn the_first_of_a_month_in_words_is_a_day() {
    let q = |s: &str| query_time(s, None).map(|(s, _)| (s.start, s.end));
    let first = Some((date!(2022 - 08 - 01), date!(2022 - 08 - 01)));
    assert_eq!(q("Qu'est-ce que j'ai fait le 1er août 2022 ?"), first);
    assert_eq!(q("Qu'est-ce que j'ai fait le premier août 2022 ?"), first);
    assert_eq!(q("Cosa ho fatto il primo agosto 2022?"), first);
    assert_eq!(q("What did I do on the 1st of August 2022?"), first);
    // Years as old as a message may be.
    assert_eq!(
        q("What did I eat on January 1, 1750?"),
        Some((date!(1750 - 01 - 01), date!(1750 - 01 - 01)))
    );
}
