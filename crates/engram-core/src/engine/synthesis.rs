//! Optional synthesis (seed 004): a short answer to a search's query, grounded in its hits
//! and citing them, written by the main-tier LLM. The LLM sees each hit under a short label
//! (`[1]`, `[2]`, … — never a stored id, as in consolidation) and cites the labels; the
//! answer keeps them, and the citations map each one it used to the hit's type and id.
//! Labels it was not shown are removed. Without an LLM, synthesis is a 422, never a silent
//! no-op; a failing LLM is a 503 (`llm_unavailable`).

use std::time::Instant;

use crate::error::{Error, Result};
use crate::llm::{ChatMessage, ChatRequest, ChatRole, Tier};
use crate::pipeline::compact::iso_minute;
use crate::pipeline::prompts;

use super::{Engine, Hit};

/// The answer when the search found nothing: no LLM call.
pub const NOTHING_KNOWN: &str = "Nothing relevant is known.";

/// Characters of one record shown to the LLM at most (summaries can be long).
const RECORD_CHARS: usize = 1_500;

/// A synthesized answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthesis {
    /// The answer, with `[n]` citation labels.
    pub answer: String,
    /// Each label the answer cites: the hit it stands for.
    pub citations: Vec<Citation>,
}

/// One cited hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Citation {
    pub label: usize,
    /// `memory`, `message` or `summary`.
    pub kind: &'static str,
    pub id: String,
}

/// The records the LLM reads: `[n] (what, when) text`, one per hit, labels from 1.
pub fn records(hits: &[Hit]) -> String {
    let mut out = String::new();
    for (i, h) in hits.iter().enumerate() {
        let (what, text) = match h {
            Hit::Memory { memory, .. } => {
                (format!("fact, observed {}", iso_minute(memory.observed_at)), &memory.content)
            }
            Hit::Message { message, .. } => (
                format!(
                    "message by the {}, {}",
                    message.role.as_str(),
                    iso_minute(message.created_at)
                ),
                &message.content,
            ),
            Hit::Summary { summary, .. } => (
                format!(
                    "summary of a conversation, {} to {}",
                    iso_minute(summary.earliest_at),
                    iso_minute(summary.latest_at)
                ),
                &summary.content,
            ),
        };
        let text: String = text.chars().take(RECORD_CHARS).collect();
        out.push_str(&format!("[{}] ({what}) {}\n", i + 1, text.trim()));
    }
    out
}

/// The citations of an answer: every `[n]` label of a shown hit, in order of first use;
/// labels of no hit are removed from the text.
/// Longest answer passed on, in characters: the LLM is asked for 400 tokens (about 1,600
/// characters); one that ignores it is cut at the last sentence end before this (found by a
/// tester: a 100,000-character answer came back whole).
pub const ANSWER_CHARS: usize = 4_000;

fn capped(answer: &str) -> &str {
    let Some((cut, _)) = answer.char_indices().nth(ANSWER_CHARS) else { return answer };
    let head = &answer[..cut];
    let end = head.char_indices().rev().find(|(_, c)| matches!(c, '.' | '!' | '?' | '。'));
    match end {
        Some((i, c)) if i > cut / 2 => &head[..i + c.len_utf8()],
        _ => head,
    }
}

pub fn cite(answer: &str, hits: &[Hit]) -> Synthesis {
    let mut text = String::with_capacity(answer.len());
    let mut citations: Vec<Citation> = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let label = after.find(']').and_then(|close| {
            let n = after[..close].trim().parse::<usize>().ok()?;
            Some((n, close))
        });
        match label {
            Some((n, close)) if (1..=hits.len()).contains(&n) => {
                text.push_str(&format!("[{n}]"));
                if !citations.iter().any(|c| c.label == n) {
                    let (kind, id) = match &hits[n - 1] {
                        Hit::Memory { memory, .. } => ("memory", memory.id.to_string()),
                        Hit::Message { message, .. } => ("message", message.id.to_string()),
                        Hit::Summary { summary, .. } => ("summary", summary.id.to_string()),
                    };
                    citations.push(Citation { label: n, kind, id });
                }
                rest = &after[close + 1..];
            }
            // A label of nothing shown: dropped, with the space before it when punctuation
            // follows ("a claim [9]." → "a claim.").
            Some((_, close)) => {
                rest = &after[close + 1..];
                if rest.starts_with(['.', ',', ';', ':', '!', '?', ')']) {
                    text.truncate(text.trim_end().len());
                }
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    Synthesis { answer: text.split_whitespace().collect::<Vec<_>>().join(" "), citations }
}

impl Engine {
    /// A short answer to `query` grounded in `hits` (what a search returned to the caller).
    pub async fn synthesize(&self, query: &str, hits: &[Hit]) -> Result<Synthesis> {
        let Some(llm) = self.svc.llm.as_ref() else {
            return Err(Error::Unprocessable(
                "synthesize needs an LLM, and none is configured (start engram with \
                 --llm-provider, or ENGRAM_LLM_PROVIDER)"
                    .into(),
            ));
        };
        if hits.is_empty() {
            return Ok(Synthesis { answer: NOTHING_KNOWN.into(), citations: vec![] });
        }
        let req = ChatRequest {
            tier: Tier::Main,
            model: None,
            system: prompts::SYNTHESIZE.to_string(),
            messages: vec![ChatMessage {
                role: ChatRole::User,
                content: format!("Question: {query}\n\nRecords:\n{}", records(hits)),
            }],
            max_tokens: 400,
            json: false,
            temperature: 0.0,
        };
        let started = Instant::now();
        let res = llm.chat(&req).await;
        self.svc.metrics.observe_llm("synthesize", started.elapsed(), res.as_ref().ok());
        let res = res.map_err(|e| Error::Llm(e.message))?;
        let answer = res.content.trim();
        if answer.is_empty() {
            return Err(Error::Llm("the LLM returned an empty answer".into()));
        }
        Ok(cite(capped(answer), hits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Memory, Source, SourceKind, TenantId, UserId};
    use crate::retrieval::Explain;

    fn fact(text: &str) -> Hit {
        let m = Memory::new(
            TenantId::default_tenant(),
            UserId::parse("u").unwrap(),
            text.into(),
            Source { kind: SourceKind::Manual, conversation_id: None, message_ids: vec![] },
            time::OffsetDateTime::UNIX_EPOCH,
        );
        Hit::Memory { memory: m, score: 1.0, explain: Explain::default() }
    }

    #[test]
    fn labels_map_to_hits_and_unknown_labels_are_dropped() {
        let hits = vec![fact("The user lives in Porto."), fact("The user has a cat named Miso.")];
        let r = records(&hits);
        assert!(
            r.starts_with("[1] (fact, observed 1970-01-01T00:00Z) The user lives in Porto.\n"),
            "{r}"
        );
        assert!(r.contains("[2] (fact"));
        let s =
            cite("They live in Porto [1] with a cat [2][ 1 ] and a dog [7]. See [note].", &hits);
        assert_eq!(s.answer, "They live in Porto [1] with a cat [2][1] and a dog. See [note].");
        let labels: Vec<usize> = s.citations.iter().map(|c| c.label).collect();
        assert_eq!(labels, [1, 2]);
        let Hit::Memory { memory, .. } = &hits[1] else { unreachable!() };
        assert_eq!(
            (s.citations[1].kind, s.citations[1].id.clone()),
            ("memory", memory.id.to_string())
        );
        let none = cite("Nothing relevant is known.", &hits);
        assert!(none.citations.is_empty());
    }

    #[test]
    fn a_long_answer_is_cut_at_a_sentence_end() {
        let long = "The user likes tea. ".repeat(1_000);
        let cut = capped(&long);
        assert!(cut.chars().count() <= ANSWER_CHARS && cut.ends_with("tea."), "{}", cut.len());
        assert_eq!(capped("Short."), "Short.");
        let unbroken = "x".repeat(ANSWER_CHARS + 10);
        assert_eq!(capped(&unbroken).chars().count(), ANSWER_CHARS);
    }
}
