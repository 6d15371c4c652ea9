//! Backup and restore (`engram export` / `engram import`): a tenant's backup restored into
//! another tenant of the same store is the same backup there (ids kept); a second restore
//! skips every row; and garbage is refused, naming table and column, with nothing written,
//! while whatever a restore accepts reads back through the store (a seeded generator of
//! mutated rows; `ENGRAM_BACKUP_FUZZ_CASES` runs more).

use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{
    Agent, AgentId, ConversationId, EventKind, MemoryId, MessageRole, TenantId,
};
use engram_core::store::{BackupRow, BackupScope, RestoreState, Store};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::harness::{event, memory, message, new_row, now, tenant, unit, user};

async fn backup(s: &Arc<dyn Store>, t: &TenantId) -> Vec<BackupRow> {
    let mut rows = Vec::new();
    let n = s
        .backup(&BackupScope::Tenant(t.clone()), &mut |r| {
            rows.push(r);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(n as usize, rows.len());
    rows
}

/// Rows of a tenant with the tenant (and the store-assigned event ids) taken out.
fn neutral(rows: &[BackupRow]) -> Vec<String> {
    let mut v: Vec<String> = rows
        .iter()
        .map(|r| {
            let mut row = r.row.clone();
            row.insert("tenant_id".into(), json!("-"));
            if r.table == "memory_events" {
                row.insert("id".into(), Value::Null);
            }
            format!("{} {}", r.table, Value::Object(row))
        })
        .collect();
    v.sort();
    v
}

/// Some of everything a tenant holds.
async fn fill(s: &Arc<dyn Store>, t: &TenantId) {
    let u = user("alice");
    s.ensure_embedding_space(crate::harness::MODEL, 8).await.unwrap();
    let a = memory(t, &u, "The user lives in Bengaluru.");
    let mut b = memory(t, &u, "The user's daughter Maya plays the violin.");
    b.metadata = json!({"tags": ["family"], "n": 1.5});
    s.insert_memories(t, vec![new_row(a.clone(), Some(unit(8, 1))), new_row(b, Some(unit(8, 2)))])
        .await
        .unwrap();
    let moved = memory(t, &u, "The user lives in Mysuru.");
    s.supersede(
        t,
        a.id,
        Some(new_row(moved.clone(), Some(unit(8, 3)))),
        event(a.id, EventKind::Superseded, Some(moved.id)),
    )
    .await
    .unwrap();
    let msgs = vec![
        message(t, &u, "c1", MessageRole::User, "We moved to Mysuru last week."),
        message(t, &u, "c1", MessageRole::Assistant, "Congratulations on the move!"),
        message(t, &u, "c1", MessageRole::User, "Alice: the movers come on Monday."),
    ];
    s.append_messages(t, msgs).await.unwrap();
    let at = now();
    s.put_agent(&Agent {
        tenant_id: t.clone(),
        id: AgentId::parse("support").unwrap(),
        memory_enabled: true,
        cluster_id: Some("desk".into()),
        dedup_threshold: 0.87,
        settings: json!({"extraction": {"mode": "batched"}}),
        created_at: at,
        updated_at: at,
    })
    .await
    .unwrap();
    s.put_state(&engram_core::model::SessionState {
        tenant_id: t.clone(),
        user_id: u.clone(),
        agent_id: Some(AgentId::parse("support").unwrap()),
        session_id: engram_core::model::SessionId::parse("run-1").unwrap(),
        key: engram_core::model::StateKey::parse("plan").unwrap(),
        value: json!({"steps": ["greet", "solve"], "done": 1}),
        expires_at: at + time::Duration::hours(1),
        created_at: at,
        updated_at: at,
    })
    .await
    .unwrap();
}

pub async fn backup_restore_into_another_tenant(s: Arc<dyn Store>) {
    let (t1, t2) = (tenant("t1"), tenant("t2"));
    fill(&s, &t1).await;
    let rows = backup(&s, &t1).await;
    let tables: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.table.as_str()).collect();
    for t in [
        "agents",
        "memories",
        "memory_events",
        "conversations",
        "messages",
        "jobs",
        "session_state",
        "speakers",
    ] {
        if t != "jobs" {
            assert!(tables.contains(t), "no {t} in the backup: {tables:?}");
        }
    }
    // Into another tenant of the same store: the same rows, the same ids.
    let mut state = RestoreState { target: Some(t2.clone()), ..Default::default() };
    s.restore(&rows, &mut state).await.unwrap();
    assert_eq!(
        state.report.restored.values().sum::<u64>() as usize,
        rows.len(),
        "{:?}",
        state.report
    );
    let copied = backup(&s, &t2).await;
    assert_eq!(neutral(&copied), neutral(&rows));
    // Readable there through the store, and t1 unchanged.
    let ids: Vec<MemoryId> = rows
        .iter()
        .filter(|r| r.table == "memories")
        .map(|r| MemoryId::parse(r.row["id"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(s.get_memories(&t2, &ids).await.unwrap().len(), ids.len());
    let msgs = s.list_messages(&t2, &ConversationId::parse("c1").unwrap(), 0, 100).await.unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(backup(&s, &t1).await, rows);
    // Again, and into the tenant it came from: everything is skipped.
    for target in [Some(t2.clone()), None] {
        let mut state = RestoreState { target, ..Default::default() };
        s.restore(&rows, &mut state).await.unwrap();
        assert!(state.report.restored.is_empty(), "{:?}", state.report);
        assert_eq!(state.report.skipped.values().sum::<u64>() as usize, rows.len());
    }
    assert_eq!(neutral(&backup(&s, &t2).await), neutral(&rows));
}

/// A value that may or may not fit a column.
fn random_value(rng: &mut rand::rngs::StdRng) -> Value {
    match rng.random_range(0..18) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(0),
        3 => json!(-1),
        4 => json!(11),
        5 => json!(1e300),
        6 => json!(""),
        7 => json!("x"),
        8 => json!("a\u{0}b"),
        9 => json!(MemoryId::new().to_string()),
        10 => json!("2026-02-30T10:00:00Z"),
        11 => json!("2026-01-01T10:00:00.123456789+02:00"),
        12 => json!([1, "two"]),
        13 => json!({"a": {"b": [null]}}),
        14 => json!("AAAA"),
        15 => json!("!!not base64"),
        16 => {
            let n = rng.random_range(1..40);
            json!(
                (0..n)
                    .map(|_| char::from_u32(rng.random_range(32..0x2FFF)).unwrap_or('?'))
                    .collect::<String>()
            )
        }
        _ => json!(rng.random_range(-5i64..20)),
    }
}

pub async fn restore_refuses_what_it_cannot_read_back(s: Arc<dyn Store>) {
    let (src, t) = (tenant("src"), tenant("fz"));
    fill(&s, &src).await;
    let templates: Vec<BackupRow> = backup(&s, &src)
        .await
        .into_iter()
        .filter(|r| {
            ["memories", "messages", "conversations", "agents", "memory_events"]
                .contains(&r.table.as_str())
        })
        .collect();
    #[allow(clippy::disallowed_methods, reason = "a test knob, like the other long variants")]
    let cases: usize =
        std::env::var("ENGRAM_BACKUP_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(150);
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..cases {
        let mut row = templates[rng.random_range(0..templates.len())].clone();
        // Fresh keys, so an accepted row is written, not skipped.
        let fresh = MemoryId::new().to_string();
        match row.table.as_str() {
            "memories" | "messages" => {
                row.row.insert("id".into(), json!(fresh));
            }
            "memory_events" => {
                row.row.insert("id".into(), json!(rng.random_range(1_000_000..2_000_000)));
            }
            _ => {
                row.row.insert("id".into(), json!(format!("fz-{case}")));
            }
        }
        if row.table == "messages" {
            row.row.insert("conversation_id".into(), json!(format!("c-{case}")));
        }
        let cols: Vec<String> = row.row.keys().cloned().collect();
        let col = cols[rng.random_range(0..cols.len())].clone();
        if col == "tenant_id" {
            continue;
        }
        row.row.insert(col.clone(), random_value(&mut rng));
        let before = backup(&s, &t).await.len();
        let mut state = RestoreState { target: Some(t.clone()), ..Default::default() };
        match s.restore(std::slice::from_ref(&row), &mut state).await {
            Err(Error::Unprocessable(m)) => {
                refused += 1;
                assert!(
                    m.starts_with(&format!("{}.{col}", row.table)),
                    "case {case}: the error does not name {}.{col}: {m}",
                    row.table
                );
                assert_eq!(
                    backup(&s, &t).await.len(),
                    before,
                    "case {case}: a refused row was written"
                );
            }
            Err(e) => panic!(
                "case {case}: {}.{col} = {}: not a clear refusal: {e:?}",
                row.table, row.row[&col]
            ),
            Ok(()) => {
                accepted += 1;
                // Whatever was accepted reads back through the store.
                match row.table.as_str() {
                    "memories" => {
                        let id = MemoryId::parse(&fresh).unwrap();
                        s.get_memories(&t, &[id]).await.unwrap_or_else(|e| {
                            panic!(
                                "case {case}: memories.{col} = {} accepted but unreadable: {e}",
                                row.row[&col]
                            )
                        });
                    }
                    "messages" => {
                        let c = ConversationId::parse(format!("c-{case}")).unwrap();
                        s.list_messages(&t, &c, 0, 10).await.unwrap_or_else(|e| {
                            panic!(
                                "case {case}: messages.{col} = {} accepted but unreadable: {e}",
                                row.row[&col]
                            )
                        });
                    }
                    "agents" => {
                        if let Some(id) =
                            row.row["id"].as_str().and_then(|i| AgentId::parse(i).ok())
                        {
                            s.get_agent(&t, &id).await.unwrap_or_else(|e| {
                                panic!(
                                    "case {case}: agents.{col} = {} accepted but unreadable: {e}",
                                    row.row[&col]
                                )
                            });
                        }
                    }
                    _ => {}
                }
                s.user_memories(&t, &user("alice")).await.unwrap_or_else(|e| {
                    panic!("case {case}: {}.{col} = {} accepted, then the user's rows are unreadable: {e}", row.table, row.row[&col])
                });
            }
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "accepted {accepted}, refused {refused}: the generator is off"
    );
}
