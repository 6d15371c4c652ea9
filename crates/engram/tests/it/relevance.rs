//! A search that knows when it has nothing: every result carries a relevance score from 0
//! to 1 that means the same across queries, `min_score` drops what scores under it, and by
//! default a query about something never mentioned returns nothing — from REST, MCP and the
//! CLI, with MiniLM and with the built-in embedder.

use std::process::Command;

use serde_json::{Value, json};

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Db, Server, append_turns, assert_error, bin};
use crate::mcp::{Mcp, assert_tool_error};

const FACTS: [&str; 6] = [
    "The user lives in Porto and works as a nurse.",
    "The user is allergic to peanuts.",
    "The user plays the cello in a community orchestra.",
    "The user's daughter Lea starts school in September.",
    "The user prefers green tea to coffee.",
    "The user is training for the Lisbon half marathon.",
];

/// Queries about things the user never mentioned.
const UNRELATED: [&str; 4] = [
    "quantum chromodynamics lattice",
    "Byzantine fault tolerant consensus proof",
    "mitochondrial DNA haplogroup distribution",
    "Kubernetes pod eviction thresholds",
];

fn results(r: &Value) -> &Vec<Value> {
    r["results"].as_array().unwrap_or_else(|| panic!("no results in {r}"))
}

async fn unrelated_queries_find_nothing_and_scores_mean_the_same_everywhere(backend: Backend) {
    let s = Server::on(backend).await;
    for f in FACTS {
        let (st, b) = s.post("/v1/memories", json!({ "user_id": "u", "content": f })).await;
        assert_eq!(st, 201, "{b}");
    }
    let (st, b) = s
        .post(
            "/v1/conversations/c/messages",
            json!({ "user_id": "u", "messages": [
                { "role": "user", "content": "I finally booked the cello lessons for Lea." },
                { "role": "assistant", "content": "Lovely! When do they start?" },
            ]}),
        )
        .await;
    assert_eq!(st, 202, "{b}");
    let search = |body: Value| {
        let s = &s;
        async move {
            let (st, r) = s.post("/v1/search", body.clone()).await;
            assert_eq!(st, 200, "{body} → {r}");
            r
        }
    };
    for q in UNRELATED {
        for sources in [json!(["memories"]), json!(["memories", "messages"])] {
            let r = search(json!({ "query": q, "user_id": "u", "sources": sources })).await;
            assert!(results(&r).is_empty(), "{q}: {r:#}");
        }
        // With min_score 0 every candidate comes back, each with a score it does not pass
        // by default.
        let r =
            search(json!({ "query": q, "user_id": "u", "min_score": 0, "explain": true })).await;
        assert!(!results(&r).is_empty(), "{q}: {r}");
        for h in results(&r) {
            let score = h["score"].as_f64().unwrap();
            assert!(score < 0.05, "{q}: {h}");
            assert_eq!(h["explain"]["relevance"].as_f64(), Some(score), "{h}");
        }
    }

    // Every retrieval still finds its fact, with a score in 0..1 explained by its parts.
    for (q, want) in [
        ("Where does the user live?", FACTS[0]),
        ("food allergies", FACTS[1]),
        ("musical instrument", FACTS[2]),
        ("What does the user like to drink?", FACTS[4]),
        ("running race", FACTS[5]),
    ] {
        let r = search(json!({ "query": q, "user_id": "u", "explain": true })).await;
        let top = &results(&r)[0];
        assert_eq!(top["memory"]["content"], want, "{q}: {r:#}");
        let (score, e) = (top["score"].as_f64().unwrap(), &top["explain"]);
        assert!((0.05..=1.0).contains(&score), "{q}: {top}");
        let (sem, lex) = (e["semantic"].as_f64().unwrap(), e["lexical"].as_f64().unwrap());
        assert!((score - (1.0 - (1.0 - sem) * (1.0 - lex))).abs() < 1e-9, "{top}");
        for r in results(&r) {
            let v = r["score"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{r}");
        }
    }
    // Comparable across queries: a fact asked for in its own words scores near 1, a loose
    // paraphrase lower, an unrelated query 0.
    let exact = search(json!({ "query": FACTS[1], "user_id": "u" })).await;
    let loose = search(json!({ "query": "nut allergy", "user_id": "u" })).await;
    let (e, l) = (
        results(&exact)[0]["score"].as_f64().unwrap(),
        results(&loose)[0]["score"].as_f64().unwrap(),
    );
    assert!(e > 0.9, "{exact}");
    assert!(l >= 0.05 && l < e, "{loose}");
    // min_score keeps what reaches it.
    let r = search(json!({ "query": "nut allergy", "user_id": "u", "min_score": l })).await;
    assert_eq!(results(&r)[0]["memory"]["content"], FACTS[1]);
    assert!(results(&r).iter().all(|h| h["score"].as_f64().unwrap() >= l), "{r}");
    let r = search(json!({ "query": "nut allergy", "user_id": "u", "min_score": 1 })).await;
    assert!(results(&r).iter().all(|h| h["score"] == 1.0), "{r}");
    for bad in [json!(-0.1), json!(1.5), json!("high")] {
        let (st, r) =
            s.post("/v1/search", json!({ "query": "tea", "user_id": "u", "min_score": bad })).await;
        assert_eq!(st, 400, "{bad}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("min_score"), "{r}");
    }

    // Context: with a query and min_score, the facts relevant to it (and the profile).
    let (st, b) = s
        .post(
            "/v1/memories",
            json!({ "user_id": "u", "kind": "profile", "key": "name", "content": "Ana" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, c) = s
        .post("/v1/context", json!({ "user_id": "u", "query": "food allergies", "min_score": 0.2 }))
        .await;
    assert_eq!(st, 200, "{c}");
    let text = c["text"].as_str().unwrap();
    assert!(text.contains("peanuts") && text.contains("Ana"), "{text}");
    assert!(!text.contains("cello") && !text.contains("marathon"), "{text}");
    let (_, c) = s
        .post("/v1/context", json!({ "user_id": "u", "query": UNRELATED[0], "min_score": 0.2 }))
        .await;
    assert_eq!(c["text"], "Known facts about the user:\n- Ana", "{c}");
    let (_, c) = s.post("/v1/context", json!({ "user_id": "u" })).await;
    assert!(c["text"].as_str().unwrap().contains("marathon"), "without min_score, everything: {c}");
    assert_error(
        &s.post("/v1/context", json!({ "user_id": "u", "min_score": 0.2 })).await,
        400,
        "invalid_input",
    );

    // MCP says so in words.
    let mut m = Mcp::new(&s.base, None);
    m.connect().await;
    let r = m.call("recall", json!({ "user_id": "u", "query": UNRELATED[0] })).await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Nothing relevant is known"), "{r}");
    let r = m
        .call(
            "memory_search",
            json!({ "user_id": "u", "query": UNRELATED[1], "sources": ["memories", "messages"] }),
        )
        .await;
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("Nothing relevant found"), "{r}");
    assert_eq!(r["structuredContent"]["results"], json!([]), "{r}");
    let r = m.ok("recall", json!({ "user_id": "u", "query": "food allergies" })).await;
    assert!(r["results"][0]["memory"]["content"] == FACTS[1], "{r}");
    // `recall` takes a minimum score as `memory_search` does: at 1 nothing is left.
    let r = m
        .call("recall", json!({ "user_id": "u", "query": "food allergies", "min_score": 1.0 }))
        .await;
    assert!(
        r["content"][0]["text"].as_str().unwrap().starts_with("Nothing relevant is known"),
        "{r}"
    );
    let r = m
        .call("recall", json!({ "user_id": "u", "query": "food allergies", "min_score": 1.5 }))
        .await;
    assert_tool_error(&r, "invalid_input");
    let r = m.call("recall", json!({ "user_id": "u", "min_score": 0.2 })).await;
    assert_tool_error(&r, "invalid_input");
    assert!(r["content"][0]["text"].as_str().unwrap().contains("min_score needs a query"), "{r}");
}

/// The same with the built-in embedder, whose cosines sit much higher (its scale differs):
/// through the CLI.
async fn the_builtin_embedder_abstains_too(backend: Backend) {
    let db = Db::new(backend).await;
    let cli = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("--data-dir")
            .arg(db.dir())
            .args(db.store_args())
            .args(["--embedder", "builtin"])
            .args(args)
            .env("ENGRAM_LOG", "warn")
            .output_bounded()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for f in FACTS {
        cli(&["remember", f, "--user", "u"]);
    }
    for q in UNRELATED {
        let out = cli(&["recall", q, "--user", "u", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert!(results(&v).is_empty(), "{q}: {v:#}");
    }
    for (q, want) in [("peanut allergy", FACTS[1]), ("cello orchestra", FACTS[2])] {
        let v: Value = serde_json::from_str(&cli(&["recall", q, "--user", "u", "--json"])).unwrap();
        assert_eq!(results(&v)[0]["memory"]["content"], want, "{q}: {v:#}");
    }
    // A four-letter word finds its forms: "live" finds "lives" (README's first search).
    let v: Value = serde_json::from_str(&cli(&[
        "recall",
        "Where does the user live?",
        "--user",
        "u",
        "--json",
    ]))
    .unwrap();
    assert_eq!(results(&v)[0]["memory"]["content"], FACTS[0], "{v:#}");
    // The built-in embedder's meaning alone is weak evidence (its cosines of unrelated texts
    // reach 0.85): a question sharing no word with its fact ranks it first, with a low score.
    let q = "Which city is her home?";
    let v: Value =
        serde_json::from_str(&cli(&["recall", q, "--user", "u", "--json", "--min-score", "0"]))
            .unwrap();
    assert_eq!(results(&v)[0]["memory"]["content"], FACTS[0], "{v:#}");

    // In a store of two facts, a word of one of them still counts, and a word the store has
    // never seen does not take the whole query's weight (found by a tester: "peanuts snack"
    // found nothing, nor did "Bengaluru weather").
    for f in ["The user is allergic to peanuts.", "The user lives in Bengaluru."] {
        cli(&["remember", f, "--user", "small"]);
    }
    for (q, want) in [
        ("peanuts snack", "The user is allergic to peanuts."),
        ("Bengaluru weather", "The user lives in Bengaluru."),
    ] {
        let v: Value =
            serde_json::from_str(&cli(&["recall", q, "--user", "small", "--json"])).unwrap();
        assert_eq!(results(&v).len(), 1, "{q}: {v:#}");
        assert_eq!(results(&v)[0]["memory"]["content"], want, "{q}: {v:#}");
    }
    for q in UNRELATED {
        let v: Value =
            serde_json::from_str(&cli(&["recall", q, "--user", "small", "--json"])).unwrap();
        assert!(results(&v).is_empty(), "{q}: {v:#}");
    }

    // German and Spanish (found by a tester): the English table reads them from word
    // fragments, and unrelated German queries reached the cosines of the right fact
    // (0.88-0.92), so each returned facts at scores of 0.2-0.56. Now their semantic support
    // fades with the share of their words the vocabulary knows, and a question's own words
    // ("wie", "seine", "cómo") leave its keywords: a question finds its fact by its words,
    // an unrelated query finds nothing.
    let german = [
        ("Wo wohnt der Nutzer?", FACTS_DE[0]),
        ("Wie heißt seine Tochter?", FACTS_DE[5]),
        ("Wohin reist er im Sommer?", FACTS_DE[3]),
        ("Erdnüsse Allergie", FACTS_DE[1]),
    ];
    let spanish = [
        ("¿Dónde vive el usuario?", FACTS_ES[0]),
        ("¿Cómo se llama su hija?", FACTS_ES[1]),
        ("¿Qué alergias tiene?", FACTS_ES[2]),
    ];
    for (user, facts, unrelated, questions) in [
        ("de", &FACTS_DE[..], &UNRELATED_DE[..], &german[..]),
        ("es", &FACTS_ES[..], &UNRELATED_ES[..], &spanish[..]),
    ] {
        for f in facts {
            cli(&["remember", f, "--user", user]);
        }
        for q in unrelated {
            let v: Value =
                serde_json::from_str(&cli(&["recall", q, "--user", user, "--json"])).unwrap();
            assert!(results(&v).is_empty(), "{q}: {v:#}");
        }
        for (q, want) in questions {
            let v: Value =
                serde_json::from_str(&cli(&["recall", q, "--user", user, "--json"])).unwrap();
            assert_eq!(results(&v)[0]["memory"]["content"], *want, "{q}: {v:#}");
            assert!(results(&v).len() <= 2, "{q}: {v:#}");
        }
    }
}

/// German facts of one user.
const FACTS_DE: [&str; 6] = [
    "Der Nutzer wohnt in München und arbeitet als Krankenpfleger.",
    "Der Nutzer ist allergisch gegen Erdnüsse.",
    "Der Nutzer spielt am Wochenende gerne Schach mit seinem Bruder.",
    "Der Nutzer plant im Sommer eine Reise nach Portugal.",
    "Der Nutzer fährt jeden Morgen mit dem Fahrrad zur Arbeit.",
    "Die Tochter des Nutzers heißt Lena und geht in die zweite Klasse.",
];

/// Spanish facts of one user.
const FACTS_ES: [&str; 6] = [
    "El usuario vive en Múnich y trabaja como enfermero.",
    "La hija del usuario se llama Lena y está en segundo grado.",
    "El usuario es alérgico a los cacahuetes.",
    "Al usuario le gusta jugar al ajedrez con su hermano los fines de semana.",
    "El usuario planea un viaje a Portugal en verano.",
    "El usuario va en bicicleta al trabajo cada mañana.",
];

/// Spanish queries about nothing in [`FACTS_ES`].
const UNRELATED_ES: [&str; 7] = [
    "¿Cuál es el color favorito del usuario?",
    "cromodinámica cuántica en la red",
    "umbrales de desalojo de pods en Kubernetes",
    "la historia del Imperio bizantino",
    "declaración de impuestos sobre ganancias de capital",
    "¿cómo funciona un motor de combustión?",
    "receta de pan de masa madre",
];

/// German queries about nothing in [`FACTS_DE`].
const UNRELATED_DE: [&str; 7] = [
    "Was ist die Lieblingsfarbe des Nutzers?",
    "Quantenchromodynamik auf dem Gitter",
    "Kubernetes Pod Räumungsschwellen",
    "Die Geschichte des Byzantinischen Reiches",
    "Steuererklärung für Kapitalerträge",
    "Rezept für Sauerteigbrot",
    "Wie funktioniert ein Verbrennungsmotor?",
];

/// A fact longer than MiniLM's 256-token window is read whole: a question about what its
/// end says ranks it above the same fact without its end (truncated at 256 tokens, the two
/// would read the same).
async fn a_long_fact_is_found_by_its_end(backend: Backend) {
    let s = Server::on(backend).await;
    let head = "The user described the vegetable garden at length: tomatoes, basil, roses, \
                the compost heap and the new watering schedule for the summer. "
        .repeat(10);
    let tail = "Then the user talked about their sister Ana, who moved to Lisbon last year. Ana \
                works as a marine biologist at the Lisbon aquarium. Her job is to study octopus \
                behaviour, and she dives in the Atlantic every week for her research. Her sister \
                loves the work: she leads a team of five marine scientists, writes papers on \
                coastal ecosystems and teaches a university course on marine biology. The \
                user's sister earns her living as a scientist, and her employer is the \
                aquarium, where she also guides school visits. ";
    let long = format!("{head}{tail}").trim().to_string();
    assert!(long.len() < 8192);
    let (st, b) = s
        .post(
            "/v1/memories/batch",
            json!({ "dedup": false, "memories": [
                { "content": long, "user_id": "u" },
                { "content": head.trim(), "user_id": "u" },
            ] }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, r) = s
        .post(
            "/v1/search",
            json!({ "query": "What does the user's sister do for a living?", "user_id": "u",
                    "mode": "vector", "min_score": 0, "explain": true }),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let semantic = |content: &str| {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["memory"]["content"] == content)
            .map(|h| h["explain"]["semantic"].as_f64().unwrap())
    };
    assert_eq!(r["results"][0]["memory"]["content"], long, "{r}");
    let whole = semantic(&long).unwrap();
    // Without its end the fact has no support at all, and is left out.
    let head_only = semantic(head.trim()).unwrap_or(0.0);
    assert!(whole > head_only + 0.05, "the end counts: {whole} against {head_only}");
}

/// An answer that says nothing of its own ("The second one, obviously!") draws a quarter of
/// the relevance of the question before it, and a query with nothing relevant still returns
/// nothing. In text mode, where the answer's own words give it nothing, that quarter alone
/// keeps it at the default threshold, a higher `min_score` drops it, and a message three
/// places after the question draws nothing. With the built-in embedder, once every message is
/// embedded (its vector reads the question too, so in hybrid mode it also has support of its
/// own).
async fn an_answer_passes_on_the_question_before_it(backend: Backend) {
    let db = Db::new(backend).await;
    let mut cmd = Command::new(bin());
    cmd.arg("--data-dir").arg(db.dir()).args(db.store_args()).args(["--embedder", "builtin"]);
    cmd.env("ENGRAM_LOG", "warn");
    let s = Server::spawn(cmd, &[]);
    let said = [
        "Lisbon or Kyoto: which city should we choose for the sabbatical?",
        "The second one, obviously! The cherry blossoms alone are worth it.",
        "Great, book it.",
        "Done. Anything else on your list today?",
    ];
    append_turns(&s, "u", &said).await;
    crate::helpers::drained(&s.as_client()).await;
    let search = |query: &'static str, mode: &'static str, min_score: Option<f64>| {
        let s = &s;
        async move {
            let mut body = json!({ "query": query, "user_id": "u", "sources": ["messages"],
                "explain": true, "mode": mode });
            if let Some(m) = min_score {
                body["min_score"] = json!(m);
            }
            let (st, r) = s.post("/v1/search", body).await;
            assert_eq!(st, 200, "{r}");
            r
        }
    };
    let hit = |r: &Value, content: &str| {
        results(r).iter().find(|h| h["message"]["content"] == content).cloned()
    };
    let q = "Which city did we choose for the sabbatical?";
    for mode in ["hybrid", "text"] {
        let r = search(q, mode, None).await;
        let question = hit(&r, said[0]).unwrap_or_else(|| panic!("{mode}: {r:#}"));
        let answer =
            hit(&r, said[1]).unwrap_or_else(|| panic!("{mode}: the answer is kept: {r:#}"));
        let (qs, e) = (question["score"].as_f64().unwrap(), &answer["explain"]);
        assert_eq!(results(&r)[0]["message"]["content"], said[0], "{mode}: {r:#}");
        assert_eq!(e["text_coverage"], json!(0.0), "found through its context only: {e:#}");
        let support = e["context_support"].as_f64().unwrap();
        assert!((support - 0.25 * qs).abs() < 1e-9, "a quarter of the question's {qs}: {e:#}");
        assert!(support >= 0.05 && answer["score"].as_f64().unwrap() >= support, "{e:#}");
        assert_eq!(question["explain"]["context_support"], json!(0.0), "{question:#}");
        if mode == "text" {
            assert_eq!(answer["score"].as_f64().unwrap(), support, "support alone: {e:#}");
            assert!(hit(&r, said[3]).is_none(), "three places after the question: {r:#}");
        }
    }
    let r = search(q, "text", Some(0.3)).await;
    assert!(hit(&r, said[0]).is_some() && hit(&r, said[1]).is_none(), "{r:#}");
    for q in UNRELATED {
        let r = search(q, "hybrid", None).await;
        assert!(results(&r).is_empty(), "{q}: {r:#}");
    }
    // A message sent months after the question, in the same conversation, is a new talk:
    // it draws nothing from it (found by a tester).
    let (st, r) = s
        .post(
            "/v1/conversations/later/messages",
            json!({ "user_id": "u", "messages": [
                { "role": "user", "content": "Which city for the sabbatical, Lisbon or Kyoto?",
                  "created_at": "2023-06-20T10:00:00Z" },
                { "role": "user", "content": "Anyway, I repaired my bike at the weekend.",
                  "created_at": "2024-03-05T10:00:00Z" }] }),
        )
        .await;
    assert_eq!(st, 202, "{r}");
    crate::helpers::drained(&s.as_client()).await;
    let r = search(q, "text", None).await;
    assert!(hit(&r, "Which city for the sabbatical, Lisbon or Kyoto?").is_some(), "{r:#}");
    assert!(hit(&r, "Anyway, I repaired my bike at the weekend.").is_none(), "{r:#}");
}

/// Chinese and Japanese write words without spaces: a word inside a sentence is found by
/// keyword (found by a tester: "北京" did not find "用户住在北京，喜欢吃饺子。", only the whole
/// clause did), in facts and in messages, and an unrelated query still finds nothing.
async fn words_inside_unspaced_sentences_are_found(backend: Backend) {
    let db = Db::new(backend).await;
    let mut cmd = Command::new(bin());
    cmd.arg("--data-dir").arg(db.dir()).args(db.store_args()).args(["--embedder", "builtin"]);
    cmd.env("ENGRAM_LOG", "warn");
    let s = Server::spawn(cmd, &[]);
    for f in ["用户住在北京，喜欢吃饺子。", "用户在上海工作。", "The user plays the cello."]
    {
        s.remember("wu", f).await;
    }
    append_turns(&s, "wu", &["昨日は東京で寿司を食べました。", "いいですね！"]).await;
    crate::helpers::drained(&s.as_client()).await;
    let search = |query: &'static str, source: &'static str| {
        let s = &s;
        async move {
            let body =
                json!({ "query": query, "user_id": "wu", "sources": [source], "explain": true });
            let (st, r) = s.post("/v1/search", body).await;
            assert_eq!(st, 200, "{r}");
            r
        }
    };
    let r = search("北京", "memories").await;
    assert_eq!(results(&r)[0]["memory"]["content"], "用户住在北京，喜欢吃饺子。", "{r:#}");
    assert_eq!(results(&r)[0]["explain"]["text_coverage"], json!(1.0), "{r:#}");
    let r = search("上海的天气怎么样", "memories").await;
    assert_eq!(results(&r)[0]["memory"]["content"], "用户在上海工作。", "{r:#}");
    let r = search("東京", "messages").await;
    assert_eq!(results(&r)[0]["message"]["content"], "昨日は東京で寿司を食べました。", "{r:#}");
    let r = search("量子色动力学", "memories").await;
    assert!(results(&r).is_empty(), "{r:#}");
}

/// A misspelt word finds what the word spelled right finds, with the built-in embedder (whose
/// vectors do not know the misspelling either), in facts and in messages; its keyword support
/// counts as a guess (0.7 of it, `explain.text_coverage`), an agent's view gets none, and an
/// unrelated query still finds nothing.
async fn a_misspelt_word_is_found(backend: Backend) {
    let db = Db::new(backend).await;
    let mut cmd = Command::new(bin());
    cmd.arg("--data-dir").arg(db.dir()).args(db.store_args()).args(["--embedder", "builtin"]);
    cmd.env("ENGRAM_LOG", "warn");
    let s = Server::spawn(cmd, &[]);
    for f in FACTS {
        s.remember("tu", f).await;
    }
    append_turns(&s, "tu", &["We finally found accommodation near the harbour.", "Great!"]).await;
    crate::helpers::drained(&s.as_client()).await;
    let search = |query: &'static str, source: &'static str| {
        let s = &s;
        async move {
            let body =
                json!({ "query": query, "user_id": "tu", "sources": [source], "explain": true });
            let (st, r) = s.post("/v1/search", body).await;
            assert_eq!(st, 200, "{r}");
            r
        }
    };
    for q in ["Where does the user work as a nurce?", "nurce", "Which orchestrra?"] {
        let r = search(q, "memories").await;
        let want = if q.contains("orch") { FACTS[2] } else { FACTS[0] };
        assert_eq!(results(&r)[0]["memory"]["content"], want, "{q}: {r:#}");
    }
    let r = search("nurce", "memories").await;
    let coverage = results(&r)[0]["explain"]["text_coverage"].as_f64().unwrap();
    assert!((coverage - 0.7).abs() < 1e-9, "a guess: {r:#}");
    assert!(results(&r)[0]["score"].as_f64().unwrap() >= 0.49 - 1e-9, "{r:#}");
    // An agent's view (its pool) gets no correction: the words would be read from every
    // pool of the user, and another agent's words must not change what it finds.
    let body = json!({ "query": "nurce", "user_id": "tu", "agent_id": "bot" });
    let (st, r) = s.post("/v1/search", body).await;
    assert_eq!(st, 200, "{r}");
    assert!(results(&r).is_empty(), "{r:#}");
    let r = search("accomodation", "messages").await;
    let first = &results(&r)[0]["message"]["content"];
    assert_eq!(first, "We finally found accommodation near the harbour.", "{r:#}");
    for q in UNRELATED {
        assert!(results(&search(q, "memories").await).is_empty(), "{q}");
    }
}

on_both_backends!(
    a_misspelt_word_is_found,
    words_inside_unspaced_sentences_are_found,
    a_long_fact_is_found_by_its_end,
    unrelated_queries_find_nothing_and_scores_mean_the_same_everywhere,
    the_builtin_embedder_abstains_too,
    an_answer_passes_on_the_question_before_it,
);
