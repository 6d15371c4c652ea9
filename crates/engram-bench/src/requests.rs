//! `requests`: the latency of single requests on the engine's request path, as an agent
//! key makes them: `remember` of one fact at a time (validation, the agent's settings, PII,
//! embedding, dedup, the insert), and a search of the transcript (`"sources":
//! ["messages"]`) over one user's messages. Fresh SQLite store in a temp dir, or a fresh
//! PostgreSQL database with `--database-url`; the clock covers the engine call only.

use std::time::{Duration, Instant};

use engram_core::engine::{
    AgentInput, Engine, EngineConfig, MessageInput, RememberInput, SearchInput, SearchSource,
};
use engram_core::model::{
    AgentId, ConversationId, KeyRole, MessageRole, Principal, TenantId, UserId,
};
use serde::Serialize;

use crate::backend::{self, Backend, PgDatabase};
use crate::embedder::EmbedderChoice;
use crate::report::{self, Latency};
use crate::{ScratchArgs, corpus};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "builtin")]
    embedder: EmbedderChoice,
    /// Single `remember` calls timed (0: skip).
    #[arg(long, default_value_t = 500)]
    remember: usize,
    /// Messages of the searched user (in conversations of 50; 0: skip the message search).
    #[arg(long, default_value_t = 10_000)]
    messages: usize,
    /// Also write the summary DAG over the messages (a leaf per 20, a branch per 4 leaves,
    /// as the compactor shapes it; the text of a leaf is its messages' text, cut to 1,200
    /// characters) and search messages and summaries together.
    #[arg(long)]
    summaries: bool,
    /// Timed message searches.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// `limit` of each search.
    #[arg(long, default_value_t = 10)]
    limit: usize,
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
    remember: Option<Latency>,
    messages: usize,
    message_search: Option<Latency>,
    /// The first message search alone, in ms: on SQLite it loads the user's vectors into the
    /// in-process cache (it is also one of `message_search`'s samples).
    first_search_ms: Option<f64>,
}

pub async fn run(a: Args, json: bool) -> anyhow::Result<()> {
    let embedder = a.embedder.build()?;
    let dir = a.scratch.tempdir()?;
    let db = match &a.database_url {
        Some(url) => Some(PgDatabase::fresh(url, "requests", a.scratch.keep_data).await?),
        None => None,
    };
    let store = backend::open(db.as_ref().map(|d| d.url.as_str()), dir.path()).await?;
    let engine = Engine::new(store.clone(), embedder.clone(), EngineConfig::default()).await?;
    let tenant = TenantId::default_tenant();
    let admin = Principal { tenant: tenant.clone(), role: KeyRole::Admin };
    let agent_id = AgentId::parse("bench-agent")?;
    let agent = Principal { tenant: tenant.clone(), role: KeyRole::Agent(agent_id.clone()) };
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
    let user = UserId::parse("bench-user")?;

    let mut remember = None;
    if a.remember > 0 {
        let facts = corpus::facts(a.remember, 7);
        let mut samples = Vec::with_capacity(facts.len());
        for f in facts {
            let input =
                RememberInput { user_id: Some(user.clone()), content: f, ..Default::default() };
            let t = Instant::now();
            engine.remember(&agent, input).await?;
            samples.push(t.elapsed());
        }
        remember = Some(Latency::of(&samples));
    }

    let mut message_search = None;
    let mut first_search_ms = None;
    if a.messages > 0 {
        let texts = corpus::facts(a.messages, 11);
        for (c, chunk) in texts.chunks(50).enumerate() {
            let conv = ConversationId::parse(format!("conv-{c}"))?;
            let msgs = chunk
                .iter()
                .enumerate()
                .map(|(i, t)| MessageInput {
                    role: if i % 2 == 0 { MessageRole::User } else { MessageRole::Assistant },
                    content: t.replace("The user", "I"),
                    ..Default::default()
                })
                .collect();
            let stored = engine
                .append_messages(&agent, conv.clone(), Some(user.clone()), None, msgs)
                .await?;
            engine.services().embed_conversation(&tenant, &conv).await?;
            if a.summaries {
                summarize(&store, &embedder, &tenant, &user, &conv, &stored).await?;
            }
        }
        if let Some(db) = &db {
            // As autovacuum would after a bulk load: without statistics the planner's choice
            // for the message queries depends on whether autovacuum has run yet (seen here:
            // 15-30 ms or 370 ms p50 at 10k messages for the same code).
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&db.url).await?;
            sqlx::query("ANALYZE").execute(&mut c).await?;
            c.close().await?;
        }
        let queries = corpus::queries(a.queries, 13);
        let mut samples: Vec<Duration> = Vec::with_capacity(queries.len());
        for q in queries {
            let input = SearchInput {
                query: q,
                user_id: Some(user.clone()),
                sources: if a.summaries {
                    vec![SearchSource::Messages, SearchSource::Summaries]
                } else {
                    vec![SearchSource::Messages]
                },
                limit: a.limit,
                // Every candidate returned, as before scores could abstain: the same work
                // for every query, comparable with earlier runs.
                min_score: Some(0.0),
                ..Default::default()
            };
            let t = Instant::now();
            let hits = engine.search(&agent, input).await?;
            samples.push(t.elapsed());
            anyhow::ensure!(!hits.is_empty(), "a message search found nothing");
        }
        first_search_ms = samples.first().map(|d| d.as_secs_f64() * 1000.0);
        message_search = Some(Latency::of(&samples));
    }
    let out = Output {
        environment: report::environment(),
        backend: if db.is_some() { Backend::Postgres } else { Backend::Sqlite },
        embedder: embedder.model_id().to_string(),
        remember,
        messages: a.messages,
        message_search,
        first_search_ms,
    };
    drop(engine);
    drop(store);
    if let Some(db) = db {
        db.cleanup().await?;
    }
    if json {
        return report::print_json(&out);
    }
    let row = |name: &str, l: &Option<Latency>| {
        l.as_ref().map(|l| {
            vec![
                name.to_string(),
                l.n.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
            ]
        })
    };
    let rows: Vec<Vec<String>> = [
        row("remember (one fact, agent key)", &out.remember),
        row(
            &format!(
                "message search ({} messages{}, limit {})",
                a.messages,
                if a.summaries { " + their summaries" } else { "" },
                a.limit
            ),
            &out.message_search,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    println!("{} · {:?} · {}", out.environment, out.backend, out.embedder);
    print!("{}", report::table(&["request", "n", "p50 ms", "p95 ms", "p99 ms"], &rows));
    if let Some(ms) = out.first_search_ms {
        println!("first message search (loads the vectors on SQLite): {ms:.2} ms");
    }
    Ok(())
}

/// The summary DAG of one conversation as the compactor shapes it: a leaf per 20 messages
/// (its text: the messages', cut to 1,200 characters), a branch per 4 leaves; embedded.
async fn summarize(
    store: &std::sync::Arc<dyn engram_core::store::Store>,
    embedder: &std::sync::Arc<dyn engram_core::embed::Embedder>,
    tenant: &TenantId,
    user: &UserId,
    conv: &ConversationId,
    messages: &[engram_core::model::Message],
) -> anyhow::Result<()> {
    use engram_core::model::{Summary, SummaryId, SummaryKind};
    use engram_core::store::{NewSummary, SummaryClaim};
    let summary = |depth: i64, text: String, n: i64, from: time::OffsetDateTime, to| Summary {
        id: SummaryId::new(),
        tenant_id: tenant.clone(),
        user_id: user.clone(),
        conversation_id: conv.clone(),
        parent_id: None,
        depth,
        kind: SummaryKind::at_depth(depth),
        content: text.chars().take(1_200).collect(),
        message_count: n,
        earliest_at: from,
        latest_at: to,
        model: Some("bench".into()),
        created_at: engram_core::model::now(),
        access_count: 0,
        last_accessed_at: None,
    };
    let mut leaves = Vec::new();
    let mut after = 0;
    for chunk in messages.chunks(20).filter(|c| c.len() == 20) {
        let text: Vec<&str> = chunk.iter().map(|m| m.content.as_str()).collect();
        let s = summary(0, text.join(" "), 20, chunk[0].created_at, chunk[19].created_at);
        let v = embedder.embed(std::slice::from_ref(&s.content)).await?.pop();
        let through = chunk[19].seq;
        let new = NewSummary {
            summary: s.clone(),
            sources: chunk.iter().map(|m| m.id.0).collect(),
            embedding: v.map(|v| (embedder.model_id().to_string(), v)),
            claim: SummaryClaim::Messages { after_seq: after, through_seq: through },
        };
        anyhow::ensure!(store.insert_summary(tenant, new).await?, "leaf claim lost");
        after = through;
        leaves.push(s);
    }
    for group in leaves.chunks(4).filter(|g| g.len() == 4) {
        let text: Vec<&str> = group.iter().map(|l| l.content.as_str()).collect();
        let s = summary(1, text.join(" "), 80, group[0].earliest_at, group[3].latest_at);
        let v = embedder.embed(std::slice::from_ref(&s.content)).await?.pop();
        let new = NewSummary {
            summary: s,
            sources: group.iter().map(|l| l.id.0).collect(),
            embedding: v.map(|v| (embedder.model_id().to_string(), v)),
            claim: SummaryClaim::Children,
        };
        anyhow::ensure!(store.insert_summary(tenant, new).await?, "branch claim lost");
    }
    Ok(())
}
