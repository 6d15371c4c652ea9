//! In-process cache of transcript vectors (messages, summaries), one entry per
//! `(tenant, user, table, model)`, used by both stores.
//!
//! A message search ranks the user's message vectors exactly. Read from the table each time,
//! that is every vector of the user per query (100k messages: 150 MB through SQLite, ~430 ms;
//! ~220 ms of PostgreSQL's parallel scan over 265 MB of rows); from this cache it is a scan of
//! memory (~10 ms) and a short catch-up read.
//!
//! **Freshness** is each store's own ([`crate::sqlite`]'s `vector_seq`, [`crate::postgres`]'s
//! writer transaction ids): before each search the store applies the user's rows written since
//! it last read them, so vectors written by any process on the same database are seen by the
//! next search and the result equals a scan of the table. Rows leave the transcript tables
//! only when their user is erased, which leaves nothing to read; so the top k found is checked
//! against the table, and a row that is gone makes the store load the user afresh.
//!
//! **Memory.** At most [`BUDGET_BYTES`] of vectors are kept over all entries; the least
//! recently used entries leave first, and an entry larger than the budget on its own is used
//! for the one search and not kept.
//!
//! **Architecture Invariant:** an entry is keyed by tenant and user, filled only from rows of
//! that tenant and user, and consulted only for them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::hash::Hash;

use async_trait::async_trait;
use engram_core::error::Result;
use uuid::Uuid;

use super::scan::{OFF_THREAD_ROWS, OrdF32, dot, off_thread};
use super::store::Transcript;

/// The most bytes of vectors kept over all entries (about 170k vectors of 384 dimensions).
pub const BUDGET_BYTES: usize = 256 << 20;

/// What one entry holds: the vectors of one user, table and model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) tenant: String,
    pub(crate) user: String,
    pub(crate) table: Transcript,
    pub(crate) model: String,
}

/// A row's span in time: a message's `created_at` twice, a summary's `earliest_at` and
/// `latest_at` (either may be unknown).
pub(crate) type Span = (Option<i64>, Option<i64>);

/// The cached vectors of one key. `R` is how the store finds a row again (SQLite: its
/// `rowid`; PostgreSQL: its id).
#[derive(Debug, Default)]
pub(crate) struct Rows<R = i64> {
    /// Has the user's table been read once?
    pub(crate) loaded: bool,
    /// The store's mark of what it has read: the highest `vector_seq` applied (SQLite), the
    /// oldest transaction still running at the last read (PostgreSQL).
    pub(crate) seq: i64,
    dims: usize,
    rowids: Vec<R>,
    ids: Vec<Uuid>,
    spans: Vec<Span>,
    /// Row-major, `rowids.len() * dims`.
    vectors: Vec<f32>,
    pos: HashMap<R, usize>,
}

impl<R: Copy + Eq + Hash> Rows<R> {
    /// Insert or replace a row. A vector whose dimension differs from the rows already held
    /// is not comparable with them and is left out (as a scan of the table would skip it for
    /// a query of their dimension).
    pub(crate) fn upsert(&mut self, rowid: R, id: Uuid, span: Span, vector: &[f32]) {
        if self.rowids.is_empty() {
            self.dims = vector.len();
        }
        if vector.len() != self.dims || vector.is_empty() {
            self.remove(rowid);
            return;
        }
        if let Some(&i) = self.pos.get(&rowid) {
            self.vectors[i * self.dims..(i + 1) * self.dims].copy_from_slice(vector);
            self.ids[i] = id;
            self.spans[i] = span;
            return;
        }
        self.pos.insert(rowid, self.rowids.len());
        self.rowids.push(rowid);
        self.ids.push(id);
        self.spans.push(span);
        self.vectors.extend_from_slice(vector);
    }

    /// Remove a row if present (swap-remove).
    pub(crate) fn remove(&mut self, rowid: R) {
        let Some(i) = self.pos.remove(&rowid) else { return };
        let last = self.rowids.len() - 1;
        if i != last {
            self.rowids.swap(i, last);
            self.ids.swap(i, last);
            self.spans.swap(i, last);
            let (a, b) = self.vectors.split_at_mut(last * self.dims);
            a[i * self.dims..(i + 1) * self.dims].copy_from_slice(&b[..self.dims]);
            self.pos.insert(self.rowids[i], i);
        }
        self.rowids.pop();
        self.ids.pop();
        self.spans.pop();
        self.vectors.truncate(last * self.dims);
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.rowids.len()
    }

    /// Bytes held (vectors and per-row bookkeeping).
    pub(crate) fn bytes(&self) -> usize {
        self.vectors.len() * 4 + self.rowids.len() * 64
    }

    /// The exact top `k` by dot product among rows whose span overlaps `since..until`
    /// (`end >= since AND start < until`, as the table's query reads it), best first, ties by
    /// id: `(rowid, id, similarity)`.
    pub(crate) fn top(
        &self,
        since: Option<i64>,
        until: Option<i64>,
        query: &[f32],
        k: usize,
    ) -> Vec<(R, Uuid, f32)> {
        if query.len() != self.dims || k == 0 {
            return vec![];
        }
        // Min-heap of the best k; "greater" is a higher similarity, then a smaller id.
        let mut heap: BinaryHeap<Reverse<(OrdF32, Reverse<Uuid>, usize)>> =
            BinaryHeap::with_capacity(k + 1);
        for (i, &(start, end)) in self.spans.iter().enumerate() {
            let after = since.is_none_or(|s| end.is_some_and(|e| e >= s));
            let before = until.is_none_or(|u| start.is_some_and(|s| s < u));
            if !(after && before) {
                continue;
            }
            let s = dot(&self.vectors[i * self.dims..(i + 1) * self.dims], query);
            let item = Reverse((OrdF32(s), Reverse(self.ids[i]), i));
            if heap.len() < k {
                heap.push(item);
            } else if heap.peek().is_some_and(|min| item < *min) {
                heap.pop();
                heap.push(item);
            }
        }
        let mut out: Vec<(OrdF32, Reverse<Uuid>, usize)> =
            heap.into_iter().map(|Reverse(x)| x).collect();
        out.sort_by(|a, b| b.cmp(a));
        out.into_iter().map(|(s, _, i)| (self.rowids[i], self.ids[i], s.0)).collect()
    }
}

/// One entry: its rows (locked for a whole catch-up and search, so one user's table is
/// read by one search at a time), when it was last used and how big it was then.
struct Slot<R> {
    rows: Arc<tokio::sync::Mutex<Rows<R>>>,
    used: u64,
    bytes: usize,
}

/// Every entry of a store.
pub(crate) struct TranscriptCache<R = i64> {
    slots: Mutex<HashMap<Key, Slot<R>>>,
    clock: AtomicU64,
}

impl<R> Default for TranscriptCache<R> {
    fn default() -> Self {
        TranscriptCache { slots: Mutex::default(), clock: AtomicU64::default() }
    }
}

impl<R: Default + Copy + Eq + Hash> TranscriptCache<R> {
    /// The rows of a key (created empty on first use), marked as just used.
    pub(crate) fn rows(&self, key: &Key) -> Arc<tokio::sync::Mutex<Rows<R>>> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
            rows: Arc::default(),
            used: now,
            bytes: 0,
        });
        slot.used = now;
        slot.rows.clone()
    }

    /// Record the size of a key's rows after a search, then keep the total within
    /// [`BUDGET_BYTES`]: least recently used entries leave first, and an entry over the budget
    /// on its own leaves at once.
    pub(crate) fn settle(&self, key: &Key, bytes: usize) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if bytes > BUDGET_BYTES {
            slots.remove(key);
            return;
        }
        if let Some(s) = slots.get_mut(key) {
            s.bytes = bytes;
        }
        let mut total: usize = slots.values().map(|s| s.bytes).sum();
        while total > BUDGET_BYTES {
            let Some(oldest) = slots
                .iter()
                .filter(|(k, _)| *k != key)
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            total -= slots.remove(&oldest).map_or(0, |s| s.bytes);
        }
    }

    /// Forget a key (its rows no longer match the table).
    pub(crate) fn forget(&self, key: &Key) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// Forget every entry of a user (after erasure).
    pub(crate) fn drop_user(&self, tenant: &str, user: &str) {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| !(k.tenant == tenant && k.user == user));
    }

    /// Vectors held for a user over its keys (`None`: no key of the user is loaded).
    pub(crate) fn rows_of(&self, tenant: &str, user: &str) -> Option<usize> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let held: Vec<usize> = slots
            .iter()
            .filter(|(k, _)| k.tenant == tenant && k.user == user)
            .filter_map(|(_, s)| s.rows.try_lock().ok().filter(|r| r.loaded).map(|r| r.len()))
            .collect();
        (!held.is_empty()).then(|| held.iter().sum())
    }

    /// Bytes held over all entries, as last recorded.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).values().map(|s| s.bytes).sum()
    }
}

/// What a store supplies to answer from its cache: the cache itself, how it catches a key's
/// rows up with the table, and how it checks that the rows of an answer are still there.
#[async_trait]
pub(crate) trait CachedTranscripts<R: Copy + Eq + Hash + Default + Send + 'static>:
    Sync
{
    fn transcript_cache(&self) -> &TranscriptCache<R>;

    /// Apply the rows written since the cache last read the key (all of them the first time).
    async fn catch_up(&self, key: &Key, rows: &mut Rows<R>) -> Result<()>;

    /// Is every row of `top` still in the table, a row of the key's tenant and user?
    async fn all_present(&self, key: &Key, top: &[(R, Uuid, f32)]) -> Result<bool>;

    /// Keep the rows after an answer they vouched for (PostgreSQL drops users grown too small
    /// to be worth them).
    fn keep(&self, key: &Key, rows: &Rows<R>) {
        self.transcript_cache().settle(key, rows.bytes());
    }
}

/// The exact top `k` of a key's vectors whose span overlaps `since..until` (the store's time
/// unit), from the cache, brought up to date first; `None` when the cache cannot vouch for
/// its answer twice in a row (the caller then ranks the table's rows itself).
pub(crate) async fn cached_top<R, S>(
    store: &S,
    key: &Key,
    (since, until): (Option<i64>, Option<i64>),
    query: &[f32],
    k: usize,
) -> Result<Option<Vec<(Uuid, f32)>>>
where
    R: Copy + Eq + Hash + Default + Send + 'static,
    S: CachedTranscripts<R>,
{
    let slot = store.transcript_cache().rows(key);
    let mut rows = slot.lock_owned().await;
    for _ in 0..2 {
        store.catch_up(key, &mut rows).await?;
        let top = if rows.len() < OFF_THREAD_ROWS {
            rows.top(since, until, query, k)
        } else {
            // On the blocking pool, as the memory index's scan (see `off_thread`).
            let q = query.to_vec();
            let (back, top) = off_thread(move || {
                let top = rows.top(since, until, &q, k);
                (rows, top)
            })
            .await?;
            rows = back;
            top
        };
        if store.all_present(key, &top).await? {
            store.keep(key, &rows);
            return Ok(Some(top.into_iter().map(|(_, id, s)| (id, s)).collect()));
        }
        // A row of the top is gone (its user was erased, by this process or another): read
        // the user afresh.
        *rows = Rows::default();
    }
    store.transcript_cache().forget(key);
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn top_k_is_exact_within_the_window_with_ties_by_id() {
        let mut r = Rows::default();
        r.upsert(1, id(5), (Some(10), Some(10)), &[1.0, 0.0]);
        r.upsert(2, id(3), (Some(20), Some(20)), &[0.6, 0.8]);
        r.upsert(3, id(4), (Some(30), Some(30)), &[0.6, 0.8]);
        r.upsert(4, id(1), (None, None), &[0.0, 1.0]);
        let ids = |v: Vec<(i64, Uuid, f32)>| v.into_iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(ids(r.top(None, None, &[1.0, 0.0], 10)), vec![1, 2, 3, 4]);
        // Equal similarities: the smaller id first, at the edge of k too.
        assert_eq!(ids(r.top(None, None, &[0.6, 0.8], 2)), vec![2, 3]);
        assert_eq!(ids(r.top(None, None, &[1.0, 0.0], 2)), vec![1, 2]);
        // since is inclusive, until exclusive; an unknown span is outside any bound.
        assert_eq!(ids(r.top(Some(20), None, &[1.0, 0.0], 10)), vec![2, 3]);
        assert_eq!(ids(r.top(None, Some(20), &[1.0, 0.0], 10)), vec![1]);
        assert!(r.top(None, None, &[1.0, 0.0, 0.0], 10).is_empty(), "another dimension");
        assert!(r.top(None, None, &[1.0, 0.0], 0).is_empty());
    }

    #[test]
    fn replace_and_remove_keep_rows_and_vectors_together() {
        let mut r = Rows::default();
        for n in 1..=4 {
            r.upsert(n, id(n as u128), (Some(0), Some(0)), &[n as f32, 0.0]);
        }
        r.remove(2);
        r.remove(9);
        r.upsert(3, id(30), (Some(0), Some(0)), &[0.0, 1.0]);
        r.upsert(5, id(5), (Some(0), Some(0)), &[1.0, 0.0, 0.0]);
        let top = r.top(None, None, &[1.0, 0.0], 10);
        assert_eq!(
            top.iter().map(|h| (h.0, h.1, h.2)).collect::<Vec<_>>(),
            vec![(4, id(4), 4.0), (1, id(1), 1.0), (3, id(30), 0.0)]
        );
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used() {
        let c = TranscriptCache::<i64>::default();
        let key = |u: &str| Key {
            tenant: "t".into(),
            user: u.into(),
            table: Transcript::Messages,
            model: "m".into(),
        };
        let third = BUDGET_BYTES / 3 + 1;
        for u in ["a", "b", "c"] {
            c.rows(&key(u));
            c.settle(&key(u), third);
        }
        // a was used longest ago and left when c came.
        assert_eq!(c.total(), 2 * third);
        let a = c.rows(&key("a"));
        assert!(!a.try_lock().unwrap().loaded, "a starts over");
        c.settle(&key("a"), third);
        assert_eq!(c.total(), 2 * third, "b left for a");
        c.rows(&key("big"));
        c.settle(&key("big"), BUDGET_BYTES + 1);
        assert_eq!(c.total(), 2 * third, "too big to keep");
        c.drop_user("t", "a");
        assert_eq!(c.total(), third);
    }
}
