//! Requests first (issue 14): the request path marks itself in flight, and background work
//! waits for a moment with no request before each step it takes.
//!
//! The machines engram runs on have few cores (the project's own: two vCPUs that behave like
//! one physical core's two threads), so background work beside a request slows it whatever
//! the OS priority of its threads: a search's p95 rose from 4.5 ms to 33.5 ms while the
//! embedding lane stored vectors beside it (`benches/README.md`, "Search during a
//! backlog"). Background steps are short (one store read or write of a round, one encoder
//! pass), so a request that arrives during one waits at most for that step, and the next
//! step starts only after it.
//!
//! A steady stream of requests must not stop background work for ever: a background step
//! waits at most the time it is given ([`RequestsInFlight::idle_within`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Requests running now. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct RequestsInFlight {
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One running request; it stops counting when dropped.
#[must_use = "the request counts only while the guard lives"]
#[derive(Debug)]
pub struct InFlight(Arc<RequestsInFlight>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl RequestsInFlight {
    /// Count a request until the guard is dropped.
    pub fn enter(this: &Arc<Self>) -> InFlight {
        this.running.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(this))
    }

    /// Requests running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Returns once no request runs.
    pub async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the check, so a request ending meanwhile still wakes us.
            idle.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// [`Self::idle`], but at most `max`: background work is never starved for ever.
    pub async fn idle_within(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.idle()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn background_waits_for_the_running_request() {
        let r = Arc::new(RequestsInFlight::default());
        r.idle().await; // nothing running: at once
        let guard = RequestsInFlight::enter(&r);
        let waiter = tokio::spawn({
            let r = Arc::clone(&r);
            async move { r.idle().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "background went on beside a request");
        drop(guard);
        tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_request_stream_does_not_starve_background_work() {
        let r = Arc::new(RequestsInFlight::default());
        let _guard = RequestsInFlight::enter(&r);
        let t = std::time::Instant::now();
        r.idle_within(Duration::from_millis(30)).await;
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert_eq!(r.running(), 1);
    }
}
