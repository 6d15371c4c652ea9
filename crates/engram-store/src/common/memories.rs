//! The [`engram_core::store::MemoryStore`] logic that is the same on both backends: writing a
//! memory row and its events, reading, rating, purging, superseding and confirming facts, the
//! supersession chain, profile lookup, recalls and context sessions; and the per-user export
//! and statistics of the maintenance side. Batch inserts, filtered listing and search stay
//! with each backend.

use engram_core::error::{Error, Result};
use engram_core::model::{
    AgentId, Category, ConversationId, EventKind, Memory, MemoryEvent, MemoryId, Message, TenantId,
    UserId,
};
use engram_core::store::{
    Activity, Backlog, ContextSession, ExtractionBatch, MaintenanceStore, NewMemory, StoreStats,
};

use super::Arg::{Id, Ids, Int, Json, OptId, OptJson, OptText, OptTs, OptVector, Small, Text, Ts};
use std::collections::{BTreeSet, HashMap};

use time::OffsetDateTime;
use uuid::Uuid;

use super::rows::{self, Columns};
use super::{Arg, Backend, limit};

/// The columns of `memories` that a backend's memory decoder reads.
pub const MEMORY_COLS: &str = "id, tenant_id, user_id, agent_id, pool, kind, key, category, importance, rating, content, \
     source_kind, source_conversation_id, source_message_ids, observed_at, created_at, updated_at, \
     last_accessed_at, access_count, mention_count, expires_at, superseded_at, superseded_by, metadata, embedding_model";

/// The columns [`memory_args`] gives values for.
const INSERT_COLS: &str = "tenant_id, id, user_id, agent_id, pool, kind, key, category, importance, \
     rating, content, source_kind, source_conversation_id, source_message_ids, observed_at, \
     created_at, updated_at, last_accessed_at, access_count, mention_count, expires_at, \
     superseded_at, superseded_by, metadata, embedding, embedding_model, version";

/// The values of one new memory row, written at `version` of its user's counter.
pub(crate) fn memory_args(row: &NewMemory, version: i64) -> Vec<Arg<'_>> {
    let m = &row.memory;
    vec![
        Text(m.tenant_id.as_str()),
        Id(m.id.0),
        Text(m.user_id.as_str()),
        OptText(m.agent_id.as_ref().map(AgentId::as_str)),
        OptText(m.pool.as_deref()),
        Text(m.kind.as_str()),
        OptText(m.key.as_deref()),
        Text(m.category.as_str()),
        Small(i16::from(m.importance.get())),
        Int(m.rating),
        Text(&m.content),
        Text(m.source.kind.as_str()),
        OptText(m.source.conversation_id.as_ref().map(ConversationId::as_str)),
        Ids(m.source.message_ids.iter().map(|i| i.0).collect()),
        Ts(m.observed_at),
        Ts(m.created_at),
        Ts(m.updated_at),
        OptTs(m.last_accessed_at),
        Int(m.access_count),
        Int(m.mention_count),
        OptTs(m.expires_at),
        OptTs(m.superseded_at),
        OptId(m.superseded_by.map(|s| s.0)),
        Json(&m.metadata),
        OptVector(row.vector.as_deref()),
        OptText(m.embedding_model.as_deref()),
        Int(version),
    ]
}

/// Open the transaction of a batch insert: refuse a bad batch ([`check_insert`], asking
/// `store` for its embedding space) and bump each user's counter once; the transaction and
/// each user's version. None for an empty batch.
pub(crate) async fn begin_insert<B: Backend, S: MaintenanceStore>(
    b: &B,
    store: &S,
    tenant: &TenantId,
    rows: &[NewMemory],
) -> Result<Option<(B::Tx, HashMap<String, i64>)>> {
    if rows.is_empty() {
        return Ok(None);
    }
    check_insert(store, tenant, rows).await?;
    let mut tx = b.begin_write().await?;
    let users = rows.iter().map(|r| r.memory.user_id.as_str().to_string()).collect();
    let versions = bump_users::<B>(&mut tx, tenant, users).await?;
    super::unique::check_free::<B>(&mut tx, tenant, rows, None).await?;
    Ok(Some((tx, versions)))
}

/// Refuse a batch of new memories with a vector of another dimension than the store's
/// (asking the store only when the batch has vectors) or a row of another tenant.
async fn check_insert<S: MaintenanceStore>(
    store: &S,
    tenant: &TenantId,
    rows: &[NewMemory],
) -> Result<()> {
    if let Some(dims) = rows.iter().find_map(|r| r.vector.as_ref().map(Vec::len))
        && let Some((_, d)) = store.embedding_space().await?
        && rows.iter().any(|r| r.vector.as_ref().is_some_and(|v| v.len() != d))
    {
        return Err(Error::Unprocessable(format!("vector of {dims} dimensions in a store of {d}")));
    }
    if rows.iter().any(|r| r.memory.tenant_id != *tenant) {
        return Err(Error::internal("memory of another tenant in insert batch"));
    }
    Ok(())
}

/// Bump several users' counters inside `tx`, in a fixed order (so two transactions never
/// wait on each other in a cycle); each user's new version.
pub(crate) async fn bump_users<B: Backend>(
    tx: &mut B::Tx,
    tenant: &TenantId,
    users: BTreeSet<String>,
) -> Result<HashMap<String, i64>> {
    let mut out = HashMap::with_capacity(users.len());
    for u in users {
        let v = B::bump(tx, tenant.as_str(), &u).await?;
        out.insert(u, v);
    }
    Ok(out)
}

/// Store the vectors of `model_id` for memories (those that no longer exist are passed
/// over), as a new version of each owner's memories.
pub(crate) async fn set_vectors<B: Backend>(
    b: &B,
    tenant: &TenantId,
    model_id: &str,
    rows: Vec<(MemoryId, Vec<f32>)>,
) -> Result<()> {
    let mut tx = b.begin_write().await?;
    let sql = format!("SELECT id, user_id FROM memories WHERE tenant_id = ? AND id{}", B::IN_LIST);
    let ids = Ids(rows.iter().map(|r| r.0.0).collect());
    let mut owner: HashMap<Uuid, String> = HashMap::new();
    for r in B::tx_all(&mut tx, &sql, &[Text(tenant.as_str()), ids]).await? {
        owner.insert(r.id("id")?, r.text("user_id")?);
    }
    let versions = bump_users::<B>(&mut tx, tenant, owner.values().cloned().collect()).await?;
    for (id, v) in &rows {
        let Some(user) = owner.get(&id.0) else { continue };
        let version = versions.get(user).copied().unwrap_or_default();
        B::tx_run(
            &mut tx,
            "UPDATE memories SET embedding = ?, embedding_model = ?, version = ? \
             WHERE tenant_id = ? AND id = ?",
            &[OptVector(Some(v)), Text(model_id), Int(version), Text(tenant.as_str()), Id(id.0)],
        )
        .await
        .map_err(B::fault)?;
    }
    B::commit(tx).await
}

/// Insert one memory row and its events inside a write transaction.
pub(crate) async fn insert<B: Backend>(
    tx: &mut B::Tx,
    row: &NewMemory,
    version: i64,
) -> Result<()> {
    let m = &row.memory;
    let (cols, values, index) = B::memory_index(m);
    let marks = vec!["?"; INSERT_COLS.split(", ").count()].join(", ");
    let sql = format!("INSERT INTO memories ({INSERT_COLS}{cols}) VALUES ({marks}{values})");
    let mut args = memory_args(row, version);
    args.extend(index);
    B::tx_run(tx, &sql, &args).await.map_err(|e| {
        if B::is_duplicate(&e) {
            return Error::Conflict(format!("memory {} already exists", m.id));
        }
        B::fault(e)
    })?;
    for e in &row.events {
        insert_event::<B>(tx, m.tenant_id.as_str(), m.user_id.as_str(), e).await?;
    }
    Ok(())
}

/// Record one event of a user's memory inside a write transaction.
pub(crate) async fn insert_event<B: Backend>(
    tx: &mut B::Tx,
    tenant: &str,
    user: &str,
    e: &MemoryEvent,
) -> Result<()> {
    B::tx_run(
        tx,
        "INSERT INTO memory_events (tenant_id, user_id, memory_id, event, related_id, actor, detail, at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        &[
            Text(tenant),
            Text(user),
            Id(e.memory_id.0),
            Text(e.event.as_str()),
            OptId(e.related_id.map(|r| r.0)),
            Text(&e.actor),
            Json(&e.detail),
            Ts(e.at),
        ],
    )
    .await
    .map_err(B::fault)?;
    Ok(())
}

pub(crate) async fn get<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MemoryId,
) -> Result<Option<Memory>> {
    let sql = format!("SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND id = ?");
    let row = b.read_opt(&sql, &[Text(tenant.as_str()), Id(id.0)]).await?;
    row.as_ref().map(rows::memory).transpose()
}

/// The memories of a tenant among `ids`, in any order.
pub(crate) async fn get_many<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[MemoryId],
) -> Result<Vec<Memory>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let select = format!("SELECT {MEMORY_COLS} FROM memories");
    let ids = Ids(ids.iter().map(|i| i.0).collect());
    super::by_ids(b, &select, tenant.as_str(), ids, rows::memory).await
}

/// Count an access to each of `ids` at `at`.
pub(crate) async fn touch<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[MemoryId],
    at: OffsetDateTime,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    // Sorted and deduplicated: the primary-key scan then locks rows in one order.
    let ids: BTreeSet<Uuid> = ids.iter().map(|i| i.0).collect();
    let sql = format!(
        "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? \
         WHERE tenant_id = ? AND id{}",
        B::IN_LIST
    );
    b.write(&sql, &[Ts(at), Text(tenant.as_str()), Ids(ids.into_iter().collect())]).await?;
    Ok(())
}

/// Remember that `ids` were recalled for turn `turn_id` (the ones that exist; once each).
pub(crate) async fn record_recall<B: Backend>(
    b: &B,
    tenant: &TenantId,
    turn_id: &str,
    ids: &[MemoryId],
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO recalls (tenant_id, turn_id, memory_id, user_id, created_at) \
         SELECT tenant_id, ?, id, user_id, ? FROM memories WHERE tenant_id = ? AND id{} \
         ON CONFLICT DO NOTHING",
        B::IN_LIST
    );
    let ids = Ids(ids.iter().map(|i| i.0).collect());
    let now = Ts(OffsetDateTime::now_utc());
    b.write(&sql, &[Text(turn_id), now, Text(tenant.as_str()), ids]).await?;
    Ok(())
}

/// The owner of a memory row, read inside a write transaction (owners never change, so
/// this needs no lock).
async fn owner<B: Backend>(tx: &mut B::Tx, tenant: &TenantId, id: MemoryId) -> Result<String> {
    let sql = "SELECT user_id FROM memories WHERE tenant_id = ? AND id = ?";
    let row = B::tx_opt(tx, sql, &[Text(tenant.as_str()), Id(id.0)]).await?;
    let row = row.ok_or_else(|| Error::not_found(format!("memory {id}")))?;
    row.text("user_id")
}

/// Add `delta` to a memory's rating and record `event`; the new rating.
pub(crate) async fn rate<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MemoryId,
    delta: i64,
    event: &MemoryEvent,
) -> Result<i64> {
    let mut tx = b.begin_write().await?;
    let row = B::tx_opt(
        &mut tx,
        "UPDATE memories SET rating = rating + ? WHERE tenant_id = ? AND id = ? RETURNING user_id, rating",
        &[Int(delta), Text(tenant.as_str()), Id(id.0)],
    )
    .await?
    .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
    let (user, rating) = (row.text("user_id")?, row.int("rating")?);
    insert_event::<B>(&mut tx, tenant.as_str(), &user, event).await?;
    B::commit(tx).await?;
    Ok(rating)
}

/// Delete a memory row with its events and recalls, clear links to it and leave a
/// tombstone for the vector caches.
pub(crate) async fn purge<B: Backend>(b: &B, tenant: &TenantId, id: MemoryId) -> Result<()> {
    let mut tx = b.begin_write().await?;
    let user = owner::<B>(&mut tx, tenant, id).await?;
    // Bump the user's counter first: it is the per-user write lock on PostgreSQL.
    let v = B::bump(&mut tx, tenant.as_str(), &user).await?;
    let key = [Text(tenant.as_str()), Id(id.0)];
    let sql = "DELETE FROM memories WHERE tenant_id = ? AND id = ?";
    if B::tx_run(&mut tx, sql, &key).await.map_err(B::fault)? == 0 {
        return Err(Error::not_found(format!("memory {id}")));
    }
    for sql in [
        "DELETE FROM memory_events WHERE tenant_id = ? AND memory_id = ?",
        // Successors and predecessors keep their rows; links to the purged id are cleared.
        "UPDATE memories SET superseded_by = NULL WHERE tenant_id = ? AND superseded_by = ?",
        "DELETE FROM recalls WHERE tenant_id = ? AND memory_id = ?",
    ] {
        B::tx_run(&mut tx, sql, &key).await.map_err(B::fault)?;
    }
    // The user's cached context blocks may quote the purged text: gone too (the next
    // call of each session chooses its block again).
    let sql = "DELETE FROM context_sessions WHERE tenant_id = ? AND user_id = ?";
    B::tx_run(&mut tx, sql, &[Text(tenant.as_str()), Text(&user)]).await.map_err(B::fault)?;
    B::tx_run(
        &mut tx,
        "INSERT INTO memory_tombstones (tenant_id, user_id, memory_id, version) VALUES (?, ?, ?, ?)",
        &[Text(tenant.as_str()), Text(&user), Id(id.0), Int(v)],
    )
    .await
    .map_err(B::fault)?;
    B::commit(tx).await
}

/// Supersede `old` in a transaction of its own (see `Store::supersede`).
pub(crate) async fn supersede<B: Backend>(
    b: &B,
    tenant: &TenantId,
    old: MemoryId,
    new: Option<&NewMemory>,
    event: &MemoryEvent,
) -> Result<()> {
    let mut tx = b.begin_write().await?;
    supersede_in::<B>(&mut tx, tenant, old, new, event).await?;
    B::commit(tx).await
}

/// Supersede `old` inside a write transaction.
pub(crate) async fn supersede_in<B: Backend>(
    tx: &mut B::Tx,
    tenant: &TenantId,
    old: MemoryId,
    new: Option<&NewMemory>,
    event: &MemoryEvent,
) -> Result<()> {
    let user = owner::<B>(tx, tenant, old).await?;
    // User lock first, then the row: the order every writer uses.
    let v = B::bump(tx, tenant.as_str(), &user).await?;
    let sql =
        format!("SELECT superseded_at FROM memories WHERE tenant_id = ? AND id = ?{}", B::LOCK);
    let row = B::tx_opt(tx, &sql, &[Text(tenant.as_str()), Id(old.0)])
        .await?
        .ok_or_else(|| Error::not_found(format!("memory {old}")))?;
    if !row.is_null("superseded_at")? {
        return Err(Error::Conflict(format!("memory {old} is already superseded")));
    }
    if let Some(n) = new {
        if n.memory.tenant_id != *tenant || n.memory.user_id.as_str() != user {
            return Err(Error::internal("successor of another tenant or user"));
        }
        super::unique::check_free::<B>(tx, tenant, std::slice::from_ref(n), Some(old)).await?;
        insert::<B>(tx, n, v).await?;
    }
    B::tx_run(
        tx,
        "UPDATE memories SET superseded_at = ?1, superseded_by = ?2, updated_at = ?1, version = ?3 \
         WHERE tenant_id = ?4 AND id = ?5",
        &[
            Ts(event.at),
            OptId(new.map(|n| n.memory.id.0)),
            Int(v),
            Text(tenant.as_str()),
            Id(old.0),
        ],
    )
    .await
    .map_err(B::fault)?;
    insert_event::<B>(tx, tenant.as_str(), &user, event).await
}

/// Confirm a restated fact in a transaction of its own.
pub(crate) async fn confirm<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MemoryId,
    event: &MemoryEvent,
) -> Result<()> {
    let mut tx = b.begin_write().await?;
    confirm_in::<B>(&mut tx, tenant, id, event).await?;
    B::commit(tx).await
}

/// Confirm a restated fact inside a write transaction.
pub(crate) async fn confirm_in<B: Backend>(
    tx: &mut B::Tx,
    tenant: &TenantId,
    id: MemoryId,
    event: &MemoryEvent,
) -> Result<()> {
    let row = B::tx_opt(
        tx,
        "UPDATE memories SET updated_at = ?, mention_count = mention_count + 1 \
         WHERE tenant_id = ? AND id = ? RETURNING user_id",
        &[Ts(event.at), Text(tenant.as_str()), Id(id.0)],
    )
    .await?
    .ok_or_else(|| Error::not_found(format!("memory {id}")))?;
    let user = row.text("user_id")?;
    insert_event::<B>(tx, tenant.as_str(), &user, event).await
}

/// Apply what extraction found in a conversation, with the conversation's new cursor, in
/// one transaction.
pub(crate) async fn apply_extraction<B: Backend>(
    b: &B,
    tenant: &TenantId,
    conversation: &ConversationId,
    user: &UserId,
    batch: ExtractionBatch,
) -> Result<()> {
    if batch.adds.iter().any(|r| r.memory.tenant_id != *tenant || r.memory.user_id != *user) {
        return Err(Error::internal("extracted memory of another tenant or user"));
    }
    let mut tx = b.begin_write().await?;
    if B::USER_LOCK || !batch.adds.is_empty() {
        let v = B::bump(&mut tx, tenant.as_str(), user.as_str()).await?;
        super::unique::check_free::<B>(&mut tx, tenant, &batch.adds, None).await?;
        for row in &batch.adds {
            insert::<B>(&mut tx, row, v).await?;
        }
    }
    for (old, new, event) in &batch.supersedes {
        supersede_in::<B>(&mut tx, tenant, *old, new.as_ref(), event).await?;
    }
    for (id, event) in &batch.confirms {
        confirm_in::<B>(&mut tx, tenant, *id, event).await?;
    }
    B::tx_run(
        &mut tx,
        "INSERT INTO extraction_cursors (tenant_id, conversation_id, user_id, last_hash, updated_at) \
         VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, conversation_id) DO UPDATE SET \
         last_hash = excluded.last_hash, updated_at = excluded.updated_at",
        &[
            Text(tenant.as_str()),
            Text(conversation.as_str()),
            Text(user.as_str()),
            Text(&batch.cursor),
            Ts(OffsetDateTime::now_utc()),
        ],
    )
    .await
    .map_err(B::fault)?;
    B::commit(tx).await
}

/// The supersession chain through memory `id`: its predecessors, it, its successors.
pub(crate) async fn chain<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MemoryId,
) -> Result<Vec<Memory>> {
    let Some(start) = get(b, tenant, id).await? else {
        return Err(Error::not_found(format!("memory {id}")));
    };
    // Walk back through predecessors, then forward through successors.
    let mut chain = vec![start.clone()];
    let mut cur = start.id;
    let sql = format!(
        "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND superseded_by = ? LIMIT 1"
    );
    for _ in 0..10_000 {
        let Some(p) = b.read_opt(&sql, &[Text(tenant.as_str()), Id(cur.0)]).await? else { break };
        let m = rows::memory(&p)?;
        cur = m.id;
        chain.insert(0, m);
    }
    let mut next = start.superseded_by;
    while let Some(n) = next {
        let Some(m) = get(b, tenant, n).await? else { break };
        next = m.superseded_by;
        chain.push(m);
        if chain.len() > 10_000 {
            break;
        }
    }
    Ok(chain)
}

/// The supersession chain through memory `id` ([`chain`]) and the events of its rows, by
/// time (then insertion order).
pub(crate) async fn history<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: MemoryId,
) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
    let chain = chain(b, tenant, id).await?;
    let ids = Ids(chain.iter().map(|m| m.id.0).collect());
    let sql = format!(
        "SELECT * FROM memory_events WHERE tenant_id = ? AND memory_id{} ORDER BY at, id",
        B::IN_LIST
    );
    let rows = b.read_all(&sql, &[Text(tenant.as_str()), ids]).await?;
    let events = rows.iter().map(rows::event).collect::<Result<Vec<_>>>()?;
    Ok((chain, events))
}

/// The recorded embedding space: `(model id, dimensions)`.
pub(crate) async fn embedding_space<B: Backend>(b: &B) -> Result<Option<(String, usize)>> {
    let sql = "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'embedding_dims')";
    let (mut model, mut dims) = (None, None);
    for r in b.read_all(sql, &[]).await? {
        let value = r.text("value")?;
        match r.text("key")?.as_str() {
            "embedding_model" => model = Some(value),
            _ => dims = value.parse::<usize>().ok(),
        }
    }
    Ok(model.zip(dims))
}

/// `Unprocessable` unless the recorded space `have` is the one of new vectors, `want`.
pub(crate) fn same_space(have: (&str, usize), want: (&str, usize)) -> Result<()> {
    let ((m, d), (model_id, dims)) = (have, want);
    if have == want {
        return Ok(());
    }
    Err(Error::Unprocessable(format!(
        "this store holds vectors of '{m}' ({d} dimensions); refusing vectors of '{model_id}' ({dims})"
    )))
}

/// The activity behind the charts ([`engram_core::store::Activity`]).
pub(crate) async fn activity<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: Option<&UserId>,
    since: OffsetDateTime,
) -> Result<Activity> {
    let who = if user.is_some() { " AND user_id = ?" } else { "" };
    let mut args = vec![Text(tenant.as_str())];
    args.extend(user.map(|u| Text(u.as_str())));
    let count = |r: &B::Row| -> Result<u64> { Ok(r.int("n")?.max(0) as u64) };
    let sql = format!(
        "SELECT category, count(*) AS n FROM memories WHERE tenant_id = ?{who} \
         AND superseded_at IS NULL GROUP BY category ORDER BY n DESC, category"
    );
    let mut categories = Vec::new();
    for r in b.read_all(&sql, &args).await? {
        categories.push((Category::parse(&r.text("category")?)?, count(&r)?));
    }
    let mut dated = args.clone();
    dated.push(Ts(since));
    let per_day = |table: &str| {
        let day = B::day("created_at");
        let sql = format!(
            "SELECT {day} AS d, count(*) AS n FROM {table} WHERE tenant_id = ?{who} \
             AND created_at >= ? GROUP BY d ORDER BY d"
        );
        let dated = dated.clone();
        async move {
            let rows = b.read_all(&sql, &dated).await?;
            rows.iter().map(|r| Ok((r.int("d")?, count(r)?))).collect::<Result<Vec<_>>>()
        }
    };
    let memories_per_day = per_day("memories").await?;
    let messages_per_day = per_day("messages").await?;
    let sql = format!(
        "SELECT event, count(*) AS n FROM memory_events WHERE tenant_id = ?{who} \
         AND at >= ? AND actor = ? \
         AND event IN ('created', 'superseded', 'forgotten', 'confirmed') \
         AND NOT (event = 'created' AND related_id IS NOT NULL) GROUP BY event"
    );
    let mut decisions = Vec::new();
    let extractor = engram_core::model::actor_name_system();
    dated.push(Text(&extractor));
    for r in b.read_all(&sql, &dated).await? {
        decisions.push((EventKind::parse(&r.text("event")?)?, count(&r)?));
    }
    Ok(Activity { categories, memories_per_day, messages_per_day, decisions })
}

/// The condition of a rating filter on the column `<p>rating`.
pub(crate) fn rating_condition(o: std::cmp::Ordering, p: &str) -> String {
    let op = match o {
        std::cmp::Ordering::Less => "<",
        std::cmp::Ordering::Equal => "=",
        std::cmp::Ordering::Greater => ">",
    };
    format!(" AND {p}rating {op} 0")
}

/// The user's current profile fact under `key` in `pool` (no pool: the user-wide one).
pub(crate) async fn find_profile<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: &UserId,
    pool: Option<&str>,
    key: &str,
) -> Result<Option<Memory>> {
    let sql = format!(
        "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND user_id = ? AND kind = 'profile' \
         AND key = ? AND superseded_at IS NULL AND pool IS NOT DISTINCT FROM ? ORDER BY id DESC LIMIT 1"
    );
    let args = [Text(tenant.as_str()), Text(user.as_str()), Text(key), OptText(pool)];
    let row = b.read_opt(&sql, &args).await?;
    row.as_ref().map(rows::memory).transpose()
}

/// The memories recalled for a turn, in the order they were recorded.
pub(crate) async fn recalled<B: Backend>(
    b: &B,
    tenant: &TenantId,
    turn_id: &str,
) -> Result<Vec<MemoryId>> {
    let rows = b
        .read_all(
            "SELECT memory_id FROM recalls WHERE tenant_id = ? AND turn_id = ? \
             ORDER BY created_at, memory_id",
            &[Text(tenant.as_str()), Text(turn_id)],
        )
        .await?;
    rows.iter().map(|r| Ok(MemoryId(r.id("memory_id")?))).collect()
}

pub(crate) async fn get_context_session<B: Backend>(
    b: &B,
    tenant: &TenantId,
    session_id: &str,
    user: &UserId,
    pool: Option<&str>,
) -> Result<Option<ContextSession>> {
    let row = b
        .read_opt(
            "SELECT * FROM context_sessions WHERE tenant_id = ? AND session_id = ? AND user_id = ? \
             AND pool = ?",
            &[
                Text(tenant.as_str()),
                Text(session_id),
                Text(user.as_str()),
                Text(pool.unwrap_or("")),
            ],
        )
        .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(ContextSession {
        session_id: r.text("session_id")?,
        user_id: UserId::parse(r.text("user_id")?)?,
        pool: Some(r.text("pool")?).filter(|p| !p.is_empty()),
        text: r.text("text")?,
        memory_ids: r.ids("memory_ids")?.into_iter().map(MemoryId).collect(),
        created_at: r.ts("created_at")?,
        params: r.opt_json("params")?,
    }))
}

pub(crate) async fn put_context_session<B: Backend>(
    b: &B,
    tenant: &TenantId,
    s: &ContextSession,
) -> Result<()> {
    b.write(
        "INSERT INTO context_sessions (tenant_id, session_id, user_id, pool, text, memory_ids, created_at, params) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, session_id, user_id, pool) DO UPDATE SET \
         text = excluded.text, memory_ids = excluded.memory_ids, created_at = excluded.created_at, \
         params = excluded.params",
        &[
            Text(tenant.as_str()),
            Text(&s.session_id),
            Text(s.user_id.as_str()),
            Text(s.pool.as_deref().unwrap_or("")),
            Text(&s.text),
            Ids(s.memory_ids.iter().map(|i| i.0).collect()),
            Ts(s.created_at),
            OptJson(s.params.as_ref()),
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn facts_version<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: &UserId,
) -> Result<i64> {
    let row = b
        .read_opt(
            "SELECT version FROM user_versions WHERE tenant_id = ? AND user_id = ?",
            &[Text(tenant.as_str()), Text(user.as_str())],
        )
        .await?;
    row.map_or(Ok(0), |r| r.int("version"))
}

/// Memories without a vector of `model_id` (profiles never get one): (id, content).
pub(crate) async fn needing_vectors<B: Backend>(
    b: &B,
    tenant: &TenantId,
    model_id: &str,
    n: usize,
) -> Result<Vec<(MemoryId, String)>> {
    let sql = format!(
        "SELECT id, content FROM memories WHERE tenant_id = ? AND kind <> 'profile' \
         AND (embedding IS NULL OR embedding_model IS NULL OR embedding_model <> ?) \
         ORDER BY id LIMIT {}",
        limit(n)
    );
    let rows = b.read_all(&sql, &[Text(tenant.as_str()), Text(model_id)]).await?;
    rows.iter().map(|r| Ok((MemoryId(r.id("id")?), r.text("content")?))).collect()
}

/// Every tenant with memories or messages, in byte order.
pub(crate) async fn tenants<B: Backend>(b: &B) -> Result<Vec<TenantId>> {
    let sql = format!(
        "SELECT tenant_id FROM (SELECT tenant_id FROM memories UNION SELECT tenant_id FROM messages) t \
         ORDER BY tenant_id{}",
        B::BYTE_ORDER
    );
    let rows = b.read_all(&sql, &[]).await?;
    rows.iter().map(|r| TenantId::parse(r.text("tenant_id")?)).collect()
}

/// Every user of a tenant with memories or conversations, in byte order.
pub(crate) async fn users<B: Backend>(b: &B, tenant: &TenantId) -> Result<Vec<UserId>> {
    let sql = format!(
        "SELECT user_id FROM (SELECT user_id FROM memories WHERE tenant_id = ?1 \
         UNION SELECT user_id FROM conversations WHERE tenant_id = ?1) u ORDER BY user_id{}",
        B::BYTE_ORDER
    );
    let rows = b.read_all(&sql, &[Text(tenant.as_str())]).await?;
    rows.iter().map(|r| UserId::parse(r.text("user_id")?)).collect()
}

/// A user's messages, by conversation and sequence (GDPR export).
pub(crate) async fn user_messages<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: &UserId,
) -> Result<Vec<Message>> {
    let sql = format!(
        "SELECT * FROM messages WHERE tenant_id = ? AND user_id = ? \
         ORDER BY conversation_id{}, seq",
        B::BYTE_ORDER
    );
    let rows = b.read_all(&sql, &[Text(tenant.as_str()), Text(user.as_str())]).await?;
    rows.iter().map(rows::message).collect()
}

/// A user's memories by id and their events by time (GDPR export).
pub(crate) async fn user_memories<B: Backend>(
    b: &B,
    tenant: &TenantId,
    user: &UserId,
) -> Result<(Vec<Memory>, Vec<MemoryEvent>)> {
    let key = [Text(tenant.as_str()), Text(user.as_str())];
    let sql = format!(
        "SELECT {MEMORY_COLS} FROM memories WHERE tenant_id = ? AND user_id = ? ORDER BY id"
    );
    let rows = b.read_all(&sql, &key).await?;
    let memories = rows.iter().map(rows::memory).collect::<Result<Vec<_>>>()?;
    let sql = "SELECT * FROM memory_events WHERE tenant_id = ? AND user_id = ? ORDER BY at, id";
    let rows = b.read_all(sql, &key).await?;
    let events = rows.iter().map(rows::event).collect::<Result<Vec<_>>>()?;
    Ok((memories, events))
}

/// [`engram_core::store::Store::backlog`]. The messages without a vector are counted
/// through the partial index `messages_unembedded` (migration 13): only those rows are read.
pub(crate) async fn backlog<B: Backend>(b: &B, tenant: Option<&TenantId>) -> Result<Backlog> {
    let (scope, args) = match tenant {
        Some(t) => ("tenant_id = ?1 AND ", vec![Text(t.as_str())]),
        None => ("", vec![]),
    };
    let sql = format!(
        "SELECT \
          (SELECT count(*) FROM messages WHERE {scope}embedding IS NULL AND content != '') AS unembedded, \
          (SELECT min(created_at) FROM jobs WHERE {scope}kind = 'embed_messages' AND status IN ('pending', 'running')) AS emb_since, \
          (SELECT count(*) FROM jobs WHERE {scope}kind = 'extract' AND status IN ('pending', 'running')) AS ex_pending, \
          (SELECT min(created_at) FROM jobs WHERE {scope}kind = 'extract' AND status IN ('pending', 'running')) AS ex_since"
    );
    let r = b
        .read_opt(&sql, &args)
        .await?
        .ok_or_else(|| Error::internal("database: backlog returned no row"))?;
    Ok(Backlog {
        messages_unembedded: r.int("unembedded")?.max(0) as u64,
        embedding_since: r.opt_ts("emb_since")?,
        extractions_pending: r.int("ex_pending")?.max(0) as u64,
        extraction_since: r.opt_ts("ex_since")?,
    })
}

/// A tenant's counts; `space` is the store's embedding space.
pub(crate) async fn stats<B: Backend>(
    b: &B,
    tenant: &TenantId,
    space: Option<(String, usize)>,
) -> Result<StoreStats> {
    let r = b
        .read_opt(
            "SELECT \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND superseded_at IS NULL) AS active, \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND superseded_at IS NOT NULL) AS superseded, \
              (SELECT count(*) FROM memories WHERE tenant_id = ?1 AND (embedding IS NOT NULL OR kind = 'profile') AND superseded_at IS NULL) AS with_vec, \
              (SELECT count(*) FROM (SELECT user_id FROM memories WHERE tenant_id = ?1 \
                UNION SELECT user_id FROM conversations WHERE tenant_id = ?1) u) AS users, \
              (SELECT count(*) FROM conversations WHERE tenant_id = ?1) AS convs, \
              (SELECT count(*) FROM messages WHERE tenant_id = ?1) AS msgs, \
              (SELECT count(*) FROM messages WHERE tenant_id = ?1 AND embedding IS NULL) AS msgs_novec, \
              (SELECT CAST(coalesce(sum(last_seq - summarized_seq), 0) AS BIGINT) FROM conversations WHERE tenant_id = ?1) AS unsummarized, \
              (SELECT count(*) FROM summaries WHERE tenant_id = ?1) AS summaries, \
              (SELECT count(*) FROM summaries WHERE tenant_id = ?1 AND embedding IS NOT NULL) AS summaries_vec, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'compact' AND status IN ('pending', 'running')) AS co_pending, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'compact' AND status = 'done') AS co_done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'compact' AND status = 'failed') AS co_failed, \
              (SELECT coalesce(max(depth) + 1, 0) FROM summaries WHERE tenant_id = ?1) AS depth, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'pending') AS pending, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'running') AS running, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'failed') AS failed, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND status = 'done') AS done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'done') AS ex_done, \
              (SELECT count(*) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'failed') AS ex_failed, \
              (SELECT max(updated_at) FROM jobs WHERE tenant_id = ?1 AND kind = 'extract' AND status = 'done') AS ex_last",
            &[Text(tenant.as_str())],
        )
        .await?
        .ok_or_else(|| Error::internal("database: statistics returned no row"))?;
    let g = |c: &str| -> Result<u64> { Ok(r.int(c)?.max(0) as u64) };
    Ok(StoreStats {
        memories_active: g("active")?,
        memories_superseded: g("superseded")?,
        memories_with_vector: g("with_vec")?,
        users: g("users")?,
        conversations: g("convs")?,
        messages: g("msgs")?,
        // All messages less those without a vector: the latter are counted through the
        // partial index of migration 13, never by reading every message row.
        messages_with_vector: g("msgs")?.saturating_sub(g("msgs_novec")?),
        messages_unsummarized: g("unsummarized")?,
        summaries: g("summaries")?,
        summaries_with_vector: g("summaries_vec")?,
        summary_depth: g("depth")?,
        compactions_pending: g("co_pending")?,
        compactions_done: g("co_done")?,
        compactions_failed: g("co_failed")?,
        jobs_pending: g("pending")?,
        jobs_running: g("running")?,
        jobs_failed: g("failed")?,
        jobs_done: g("done")?,
        extractions_done: g("ex_done")?,
        extractions_failed: g("ex_failed")?,
        last_extraction_at: r.opt_ts("ex_last")?,
        embedding_model: space.as_ref().map(|s| s.0.clone()),
        embedding_dims: space.map(|s| s.1 as u64),
    })
}
