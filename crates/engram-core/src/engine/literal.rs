//! Literal transcript search (seed 004's grep modes): `mode: "substring"` finds the messages
//! that contain the query as written, `mode: "regex"` those a regular expression matches;
//! both case-insensitive, newest first, over one user's messages in the time window, and
//! only over messages (`sources: ["messages"]`).
//!
//! **Bounded.** A pattern has at most [`MAX_PATTERN_CHARS`] characters; a regex is compiled
//! by the `regex` crate (linear-time matching, no backtracking) under a size limit, so no
//! pattern can make matching slow; at most [`MAX_SCANNED`] of the user's newest messages are
//! read. A pattern that does not compile is a 400 naming the error.

use regex::{Regex, RegexBuilder};

use crate::error::{Error, Result};
use crate::model::Message;
use crate::retrieval::Explain;
use crate::store::TranscriptFilter;

use super::scope::View;
use super::{Engine, Hit, SearchInput, SearchMode, SearchSource};

/// Characters of a substring or regex query at most.
pub const MAX_PATTERN_CHARS: usize = 512;

/// Messages a literal search reads at most (the user's newest in the window).
pub const MAX_SCANNED: usize = 50_000;

/// Bytes of a compiled regex at most (the `regex` crate's size limit).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Messages read per store call.
const PAGE: usize = 1_000;

/// The matcher of a literal search.
enum Matcher {
    /// The query, lowercased.
    Substring(String),
    Regex(Regex),
}

impl Matcher {
    fn new(mode: SearchMode, query: &str) -> Result<Self> {
        if query.chars().count() > MAX_PATTERN_CHARS {
            return Err(Error::invalid(
                "query",
                format!("a {} query has at most {MAX_PATTERN_CHARS} characters", mode_name(mode)),
            ));
        }
        match mode {
            SearchMode::Regex => RegexBuilder::new(query)
                .case_insensitive(true)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map(Matcher::Regex)
                .map_err(|e| {
                    Error::invalid(
                        "query",
                        format!("the query is not a valid regular expression: {e}"),
                    )
                }),
            SearchMode::Substring
            | SearchMode::Hybrid
            | SearchMode::VectorOnly
            | SearchMode::TextOnly => Ok(Matcher::Substring(query.to_lowercase())),
        }
    }

    fn matches(&self, m: &Message) -> bool {
        let text = match (&m.tool_name, m.content.is_empty()) {
            (Some(t), true) => t.as_str(),
            _ => m.content.as_str(),
        };
        match self {
            Matcher::Substring(q) => text.to_lowercase().contains(q.as_str()),
            Matcher::Regex(r) => r.is_match(text),
        }
    }
}

fn mode_name(mode: SearchMode) -> &'static str {
    if mode == SearchMode::Regex { "regex" } else { "substring" }
}

impl Engine {
    /// A substring or regex search over the user's messages, newest first.
    pub(super) async fn literal_search(
        &self,
        v: &View,
        input: &SearchInput,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>> {
        if input.sources != [SearchSource::Messages] {
            return Err(Error::invalid(
                "sources",
                format!(
                    "mode {} searches messages only: set sources to [\"messages\"]",
                    mode_name(input.mode)
                ),
            ));
        }
        let matcher = Matcher::new(input.mode, query)?;
        let user =
            v.user.clone().ok_or_else(|| Error::invalid("user_id", "user_id is required"))?;
        let (since, until, pooled) = (input.since, input.until, v.pool.is_some());
        let window = TranscriptFilter { user, since, until, pooled };
        let (mut hits, mut scanned, mut before) = (Vec::new(), 0, None);
        while hits.len() < limit && scanned < MAX_SCANNED {
            let page = self.svc.store.scan_messages(&v.tenant, &window, before, PAGE).await?;
            let Some(last) = page.last() else { break };
            before = Some((last.created_at, last.id));
            scanned += page.len();
            let full = page.len() == PAGE;
            let found: Vec<Message> = page.into_iter().filter(|m| matcher.matches(m)).collect();
            for m in self.visible_messages(v, found).await? {
                // A literal match holds the whole query: full lexical support.
                let explain = Explain {
                    text_coverage: Some(1.0),
                    lexical: 1.0,
                    relevance: 1.0,
                    score: 1.0,
                    importance: 5,
                    rating: m.rating,
                    ..Default::default()
                };
                hits.push(Hit::Message { message: m, score: 1.0, explain });
                if hits.len() == limit {
                    break;
                }
            }
            if !full {
                break;
            }
        }
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MessageRole;

    #[test]
    fn substring_and_regex_match_case_insensitively_and_bad_patterns_are_refused() {
        let m = Message::sample(MessageRole::User, "Ticket PROJ-1234 is blocked on review.");
        let sub = Matcher::new(SearchMode::Substring, "proj-1234").unwrap();
        assert!(sub.matches(&m));
        assert!(!Matcher::new(SearchMode::Substring, "proj-12345").unwrap().matches(&m));
        let re = Matcher::new(SearchMode::Regex, r"proj-\d{4}\b").unwrap();
        assert!(re.matches(&m));
        assert!(!Matcher::new(SearchMode::Regex, r"^blocked").unwrap().matches(&m));
        let e = Matcher::new(SearchMode::Regex, "(unclosed").err().unwrap();
        assert!(e.to_string().contains("not a valid regular expression"), "{e}");
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert!(Matcher::new(SearchMode::Substring, &long).is_err());
        // A pattern whose compiled form is huge is refused, not run.
        assert!(Matcher::new(SearchMode::Regex, r"\w{1000}\w{1000}").is_err());
        // A tool call without text matches on its tool's name.
        let mut tool = Message::sample(MessageRole::Assistant, "");
        tool.tool_name = Some("calendar_lookup".into());
        assert!(Matcher::new(SearchMode::Substring, "calendar").unwrap().matches(&tool));
    }
}
