//! Keyword search for text written without spaces (Chinese, Japanese; Korean words carry
//! their particles): the keyword indexes split words at spaces and punctuation, so
//! `用户住在北京` is one word there and the query `北京` matched nothing (found by a tester:
//! only a whole clause between punctuation was found).
//!
//! A query with such characters gets its keyword list from a scan instead: its characters
//! as overlapping pairs (`北京烤鸭` → 北京, 京烤, 烤鸭; a lone character as itself), the
//! other words of three letters or more as they are, each matched as a substring of the
//! user's rows, weighed by its IDF over them as the stores weigh terms (smoothed under
//! four rows; a term in half the rows or more counts almost nothing unless all do), and
//! ranked by the weight each row holds. The list's score is that weight's share of the
//! query's (coverage, as the indexes give it). The scan reads the user's active facts, or
//! the newest [`MESSAGES_SCANNED`] messages of the search window; summaries keep the index.

use crate::error::Result;
use crate::model::{MemoryId, MessageId, TenantId};
use crate::retrieval::is_wide;
use crate::store::{MemoryFilter, TranscriptFilter};

use super::Engine;

/// Messages a scan reads at most, newest first.
pub const MESSAGES_SCANNED: usize = 5_000;

/// Chinese function characters that split a query's run like punctuation, as English
/// function words leave keyword queries: "上海的天气怎么样" asks about 上海 and 天气, and
/// pairs across them (海的, 的天, 气怎) are words of no text. Japanese hiragana, which
/// mostly writes grammar (は, を, に, でした), split it too.
const FUNCTION_CHARS: &str =
    "的了是在和与及或也就都而吗呢吧啊呀这那哪怎么什样为把被给我你他她它们个很还着过";

fn splits(c: char) -> bool {
    !c.is_alphanumeric() || FUNCTION_CHARS.contains(c) || ('\u{3040}'..='\u{309F}').contains(&c)
}

/// The scan's terms of `query`, or none when it has no character written without spaces.
pub fn terms(query: &str) -> Vec<String> {
    let q = query.to_lowercase();
    if !q.chars().any(is_wide) {
        return vec![];
    }
    let mut out: Vec<String> = Vec::new();
    for run in q.split(splits).filter(|r| !r.is_empty()) {
        let chars: Vec<char> = run.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let wide = is_wide(chars[i]);
            let j = (i..chars.len()).find(|&j| is_wide(chars[j]) != wide).unwrap_or(chars.len());
            let seg = &chars[i..j];
            if wide && seg.len() == 1 {
                out.push(seg[0].to_string());
            } else if wide {
                out.extend(seg.windows(2).map(|w| w.iter().collect::<String>()));
            } else if seg.len() >= 3 {
                out.push(seg.iter().collect());
            }
            i = j;
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|t| seen.insert(t.clone()));
    out
}

/// Rows (`id`, text) ranked by the weight of the `terms` each holds (see the module doc),
/// best first, at most `k`, each with its coverage.
pub fn ranked<K: Copy>(rows: &[(K, String)], terms: &[String], k: usize) -> Vec<(K, f64)> {
    let texts: Vec<String> = rows.iter().map(|(_, t)| t.to_lowercase()).collect();
    let n = texts.len() as f64;
    let df: Vec<f64> = terms
        .iter()
        .map(|t| texts.iter().filter(|x| x.contains(t.as_str())).count() as f64)
        .collect();
    let common = |d: f64| n >= crate::retrieval::MIN_ROWS_FOR_IDF as f64 && d * 2.0 >= n;
    let all_common = df.iter().all(|d| common(*d));
    let weights: Vec<f64> = df
        .iter()
        .map(|&d| if common(d) && !all_common { 1e-6 } else { crate::retrieval::term_weight(n, d) })
        .collect();
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        return vec![];
    }
    let mut hits: Vec<(usize, f64)> = texts
        .iter()
        .enumerate()
        .filter_map(|(i, x)| {
            let held: f64 = terms
                .iter()
                .zip(&weights)
                .filter(|(t, _)| x.contains(t.as_str()))
                .map(|(_, w)| *w)
                .sum();
            (held > 0.0).then_some((i, held))
        })
        .collect();
    // The most weight first; of equals, the shorter text (more of it is the match).
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(texts[a.0].len().cmp(&texts[b.0].len())));
    hits.truncate(k);
    hits.into_iter().map(|(i, held)| (rows[i].0, (held / total).clamp(0.0, 1.0))).collect()
}

impl Engine {
    /// The keyword list of a memory search: the store's index, or for a query with
    /// characters written without spaces (and a user to scan), the scan.
    pub(super) async fn memory_keywords(
        &self,
        tenant: &TenantId,
        filter: &MemoryFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MemoryId, f64)>> {
        let terms = terms(query);
        if terms.is_empty() || filter.user_id.is_none() {
            return self.svc.store.text_search(tenant, filter, query, k).await;
        }
        let rows: Vec<(MemoryId, String)> = self
            .svc
            .store
            .all_active(tenant, filter)
            .await?
            .into_iter()
            .filter(|m| filter.admits(m))
            .map(|m| (m.id, m.content))
            .collect();
        Ok(ranked(&rows, &terms, k))
    }

    /// The keyword list of a message search, likewise (the newest messages of the window).
    pub(super) async fn message_keywords(
        &self,
        tenant: &TenantId,
        window: &TranscriptFilter,
        query: &str,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let terms = terms(query);
        if terms.is_empty() {
            return self.svc.store.text_search_messages(tenant, window, query, k).await;
        }
        let (mut rows, mut before) = (Vec::new(), None);
        while rows.len() < MESSAGES_SCANNED {
            let page = self.svc.store.scan_messages(tenant, window, before, 1_000).await?;
            let Some(last) = page.last() else { break };
            before = Some((last.created_at, last.id));
            let full = page.len() == 1_000;
            rows.extend(page.into_iter().map(|m| {
                let text = match &m.tool_name {
                    Some(t) => format!("{} {t}", m.content),
                    None => m.content,
                };
                (m.id, text)
            }));
            if !full {
                break;
            }
        }
        Ok(ranked(&rows, &terms, k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_of_characters_and_longer_words() {
        assert_eq!(terms("北京"), ["北京"]);
        assert_eq!(terms("北京烤鸭 in Berlin?"), ["北京", "京烤", "烤鸭", "berlin"]);
        assert_eq!(terms("猫"), ["猫"]);
        assert_eq!(terms("東京に住んでいる"), ["東京", "住"]);
        assert_eq!(terms("上海的天气怎么样"), ["上海", "天气"]);
        assert_eq!(terms("ユーザーは東京"), ["ユー", "ーザ", "ザー", "東京"]);
        assert!(terms("Where does the user live?").is_empty(), "no scan for spaced text");
    }

    #[test]
    fn a_word_inside_a_sentence_is_found_and_ranked_by_weight() {
        let rows = vec![
            (1, "用户住在北京，喜欢吃饺子。".to_string()),
            (2, "用户在上海工作。".to_string()),
            (3, "The user likes tea.".to_string()),
            (4, "用户喜欢北京烤鸭。".to_string()),
        ];
        let got = ranked(&rows, &terms("北京"), 10);
        let ids: Vec<i32> = got.iter().map(|h| h.0).collect();
        assert_eq!(ids, [4, 1], "both hold it, the shorter first");
        assert!(got.iter().all(|h| (h.1 - 1.0).abs() < 1e-9), "the whole query: {got:?}");
        let got = ranked(&rows, &terms("上海的天气"), 10);
        assert_eq!(got[0].0, 2);
        assert!(got[0].1 > 0.0 && got[0].1 < 1.0, "a part of the query: {got:?}");
        assert!(ranked(&rows, &terms("量子色动力学"), 10).is_empty());
    }
}
