//! The command line: `serve`, `mcp` (MCP over stdio, in [`crate::mcp`]), `remember`,
//! `recall`, `forget`, `list`, `export`, `import`, `keys`, `migrate` (SQLite → PostgreSQL, in
//! [`crate::migrate`]). Store commands open the data dir directly (SQLite WAL lets them run
//! beside a server on the same dir) and act as admin of `--tenant` (default `default`);
//! `engram mcp` can act as an API key instead (`--key` / `ENGRAM_API_KEY`). `--json` prints
//! the same wire shapes as the REST API.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Parser, Subcommand, ValueEnum};
use engram_core::engine::{Engine, ListInput, Operator, RememberInput, SearchInput, SearchSource};
use engram_core::model::{
    AgentId, Category, Importance, JobStatus, KeyRole, Kind, MemoryId, Principal, TenantId, UserId,
};
use engram_core::store::BackupScope;

use crate::api::dto::{self, MemoryDto, key_json};
use crate::api::error::cli_error as err;
use crate::api::results::SearchResultDto;
use crate::settings::{CommonArgs, ServeArgs, Settings, WorkerArgs};

/// `println!` for command output: a closed pipe (`engram recall … | head`) ends the command
/// quietly with status 0, as Unix tools do, instead of a panic; another write error is the
/// command's error.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(e.into());
        }
    }};
}

#[derive(Debug, Parser)]
#[command(name = "engram", version, about = "Long-term memory for LLM agents")]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server (REST API, MCP at /mcp, /healthz, /openapi.json).
    Serve(ServeArgs),
    /// Serve the MCP tools over stdin/stdout, for an MCP client that starts engram itself.
    Mcp {
        /// Tenant to act in, as admin (like the other store commands). Not with --key,
        /// whose tenant it is.
        #[arg(long, default_value = "default", conflicts_with = "key")]
        tenant: String,
        /// Act as this API key instead: its tenant and role (an agent or user key narrows
        /// what the client can see and do).
        #[arg(long, env = "ENGRAM_API_KEY", hide_env_values = true)]
        key: Option<String>,
    },
    /// Store a memory.
    Remember {
        /// The fact, e.g. "The user lives in Bengaluru."
        content: String,
        #[arg(long)]
        user: String,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value = "general")]
        category: String,
        #[arg(long, default_value_t = 5)]
        importance: i64,
        #[arg(long, default_value = "knowledge")]
        kind: String,
        /// Key of a profile fact (with --kind profile).
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Hybrid search.
    Recall {
        query: String,
        #[arg(long)]
        user: String,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Show every score component.
        #[arg(long)]
        explain: bool,
        /// Drop results scoring under this (relevance, 0 to 1; default 0.05).
        #[arg(long)]
        min_score: Option<f64>,
        /// What to search, comma-separated: memories, messages, summaries (default
        /// memories).
        #[arg(long, value_delimiter = ',')]
        sources: Option<Vec<String>>,
        /// From this time: RFC 3339, or a date, month or year (`2023-05-08`, `2023-05`).
        #[arg(long)]
        since: Option<String>,
        /// Up to this time (excluded), or through this date, month or year.
        #[arg(long)]
        until: Option<String>,
        /// hybrid (default), vector, text, or over messages substring / regex.
        #[arg(long)]
        mode: Option<String>,
        /// Show each summary hit's best source messages.
        #[arg(long)]
        expand: bool,
        #[command(flatten)]
        out: Out,
    },
    /// Forget a memory (kept in history), or --purge it.
    Forget {
        id: String,
        #[arg(long)]
        purge: bool,
        #[command(flatten)]
        out: Out,
    },
    /// List memories, newest first.
    List {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        include_superseded: bool,
        /// Observed from this time: RFC 3339, or a date, month or year (`2023-05`).
        #[arg(long)]
        since: Option<String>,
        /// Observed up to this time (excluded), or through this date, month or year.
        #[arg(long)]
        until: Option<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Back up the whole store, one tenant or one user as JSON lines (to stdout or --out):
    /// every row with its history, messages, vectors, agents, keys and jobs.
    Export {
        /// Only this user's rows (of --tenant, default `default`).
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only this tenant (default: every tenant of the store).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Restore an export (file or - for stdin); rows already present are skipped, so it can
    /// be re-run. The whole file is checked before anything is written.
    Import {
        file: String,
        /// Put the rows of a one-tenant export into this tenant instead of their own.
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Run background workers alone (for several processes on one store).
    Worker(WorkerArgs),
    /// Inspect and re-run background jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Backfill work for old rows.
    #[command(subcommand)]
    Backfill(BackfillCommand),
    /// Re-embed every memory with the configured embedder (after changing --embedder).
    /// Run with no server on the data dir; safe to interrupt and re-run.
    Reembed {
        #[arg(long, default_value_t = 64)]
        batch: usize,
    },
    /// Copy a whole SQLite store into an empty PostgreSQL database (no re-embedding), then
    /// verify the copy: rows per table, vectors, every user's export, keys, agents.
    Migrate(crate::migrate::MigrateArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct Out {
    /// Tenant to act in.
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Admin,
    Agent,
    User,
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List {
        /// pending, running, done or failed.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Put a failed job back in the queue.
    Retry { id: String },
}

#[derive(Debug, Subcommand)]
pub enum BackfillCommand {
    /// Describe old tool-call messages that have no content (idempotent).
    ToolCalls {
        #[arg(long, default_value = "default")]
        tenant: String,
    },
    /// Record the relative dates ("three years ago") of messages appended before engram
    /// recorded them, so a query that names the time they point to finds them (idempotent).
    Dates {
        #[arg(long, default_value = "default")]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key (printed once).
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long, value_enum)]
        role: RoleArg,
        /// The agent an `agent` key is bound to.
        #[arg(long)]
        agent: Option<String>,
        /// The user a `user` key is bound to.
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List keys (never their secrets).
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by id.
    Revoke { id: String },
}

fn admin(tenant: &str) -> anyhow::Result<Principal> {
    Ok(Principal { tenant: TenantId::parse(tenant).map_err(err)?, role: KeyRole::Admin })
}

fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    out!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Open the store for a command that writes (creating an empty store if there is none).
async fn open(common: &CommonArgs) -> anyhow::Result<Engine> {
    let settings = Settings::resolve(common, &ServeArgs::default())?;
    crate::app::engine(&settings).await
}

/// Open the store for a command that reads or changes what is there: a data dir without a
/// store (a mistyped `--data-dir`) is an error, not a new empty store.
async fn open_existing(common: &CommonArgs) -> anyhow::Result<Engine> {
    let settings = Settings::resolve(common, &ServeArgs::default())?;
    crate::app::require_existing_store(&settings)?;
    crate::app::engine(&settings).await
}

/// Run one command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let settings = Settings::resolve(&cli.common, &args)?;
            for w in &settings.warnings {
                tracing::warn!("{w}");
            }
            crate::app::serve(settings).await
        }
        Command::Mcp { tenant, key } => {
            let engine = open(&cli.common).await?;
            let (principal, caller) = match key {
                None => {
                    let p = admin(&tenant)?;
                    (p.clone(), crate::mcp::StdioCaller::Admin(p))
                }
                Some(secret) => {
                    let hash = crate::keys::hash(secret.trim());
                    let p = engine
                        .principal_for_key(&hash)
                        .await
                        .map_err(err)?
                        .ok_or_else(|| anyhow::anyhow!("unknown or revoked API key (--key)"))?;
                    (p, crate::mcp::StdioCaller::Key { hash })
                }
            };
            crate::mcp::serve_stdio(engine, principal, caller).await
        }
        Command::Remember { content, user, agent, category, importance, kind, key, out } => {
            let engine = open(&cli.common).await?;
            let input = RememberInput {
                user_id: Some(UserId::parse(user).map_err(err)?),
                agent_id: agent.map(AgentId::parse).transpose().map_err(err)?,
                kind: Kind::parse(&kind).map_err(err)?,
                key,
                category: Category::parse(&category).map_err(err)?,
                importance: Importance::parse(importance).map_err(err)?,
                content,
                ..Default::default()
            };
            let r = engine.remember(&admin(&out.tenant)?, input).await.map_err(err)?;
            if out.json {
                print_json(&serde_json::json!(crate::api::dto::Created::from(&r)))
            } else {
                out!("{} {}", dto::decision_str(r.decision), r.memory.id);
                if !r.redacted.is_empty() {
                    let kinds: Vec<&str> = r.redacted.iter().map(|k| k.as_str()).collect();
                    eprintln!("note: the PII filter redacted: {}", kinds.join(", "));
                }
                Ok(())
            }
        }
        Command::Recall {
            query,
            user,
            agent,
            limit,
            explain,
            min_score,
            sources,
            since,
            until,
            mode,
            expand,
            out,
        } => {
            let engine = open_existing(&cli.common).await?;
            let (since, until) = dto::window(since.as_deref(), until.as_deref()).map_err(err)?;
            let input = SearchInput {
                query,
                user_id: Some(UserId::parse(user).map_err(err)?),
                agent_id: agent.map(AgentId::parse).transpose().map_err(err)?,
                sources: dto::sources(sources, &[SearchSource::Memories]).map_err(err)?,
                since,
                until,
                mode: dto::search_mode(mode.as_deref()).map_err(err)?,
                limit,
                explain,
                min_score,
                expand,
                ..Default::default()
            };
            let hits = engine.search(&admin(&out.tenant)?, input).await.map_err(err)?;
            let results: Vec<SearchResultDto> =
                hits.iter().map(|h| SearchResultDto::from_hit(h, explain, expand)).collect();
            if out.json {
                return print_json(&serde_json::json!({ "results": results }));
            }
            if results.is_empty() {
                out!("nothing relevant found");
            }
            for r in &results {
                if let Some(m) = &r.memory {
                    out!("{:.4}  {}  [{}] {}", r.score, m.id, m.category, m.content);
                }
                if let Some(m) = &r.message {
                    out!(
                        "{:.4}  {}  [message {} #{} {}] {}: {}",
                        r.score,
                        m.id,
                        m.conversation_id,
                        m.seq,
                        m.created_at,
                        m.role,
                        m.content
                    );
                }
                if let Some(s) = &r.summary {
                    out!(
                        "{:.4}  {}  [summary {} depth {} {} to {}] {}",
                        r.score,
                        s.id,
                        s.conversation_id,
                        s.depth,
                        s.earliest_at,
                        s.latest_at,
                        s.content
                    );
                }
                for e in r.expanded.iter().flatten() {
                    let m = &e.message;
                    out!("        {:.4}  {}  #{} {}: {}", e.score, m.id, m.seq, m.role, m.content);
                }
                if let Some(e) = &r.explain {
                    out!("        {}", serde_json::to_string(e)?);
                }
            }
            Ok(())
        }
        Command::Forget { id, purge, out } => {
            let engine = open_existing(&cli.common).await?;
            let id = MemoryId::parse(&id).map_err(err)?;
            engine.forget(&admin(&out.tenant)?, id, purge).await.map_err(err)?;
            let status = if purge { "purged" } else { "forgotten" };
            if out.json {
                print_json(&serde_json::json!({ "id": id.to_string(), "status": status }))
            } else {
                out!("{status} {id}");
                Ok(())
            }
        }
        Command::List { user, agent, limit, cursor, include_superseded, since, until, out } => {
            let engine = open_existing(&cli.common).await?;
            let (since, until) = dto::window(since.as_deref(), until.as_deref()).map_err(err)?;
            let input = ListInput {
                user_id: user.map(UserId::parse).transpose().map_err(err)?,
                agent_id: agent.map(AgentId::parse).transpose().map_err(err)?,
                include_superseded,
                since,
                until,
                cursor: cursor
                    .as_deref()
                    .map(|c| {
                        MemoryId::parse(c).map_err(|_| {
                            anyhow::anyhow!(
                                "--cursor '{c}' is not a cursor: pass the `next page: --cursor …` \
                                 value of the previous page"
                            )
                        })
                    })
                    .transpose()?,
                limit,
                ..Default::default()
            };
            let page = engine.list(&admin(&out.tenant)?, input).await.map_err(err)?;
            let memories: Vec<MemoryDto> = page.memories.iter().map(Into::into).collect();
            if out.json {
                return print_json(
                    &serde_json::json!({ "memories": memories, "next_cursor": page.next_cursor.map(|c| c.to_string()) }),
                );
            }
            for m in &memories {
                let state = if m.superseded_at.is_some() { " (superseded)" } else { "" };
                out!(
                    "{}  {}  [{}|{}] {}{}",
                    m.id,
                    m.user_id,
                    m.category,
                    m.importance,
                    m.content,
                    state
                );
            }
            if let Some(c) = page.next_cursor {
                out!("next page: --cursor {c}");
            }
            Ok(())
        }
        Command::Export { user, out, tenant } => {
            let engine = open_existing(&cli.common).await?;
            let scope = match (tenant, user) {
                (None, None) => BackupScope::Store,
                (Some(t), None) => BackupScope::Tenant(TenantId::parse(t).map_err(err)?),
                (t, Some(u)) => BackupScope::User(
                    TenantId::parse(t.unwrap_or_else(|| "default".into())).map_err(err)?,
                    UserId::parse(u).map_err(err)?,
                ),
            };
            crate::backup::export(&engine, scope, out.as_deref()).await
        }
        Command::Import { file, tenant, json } => {
            let common = &cli.common;
            crate::backup::import(|| open(common), &file, tenant.as_deref(), json).await
        }
        Command::Keys(k) => keys(&cli.common, k).await,
        Command::Worker(args) => {
            let serve = ServeArgs { jobs: args, ..ServeArgs::default() };
            crate::app::worker(Settings::resolve(&cli.common, &serve)?).await
        }
        Command::Jobs(j) => jobs(&cli.common, j).await,
        Command::Backfill(BackfillCommand::ToolCalls { tenant }) => {
            let engine = open_existing(&cli.common).await?;
            let n = engine.backfill_tool_calls(&admin(&tenant)?).await.map_err(err)?;
            out!("enqueued {n} tool-call messages for synthesis");
            Ok(())
        }
        Command::Backfill(BackfillCommand::Dates { tenant }) => {
            let engine = open_existing(&cli.common).await?;
            let n = engine.backfill_dates(&admin(&tenant)?).await.map_err(err)?;
            out!("recorded the dates of {n} messages");
            Ok(())
        }
        Command::Reembed { batch } => {
            let settings = Settings::resolve(&cli.common, &ServeArgs::default())?;
            crate::app::require_existing_store(&settings)?;
            let (store, embedder) = crate::app::parts(&settings).await?;
            let progress = crate::progress::Progress::new("re-embedding", "rows", None, false);
            let n = Engine::reembed(&store, &embedder, batch, &|r| {
                progress.message(format!(
                    "{} memories, {} messages, {} summaries",
                    r.memories, r.messages, r.summaries
                ));
            })
            .await
            .map_err(err)?;
            progress.finish();
            out!(
                "re-embedded {} memories, {} messages and {} summaries with {}",
                n.memories,
                n.messages,
                n.summaries,
                embedder.model_id()
            );
            Ok(())
        }
        Command::Migrate(args) => crate::migrate::run(args).await,
    }
}

async fn jobs(common: &CommonArgs, j: JobsCommand) -> anyhow::Result<()> {
    let settings = Settings::resolve(common, &ServeArgs::default())?;
    crate::app::require_existing_store(&settings)?;
    let ops = Operator::new(crate::app::store(&settings).await?);
    match j {
        JobsCommand::List { status, tenant, limit, json } => {
            let status = status.as_deref().map(JobStatus::parse).transpose().map_err(err)?;
            let tenant = tenant.map(TenantId::parse).transpose().map_err(err)?;
            let list = ops.list_jobs(tenant.as_ref(), status, limit).await.map_err(err)?;
            let rows: Vec<serde_json::Value> = list
                .iter()
                .map(|j| {
                    serde_json::json!({ "id": j.id, "tenant": j.tenant_id.to_string(), "kind": j.kind.as_str(),
                        "status": j.status.as_str(), "attempts": j.attempts, "max_attempts": j.max_attempts,
                        "payload": j.payload, "last_error": j.last_error, "created_at": dto::fmt_ts(j.created_at),
                        "updated_at": dto::fmt_ts(j.updated_at) })
                })
                .collect();
            if json {
                return print_json(&rows);
            }
            for r in &rows {
                out!(
                    "{}  {}  {:<20} {:<8} {}/{}  {}",
                    r["id"].as_str().unwrap_or(""),
                    r["tenant"].as_str().unwrap_or(""),
                    r["kind"].as_str().unwrap_or(""),
                    r["status"].as_str().unwrap_or(""),
                    r["attempts"],
                    r["max_attempts"],
                    r["last_error"].as_str().unwrap_or("")
                );
            }
            Ok(())
        }
        JobsCommand::Retry { id } => {
            ops.retry_job(&id).await.map_err(err)?;
            out!("job {id} queued again");
            Ok(())
        }
    }
}

async fn keys(common: &CommonArgs, k: KeysCommand) -> anyhow::Result<()> {
    let settings = Settings::resolve(common, &ServeArgs::default())?;
    if !matches!(k, KeysCommand::Create { .. }) {
        crate::app::require_existing_store(&settings)?;
    }
    let ops = Operator::new(crate::app::store(&settings).await?);
    match k {
        KeysCommand::Create { tenant, role, agent, user, json } => {
            let tenant = TenantId::parse(tenant).map_err(err)?;
            let role = match (role, agent, user) {
                (RoleArg::Admin, None, None) => KeyRole::Admin,
                (RoleArg::Agent, Some(a), None) => KeyRole::Agent(AgentId::parse(a).map_err(err)?),
                (RoleArg::User, None, Some(u)) => KeyRole::User(UserId::parse(u).map_err(err)?),
                (RoleArg::Admin, _, _) => bail!("an admin key takes neither --agent nor --user"),
                (RoleArg::Agent, _, _) => bail!("an agent key needs --agent (and no --user)"),
                (RoleArg::User, _, _) => bail!("a user key needs --user (and no --agent)"),
            };
            let (key, secret) = crate::keys::create(&ops, tenant, role).await.map_err(err)?;
            if json {
                // The listing's fields (role, binding, prefix…) and the secret, shown once.
                let mut row = key_json(&key);
                row["key"] = serde_json::Value::String(secret);
                print_json(&row)
            } else {
                out!("{secret}");
                eprintln!(
                    "key {} for tenant '{}' created; store the secret above now, it is not shown again",
                    key.id, key.tenant
                );
                Ok(())
            }
        }
        KeysCommand::List { tenant, json } => {
            let tenant = tenant.map(TenantId::parse).transpose().map_err(err)?;
            let list = ops.list_keys(tenant.as_ref()).await.map_err(err)?;
            let rows: Vec<serde_json::Value> = list.iter().map(key_json).collect();
            if json {
                return print_json(&rows);
            }
            for r in rows {
                out!(
                    "{}  {}  {}{}  {}…  {}",
                    r["id"].as_str().unwrap_or(""),
                    r["tenant"].as_str().unwrap_or(""),
                    r["role"].as_str().unwrap_or(""),
                    r["bound_to"].as_str().map(|b| format!(":{b}")).unwrap_or_default(),
                    r["prefix"].as_str().unwrap_or(""),
                    if r["revoked_at"].is_null() { "active" } else { "revoked" }
                );
            }
            Ok(())
        }
        KeysCommand::Revoke { id } => {
            ops.revoke_key(&id).await.map_err(err)?;
            out!("revoked {id}");
            Ok(())
        }
    }
}
