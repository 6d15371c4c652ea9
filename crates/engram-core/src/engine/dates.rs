//! Time in search: the time a query names (`crate::when`: a date, a month, a time relative
//! to an event the user's messages name, or a relative time read against the user's latest
//! message — the conversation's own "now", never the server clock), and the date list it
//! adds to a message search: the messages whose own relative dates point into that time
//! first (those said up to [`SAID_AFTER_DAYS`] later read from the messages sent then, those
//! said any time later from the store's record of each message's dates), then those sent
//! within it.

use crate::error::Result;
use crate::model::{Message, MessageId};
use crate::retrieval;
use crate::store::TranscriptFilter;
use crate::when::{self, Span};

use super::scope::View;
use super::search::Lists;
use super::{Engine, Hit, SearchMode};

/// Days after the time a query names in which a message may still point back into it
/// ("last week", "yesterday").
pub const SAID_AFTER_DAYS: i64 = 8;

/// Messages the date list reads at most.
const DATE_SCAN: usize = 2_000;

/// The time a query names, as search reads it.
#[derive(Debug, Clone)]
pub(super) struct NamedTime {
    /// The days named; None when they could not be read against the conversation (no
    /// message to read "now" from): the words still leave the keyword query.
    pub span: Option<Span>,
    /// The query without the words that named the time (for the keyword list).
    pub keywords: String,
    /// How it was read, for `explain.time`.
    pub how: String,
}

/// Least relevance of the message that names an event ("the wedding") for its date to
/// name the time: clear lexical or semantic support, not a guess.
const EVENT_MIN_SCORE: f64 = 0.35;

fn days(span: Span) -> String {
    if span.start == span.end {
        span.start.to_string()
    } else {
        format!("{} to {}", span.start, span.end)
    }
}

/// Whether a time a message names (`said`, overlapping `span`) is fine enough to point
/// into `span`: at most twice as long as it, or as a fortnight. "Next year" does not point
/// into one day of that year, nor "last month" into a day of it; "three years ago" points
/// into a year, "last weekend" into a day.
fn points_into(said: Span, span: Span) -> bool {
    said.days() <= 2 * span.days().max(7)
}

/// The one day a message says something happened on: a relative day read against when it
/// was sent ("yesterday"), or a date it names ("on June 10, 2023").
fn stated_day(m: &Message) -> Option<time::Date> {
    let relative = when::relative_spans(&m.content, m.created_at);
    if let Some(s) = relative.first().filter(|s| s.days() == 1) {
        return Some(s.start);
    }
    when::query_time(&m.content, None).map(|(s, _)| s).filter(|s| s.days() == 1).map(|s| s.start)
}

/// A message's date support for a query naming `span`: [`retrieval::DATE_SAID`] when one
/// of its relative dates points into it, else [`retrieval::DATE_WITHIN`] when it was sent
/// within it, else 0. A property of the message, whatever list found it.
pub(super) fn date_support(m: &Message, span: Span) -> f64 {
    let said = when::relative_spans(&m.content, m.created_at)
        .iter()
        .any(|s| s.overlaps(&span) && points_into(*s, span));
    if said {
        retrieval::DATE_SAID
    } else if span.contains(m.created_at.date()) {
        retrieval::DATE_WITHIN
    } else {
        0.0
    }
}

/// Every message's own date support ([`date_support`]), not only the date list's (which a
/// small limit cuts): a message's score does not depend on the limit.
pub(super) fn add_date_support(when: Option<Span>, hits: &mut [(Message, retrieval::Explain)]) {
    let Some(span) = when else { return };
    for (m, e) in hits {
        e.date_match = e.date_match.max(date_support(m, span));
    }
}

impl Engine {
    /// The time a query names: a date or month as written; a time relative to an event of
    /// the conversation ("two days before the wedding": the event's day is read from the
    /// user's message that names it); or a relative time ("last week") or a month without
    /// its year ("in June") against the user's latest message (the conversation's own
    /// "now", not the clock); with none, no days, only its words out of the keywords.
    pub(super) async fn query_time(&self, v: &View, query: &str) -> Result<Option<NamedTime>> {
        if let Some((span, keywords)) = when::query_time(query, None) {
            return Ok(Some(NamedTime { span: Some(span), keywords, how: days(span) }));
        }
        if let Some(user) = &v.user
            && let Some(found) = self.event_time(v, user, query).await?
        {
            return Ok(Some(found));
        }
        if !when::needs_anchor(query) {
            return Ok(None);
        }
        // With no message to read "now" from (a store of facts alone, or no user named),
        // no days are named, but the time's words still leave the keyword query (found by
        // a tester: "where did the user live last week" found nothing, its words weighing
        // against the fact). Read against today, every fact written today would match it.
        let latest = match &v.user {
            Some(user) => self.latest_visible(v, user).await?,
            None => None,
        };
        let Some(m) = latest else {
            let words = when::query_time(query, Some(crate::model::now()));
            return Ok(words.map(|(_, keywords)| NamedTime {
                span: None,
                keywords,
                how: "not read: no message to read \"now\" from (its words are left out of \
                      the keyword query)"
                    .to_string(),
            }));
        };
        Ok(when::query_time(query, Some(m.created_at)).map(|(span, keywords)| NamedTime {
            span: Some(span),
            keywords,
            how: format!(
                "{} (relative to the user's latest message, {})",
                days(span),
                m.created_at.date()
            ),
        }))
    }

    /// The user's latest message the view may see (pages of the newest, at most
    /// [`DATE_SCAN`] read): the "now" of relative times, never another pool's.
    async fn latest_visible(
        &self,
        v: &View,
        user: &crate::model::UserId,
    ) -> Result<Option<Message>> {
        let (window, mut before, mut read) = (TranscriptFilter::user(user.clone()), None, 0);
        let page_size = if v.pool.is_some() { 100 } else { 1 };
        while read < DATE_SCAN {
            let page = self.svc.store.scan_messages(&v.tenant, &window, before, page_size).await?;
            let Some(last) = page.last() else { return Ok(None) };
            before = Some((last.created_at, last.id));
            read += page.len();
            let full = page.len() == page_size;
            if let Some(m) = self.visible_messages(v, page).await?.into_iter().next() {
                return Ok(Some(m));
            }
            if !full {
                break;
            }
        }
        Ok(None)
    }

    /// A time named relative to an event: the user's message that best names the event
    /// (hybrid search over the messages the caller may see, with clear support), and its
    /// day — the day the message itself names ("our wedding was yesterday") or the day it
    /// was sent. None when no message names the event.
    async fn event_time(
        &self,
        v: &View,
        user: &crate::model::UserId,
        query: &str,
    ) -> Result<Option<NamedTime>> {
        let Some((event, keywords)) = when::event_time(query) else { return Ok(None) };
        let window = TranscriptFilter::user(user.clone());
        let now = crate::model::now();
        let mut found: Vec<(f64, Message)> = Vec::new();
        // The whole name first; a shorter one when no message names the event so.
        for name in event.names() {
            let vector = self.embed_one(&name).await?;
            let scale = self.svc.embedder.query_scale(&name);
            let lists = Lists {
                query: &name,
                asked: &name,
                vector: Some(&vector),
                scored_by: None,
                mode: SearchMode::Hybrid,
                k: 5,
                when: None,
                explain: false,
            };
            for (m, e) in self.message_hits(v, &window, &lists).await? {
                let Hit::Message { message, score, .. } = Hit::of_message(m, e, now, scale) else {
                    continue;
                };
                // A message that dates something by the event ("two days before the
                // wedding, …") does not date the event.
                if score >= EVENT_MIN_SCORE && when::event_time(&message.content).is_none() {
                    found.push((score, message));
                }
            }
            if !found.is_empty() {
                break;
            }
        }
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        // The best message that says the event's day ("our wedding is on June 10",
        // "the wedding was yesterday"), else the best one's day (found by a tester: "the
        // wedding was amazing", sent two days after it, dated the wedding).
        let stated = found.iter().find_map(|(_, m)| stated_day(m).map(|d| (m, d)));
        let Some((m, day)) =
            stated.or_else(|| found.first().map(|(_, m)| (m, m.created_at.date())))
        else {
            return Ok(None);
        };
        let span = event.span(day);
        Ok(Some(NamedTime {
            span: Some(span),
            keywords,
            how: format!("{} ({} on {day}: message {})", days(span), event.describe(), m.id),
        }))
    }

    /// Record the relative dates of the tenant's messages appended before the store
    /// recorded them (`engram backfill dates`; idempotent): the number newly recorded.
    pub async fn backfill_dates(&self, p: &crate::model::Principal) -> Result<u64> {
        Self::require_admin(p, "backfill")?;
        let mut n = 0;
        for user in self.svc.store.list_users(&p.tenant).await? {
            let messages = self.svc.store.user_messages(&p.tenant, &user).await?;
            for chunk in messages.chunks(1_000) {
                n += self.svc.store.index_message_dates(&p.tenant, chunk).await?;
            }
        }
        Ok(n)
    }

    /// The date list of a query that names `span`: the user's messages (in the search's
    /// window) whose own relative dates point into it, whenever they were said, first, then
    /// those sent within it, each group oldest first; with their date support.
    pub(super) async fn date_list(
        &self,
        v: &View,
        window: &TranscriptFilter,
        span: Span,
        k: usize,
    ) -> Result<Vec<(MessageId, f64)>> {
        let start = span.start.midnight().assume_utc();
        let end = (span.end + time::Duration::days(SAID_AFTER_DAYS + 1)).midnight().assume_utc();
        let scan = TranscriptFilter {
            user: window.user.clone(),
            since: Some(window.since.map_or(start, |s| s.max(start))),
            until: Some(window.until.map_or(end, |u| u.min(end))),
            pooled: window.pooled,
        };
        // The messages sent in the span or just after it, and those that spoke of it any
        // time later ("three years ago", "last summer"), from the store's record of the days
        // each message's relative dates point to.
        let (from, to) = (span.start.midnight().assume_utc(), span.end.midnight().assume_utc());
        let (mut rows, later) = tokio::try_join!(
            self.svc.store.scan_messages(&v.tenant, &scan, None, DATE_SCAN),
            self.svc.store.messages_said_about(&v.tenant, window, from, to, DATE_SCAN),
        )?;
        let seen: std::collections::HashSet<MessageId> = rows.iter().map(|m| m.id).collect();
        rows.extend(later.into_iter().filter(|m| !seen.contains(&m.id)));
        let rows = self.visible_messages(v, rows).await?;
        let mut found: Vec<(u8, time::OffsetDateTime, MessageId, f64)> = Vec::new();
        for m in rows {
            let s = date_support(&m, span);
            if s > 0.0 {
                found.push((u8::from(s < retrieval::DATE_SAID), m.created_at, m.id, s));
            }
        }
        found.sort_by_key(|a| (a.0, a.1, a.2));
        found.truncate(k);
        Ok(found.into_iter().map(|(_, _, id, s)| (id, s)).collect())
    }
}
