//! `engram migrate --from <data dir> --to postgres://…`: move a whole SQLite store to
//! PostgreSQL, then prove it.
//!
//! The copy itself is [`engram_store::transfer`] (table by table, vectors as they are, into an
//! empty database, batches of one transaction each, resumable). This module adds the
//! operator's side: progress on stderr, the summary (text or `--json`) on stdout, and the
//! verification, on unless `--no-verify`:
//!
//! 1. rows per table, source against target;
//! 2. every vector and its model id, bit for bit;
//! 3. for every tenant and every user, the `engram export` lines (memories with their whole
//!    history and events) and the user's messages, read through each store's own `Store`
//!    implementation and compared as the JSON the API prints;
//! 4. API keys (role, binding, prefix, dates) and agents with their settings.
//!
//! Any difference fails the command (exit 1) and is listed.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use engram_core::model::{AgentId, MemoryId, TenantId, UserId};
use engram_core::store::prelude::*;
use engram_store::postgres::PgStore;
use engram_store::transfer::{self, CopyOptions, Progress, SqliteSource};
use serde::Serialize;
use serde_json::{Value, json};

use crate::api::dto::{AgentDto, EventDto, ExportLine, MessageDto};

/// Options of `engram migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// The SQLite data dir to copy (holds engram.db). Stop the servers that use it first.
    #[arg(long)]
    pub from: PathBuf,
    /// The PostgreSQL database to copy into (postgres://…); it must hold no engram data.
    #[arg(long)]
    pub to: String,
    /// Rows per batch; each batch is one transaction.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Finish a copy that was interrupted (same --from and --to).
    #[arg(long)]
    pub resume: bool,
    /// Skip the verification (row counts, vectors, exports of every user, keys, agents).
    #[arg(long)]
    pub no_verify: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct TableSummary {
    source: u64,
    target: u64,
    copied: u64,
}

#[derive(Debug, Default, Serialize)]
struct Verification {
    tenants: usize,
    users: usize,
    memories_compared: usize,
    messages_compared: usize,
    vectors_compared: u64,
    keys_compared: usize,
    agents_compared: usize,
    differences: Vec<String>,
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The differences are reported, at most this many.
const MAX_DIFFS: usize = 50;

pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    if !(args.to.starts_with("postgres://") || args.to.starts_with("postgresql://")) {
        bail!(
            "--to must be a PostgreSQL URL (postgres://user:password@host:port/database), got '{}'",
            redact(&args.to)
        );
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let source = SqliteSource::open(&args.from)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.public_message()))?;
    let target = engram_store::open_postgres(&args.to)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the target: {}", e.public_message()))?;
    let progress = |p: Progress<'_>| {
        // One line per table when it starts and ends, and every 10 batches in between.
        if p.done == 0 || p.done == p.total || (p.done / args.batch as u64).is_multiple_of(10) {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "migrate: {:<20} {:>9} / {} rows", p.table, p.done, p.total);
        }
    };
    let report = transfer::copy(
        &source,
        &target,
        CopyOptions { batch: args.batch, resume: args.resume },
        &progress,
    )
    .await
    .map_err(|e| anyhow::anyhow!("{}", e.public_message()))?;
    let mut tables = serde_json::Map::new();
    let mut count_diffs = Vec::new();
    for t in &report.tables {
        if t.source != t.target {
            count_diffs.push(format!(
                "{}: {} rows in the source, {} in the target",
                t.table, t.source, t.target
            ));
        }
        tables.insert(
            t.table.to_string(),
            serde_json::to_value(TableSummary {
                source: t.source,
                target: t.target,
                copied: t.copied,
            })?,
        );
    }
    let verification = if args.no_verify {
        None
    } else {
        eprintln!("migrate: verifying (row counts, vectors, exports of every user, keys, agents)");
        let mut v = verify(&source, &target).await?;
        count_diffs.append(&mut v.differences);
        v.differences = count_diffs.clone();
        Some(v)
    };
    let ok = count_diffs.is_empty();
    let summary = json!({
        "from": args.from.display().to_string(),
        "to": redact(&args.to),
        "resumed": report.resumed,
        "embedding_model": report.embedding_space.as_ref().map(|s| s.0.clone()),
        "embedding_dims": report.embedding_space.as_ref().map(|s| s.1),
        "tables": tables,
        "verified": verification.as_ref().map(|_| ok),
        "verification": verification,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("copied {} into {}", args.from.display(), redact(&args.to));
        for t in &report.tables {
            println!("  {:<20} {:>9} rows", t.table, t.target);
        }
        match &report.embedding_space {
            Some((m, d)) => println!(
                "vectors: {m} ({d} dims), copied as they are; start engram on the new database with the same --embedder"
            ),
            None => println!("vectors: none stored"),
        }
        match &verification {
            None => println!("not verified (--no-verify)"),
            Some(v) if ok => println!(
                "verified: same rows per table, {} vectors bit for bit, the exports of {} users in {} tenants, {} keys and {} agents are identical",
                v.vectors_compared, v.users, v.tenants, v.keys_compared, v.agents_compared
            ),
            Some(_) => {}
        }
    }
    if !ok {
        for d in &count_diffs {
            eprintln!("difference: {d}");
        }
        bail!(
            "the target differs from the source ({} difference{}); it is marked as a finished copy but should not be used",
            count_diffs.len(),
            if count_diffs.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// Push a difference unless there are enough already.
fn differ(v: &mut Verification, what: String) {
    if v.differences.len() < MAX_DIFFS {
        v.differences.push(what);
    }
}

/// The export lines of a user, as `engram export` prints them, in id order.
async fn export_lines(
    store: &dyn Store,
    tenant: &TenantId,
    user: &UserId,
) -> anyhow::Result<Vec<Value>> {
    let (memories, events) =
        store.user_memories(tenant, user).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut by_memory: HashMap<MemoryId, Vec<EventDto>> = HashMap::new();
    for ev in &events {
        by_memory.entry(ev.memory_id).or_default().push(ev.into());
    }
    let mut lines = Vec::with_capacity(memories.len());
    for m in &memories {
        let ev = by_memory.remove(&m.id).unwrap_or_default();
        let line = ExportLine { kind: "memory".into(), memory: m.into(), events: ev };
        lines.push(serde_json::to_value(&line)?);
    }
    lines.sort_by(|a, b| a["memory"]["id"].as_str().cmp(&b["memory"]["id"].as_str()));
    Ok(lines)
}

async fn message_lines(
    store: &dyn Store,
    tenant: &TenantId,
    user: &UserId,
) -> anyhow::Result<Vec<Value>> {
    let mut msgs: Vec<Value> = store
        .user_messages(tenant, user)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .iter()
        .map(|m| serde_json::to_value(MessageDto::from(m)))
        .collect::<Result<_, _>>()?;
    msgs.sort_by(|a, b| {
        (a["conversation_id"].as_str(), a["seq"].as_i64())
            .cmp(&(b["conversation_id"].as_str(), b["seq"].as_i64()))
    });
    Ok(msgs)
}

fn key_lines(keys: &[engram_core::store::ApiKey]) -> Vec<Value> {
    let mut out: Vec<Value> = keys.iter().map(crate::api::dto::key_json).collect();
    out.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    out
}

/// Compare two lists of JSON records; name the first few that differ.
fn compare(v: &mut Verification, what: &str, src: &[Value], dst: &[Value]) {
    if src == dst {
        return;
    }
    if src.len() != dst.len() {
        differ(v, format!("{what}: {} in the source, {} in the target", src.len(), dst.len()));
    }
    for (a, b) in src.iter().zip(dst) {
        if a != b {
            differ(v, format!("{what}: source {a} / target {b}"));
        }
    }
}

async fn verify(source: &SqliteSource, target: &Arc<PgStore>) -> anyhow::Result<Verification> {
    let mut v = Verification::default();
    let e = |e: engram_core::Error| anyhow::anyhow!("{}", e.public_message());
    // The same rows, through each store's own implementation of the contract.
    let src: Arc<dyn Store> = engram_store::open_sqlite(source.dir()).await.map_err(e)?;
    let dst: &dyn Store = target.as_ref();

    let (n, vdiffs) =
        transfer::compare_vectors(source, target.pool(), MAX_DIFFS).await.map_err(e)?;
    v.vectors_compared = n;
    for d in vdiffs {
        differ(&mut v, format!("vector of {} {}: {}", d.table, d.id, d.what));
    }
    if src.embedding_space().await.map_err(e)? != dst.embedding_space().await.map_err(e)? {
        differ(&mut v, "the recorded embedding space differs".into());
    }

    let sk = key_lines(&src.list_api_keys(None).await.map_err(e)?);
    let dk = key_lines(&dst.list_api_keys(None).await.map_err(e)?);
    v.keys_compared = sk.len();
    compare(&mut v, "API keys", &sk, &dk);

    let tenants = source.tenants().await.map_err(e)?;
    v.tenants = tenants.len();
    for (tenant, agent) in source.agents().await.map_err(e)? {
        let t = TenantId::parse(tenant).map_err(e)?;
        let a = AgentId::parse(agent).map_err(e)?;
        let sa = src
            .get_agent(&t, &a)
            .await
            .map_err(e)?
            .map(|a| serde_json::to_value(AgentDto::from(&a)));
        let da = dst
            .get_agent(&t, &a)
            .await
            .map_err(e)?
            .map(|a| serde_json::to_value(AgentDto::from(&a)));
        let (sa, da) = (sa.transpose()?, da.transpose()?);
        v.agents_compared += 1;
        if sa != da {
            differ(&mut v, format!("agent {a} of tenant {t}: source {sa:?} / target {da:?}"));
        }
    }
    for tenant in tenants {
        let t = TenantId::parse(tenant).map_err(e)?;
        let mut users: BTreeSet<String> =
            src.list_users(&t).await.map_err(e)?.iter().map(ToString::to_string).collect();
        let dst_users: BTreeSet<String> =
            dst.list_users(&t).await.map_err(e)?.iter().map(ToString::to_string).collect();
        if users != dst_users {
            differ(&mut v, format!("users of tenant {t}: source {users:?} / target {dst_users:?}"));
        }
        users.extend(dst_users);
        for u in users {
            let u = UserId::parse(u).map_err(e)?;
            v.users += 1;
            let (sm, dm) =
                (export_lines(src.as_ref(), &t, &u).await?, export_lines(dst, &t, &u).await?);
            v.memories_compared += sm.len();
            compare(&mut v, &format!("export of user {u} in tenant {t}"), &sm, &dm);
            let (sm, dm) =
                (message_lines(src.as_ref(), &t, &u).await?, message_lines(dst, &t, &u).await?);
            v.messages_compared += sm.len();
            compare(&mut v, &format!("messages of user {u} in tenant {t}"), &sm, &dm);
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}
