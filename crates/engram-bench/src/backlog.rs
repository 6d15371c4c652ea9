//! `engram-bench backlog`: searches while a message backlog is embedded in the background,
//! through the whole engine (issue 14).
//!
//! One process, the real store (SQLite in a temp dir, or a fresh PostgreSQL database), the
//! real embedding lane (`engram_core::jobs::run_workers`, no LLM), phases side by side:
//!
//! 1. **idle**: one user's messages (LoCoMo's first conversation, each session a
//!    conversation, `<speaker>: <text>`) are embedded; then `--queries` message searches
//!    (LoCoMo's questions) run one after the other with the workers idle: p50/p95;
//! 2. **drain alone**: `--backlog` messages are appended (LoCoMo's sessions again, for other
//!    users, 20 users), then the lane starts and embeds them with nothing else running:
//!    messages/s from its start to an empty backlog;
//! 3. **searches during a backlog**: another backlog is appended to the running lane, and
//!    searches run one after the other (`--pause-ms` apart) until it is empty: p50/p95, and
//!    messages/s from the first append to an empty backlog; then the same searches again on
//!    the idle lane over the same, now larger, store (the fair "idle" to compare with);
//! 4. **append → searchable**: `--fresh` conversations of 50 messages are appended one at a
//!    time on the idle lane; each is timed from the append call to the moment every one of
//!    its messages has a vector (a search by meaning can find it): p50/p95.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_core::engine::{
    AgentInput, Engine, EngineConfig, MessageInput, SearchInput, SearchSource,
};
use engram_core::jobs::{WorkerConfig, run_workers};
use engram_core::model::{
    AgentId, ConversationId, KeyRole, MessageRole, Principal, TenantId, UserId,
};
use engram_core::store::Store;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::ScratchArgs;
use crate::backend::{self, Backend, PgDatabase};
use crate::embedder::EmbedderChoice;
use crate::locomo;
use crate::report::{self, Latency};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "minilm")]
    embedder: EmbedderChoice,
    /// The LoCoMo JSON file.
    #[arg(long, default_value = locomo::DEFAULT_DATA)]
    data: std::path::PathBuf,
    /// Messages appended for the background (phases 2 and 3 each).
    #[arg(long, default_value_t = 10_000)]
    backlog: usize,
    /// Searches timed idle (phase 1); phase 3 runs as many as the backlog lasts.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Pause between two searches of phase 3 (a client's think time).
    #[arg(long, default_value_t = 50)]
    pause_ms: u64,
    /// 50-message conversations timed from append to searchable (phase 4).
    #[arg(long, default_value_t = 20)]
    fresh: usize,
    /// Skip phase 2 (only the searches during a backlog and the append → searchable times).
    #[arg(long)]
    no_drain_alone: bool,
    /// PostgreSQL server (`postgres://…`) instead of SQLite (a fresh database, dropped after).
    #[arg(long)]
    database_url: Option<String>,
    #[command(flatten)]
    scratch: ScratchArgs,
}

#[derive(Debug, Serialize)]
struct Output {
    environment: String,
    backend: Backend,
    embedder: String,
    backlog: usize,
    idle: Latency,
    drain_alone_per_s: Option<f64>,
    during: Latency,
    during_per_s: f64,
    idle_after: Latency,
    searchable: Latency,
}

/// A conversation's messages, as a client appends them.
fn inputs(turns: &[&str]) -> Vec<MessageInput> {
    turns
        .iter()
        .enumerate()
        .map(|(i, t)| MessageInput {
            role: if i % 2 == 0 { MessageRole::User } else { MessageRole::Assistant },
            content: (*t).to_string(),
            ..Default::default()
        })
        .collect()
}

/// LoCoMo's sessions (each a list of `<speaker>: <text>` turns) of every conversation.
fn sessions(convs: &[locomo::Conversation]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for c in convs {
        let mut current = None;
        for m in &c.messages {
            if current != Some(m.session) {
                out.push(Vec::new());
                current = Some(m.session);
            }
            if let Some(s) = out.last_mut() {
                s.push(m.plain.clone());
            }
        }
    }
    out
}

struct Bench {
    database_url: Option<String>,
    engine: Engine,
    store: Arc<dyn Store>,
    tenant: TenantId,
    agent: Principal,
    model: String,
}

impl Bench {
    /// Append `n` messages: the sessions in turn, round after round, for 20 users
    /// (`<prefix>-<user>`), each session a new conversation.
    async fn append_backlog(
        &self,
        sessions: &[Vec<String>],
        n: usize,
        prefix: &str,
    ) -> anyhow::Result<()> {
        let mut left = n;
        let mut k = 0usize;
        while left > 0 {
            let s = &sessions[k % sessions.len()];
            let take = s.len().min(left);
            let turns: Vec<&str> = s[..take].iter().map(String::as_str).collect();
            let user = UserId::parse(format!("{prefix}-{}", k % 20))?;
            let conv = ConversationId::parse(format!("{prefix}-c{k}"))?;
            self.engine
                .append_messages(&self.agent, conv, Some(user), None, inputs(&turns))
                .await?;
            left -= take;
            k += 1;
        }
        Ok(())
    }

    /// PostgreSQL only: statistics after a bulk load, as autovacuum would gather them (without
    /// them the planner's choice for the message queries depends on whether autovacuum has
    /// run yet, `requests` saw 15–30 ms or 370 ms for the same search).
    async fn analyze(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.database_url {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(url).await?;
            sqlx::query("ANALYZE").execute(&mut c).await?;
            c.close().await?;
        }
        Ok(())
    }

    async fn backlog(&self) -> anyhow::Result<u64> {
        Ok(self.engine.backlog_all().await?.messages_unembedded)
    }

    async fn search(&self, user: &UserId, q: &str) -> anyhow::Result<Duration> {
        let input = SearchInput {
            query: q.to_string(),
            user_id: Some(user.clone()),
            sources: vec![SearchSource::Messages],
            limit: 10,
            min_score: Some(0.0),
            ..Default::default()
        };
        let t = Instant::now();
        let hits = self.engine.search(&self.agent, input).await?;
        let took = t.elapsed();
        anyhow::ensure!(!hits.is_empty(), "a message search found nothing");
        Ok(took)
    }

    /// Wait until every message has a vector; the time since `from`.
    async fn drained(&self, from: Instant) -> anyhow::Result<Duration> {
        while self.backlog().await? > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(from.elapsed())
    }
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    let convs = locomo::load(&a.data)?;
    let all_sessions = sessions(&convs);
    let first = sessions(&convs[..1]);
    let questions: Vec<String> =
        convs.iter().flat_map(|c| c.queries.iter().map(|q| q.text.clone())).collect();
    anyhow::ensure!(!questions.is_empty() && !all_sessions.is_empty(), "no LoCoMo data");

    let embedder = a.embedder.build()?;
    let dir = a.scratch.tempdir()?;
    let db = match &a.database_url {
        Some(url) => Some(PgDatabase::fresh(url, "backlog", a.scratch.keep_data).await?),
        None => None,
    };
    let store = backend::open(db.as_ref().map(|d| d.url.as_str()), dir.path()).await?;
    let engine = Engine::new(store.clone(), embedder.clone(), EngineConfig::default()).await?;
    let tenant = TenantId::default_tenant();
    let admin = Principal { tenant: tenant.clone(), role: KeyRole::Admin };
    let agent_id = AgentId::parse("bench-agent")?;
    engine
        .put_agent(
            &admin,
            agent_id.clone(),
            AgentInput {
                memory_enabled: true,
                cluster_id: None,
                dedup_threshold: None,
                settings: serde_json::json!({}),
            },
        )
        .await?;
    let agent = Principal { tenant: tenant.clone(), role: KeyRole::Agent(agent_id) };
    let model = embedder.model_id().to_string();
    let database_url = db.as_ref().map(|d| d.url.clone());
    let b = Bench { database_url, engine, store, tenant, agent, model };

    // Phase 1: the searched user's messages, embedded; searches on an idle lane.
    let user = UserId::parse("searched")?;
    for (i, s) in first.iter().enumerate() {
        let conv = ConversationId::parse(format!("searched-{i}"))?;
        let turns: Vec<&str> = s.iter().map(String::as_str).collect();
        b.engine
            .append_messages(&b.agent, conv.clone(), Some(user.clone()), None, inputs(&turns))
            .await?;
        b.engine.services().embed_conversation(&b.tenant, &conv).await?;
    }
    b.analyze().await?;
    let mut idle = Vec::with_capacity(a.queries);
    for q in questions.iter().cycle().take(a.queries) {
        idle.push(b.search(&user, q).await?);
    }
    let idle = Latency::of(&idle);
    eprintln!("idle: p50 {:.1} ms, p95 {:.1} ms", idle.p50_ms, idle.p95_ms);

    // Phase 2: the lane alone, on a backlog appended before it starts.
    let start_workers = || {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_workers(
            b.engine.services().clone(),
            WorkerConfig::default(),
            shutdown.clone(),
        ));
        (shutdown, task)
    };
    let mut drain_alone_per_s = None;
    if !a.no_drain_alone {
        b.append_backlog(&all_sessions, a.backlog, "alone").await?;
        let (shutdown, task) = start_workers();
        let t = Instant::now();
        let took = b.drained(t).await?;
        let rate = a.backlog as f64 / took.as_secs_f64();
        eprintln!(
            "drain alone: {} messages in {:.1} s, {rate:.1}/s",
            a.backlog,
            took.as_secs_f64()
        );
        drain_alone_per_s = Some(rate);
        shutdown.cancel();
        task.await?;
    }
    let (shutdown, workers) = start_workers();

    // Phase 3: searches while the lane drains a backlog.
    let t = Instant::now();
    b.append_backlog(&all_sessions, a.backlog, "during").await?;
    b.analyze().await?;
    let mut during = Vec::new();
    let mut qs = questions.iter().cycle();
    loop {
        for _ in 0..10 {
            let q = qs.next().map_or("", String::as_str);
            during.push(b.search(&user, q).await?);
            tokio::time::sleep(Duration::from_millis(a.pause_ms)).await;
        }
        if b.backlog().await? == 0 {
            break;
        }
    }
    let during_per_s = a.backlog as f64 / t.elapsed().as_secs_f64();
    let during = Latency::of(&during);
    eprintln!(
        "during: {} searches, p50 {:.1} ms, p95 {:.1} ms; {during_per_s:.1} messages/s",
        during.n, during.p50_ms, during.p95_ms
    );

    // The same searches on the idle lane again, over the grown store.
    b.analyze().await?;
    let mut after = Vec::with_capacity(a.queries);
    for q in questions.iter().cycle().take(a.queries) {
        after.push(b.search(&user, q).await?);
    }
    let after = Latency::of(&after);

    // Phase 4: append → searchable, one 50-message conversation at a time.
    let fifty: Vec<&str> =
        all_sessions.iter().flatten().map(String::as_str).cycle().take(50).collect();
    let mut searchable = Vec::with_capacity(a.fresh);
    for i in 0..a.fresh {
        let conv = ConversationId::parse(format!("fresh-{i}"))?;
        let user = UserId::parse(format!("fresh-{}", i % 5))?;
        let t = Instant::now();
        b.engine.append_messages(&b.agent, conv.clone(), Some(user), None, inputs(&fifty)).await?;
        while !b.store.messages_needing_vectors(&b.tenant, &conv, &b.model, 1).await?.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        searchable.push(t.elapsed());
    }
    let searchable = Latency::of(&searchable);
    shutdown.cancel();
    workers.await?;

    let out = Output {
        environment: report::environment(),
        backend: if db.is_some() { Backend::Postgres } else { Backend::Sqlite },
        embedder: b.model.clone(),
        backlog: a.backlog,
        idle,
        drain_alone_per_s,
        during,
        during_per_s,
        idle_after: after,
        searchable,
    };
    drop(b);
    if let Some(db) = db {
        db.cleanup().await?;
    }
    if json {
        return report::print_json(&out);
    }
    println!(
        "{} · {:?} · {} · backlog {}",
        out.environment, out.backend, out.embedder, out.backlog
    );
    let ms =
        |l: &Latency| vec![l.n.to_string(), format!("{:.1}", l.p50_ms), format!("{:.1}", l.p95_ms)];
    let mut rows = Vec::new();
    let mut row = |name: &str, l: Option<&Latency>, rate: Option<f64>| {
        let mut r = vec![name.to_string()];
        r.extend(l.map_or_else(|| vec![String::new(); 3], ms));
        r.push(rate.map_or_else(String::new, |r| format!("{r:.1}")));
        rows.push(r);
    };
    row("searches, idle", Some(&out.idle), None);
    row("background alone", None, out.drain_alone_per_s);
    row("searches during the backlog", Some(&out.during), Some(out.during_per_s));
    row("searches, idle again (after the backlogs)", Some(&out.idle_after), None);
    row("append 50 messages → searchable", Some(&out.searchable), None);
    print!(
        "{}",
        report::table(&["phase", "n", "p50 ms", "p95 ms", "background messages/s"], &rows)
    );
    Ok(())
}
