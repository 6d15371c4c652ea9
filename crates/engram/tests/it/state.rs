//! Working memory (issue 15, item 4): per (user, agent, session) key-value state with a TTL,
//! over REST and MCP, on both stores: who may read and write which entry (tenants, agent and
//! user keys), expiry at the instant the TTL ends, bad input, the GDPR export and erasure,
//! and that nothing of it is searched or recalled.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, Db, assert_error, create_key};
use crate::mcp::Mcp;

const PLAN: &str = "/v1/sessions/run-1/state/plan";

async fn working_memory_is_scoped_expires_and_is_erased(backend: Backend) {
    let db = Db::new(backend).await;
    let admin = create_key(&db, &["--tenant", "acme", "--role", "admin"]);
    let globex = create_key(&db, &["--tenant", "globex", "--role", "admin"]);
    let planner = create_key(&db, &["--tenant", "acme", "--role", "agent", "--agent", "planner"]);
    let alice = create_key(&db, &["--tenant", "acme", "--role", "user", "--user", "alice"]);
    let s = db.serve(&[]);
    let (admin, globex, planner, alice) =
        (s.with_key(&admin), s.with_key(&globex), s.with_key(&planner), s.with_key(&alice));

    // The planner agent keeps its plan for alice's run.
    let plan = json!({ "steps": ["find flights", "book the cheapest"], "done": 0 });
    let body = json!({ "value": plan, "user_id": "alice", "ttl_seconds": 600 });
    let (st, e) = planner.req("PUT", PLAN, Some(body)).await;
    assert_eq!(st, StatusCode::OK, "{e}");
    assert_eq!(
        (&e["value"], &e["user_id"], &e["agent_id"]),
        (&plan, &json!("alice"), &json!("planner"))
    );
    assert_eq!((&e["session_id"], &e["key"]), (&json!("run-1"), &json!("plan")));
    let expires = time::OffsetDateTime::parse(
        e["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = expires - time::OffsetDateTime::now_utc();
    assert!(left > time::Duration::seconds(590) && left <= time::Duration::seconds(600), "{left}");

    let at = |q: &str| format!("{PLAN}?{q}");
    let (st, got) = planner.get(&at("user_id=alice")).await;
    assert_eq!((st, &got["value"]), (StatusCode::OK, &plan));
    // The agent is part of the address: the admin names it, alice's own key names it.
    assert_eq!(admin.get(&at("user_id=alice&agent_id=planner")).await.1["value"], plan);
    assert_eq!(alice.get(&at("agent_id=planner")).await.1["value"], plan);
    assert_error(&admin.get(&at("user_id=alice")).await, 404, "not_found");
    assert_error(&alice.get(PLAN).await, 404, "not_found");
    // Nobody else reaches it.
    assert_error(&globex.get(&at("user_id=alice&agent_id=planner")).await, 404, "not_found");
    assert_error(&admin.get(&at("user_id=bob&agent_id=planner")).await, 404, "not_found");
    assert_error(&alice.get(&at("user_id=bob&agent_id=planner")).await, 403, "forbidden");
    assert_error(&planner.get(&at("user_id=alice&agent_id=booker")).await, 403, "forbidden");
    assert_error(&admin.get(&at("agent_id=planner")).await, 400, "invalid_input");
    assert_error(
        &globex.req("DELETE", &at("user_id=alice&agent_id=planner"), None).await,
        404,
        "not_found",
    );

    // A put replaces the value; a session lists its live keys by key.
    let step = json!({ "value": 1, "user_id": "alice", "ttl_seconds": 600 });
    assert_eq!(planner.req("PUT", "/v1/sessions/run-1/state/step", Some(step)).await.0, 200);
    let next =
        json!({ "value": { "steps": ["book the cheapest"], "done": 1 }, "user_id": "alice" });
    let (st, e) = planner.req("PUT", PLAN, Some(next)).await;
    assert_eq!((st, &e["value"]["done"]), (StatusCode::OK, &json!(1)));
    let (st, list) = planner.get("/v1/sessions/run-1/state?user_id=alice").await;
    assert_eq!(st, StatusCode::OK);
    let keys: Vec<&str> =
        list["entries"].as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["plan", "step"]);
    assert_eq!(planner.get("/v1/sessions/run-2/state?user_id=alice").await.1["entries"], json!([]));

    // Unreadable once its TTL ends.
    let otp = json!({ "value": "493021", "user_id": "alice", "ttl_seconds": 1 });
    let otp_path = "/v1/sessions/run-1/state/one-time%20code";
    let (st, e) = planner.req("PUT", otp_path, Some(otp)).await;
    assert_eq!((st, &e["key"]), (StatusCode::OK, &json!("one-time code")));
    assert_eq!(planner.get(&format!("{otp_path}?user_id=alice")).await.0, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_error(&planner.get(&format!("{otp_path}?user_id=alice")).await, 404, "not_found");
    let (_, list) = planner.get("/v1/sessions/run-1/state?user_id=alice").await;
    assert_eq!(list["entries"].as_array().unwrap().len(), 2, "{list}");

    // Bad input: a clear error, nothing stored.
    let bad = [
        (json!({ "value": 1, "user_id": "alice", "ttl_seconds": 0 }), 400, "invalid_input"),
        (json!({ "value": 1, "user_id": "alice", "ttl_seconds": 2_592_001 }), 400, "invalid_input"),
        (json!({ "user_id": "alice" }), 400, "invalid_input"),
        (json!({ "value": 1, "user_id": "alice", "colour": "red" }), 400, "invalid_input"),
        (json!({ "value": "x".repeat(70_000), "user_id": "alice" }), 413, "payload_too_large"),
    ];
    for (body, status, code) in bad {
        let got = planner.req("PUT", "/v1/sessions/run-1/state/bad", Some(body.clone())).await;
        assert_error(&got, status, code);
    }
    assert_error(
        &planner
            .req(
                "PUT",
                "/v1/sessions/run-1/state/%20padded",
                Some(json!({ "value": 1, "user_id": "alice" })),
            )
            .await,
        400,
        "invalid_input",
    );
    assert_error(
        &planner.get("/v1/sessions/run-1/state/bad?user_id=alice").await,
        404,
        "not_found",
    );

    // Never embedded, extracted or searched: the values are nowhere in search or memories.
    let (_, found) = admin
        .post(
            "/v1/search",
            json!({ "query": "book the cheapest flights", "user_id": "alice",
                    "sources": ["memories", "messages", "summaries"] }),
        )
        .await;
    assert_eq!(found["results"], json!([]), "{found}");

    // Deleted: gone, and a second delete says so.
    assert_eq!(
        planner.req("DELETE", "/v1/sessions/run-1/state/step?user_id=alice", None).await.0,
        204
    );
    assert_error(
        &planner.get("/v1/sessions/run-1/state/step?user_id=alice").await,
        404,
        "not_found",
    );
    assert_error(
        &planner.req("DELETE", "/v1/sessions/run-1/state/step?user_id=alice", None).await,
        404,
        "not_found",
    );

    // GDPR: the user's export carries it; erasure removes it.
    let (st, export) = admin.get("/v1/users/alice/export").await;
    assert_eq!(st, StatusCode::OK);
    let entries: Vec<&Value> = export["session_state"].as_array().unwrap().iter().collect();
    assert_eq!(entries.len(), 1, "{export}");
    assert_eq!(entries[0]["value"]["done"], 1);
    let (st, erased) = admin.req("DELETE", "/v1/users/alice", None).await;
    assert_eq!(st, StatusCode::OK, "{erased}");
    // The live plan, and the expired code unless the sweep took it first.
    let n = erased["erased"]["session_state"].as_u64().unwrap();
    assert!((1..=2).contains(&n), "{erased}");
    assert_error(&admin.get(&at("user_id=alice&agent_id=planner")).await, 404, "not_found");
}

async fn working_memory_tools_over_mcp(backend: Backend) {
    let db = Db::new(backend).await;
    let planner = create_key(&db, &["--tenant", "acme", "--role", "agent", "--agent", "planner"]);
    let other = create_key(&db, &["--tenant", "acme", "--role", "agent", "--agent", "booker"]);
    let s = db.serve(&[]);
    let mut m = Mcp::new(&s.base, Some(&planner));
    m.connect().await;
    let set = m
        .ok(
            "working_memory_set",
            json!({ "session_id": "run-1", "key": "plan", "user_id": "alice",
                    "value": ["search", "book"], "ttl_seconds": 300 }),
        )
        .await;
    assert_eq!((&set["agent_id"], &set["value"]), (&json!("planner"), &json!(["search", "book"])));
    let args = json!({ "session_id": "run-1", "key": "plan", "user_id": "alice" });
    let got = m.ok("working_memory_get", args.clone()).await;
    assert_eq!(got["value"], json!(["search", "book"]));
    let list =
        m.ok("working_memory_list", json!({ "session_id": "run-1", "user_id": "alice" })).await;
    assert_eq!(list["entries"].as_array().unwrap().len(), 1);

    // Another agent of the same tenant has its own working memory for the same session id.
    let mut o = Mcp::new(&s.base, Some(&other));
    o.connect().await;
    let r = o.call("working_memory_get", args.clone()).await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], "not_found");

    // Not recalled: recall knows nothing about alice.
    let recall = m.call("recall", json!({ "user_id": "alice", "query": "search and book" })).await;
    assert!(
        recall["content"][0]["text"].as_str().unwrap().starts_with("Nothing relevant"),
        "{recall}"
    );

    let del = m.ok("working_memory_delete", args.clone()).await;
    assert_eq!(del["status"], "deleted");
    let r = m.call("working_memory_get", args).await;
    assert_eq!(r["structuredContent"]["error"]["code"], "not_found", "{r}");
    let r = m
        .call(
            "working_memory_set",
            json!({ "session_id": "run-1", "key": "k", "user_id": "alice" }),
        )
        .await;
    assert_eq!(r["structuredContent"]["error"]["code"], "invalid_input", "{r}");
}

on_both_backends!(working_memory_is_scoped_expires_and_is_erased, working_memory_tools_over_mcp,);
