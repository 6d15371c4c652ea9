//! The CLI as a user scripts it: remember / recall (memories, and transcripts by time and
//! mode) / list / forget on a data dir, the JSONL
//! export → import round trip (lossless, idempotent, all-or-nothing), API keys, bad input
//! refused with a clear message, and the CLI writing beside a running server on one dir.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::Stdio;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Db};

/// Run a command that must succeed; returns stdout.
#[track_caller]
fn ok(dir: &Db, args: &[&str]) -> String {
    let (success, out, err) = dir.cli(args);
    assert!(success, "engram {args:?} failed\nstdout: {out}\nstderr: {err}");
    out
}

/// Run a command that must succeed and print JSON.
#[track_caller]
fn ok_json(dir: &Db, args: &[&str]) -> Value {
    let out = ok(dir, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("engram {args:?}: not JSON ({e}): {out}"))
}

/// Run a command that must fail; returns stderr.
#[track_caller]
fn fails(dir: &Db, args: &[&str]) -> String {
    let (success, out, err) = dir.cli(args);
    assert!(!success, "engram {args:?} succeeded but should have failed\nstdout: {out}");
    err
}

/// `remember` in plain output: returns (decision, id).
#[track_caller]
fn remember(dir: &Db, args: &[&str]) -> (String, String) {
    let mut all = vec!["remember"];
    all.extend_from_slice(args);
    let out = ok(dir, &all);
    let line = out.trim();
    let (decision, id) =
        line.split_once(' ').unwrap_or_else(|| panic!("remember printed {line:?}, not 'ADD <id>'"));
    assert!(uuid::Uuid::parse_str(id).is_ok(), "remember printed a bad id: {line:?}");
    assert_eq!(out.lines().count(), 1, "remember printed more than one line: {out:?}");
    (decision.to_string(), id.to_string())
}

/// The whole store as JSON lines (the lossless export).
#[track_caller]
fn export(dir: &Db) -> String {
    ok(dir, &["export"])
}

/// The `(table, row)` lines of an export (header and end line checked and left out).
#[track_caller]
pub(crate) fn rows(export: &str) -> Vec<(String, Value)> {
    let lines: Vec<Value> =
        export.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.first().map(|h| &h["engram_export"]), Some(&json!(1)), "no header: {export}");
    let end = &lines.last().unwrap()["end"]["rows"];
    assert_eq!(end.as_u64(), Some(lines.len() as u64 - 2), "end line: {export}");
    lines[1..lines.len() - 1]
        .iter()
        .map(|l| (l["table"].as_str().unwrap().to_string(), l["row"].clone()))
        .collect()
}

/// The rows of one table.
pub(crate) fn table<'a>(rows: &'a [(String, Value)], name: &str) -> Vec<&'a Value> {
    rows.iter().filter(|(t, _)| t == name).map(|(_, r)| r).collect()
}

/// Memories of a `list --json` page.
fn listed(v: &Value) -> Vec<Value> {
    v["memories"].as_array().cloned().unwrap_or_default()
}

fn ids_of(list: &[Value]) -> Vec<String> {
    list.iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
}

/// Contents of a `recall --json`, best first (every result checked for its shape).
#[track_caller]
fn recalled(v: &Value) -> Vec<String> {
    let results = v["results"].as_array().unwrap_or_else(|| panic!("no results array: {v}"));
    let mut last = f64::INFINITY;
    results
        .iter()
        .map(|r| {
            assert_eq!(r["type"], "memory", "{r}");
            let score = r["score"].as_f64().unwrap_or_else(|| panic!("score not a number: {r}"));
            assert!(score <= last, "results not best first: {v}");
            last = score;
            r["memory"]["content"].as_str().unwrap().to_string()
        })
        .collect()
}

async fn remember_recall_list_and_forget_from_the_shell(backend: Backend) {
    let db = Db::new(backend).await;
    let d = &db;

    let (dec, home) = remember(
        d,
        &[
            "The user lives in Bengaluru.",
            "--user",
            "alice",
            "--category",
            "fact",
            "--importance",
            "8",
        ],
    );
    assert_eq!(dec, "ADD");
    // The harness names both a data dir and, on PostgreSQL, a database URL: the command says
    // which one it used.
    let (_, _, err) = d.cli(&["list", "--user", "alice"]);
    let warned = err.contains("the data dir") && err.contains("is not used");
    assert_eq!(warned, db.url().is_some(), "stderr: {err}");
    let (_, violin) = remember(
        d,
        &[
            "The user's daughter Maya plays the violin.",
            "--user",
            "alice",
            "--category",
            "relationship",
        ],
    );
    let (_, editor) =
        remember(d, &["The user prefers dark mode in every code editor.", "--user", "alice"]);
    let (_, lisbon) = remember(d, &["The user lives in Lisbon.", "--user", "bob"]);
    // A restated fact is confirmed, not duplicated: same id, NONE.
    assert_eq!(
        remember(d, &["the user lives in Bengaluru", "--user", "alice"]),
        ("NONE".to_string(), home.clone())
    );
    // --json prints the decision and the stored memory, as the REST API does.
    let j = ok_json(
        d,
        &[
            "remember",
            "The user's timezone is Asia/Kolkata.",
            "--user",
            "alice",
            "--kind",
            "profile",
            "--key",
            "timezone",
            "--importance",
            "9",
            "--json",
        ],
    );
    assert_eq!(j["decision"], "ADD", "{j}");
    assert_eq!(j["memory"]["kind"], "profile");
    assert_eq!(j["memory"]["key"], "timezone");
    assert_eq!(j["memory"]["importance"], 9);
    assert_eq!(j["memory"]["user_id"], "alice");
    assert_eq!(j["memory"]["source"]["kind"], "manual");
    let tz = j["memory"]["id"].as_str().unwrap().to_string();

    // Recall finds a fact by paraphrase, best first, only the user's own.
    let r = ok_json(d, &["recall", "where does the user live?", "--user", "alice", "--json"]);
    let hits = recalled(&r);
    assert_eq!(hits.first().map(String::as_str), Some("The user lives in Bengaluru."), "{r}");
    assert!(!hits.iter().any(|c| c.contains("Lisbon")), "bob's fact recalled for alice: {hits:?}");
    let top = &r["results"][0];
    let keys: BTreeSet<&str> = top.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["type", "score", "memory"]), "{top}");
    assert_eq!(top["memory"]["id"], home.as_str());
    assert_eq!(top["memory"]["category"], "fact");
    assert_eq!(top["memory"]["importance"], 8);
    let r = ok_json(d, &["recall", "violin", "--user", "alice", "--limit", "1", "--json"]);
    assert_eq!(recalled(&r), ["The user's daughter Maya plays the violin."]);
    // --explain shows the score components, in JSON and in plain output.
    let r = ok_json(d, &["recall", "violin lessons", "--user", "alice", "--explain", "--json"]);
    let e = &r["results"][0]["explain"];
    assert_eq!(e["vector_rank"], 1, "{r}");
    assert!(e["rrf"].as_f64().is_some_and(|x| x > 0.0), "{e}");
    assert!(
        (e["score"].as_f64().unwrap() - r["results"][0]["score"].as_f64().unwrap()).abs() < 1e-9,
        "{r}"
    );
    let plain = ok(d, &["recall", "violin", "--user", "alice", "--explain"]);
    let first = plain.lines().next().unwrap_or_default();
    assert!(first.contains(&violin) && first.contains("violin"), "{plain}");
    assert!(plain.contains("\"vector_rank\""), "plain --explain shows no components: {plain}");
    // Nothing matches for a user with no memories.
    assert_eq!(ok(d, &["recall", "violin", "--user", "nobody"]).trim(), "nothing relevant found");

    // List: every active memory, newest first; --limit/--cursor pages through all of them.
    let all = listed(&ok_json(d, &["list", "--json"]));
    assert_eq!(ids_of(&all), [tz.as_str(), &lisbon, &editor, &violin, &home]);
    let alice = listed(&ok_json(d, &["list", "--user", "alice", "--json"]));
    assert_eq!(alice.len(), 4);
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let mut args = vec!["list", "--limit", "2", "--json"];
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let page = ok_json(d, &args);
        let mems = listed(&page);
        assert!(mems.len() <= 2, "page over --limit: {page}");
        paged.extend(ids_of(&mems));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, ids_of(&all), "pages do not add up to the full list");
    // Plain output tells the user how to get the next page.
    let plain = ok(d, &["list", "--limit", "2"]);
    let next = plain.lines().last().unwrap_or_default();
    let c = next.strip_prefix("next page: --cursor ").unwrap_or_else(|| panic!("{plain}"));
    assert_eq!(
        ids_of(&listed(&ok_json(d, &["list", "--limit", "2", "--cursor", c, "--json"]))),
        paged[2..4]
    );

    // Forget: gone from recall and list, still listed with --include-superseded.
    assert_eq!(ok(d, &["forget", &violin]).trim(), format!("forgotten {violin}"));
    let r = ok_json(d, &["recall", "violin", "--user", "alice", "--json"]);
    assert!(!recalled(&r).iter().any(|c| c.contains("violin")), "forgotten fact recalled: {r}");
    let active = ids_of(&listed(&ok_json(d, &["list", "--user", "alice", "--json"])));
    assert!(!active.contains(&violin), "{active:?}");
    let with_old =
        listed(&ok_json(d, &["list", "--user", "alice", "--include-superseded", "--json"]));
    let old = with_old.iter().find(|m| m["id"] == violin.as_str()).expect("kept in history");
    assert!(old["superseded_at"].is_string(), "{old}");
    assert!(old["superseded_by"].is_null(), "forget has no successor: {old}");
    assert!(ok(d, &["list", "--include-superseded"]).contains("(superseded)"));
    // Forgetting it again is refused.
    let err = fails(d, &["forget", &violin]);
    assert!(err.contains("already"), "{err}");

    // Purge: the row is gone even from history; --json reports it.
    let j = ok_json(d, &["forget", &editor, "--purge", "--json"]);
    assert_eq!(j, json!({ "id": editor, "status": "purged" }));
    let with_old = ids_of(&listed(&ok_json(d, &["list", "--include-superseded", "--json"])));
    assert!(!with_old.contains(&editor), "purged row still listed: {with_old:?}");
    assert!(!export(d).contains(&editor), "purged row still exported");
    let err = fails(d, &["forget", &editor]);
    assert!(err.contains("not found"), "{err}");
    // A forgotten row can still be purged.
    ok(d, &["forget", &violin, "--purge"]);
    assert!(!export(d).contains(&violin));
}

async fn export_then_import_into_a_fresh_dir_is_lossless_and_idempotent(backend: Backend) {
    let a = Db::new(backend).await;
    let da = &a;

    // A history made with the CLI ...
    let (_, home) = remember(
        da,
        &[
            "The user lives in Bengaluru.",
            "--user",
            "alice",
            "--category",
            "fact",
            "--importance",
            "8",
        ],
    );
    remember(da, &["the user lives in Bengaluru", "--user", "alice"]); // confirmed
    let (_, violin) =
        remember(da, &["The user's daughter Maya plays the violin.", "--user", "alice"]);
    let (_, editor) =
        remember(da, &["The user prefers dark mode in every code editor.", "--user", "alice"]);
    let (_, tz) = remember(
        da,
        &[
            "The user's timezone is Asia/Kolkata.",
            "--user",
            "alice",
            "--kind",
            "profile",
            "--key",
            "timezone",
        ],
    );
    let (_, gym) = remember(da, &["The user goes to the gym on Mondays.", "--user", "bob"]);
    remember(da, &["The user lives in Lisbon.", "--user", "bob"]);

    // ... and with the REST API on a server over the same dir.
    let (old_id, new_id, rich) = {
        let s = da.serve(&[]);
        let (st, edited) = s
            .req(
                "PATCH",
                &format!("/v1/memories/{editor}"),
                Some(json!({ "content": "The user prefers light mode in every code editor.", "importance": 6 })),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{edited}");
        let new_id = edited["id"].as_str().unwrap().to_string();
        let (st, b) = s
            .post(
                "/v1/memories",
                json!({
                    "content": "The user is planning a trip to Kyoto in April.",
                    "user_id": "alice",
                    "agent_id": "planner",
                    "category": "event",
                    "importance": 7,
                    "metadata": { "origin": "onboarding", "tags": ["travel", "japan"], "n": 3 },
                    "source_conversation_id": "conv-7",
                    "observed_at": "2024-03-01T10:00:00Z",
                    "expires_at": "2099-01-01T00:00:00Z"
                }),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
        let rich = b["memory"]["id"].as_str().unwrap().to_string();
        for (id, v) in [(&home, 1), (&home, 1), (&violin, -1), (&tz, 1)] {
            let (st, b) = s.post(&format!("/v1/memories/{id}/rating"), json!({ "value": v })).await;
            assert_eq!(st, StatusCode::OK, "{b}");
        }
        // Searches bump access counts.
        assert_eq!(
            s.search("alice", "where does the user live?").await[0],
            "The user lives in Bengaluru."
        );
        s.search("alice", "Kyoto trip").await;
        let (st, b) = s.req("DELETE", &format!("/v1/memories/{violin}"), None).await;
        assert_eq!(st, StatusCode::OK, "{b}");
        (editor.clone(), new_id, rich)
    };
    // A forget through the CLI too.
    ok(da, &["forget", &gym]);

    let exported = export(da);
    let all = rows(&exported);
    let memories = table(&all, "memories");
    assert_eq!(memories.len(), 8, "{exported}");
    let row = |id: &str| -> &Value {
        memories.iter().find(|m| m["id"] == id).unwrap_or_else(|| panic!("{id} not exported"))
    };
    // The export carries the history the user made.
    assert_eq!(row(&old_id)["superseded_by"], new_id.as_str());
    assert!(row(&old_id)["superseded_at"].is_string());
    assert_eq!(row(&new_id)["importance"], 6);
    assert_eq!(row(&home)["rating"], 2);
    assert_eq!(row(&home)["mention_count"], 2);
    assert!(row(&home)["access_count"].as_i64().unwrap() >= 1);
    assert!(row(&home)["last_accessed_at"].is_string());
    assert!(row(&home)["embedding"].is_string(), "vectors are exported");
    assert_eq!(row(&violin)["rating"], -1);
    assert!(row(&violin)["superseded_at"].is_string() && row(&violin)["superseded_by"].is_null());
    assert!(row(&gym)["superseded_at"].is_string());
    assert_eq!(row(&tz)["key"], "timezone");
    assert_eq!(
        row(&rich)["metadata"],
        json!({ "origin": "onboarding", "tags": ["travel", "japan"], "n": 3 })
    );
    assert_eq!(row(&rich)["observed_at"], "2024-03-01T10:00:00Z");
    assert_eq!(row(&rich)["expires_at"], "2099-01-01T00:00:00Z");
    assert_eq!(row(&rich)["source_conversation_id"], "conv-7");
    assert_eq!(row(&rich)["agent_id"], "planner");
    let events: BTreeSet<String> = table(&all, "memory_events")
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    for kind in ["created", "confirmed", "superseded", "forgotten", "rated"] {
        assert!(events.contains(kind), "no '{kind}' event exported: {events:?}");
    }
    // --out writes the same bytes and says how many rows.
    let file = a.dir().join("export.jsonl");
    let (success, out, err) = da.cli(&["export", "--out", file.to_str().unwrap()]);
    assert!(success, "{err}");
    assert!(out.is_empty(), "export --out also printed to stdout: {out}");
    assert!(err.contains(&format!("exported {} rows", all.len())), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), exported);
    // --user exports one user.
    let alice = rows(&ok(da, &["export", "--user", "alice"]));
    assert_eq!(table(&alice, "memories").len(), 6);
    assert!(alice.iter().all(|(_, r)| r["user_id"] == "alice"), "{alice:?}");

    // Import into a fresh dir, export again: byte-identical.
    let b = Db::new(backend).await;
    let db = &b;
    let out = ok(db, &["import", file.to_str().unwrap()]);
    assert!(
        out.trim().starts_with(&format!("imported {} rows (", all.len()))
            && out.trim().ends_with("skipped 0 already present"),
        "{out}"
    );
    assert_eq!(export(db), exported, "export → import → export is not lossless");

    // The same file again skips everything and changes nothing (also from stdin).
    let j = ok_json(db, &["import", file.to_str().unwrap(), "--json"]);
    assert_eq!(
        (j["imported"].as_u64(), j["skipped"].as_u64()),
        (Some(0), Some(all.len() as u64)),
        "{j}"
    );
    let mut child = db
        .engram()
        .args(["import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(exported.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.trim()
            .starts_with(&format!("imported 0 rows, skipped {} already present (", all.len())),
        "{said}"
    );
    assert_eq!(export(db), exported, "a second import changed the store");

    // An import interrupted after the memories but before their history: running it again
    // completes the history (the events are not skipped with their memories).
    let c = Db::new(backend).await;
    let partial = c.dir().join("partial.jsonl");
    let kept: Vec<&str> =
        exported.lines().filter(|l| !l.contains("\"table\":\"memory_events\"")).collect();
    let rows_kept = kept.len() - 2;
    assert!(rows_kept < all.len(), "no event lines to leave out");
    let mut without_events: String =
        kept[..kept.len() - 1].iter().map(|l| format!("{l}\n")).collect();
    without_events.push_str(&format!("{}\n", json!({ "end": { "rows": rows_kept } })));
    std::fs::write(&partial, without_events).unwrap();
    ok(&c, &["import", partial.to_str().unwrap()]);
    let j = ok_json(&c, &["import", file.to_str().unwrap(), "--json"]);
    let events = table(&all, "memory_events").len() as u64;
    assert_eq!(j["imported"].as_u64(), Some(events), "{j}");
    assert_eq!(export(&c), exported, "the re-run did not complete the history");

    // The imported store works: history and supersession hold, recall finds by paraphrase.
    let listed_b = listed(&ok_json(db, &["list", "--user", "alice", "--json"]));
    let active: BTreeSet<String> = ids_of(&listed_b).into_iter().collect();
    assert_eq!(active, BTreeSet::from([home.clone(), new_id.clone(), tz.clone(), rich.clone()]));
    let r = ok_json(db, &["recall", "where does the user live?", "--user", "alice", "--json"]);
    assert_eq!(recalled(&r)[0], "The user lives in Bengaluru.");
    let r =
        ok_json(db, &["recall", "light or dark theme in the editor", "--user", "alice", "--json"]);
    let hits = recalled(&r);
    assert_eq!(hits[0], "The user prefers light mode in every code editor.");
    assert!(!hits.iter().any(|c| c.contains("dark mode")), "superseded row recalled: {hits:?}");
}

/// A paraphrase must not lose to a fact that shares only a function word with the query.
/// Here "is" is in one fact of four, so the full-text side keeps it as a term and ranks the
/// colour fact first there; fused with an equal weight, that beat the right answer.
async fn recall_is_not_swayed_by_a_function_word_the_query_shares_with_a_fact(backend: Backend) {
    let db = Db::new(backend).await;
    let d = &db;
    for f in [
        "The user lives in Bengaluru.",
        "The user's favourite colour is teal.",
        "The user's daughter Maya plays the violin.",
        "The user prefers dark mode in every code editor.",
    ] {
        remember(d, &[f, "--user", "alice"]);
    }
    let r = ok_json(d, &["recall", "which city is her home?", "--user", "alice", "--json"]);
    assert_eq!(recalled(&r)[0], "The user lives in Bengaluru.", "{r}");
}

/// `engram recall … | head`: the reader goes away before the output is written; the command
/// ends quietly and successfully instead of panicking on the broken pipe.
async fn output_into_a_closed_pipe_ends_quietly(backend: Backend) {
    let db = Db::new(backend).await;
    remember(&db, &["The user lives in Bengaluru.", "--user", "alice"]);
    for args in
        [&["recall", "where does alice live", "--user", "alice"][..], &["list", "--user", "alice"]]
    {
        let mut child =
            db.engram().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is written
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "engram {args:?} panicked: {err}");
        assert!(o.status.success(), "engram {args:?}: {:?} {err}", o.status);
    }
}

/// `engram <args>` on `db` with `--embedder <embedder>` instead of the test default.
#[track_caller]
fn ok_with(db: &Db, embedder: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::helpers::bin())
        .arg("--data-dir")
        .arg(db.dir())
        .args(db.store_args())
        .args(["--embedder", embedder])
        .args(args)
        .env("ENGRAM_LOG", "warn")
        .output_bounded()
        .expect("run engram");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "engram {args:?} failed\nstdout: {stdout}\nstderr: {stderr}");
    stdout.into_owned()
}

/// The embedding model of every memory row of `db`'s export.
fn memory_models(db: &Db) -> Vec<String> {
    let rows = rows(&export(db));
    table(&rows, "memories")
        .iter()
        .map(|m| m["embedding_model"].as_str().expect("embedded").to_string())
        .collect()
}

/// Issue 14: `--embedder local:` gives a new store the int8 graph (twice the background
/// throughput, the same LoCoMo recall; on a CPU with VNNI), and keeps a store of the exact model's vectors on the
/// exact model: an existing deployment never has its vectors changed under it.
async fn local_picks_int8_for_a_new_store_and_keeps_an_exact_store_exact(backend: Backend) {
    let dir = engram_providers::testing::minilm_dir();
    assert!(engram_providers::int8_available(&dir), "scripts/fetch-onnx.sh makes the int8 graph");
    let (auto, exact) =
        (format!("local:{}", dir.display()), format!("local-exact:{}", dir.display()));

    let new = Db::new(backend).await;
    ok_with(&new, &auto, &["remember", "The user keeps bees in the garden.", "--user", "u"]);
    let models = memory_models(&new);
    // int8 where it was measured to keep quality (a CPU with VNNI, as this project's).
    let int8 = engram_providers::int8_keeps_quality();
    assert!(models.len() == 1 && models[0].ends_with("-int8") == int8, "{models:?}");

    let old = Db::new(backend).await;
    ok_with(&old, &exact, &["remember", "The user keeps bees in the garden.", "--user", "u"]);
    ok_with(&old, &auto, &["remember", "The user's sister lives in Oslo.", "--user", "u"]);
    let models = memory_models(&old);
    assert_eq!(models.len(), 2);
    assert!(models[0] == models[1] && !models[0].ends_with("-int8"), "{models:?}");
    let out = ok_with(&old, &auto, &["recall", "where does her sister live", "--user", "u"]);
    assert!(out.contains("Oslo"), "{out}");
    // Asked for by name, int8 on the exact store is refused until `engram reembed`.
    let int8 = format!("local-int8:{}", dir.display());
    let o = std::process::Command::new(crate::helpers::bin())
        .arg("--data-dir")
        .arg(old.dir())
        .args(old.store_args())
        .args(["--embedder", &int8, "recall", "sister", "--user", "u"])
        .output_bounded()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("reembed"), "{err}");
}

async fn a_malformed_import_line_is_named_and_nothing_is_imported(backend: Backend) {
    let src = Db::new(backend).await;
    remember(&src, &["The user lives in Bengaluru.", "--user", "alice"]);
    remember(&src, &["The user owns a cat named Miso.", "--user", "alice"]);
    let good = export(&src);
    let good: Vec<&str> = good.lines().collect();
    // header, two memories, their two `created` events, end.
    assert_eq!(good.len(), 6, "{good:?}");
    let (header, m1, m2, end) = (good[0], good[1], good[2], good[5]);
    let events = good[3..5].join("\n");
    let bad_category = m2.replace(r#""category":"general""#, r#""category":"hobby""#);
    assert_ne!(bad_category, m2);
    let bad_id = m2.replacen(r#""id":""#, r#""id":"x"#, 1);
    let bad_vector = m2.replacen(r#""embedding":""#, r#""embedding":"!!"#, 1);
    let unknown_table = m2.replace(r#""table":"memories""#, r#""table":"secrets""#);
    let extra_column = m2.replace(r#""rating":0"#, r#""rating":0,"admin":true"#);
    let wrong_type = m2.replace(r#""importance":5"#, r#""importance":"high""#);
    let other_tenant_key = r#"{"table":"api_keys","row":{"tenant_id":"default","id":"key_x","role":"root","agent_id":null,"user_id":null,"prefix":"engram_x","secret_hash":"00","created_at":"2026-01-01T00:00:00Z","revoked_at":null}}"#;
    let cases: Vec<(String, &str, &[&str])> = vec![
        (format!("{header}\n{m1}\n{{\"table\":\"memories\",\"row\":"), "line 3", &["JSON"]),
        (format!("{header}\nthis is not json\n{m1}\n{end}"), "line 2", &[]),
        (
            format!("{header}\n{m1}\n{bad_category}\n{events}\n{end}"),
            "line 3",
            &["memories.category", "hobby"],
        ),
        (format!("{header}\n\n{m1}\n{bad_id}\n{events}\n{end}"), "line 4", &["memories.id"]),
        (
            format!("{header}\n{m1}\n{bad_vector}\n{events}\n{end}"),
            "line 3",
            &["memories.embedding"],
        ),
        (format!("{header}\n{m1}\n{unknown_table}\n{events}\n{end}"), "line 3", &["secrets"]),
        (
            format!("{header}\n{m1}\n{extra_column}\n{events}\n{end}"),
            "line 3",
            &["memories.admin", "unknown column"],
        ),
        (
            format!("{header}\n{m1}\n{wrong_type}\n{events}\n{end}"),
            "line 3",
            &["memories.importance"],
        ),
        (
            format!("{header}\n{other_tenant_key}\n{m1}\n{end}"),
            "line 2",
            &["api_keys.role", "root"],
        ),
        (format!("{m1}\n{m2}\n{end}"), "line 1", &["header"]),
        (format!("{header}\n[1,2,3]\n{end}"), "line 2", &[]),
        // Cut short: no end line, or an end line that counts other rows.
        (format!("{header}\n{m1}\n{m2}\n{events}"), "", &["cut short"]),
        (format!("{header}\n{m1}\n{events}\n{end}"), "", &["announces 4 rows but holds 3"]),
        (format!("{header}\n{m1}\n{m2}\n{events}\n{end}\n{m1}"), "line 7", &["after the end line"]),
        (
            format!(
                "{}\n{m1}\n{end}",
                header.replace(r#""engram_export":1"#, r#""engram_export":9"#)
            ),
            "line 1",
            &["format 9"],
        ),
    ];
    for (text, line, words) in cases {
        let dst = Db::new(backend).await;
        let file = dst.dir().join("in.jsonl");
        std::fs::write(&file, &text).unwrap();
        let (success, out, err) = dst.cli(&["import", file.to_str().unwrap()]);
        assert!(!success, "import of a bad file succeeded: {out}\n--- file:\n{text}");
        assert!(err.contains(line), "error does not name {line}: {err}\n--- file:\n{text}");
        for w in words {
            assert!(err.contains(w), "error does not mention {w}: {err}");
        }
        assert!(!out.contains("imported"), "{out}");
        // With --json, the refusal carries a code of its own (it was the generic "error").
        let (_, _, err) = dst.cli(&["import", file.to_str().unwrap(), "--json"]);
        let e: Value = serde_json::from_str(err.trim().lines().last().unwrap()).unwrap();
        let code = e["error"]["code"].as_str().unwrap();
        assert!(matches!(code, "invalid_input" | "unprocessable"), "{e}");
        // No store at all (SQLite: a refused file creates none), or an empty one.
        let created = dst.url().is_some() || dst.dir().join("engram.db").exists();
        assert!(
            !created || rows(&export(&dst)).is_empty(),
            "a failed import stored rows; error was: {err}"
        );
    }
    // The good file imports fine.
    let dst = Db::new(backend).await;
    let file = dst.dir().join("in.jsonl");
    std::fs::write(&file, good.join("\n")).unwrap();
    assert_eq!(
        ok(&dst, &["import", file.to_str().unwrap()]).trim(),
        "imported 4 rows (memories 2, memory_events 2), skipped 0 already present"
    );
    // An export of an earlier engram (memory lines only) is still read, and re-embedded.
    let old = r#"{"type":"memory","memory":{"id":"01a20297-0000-7000-8000-000000000001","user_id":"bob","agent_id":null,"pool":null,"kind":"knowledge","key":null,"category":"fact","importance":5,"rating":0,"content":"The user plays chess on Sundays.","source":{"kind":"manual","conversation_id":null,"message_ids":[]},"observed_at":"2025-01-01T00:00:00Z","created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:00:00Z","last_accessed_at":null,"access_count":0,"mention_count":1,"expires_at":null,"superseded_at":null,"superseded_by":null,"metadata":{},"embedding_model":null},"events":[]}"#;
    std::fs::write(&file, old).unwrap();
    let (success, out, err) = dst.cli(&["import", file.to_str().unwrap()]);
    assert!(success, "{err}");
    assert_eq!(out.trim(), "imported 1 memories, skipped 0 already present");
    let r = ok_json(&dst, &["recall", "which board game on weekends", "--user", "bob", "--json"]);
    assert_eq!(recalled(&r)[0], "The user plays chess on Sundays.");
}

async fn keys_are_printed_once_listed_without_secret_and_revocable(backend: Backend) {
    let db = Db::new(backend).await;
    let d = &db;
    let (success, out, err) = d.cli(&["keys", "create", "--tenant", "t1", "--role", "admin"]);
    assert!(success, "{err}");
    let secret = out.trim().to_string();
    assert_eq!(out.lines().count(), 1, "the secret should be the only stdout line: {out}");
    assert!(secret.starts_with("engram_") && secret.len() >= 32, "{secret}");
    assert!(err.contains("not shown again"), "{err}");
    let key_id = err
        .split_whitespace()
        .find(|w| w.starts_with("key_"))
        .unwrap_or_else(|| panic!("no key id on stderr: {err}"))
        .to_string();

    let listing = ok(d, &["keys", "list"]);
    let line = listing.lines().find(|l| l.contains(&key_id)).unwrap_or_else(|| panic!("{listing}"));
    assert!(line.contains("t1") && line.contains("admin") && line.contains("active"), "{line}");
    assert!(!listing.contains(&secret), "keys list shows the secret: {listing}");
    let j = ok_json(d, &["keys", "list", "--json"]);
    assert!(!j.to_string().contains(&secret), "keys list --json shows the secret: {j}");
    let k = j.as_array().unwrap().iter().find(|k| k["id"] == key_id.as_str()).unwrap();
    assert_eq!((k["tenant"].as_str(), k["role"].as_str()), (Some("t1"), Some("admin")), "{k}");
    assert!(k["revoked_at"].is_null());
    // The secret is not derivable from what is listed: the listed prefix is short.
    assert!(k["prefix"].as_str().unwrap().len() < secret.len() / 2, "{k}");

    // Bound keys: agent and user.
    let j = ok_json(
        d,
        &["keys", "create", "--tenant", "t1", "--role", "user", "--user", "u9", "--json"],
    );
    assert!(j["key"].as_str().unwrap().starts_with("engram_"), "{j}");
    assert_eq!(
        (&j["role"], &j["bound_to"], &j["tenant"]),
        (&json!("user"), &json!("u9"), &json!("t1"))
    );
    let listing = ok_json(d, &["keys", "list", "--tenant", "t1", "--json"]);
    assert!(
        listing.as_array().unwrap().iter().any(|k| k["role"] == "user" && k["bound_to"] == "u9")
    );
    assert!(
        ok_json(d, &["keys", "list", "--tenant", "t2", "--json"]).as_array().unwrap().is_empty()
    );

    // The key works on a server over the dir; no key, or a wrong one, does not.
    let s = d.serve(&[]);
    let k1 = s.with_key(&secret);
    let (st, b) = k1
        .post("/v1/memories", json!({ "content": "The user likes jazz.", "user_id": "u1" }))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    assert_eq!(s.anon().get("/v1/memories").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(s.with_key("engram_wrong").get("/v1/memories").await.0, StatusCode::UNAUTHORIZED);
    // The memory landed in tenant t1, not in the default tenant.
    assert_eq!(listed(&ok_json(d, &["list", "--tenant", "t1", "--json"])).len(), 1);
    assert!(listed(&ok_json(d, &["list", "--json"])).is_empty());

    // Revoke: listed as revoked, and the server refuses it.
    assert_eq!(ok(d, &["keys", "revoke", &key_id]).trim(), format!("revoked {key_id}"));
    let listing = ok(d, &["keys", "list"]);
    let line = listing.lines().find(|l| l.contains(&key_id)).unwrap();
    assert!(line.contains("revoked"), "{line}");
    let (st, b) = k1.get("/v1/memories").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "revoked key still accepted: {b}");
    let err = fails(d, &["keys", "revoke", &key_id]);
    assert!(err.contains("not found"), "revoking twice: {err}");
}

async fn bad_cli_input_fails_with_a_clear_message_and_stores_nothing(backend: Backend) {
    let db = Db::new(backend).await;
    let d = &db;
    let (_, seed) = remember(d, &["The user lives in Bengaluru.", "--user", "alice"]);
    ok(d, &["keys", "create", "--tenant", "t1", "--role", "admin"]);
    let unknown = "01a20297-0000-7000-8000-000000000000";
    let long = "x".repeat(65);
    let before = (export(d), ok(d, &["keys", "list", "--json"]));
    if backend == Backend::Sqlite {
        // A mistyped --data-dir is a new store; it is said on stderr, once (stdout may be
        // `engram mcp`'s protocol).
        let typo = d.dir().join("typo");
        for first in [true, false] {
            let out =
                crate::helpers::engram(&typo).arg("mcp").stdin(Stdio::null()).output_bounded();
            let out = out.expect("run engram mcp");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.contains("created a new, empty store in"), first, "{err}");
            assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
        }
    }
    // With --json, the failure is JSON too: its code and message.
    let err = fails(d, &["forget", unknown, "--json"]);
    let last = err.trim().lines().last().unwrap_or_default();
    let e: Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("not JSON: {err}"));
    assert_eq!(e["error"]["code"], "not_found", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not found"), "{e}");
    assert!(!e["error"]["message"].as_str().unwrap().ends_with("(not_found)"), "{e}");
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (
            vec!["remember", "The user likes tea.", "--user", "alice", "--importance", "11"],
            &["importance must be 1 to 10"],
        ),
        (
            vec!["remember", "The user likes tea.", "--user", "alice", "--importance", "0"],
            &["importance must be 1 to 10"],
        ),
        (
            vec!["remember", "The user likes tea.", "--user", "alice", "--importance", "high"],
            &["high", "importance"],
        ),
        (
            vec!["remember", "The user likes tea.", "--user", "alice", "--category", "hobby"],
            &["unknown category 'hobby'", "preference"],
        ),
        (
            vec!["remember", "The user likes tea.", "--user", "alice", "--kind", "secret"],
            &["unknown kind 'secret'"],
        ),
        (vec!["remember", "The user likes tea.", "--user", "alice", "--kind", "profile"], &["key"]),
        (vec!["remember", "The user likes tea.", "--user", "alice", "--key", "drink"], &["key"]),
        (vec!["remember", "", "--user", "alice"], &["content must not be empty"]),
        (vec!["remember", "  \t ", "--user", "alice"], &["content must not be empty"]),
        (
            vec!["--max-content-bytes", "64", "remember", &long, "--user", "alice"],
            &["65 bytes", "64"],
        ),
        (vec!["remember", "The user likes tea.", "--user", ""], &["user_id"]),
        (vec!["remember", "The user likes tea."], &["--user"]),
        (vec!["forget", "not-a-uuid"], &["not-a-uuid", "not a valid memory id"]),
        (vec!["forget", unknown], &["not found"]),
        (vec!["forget", unknown, "--purge"], &["not found"]),
        (vec!["recall", "  ", "--user", "alice"], &["query must not be empty"]),
        (vec!["list", "--limit", "0"], &["limit must be 1 to"]),
        (vec!["list", "--limit", "10000"], &["limit must be 1 to"]),
        (vec!["list", "--cursor", "bogus"], &["--cursor 'bogus' is not a cursor"]),
        (
            vec!["import", "/nonexistent/engram-export.jsonl"],
            &["cannot open", "/nonexistent/engram-export.jsonl"],
        ),
        (vec!["keys", "create", "--tenant", "t1", "--role", "agent"], &["--agent"]),
        (vec!["keys", "create", "--tenant", "t1", "--role", "user"], &["--user"]),
        (
            vec!["keys", "create", "--tenant", "t1", "--role", "admin", "--agent", "a1"],
            &["admin key"],
        ),
        (vec!["keys", "create", "--tenant", "t1", "--role", "root"], &["root"]),
        (vec!["keys", "create", "--role", "admin"], &["--tenant"]),
        (vec!["keys", "revoke", "key_000000000000"], &["not found"]),
        // `engram worker` takes no listener flags (found by a session: they were accepted
        // and ignored); `--no-workers` printed "engram worker running" and ran the workers.
        (vec!["worker", "--no-workers"], &["--no-workers"]),
        (vec!["worker", "--addr", "127.0.0.1:1"], &["--addr"]),
        (vec!["worker", "--rate-limit", "5"], &["--rate-limit"]),
        (vec!["worker", "--proxy-openai-url", "http://x"], &["--proxy-openai-url"]),
    ];
    for (args, words) in &cases {
        let (success, out, err) = d.cli(args);
        assert!(!success, "engram {args:?} succeeded: {out}");
        assert!(out.trim().is_empty(), "engram {args:?} printed to stdout on failure: {out}");
        assert!(err.contains("error"), "engram {args:?}: no error on stderr: {err}");
        for w in *words {
            assert!(err.contains(w), "engram {args:?}: stderr does not mention {w:?}: {err}");
        }
        let after = (export(d), ok(d, &["keys", "list", "--json"]));
        assert_eq!(after, before, "engram {args:?} changed the store");
    }
    assert!(before.0.contains(&seed));
    // The 64-byte limit is a limit, not an off-by-one: 64 bytes are accepted.
    let exact = "y".repeat(64);
    let (dec, _) = remember(d, &["--max-content-bytes", "64", &exact, "--user", "alice"]);
    assert_eq!(dec, "ADD");
}

/// A profile key holds one value: an import into a store that already holds another value
/// under the key keeps the newer one active and the older as its history (found by a
/// session: the restore left two active time zones).
async fn an_import_never_leaves_two_values_under_one_profile_key(backend: Backend) {
    let (a, b) = (Db::new(backend).await, Db::new(backend).await);
    let tz = |d: &Db, zone: &str| {
        let fact = format!("The user's timezone is {zone}.");
        let args = ["--user", "alice", "--kind", "profile", "--key", "timezone"];
        remember(d, &[&[fact.as_str()][..], &args[..]].concat()).1
    };
    let import = |d: &Db, export: &str, name: &str| {
        let file = d.dir().join(name);
        std::fs::write(&file, export).unwrap();
        ok(d, &["import", file.to_str().unwrap()])
    };
    // (content, superseded_by) of alice's time zones in `d`, oldest first.
    let zones = |d: &Db| {
        let rows = rows(&export(d));
        let mut zones: Vec<(String, String, Value)> = table(&rows, "memories")
            .into_iter()
            .filter(|m| m["key"] == "timezone")
            .map(|m| {
                let id = m["id"].as_str().unwrap().to_string();
                (m["created_at"].as_str().unwrap().to_string(), id, m.clone())
            })
            .collect();
        zones.sort_by(|x, y| x.0.cmp(&y.0));
        zones.into_iter().map(|z| (z.1, z.2["superseded_by"].clone())).collect::<Vec<_>>()
    };
    let kolkata = tz(&a, "Asia/Kolkata");
    let older = export(&a);
    let lisbon = tz(&b, "Europe/Lisbon");
    // The import brings an older value: it becomes the history of the stored one.
    import(&b, &older, "older.jsonl");
    assert_eq!(zones(&b), [(kolkata.clone(), json!(lisbon)), (lisbon.clone(), Value::Null)]);
    // A newer one: the stored value becomes its history.
    let chicago = tz(&a, "America/Chicago");
    let newer = export(&a);
    import(&b, &newer, "newer.jsonl");
    assert_eq!(
        zones(&b),
        [
            (kolkata.clone(), json!(lisbon)),
            (lisbon.clone(), json!(chicago)),
            (chicago.clone(), Value::Null)
        ]
    );
    // Again: nothing changes; the CLI's search reads the one value.
    import(&b, &newer, "again.jsonl");
    assert_eq!(zones(&b).len(), 3);
    assert_eq!(zones(&b)[2], (chicago.clone(), Value::Null));
    let listed = listed(&ok_json(&b, &["list", "--user", "alice", "--json"]));
    let active: Vec<&str> = listed.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(active, ["The user's timezone is America/Chicago."]);
    // An earlier engram's export (memory lines) follows the same rule.
    let paris = "01a20297-0000-7000-8000-000000000009";
    let line = r#"{"type":"memory","memory":{"id":"01a20297-0000-7000-8000-000000000009","user_id":"alice","agent_id":null,"pool":null,"kind":"profile","key":"timezone","category":"fact","importance":5,"rating":0,"content":"The user's timezone is Europe/Paris.","source":{"kind":"manual","conversation_id":null,"message_ids":[]},"observed_at":"2025-01-01T00:00:00Z","created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:00:00Z","last_accessed_at":null,"access_count":0,"mention_count":1,"expires_at":null,"superseded_at":null,"superseded_by":null,"metadata":{},"embedding_model":null},"events":[]}"#;
    import(&b, line, "lines.jsonl");
    assert_eq!(zones(&b)[0], (paris.to_string(), json!(chicago)));
    assert_eq!(zones(&b)[3], (chicago.clone(), Value::Null));
    // The history says what the import did.
    let rows = rows(&export(&b));
    let said = table(&rows, "memory_events").into_iter().any(|e| {
        e["memory_id"] == json!(lisbon) && e["event"] == "superseded" && e["actor"] == "import"
    });
    assert!(said, "{rows:?}");
}

async fn the_cli_and_a_running_server_share_one_data_dir(backend: Backend) {
    let db = Db::new(backend).await;
    let d = &db;
    let s = d.serve(&[]);
    let from_server = s.remember("alice", "The user is allergic to peanuts.").await;

    // The CLI writes while the server runs: the server's next search sees it.
    let (dec, from_cli) =
        remember(d, &["The user's daughter Maya plays the violin.", "--user", "alice"]);
    assert_eq!(dec, "ADD");
    assert_eq!(
        s.search("alice", "what instrument does her child play?").await[0],
        "The user's daughter Maya plays the violin."
    );
    let (st, m) = s.get(&format!("/v1/memories/{from_cli}")).await;
    assert_eq!(st, StatusCode::OK, "{m}");
    assert_eq!(m["source"]["kind"], "manual");

    // The CLI sees the server's writes, dedups against them ...
    let ids = ids_of(&listed(&ok_json(d, &["list", "--user", "alice", "--json"])));
    assert!(ids.contains(&from_server), "{ids:?}");
    assert_eq!(
        remember(d, &["the user is allergic to peanuts", "--user", "alice"]),
        ("NONE".to_string(), from_server.clone())
    );
    let (_, m) = s.get(&format!("/v1/memories/{from_server}")).await;
    assert_eq!(m["mention_count"], 2, "{m}");

    // ... and its forget is seen by the server at once.
    ok(d, &["forget", &from_server]);
    let (_, m) = s.get(&format!("/v1/memories/{from_server}")).await;
    assert!(m["superseded_at"].is_string(), "server does not see the CLI's forget: {m}");
    assert!(!s.search("alice", "peanut allergy").await.iter().any(|c| c.contains("peanuts")));
    let (_, list) = s.get("/v1/memories?user_id=alice").await;
    assert_eq!(ids_of(list["memories"].as_array().unwrap()), std::slice::from_ref(&from_cli));

    // The server's edit is seen by the CLI.
    let (st, b) = s
        .req(
            "PATCH",
            &format!("/v1/memories/{from_cli}"),
            Some(json!({ "content": "The user's daughter Maya plays the cello." })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    let r = ok_json(
        d,
        &["recall", "what instrument does her child play?", "--user", "alice", "--json"],
    );
    assert_eq!(recalled(&r), ["The user's daughter Maya plays the cello."]);
}

/// `recall` searches what the REST search does: the transcript archive (`--sources`), a
/// time window (`--since` / `--until`, dates too) and the literal modes; `list` takes the
/// same window; bad values are refused with the API's own message.
async fn recall_searches_the_transcript_archive_from_the_shell(backend: Backend) {
    let db = Db::new(backend).await;
    let d = &db;
    let s = d.serve(&[]);
    let messages = json!([
        { "role": "user", "content": "I booked the ferry to Naxos, ticket NX-4471.", "created_at": "2023-05-01T09:00:00Z" },
        { "role": "user", "content": "The ferry to Paros was cancelled.", "created_at": "2023-06-02T09:00:00Z" },
    ]);
    let (st, b) = s
        .post(
            "/v1/conversations/trip/messages",
            json!({ "user_id": "alice", "messages": messages }),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    crate::helpers::drained(&s.as_client()).await;
    // `recall ferry --user alice --json` with `args`: the message contents found.
    let found = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["recall", "ferry", "--user", "alice", "--json"];
        a.extend_from_slice(args);
        let v = ok_json(d, &a);
        v["results"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|r| {
                assert_eq!(r["type"], "message", "{r}");
                r["message"]["content"].as_str().unwrap().to_string()
            })
            .collect()
    };
    // Memories alone by default: nothing; the messages on request.
    assert_eq!(ok(d, &["recall", "ferry", "--user", "alice"]).trim(), "nothing relevant found");
    // At the default log level no command repeats the database's notices: PostgreSQL's
    // "relation schema_migrations already exists, skipping" came with each one.
    let mut info = d.engram();
    let o = info.env_remove("ENGRAM_LOG").args(["recall", "ferry", "--user", "alice"]);
    let o = o.output_bounded().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("already exists"), "{err}");
    assert_eq!(found(&["--sources", "messages"]).len(), 2);
    // A date window, as in the API: a month as `--until` includes it.
    assert_eq!(
        found(&["--sources", "messages", "--until", "2023-05"]),
        ["I booked the ferry to Naxos, ticket NX-4471."]
    );
    assert_eq!(
        found(&["--sources", "memories,messages", "--since", "2023-06-01"]),
        ["The ferry to Paros was cancelled."]
    );
    // A literal mode, and the plain output names the conversation and the time.
    let plain = ok(
        d,
        &["recall", "NX-\\d+", "--user", "alice", "--sources", "messages", "--mode", "regex"],
    );
    assert!(
        plain.contains("[message trip #1 2023-05-01T09:00:00Z] user: I booked the ferry"),
        "{plain}"
    );
    assert_eq!(plain.lines().count(), 1, "{plain}");
    // `list` takes the same window, over when facts were observed.
    for (fact, at) in [
        ("The user sailed to Naxos.", "2023-05-01T12:00:00Z"),
        ("The user missed the Paros ferry.", "2023-06-02T12:00:00Z"),
    ] {
        let body = json!({ "user_id": "alice", "content": fact, "observed_at": at });
        let (st, b) = s.post("/v1/memories", body).await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
    }
    let listed_in = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["list", "--user", "alice", "--json"];
        a.extend_from_slice(args);
        listed(&ok_json(d, &a)).iter().map(|m| m["content"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(listed_in(&["--since", "2023-06"]), ["The user missed the Paros ferry."]);
    assert_eq!(listed_in(&["--until", "2023-05-31"]), ["The user sailed to Naxos."]);
    assert_eq!(listed_in(&[]).len(), 2);
    let err = fails(d, &["list", "--since", "2023-06-02", "--until", "2023-06-01"]);
    assert!(err.contains("until must be after since"), "{err}");
    // Bad values: the API's messages, nothing printed on stdout.
    for (args, says) in [
        (
            vec!["--sources", "messages", "--mode", "regex", "NX-("],
            "not a valid regular expression",
        ),
        (vec!["--sources", "letters", "ferry"], "unknown source 'letters'"),
        (vec!["--sources", "messages", "--since", "May 2023", "ferry"], "since must be"),
        (
            vec!["--sources", "messages", "--since", "2023-06", "--until", "2023-05", "ferry"],
            "until must be after since",
        ),
    ] {
        let mut a = vec!["recall", "--user", "alice"];
        a.extend(args);
        let err = fails(d, &a);
        assert!(err.contains(says), "engram {a:?}: {err}");
    }
}

on_both_backends!(
    remember_recall_list_and_forget_from_the_shell,
    export_then_import_into_a_fresh_dir_is_lossless_and_idempotent,
    an_import_never_leaves_two_values_under_one_profile_key,
    recall_is_not_swayed_by_a_function_word_the_query_shares_with_a_fact,
    a_malformed_import_line_is_named_and_nothing_is_imported,
    output_into_a_closed_pipe_ends_quietly,
    local_picks_int8_for_a_new_store_and_keeps_an_exact_store_exact,
    keys_are_printed_once_listed_without_secret_and_revocable,
    bad_cli_input_fails_with_a_clear_message_and_stores_nothing,
    the_cli_and_a_running_server_share_one_data_dir,
    recall_searches_the_transcript_archive_from_the_shell,
);
