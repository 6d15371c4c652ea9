//! The tenancy property (issue 10, SPEC §1 and §4): random sequences of every operation,
//! by keys of every role in two tenants (agents in and out of a cluster, two users), over
//! REST, MCP and the CLI; after every step, no response carries a row, a text or an id the
//! caller may not see.
//!
//! Every fact and message written holds a unique marker (`mk<N>`); the test keeps an oracle
//! of who wrote what where (tenant, user, memory pool, kind; conversation and its agent).
//! Each response body, success or error, is scanned for markers and for the ids of known
//! rows, and each one found must be visible to the caller by SPEC's rules:
//! - another tenant: never;
//! - admin key: its whole tenant;
//! - user key: its user's rows;
//! - agent key: memories of its pool (its cluster's), `shared` ones and user-wide ones
//!   (written without an agent); messages of conversations of its pool or without agent.
//!
//! The sequence is drawn from a seed (printed, and settable with `ENGRAM_TENANCY_SEED`) so a
//! failure can be replayed; `ENGRAM_TENANCY_OPS` sets its length (default 1,500 per
//! backend: the CI variant). The long variant's figures are in `benches/README.md`.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Db};
use crate::mcp::Mcp;

const TENANTS: [&str; 2] = ["t1", "t2"];
const USERS: [&str; 2] = ["u1", "u2"];
/// a1 and a3 share cluster c1; a2 has a pool of its own.
const AGENTS: [&str; 3] = ["a1", "a2", "a3"];

#[derive(Clone, Debug, PartialEq)]
enum Role {
    Admin,
    Agent(&'static str),
    User(&'static str),
}

#[derive(Clone, Debug)]
struct Key {
    tenant: &'static str,
    role: Role,
    secret: String,
}

/// A row the test wrote.
#[derive(Clone, Debug)]
enum Row {
    Memory { tenant: &'static str, user: &'static str, pool: Option<String>, shared: bool },
    Message { tenant: &'static str, user: &'static str, conv_pool: Option<String> },
}

fn pool(agent: &str) -> String {
    match agent {
        "a1" | "a3" => "cluster:c1".to_string(),
        other => format!("agent:{other}"),
    }
}

fn visible(k: &Key, r: &Row) -> bool {
    match r {
        Row::Memory { tenant, user, pool: p, shared } => {
            *tenant == k.tenant
                && match &k.role {
                    Role::Admin => true,
                    Role::User(u) => u == user,
                    Role::Agent(a) => *shared || p.is_none() || p.as_deref() == Some(&pool(a)),
                }
        }
        Row::Message { tenant, user, conv_pool } => {
            *tenant == k.tenant
                && match &k.role {
                    Role::Admin => true,
                    Role::User(u) => u == user,
                    Role::Agent(a) => conv_pool.is_none() || conv_pool.as_deref() == Some(&pool(a)),
                }
        }
    }
}

#[derive(Default)]
struct Oracle {
    /// marker number → row
    markers: HashMap<u64, Row>,
    /// row id → marker number
    ids: HashMap<String, u64>,
    /// (tenant, conversation) → (user, pool of its agent)
    convs: HashMap<(&'static str, String), (&'static str, Option<String>)>,
    next: u64,
    checked: u64,
}

impl Oracle {
    fn marker(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Every marker and known id in `body` must be visible to `k`, except what the request
    /// itself carried (`sent`: an unknown id is echoed in its 404 message).
    fn check(&mut self, k: &Key, what: &str, body: &str, sent: &str) {
        self.checked += 1;
        let bytes = body.as_bytes();
        let mut i = 0;
        while let Some(pos) = body[i..].find("mk") {
            let start = i + pos + 2;
            let end = start + bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
            if end > start
                && let Ok(n) = body[start..end].parse::<u64>()
                && let Some(row) = self.markers.get(&n)
                && !sent.contains(&format!("mk{n}"))
            {
                assert!(visible(k, row), "LEAK: {k:?} saw mk{n} ({row:?}) in {what}: {body}");
            }
            i = end.max(start);
        }
        // Every UUID-shaped run of the body (8-4-4-4-12 hex digits), looked up.
        for (i, _) in body.match_indices('-') {
            if i < 8 || i + 28 > bytes.len() {
                continue;
            }
            // Bytes, not a str slice: the 8 bytes before a hyphen may end inside a character.
            let raw = &bytes[i - 8..i + 28];
            if !raw.iter().all(|b| b.is_ascii_hexdigit() || *b == b'-') || raw[13] != b'-' {
                continue;
            }
            let Ok(cand) = std::str::from_utf8(raw) else { continue };
            if let Some(n) = self.ids.get(cand)
                && !sent.contains(cand)
            {
                let row = &self.markers[n];
                assert!(visible(k, row), "LEAK: {k:?} saw id {cand} ({row:?}) in {what}: {body}");
            }
        }
    }
}

fn ops_count() -> usize {
    #[allow(clippy::disallowed_methods)] // the long variant is chosen from the environment
    let n = std::env::var("ENGRAM_TENANCY_OPS").ok().and_then(|v| v.parse().ok());
    n.unwrap_or(1500)
}

fn seed() -> u64 {
    #[allow(clippy::disallowed_methods)] // a failure is replayed from its seed
    let s = std::env::var("ENGRAM_TENANCY_SEED").ok().and_then(|v| v.parse().ok());
    s.unwrap_or_else(|| rand::rng().random())
}

fn create_key(db: &Db, tenant: &str, role: &Role) -> String {
    let mut a = vec!["--tenant", tenant];
    match role {
        Role::Admin => a.extend(["--role", "admin"]),
        Role::Agent(x) => a.extend(["--role", "agent", "--agent", x]),
        Role::User(u) => a.extend(["--role", "user", "--user", u]),
    }
    crate::helpers::create_key(db, &a)
}

async fn no_response_leaks_a_row_outside_the_callers_visibility(backend: Backend) {
    let seed = seed();
    let n_ops = ops_count();
    eprintln!(
        "tenancy property ({backend:?}): seed {seed}, {n_ops} operations (ENGRAM_TENANCY_SEED replays)"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let db = Db::new(backend).await;
    let mut keys = Vec::new();
    for t in TENANTS {
        let roles = [
            Role::Admin,
            Role::Agent("a1"),
            Role::Agent("a2"),
            Role::Agent("a3"),
            Role::User("u1"),
            Role::User("u2"),
        ];
        for r in roles {
            let secret = create_key(&db, t, &r);
            keys.push(Key { tenant: t, role: r, secret });
        }
    }
    let s = db.serve(&["--rate-limit", "0"]);
    // Clusters: a1 and a3 share c1 in both tenants.
    for k in keys.iter().filter(|k| k.role == Role::Admin) {
        for a in AGENTS {
            let body = if a == "a2" { json!({}) } else { json!({ "cluster_id": "c1" }) };
            let (st, b) =
                s.with_key(&k.secret).req("PUT", &format!("/v1/agents/{a}"), Some(body)).await;
            assert_eq!(st, StatusCode::OK, "{b}");
        }
    }
    let mut mcp: Vec<Mcp> = Vec::new();
    for k in &keys {
        let mut m = Mcp::new(&s.base, Some(&k.secret));
        m.connect().await;
        mcp.push(m);
    }
    let mut o = Oracle::default();
    let mut ids: Vec<String> = Vec::new();
    let mut counts: HashMap<&str, usize> = HashMap::new();

    for step in 0..n_ops {
        let ki = rng.random_range(0..keys.len());
        let k = keys[ki].clone();
        let c = s.with_key(&k.secret);
        let user = USERS[rng.random_range(0..USERS.len())];
        let agent = AGENTS[rng.random_range(0..AGENTS.len())];
        // The agent a request names: none, the key's own, or a random one.
        let named = match rng.random_range(0..3) {
            0 => None,
            1 => match &k.role {
                Role::Agent(a) => Some(*a),
                Role::Admin | Role::User(_) => Some(agent),
            },
            _ => Some(agent),
        };
        let some_id = if ids.is_empty() || rng.random_bool(0.05) {
            uuid::Uuid::now_v7().to_string()
        } else {
            ids[rng.random_range(0..ids.len())].clone()
        };
        let op = rng.random_range(0..100);
        let (what, status, body): (&str, u16, String) = match op {
            0..=14 => {
                let n = o.marker();
                let shared = rng.random_bool(0.3);
                let mut b = json!({ "content": format!("The user fact mk{n} is about item {n}."),
                    "user_id": user, "kind": if shared { "shared" } else { "knowledge" } });
                if let Some(a) = named {
                    b["agent_id"] = json!(a);
                }
                let (st, r) = c.post("/v1/memories", b).await;
                if st.is_success() {
                    assert_eq!(r["decision"], "ADD", "unique facts are never duplicates: {r}");
                    let m = &r["memory"];
                    let id = m["id"].as_str().unwrap().to_string();
                    // Who the row belongs to is what the oracle expects of the request.
                    let expect_pool = match &k.role {
                        Role::Agent(a) => Some(pool(a)),
                        Role::Admin | Role::User(_) => named.map(pool),
                    };
                    let expect_user = match &k.role {
                        Role::User(u) => u,
                        Role::Admin | Role::Agent(_) => &user,
                    };
                    assert_eq!(m["pool"].as_str().map(str::to_string), expect_pool, "{r}");
                    assert_eq!(m["user_id"], *expect_user, "{r}");
                    assert_eq!(m["kind"] == "shared", shared, "{r}");
                    let row = Row::Memory {
                        tenant: k.tenant,
                        user: expect_user,
                        pool: expect_pool,
                        shared,
                    };
                    o.markers.insert(n, row);
                    o.ids.insert(id.clone(), n);
                    ids.push(id);
                }
                ("remember", st.as_u16(), r.to_string())
            }
            15..=22 => {
                // Edit: the new version keeps the old one's user and pool.
                let n = o.marker();
                let shared = rng.random_bool(0.4);
                let b = json!({ "content": format!("The user fact mk{n} replaces item {n}."),
                    "kind": if shared { "shared" } else { "knowledge" } });
                let (st, r) = c.req("PATCH", &format!("/v1/memories/{some_id}"), Some(b)).await;
                if st.is_success() {
                    let old = &o.markers[&o.ids[&some_id]];
                    let Row::Memory { tenant, user, pool, .. } = old.clone() else {
                        panic!("edited a message? {r}")
                    };
                    assert_eq!(r["kind"] == "shared", shared, "{r}");
                    o.markers.insert(n, Row::Memory { tenant, user, pool, shared });
                    let id = r["id"].as_str().unwrap().to_string();
                    o.ids.insert(id.clone(), n);
                    ids.push(id);
                }
                ("edit", st.as_u16(), r.to_string())
            }
            23..=27 => {
                let (st, r) = c.get(&format!("/v1/memories/{some_id}")).await;
                ("get", st.as_u16(), r.to_string())
            }
            28..=35 => {
                let (st, r) = c.get(&format!("/v1/memories/{some_id}/history")).await;
                ("history", st.as_u16(), r.to_string())
            }
            36..=43 => {
                let mut path =
                    format!("/v1/memories?include_superseded={}&limit=200", rng.random_bool(0.5));
                if rng.random_bool(0.7) {
                    path.push_str(&format!("&user_id={user}"));
                }
                if let Some(a) = named {
                    path.push_str(&format!("&agent_id={a}"));
                }
                let (st, r) = c.get(&path).await;
                ("list", st.as_u16(), r.to_string())
            }
            44..=55 => {
                let q = if o.next > 0 {
                    format!("item {}", rng.random_range(1..=o.next))
                } else {
                    "item".into()
                };
                let sources = match rng.random_range(0..3) {
                    0 => json!(["memories"]),
                    1 => json!(["messages"]),
                    _ => json!(["memories", "messages"]),
                };
                let mut b = json!({ "query": q, "user_id": user, "sources": sources, "limit": 20 });
                if let Some(a) = named {
                    b["agent_id"] = json!(a);
                }
                let (st, r) = c.post("/v1/search", b).await;
                ("search", st.as_u16(), r.to_string())
            }
            56..=60 => {
                let mut b = json!({ "user_id": user, "token_budget": 2000 });
                if let Some(a) = named {
                    b["agent_id"] = json!(a);
                }
                let (st, r) = c.post("/v1/context", b).await;
                ("context", st.as_u16(), r.to_string())
            }
            61..=68 => {
                // Append to one of a few conversations per tenant.
                let conv = format!("conv-{}", rng.random_range(0..6));
                let n = o.marker();
                let mut b = json!({ "user_id": user, "messages": [
                    { "role": "user", "content": format!("Message mk{n}: I repaired item {n}.") }] });
                if let Some(a) = named {
                    b["agent_id"] = json!(a);
                }
                let (st, r) = c.post(&format!("/v1/conversations/{conv}/messages"), b).await;
                if st.is_success() {
                    let key = (k.tenant, conv.clone());
                    let msg_user = match &k.role {
                        Role::User(u) => u,
                        Role::Admin | Role::Agent(_) => user,
                    };
                    let caller_agent = match &k.role {
                        Role::Agent(a) => Some(*a),
                        Role::Admin | Role::User(_) => named,
                    };
                    let entry = o.convs.entry(key).or_insert((msg_user, caller_agent.map(pool)));
                    let row = Row::Message {
                        tenant: k.tenant,
                        user: entry.0,
                        conv_pool: entry.1.clone(),
                    };
                    o.markers.insert(n, row);
                    let id = r["messages"][0]["id"].as_str().unwrap().to_string();
                    o.ids.insert(id.clone(), n);
                    ids.push(id);
                }
                ("append", st.as_u16(), r.to_string())
            }
            69..=73 => {
                let conv = format!("conv-{}", rng.random_range(0..6));
                let (st, r) = c.get(&format!("/v1/conversations/{conv}/messages?limit=1000")).await;
                // The conversation itself is visible exactly when its transcript is.
                let (st2, r2) = c.get(&format!("/v1/conversations/{conv}")).await;
                assert_eq!(st, st2, "step {step}: {conv} by {k:?}: {r} / {r2}");
                if st2.is_success() {
                    let first = &r["messages"][0]["user_id"];
                    assert!(first.is_null() || *first == r2["user_id"], "{r} / {r2}");
                }
                ("browse", st.as_u16(), format!("{r}{r2}"))
            }
            74..=76 => {
                let v = if rng.random_bool(0.5) { 1 } else { -1 };
                let (st, r) =
                    c.post(&format!("/v1/memories/{some_id}/rating"), json!({ "value": v })).await;
                ("rate", st.as_u16(), r.to_string())
            }
            77..=78 => {
                let v = if rng.random_bool(0.5) { 1 } else { -1 };
                let (st, r) =
                    c.post(&format!("/v1/messages/{some_id}/rating"), json!({ "value": v })).await;
                ("rate message", st.as_u16(), r.to_string())
            }
            79..=80 => {
                let (st, r) = c.req("DELETE", &format!("/v1/memories/{some_id}"), None).await;
                ("forget", st.as_u16(), r.to_string())
            }
            81..=82 => {
                let (st, r) = c.get(&format!("/v1/users/{user}/export")).await;
                ("export", st.as_u16(), r.to_string())
            }
            83 => {
                // Erasure is rare: it empties a user for everyone.
                if rng.random_bool(0.2) {
                    let (st, r) = c.req("DELETE", &format!("/v1/users/{user}"), None).await;
                    if st.is_success() {
                        // The user's conversations are gone: their ids can start anew.
                        o.convs.retain(|(t, _), (u, _)| !(*t == k.tenant && *u == user));
                    }
                    ("erase", st.as_u16(), r.to_string())
                } else {
                    let (st, r) = c.get("/v1/stats").await;
                    ("stats", st.as_u16(), r.to_string())
                }
            }
            84..=85 => {
                let (st, r) = c.get(&format!("/v1/agents/{agent}")).await;
                ("agent", st.as_u16(), r.to_string())
            }
            86..=97 => {
                // The same over MCP, with this key's session.
                let m = &mut mcp[ki];
                let (tool, args) = match rng.random_range(0..6) {
                    0 => ("recall", json!({ "user_id": user })),
                    1 => ("list_memories", json!({ "user_id": user, "include_superseded": true })),
                    2 => (
                        "memory_search",
                        json!({ "user_id": user, "query": format!("item {}", rng.random_range(1..=o.next.max(1))), "sources": ["memories", "messages"] }),
                    ),
                    3 => (
                        "memory_browse",
                        json!({ "conversation_id": format!("conv-{}", rng.random_range(0..6)) }),
                    ),
                    4 => ("relate", json!({ "memory_id": some_id })),
                    _ => ("forget", json!({ "memory_id": some_id })),
                };
                let r = m.call(tool, args).await;
                ("mcp", 200, r.to_string())
            }
            _ => {
                // The CLI acts as admin of a tenant: it must stay inside it.
                let out = db
                    .engram()
                    .args([
                        "list",
                        "--tenant",
                        k.tenant,
                        "--user",
                        user,
                        "--json",
                        "--include-superseded",
                        "--limit",
                        "200",
                    ])
                    .output_bounded()
                    .unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                let admin = Key { tenant: k.tenant, role: Role::Admin, secret: String::new() };
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                o.check(&admin, "cli list", &text, "");
                *counts.entry("cli").or_default() += 1;
                continue;
            }
        };
        assert!(status < 500, "step {step}: {what} by {k:?}: {status} {body}");
        o.check(&k, what, &body, &some_id);
        *counts.entry(what).or_default() += 1;
    }
    let mut c: Vec<_> = counts.into_iter().collect();
    c.sort();
    eprintln!(
        "tenancy property ({backend:?}): seed {seed}: {n_ops} operations, {} responses checked, {} rows written, 0 leaks; by operation: {c:?}",
        o.checked,
        o.markers.len()
    );
}

on_both_backends!(no_response_leaks_a_row_outside_the_callers_visibility);
