//! Wire types of the REST API (and of the CLI's `--json` output and JSONL export) and their
//! explicit conversions from and to core types. Requests reject unknown fields.
//!
//! Timestamps are RFC 3339 strings in UTC. Enumerations travel as strings and are parsed by
//! the core types, so an unknown category gets the same message everywhere.

use engram_core::engine::{CompactionStatus, ContextBlock, Decision, SearchMode, SearchSource};
use engram_core::model::{
    Agent, AgentId, Category, ConversationId, EventKind, Importance, Kind, Memory, MemoryEvent,
    MemoryId, Message, MessageId, Source, SourceKind, Summary, TenantId, UserId, micros,
};
use engram_core::{Error, Result};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::ToSchema;

/// Timestamps travel with microsecond precision, what both stores keep: also those of rows an
/// older SQLite store kept with nanoseconds, so that their export equals that of their
/// PostgreSQL copy after `engram migrate`.
pub fn fmt_ts(t: OffsetDateTime) -> String {
    micros(t).to_offset(time::UtcOffset::UTC).format(&Rfc3339).unwrap_or_default()
}

/// The years a timestamp may have: what both stores can hold (SQLite keeps signed 64-bit
/// unix nanoseconds: 1677-09-21 to 2262-04-11).
pub const YEARS: std::ops::RangeInclusive<i32> = 1678..=2261;

fn parse_any_ts(field: &str, s: &str) -> Result<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).map(micros).map_err(|_| {
        Error::invalid(
            field,
            format!("{field} must be an RFC 3339 timestamp like 2026-02-22T10:00:00Z"),
        )
    })
}

/// The rating filter of a search or a list: `up` (rated up), `down` (rated down), `none`
/// (never rated, or rated back to 0).
pub fn rating_filter(v: Option<&str>) -> Result<Option<std::cmp::Ordering>> {
    Ok(match v {
        None => None,
        Some("up") => Some(std::cmp::Ordering::Greater),
        Some("down") => Some(std::cmp::Ordering::Less),
        Some("none") => Some(std::cmp::Ordering::Equal),
        Some(other) => {
            return Err(Error::invalid(
                "rating",
                format!("rating must be up, down or none, got '{other}'"),
            ));
        }
    })
}

/// Each value parsed with `parse` (an absent list stays absent).
pub fn list<T>(v: Option<Vec<String>>, parse: fn(&str) -> Result<T>) -> Result<Option<Vec<T>>> {
    v.map(|v| v.iter().map(|s| parse(s)).collect()).transpose()
}

/// The `sources` of a search: `memories`, `messages` and/or `summaries` (`default` when none
/// is named).
pub fn sources(v: Option<Vec<String>>, default: &[SearchSource]) -> Result<Vec<SearchSource>> {
    let Some(v) = v else { return Ok(default.to_vec()) };
    v.iter()
        .map(|s| match s.as_str() {
            "memories" => Ok(SearchSource::Memories),
            "messages" => Ok(SearchSource::Messages),
            "summaries" => Ok(SearchSource::Summaries),
            other => Err(Error::invalid(
                "sources",
                format!("unknown source '{other}'; expected memories, messages or summaries"),
            )),
        })
        .collect()
}

/// The `mode` of a search (default `hybrid`).
pub fn search_mode(mode: Option<&str>) -> Result<SearchMode> {
    Ok(match mode {
        None | Some("hybrid") | Some("fts") => SearchMode::Hybrid,
        Some("vector") => SearchMode::VectorOnly,
        Some("text") => SearchMode::TextOnly,
        Some("substring") => SearchMode::Substring,
        Some("regex") => SearchMode::Regex,
        Some(other) => {
            return Err(Error::invalid(
                "mode",
                format!(
                    "unknown mode '{other}'; expected hybrid, fts, vector, text, substring or regex"
                ),
            ));
        }
    })
}

/// Which end of a time window a bound is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// `since`: the window starts at the bound (included).
    Since,
    /// `until`: the window ends before the bound.
    Until,
}

/// A calendar period written as `2023-05-08`, `2023-05` or `2023`: its first day and the day
/// after its last.
fn period(s: &str) -> Option<(time::Date, time::Date)> {
    let parts: Vec<&str> = s.split('-').collect();
    let num = |p: &str, len: usize| -> Option<i32> {
        if p.len() == len && p.bytes().all(|b| b.is_ascii_digit()) { p.parse().ok() } else { None }
    };
    let year = num(parts.first()?, 4)?;
    let month = |m: i32| time::Month::try_from(u8::try_from(m).ok()?).ok();
    match parts.as_slice() {
        [_] => {
            let start = time::Date::from_calendar_date(year, time::Month::January, 1).ok()?;
            let end = time::Date::from_calendar_date(year + 1, time::Month::January, 1).ok()?;
            Some((start, end))
        }
        [_, m] => {
            let m = month(num(m, 2)?)?;
            let start = time::Date::from_calendar_date(year, m, 1).ok()?;
            let next =
                if m == time::Month::December { (year + 1, m.next()) } else { (year, m.next()) };
            Some((start, time::Date::from_calendar_date(next.0, next.1, 1).ok()?))
        }
        [_, m, d] => {
            let day = u8::try_from(num(d, 2)?).ok()?;
            let start = time::Date::from_calendar_date(year, month(num(m, 2)?)?, day).ok()?;
            Some((start, start.next_day()?))
        }
        _ => None,
    }
}

/// A search bound (`since`, `until`): an RFC 3339 time, or a calendar date, month or year in
/// UTC (`2023-05-08`, `2023-05`, `2023`) meaning the whole period — as `since` from its
/// first instant, as `until` up to its end (`until: "2023-05-08"` includes that day). Moved
/// into the years both stores hold (a bound past them admits the same rows as one at their
/// edge).
pub fn opt_bound(field: &str, s: Option<&str>, edge: Edge) -> Result<Option<OffsetDateTime>> {
    let Some(s) = s else { return Ok(None) };
    let t = match period(s.trim()) {
        Some((start, end)) => match edge {
            Edge::Since => start.midnight().assume_utc(),
            Edge::Until => end.midnight().assume_utc(),
        },
        None => OffsetDateTime::parse(s, &Rfc3339).map(micros).map_err(|_| {
            Error::invalid(
                field,
                format!(
                    "{field} must be an RFC 3339 timestamp like 2026-02-22T10:00:00Z or a date \
                     like 2026-02-22 (also 2026-02 or 2026)"
                ),
            )
        })?,
    };
    let lo = time::Date::from_calendar_date(*YEARS.start(), time::Month::January, 1)
        .map(|d| d.midnight().assume_utc());
    let hi = time::Date::from_calendar_date(*YEARS.end(), time::Month::December, 31)
        .map(|d| d.with_hms_micro(23, 59, 59, 999_999).map(|d| d.assume_utc()));
    Ok(Some(match (lo, hi) {
        (Ok(lo), Ok(Ok(hi))) => t.clamp(lo, hi),
        _ => t,
    }))
}

/// `since` and `until` of a request, checked together: a window that ends before it starts,
/// or where it starts (`until` is exclusive: `since: "2023-05-02", until: "2023-05-01"` holds
/// no instant), is a mistake, not an empty result.
pub fn window(
    since: Option<&str>,
    until: Option<&str>,
) -> Result<(Option<OffsetDateTime>, Option<OffsetDateTime>)> {
    let s = opt_bound("since", since, Edge::Since)?;
    let u = opt_bound("until", until, Edge::Until)?;
    if let (Some(a), Some(b)) = (s, u)
        && b <= a
    {
        return Err(Error::invalid(
            "until",
            "until must be after since (a date as until includes that day): the window is empty",
        ));
    }
    Ok((s, u))
}

/// A timestamp to store: RFC 3339, in the years both stores hold ([`YEARS`]).
pub fn parse_ts(field: &str, s: &str) -> Result<OffsetDateTime> {
    let t = parse_any_ts(field, s)?;
    if !YEARS.contains(&t.to_offset(time::UtcOffset::UTC).year()) {
        return Err(Error::invalid(
            field,
            format!("{field} must be between the years {} and {}", YEARS.start(), YEARS.end()),
        ));
    }
    Ok(t)
}

/// The path (`messages[0].tool_name`) of the first string or object key in `v` that holds
/// the NUL character. PostgreSQL cannot store U+0000 in text or JSON, so the API refuses it
/// everywhere, on both backends, before anything is stored.
pub fn nul_path(v: &serde_json::Value) -> Option<String> {
    fn walk(v: &serde_json::Value, path: &str) -> Option<String> {
        match v {
            serde_json::Value::String(s) if s.contains('\0') => Some(path.to_string()),
            serde_json::Value::Array(a) => {
                a.iter().enumerate().find_map(|(i, x)| walk(x, &format!("{path}[{i}]")))
            }
            serde_json::Value::Object(o) => o.iter().find_map(|(k, x)| {
                if k.contains('\0') {
                    // Name the object, not the key that holds the NUL.
                    return Some(if path.is_empty() {
                        "key".to_string()
                    } else {
                        path.to_string()
                    });
                }
                walk(x, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") })
            }),
            serde_json::Value::Null
            | serde_json::Value::Bool(_)
            | serde_json::Value::Number(_)
            | serde_json::Value::String(_) => None,
        }
    }
    walk(v, "")
}

/// Refuse text with the NUL character in a JSON document (see [`nul_path`]).
pub fn check_no_nul(bytes: &[u8]) -> Result<()> {
    // Raw control characters are not valid JSON, so a NUL can only come as this escape.
    if !bytes.windows(6).any(|w| w == b"\\u0000") {
        return Ok(());
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) else { return Ok(()) };
    match nul_path(&v) {
        None => Ok(()),
        Some(p) => {
            let field = if p.is_empty() { "body".to_string() } else { p };
            Err(Error::invalid(
                field.clone(),
                format!("{field}: text must not contain the NUL character (U+0000)"),
            ))
        }
    }
}

pub fn opt_ts(field: &str, s: Option<&str>) -> Result<Option<OffsetDateTime>> {
    s.map(|s| parse_ts(field, s)).transpose()
}

/// Where a memory came from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceDto {
    /// `conversation`, `manual` or `import`.
    pub kind: String,
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub message_ids: Vec<String>,
}

/// A memory (fact) as returned by the API.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MemoryDto {
    pub id: String,
    pub user_id: String,
    pub agent_id: Option<String>,
    /// The memory pool (agent or cluster) the fact belongs to; null for user-wide facts.
    pub pool: Option<String>,
    /// `knowledge`, `profile` or `shared`.
    pub kind: String,
    pub key: Option<String>,
    /// `preference`, `fact`, `event`, `relationship`, `decision` or `general`.
    pub category: String,
    /// 1–10.
    pub importance: u8,
    pub rating: i64,
    pub content: String,
    pub source: SourceDto,
    pub observed_at: String,
    pub created_at: String,
    pub updated_at: String,
    pub last_accessed_at: Option<String>,
    pub access_count: i64,
    pub mention_count: i64,
    pub expires_at: Option<String>,
    pub superseded_at: Option<String>,
    pub superseded_by: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    pub embedding_model: Option<String>,
}

impl From<&Memory> for MemoryDto {
    fn from(m: &Memory) -> Self {
        MemoryDto {
            id: m.id.to_string(),
            user_id: m.user_id.to_string(),
            agent_id: m.agent_id.as_ref().map(ToString::to_string),
            pool: m.pool.clone(),
            kind: m.kind.as_str().into(),
            key: m.key.clone(),
            category: m.category.as_str().into(),
            importance: m.importance.get(),
            rating: m.rating,
            content: m.content.clone(),
            source: SourceDto {
                kind: m.source.kind.as_str().into(),
                conversation_id: m.source.conversation_id.as_ref().map(ToString::to_string),
                message_ids: m.source.message_ids.iter().map(ToString::to_string).collect(),
            },
            observed_at: fmt_ts(m.observed_at),
            created_at: fmt_ts(m.created_at),
            updated_at: fmt_ts(m.updated_at),
            last_accessed_at: m.last_accessed_at.map(fmt_ts),
            access_count: m.access_count,
            mention_count: m.mention_count,
            expires_at: m.expires_at.map(fmt_ts),
            superseded_at: m.superseded_at.map(fmt_ts),
            superseded_by: m.superseded_by.map(|s| s.to_string()),
            metadata: m.metadata.clone(),
            embedding_model: m.embedding_model.clone(),
        }
    }
}

impl MemoryDto {
    /// Back to a core memory (for import); `tenant` is the importer's.
    pub fn into_memory(self, tenant: &TenantId) -> Result<Memory> {
        Ok(Memory {
            id: MemoryId::parse(&self.id)?,
            tenant_id: tenant.clone(),
            user_id: UserId::parse(self.user_id)?,
            agent_id: self.agent_id.map(AgentId::parse).transpose()?,
            pool: self.pool,
            kind: Kind::parse(&self.kind)?,
            key: self.key,
            category: Category::parse(&self.category)?,
            importance: Importance::parse(i64::from(self.importance))?,
            rating: self.rating,
            content: self.content,
            source: Source {
                kind: SourceKind::parse(&self.source.kind)?,
                conversation_id: self
                    .source
                    .conversation_id
                    .map(ConversationId::parse)
                    .transpose()?,
                message_ids: self
                    .source
                    .message_ids
                    .iter()
                    .map(|s| MessageId::parse(s))
                    .collect::<Result<_>>()?,
            },
            observed_at: parse_ts("observed_at", &self.observed_at)?,
            created_at: parse_ts("created_at", &self.created_at)?,
            updated_at: parse_ts("updated_at", &self.updated_at)?,
            last_accessed_at: opt_ts("last_accessed_at", self.last_accessed_at.as_deref())?,
            access_count: self.access_count,
            mention_count: self.mention_count,
            expires_at: opt_ts("expires_at", self.expires_at.as_deref())?,
            superseded_at: opt_ts("superseded_at", self.superseded_at.as_deref())?,
            superseded_by: self.superseded_by.as_deref().map(MemoryId::parse).transpose()?,
            metadata: self.metadata,
            embedding_model: self.embedding_model,
        })
    }
}

/// One entry of a memory's audit trail.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EventDto {
    pub memory_id: String,
    /// `created`, `confirmed`, `superseded`, `forgotten`, `rated` or `imported`.
    pub event: String,
    pub related_id: Option<String>,
    pub actor: String,
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    pub at: String,
}

impl From<&MemoryEvent> for EventDto {
    fn from(e: &MemoryEvent) -> Self {
        EventDto {
            memory_id: e.memory_id.to_string(),
            event: e.event.as_str().into(),
            related_id: e.related_id.map(|r| r.to_string()),
            actor: e.actor.clone(),
            detail: e.detail.clone(),
            at: fmt_ts(e.at),
        }
    }
}

impl EventDto {
    pub fn into_event(self) -> Result<MemoryEvent> {
        Ok(MemoryEvent {
            memory_id: MemoryId::parse(&self.memory_id)?,
            event: EventKind::parse(&self.event)?,
            related_id: self.related_id.as_deref().map(MemoryId::parse).transpose()?,
            actor: self.actor,
            detail: self.detail,
            at: parse_ts("at", &self.at)?,
        })
    }
}

/// A stored message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageDto {
    pub id: String,
    pub conversation_id: String,
    pub user_id: String,
    pub agent_id: Option<String>,
    pub seq: i64,
    pub role: String,
    pub content: String,
    pub tool_name: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub tool_args: Option<serde_json::Value>,
    pub tool_result: Option<String>,
    pub turn_id: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    pub created_at: String,
    pub rating: i64,
}

impl From<&Message> for MessageDto {
    fn from(m: &Message) -> Self {
        MessageDto {
            id: m.id.to_string(),
            conversation_id: m.conversation_id.to_string(),
            user_id: m.user_id.to_string(),
            agent_id: m.agent_id.as_ref().map(ToString::to_string),
            seq: m.seq,
            role: m.role.as_str().into(),
            content: m.content.clone(),
            tool_name: m.tool_name.clone(),
            tool_args: m.tool_args.clone(),
            tool_result: m.tool_result.clone(),
            turn_id: m.turn_id.clone(),
            metadata: m.metadata.clone(),
            created_at: fmt_ts(m.created_at),
            rating: m.rating,
        }
    }
}

/// A summary of the DAG: a leaf summarizes messages, a branch leaves, a root branches.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SummaryDto {
    pub id: String,
    pub conversation_id: String,
    pub user_id: String,
    /// The summary one level up that covers this one, once written.
    pub parent_id: Option<String>,
    /// 0 for a leaf, 1 for a branch, 2 and above for a root.
    pub depth: i64,
    /// `leaf`, `branch` or `root`.
    pub kind: String,
    /// Starts with a line naming the level and the span, then the LLM's summary.
    pub content: String,
    /// Messages covered, through every level below.
    pub message_count: i64,
    /// The first and last covered message's `created_at`.
    pub earliest_at: String,
    pub latest_at: String,
    /// The LLM that wrote it.
    pub model: Option<String>,
    pub created_at: String,
}

impl From<&Summary> for SummaryDto {
    fn from(s: &Summary) -> Self {
        SummaryDto {
            id: s.id.to_string(),
            conversation_id: s.conversation_id.to_string(),
            user_id: s.user_id.to_string(),
            parent_id: s.parent_id.map(|p| p.to_string()),
            depth: s.depth,
            kind: s.kind.as_str().into(),
            content: s.content.clone(),
            message_count: s.message_count,
            earliest_at: fmt_ts(s.earliest_at),
            latest_at: fmt_ts(s.latest_at),
            model: s.model.clone(),
            created_at: fmt_ts(s.created_at),
        }
    }
}

/// An agent's settings.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgentDto {
    pub id: String,
    pub memory_enabled: bool,
    pub cluster_id: Option<String>,
    pub dedup_threshold: f32,
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&Agent> for AgentDto {
    fn from(a: &Agent) -> Self {
        AgentDto {
            id: a.id.to_string(),
            memory_enabled: a.memory_enabled,
            cluster_id: a.cluster_id.clone(),
            dedup_threshold: a.dedup_threshold,
            settings: a.settings.clone(),
            created_at: fmt_ts(a.created_at),
            updated_at: fmt_ts(a.updated_at),
        }
    }
}

/// The context block.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContextDto {
    /// `Known facts about the user:` followed by a bullet list.
    pub text: String,
    pub memory_ids: Vec<String>,
    pub token_estimate: usize,
    /// Not every active fact fit the budget; the most relevant were chosen.
    pub truncated: bool,
    /// Served from the session cache (same `session_id`; the facts part).
    pub cached: bool,
    /// With a `conversation_id`: the messages and summaries of the short-term context.
    pub message_ids: Vec<String>,
    pub summary_ids: Vec<String>,
}

impl From<&ContextBlock> for ContextDto {
    fn from(c: &ContextBlock) -> Self {
        ContextDto {
            text: c.text.clone(),
            memory_ids: c.memory_ids.iter().map(ToString::to_string).collect(),
            token_estimate: c.token_estimate,
            truncated: c.truncated,
            cached: c.cached,
            message_ids: c.message_ids.iter().map(ToString::to_string).collect(),
            summary_ids: c.summary_ids.iter().map(ToString::to_string).collect(),
        }
    }
}

pub fn decision_str(d: Decision) -> &'static str {
    match d {
        Decision::Add => "ADD",
        Decision::Update => "UPDATE",
        Decision::None => "NONE",
    }
}

/// One line of the JSONL export: a memory row and its audit trail.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExportLine {
    #[serde(rename = "type")]
    pub kind: String,
    pub memory: MemoryDto,
    #[serde(default)]
    pub events: Vec<EventDto>,
}

/// Result of a create.
#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    /// `ADD` (stored), `UPDATE` (a profile value replaced) or `NONE` (a near-duplicate of an existing fact, which was confirmed).
    pub decision: String,
    pub memory: MemoryDto,
    /// For `NONE`: cosine similarity to the existing fact.
    pub similarity: Option<f32>,
    /// What the PII filter replaced in the content as given (`email`, `phone`, `card`,
    /// `iban`, `national_id`, `secret`), in order; empty when the content is stored as given.
    pub redacted: Vec<String>,
}

impl From<&engram_core::engine::Remembered> for Created {
    fn from(r: &engram_core::engine::Remembered) -> Self {
        Created {
            decision: decision_str(r.decision).into(),
            memory: (&r.memory).into(),
            similarity: r.similarity.map(|s| s.clamp(-1.0, 1.0)),
            redacted: r.redacted.iter().map(|k| k.as_str().to_string()).collect(),
        }
    }
}

impl From<engram_core::engine::Stats> for StatsDto {
    fn from(s: engram_core::engine::Stats) -> Self {
        StatsDto {
            import_unfinished: s.import_unfinished.clone(),
            embedder: s.embedder,
            embedder_dims: s.embedder_dims,
            embedding_coverage: s.embedding_coverage,
            message_embedding_coverage: s.message_embedding_coverage,
            extraction: ExtractionStats {
                enabled: s.extraction_enabled,
                llm: s.llm,
                health: s.extraction_health,
                failed: s.store.extractions_failed,
                pending: s.backlog.extractions_pending,
                last_success_at: s.store.last_extraction_at.map(fmt_ts),
            },
            backlog: BacklogDto {
                embedding: EmbeddingBacklog {
                    messages: s.backlog.messages_unembedded,
                    oldest_seconds: age(s.backlog.embedding_since, s.at),
                },
                extraction: ExtractionBacklog {
                    jobs: s.backlog.extractions_pending,
                    oldest_seconds: age(s.backlog.extraction_since, s.at),
                },
            },
            compaction: CompactionStats {
                enabled: s.extraction_enabled,
                status: match s.compaction {
                    CompactionStatus::Off => "off: no LLM configured",
                    CompactionStatus::Running => "running",
                    CompactionStatus::WaitingForExtraction => "waiting for extraction",
                    CompactionStatus::Failed => "failed",
                    CompactionStatus::Idle => "idle",
                }
                .into(),
                unsummarized_messages: s.store.messages_unsummarized,
                summaries: s.store.summaries,
                tree_depth: s.store.summary_depth,
                summary_embedding_coverage: if s.store.summaries == 0 {
                    1.0
                } else {
                    s.store.summaries_with_vector as f64 / s.store.summaries as f64
                },
                pending: s.store.compactions_pending,
                done: s.store.compactions_done,
                failed: s.store.compactions_failed,
            },
            store: (&s.store).into(),
        }
    }
}

/// The store's counters in `/v1/stats` (flattened into [`StatsDto`]).
#[derive(Debug, Serialize, ToSchema)]
pub struct StoreStatsDto {
    pub memories_active: u64,
    pub memories_superseded: u64,
    /// Active facts that are searchable by meaning: those with a vector, and profile facts,
    /// which need none (every context block holds them).
    pub memories_with_vector: u64,
    /// Users with memories or conversations.
    pub users: u64,
    pub conversations: u64,
    pub messages: u64,
    pub messages_with_vector: u64,
    pub messages_unsummarized: u64,
    pub summaries: u64,
    pub summary_depth: u64,
    pub jobs_pending: u64,
    pub jobs_running: u64,
    /// Jobs failed for good (kept until `engram jobs retry` runs them again).
    pub jobs_failed: u64,
    /// Jobs finished within the retention window (`--job-retention-secs`, a week by
    /// default); older ones are deleted.
    pub jobs_done: u64,
    /// Extractions finished within the retention window.
    pub extractions_done: u64,
    pub extractions_failed: u64,
    pub embedding_model: Option<String>,
    pub embedding_dims: Option<u64>,
}

impl From<&engram_core::store::StoreStats> for StoreStatsDto {
    fn from(s: &engram_core::store::StoreStats) -> Self {
        StoreStatsDto {
            memories_active: s.memories_active,
            memories_superseded: s.memories_superseded,
            memories_with_vector: s.memories_with_vector,
            users: s.users,
            conversations: s.conversations,
            messages: s.messages,
            messages_with_vector: s.messages_with_vector,
            messages_unsummarized: s.messages_unsummarized,
            summaries: s.summaries,
            summary_depth: s.summary_depth,
            jobs_pending: s.jobs_pending,
            jobs_running: s.jobs_running,
            jobs_failed: s.jobs_failed,
            jobs_done: s.jobs_done,
            extractions_done: s.extractions_done,
            extractions_failed: s.extractions_failed,
            embedding_model: s.embedding_model.clone(),
            embedding_dims: s.embedding_dims,
        }
    }
}

/// Rows removed by a GDPR erasure, per table.
#[derive(Debug, Serialize, ToSchema)]
pub struct EraseCountsDto {
    pub memories: u64,
    pub memory_events: u64,
    pub messages: u64,
    pub conversations: u64,
    pub summaries: u64,
    pub jobs: u64,
    pub cursors: u64,
    pub recalls: u64,
    pub context_sessions: u64,
    /// Working-memory entries.
    pub session_state: u64,
}

impl From<&engram_core::store::EraseCounts> for EraseCountsDto {
    fn from(c: &engram_core::store::EraseCounts) -> Self {
        EraseCountsDto {
            memories: c.memories,
            memory_events: c.memory_events,
            messages: c.messages,
            conversations: c.conversations,
            summaries: c.summaries,
            jobs: c.jobs,
            cursors: c.cursors,
            recalls: c.recalls,
            context_sessions: c.context_sessions,
            session_state: c.session_state,
        }
    }
}

/// An API key as `keys list --json` prints it (never the secret; the hash neither).
pub fn key_json(k: &engram_core::store::ApiKey) -> serde_json::Value {
    let (role, bound) = match &k.role {
        engram_core::model::KeyRole::Admin => ("admin", None),
        engram_core::model::KeyRole::Agent(a) => ("agent", Some(a.to_string())),
        engram_core::model::KeyRole::User(u) => ("user", Some(u.to_string())),
    };
    serde_json::json!({ "id": k.id, "tenant": k.tenant.to_string(), "role": role, "bound_to": bound,
        "prefix": k.prefix, "created_at": fmt_ts(k.created_at), "revoked_at": k.revoked_at.map(fmt_ts) })
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatsDto {
    #[serde(flatten)]
    pub store: StoreStatsDto,
    pub embedder: String,
    pub embedder_dims: usize,
    /// Share of active facts with a vector of the current model, profile facts counted as
    /// covered (they need none); 1.0 = complete.
    pub embedding_coverage: f64,
    /// Share of transcript messages with a vector (embedded in the background; 1.0 when
    /// the queue has caught up; tool calls not yet described have no text to embed).
    pub message_embedding_coverage: f64,
    pub extraction: ExtractionStats,
    pub compaction: CompactionStats,
    pub backlog: BacklogDto,
    /// An `engram import` that has not finished (killed, a full disk): the file and when it
    /// began. Its rows so far are in the store; running it again completes it. Null
    /// otherwise.
    pub import_unfinished: Option<String>,
}

/// Seconds from `since` to `at` (0 if the clock went back), or none.
pub fn age(since: Option<time::OffsetDateTime>, at: time::OffsetDateTime) -> Option<f64> {
    since.map(|t| (at - t).as_seconds_f64().max(0.0))
}

/// What the background jobs have not caught up with yet.
#[derive(Debug, Serialize, ToSchema)]
pub struct BacklogDto {
    pub embedding: EmbeddingBacklog,
    pub extraction: ExtractionBacklog,
}

/// Messages waiting for their vector: until embedded they are found by keywords only.
#[derive(Debug, Serialize, ToSchema)]
pub struct EmbeddingBacklog {
    /// Messages without a vector.
    pub messages: u64,
    /// Age in seconds of the oldest embedding job still waiting or running (null: none).
    pub oldest_seconds: Option<f64>,
}

/// Conversation turns waiting for fact extraction.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExtractionBacklog {
    /// Extraction jobs waiting or running.
    pub jobs: u64,
    /// Age in seconds of the oldest of them (null: none).
    pub oldest_seconds: Option<f64>,
}

/// The compactor (the summary DAG).
#[derive(Debug, Serialize, ToSchema)]
pub struct CompactionStats {
    /// Compaction runs (an LLM is configured); without one, nothing is compacted.
    pub enabled: bool,
    /// `idle`; `running` (jobs waiting or running); `waiting for extraction` (messages are
    /// unsummarized and extraction jobs failed for good: a conversation is summarized only as
    /// far as extraction has read it, so theirs wait until the failed jobs are retried with
    /// `engram jobs retry` or on the health page); `failed` (messages are unsummarized and
    /// compaction jobs failed for good: retry them the same way); or `off: no LLM
    /// configured`.
    pub status: String,
    /// Messages no summary covers yet.
    pub unsummarized_messages: u64,
    pub summaries: u64,
    /// Levels of the deepest summary tree (1: leaves only; 3: leaves, branches and a root).
    pub tree_depth: u64,
    /// Share of summaries with a vector (1.0 when every one is embedded).
    pub summary_embedding_coverage: f64,
    pub pending: u64,
    pub done: u64,
    pub failed: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExtractionStats {
    /// Automatic extraction runs (an LLM is configured).
    pub enabled: bool,
    /// The LLM, or why extraction is off.
    pub llm: String,
    /// Extraction jobs done / (done + failed for good); null before the first one.
    pub health: Option<f64>,
    pub failed: u64,
    /// Extraction jobs waiting or running.
    pub pending: u64,
    /// When the newest extraction finished (RFC 3339); null when none is on record
    /// (finished jobs are kept for `--job-retention-secs`, a week by default).
    pub last_success_at: Option<String>,
}

/// Everything stored about one user (GDPR portability), as `GET /v1/users/{id}/export` and
/// the web UI's download give it.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserExportDto {
    pub tenant_id: String,
    pub user_id: String,
    pub memories: Vec<MemoryDto>,
    pub events: Vec<EventDto>,
    pub messages: Vec<MessageDto>,
    /// The user's conversations, each with the rolling summary extraction keeps of it.
    pub conversations: Vec<ExportedConversationDto>,
    pub summaries: Vec<SummaryDto>,
    /// The user's live working memory, every session.
    pub session_state: Vec<super::state::StateEntryDto>,
}

/// A conversation in a user's export (as `GET /v1/conversations/{id}` shows it).
#[derive(Debug, Serialize, ToSchema)]
pub struct ExportedConversationDto {
    pub id: String,
    pub agent_id: Option<String>,
    pub message_count: i64,
    pub created_at: String,
    pub updated_at: String,
    /// The rolling summary extraction keeps of the conversation (null before the first
    /// extraction, or with no LLM configured).
    pub rolling_summary: Option<String>,
}

impl From<&engram_core::engine::UserExport> for UserExportDto {
    fn from(x: &engram_core::engine::UserExport) -> Self {
        UserExportDto {
            tenant_id: x.tenant_id.to_string(),
            user_id: x.user_id.to_string(),
            memories: x.memories.iter().map(Into::into).collect(),
            events: x.events.iter().map(Into::into).collect(),
            messages: x.messages.iter().map(Into::into).collect(),
            conversations: x
                .conversations
                .iter()
                .map(|c| ExportedConversationDto {
                    id: c.info.id.to_string(),
                    agent_id: c.info.agent_id.as_ref().map(ToString::to_string),
                    message_count: c.info.messages,
                    created_at: fmt_ts(c.info.created_at),
                    updated_at: fmt_ts(c.info.updated_at),
                    rolling_summary: c.rolling_summary.clone(),
                })
                .collect(),
            summaries: x.summaries.iter().map(Into::into).collect(),
            session_state: x.session_state.iter().map(Into::into).collect(),
        }
    }
}
