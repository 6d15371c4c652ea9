//! In-process exact vector index, one per `(tenant, user)`.
//!
//! Searches are always about one user, so vectors are grouped per user and scanned exactly
//! (no approximation: results equal a brute-force scan of the table). Each [`UserIndex`]
//! remembers the user's change counter (`user_versions.version`) it reflects; before a
//! search the store reads the counter and, if it moved, applies only the rows whose
//! `version` is newer (inserted, superseded) and the tombstones of purged rows. Writes by
//! other processes on the same database are therefore seen by the next search.
//!
//! **Architecture Invariant:** the map is keyed by tenant first; nothing here is ever
//! consulted across tenants.

use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

pub use crate::common::scan::dot;
pub(crate) use crate::common::scan::{OFF_THREAD_ROWS, OrdF32, off_thread};
use engram_core::model::{Category, Kind, MemoryId};
use engram_core::store::MemoryFilter;

/// Filterable attributes of an indexed row.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: MemoryId,
    pub pool: Option<Arc<str>>,
    pub kind: Kind,
    pub category: Category,
    pub observed_at: i64,
    pub expires_at: Option<i64>,
}

/// The active vectors of one user.
#[derive(Debug, Default)]
pub struct UserIndex {
    /// `user_versions.version` this index reflects (0: nothing loaded).
    pub version: i64,
    /// `user_versions.incarnation` this index reflects: a random number drawn when the user's
    /// counter row is created, so an erased-then-recreated user (whose counter restarts) is
    /// never mistaken for the one this index holds.
    pub incarnation: i64,
    pub dims: usize,
    entries: Vec<Entry>,
    /// Row-major, `entries.len() * dims`.
    vectors: Vec<f32>,
    pos: HashMap<MemoryId, usize>,
}

impl UserIndex {
    /// Insert or replace a row. A vector of another dimension (the store was re-embedded
    /// with another model) starts the index over in the new space: rows of the old space can
    /// never be compared with a query of the new one.
    pub fn upsert(&mut self, entry: Entry, vector: &[f32]) {
        if vector.len() != self.dims {
            self.entries.clear();
            self.vectors.clear();
            self.pos.clear();
            self.dims = vector.len();
        }
        if let Some(&i) = self.pos.get(&entry.id) {
            self.vectors[i * self.dims..(i + 1) * self.dims].copy_from_slice(vector);
            self.entries[i] = entry;
            return;
        }
        self.pos.insert(entry.id, self.entries.len());
        self.entries.push(entry);
        self.vectors.extend_from_slice(vector);
    }

    /// Remove a row if present (swap-remove).
    pub fn remove(&mut self, id: MemoryId) {
        let Some(i) = self.pos.remove(&id) else { return };
        let last = self.entries.len() - 1;
        if i != last {
            let moved = self.entries[last].id;
            self.entries.swap(i, last);
            let (a, b) = self.vectors.split_at_mut(last * self.dims);
            a[i * self.dims..(i + 1) * self.dims].copy_from_slice(&b[..self.dims]);
            self.pos.insert(moved, i);
        }
        self.entries.pop();
        self.vectors.truncate(last * self.dims);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Exact top-`k` by dot product among rows the filter admits.
    pub fn search(
        &self,
        filter: &MemoryFilter,
        query: &[f32],
        k: usize,
        now: i64,
    ) -> Vec<(MemoryId, f32)> {
        if query.len() != self.dims || k == 0 {
            return vec![];
        }
        // Min-heap of the best k (by similarity).
        let mut heap: BinaryHeap<std::cmp::Reverse<(OrdF32, usize)>> =
            BinaryHeap::with_capacity(k + 1);
        for (i, e) in self.entries.iter().enumerate() {
            if !admits(filter, e, now) {
                continue;
            }
            let v = &self.vectors[i * self.dims..(i + 1) * self.dims];
            let s = dot(v, query);
            if heap.len() < k {
                heap.push(std::cmp::Reverse((OrdF32(s), i)));
            } else if let Some(std::cmp::Reverse((min, _))) = heap.peek()
                && s > min.0
            {
                heap.pop();
                heap.push(std::cmp::Reverse((OrdF32(s), i)));
            }
        }
        let mut out: Vec<(MemoryId, f32)> =
            heap.into_iter().map(|std::cmp::Reverse((s, i))| (self.entries[i].id, s.0)).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }
}

fn admits(f: &MemoryFilter, e: &Entry, now: i64) -> bool {
    if let Some(pool) = &f.pool
        && !(e.kind == Kind::Shared || e.pool.is_none() || e.pool.as_deref() == Some(pool.as_str()))
    {
        return false;
    }
    if let Some(kinds) = &f.kinds
        && !kinds.contains(&e.kind)
    {
        return false;
    }
    if let Some(cats) = &f.categories
        && !cats.contains(&e.category)
    {
        return false;
    }
    if let Some(s) = f.since
        && e.observed_at < super::ts(s)
    {
        return false;
    }
    if let Some(u) = f.until
        && e.observed_at >= super::ts(u)
    {
        return false;
    }
    if let Some(x) = e.expires_at
        && x <= now
    {
        return false;
    }
    true
}

/// One user's index, shared between searches.
pub type SharedIndex = Arc<Mutex<UserIndex>>;

/// All user indexes of a store, keyed by `(tenant, user)`.
#[derive(Default)]
pub struct VectorCache {
    users: RwLock<HashMap<(String, String), SharedIndex>>,
}

impl VectorCache {
    /// The index of one user (created empty on first use).
    pub fn user(&self, tenant: &str, user: &str) -> Arc<Mutex<UserIndex>> {
        let key = (tenant.to_string(), user.to_string());
        if let Some(u) = self.users.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return u.clone();
        }
        self.users.write().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().clone()
    }

    /// Forget a user entirely (after erasure).
    pub fn drop_user(&self, tenant: &str, user: &str) {
        self.users
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(tenant.to_string(), user.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u128, kind: Kind, pool: Option<&str>) -> Entry {
        Entry {
            id: MemoryId(uuid::Uuid::from_u128(n)),
            pool: pool.map(Arc::from),
            kind,
            category: Category::General,
            observed_at: 0,
            expires_at: None,
        }
    }

    #[test]
    fn exact_top_k_with_pool_filter_and_removal() {
        let mut idx = UserIndex::default();
        idx.upsert(entry(1, Kind::Knowledge, Some("agent:a")), &[1.0, 0.0]);
        idx.upsert(entry(2, Kind::Knowledge, Some("agent:b")), &[0.9, 0.436]);
        idx.upsert(entry(3, Kind::Shared, Some("agent:b")), &[0.8, 0.6]);
        idx.upsert(entry(4, Kind::Knowledge, None), &[0.0, 1.0]);
        let all = idx.search(&MemoryFilter::default(), &[1.0, 0.0], 10, 0);
        assert_eq!(all.iter().map(|h| h.0.0.as_u128()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        let f = MemoryFilter { pool: Some("agent:a".into()), ..Default::default() };
        let a = idx.search(&f, &[1.0, 0.0], 10, 0);
        assert_eq!(a.iter().map(|h| h.0.0.as_u128()).collect::<Vec<_>>(), vec![1, 3, 4]);
        idx.remove(MemoryId(uuid::Uuid::from_u128(1)));
        let top = idx.search(&MemoryFilter::default(), &[1.0, 0.0], 1, 0);
        assert_eq!(top[0].0.0.as_u128(), 2);
        assert_eq!(idx.len(), 3);
        // A re-embedded row in another dimension starts a new space.
        idx.upsert(entry(5, Kind::Knowledge, None), &[0.0, 0.0, 1.0]);
        assert_eq!(idx.len(), 1);
        let top = idx.search(&MemoryFilter::default(), &[0.0, 0.0, 1.0], 3, 0);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].0.0.as_u128(), 5);
    }
}
