//! The MCP interface (SPEC §4): twelve tools over the [`Engine`], served over stdio by
//! `engram mcp` and over streamable HTTP at `/mcp` by `engram serve` (rmcp, the official
//! MCP Rust SDK).
//!
//! **API Boundary:** like the REST handlers, a tool only parses its arguments into core
//! types, calls [`Engine`] methods with the caller's [`Principal`] and renders the result
//! with the REST wire shapes ([`crate::api::dto`]); every rule (scoping, roles, limits)
//! lives in the engine.
//!
//! | tool | engine | what |
//! |---|---|---|
//! | `remember` | `remember` | store a fact (PII filter, embedding, dedup: `ADD`/`UPDATE`/`NONE`) |
//! | `recall` | `search` / `context` | the facts most relevant to a query; without a query, the prompt block of everything known |
//! | `forget` | `forget` | supersede a fact with no successor (kept in history), or purge it |
//! | `list_memories` | `list` / `search` | page through facts with filters (newest first); with `query`, the best matches |
//! | `relate` | `remember` / `get` + `search` | record a relation `from label to` as a `relationship` fact; or, given a memory id, the facts related to it |
//! | `memory_search` | `search` | hybrid search over memories, transcript messages and summaries, with filters and `explain` |
//! | `memory_browse` | `messages` | a conversation's transcript, chronologically, page by page |
//! | `memory_stats` | `stats` | queue depth, failed jobs, embedding coverage, counts (admin) |
//! | `working_memory_set` / `_get` / `_delete` / `_list` | `put_state` … | short-lived state per (user, agent, session), with a TTL ([`state`]) |
//!
//! engram has no entity graph: `relate` keeps a relation as what engram already stores
//! well — a standalone `relationship` fact ("Anna is the user's sister."), with
//! `metadata.relation = {from, to, label}`, deduplicated, searchable and superseded like any
//! fact (its validity interval is `observed_at` … `superseded_at`).
//!
//! Errors: bad arguments (missing or unknown fields, wrong types, NUL characters) and every
//! engine error are **tool errors** (`isError: true`) whose text and structured content are
//! the REST error body `{"error": {"code", "message"}}` with the engine's code; an unknown
//! tool name is a JSON-RPC invalid-params error.
//!
//! Who calls: over stdio, the principal is fixed at start (`--tenant` admin, or the role of
//! `--key`). Over HTTP, every request is authenticated like the REST API (Bearer key or
//! local mode, see [`crate::http`]) by [`crate::http::mcp::auth_layer`], which puts the [`Principal`] in the
//! request's extensions; rmcp hands the request parts to the tool. A session is bound to the
//! principal of the request that opened it (`initialize`): any later request of the same
//! session with another key is refused before it reaches the session.

use engram_core::engine::{
    ContextInput, Engine, ListInput, RelateInput, RememberInput, SearchInput, SearchSource,
};
use engram_core::model::{
    AgentId, Category, ConversationId, Importance, Kind, MemoryId, Principal, UserId,
};
use engram_core::{Error, Result, retrieval};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::schemars::JsonSchema;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::api::dto::{self, MemoryDto, MessageDto};

mod state;
use crate::api::results::SearchResultDto;

/// What the server tells a client (and its model) at `initialize`.
const INSTRUCTIONS: &str = "engram is the long-term memory of this assistant: durable facts \
about the user, kept across conversations. At the start of a conversation call `recall` with \
the user_id (no query) to get everything known; before answering something personal, `recall` \
with a query. When the user states a durable fact, preference, decision or relationship, \
`remember` it as one standalone third-person sentence (\"The user lives in Bengaluru.\"). \
When the user says a fact is wrong or outdated, `forget` it by id. `memory_search` also \
searches past conversation messages; `memory_browse` reads a conversation around a hit.";

/// The MCP server: one per stdio process, one per HTTP session.
#[derive(Clone)]
pub struct McpServer {
    engine: Engine,
    /// stdio: who the whole process acts as.
    fixed: Option<StdioCaller>,
}

/// The caller of a stdio server: the local admin, or an API key, whose hash is looked up
/// again on every call so that revoking the key stops a running `engram mcp` too.
#[derive(Clone)]
pub enum StdioCaller {
    Admin(Principal),
    Key { hash: String },
}

impl McpServer {
    /// A server acting as `caller` for every call (stdio).
    pub fn stdio(engine: Engine, caller: StdioCaller) -> Self {
        Self { engine, fixed: Some(caller) }
    }

    /// A server for one HTTP session: each request carries its principal ([`crate::http::mcp::auth_layer`]).
    pub fn http(engine: Engine) -> Self {
        Self { engine, fixed: None }
    }

    /// The caller of a request.
    async fn principal(&self, ctx: &RequestContext<RoleServer>) -> Result<Principal> {
        match &self.fixed {
            Some(StdioCaller::Admin(p)) => return Ok(p.clone()),
            Some(StdioCaller::Key { hash }) => {
                return self.engine.principal_for_key(hash).await?.ok_or_else(|| {
                    Error::Unauthorized("the API key (--key) is unknown or was revoked".into())
                });
            }
            None => {}
        }
        let p = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| {
                Error::Unauthorized("the request carries no authenticated key".into())
            })?;
        Ok(p)
    }

    async fn call(&self, p: &Principal, name: &str, args: Value) -> Result<Outcome> {
        if let Some(path) = dto::nul_path(&args) {
            let field = if path.is_empty() { "arguments".to_string() } else { path };
            return Err(Error::invalid(
                field.clone(),
                format!("{field}: text must not contain the NUL character (U+0000)"),
            ));
        }
        match name {
            "remember" => self.remember(p, parse(args)?).await,
            "recall" => self.recall(p, parse(args)?).await,
            "forget" => self.forget(p, parse(args)?).await,
            "list_memories" => self.list_memories(p, parse(args)?).await,
            "relate" => self.relate(p, parse(args)?).await,
            "memory_search" => self.memory_search(p, parse(args)?).await,
            "memory_browse" => self.memory_browse(p, parse(args)?).await,
            "memory_stats" => {
                let _: StatsArgs = parse(args)?;
                let s = self.engine.stats(p).await?;
                Ok(Outcome::json(to_value(crate::api::dto::StatsDto::from(s))?))
            }
            other => match state::call(&self.engine, p, other, args).await {
                Some(r) => r,
                None => Err(Error::not_found(format!("tool '{other}'"))),
            },
        }
    }
}

// ---------------------------------------------------------------------------- arguments

/// Arguments of `remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct RememberArgs {
    /// The fact: one standalone third-person sentence, e.g. "The user lives in Bengaluru."
    pub content: String,
    /// The person the fact is about (your platform's user id); a user key's own user when
    /// left out.
    pub user_id: Option<String>,
    /// The agent writing the fact (default: the key's agent, or none = user-wide).
    pub agent_id: Option<String>,
    /// `knowledge` (default), `profile` (a key-value fact such as the user's timezone; needs
    /// `key`) or `shared` (visible to every agent of the tenant).
    pub kind: Option<String>,
    /// The key of a `profile` fact ("timezone", "name"): a new value replaces the old one.
    pub key: Option<String>,
    /// `preference`, `fact`, `event`, `relationship`, `decision` or `general` (default).
    pub category: Option<String>,
    /// How much the fact matters, 1–10 (default 5).
    #[schemars(range(min = 1, max = 10))]
    pub importance: Option<i64>,
    /// Free JSON object kept with the fact.
    pub metadata: Option<Value>,
    /// When the fact was observed (RFC 3339, default now).
    pub observed_at: Option<String>,
    /// When the fact stops being true (RFC 3339, in the future).
    pub expires_at: Option<String>,
}

/// What `recall` without a query says when nothing is known about the user.
const NOTHING_YET: &str = "Nothing is known about this user yet.";
/// What `recall` without a query says when no fact fits its token budget.
const NO_ROOM: &str = "Facts are known about this user, but none fits the token budget.";
/// What `recall` says when no fact is relevant to the query.
const NOTHING_KNOWN: &str = "Nothing relevant is known about this: no remembered fact matches \
     the query by keyword or by meaning.";
/// What `memory_search` searches when no `sources` are named (seed 004: one search over
/// everything kept).
const MEMORY_SEARCH_SOURCES: [SearchSource; 3] =
    [SearchSource::Memories, SearchSource::Messages, SearchSource::Summaries];

/// What `memory_search` says when nothing is relevant.
const NOTHING_FOUND: &str = "Nothing relevant found: no memory or past message matches the \
     query by keyword or by meaning.";

/// Arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct RecallArgs {
    /// The person whose memories to recall; a user key's own user when left out.
    pub user_id: Option<String>,
    /// What you need to know, in words ("where does the user live?"). Leave it out to get
    /// every known fact as one prompt-ready block.
    pub query: Option<String>,
    /// Recall within this agent's memory (default: the key's agent, or all of the user's).
    pub agent_id: Option<String>,
    /// With a query: how many facts, 1–200 (default 5).
    pub limit: Option<usize>,
    /// Without a query: the block's size in tokens (default 4000).
    pub token_budget: Option<usize>,
    /// Your turn id: the recalled facts are recorded so that rating the reply rates them.
    pub turn_id: Option<String>,
    /// With a query: leave out facts whose relevance (0 to 1, the `score` of
    /// `memory_search`) is under this (default 0.05: facts with some support).
    pub min_score: Option<f64>,
}

/// Arguments of `forget`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct ForgetArgs {
    /// The id of the memory to forget (from `recall`, `memory_search` or `list_memories`).
    pub memory_id: String,
    /// Delete the row physically instead of keeping it in history (admin or user key).
    pub purge: Option<bool>,
}

/// Arguments of `list_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListArgs {
    /// Only this user's memories (required with `query`).
    pub user_id: Option<String>,
    /// Only this agent's memory pool (and user-wide and shared facts).
    pub agent_id: Option<String>,
    /// Only this kind: `knowledge`, `profile` or `shared`.
    pub kind: Option<String>,
    /// Only this category: `preference`, `fact`, `event`, `relationship`, `decision`, `general`.
    pub category: Option<String>,
    /// Words to match: the best matches instead of the newest (one page, no cursor).
    pub query: Option<String>,
    /// Include superseded and forgotten facts (history).
    pub include_superseded: Option<bool>,
    /// Only facts observed at or after this time: RFC 3339, or a date like 2023-05-08.
    pub since: Option<String>,
    /// Only facts observed before this time: RFC 3339, or a date like 2023-05-08 (included).
    pub until: Option<String>,
    /// Page size, 1–200 (default 20).
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only facts with this rating: `up`, `down` or `none`.
    pub rating: Option<String>,
    /// Only facts extracted from this conversation.
    pub source_conversation_id: Option<String>,
}

/// Arguments of `relate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct RelateArgs {
    /// To record a relation: its subject ("Anna", "The user").
    pub from: Option<String>,
    /// To record a relation: the relation, read between `from` and `to` ("is the sister of").
    pub label: Option<String>,
    /// To record a relation: its object ("the user", "Acme Corp").
    pub to: Option<String>,
    /// To record a relation: the person it is about.
    pub user_id: Option<String>,
    /// To record a relation: the agent writing it.
    pub agent_id: Option<String>,
    /// To record a relation: 1–10 (default 5).
    #[schemars(range(min = 1, max = 10))]
    pub importance: Option<i64>,
    /// To explore instead: the id of a memory whose related facts you want.
    pub memory_id: Option<String>,
    /// To explore: how many related facts, 1–200 (default 5).
    pub limit: Option<usize>,
}

/// Arguments of `memory_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct SearchArgs {
    /// What to look for, in words.
    pub query: String,
    /// The person whose memories and conversations to search; a user key's own user when
    /// left out.
    pub user_id: Option<String>,
    /// Search within this agent's memory.
    pub agent_id: Option<String>,
    /// `memories`, `messages` (past conversation messages) and/or `summaries` (summaries of
    /// older stretches of conversations); all three by default.
    pub sources: Option<Vec<String>>,
    /// Show each summary found with its source messages that best match the query (default
    /// true).
    pub expand: Option<bool>,
    /// `fts` (default: keywords and meaning, ranked), or over messages only (sources
    /// `["messages"]`): `substring` (messages containing the query as written) or `regex`
    /// (a regular expression), newest first.
    pub mode: Option<String>,
    /// Also answer the query in a few sentences from the results, citing them by label
    /// (needs an LLM configured on the server).
    pub synthesize: Option<bool>,
    /// Only these categories.
    pub categories: Option<Vec<String>>,
    /// Only these kinds (`knowledge`, `profile`, `shared`).
    pub kinds: Option<Vec<String>>,
    /// Only what happened at or after this time: RFC 3339, or a date like 2023-05-08 (also
    /// 2023-05 or 2023) from its start.
    pub since: Option<String>,
    /// Only what happened before this time: RFC 3339, or a date like 2023-05-08 (also 2023-05
    /// or 2023), that whole period included.
    pub until: Option<String>,
    /// 1–200 (default 10).
    pub limit: Option<usize>,
    /// Return every score component (vector and keyword ranks, decay, importance, rating).
    pub explain: Option<bool>,
    /// Your turn id: the returned memories are recorded so that rating the reply rates them.
    pub turn_id: Option<String>,
    /// Drop results whose score (relevance, 0 to 1) is under this. Default 0.05: results
    /// need some keyword or meaning in common with the query.
    pub min_score: Option<f64>,
    /// Only facts with this rating: `up`, `down` or `none`.
    pub rating: Option<String>,
    /// Only facts extracted from this conversation.
    pub source_conversation_id: Option<String>,
}

/// Arguments of `memory_browse`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct BrowseArgs {
    /// The conversation to read (a message's `conversation_id` from `memory_search`).
    pub conversation_id: String,
    /// Start after this message sequence number (`next_after` of the previous page; default 0).
    pub after: Option<i64>,
    /// 1–1000 (default 50).
    pub limit: Option<usize>,
}

/// `memory_stats` takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct StatsArgs {}

/// Arguments → a typed struct; any mismatch is `invalid_input` naming the field.
fn parse<T: DeserializeOwned>(args: Value) -> Result<T> {
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let inner = crate::api::error::plain_types(&e.into_inner().to_string());
        let field = if path == "." { missing_field(&inner).unwrap_or("arguments") } else { &path };
        let field = field.to_string();
        Error::invalid(field.clone(), format!("{field}: {inner}"))
    })
}

/// The field named by serde's "missing field `x`".
fn missing_field(msg: &str) -> Option<&str> {
    msg.strip_prefix("missing field `").and_then(|r| r.split('`').next())
}

// ---------------------------------------------------------------------------- tools

/// A tool's answer: structured JSON and the text a model reads.
struct Outcome {
    value: Value,
    text: String,
}

impl Outcome {
    fn json(value: Value) -> Self {
        let text = value.to_string();
        Outcome { value, text }
    }
}

fn to_value(v: impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::internal(format!("cannot render a result: {e}")))
}

/// A one-line view of a fact for a model.
fn fact_line(m: &MemoryDto) -> String {
    format!("- {} (id {}, {}, importance {})", m.content, m.id, m.category, m.importance)
}

impl McpServer {
    async fn remember(&self, p: &Principal, a: RememberArgs) -> Result<Outcome> {
        let input = RememberInput {
            user_id: a.user_id.map(UserId::parse).transpose()?,
            agent_id: a.agent_id.map(AgentId::parse).transpose()?,
            kind: a.kind.as_deref().map(Kind::parse).transpose()?.unwrap_or_default(),
            key: a.key,
            category: a.category.as_deref().map(Category::parse).transpose()?.unwrap_or_default(),
            importance: a.importance.map(Importance::parse).transpose()?.unwrap_or_default(),
            content: a.content,
            metadata: a.metadata,
            observed_at: dto::opt_ts("observed_at", a.observed_at.as_deref())?,
            expires_at: dto::opt_ts("expires_at", a.expires_at.as_deref())?,
            ..Default::default()
        };
        let r = self.engine.remember(p, input).await?;
        Ok(Outcome::json(json!(crate::api::dto::Created::from(&r))))
    }

    async fn recall(&self, p: &Principal, a: RecallArgs) -> Result<Outcome> {
        let user_id = a.user_id.map(UserId::parse).transpose()?;
        let agent_id = a.agent_id.map(AgentId::parse).transpose()?;
        let Some(query) = a.query.filter(|q| !q.trim().is_empty()) else {
            // The context block refuses a minimum score without a query to score by.
            let input = ContextInput {
                user_id,
                agent_id,
                min_score: a.min_score,
                token_budget: a.token_budget,
                turn_id: a.turn_id,
                ..Default::default()
            };
            let block = self.engine.context(p, input).await?;
            let value = to_value(dto::ContextDto::from(&block))?;
            // The block's header alone: say so plainly, not a title over nothing.
            let text = match block.text.trim() {
                t if !t.is_empty() && t != retrieval::CONTEXT_HEADER => block.text,
                _ if block.truncated => NO_ROOM.to_string(),
                _ => NOTHING_YET.to_string(),
            };
            return Ok(Outcome { value, text });
        };
        let input = SearchInput {
            query,
            user_id,
            agent_id,
            limit: a.limit.unwrap_or(5),
            turn_id: a.turn_id,
            min_score: a.min_score,
            ..Default::default()
        };
        let hits = self.engine.search(p, input).await?;
        let results: Vec<SearchResultDto> =
            hits.iter().map(|h| SearchResultDto::from_hit(h, false, false)).collect();
        let lines: Vec<String> =
            results.iter().filter_map(|r| r.memory.as_ref()).map(fact_line).collect();
        let text = if lines.is_empty() { NOTHING_KNOWN.to_string() } else { lines.join("\n") };
        Ok(Outcome { value: json!({ "results": results }), text })
    }

    async fn forget(&self, p: &Principal, a: ForgetArgs) -> Result<Outcome> {
        let id = MemoryId::parse(&a.memory_id)?;
        let purge = a.purge.unwrap_or(false);
        self.engine.forget(p, id, purge).await?;
        let status = if purge { "purged" } else { "forgotten" };
        Ok(Outcome::json(json!({ "id": id.to_string(), "status": status })))
    }

    async fn list_memories(&self, p: &Principal, a: ListArgs) -> Result<Outcome> {
        let user_id = a.user_id.map(UserId::parse).transpose()?;
        let agent_id = a.agent_id.map(AgentId::parse).transpose()?;
        let kinds = a.kind.as_deref().map(Kind::parse).transpose()?.map(|k| vec![k]);
        let categories = a.category.as_deref().map(Category::parse).transpose()?.map(|c| vec![c]);
        let (since, until) = dto::window(a.since.as_deref(), a.until.as_deref())?;
        let input = ListInput {
            user_id,
            agent_id,
            kinds,
            categories,
            include_superseded: a.include_superseded.unwrap_or(false),
            since,
            until,
            cursor: a.cursor.as_deref().map(MemoryId::parse).transpose()?,
            limit: a.limit.unwrap_or(20),
            source_conversation: a.source_conversation_id.map(ConversationId::parse).transpose()?,
            rating: dto::rating_filter(a.rating.as_deref())?,
        };
        let page = self.engine.find(p, input, a.query).await?;
        let memories: Vec<MemoryDto> = page.memories.iter().map(Into::into).collect();
        Ok(Outcome::json(json!({
            "memories": memories,
            "next_cursor": page.next_cursor.map(|c| c.to_string()),
        })))
    }

    async fn relate(&self, p: &Principal, a: RelateArgs) -> Result<Outcome> {
        let writes = a.from.is_some() || a.to.is_some() || a.label.is_some();
        match (&a.memory_id, writes) {
            (Some(_), true) => Err(Error::invalid(
                "memory_id",
                "give either from, label, to and user_id (record a relation) or memory_id (find related facts), not both",
            )),
            (None, false) => Err(Error::invalid(
                "from",
                "give from, label, to and user_id to record a relation, or memory_id to find related facts",
            )),
            (Some(id), false) => {
                let (m, hits) =
                    self.engine.related(p, MemoryId::parse(id)?, a.limit.unwrap_or(5)).await?;
                let related: Vec<SearchResultDto> =
                    hits.iter().map(|h| SearchResultDto::from_hit(h, false, false)).collect();
                Ok(Outcome::json(json!({ "memory": MemoryDto::from(&m), "related": related })))
            }
            (None, true) => {
                let input = RelateInput {
                    from: a.from.unwrap_or_default(),
                    label: a.label.unwrap_or_default(),
                    to: a.to.unwrap_or_default(),
                    user_id: a.user_id.map(UserId::parse).transpose()?,
                    agent_id: a.agent_id.map(AgentId::parse).transpose()?,
                    importance: a.importance.map(Importance::parse).transpose()?,
                };
                let r = self.engine.relate(p, input).await?;
                Ok(Outcome::json(json!(crate::api::dto::Created::from(&r))))
            }
        }
    }

    async fn memory_search(&self, p: &Principal, a: SearchArgs) -> Result<Outcome> {
        let sources = dto::sources(a.sources, &MEMORY_SEARCH_SOURCES)?;
        let explain = a.explain.unwrap_or(false);
        let expand = a.expand.unwrap_or(true);
        let synthesize = a.synthesize.unwrap_or(false).then(|| a.query.clone());
        let (since, until) = dto::window(a.since.as_deref(), a.until.as_deref())?;
        let input = SearchInput {
            query: a.query,
            user_id: a.user_id.map(UserId::parse).transpose()?,
            agent_id: a.agent_id.map(AgentId::parse).transpose()?,
            categories: dto::list(a.categories, Category::parse)?,
            kinds: dto::list(a.kinds, Kind::parse)?,
            sources,
            since,
            until,
            limit: a.limit.unwrap_or(10),
            explain,
            turn_id: a.turn_id,
            mode: dto::search_mode(a.mode.as_deref())?,
            source_conversation: a.source_conversation_id.map(ConversationId::parse).transpose()?,
            rating: dto::rating_filter(a.rating.as_deref())?,
            min_score: a.min_score,
            expand,
            rank_only: false,
        };
        let hits = self.engine.search(p, input).await?;
        let answer = match synthesize {
            Some(q) => Some(crate::api::results::AnswerDto::from(
                &self.engine.synthesize(&q, &hits).await?,
            )),
            None => None,
        };
        let results: Vec<SearchResultDto> =
            hits.iter().map(|h| SearchResultDto::from_hit(h, explain, expand)).collect();
        if results.is_empty() {
            return Ok(Outcome {
                value: json!({ "results": [], "note": NOTHING_FOUND, "answer": answer }),
                text: NOTHING_FOUND.to_string(),
            });
        }
        match answer {
            Some(a) => Ok(Outcome::json(json!({ "answer": a, "results": results }))),
            None => Ok(Outcome::json(json!({ "results": results }))),
        }
    }

    async fn memory_browse(&self, p: &Principal, a: BrowseArgs) -> Result<Outcome> {
        let conv = ConversationId::parse(a.conversation_id)?;
        let limit = a.limit.unwrap_or(50);
        let msgs = self.engine.messages(p, &conv, a.after.unwrap_or(0), limit).await?;
        let next_after = if msgs.len() == limit { msgs.last().map(|m| m.seq) } else { None };
        let messages: Vec<MessageDto> = msgs.iter().map(Into::into).collect();
        Ok(Outcome::json(json!({ "messages": messages, "next_after": next_after })))
    }
}

// ---------------------------------------------------------------------------- catalogue

fn tool<T: JsonSchema + 'static>(
    name: &'static str,
    description: &'static str,
    annotations: ToolAnnotations,
) -> Tool {
    Tool::new(name, description, rmcp::handler::server::common::schema_for_type::<T>())
        .annotate(annotations)
}

/// The names of the tools, in the order of [`tools`].
const TOOL_NAMES: [&str; 12] = [
    "remember",
    "recall",
    "forget",
    "list_memories",
    "relate",
    "memory_search",
    "memory_browse",
    "memory_stats",
    "working_memory_set",
    "working_memory_get",
    "working_memory_delete",
    "working_memory_list",
];

/// The twelve tools, with their input schemas (named as [`TOOL_NAMES`]).
pub fn tools() -> Vec<Tool> {
    let read = |title: &str| ToolAnnotations::with_title(title).read_only(true).open_world(false);
    let write = |title: &str| {
        ToolAnnotations::with_title(title).read_only(false).destructive(false).open_world(false)
    };
    let mut all = vec![
        tool::<RememberArgs>(
            "remember",
            "Store a durable fact about a user: one standalone third-person sentence (\"The user \
             is vegetarian.\"). Personal data is filtered per the agent's policy; a near-duplicate \
             of a known fact is not stored again (decision NONE, the existing fact is confirmed). \
             Profile facts (kind=profile with a key such as \"timezone\") replace their previous \
             value (decision UPDATE). Returns the decision and the stored memory with its id.",
            write("Remember a fact"),
        ),
        tool::<RecallArgs>(
            "recall",
            "Recall what is known about a user. With a query: the facts most relevant to it, best \
             first (hybrid meaning + keyword search, default 5). Without a query: every active \
             fact as one prompt-ready block (\"Known facts about the user:\" and a bullet list, \
             profile facts first, within token_budget). Each fact shows its id for forget.",
            read("Recall facts about a user"),
        ),
        tool::<ForgetArgs>(
            "forget",
            "Forget a memory by id, when the user says it is wrong or no longer true. The fact \
             stops being recalled at once; it stays in the audit history unless purge is true.",
            ToolAnnotations::with_title("Forget a memory")
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(false),
        ),
        tool::<ListArgs>(
            "list_memories",
            "List memories for inspection, newest first, with filters (user, agent, kind, \
             category, include superseded history) and cursor pages (pass next_cursor back). \
             With query: one page of the best matches instead.",
            read("List memories"),
        ),
        tool::<RelateArgs>(
            "relate",
            "Relations between people, places and things. To record one, give from, label, to \
             and user_id: it is stored as a relationship fact \"<from> <label> <to>.\" (e.g. from \
             \"Anna\", label \"is the sister of\", to \"the user\"), deduplicated and searchable \
             like any fact, with metadata.relation = {from, label, to}. To explore, give \
             memory_id instead: the facts most related to that memory.",
            write("Relate or find related facts"),
        ),
        tool::<SearchArgs>(
            "memory_search",
            "Hybrid search (meaning + keywords, fused by reciprocal rank, weighted by recency, \
             importance and rating) over a user's memories, the messages of past conversations \
             and the summaries of their older stretches (all three unless sources says \
             otherwise; a summary found comes with its best source messages). A query that \
             names a time (\"last week\", \"on March 16, 2023\") also finds what was said then \
             or about it. Filters: agent, categories, kinds, since/until. explain=true shows \
             every score component. Results: {type: memory|message|summary, score, \
             memory|message|summary}, best first; none when nothing relevant is known.",
            read("Search memories and conversations"),
        ),
        tool::<BrowseArgs>(
            "memory_browse",
            "Read a conversation's transcript chronologically, page by page (after = \
             next_after of the previous page). Use it to see the context around a message \
             found by memory_search.",
            read("Browse a conversation"),
        ),
        tool::<StatsArgs>(
            "memory_stats",
            "Health of the memory system (admin key): counts of facts and messages, background \
             queue depth, failed jobs, embedding coverage of facts and messages, extraction \
             health and the embedder and LLM in use.",
            read("Memory system stats"),
        ),
    ];
    all.extend(state::tools());
    all
}

fn error_result(e: &Error) -> CallToolResult {
    if let Error::Internal(detail) = e {
        tracing::error!(error = %detail, "internal error in an MCP tool");
    } else if let Error::StoreUnavailable(detail) = e {
        tracing::warn!(error = %detail, "database unavailable");
    }
    let message = crate::api::error::capped(e.public_message());
    let body = json!({ "error": { "code": e.code().as_str(), "message": message } });
    let mut r = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
    r.structured_content = Some(body);
    r
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("engram", env!("CARGO_PKG_VERSION"))
                    .with_title("engram long-term memory"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        Ok(ListToolsResult { tools: tools(), ..Default::default() })
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        if !TOOL_NAMES.contains(&name) {
            return Err(McpError::invalid_params(
                format!("unknown tool '{name}'; the tools are {}", TOOL_NAMES.join(", ")),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let outcome = match self.principal(&context).await {
            Ok(p) => self.call(&p, name, args).await,
            Err(e) => Err(e),
        };
        Ok(match outcome {
            Ok(o) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(o.text)]);
                r.structured_content = Some(o.value);
                r
            }
            Err(e) => error_result(&e),
        }
        .into())
    }
}

// ---------------------------------------------------------------------------- transports

/// `engram mcp`: serve the tools over stdin/stdout until the client closes stdin.
pub async fn serve_stdio(
    engine: Engine,
    principal: Principal,
    caller: StdioCaller,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    tracing::info!(tenant = %principal.tenant, "engram MCP server on stdio");
    let running = McpServer::stdio(engine, caller)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP handshake failed: {e}"))?;
    running.waiting().await.map_err(|e| anyhow::anyhow!("MCP server stopped: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_match_the_catalogue_and_every_schema_is_an_object() {
        let tools = tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, TOOL_NAMES);
        for t in &tools {
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", t.name);
        }
    }

    #[test]
    fn bad_arguments_name_their_field() {
        let e = parse::<RememberArgs>(json!({ "user_id": "u" })).unwrap_err();
        assert_eq!(e.code(), engram_core::ErrorCode::InvalidInput);
        assert!(matches!(&e, Error::InvalidInput { field, .. } if field == "content"), "{e:?}");
        let e = parse::<RememberArgs>(json!({ "content": "x", "user_id": "u", "importance": "7" }))
            .unwrap_err();
        assert!(matches!(&e, Error::InvalidInput { field, .. } if field == "importance"), "{e:?}");
        let e = parse::<StatsArgs>(json!({ "extra": 1 })).unwrap_err();
        assert!(e.to_string().contains("extra"), "{e}");
    }
}
