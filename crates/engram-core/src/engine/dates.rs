//! Time in search: the time a query names (`crate::when`: a date, a month, or a relative
//! time read against the user's latest message — the conversation's own "now", never the
//! server clock), and the date list it adds to a message search: the messages whose own
//! relative dates point into that time (said up to [`SAID_AFTER_DAYS`] later) first, then
//! those sent within it.

use crate::error::Result;
use crate::model::MessageId;
use crate::retrieval;
use crate::store::TranscriptFilter;
use crate::when::{self, Span};

use super::Engine;
use super::scope::View;

/// Days after the time a query names in which a message may still point back into it
/// ("last week", "yesterday").
pub const SAID_AFTER_DAYS: i64 = 8;

/// Messages the date list reads at most.
const DATE_SCAN: usize = 2_000;

impl Engine {
    /// The time a query names: a date or month as written, or a relative time ("last week")
    /// or a month without its year ("in June") against the user's latest message (the
    /// conversation's own "now", not the clock).
    pub(super) async fn query_time(&self, v: &View, query: &str) -> Result<Option<(Span, String)>> {
        if let Some(found) = when::query_time(query, None) {
            return Ok(Some(found));
        }
        let Some(user) = &v.user else { return Ok(None) };
        if !when::needs_anchor(query) {
            return Ok(None);
        }
        let latest = self
            .svc
            .store
            .scan_messages(&v.tenant, &TranscriptFilter::user(user.clone()), None, 1)
            .await?;
        Ok(latest.first().and_then(|m| when::query_time(query, Some(m.created_at))))
    }

    /// The date list of a query that names `span`: the user's messages (in the search's
    /// window) whose own relative dates point into it — said up to [`SAID_AFTER_DAYS`]
    /// later — first, then those sent within it, each group oldest first; with their date
    /// support.
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
        };
        let rows = self.svc.store.scan_messages(&v.tenant, &scan, None, DATE_SCAN).await?;
        let mut found: Vec<(u8, time::OffsetDateTime, MessageId, f64)> = Vec::new();
        for m in rows {
            let said =
                when::relative_spans(&m.content, m.created_at).iter().any(|s| s.overlaps(&span));
            if said {
                found.push((0, m.created_at, m.id, retrieval::DATE_SAID));
            } else if span.contains(m.created_at.date()) {
                found.push((1, m.created_at, m.id, retrieval::DATE_WITHIN));
            }
        }
        found.sort_by_key(|a| (a.0, a.1, a.2));
        found.truncate(k);
        Ok(found.into_iter().map(|(_, _, id, s)| (id, s)).collect())
    }
}
