//! The wire shapes of search results: a result (memory, message or summary) with its
//! score and `explain`, an expanded summary's messages, and a synthesized answer with its
//! citations. Stored rows' shapes are in [`super::dto`].

use engram_core::engine::{Hit, Synthesis};
use engram_core::retrieval::Explain;
use serde::Serialize;
use utoipa::ToSchema;

use super::dto::{MemoryDto, MessageDto, SummaryDto};

/// Every component of a score and of the order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExplainDto {
    pub vector_rank: Option<usize>,
    /// Cosine similarity to the query as asked (also for messages ranked by a vector
    /// without the speakers' names, see `speakers`).
    pub vector_similarity: Option<f32>,
    pub text_rank: Option<usize>,
    /// Share of the query's keyword weight (IDF) held by the query words in the row, 0–1.
    pub text_coverage: Option<f64>,
    /// The cosine read on the embedder's scale: 0 at what unrelated texts reach, 1 for a
    /// close paraphrase.
    pub semantic: f64,
    /// The keyword coverage squared (0 when the keyword list did not return the row): one
    /// word of a three-word query is weak support.
    pub lexical: f64,
    /// 1-based rank in the date list (when the query names a time), if present there.
    pub date_rank: Option<usize>,
    /// Support from the time the query names: 0.3 when the row's own relative date
    /// ("yesterday") points into it, 0.15 when it was written or observed within it.
    pub date_match: f64,
    /// Message results: support from the message's context, 0.25 × the best relevance of
    /// the two messages numbered just before it in its conversation when they were
    /// candidates of the same search (an answer after a matching question); else 0.
    pub context_support: f64,
    /// `1 − (1 − semantic)·(1 − lexical)·(1 − date_match)`, or `context_support` when that
    /// is larger: the score.
    pub relevance: f64,
    /// Reciprocal Rank Fusion of the two lists (k = 60).
    pub rrf: f64,
    pub days_since_access: f64,
    pub access_count: i64,
    pub temporal: f64,
    pub temporal_weight: f64,
    pub importance: u8,
    pub importance_weight: f64,
    pub rating: i64,
    pub rating_weight: f64,
    /// Message results: 2 when the query names the message's speaker (its content opens with
    /// a `Name: ` label, as transcripts of several people do, and the query uses the name),
    /// else 1.
    pub speaker_weight: f64,
    /// What orders the results:
    /// `rrf × temporal_weight × importance_weight × rating_weight × speaker_weight`.
    pub rank_score: f64,
    /// The relevance.
    pub score: f64,
    /// Message results: how many messages of the searched window the vector list could not
    /// see yet because they wait for their vector (background embedding: found by keywords
    /// only until then). Absent when not counted (a key limited to one agent's pool, or a
    /// text-only search).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unembedded_messages: Option<u64>,
    /// The time the query names, as search read it: the days (`2022-03-16`, `2022-03-07 to
    /// 2022-03-13`) and how (the words; a relative time's anchor, the user's latest message;
    /// an event's message and day). Absent when the query names no time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Message results of a query that names speakers of the user's transcripts (messages
    /// that open with `Name: `): the text that searched the messages by meaning, the query
    /// with the names mostly left out. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speakers: Option<String>,
}

impl From<&Explain> for ExplainDto {
    fn from(e: &Explain) -> Self {
        ExplainDto {
            vector_rank: e.vector_rank,
            vector_similarity: e.vector_similarity,
            text_rank: e.text_rank,
            text_coverage: e.text_coverage,
            semantic: e.semantic,
            lexical: e.lexical,
            date_rank: e.date_rank,
            date_match: e.date_match,
            context_support: e.context_support,
            relevance: e.relevance,
            rrf: e.rrf,
            days_since_access: e.days_since_access,
            access_count: e.access_count,
            temporal: e.temporal,
            temporal_weight: e.temporal_weight,
            importance: e.importance,
            importance_weight: e.importance_weight,
            rating: e.rating,
            rating_weight: e.rating_weight,
            speaker_weight: e.speaker_weight,
            rank_score: e.rank_score,
            score: e.score,
            unembedded_messages: e.unembedded_messages,
            time: e.time.clone(),
            speakers: e.speakers.clone(),
        }
    }
}

/// A source message of an expanded summary hit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExpandedDto {
    /// The message's relevance to the query (0 to 1).
    pub score: f64,
    pub message: MessageDto,
}

/// A search's synthesized answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnswerDto {
    /// A few sentences, with `[n]` labels citing the results they rest on.
    pub text: String,
    /// What each cited label stands for.
    pub citations: Vec<CitationDto>,
}

/// One cited result.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CitationDto {
    /// The `[n]` in the answer (n is the result's position, from 1).
    pub label: usize,
    /// `memory`, `message` or `summary`.
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

impl From<&Synthesis> for AnswerDto {
    fn from(s: &Synthesis) -> Self {
        AnswerDto {
            text: s.answer.clone(),
            citations: s
                .citations
                .iter()
                .map(|c| CitationDto { label: c.label, kind: c.kind.into(), id: c.id.clone() })
                .collect(),
        }
    }
}

/// One search result.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchResultDto {
    /// `memory`, `message` or `summary`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Relevance to the query, 0 to 1, comparable across queries: `1 − (1 − semantic)·(1 −
    /// lexical)`, where semantic support is the cosine similarity on the embedder's scale and
    /// lexical support the share of the query's keyword weight the result holds. Results are
    /// ordered by the fused rank (`explain.rank_score`).
    pub score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryDto>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<MessageDto>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<SummaryDto>,
    /// With `expand`, for a summary: the source messages that best match the query (up to
    /// 3), best first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expanded: Option<Vec<ExpandedDto>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<ExplainDto>,
}

impl SearchResultDto {
    /// A hit as returned; `expand`: the search asked for expanded summaries.
    pub fn from_hit(h: &Hit, explain: bool, expand: bool) -> Self {
        match h {
            Hit::Memory { memory, score, explain: e } => SearchResultDto {
                kind: "memory".into(),
                score: *score,
                memory: Some(memory.into()),
                message: None,
                summary: None,
                expanded: None,
                explain: explain.then(|| e.into()),
            },
            Hit::Message { message, score, explain: e } => SearchResultDto {
                kind: "message".into(),
                score: *score,
                memory: None,
                message: Some(message.into()),
                summary: None,
                expanded: None,
                explain: explain.then(|| e.into()),
            },
            Hit::Summary { summary, score, explain: e, expanded } => SearchResultDto {
                kind: "summary".into(),
                score: *score,
                memory: None,
                message: None,
                summary: Some(summary.into()),
                expanded: expand.then(|| {
                    expanded
                        .iter()
                        .map(|(m, s)| ExpandedDto { score: *s, message: m.into() })
                        .collect()
                }),
                explain: explain.then(|| e.into()),
            },
        }
    }
}
