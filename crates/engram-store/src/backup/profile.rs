//! A restored profile value under a key the store already holds another value for (a store
//! keeps one per user, pool and key: `common::unique`): the newer statement stays active
//! and the other becomes its history.

use engram_core::error::{Error, Result};
use engram_core::model::{EventKind, MemoryEvent, MemoryId};

use super::Decoded;
use crate::tables::Val;

/// An active profile row `d` about to be restored under a key where the store holds another
/// active value (same tenant, user, pool and key): the older of the two becomes the history
/// of the newer, superseded at the newer one's `created_at` (of equal times, the stored one
/// stays). The stored row, when it is the older, gets the batch's version (`extra`), so that
/// vector caches see it change. A row already present (same id) is left to `ON CONFLICT`.
pub(super) async fn place_profile<B: crate::common::Backend>(
    tx: &mut B::Tx,
    d: &mut Decoded,
    extra: &[(&'static str, Val)],
) -> Result<Option<(String, MemoryEvent)>> {
    use crate::common::Arg::{Id, Int, OptText, Text, Ts};
    use crate::common::rows::Columns;
    let active = matches!(d.get("superseded_at"), None | Some(Val::Ts(None)));
    if d.table.name != "memories" || d.text("kind") != "profile" || !active {
        return Ok(None);
    }
    let (Some(Val::Uuid(Some(id))), Some(Val::Ts(Some(created)))) =
        (d.get("id").cloned(), d.get("created_at").cloned())
    else {
        return Ok(None);
    };
    let (tenant, user, key) = (d.text("tenant_id"), d.text("user_id"), d.text("key"));
    let present = "SELECT 1 AS one FROM memories WHERE tenant_id = ? AND id = ?";
    if B::tx_opt(tx, present, &[Text(&tenant), Id(id)]).await?.is_some() {
        return Ok(None);
    }
    let pool = match d.get("pool") {
        Some(Val::Text(p)) => p.clone(),
        _ => None,
    };
    let sql = "SELECT id, created_at FROM memories WHERE tenant_id = ? AND user_id = ? \
               AND kind = 'profile' AND key = ? AND superseded_at IS NULL \
               AND pool IS NOT DISTINCT FROM ? AND id <> ? LIMIT 1";
    let args = [Text(&tenant), Text(&user), Text(&key), OptText(pool.as_deref()), Id(id)];
    let Some(row) = B::tx_opt(tx, sql, &args).await? else { return Ok(None) };
    let (stored, stored_at) = (row.id("id")?, row.ts("created_at")?);
    let event = |old: uuid::Uuid, new: uuid::Uuid, at| MemoryEvent {
        memory_id: MemoryId(old),
        event: EventKind::Superseded,
        related_id: Some(MemoryId(new)),
        actor: "import".into(),
        detail: serde_json::json!({ "reason": "a restored value under the same profile key" }),
        at,
    };
    if created <= stored_at {
        d.set("superseded_at", Val::Ts(Some(stored_at)));
        d.set("superseded_by", Val::Uuid(Some(stored)));
        return Ok(Some((user, event(id, stored, stored_at))));
    }
    let version = extra.iter().find_map(|e| match e {
        ("version", Val::Int(v)) => *v,
        _ => None,
    });
    let sql = "UPDATE memories SET superseded_at = ?, superseded_by = ?, updated_at = ?, \
               version = ? WHERE tenant_id = ? AND id = ?";
    let version = version.ok_or_else(|| Error::internal("a restored memory without version"))?;
    let args = [Ts(created), Id(id), Ts(created), Int(version), Text(&tenant), Id(stored)];
    B::tx_run(tx, sql, &args).await.map_err(B::fault)?;
    Ok(Some((user, event(stored, id, created))))
}
