//! Crash safety (issue 10, SPEC §7): concurrent writers (single facts, batches, transcript
//! messages) against a real server that is SIGKILLed at a random moment, again and again;
//! after the last restart every write that was answered 2xx is there, exactly once, with
//! its content, and the background jobs of the interrupted runs are resumed and done.
//!
//! `ENGRAM_CRASH_CYCLES` sets the number of kills (default 3, the CI variant); the long
//! variant's figures are in `benches/README.md` with its command.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};

use crate::helpers::{Backend, Db, Server};

/// What the server acknowledged (2xx), by kind.
#[derive(Default)]
struct Acked {
    /// memory id → content
    memories: HashMap<String, String>,
    /// message id → (conversation, content)
    messages: HashMap<String, (String, String)>,
}

fn cycles() -> usize {
    #[allow(clippy::disallowed_methods)] // the long variant is chosen from the environment
    let n = std::env::var("ENGRAM_CRASH_CYCLES").ok().and_then(|v| v.parse().ok());
    n.unwrap_or(3)
}

/// One writer: a mix of the three kinds of writes until the server goes away.
async fn writer(s: crate::helpers::Client, cycle: usize, w: usize, acked: Arc<Mutex<Acked>>) {
    let conv = format!("conv-{w}");
    for n in 0.. {
        // Distinct numbers per fact: never a duplicate of another (dedup compares numbers).
        let tag = format!("{cycle}-{w}-{n}");
        let op = n % 3;
        let (path, body) = match op {
            0 => (
                "/v1/memories".to_string(),
                json!({ "content": format!("The user keeps box {tag} in the attic."), "user_id": "u" }),
            ),
            1 => (
                "/v1/memories/batch".to_string(),
                json!({ "dedup": false, "memories": (0..3).map(|i| json!({
                    "content": format!("The user labelled jar {tag}-{i} with a date."), "user_id": "u" })).collect::<Vec<_>>() }),
            ),
            _ => (
                format!("/v1/conversations/{conv}/messages"),
                json!({ "user_id": "u", "messages": [
                    { "role": "user", "content": format!("Message {tag}: I watered plant number {tag}.") },
                    { "role": "assistant", "content": format!("Noted {tag}.") } ] }),
            ),
        };
        let r = s
            .client
            .post(format!("{}{path}", s.base))
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        let Ok(r) = r else { return }; // the server is gone
        let status = r.status();
        let Ok(b) = r.json::<Value>().await else { return };
        assert!(status.is_success() || status.is_server_error(), "{status}: {b}");
        if !status.is_success() {
            continue;
        }
        let mut a = acked.lock().unwrap();
        match op {
            0 => {
                assert_eq!(b["decision"], "ADD", "{b}");
                let m = &b["memory"];
                a.memories.insert(
                    m["id"].as_str().unwrap().into(),
                    m["content"].as_str().unwrap().into(),
                );
            }
            1 => {
                for r in b["results"].as_array().unwrap() {
                    let m = &r["memory"];
                    a.memories.insert(
                        m["id"].as_str().unwrap().into(),
                        m["content"].as_str().unwrap().into(),
                    );
                }
            }
            _ => {
                let texts = body["messages"].as_array().unwrap();
                for (m, t) in b["messages"].as_array().unwrap().iter().zip(texts) {
                    a.messages.insert(
                        m["id"].as_str().unwrap().into(),
                        (conv.clone(), t["content"].as_str().unwrap().into()),
                    );
                }
            }
        }
    }
}

async fn acknowledged_writes_survive_sigkill(backend: Backend) {
    const WRITERS: usize = 4;
    let db = Db::new(backend).await;
    let acked = Arc::new(Mutex::new(Acked::default()));
    let n = cycles();
    for cycle in 0..n {
        let mut s: Server = db.serve(&["--rate-limit", "0", "--job-lease-secs", "2"]);
        let tasks: Vec<_> =
            (0..WRITERS).map(|w| tokio::spawn(writer(s.anon(), cycle, w, acked.clone()))).collect();
        let wait = rand::rng().random_range(200..1500);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        s.kill9();
        for t in tasks {
            t.await.expect("writer panicked");
        }
    }

    // After the last restart: everything acknowledged is there, once.
    let s = db.serve(&["--job-lease-secs", "2"]);
    let (memories, messages) = {
        let a = acked.lock().unwrap();
        (a.memories.clone(), a.messages.clone())
    };
    assert!(memories.len() >= n && !messages.is_empty(), "too few writes to mean anything");
    let (_, export) = s.get("/v1/users/u/export").await;
    let stored: Vec<&Value> = export["memories"].as_array().unwrap().iter().collect();
    let mut by_content: HashMap<&str, usize> = HashMap::new();
    for m in &stored {
        *by_content.entry(m["content"].as_str().unwrap()).or_default() += 1;
    }
    let stored_ids: HashSet<&str> = stored.iter().map(|m| m["id"].as_str().unwrap()).collect();
    for (id, content) in &memories {
        assert!(stored_ids.contains(id.as_str()), "acknowledged memory {id} lost ({content})");
        assert_eq!(by_content.get(content.as_str()), Some(&1), "{content} stored more than once");
    }
    assert!(by_content.values().all(|c| *c == 1), "a fact is stored twice");
    let msgs = export["messages"].as_array().unwrap();
    let stored_msgs: HashMap<&str, (&str, &str)> = msgs
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap(),
                (m["conversation_id"].as_str().unwrap(), m["content"].as_str().unwrap()),
            )
        })
        .collect();
    for (id, (conv, content)) in &messages {
        assert_eq!(
            stored_msgs.get(id.as_str()),
            Some(&(conv.as_str(), content.as_str())),
            "acknowledged message {id} lost or changed"
        );
    }
    // Each conversation's seqs are 1..=n with no gap or repeat (no half-written append).
    let mut seqs: HashMap<&str, Vec<i64>> = HashMap::new();
    for m in msgs {
        seqs.entry(m["conversation_id"].as_str().unwrap())
            .or_default()
            .push(m["seq"].as_i64().unwrap());
    }
    for (conv, mut s) in seqs {
        s.sort_unstable();
        assert_eq!(s, (1..=s.len() as i64).collect::<Vec<_>>(), "{conv}");
    }
    // The interrupted background work resumes and is done once: every message embedded,
    // no job failed.
    let stats = crate::helpers::drained(&s.as_client()).await;
    assert_eq!(stats["jobs_failed"], 0, "{stats}");
    assert_eq!(stats["message_embedding_coverage"], 1.0, "{stats}");
    eprintln!(
        "crash test ({backend:?}): {n} SIGKILLs, {} memories and {} messages acknowledged, 0 lost, 0 duplicated",
        memories.len(),
        messages.len()
    );
}

on_both_backends!(acknowledged_writes_survive_sigkill);
