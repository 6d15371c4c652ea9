//! Every table of the schema that holds data, with its columns and how each is represented
//! on SQLite and on PostgreSQL, in an order that never refers to a row not yet given: the
//! one list `engram migrate` ([`crate::transfer`]) copies and `engram export` / `import`
//! ([`crate::backup`]) carry, so a new table is added once for both.

use sqlx::Postgres;
use sqlx::query_builder::Separated;
use time::OffsetDateTime;

/// How a column is represented on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Text,
    OptText,
    Int,
    Real,
    /// 0/1 → boolean.
    Bool,
    /// Unix nanoseconds → timestamptz.
    Ts,
    OptTs,
    /// Text → uuid.
    Uuid,
    OptUuid,
    /// JSON text → jsonb (`{}` when absent).
    Json,
    OptJson,
    /// JSON array of id strings → uuid[].
    UuidList,
    /// f32 blob → vector.
    Vector,
}

/// One table to copy: its columns (same names on both sides) and how the PostgreSQL-only
/// `fts_text` is derived, if it has one.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) cols: &'static [(&'static str, Ty)],
    /// Columns whose words make `fts_text` (memories, summaries: content; messages: content,
    /// tool name).
    pub(crate) fts: &'static [&'static str],
    /// `memory_events`: keep the identity column's values.
    pub(crate) overriding: bool,
}

use Ty::{
    Bool, Int, Json, OptJson, OptText, OptTs, OptUuid, Real, Text, Ts, Uuid, UuidList, Vector,
};

/// Every copied table, in an order that never refers to a row not yet copied.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "api_keys",
        cols: &[
            ("tenant_id", Text),
            ("id", Text),
            ("role", Text),
            ("agent_id", OptText),
            ("user_id", OptText),
            ("prefix", Text),
            ("secret_hash", Text),
            ("created_at", Ts),
            ("revoked_at", OptTs),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "agents",
        cols: &[
            ("tenant_id", Text),
            ("id", Text),
            ("memory_enabled", Bool),
            ("cluster_id", OptText),
            ("dedup_threshold", Real),
            ("settings", Json),
            ("created_at", Ts),
            ("updated_at", Ts),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "user_versions",
        cols: &[("tenant_id", Text), ("user_id", Text), ("version", Int)],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "memories",
        cols: &[
            ("tenant_id", Text),
            ("id", Uuid),
            ("user_id", Text),
            ("agent_id", OptText),
            ("pool", OptText),
            ("kind", Text),
            ("key", OptText),
            ("category", Text),
            ("importance", Int),
            ("rating", Int),
            ("content", Text),
            ("source_kind", Text),
            ("source_conversation_id", OptText),
            ("source_message_ids", UuidList),
            ("observed_at", Ts),
            ("created_at", Ts),
            ("updated_at", Ts),
            ("last_accessed_at", OptTs),
            ("access_count", Int),
            ("mention_count", Int),
            ("expires_at", OptTs),
            ("superseded_at", OptTs),
            ("superseded_by", OptUuid),
            ("metadata", Json),
            ("embedding", Vector),
            ("embedding_model", OptText),
            ("version", Int),
        ],
        fts: &["content"],
        overriding: false,
    },
    Table {
        name: "memory_events",
        cols: &[
            ("tenant_id", Text),
            ("id", Int),
            ("user_id", Text),
            ("memory_id", Uuid),
            ("event", Text),
            ("related_id", OptUuid),
            ("actor", Text),
            ("detail", Json),
            ("at", Ts),
        ],
        fts: &[],
        overriding: true,
    },
    Table {
        name: "conversations",
        cols: &[
            ("tenant_id", Text),
            ("id", Text),
            ("user_id", Text),
            ("agent_id", OptText),
            ("last_seq", Int),
            ("created_at", Ts),
            ("updated_at", Ts),
            ("rolling_summary", OptText),
            ("summary_user_turns", Int),
            ("summarized_seq", Int),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "messages",
        cols: &[
            ("tenant_id", Text),
            ("id", Uuid),
            ("conversation_id", Text),
            ("user_id", Text),
            ("agent_id", OptText),
            ("seq", Int),
            ("role", Text),
            ("content", Text),
            ("tool_name", OptText),
            ("tool_args", OptJson),
            ("tool_result", OptText),
            ("turn_id", OptText),
            ("metadata", Json),
            ("created_at", Ts),
            ("rating", Int),
            ("embedding", Vector),
            ("embedding_model", OptText),
            ("access_count", Int),
            ("last_accessed_at", OptTs),
        ],
        fts: &["content", "tool_name"],
        overriding: false,
    },
    Table {
        name: "message_dates",
        cols: &[
            ("tenant_id", Text),
            ("message_id", Uuid),
            ("user_id", Text),
            ("said_from", Ts),
            ("said_to", Ts),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "speakers",
        cols: &[("tenant_id", Text), ("user_id", Text), ("name", Text)],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "summaries",
        cols: &[
            ("tenant_id", Text),
            ("id", Uuid),
            ("user_id", Text),
            ("conversation_id", OptText),
            ("parent_id", OptUuid),
            ("depth", Int),
            ("kind", Text),
            ("content", Text),
            ("message_count", Int),
            ("earliest_at", OptTs),
            ("latest_at", OptTs),
            ("embedding", Vector),
            ("embedding_model", OptText),
            ("model", OptText),
            ("created_at", Ts),
            ("access_count", Int),
            ("last_accessed_at", OptTs),
        ],
        fts: &["content"],
        overriding: false,
    },
    Table {
        name: "summary_sources",
        cols: &[("tenant_id", Text), ("summary_id", Text), ("source_id", Text), ("ordinal", Int)],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "jobs",
        cols: &[
            ("tenant_id", Text),
            ("id", Text),
            ("user_id", OptText),
            ("kind", Text),
            ("dedup_key", OptText),
            ("lock_key", OptText),
            ("payload", Json),
            ("status", Text),
            ("attempts", Int),
            ("max_attempts", Int),
            ("run_after", Ts),
            ("lease_until", OptTs),
            ("last_error", OptText),
            ("created_at", Ts),
            ("updated_at", Ts),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "extraction_cursors",
        cols: &[
            ("tenant_id", Text),
            ("conversation_id", Text),
            ("user_id", Text),
            ("last_hash", Text),
            ("updated_at", Ts),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "recalls",
        cols: &[
            ("tenant_id", Text),
            ("turn_id", Text),
            ("memory_id", Uuid),
            ("user_id", Text),
            ("created_at", Ts),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "context_sessions",
        cols: &[
            ("tenant_id", Text),
            ("session_id", Text),
            ("user_id", Text),
            ("pool", Text),
            ("text", Text),
            ("memory_ids", UuidList),
            ("created_at", Ts),
            ("params", OptJson),
        ],
        fts: &[],
        overriding: false,
    },
    Table {
        name: "session_state",
        cols: &[
            ("tenant_id", Text),
            ("user_id", Text),
            ("agent_id", Text),
            ("session_id", Text),
            ("key", Text),
            ("value", Json),
            ("expires_at", Ts),
            ("created_at", Ts),
            ("updated_at", Ts),
        ],
        fts: &[],
        overriding: false,
    },
];

/// The statements that erase one user (GDPR): every table that holds the user's rows
/// (derived from [`TABLES`], children before parents; summary sources through their
/// summaries), then the per-user cache rows (tombstones, the change counter). API keys bound
/// to the user are kept (an operator revokes them). `p(i)` is the backend's i-th
/// placeholder; the binds are the tenant and the user, in this order. Each statement comes
/// with the table it deletes from.
pub(crate) fn erase_statements(p: fn(usize) -> String) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for t in TABLES.iter().rev() {
        let by_user = t.cols.iter().any(|c| c.0 == "user_id");
        match t.name {
            "api_keys" | "user_versions" => {}
            "summary_sources" => out.push((
                t.name,
                format!(
                    "DELETE FROM summary_sources WHERE tenant_id = {0} AND summary_id IN \
                     (SELECT CAST(id AS TEXT) FROM summaries WHERE tenant_id = {0} AND user_id = {1})",
                    p(1),
                    p(2)
                ),
            )),
            name if by_user => out.push((
                name,
                format!("DELETE FROM {name} WHERE tenant_id = {} AND user_id = {}", p(1), p(2)),
            )),
            _ => {}
        }
    }
    for name in ["memory_tombstones", "user_versions"] {
        out.push((
            name,
            format!("DELETE FROM {name} WHERE tenant_id = {} AND user_id = {}", p(1), p(2)),
        ));
    }
    out
}

/// Add `n` erased rows of `table` to the counts a GDPR erasure reports.
pub(crate) fn count_erased(counts: &mut engram_core::store::EraseCounts, table: &str, n: u64) {
    match table {
        "memories" => counts.memories += n,
        "memory_events" => counts.memory_events += n,
        "messages" => counts.messages += n,
        "conversations" => counts.conversations += n,
        "summaries" => counts.summaries += n,
        "jobs" => counts.jobs += n,
        "extraction_cursors" => counts.cursors += n,
        "recalls" => counts.recalls += n,
        "context_sessions" => counts.context_sessions += n,
        "session_state" => counts.session_state += n,
        _ => {}
    }
}

/// One value of a column ([`Ty`]) between a backend and another, or the neutral form of
/// a backup: what [`crate::backup`] and [`crate::transfer`] read and bind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Text(Option<String>),
    Int(Option<i64>),
    Real(f64),
    Bool(bool),
    Ts(Option<OffsetDateTime>),
    Uuid(Option<uuid::Uuid>),
    Json(Option<serde_json::Value>),
    Uuids(Vec<uuid::Uuid>),
    Vector(Option<Vec<f32>>),
}

/// Bind one value for PostgreSQL.
pub(crate) fn bind_pg(q: &mut Separated<'_, Postgres, &'static str>, v: Val) {
    match v {
        Val::Text(v) => q.push_bind(v),
        Val::Int(v) => q.push_bind(v),
        Val::Real(v) => q.push_bind(v),
        Val::Bool(v) => q.push_bind(v),
        Val::Ts(v) => q.push_bind(v),
        Val::Uuid(v) => q.push_bind(v),
        Val::Json(v) => q.push_bind(v),
        Val::Uuids(v) => q.push_bind(v),
        Val::Vector(v) => q.push_bind(v.map(pgvector::Vector::from)),
    };
}

/// A vector as SQLite stores it (and a backup carries it, in base64): little-endian f32s.
pub(crate) fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector a [`vec_to_blob`] blob holds (a trailing partial float is dropped).
pub(crate) fn blob_to_vec(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erasure_covers_every_table_with_user_rows() {
        let stmts = erase_statements(|_| "?".to_string());
        let tables: Vec<&str> = stmts.iter().map(|s| s.0).collect();
        for t in TABLES {
            let holds_user_rows =
                t.cols.iter().any(|c| c.0 == "user_id") || t.name == "summary_sources";
            if holds_user_rows && t.name != "api_keys" {
                assert!(tables.contains(&t.name), "erasure forgets {}", t.name);
            }
        }
        // Sources before their summaries; the counter last.
        let at = |n: &str| tables.iter().position(|t| *t == n).unwrap();
        assert!(at("summary_sources") < at("summaries"));
        assert_eq!(tables.last(), Some(&"user_versions"));
    }
}
