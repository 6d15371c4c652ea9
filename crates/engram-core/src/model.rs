//! Domain types: identifiers, memories and their parts, conversations, agents.
//!
//! Inputs are parsed into these types at the edge ("parse, don't validate"): an
//! [`Importance`] is always 1..=10, a [`Content`] is never empty nor over the limit, a
//! [`Category`] is one of six. Types that are persisted carry string forms via `as_str`/
//! `parse`; **those strings are stored in the DB: changes must be backward compatible.**

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::{Error, Result};

/// The current time at microsecond precision, the precision every store keeps (PostgreSQL's
/// `timestamptz`; SQLite stores what it is given). Every timestamp the engine writes comes
/// from here, so a response shows exactly what a later read returns.
pub fn now() -> OffsetDateTime {
    micros(OffsetDateTime::now_utc())
}

/// `t` cut to whole microseconds.
pub fn micros(t: OffsetDateTime) -> OffsetDateTime {
    t.replace_nanosecond(t.nanosecond() / 1000 * 1000).unwrap_or(t)
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Parse a client-chosen identifier: 1–256 characters, no control characters,
            /// no leading or trailing whitespace.
            pub fn parse(s: impl Into<String>) -> Result<Self> {
                let s = s.into();
                validate_ident(&s, $field)?;
                Ok(Self(s))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

fn validate_ident(s: &str, field: &str) -> Result<()> {
    if s.is_empty() {
        return Err(Error::invalid(field, format!("{field} must not be empty")));
    }
    if s.chars().count() > 256 {
        return Err(Error::invalid(field, format!("{field} is longer than 256 characters")));
    }
    if s.chars().any(char::is_control) || s.trim() != s {
        return Err(Error::invalid(
            field,
            format!("{field} must not contain control characters or surrounding whitespace"),
        ));
    }
    Ok(())
}

string_id!(
    /// The isolation boundary. Every row carries one; nothing crosses it.
    TenantId,
    "tenant_id"
);
string_id!(
    /// The person memories are about, chosen by the client.
    UserId,
    "user_id"
);
string_id!(
    /// An assistant inside a tenant.
    AgentId,
    "agent_id"
);
string_id!(
    /// A conversation, chosen by the client.
    ConversationId,
    "conversation_id"
);

/// The prefix of the memory proxy's conversation ids, `proxy:<user>:<agent or ->`.
pub const PROXY_CONVERSATION_PREFIX: &str = "proxy:";

/// An id as one part of a proxy conversation id: `%` and `:` written `%25` and `%3A`, so
/// that the parts never run into each other (user `x:y` with agent `z` against user `x`
/// with agent `y:z`).
fn proxy_part(id: &str) -> String {
    id.replace('%', "%25").replace(':', "%3A")
}

/// The memory proxy's conversation of a user and agent when the client names none:
/// `proxy:<user>:<agent or ->`, each id as [`proxy_part`] writes it (an agent called `-` as
/// `%2D`, apart from no agent).
pub fn proxy_conversation(user: &str, agent: Option<&str>) -> String {
    let agent = match agent {
        None => "-".to_string(),
        Some("-") => "%2D".to_string(),
        Some(a) => proxy_part(a),
    };
    format!("{PROXY_CONVERSATION_PREFIX}{}:{agent}", proxy_part(user))
}

impl ConversationId {
    /// Refuse `proxy:<other user>:…` for `user`: the memory proxy's conversation of a user
    /// takes only that user's messages (another user who started it would keep the proxy
    /// from saving that user's turns).
    pub fn check_proxy_owner(&self, user: &UserId) -> Result<()> {
        match self.as_str().strip_prefix(PROXY_CONVERSATION_PREFIX) {
            Some(rest)
                if !rest
                    .strip_prefix(&proxy_part(user.as_str()))
                    .is_some_and(|r| r.starts_with(':')) =>
            {
                Err(Error::invalid(
                    "conversation_id",
                    format!(
                        "ids that start with '{PROXY_CONVERSATION_PREFIX}' are the memory \
                         proxy's conversations, 'proxy:<user>:<agent>'; this one is not user \
                         '{user}''s"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}

string_id!(
    /// A working-memory session (a run or task of an agent), chosen by the client.
    SessionId,
    "session_id"
);
string_id!(
    /// The name of a value in a session's working memory.
    StateKey,
    "key"
);

/// One entry of working memory (seeds 002, 003): short-lived state of a (user, agent,
/// session), never embedded, extracted or searched; unreadable once `expires_at` passes.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionState {
    pub tenant_id: TenantId,
    pub user_id: UserId,
    /// None: the user's working memory outside any agent.
    pub agent_id: Option<AgentId>,
    pub session_id: SessionId,
    pub key: StateKey,
    pub value: serde_json::Value,
    pub expires_at: OffsetDateTime,
    /// When the entry was first put (a put over an expired entry starts a new one).
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl TenantId {
    /// The tenant of local mode (no API keys configured).
    pub fn default_tenant() -> Self {
        Self("default".to_string())
    }
}

/// Identifier of a memory row (UUIDv7: time-ordered, so ids sort by creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub Uuid);

/// A value as an error message quotes it: whole up to 64 characters, else its start and an
/// ellipsis (a 5,000-character path came back whole in the message).
pub fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        s.into()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>()).into()
    }
}

impl MemoryId {
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
    pub fn parse(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|_| {
            Error::invalid("id", format!("'{}' is not a valid memory id (UUID)", shown(s)))
        })
    }
}

impl Default for MemoryId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Identifier of a stored message (UUIDv7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageId(pub Uuid);

impl MessageId {
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
    pub fn parse(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|_| {
            Error::invalid("id", format!("'{}' is not a valid message id (UUID)", shown(s)))
        })
    }
}

impl Default for MessageId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

macro_rules! closed_enum {
    ($(#[$doc:meta])* $name:ident, $field:literal, default = $default:ident, { $($variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }

            pub fn parse(s: &str) -> Result<Self> {
                match s {
                    $($s => Ok($name::$variant),)+
                    other => Err(Error::invalid(
                        $field,
                        format!(
                            "unknown {} '{}'; expected one of: {}",
                            $field,
                            other,
                            [$($s),+].join(", ")
                        ),
                    )),
                }
            }
        }

        impl Default for $name {
            fn default() -> Self { $name::$default }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

closed_enum!(
    /// What a memory is: a knowledge fact (default), a keyed profile fact, or a fact shared
    /// with every agent of the tenant.
    Kind, "kind", default = Knowledge, {
        Knowledge => "knowledge",
        Profile => "profile",
        Shared => "shared",
    }
);

closed_enum!(
    /// The six categories of seed 000.
    Category, "category", default = General, {
        Preference => "preference",
        Fact => "fact",
        Event => "event",
        Relationship => "relationship",
        Decision => "decision",
        General => "general",
    }
);

closed_enum!(
    /// Where a memory came from.
    SourceKind, "source", default = Manual, {
        Conversation => "conversation",
        Manual => "manual",
        Import => "import",
    }
);

closed_enum!(
    /// The role of a message author.
    MessageRole, "role", default = User, {
        User => "user",
        Assistant => "assistant",
        System => "system",
        Tool => "tool",
    }
);

/// Importance of a fact, 1 (trivial) to 10 (critical life fact).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Importance(u8);

impl Importance {
    pub const DEFAULT: Importance = Importance(5);

    pub fn parse(v: i64) -> Result<Self> {
        if (1..=10).contains(&v) {
            Ok(Importance(v as u8))
        } else {
            Err(Error::invalid("importance", format!("importance must be 1 to 10, got {v}")))
        }
    }
    /// Clamp any integer into 1..=10 (for LLM output, which is repaired, not rejected).
    pub fn clamped(v: i64) -> Self {
        Importance(v.clamp(1, 10) as u8)
    }
    pub fn get(self) -> u8 {
        self.0
    }
}

impl Default for Importance {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The text of a memory: trimmed, non-empty, at most `max_bytes` long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Content(String);

impl Content {
    pub fn parse(s: &str, max_bytes: usize) -> Result<Self> {
        let t = s.trim();
        if t.is_empty() {
            return Err(Error::invalid("content", "content must not be empty"));
        }
        if t.contains('\0') {
            return Err(Error::invalid("content", "content must not contain NUL characters"));
        }
        if t.len() > max_bytes {
            return Err(Error::TooLarge(format!(
                "content is {} bytes; the limit is {max_bytes}",
                t.len()
            )));
        }
        Ok(Content(t.to_string()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn into_string(self) -> String {
        self.0
    }
}

/// The provenance of a memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Source {
    pub kind: SourceKind,
    pub conversation_id: Option<ConversationId>,
    pub message_ids: Vec<MessageId>,
}

/// One memory row, active or superseded.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub id: MemoryId,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    /// The agent that wrote it (None: written tenant-wide, e.g. by an admin without agent).
    pub agent_id: Option<AgentId>,
    /// The pool it lives in: the writer agent's cluster id at write time, or its agent id.
    pub pool: Option<String>,
    pub kind: Kind,
    /// Profile facts are upserted by key.
    pub key: Option<String>,
    pub category: Category,
    pub importance: Importance,
    pub rating: i64,
    pub content: String,
    pub source: Source,
    pub observed_at: OffsetDateTime,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    pub last_accessed_at: Option<OffsetDateTime>,
    pub access_count: i64,
    /// How many times the fact was stated again (dedup confirmations).
    pub mention_count: i64,
    pub expires_at: Option<OffsetDateTime>,
    pub superseded_at: Option<OffsetDateTime>,
    pub superseded_by: Option<MemoryId>,
    pub metadata: serde_json::Value,
    /// The model that made this row's vector (None for profile facts, which have none).
    pub embedding_model: Option<String>,
}

#[cfg(test)]
impl Message {
    /// A message for unit tests: `role` said `content` in conversation `c` of user `u`.
    pub(crate) fn sample(role: MessageRole, content: &str) -> Message {
        Message {
            id: MessageId::new(),
            tenant_id: TenantId::default_tenant(),
            conversation_id: ConversationId::parse("c").unwrap(),
            user_id: UserId::parse("u").unwrap(),
            agent_id: None,
            seq: 0,
            role,
            content: content.into(),
            tool_name: None,
            tool_args: None,
            tool_result: None,
            turn_id: None,
            metadata: serde_json::json!({}),
            created_at: OffsetDateTime::UNIX_EPOCH,
            rating: 0,
            access_count: 0,
            last_accessed_at: None,
        }
    }
}

impl Memory {
    /// The one constructor of a new fact: a fresh id, created, updated and observed `now`,
    /// seen once, never accessed, rated, expired or superseded; general knowledge of
    /// importance 5, in no pool, without metadata or vector. Callers set what they know
    /// with struct-update syntax (`Memory { kind, pool, ..Memory::new(…) }`).
    pub fn new(
        tenant: TenantId,
        user: UserId,
        content: String,
        source: Source,
        now: OffsetDateTime,
    ) -> Memory {
        Memory {
            id: MemoryId::new(),
            tenant_id: tenant,
            user_id: user,
            agent_id: None,
            pool: None,
            kind: Kind::Knowledge,
            key: None,
            category: Category::default(),
            importance: Importance::DEFAULT,
            rating: 0,
            content,
            source,
            observed_at: now,
            created_at: now,
            updated_at: now,
            last_accessed_at: None,
            access_count: 0,
            mention_count: 1,
            expires_at: None,
            superseded_at: None,
            superseded_by: None,
            metadata: serde_json::json!({}),
            embedding_model: None,
        }
    }

    pub fn is_active(&self, now: OffsetDateTime) -> bool {
        self.superseded_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

/// What happened to a memory; the audit trail of `history`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEvent {
    pub memory_id: MemoryId,
    pub event: EventKind,
    /// The other memory involved (the successor for `superseded`, the predecessor for `created` by edit).
    pub related_id: Option<MemoryId>,
    pub actor: String,
    pub detail: serde_json::Value,
    pub at: OffsetDateTime,
}

closed_enum!(
    /// Kinds of memory events.
    EventKind, "event", default = Created, {
        Created => "created",
        Confirmed => "confirmed",
        Superseded => "superseded",
        Forgotten => "forgotten",
        Rated => "rated",
        Imported => "imported",
    }
);

/// A stored message of a conversation transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: MessageId,
    pub tenant_id: TenantId,
    pub conversation_id: ConversationId,
    pub user_id: UserId,
    pub agent_id: Option<AgentId>,
    pub seq: i64,
    pub role: MessageRole,
    pub content: String,
    pub tool_name: Option<String>,
    pub tool_args: Option<serde_json::Value>,
    pub tool_result: Option<String>,
    pub turn_id: Option<String>,
    pub metadata: serde_json::Value,
    pub created_at: OffsetDateTime,
    pub rating: i64,
    /// Times a search returned it, and the last time (access reinforcement, SPEC §3).
    pub access_count: i64,
    pub last_accessed_at: Option<OffsetDateTime>,
}

/// Identifier of a summary of the DAG (UUIDv7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SummaryId(pub Uuid);

impl SummaryId {
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
    pub fn parse(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|_| {
            Error::invalid("id", format!("'{}' is not a valid summary id (UUID)", shown(s)))
        })
    }
}

impl Default for SummaryId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for SummaryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

closed_enum!(
    /// The level of a summary in the DAG (seed 004): a leaf summarizes messages, a branch
    /// leaves, a root branches (or roots, past depth 2). **Stored in the DB.**
    SummaryKind, "kind", default = Leaf, {
        Leaf => "leaf",
        Branch => "branch",
        Root => "root",
    }
);

impl SummaryKind {
    /// The kind of a summary at `depth` (0 leaf, 1 branch, 2 and above root).
    pub fn at_depth(depth: i64) -> Self {
        match depth {
            i64::MIN..=0 => SummaryKind::Leaf,
            1 => SummaryKind::Branch,
            _ => SummaryKind::Root,
        }
    }
}

/// A summary of the DAG: what a run of messages (a leaf) or of summaries one level down
/// (a branch, a root) said, written by the main-tier LLM. Its sources are linked in
/// `summary_sources`; `parent_id` is the summary one level up that covers it, once written.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub id: SummaryId,
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub conversation_id: ConversationId,
    pub parent_id: Option<SummaryId>,
    pub depth: i64,
    pub kind: SummaryKind,
    pub content: String,
    /// Messages covered, through every level below.
    pub message_count: i64,
    /// The first and last covered message's `created_at`.
    pub earliest_at: OffsetDateTime,
    pub latest_at: OffsetDateTime,
    /// The LLM that wrote it.
    pub model: Option<String>,
    pub created_at: OffsetDateTime,
    /// Times a search returned it, and the last time (access reinforcement, SPEC §3).
    pub access_count: i64,
    pub last_accessed_at: Option<OffsetDateTime>,
}

/// Settings of an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub tenant_id: TenantId,
    pub id: AgentId,
    pub memory_enabled: bool,
    /// Agents with the same cluster id share one memory pool for new writes.
    pub cluster_id: Option<String>,
    /// Cosine similarity at or above which a new fact is a duplicate (default 0.90).
    pub dedup_threshold: f32,
    /// Other settings (extraction policy, PII policy…), kept as given.
    pub settings: serde_json::Value,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl Agent {
    /// The memory pool this agent writes to and reads from.
    pub fn pool(&self) -> String {
        match &self.cluster_id {
            Some(c) => format!("cluster:{c}"),
            None => format!("agent:{}", self.id),
        }
    }
}

/// The pool of an agent that has no stored settings.
pub fn default_pool(agent: &AgentId) -> String {
    format!("agent:{agent}")
}

/// Role of an API key, with what it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRole {
    Admin,
    Agent(AgentId),
    User(UserId),
}

/// An authenticated caller: a tenant and a role in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    pub role: KeyRole,
}

closed_enum!(
    /// Kinds of background jobs. **Stored in the DB.**
    JobKind, "kind", default = Extract, {
        Extract => "extract",
        Summarize => "summarize",
        SynthesizeToolCall => "synthesize_tool_call",
        EmbedMessages => "embed_messages",
        Compact => "compact",
    }
);

closed_enum!(
    /// Life cycle of a job. **Stored in the DB.**
    JobStatus, "status", default = Pending, {
        Pending => "pending",
        Running => "running",
        Done => "done",
        Failed => "failed",
    }
);

/// A durable background job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: String,
    pub tenant_id: TenantId,
    pub user_id: Option<UserId>,
    pub kind: JobKind,
    /// At most one *pending* job per key (e.g. `extract:<conversation>`).
    pub dedup_key: Option<String>,
    /// At most one *running* job per key (e.g. the conversation: single writer).
    pub lock_key: Option<String>,
    pub payload: serde_json::Value,
    pub status: JobStatus,
    pub attempts: i64,
    pub max_attempts: i64,
    pub run_after: OffsetDateTime,
    pub lease_until: Option<OffsetDateTime>,
    pub last_error: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl Job {
    /// A new pending job, runnable now, with three attempts.
    pub fn new(
        tenant: TenantId,
        user: Option<UserId>,
        kind: JobKind,
        payload: serde_json::Value,
    ) -> Self {
        let now = now();
        Job {
            id: uuid::Uuid::now_v7().to_string(),
            tenant_id: tenant,
            user_id: user,
            kind,
            dedup_key: None,
            lock_key: None,
            payload,
            status: JobStatus::Pending,
            attempts: 0,
            max_attempts: 3,
            run_after: now,
            lease_until: None,
            last_error: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// Extraction of a conversation: one pending per conversation (a running one does not
    /// swallow the turn that arrives meanwhile), one running per conversation.
    pub fn extract(tenant: &TenantId, user: &UserId, conversation: &ConversationId) -> Self {
        let mut j = Self::conversation_job(tenant, user, JobKind::Extract, conversation);
        j.dedup_key = Some(format!("extract:{conversation}"));
        j.lock_key = Some(format!("conversation:{conversation}"));
        j
    }

    /// The rolling summary of a conversation: one pending per conversation, and it holds the
    /// conversation's lock like extraction, so it never runs beside an extraction (or another
    /// summary) of the same conversation: extraction reads the summary it replaces.
    pub fn summarize(tenant: &TenantId, user: &UserId, conversation: &ConversationId) -> Self {
        let mut j = Self::conversation_job(tenant, user, JobKind::Summarize, conversation);
        j.dedup_key = Some(format!("summarize:{conversation}"));
        j.lock_key = Some(format!("conversation:{conversation}"));
        j
    }

    /// Embedding a conversation's new messages: one pending and one running per
    /// conversation, on a lock of its own (it may run beside extraction).
    pub fn embed_messages(tenant: &TenantId, user: &UserId, conversation: &ConversationId) -> Self {
        let mut j = Self::conversation_job(tenant, user, JobKind::EmbedMessages, conversation);
        j.dedup_key = Some(format!("embed:{conversation}"));
        j.lock_key = Some(format!("embed:{conversation}"));
        j
    }

    /// Compacting a conversation into the summary DAG: one pending per conversation, and it
    /// holds the conversation's lock like extraction, so the extraction cursor it reads does
    /// not move while it decides what may be summarized.
    pub fn compact(tenant: &TenantId, user: &UserId, conversation: &ConversationId) -> Self {
        let mut j = Self::conversation_job(tenant, user, JobKind::Compact, conversation);
        j.dedup_key = Some(format!("compact:{conversation}"));
        j.lock_key = Some(format!("conversation:{conversation}"));
        j
    }

    /// Describing one tool-call message in a sentence: one pending per message.
    pub fn synthesize_tool_call(tenant: &TenantId, user: &UserId, message: MessageId) -> Self {
        let mut j = Self::new(
            tenant.clone(),
            Some(user.clone()),
            JobKind::SynthesizeToolCall,
            serde_json::json!({ "message_id": message.to_string() }),
        );
        j.dedup_key = Some(format!("tool:{message}"));
        j
    }

    fn conversation_job(
        tenant: &TenantId,
        user: &UserId,
        kind: JobKind,
        conversation: &ConversationId,
    ) -> Self {
        Self::new(
            tenant.clone(),
            Some(user.clone()),
            kind,
            serde_json::json!({ "conversation_id": conversation.as_str() }),
        )
    }
}

/// How the automatic extractor is named in the audit trail.
pub fn actor_name_system() -> String {
    "system:extractor".to_string()
}

/// How a principal is named in the audit trail.
pub fn actor_name(p: &Principal) -> String {
    match &p.role {
        KeyRole::Admin => "admin".to_string(),
        KeyRole::Agent(a) => format!("agent:{a}"),
        KeyRole::User(u) => format!("user:{u}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_serialize_what_must_not_run_together() {
        let t = TenantId::default_tenant();
        let u = UserId::parse("u").unwrap();
        let c = ConversationId::parse("c1").unwrap();
        let extract = Job::extract(&t, &u, &c);
        let summarize = Job::summarize(&t, &u, &c);
        let embed = Job::embed_messages(&t, &u, &c);
        let m = MessageId::new();
        let tool = Job::synthesize_tool_call(&t, &u, m);
        // Extraction and the summary it reads share the conversation's lock; embedding has
        // its own and may run beside them.
        assert_eq!(extract.lock_key.as_deref(), Some("conversation:c1"));
        assert_eq!(summarize.lock_key, extract.lock_key);
        assert_eq!(embed.lock_key.as_deref(), Some("embed:c1"));
        assert_eq!(tool.lock_key, None);
        // One pending job per conversation and kind, per message for tool calls.
        let keys: Vec<Option<String>> =
            [&extract, &summarize, &embed, &tool].iter().map(|j| j.dedup_key.clone()).collect();
        assert_eq!(
            keys,
            [
                Some("extract:c1".to_string()),
                Some("summarize:c1".to_string()),
                Some("embed:c1".to_string()),
                Some(format!("tool:{m}")),
            ]
        );
        assert_eq!(extract.payload, serde_json::json!({ "conversation_id": "c1" }));
        assert_eq!(tool.payload, serde_json::json!({ "message_id": m.to_string() }));
        for j in [&extract, &summarize, &embed, &tool] {
            assert_eq!((j.status, j.attempts, j.max_attempts), (JobStatus::Pending, 0, 3));
            assert_eq!(j.user_id.as_ref(), Some(&u));
        }
    }
}
