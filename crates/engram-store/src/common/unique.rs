//! What the store refuses so that two racing writers cannot both pass a check the engine
//! made on a read taken before their transaction: a second active profile fact under one
//! key, and a fact marked [`NewMemory::unique`] that an identical active fact already
//! holds. Checked inside the write transaction, after the owner's counter is bumped (the
//! per-user lock), so every writer of the user sees the rows of the writers before it.

use engram_core::error::{Error, Result};
use engram_core::model::{Kind, MemoryId, TenantId};
use engram_core::store::NewMemory;
use std::collections::BTreeSet;
use time::OffsetDateTime;
use uuid::Uuid;

use super::Arg::{self, Id, OptText, Text, Ts};
use super::Backend;
use super::rows::Columns;

/// Refuse (`Conflict`) new rows that would break an invariant the engine checked on a read
/// taken before this transaction, so that two racing writers cannot both pass it: an active
/// profile fact under a key that already has one (besides `replacing`, the row being
/// superseded), and a row marked [`NewMemory::unique`] whose exact content is already an
/// active, unexpired fact of the same user, kind, agent and pool. Runs after the owners'
/// counters are bumped: the bump holds each user's lock until commit, so every writer of
/// the user sees the rows of the writers before it.
pub(crate) async fn check_free<B: Backend>(
    tx: &mut B::Tx,
    tenant: &TenantId,
    rows: &[NewMemory],
    replacing: Option<MemoryId>,
) -> Result<()> {
    let active = |r: &&NewMemory| r.memory.superseded_at.is_none();
    for r in rows.iter().filter(active).filter(|r| r.memory.kind == Kind::Profile) {
        let m = &r.memory;
        let sql = "SELECT id FROM memories WHERE tenant_id = ? AND user_id = ? AND kind = 'profile' \
             AND key = ? AND superseded_at IS NULL AND pool IS NOT DISTINCT FROM ? AND id <> ? \
             LIMIT 1";
        let except = replacing.map_or(m.id.0, |o| o.0);
        let args = [
            Text(tenant.as_str()),
            Text(m.user_id.as_str()),
            OptText(m.key.as_deref()),
            OptText(m.pool.as_deref()),
            Id(except),
        ];
        if let Some(row) = B::tx_opt(tx, sql, &args).await? {
            let id: Uuid = row.id("id")?;
            return Err(Error::Conflict(format!(
                "profile key {:?} already has an active fact ({id})",
                m.key.as_deref().unwrap_or_default()
            )));
        }
    }
    let unique: Vec<&NewMemory> = rows.iter().filter(active).filter(|r| r.unique).collect();
    let owners: BTreeSet<&str> = unique.iter().map(|r| r.memory.user_id.as_str()).collect();
    for user in owners {
        let mine: Vec<&&NewMemory> =
            unique.iter().filter(|r| r.memory.user_id.as_str() == user).collect();
        let texts = Arg::Texts(mine.iter().map(|r| r.memory.content.as_str()).collect());
        // Through the index of active contents' starts (`memories_active_content`): the
        // same expression, the first 48 characters on both backends.
        let starts: Vec<&str> = mine.iter().map(|r| start(&r.memory.content)).collect();
        let sql = format!(
            "SELECT id, content, kind, agent_id, pool FROM memories WHERE tenant_id = ? \
             AND user_id = ? AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > ?) \
             AND substr(content, 1, 48){in_list} AND content{in_list}",
            in_list = B::IN_LIST
        );
        let now = Ts(OffsetDateTime::now_utc());
        let args = [Text(tenant.as_str()), Text(user), now, Arg::Texts(starts), texts];
        let found = B::tx_all(tx, &sql, &args).await?;
        for row in &found {
            let (content, kind) = (row.text("content")?, row.text("kind")?);
            let (agent, pool) = (row.opt_text("agent_id")?, row.opt_text("pool")?);
            let same = |r: &&&NewMemory| {
                let m = &r.memory;
                m.content == content
                    && m.kind.as_str() == kind
                    && m.agent_id.as_ref().map(|a| a.as_str()) == agent.as_deref()
                    && m.pool.as_deref() == pool.as_deref()
            };
            if mine.iter().any(same) {
                let id: Uuid = row.id("id")?;
                return Err(Error::Conflict(format!("the same fact is already stored ({id})")));
            }
        }
    }
    Ok(())
}

/// The first 48 characters of `s`: the indexed start of a fact's content (SQLite's and
/// PostgreSQL's `substr` count characters too).
fn start(s: &str) -> &str {
    s.char_indices().nth(48).map_or(s, |(i, _)| &s[..i])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_start_is_48_characters_not_bytes() {
        assert_eq!(super::start("short"), "short");
        let long = "é".repeat(60);
        assert_eq!(super::start(&long).chars().count(), 48);
    }
}
