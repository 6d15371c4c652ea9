//! The inputs and outputs of the engine's operations.

use time::OffsetDateTime;

use crate::model::{
    AgentId, Category, ConversationId, Importance, Kind, Memory, MemoryEvent, MemoryId, Message,
    MessageRole, SourceKind, Summary, TenantId, UserId,
};
use crate::pipeline::pii::PiiKind;
use crate::retrieval::Explain;

/// Explicit remember (one memory).
#[derive(Debug, Clone, Default)]
pub struct RememberInput {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub kind: Kind,
    pub key: Option<String>,
    pub category: Category,
    pub importance: Importance,
    pub content: String,
    pub metadata: Option<serde_json::Value>,
    pub source_conversation_id: Option<ConversationId>,
    pub source_kind: Option<SourceKind>,
    pub observed_at: Option<OffsetDateTime>,
    pub expires_at: Option<OffsetDateTime>,
}

/// What a write decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A new row was inserted.
    Add,
    /// A new row superseded an older one (profile key changed value).
    Update,
    /// Nothing new: the existing fact was confirmed.
    None,
}

/// Result of a remember.
/// Rows embedded by [`Engine::reembed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReembedReport {
    pub memories: usize,
    pub messages: usize,
    pub summaries: usize,
}

#[derive(Debug, Clone)]
pub struct Remembered {
    pub decision: Decision,
    pub memory: Memory,
    /// For `NONE`: the similarity to the confirmed fact.
    pub similarity: Option<f32>,
    /// What the PII filter replaced in the content as given (policy `redact`), in order:
    /// an explicit write is never altered without the caller being told.
    pub redacted: Vec<PiiKind>,
}

/// Edit of a memory (PATCH): every field optional; content changes re-embed.
#[derive(Debug, Clone, Default)]
pub struct EditInput {
    pub content: Option<String>,
    pub category: Option<Category>,
    pub importance: Option<Importance>,
    pub kind: Option<Kind>,
    pub metadata: Option<serde_json::Value>,
    pub expires_at: Option<Option<OffsetDateTime>>,
}

/// Where a search looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchSource {
    Memories,
    Messages,
    /// The summaries of the DAG (`pipeline::compact`).
    Summaries,
}

/// Hybrid search request.
#[derive(Debug, Clone)]
pub struct SearchInput {
    pub query: String,
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub categories: Option<Vec<Category>>,
    pub kinds: Option<Vec<Kind>>,
    pub sources: Vec<SearchSource>,
    pub since: Option<OffsetDateTime>,
    pub until: Option<OffsetDateTime>,
    pub limit: usize,
    pub explain: bool,
    pub turn_id: Option<String>,
    /// Search only one of the two lists (benchmarks and diagnostics).
    pub mode: SearchMode,
    /// Only facts from this source conversation (memories only).
    pub source_conversation: Option<ConversationId>,
    /// Only facts whose rating has this sign (memories only).
    pub rating: Option<std::cmp::Ordering>,
    /// Drop results whose score (relevance, 0 to 1) is under this; `None`: the default
    /// ([`crate::retrieval::DEFAULT_MIN_SCORE`], results with some support).
    pub min_score: Option<f64>,
    /// Expand each summary hit to its best source messages ([`Hit::Summary::expanded`]).
    pub expand: bool,
    /// Rank only: the hits are not counted as accessed (the context block ranks facts this
    /// way and counts only those it shows).
    pub rank_only: bool,
}

/// How a search matches: the ranked lists it fuses, or a literal match over messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// Vectors and keywords fused (REST `hybrid`, or `fts` as seed 004 names it).
    #[default]
    Hybrid,
    VectorOnly,
    TextOnly,
    /// Messages containing the query as written (case-insensitive), newest first.
    Substring,
    /// Messages matching the query as a regular expression, newest first.
    Regex,
}

impl SearchMode {
    /// A literal match (substring, regex) rather than a ranked search.
    pub fn is_literal(self) -> bool {
        matches!(self, SearchMode::Substring | SearchMode::Regex)
    }
}

impl Default for SearchInput {
    fn default() -> Self {
        Self {
            query: String::new(),
            user_id: None,
            agent_id: None,
            categories: None,
            kinds: None,
            sources: vec![SearchSource::Memories],
            since: None,
            until: None,
            limit: 10,
            explain: false,
            turn_id: None,
            mode: SearchMode::Hybrid,
            source_conversation: None,
            rating: None,
            min_score: None,
            expand: false,
            rank_only: false,
        }
    }
}

/// One search result.
#[derive(Debug, Clone)]
pub enum Hit {
    Memory {
        memory: Memory,
        score: f64,
        explain: Explain,
    },
    Message {
        message: Message,
        score: f64,
        explain: Explain,
    },
    Summary {
        summary: Summary,
        score: f64,
        explain: Explain,
        /// With `expand`: the summary's source messages (through every level below) that
        /// best match the query, best first.
        expanded: Vec<(Message, f64)>,
    },
}

impl Hit {
    /// Drop a fact hit whose text a better-ranked fact hit already has (a user-wide fact and
    /// an agent's private copy of it, for whoever sees both): one result slot, not two.
    pub(crate) fn drop_repeated_facts(hits: &mut Vec<Hit>) {
        let mut seen = std::collections::HashSet::new();
        hits.retain(|h| match h {
            Hit::Memory { memory, .. } => seen.insert(memory.content.trim().to_string()),
            Hit::Message { .. } | Hit::Summary { .. } => true,
        });
    }

    /// A message hit: its explain finished (a message weighs as importance 5) and scored.
    pub(crate) fn of_message(
        message: Message,
        mut e: Explain,
        now: time::OffsetDateTime,
        scale: crate::embed::SimilarityScale,
    ) -> Hit {
        e.importance = 5;
        e.rating = message.rating;
        let seen = message.last_accessed_at.unwrap_or(message.created_at);
        e.days_since_access = crate::retrieval::days_between(seen, now);
        e.access_count = message.access_count;
        let score = crate::retrieval::finish(&mut e, scale);
        Hit::Message { message, score, explain: e }
    }

    pub fn score(&self) -> f64 {
        match self {
            Hit::Memory { score, .. } | Hit::Message { score, .. } | Hit::Summary { score, .. } => {
                *score
            }
        }
    }

    /// Best first: by score, then (exact ties, e.g. vector rank 1 + text rank 2 against the
    /// reverse) by the better keyword rank, then by id, so the same store and query always
    /// give the same order. Keyword first: on LoCoMo it is the more precise list (R@10 text
    /// alone 0.633 vs vector alone 0.551), and breaking ties by it measured R@10 0.687 vs
    /// 0.682 by vector rank (memories; messages 0.737 vs 0.739, R@1 0.305 vs 0.293).
    pub fn explain(&self) -> &Explain {
        match self {
            Hit::Memory { explain, .. }
            | Hit::Message { explain, .. }
            | Hit::Summary { explain, .. } => explain,
        }
    }

    pub(super) fn explain_mut(&mut self) -> &mut Explain {
        match self {
            Hit::Memory { explain, .. }
            | Hit::Message { explain, .. }
            | Hit::Summary { explain, .. } => explain,
        }
    }

    pub(super) fn rank_cmp(a: &Hit, b: &Hit, by_relevance: bool) -> std::cmp::Ordering {
        let rank = |h: &Hit| {
            if by_relevance { h.explain().score } else { h.explain().rank_score }
        };
        let key = |h: &Hit| match h {
            Hit::Memory { memory, explain, .. } => {
                (explain.text_rank.unwrap_or(usize::MAX), memory.id.0)
            }
            Hit::Message { message, explain, .. } => {
                (explain.text_rank.unwrap_or(usize::MAX), message.id.0)
            }
            Hit::Summary { summary, explain, .. } => {
                (explain.text_rank.unwrap_or(usize::MAX), summary.id.0)
            }
        };
        rank(b).total_cmp(&rank(a)).then_with(|| key(a).cmp(&key(b)))
    }
}

/// One message to append.
#[derive(Debug, Clone, Default)]
pub struct MessageInput {
    pub role: MessageRole,
    pub content: String,
    pub created_at: Option<OffsetDateTime>,
    pub tool_name: Option<String>,
    pub tool_args: Option<serde_json::Value>,
    pub tool_result: Option<String>,
    pub turn_id: Option<String>,
    pub metadata: Option<serde_json::Value>,
}

/// A memory's supersession chain and events.
#[derive(Debug, Clone)]
pub struct History {
    pub chain: Vec<Memory>,
    pub events: Vec<MemoryEvent>,
}

/// A conversation as `GET /v1/conversations/{id}` shows it.
#[derive(Debug, Clone)]
pub struct ConversationView {
    pub info: crate::store::ConversationInfo,
    /// The rolling summary extraction keeps (regenerated as the conversation goes on).
    pub rolling_summary: Option<String>,
    /// User turns the rolling summary covers.
    pub summarized_user_turns: i64,
    /// The summary tree: every summary of the conversation, oldest first.
    pub summaries: Vec<Summary>,
}

/// A summary of the DAG with what it covers: the summaries one level down (a branch, a
/// root), or the messages (a leaf).
#[derive(Debug, Clone)]
pub struct SummaryView {
    pub summary: Summary,
    pub children: Vec<Summary>,
    pub messages: Vec<Message>,
}

/// Everything stored about one user (GDPR portability).
#[derive(Debug, Clone)]
pub struct UserExport {
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub memories: Vec<Memory>,
    pub events: Vec<MemoryEvent>,
    pub messages: Vec<Message>,
    /// The user's conversations, each with the rolling summary extraction keeps of it.
    pub conversations: Vec<ExportedConversation>,
    /// The summaries of the user's conversations.
    pub summaries: Vec<Summary>,
    /// The user's live working memory, every session.
    pub session_state: Vec<crate::model::SessionState>,
}

/// A conversation in a user's export: what `GET /v1/conversations/{id}` says of it.
#[derive(Debug, Clone)]
pub struct ExportedConversation {
    pub info: crate::store::ConversationInfo,
    /// The rolling summary extraction keeps (LLM text about the user: part of the export).
    pub rolling_summary: Option<String>,
}

/// Outcome of an import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub imported: usize,
    pub skipped: usize,
}

/// Filters of a list call.
#[derive(Debug, Clone, Default)]
pub struct ListInput {
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub categories: Option<Vec<Category>>,
    pub kinds: Option<Vec<Kind>>,
    pub include_superseded: bool,
    /// Only facts observed at or after this time.
    pub since: Option<OffsetDateTime>,
    /// Only facts observed before this time.
    pub until: Option<OffsetDateTime>,
    pub cursor: Option<MemoryId>,
    pub limit: usize,
    /// Only facts from this source conversation.
    pub source_conversation: Option<ConversationId>,
    /// Only facts whose rating has this sign.
    pub rating: Option<std::cmp::Ordering>,
}

/// A tenant's statistics with the figures derived from them.
#[derive(Debug, Clone)]
pub struct Stats {
    pub store: crate::store::StoreStats,
    /// The embedder's model id and dimensions.
    pub embedder: String,
    pub embedder_dims: usize,
    /// Share of active facts with a vector (1.0 when there are none).
    pub embedding_coverage: f64,
    /// Share of transcript messages with a vector (1.0 when there are none).
    pub message_embedding_coverage: f64,
    /// An LLM is configured: automatic extraction runs.
    pub extraction_enabled: bool,
    /// The LLM, or why extraction is off.
    pub llm: String,
    /// Extraction jobs done / (done + failed for good); None before the first one.
    pub extraction_health: Option<f64>,
    /// What the compactor is doing.
    pub compaction: super::admin::CompactionStatus,
    /// What background work has not caught up with yet.
    pub backlog: crate::store::Backlog,
    /// An `engram import` that has not finished: the file and when it began (its rows so far
    /// are in the store; running it again completes it).
    pub import_unfinished: Option<String>,
    /// When the figures were read (backlog ages are measured from it).
    pub at: time::OffsetDateTime,
}

/// A relation to record: `from label to` ("Maya" "is the sister of" "the user").
#[derive(Debug, Clone)]
pub struct RelateInput {
    pub from: String,
    pub label: String,
    pub to: String,
    pub user_id: Option<UserId>,
    pub agent_id: Option<AgentId>,
    pub importance: Option<Importance>,
}

/// Agent settings as given by a client.
#[derive(Debug, Clone)]
pub struct AgentInput {
    pub memory_enabled: bool,
    pub cluster_id: Option<String>,
    pub dedup_threshold: Option<f32>,
    pub settings: serde_json::Value,
}
