//! The exact vector scan's parts that both stores' in-process caches use: the dot product,
//! an ordered `f32` for top-k heaps, and moving a long scan off the request's thread.

/// Rows from which an exact scan runs on the blocking pool ([`off_thread`]): ~1 ms of dot
/// products at 384 dimensions, above the cost of handing the work over.
pub(crate) const OFF_THREAD_ROWS: usize = 4096;

/// Run a vector scan on tokio's blocking pool. A search runs its vector and keyword lists
/// concurrently (`try_join!` in the engine), but a scan computed inside the request's task
/// holds its thread, and the keyword list, which needs the task polled between its
/// statements, waited for it: at 100k memories of one user the two ran one after the other
/// (vector 19–23 ms, keyword 15–43 ms; engine p95 62 ms).
pub(crate) async fn off_thread<T: Send + 'static>(
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, engram_core::error::Error> {
    tokio::task::spawn_blocking(scan)
        .await
        .map_err(|e| engram_core::error::Error::internal(format!("vector scan: {e}")))
}

/// Dot product written for auto-vectorisation (8 independent accumulators).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let x = &a[c * 8..c * 8 + 8];
        let y = &b[c * 8..c * 8 + 8];
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for j in chunks * 8..a.len() {
        s += a[j] * b[j];
    }
    s
}

/// An `f32` ordered by `total_cmp`, for heaps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OrdF32(pub(crate) f32);
impl Eq for OrdF32 {}
impl PartialOrd for OrdF32 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF32 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}
