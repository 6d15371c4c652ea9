//! Time in search: `since` / `until` on every source, as RFC 3339 times or as calendar
//! dates, months and years; a date as `until` includes that whole day. A query that names a
//! time finds the messages sent in it and those whose relative dates point into it,
//! seasons and "the weekend before last" included.

use serde_json::{Value, json};

use crate::helpers::{Backend, Server};

/// The contents of a search's (or a list's) results, in order.
fn contents(r: &Value) -> Vec<String> {
    let rows = r["results"].as_array().or_else(|| r["memories"].as_array());
    rows.unwrap_or_else(|| panic!("no results in {r}"))
        .iter()
        .map(|h| {
            let row = if h["message"].is_object() {
                &h["message"]
            } else if h["memory"].is_object() {
                &h["memory"]
            } else {
                h
            };
            row["content"].as_str().unwrap().to_string()
        })
        .collect()
}

async fn dates_and_times_bound_every_source(backend: Backend) {
    let s = Server::on(backend).await;
    // Bowling on three days: as messages (sent then) and as facts (observed then).
    let days = ["2023-05-01T20:00:00Z", "2023-05-11T09:30:00Z", "2023-06-02T23:59:00Z"];
    let texts = ["Bowling with Ana tonight.", "Bowling league final today.", "Bowling again!"];
    let messages: Vec<Value> = days
        .iter()
        .zip(texts)
        .map(|(d, t)| json!({ "role": "user", "content": t, "created_at": d }))
        .collect();
    let (st, b) = s
        .post("/v1/conversations/c/messages", json!({ "user_id": "u", "messages": messages }))
        .await;
    assert_eq!(st, 202, "{b}");
    let facts = [
        "The user went bowling with Ana.",
        "The user played in a bowling league final.",
        "The user's favourite sport is bowling.",
    ];
    for (d, fact) in days.iter().zip(facts) {
        let (st, b) = s
            .post("/v1/memories", json!({ "user_id": "u", "content": fact, "observed_at": d }))
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let search = |source: &'static str, since: Value, until: Value| {
        let s = &s;
        async move {
            let (st, r) = s
                .post(
                    "/v1/search",
                    json!({ "query": "bowling", "user_id": "u", "sources": [source],
                            "since": since, "until": until, "mode": "text" }),
                )
                .await;
            assert_eq!(st, 200, "{r}");
            let mut c = contents(&r);
            c.sort();
            c
        }
    };
    let msg = |i: usize| texts[i].to_string();
    let fact = |i: usize| facts[i].to_string();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    for (since, until, want) in [
        // A date as `until` includes that day (the 11th at 09:30).
        (json!(null), json!("2023-05-11"), vec![0, 1]),
        // … as `since`, from its first instant.
        (json!("2023-05-11"), json!(null), vec![1, 2]),
        (json!("2023-05-11"), json!("2023-05-11"), vec![1]),
        // A month, a year.
        (json!("2023-05"), json!("2023-05"), vec![0, 1]),
        (json!("2023-06"), json!(null), vec![2]),
        (json!("2023"), json!("2023"), vec![0, 1, 2]),
        (json!("2024"), json!(null), vec![]),
        // RFC 3339 bounds keep their exact meaning: `until` excluded.
        (json!("2023-05-01T20:00:00Z"), json!("2023-05-11T09:30:00Z"), vec![0]),
        (json!("2023-05-01T20:00:01Z"), json!(null), vec![1, 2]),
    ] {
        let got = search("messages", since.clone(), until.clone()).await;
        assert_eq!(got, sorted(want.iter().map(|i| msg(*i)).collect()), "{since} {until}");
        let got = search("memories", since.clone(), until.clone()).await;
        assert_eq!(got, sorted(want.iter().map(|i| fact(*i)).collect()), "{since} {until}");
    }
    // The list of memories takes the same bounds.
    let (st, r) = s.get("/v1/memories?user_id=u&since=2023-05-02&until=2023-06-01").await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(contents(&r), [fact(1)]);

    // Bad bounds are a 400 naming the field; a window that ends before it starts too.
    for (body, field) in [
        (json!({ "since": "2023-13-01" }), "since"),
        (json!({ "until": "2023-02-30" }), "until"),
        (json!({ "since": "May 2023" }), "since"),
        (json!({ "until": "23-05-01" }), "until"),
        (json!({ "since": "2023-05-03", "until": "2023-05-01" }), "until"),
        // The day after the last day of the window: no instant in it.
        (json!({ "since": "2023-05-02", "until": "2023-05-01" }), "until"),
        (json!({ "since": "2023-05-02T00:00:00Z", "until": "2023-05-02T00:00:00Z" }), "until"),
    ] {
        let mut b = json!({ "query": "bowling", "user_id": "u", "sources": ["messages"] });
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (st, r) = s.post("/v1/search", b.clone()).await;
        assert_eq!(st, 400, "{b} → {r}");
        assert_eq!(r["error"]["code"], "invalid_input", "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(field), "{b} → {r}");
    }
    let (st, r) = s.get("/v1/memories?user_id=u&since=yesterday").await;
    assert_eq!(st, 400, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("2026-02-22"), "{r}");
}

async fn a_query_that_names_a_time_finds_what_was_said_about_it(backend: Backend) {
    let s = Server::on(backend).await;
    // Sent on Thursday 17 March 2022: "yesterday" is the 16th. Filler on other days.
    let mut msgs = vec![
        json!({ "role": "user", "content": "James: Yesterday I went bowling with my cousins.", "created_at": "2022-03-17T19:00:00Z" }),
        json!({ "role": "user", "content": "James: Last week we painted the kitchen.", "created_at": "2022-03-17T19:05:00Z" }),
        json!({ "role": "user", "content": "James: I visited the aquarium.", "created_at": "2022-03-19T15:00:00Z" }),
        json!({ "role": "user", "content": "James: Today I am resting at home.", "created_at": "2022-03-20T10:00:00Z" }),
    ];
    for d in 1..=9 {
        msgs.push(json!({ "role": "user", "content": format!("James: note {d} about the weather"), "created_at": format!("2022-02-0{d}T10:00:00Z") }));
    }
    let (st, b) =
        s.post("/v1/conversations/j/messages", json!({ "user_id": "u", "messages": msgs })).await;
    assert_eq!(st, 202, "{b}");
    let ask =
        |q: &str| json!({ "user_id": "u", "query": q, "sources": ["messages"], "explain": true });
    // The day the question names: the message that said "yesterday" the day after is first.
    let (_, r) = s.post("/v1/search", ask("What did James do on March 16, 2022?")).await;
    let first = &r["results"][0];
    assert_eq!(
        first["message"]["content"], "James: Yesterday I went bowling with my cousins.",
        "{r}"
    );
    assert_eq!(first["explain"]["date_match"], 0.3, "{first}");
    assert_eq!(first["explain"]["date_rank"], 1, "{first}");
    // The same day named in Spanish ("16 de marzo de 2022"), and without its year (the
    // latest 16 March up to the conversation's own latest date, 20 March 2022).
    for q in ["¿Qué hizo James el 16 de marzo de 2022?", "What did James do on March 16?"] {
        let (_, r) = s.post("/v1/search", ask(q)).await;
        let first = &r["results"][0];
        assert_eq!(
            first["message"]["content"], "James: Yesterday I went bowling with my cousins.",
            "{q}: {r}"
        );
        assert_eq!(first["explain"]["date_rank"], 1, "{q}: {first}");
    }
    // A week: "last week", said on the 17th, is the week of 7–13 March.
    let (_, r) = s.post("/v1/search", ask("What did James do on 2022-03-09?")).await;
    assert_eq!(contents(&r)[0], "James: Last week we painted the kitchen.", "{r}");
    // A month names every message sent in it; a relative time is read against the
    // conversation's own latest date (20 March 2022), not the server's clock.
    let (_, r) = s.post("/v1/search", ask("What did James do yesterday?")).await;
    assert_eq!(contents(&r)[0], "James: I visited the aquarium.", "{r}");
    assert_eq!(r["results"][0]["explain"]["date_match"], 0.15, "{r}");
    // A year alone: the messages sent in it (all of them here), "yesterday" read in it.
    let (_, r) = s.post("/v1/search", ask("What did James do in 2022?")).await;
    assert_eq!(r["results"][0]["explain"]["time"], "2022-01-01 to 2022-12-31", "{r}");
    let (_, r) = s.post("/v1/search", ask("notes from February 2022")).await;
    let all = contents(&r);
    assert!(all.iter().filter(|c| c.contains("note")).count() >= 9, "{all:?}");
    // A query naming no time has no date list.
    let (_, r) = s.post("/v1/search", ask("bowling with cousins")).await;
    assert!(r["results"][0]["explain"]["date_rank"].is_null(), "{r}");
    // A message's date support is its own, whatever the limit: in a month of more messages
    // than the date list holds (oldest first), the last one is still "written within".
    let msgs: Vec<Value> = (1..=28)
        .map(|d| json!({ "role": "user", "content": format!("Day {d} of April: a walk by the canal."), "created_at": format!("2022-04-{d:02}T10:00:00Z") }))
        .collect();
    s.post("/v1/conversations/k/messages", json!({ "user_id": "u", "messages": msgs })).await;
    for limit in [1, 30] {
        let mut q = ask("canal walk 28 in April 2022");
        q["limit"] = json!(limit);
        let (_, r) = s.post("/v1/search", q).await;
        let first = &r["results"][0];
        assert_eq!(first["message"]["content"], "Day 28 of April: a walk by the canal.", "{r}");
        assert_eq!(first["explain"]["date_match"], 0.15, "limit {limit}: {first}");
    }
}

/// "Two days before the wedding": the event is found among the user's messages, its day is
/// the one the message names ("our wedding was yesterday") or the day it was sent, and the
/// time is read from it; `explain.time` says how. An event nobody mentioned names no time.
async fn a_time_named_by_an_event_is_read_from_the_conversation(backend: Backend) {
    let s = Server::on(backend).await;
    let mut msgs = vec![
        json!({ "role": "user", "content": "Maya: The florist confirmed the flowers for the big day.", "created_at": "2023-05-01T10:00:00Z" }),
        json!({ "role": "user", "content": "Maya: Went hiking alone in the rain.", "created_at": "2023-05-02T18:00:00Z" }),
        json!({ "role": "user", "content": "Maya: Went hiking with Sam to clear my head.", "created_at": "2023-05-05T18:00:00Z" }),
        json!({ "role": "user", "content": "Maya: Our wedding was yesterday, what a day!", "created_at": "2023-05-08T09:00:00Z" }),
        json!({ "role": "user", "content": "Maya: Back at work, tired but happy.", "created_at": "2023-05-15T09:00:00Z" }),
    ];
    for d in 1..=9 {
        msgs.push(json!({ "role": "user", "content": format!("Maya: note {d} about the office"), "created_at": format!("2023-04-1{d}T10:00:00Z") }));
    }
    let (st, b) =
        s.post("/v1/conversations/m/messages", json!({ "user_id": "u", "messages": msgs })).await;
    assert_eq!(st, 202, "{b}");
    let ask =
        |q: &str| json!({ "user_id": "u", "query": q, "sources": ["messages"], "explain": true });
    // The wedding was on the 7th (said "yesterday" on the 8th): two days before is the 5th.
    let (st, r) = s.post("/v1/search", ask("What did Maya do two days before the wedding?")).await;
    assert_eq!(st, 200, "{r}");
    let first = &r["results"][0];
    assert_eq!(first["message"]["content"], "Maya: Went hiking with Sam to clear my head.", "{r}");
    assert_eq!(first["explain"]["date_rank"], 1, "{first}");
    let how = first["explain"]["time"].as_str().unwrap_or_else(|| panic!("{first}"));
    assert!(how.contains("2023-05-05") && how.contains("2 days before \"the wedding\""), "{how}");
    assert!(how.contains("2023-05-07"), "the event's own day: {how}");
    // A clause that closes with a verb: the event is looked up by a shorter name too.
    let (_, r) = s
        .post("/v1/search", ask("What did Maya do two days before the wedding was celebrated?"))
        .await;
    assert_eq!(contents(&r)[0], "Maya: Went hiking with Sam to clear my head.", "{r}");
    // The day after.
    let (_, r) = s.post("/v1/search", ask("How did Maya feel the day after the wedding?")).await;
    let how = r["results"][0]["explain"]["time"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(how.contains("2023-05-08"), "{how}");
    // The day a message states beats the day a later message was sent (found by a tester:
    // "the wedding was amazing", sent two days after it, dated the wedding), and a message
    // that dates something by the event does not date it.
    let (st, b) = s
        .post(
            "/v1/conversations/w/messages",
            json!({ "user_id": "w", "messages": [
                { "role": "user", "content": "Our wedding is on June 10, 2023 in Sintra.", "created_at": "2023-03-01T10:00:00Z" },
                { "role": "user", "content": "Two days before the wedding I tried on the suit again.", "created_at": "2023-05-20T10:00:00Z" },
                { "role": "user", "content": "I picked up my grandmother from the airport.", "created_at": "2023-06-08T10:00:00Z" },
                { "role": "user", "content": "The wedding was amazing, everyone danced.", "created_at": "2023-06-12T10:00:00Z" }
            ] }),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let q = json!({ "user_id": "w", "query": "What did I do two days before the wedding?",
        "sources": ["messages"], "explain": true });
    let (_, r) = s.post("/v1/search", q).await;
    let how = r["results"][0]["explain"]["time"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(how.starts_with("2023-06-08") && how.contains("on 2023-06-10"), "{how}");
    assert_eq!(contents(&r)[0], "I picked up my grandmother from the airport.", "{r}");
    // An event the user never mentioned: no time is named, nothing is made up.
    let (_, r) =
        s.post("/v1/search", ask("What did Maya do two days before the coronation?")).await;
    for h in r["results"].as_array().unwrap() {
        assert!(h["explain"]["time"].is_null() && h["explain"]["date_rank"].is_null(), "{h}");
    }
}

/// A query's relative time with no message to read "now" from (a store of facts alone)
/// names no days, but its words leave the keyword query, so the fact is still found (found
/// by a tester: "where did the user live last week" found nothing).
async fn a_relative_time_without_messages_still_finds_facts(backend: Backend) {
    let s = Server::on(backend).await;
    s.remember("one", "The user lives in Bengaluru.").await;
    for q in ["where did the user live last week", "where did the user live yesterday"] {
        let (st, r) =
            s.post("/v1/search", json!({ "user_id": "one", "query": q, "explain": true })).await;
        assert_eq!(st, 200, "{r}");
        assert_eq!(
            r["results"][0]["memory"]["content"], "The user lives in Bengaluru.",
            "{q}: {r}"
        );
        let how = r["results"][0]["explain"]["time"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(how.contains("no message to read"), "{how}");
    }
}

/// Seasons ("last summer", "the summer of 2023", "in the summer") and the one before last
/// ("the weekend before last"), said in messages and named in queries; a relative date said
/// long after the time it names ("three years ago", "last summer" in October) is found by
/// that time.
async fn seasons_and_the_one_before_last_are_read(backend: Backend) {
    let s = Server::on(backend).await;
    // Monday 2 October 2023: last summer is June to August 2023, the weekend before last
    // 23–24 September.
    let mut msgs = vec![
        json!({ "role": "user", "content": "Nadia: Last summer we sailed around Crete.", "created_at": "2023-10-02T19:00:00Z" }),
        json!({ "role": "user", "content": "Nadia: The weekend before last I ran a half marathon.", "created_at": "2023-10-02T19:05:00Z" }),
        json!({ "role": "user", "content": "Nadia: Three years ago I moved to Lisbon.", "created_at": "2023-10-02T19:10:00Z" }),
        json!({ "role": "user", "content": "Nadia: Next year I will study in Porto.", "created_at": "2023-10-02T19:15:00Z" }),
    ];
    for d in 1..=9 {
        msgs.push(json!({ "role": "user", "content": format!("Nadia: note {d}, in the office"), "created_at": format!("2023-10-0{d}T10:00:00Z") }));
    }
    let (st, b) =
        s.post("/v1/conversations/n/messages", json!({ "user_id": "u", "messages": msgs })).await;
    assert_eq!(st, 202, "{b}");
    let ask =
        |q: &str| json!({ "user_id": "u", "query": q, "sources": ["messages"], "explain": true });
    for q in [
        "What did Nadia do in the summer of 2023?",
        "¿Qué hizo Nadia en el verano de 2023?",
        "What did Nadia do in the summer?",
    ] {
        let (_, r) = s.post("/v1/search", ask(q)).await;
        let first = &r["results"][0];
        assert_eq!(
            first["message"]["content"], "Nadia: Last summer we sailed around Crete.",
            "{q}: {r}"
        );
        let how = first["explain"]["time"].as_str().unwrap_or_default();
        assert!(how.starts_with("2023-06-01 to 2023-08-31"), "{q}: {first}");
        assert_eq!(first["explain"]["date_rank"], 1, "{q}: {first}");
    }
    // Said years after the time it names: found by that time.
    let (_, r) = s.post("/v1/search", ask("Where did Nadia move in 2020?")).await;
    assert_eq!(contents(&r)[0], "Nadia: Three years ago I moved to Lisbon.", "{r}");
    assert_eq!(r["results"][0]["explain"]["date_rank"], 1, "{r}");
    // A time named coarsely does not point into one day of it: "next year" is all of 2024,
    // not 3 March 2024 (but it is 2024).
    let (_, r) = s.post("/v1/search", ask("What will Nadia do on March 3, 2024?")).await;
    for h in r["results"].as_array().unwrap() {
        assert!(h["explain"]["date_rank"].is_null(), "{h}");
    }
    let (_, r) = s.post("/v1/search", ask("What will Nadia do in 2024?")).await;
    assert_eq!(contents(&r)[0], "Nadia: Next year I will study in Porto.", "{r}");
    assert_eq!(r["results"][0]["explain"]["date_rank"], 1, "{r}");
    // A query that is only a time leaves no keyword: no message is matched by "on" or "in"
    // (found by a session: every message with "in" scored 1.0 for "in May 2023").
    for q in ["on September 23, 2023", "in September 2023"] {
        let (_, r) = s.post("/v1/search", ask(q)).await;
        assert_eq!(
            contents(&r)[0],
            "Nadia: The weekend before last I ran a half marathon.",
            "{q}: {r}"
        );
        for h in r["results"].as_array().unwrap() {
            assert!(h["explain"]["text_rank"].is_null(), "{q}: {h}");
        }
    }
    let (_, r) = s.post("/v1/search", ask("What did Nadia do on September 23, 2023?")).await;
    assert_eq!(contents(&r)[0], "Nadia: The weekend before last I ran a half marathon.", "{r}");
    assert_eq!(r["results"][0]["explain"]["date_rank"], 1, "{r}");
}

on_both_backends!(
    dates_and_times_bound_every_source,
    seasons_and_the_one_before_last_are_read,
    a_query_that_names_a_time_finds_what_was_said_about_it,
    a_time_named_by_an_event_is_read_from_the_conversation,
    a_relative_time_without_messages_still_finds_facts,
);
