//! Durable background jobs: the worker loop.
//!
//! Jobs are rows (`Store::enqueue_job`), claimed with an expiring lease (`claim_job`), kept
//! alive by a heartbeat while they run, and finished as done, retried with exponential
//! backoff (honouring an LLM's `Retry-After`), or failed for good — visible in `/v1/stats`
//! and `engram jobs list`, re-runnable with `engram jobs retry`. A worker that dies (kill -9)
//! leaves its job `running` with a lease that expires; any worker then claims it again.
//! At most one job per lock key (a conversation) runs at a time: single writer.
//!
//! Shutdown: on cancellation workers stop claiming; a running job gets `grace` to reach its
//! end (its writes are one transaction, so stopping anywhere else leaves nothing half done)
//! and is otherwise abandoned to its lease.

use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::error::FaultSource;
pub use crate::error::JobError;
pub use crate::metrics::ExecutionOutcome;
use crate::model::{Job, JobKind};
use crate::services::Services;

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Jobs run at once by this process.
    pub concurrency: usize,
    /// Lease of a claimed job; renewed every third of it while the job runs.
    pub lease: Duration,
    /// Sleep when the queue is empty.
    pub poll: Duration,
    /// First retry delay; doubles per attempt.
    pub backoff: Duration,
    /// Time a running job gets to finish after shutdown is asked.
    pub grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 2,
            lease: Duration::from_secs(300),
            poll: Duration::from_millis(200),
            backoff: Duration::from_secs(2),
            grace: Duration::from_secs(10),
        }
    }
}

fn at(d: Duration) -> OffsetDateTime {
    crate::model::now() + d
}

/// Run workers until `shutdown` is cancelled and in-flight jobs are finished or abandoned.
pub async fn run_workers(engine: Services, cfg: WorkerConfig, shutdown: CancellationToken) {
    let mut tasks = Vec::new();
    for n in 0..cfg.concurrency.max(1) {
        let engine = engine.clone();
        let cfg = cfg.clone();
        let shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move { worker_loop(n, engine, cfg, shutdown).await }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn worker_loop(n: usize, engine: Services, cfg: WorkerConfig, shutdown: CancellationToken) {
    tracing::debug!(worker = n, "worker started");
    // Without an LLM only the embedding jobs can run here; the others wait for a worker
    // that has one (another process) instead of failing with a configuration error.
    let kinds: &[JobKind] =
        if engine.llm().is_some() { JobKind::ALL } else { &[JobKind::EmbedMessages] };
    while !shutdown.is_cancelled() {
        match engine.store().claim_job(crate::model::now(), at(cfg.lease), kinds).await {
            Ok(Some(job)) => {
                let _ = execute(&engine, &cfg, &shutdown, job).await;
            }
            Ok(None) => {
                tokio::select! {
                    () = tokio::time::sleep(cfg.poll) => {}
                    () = shutdown.cancelled() => {}
                }
            }
            Err(e) => {
                tracing::error!(worker = n, error = %e, "cannot claim jobs");
                tokio::select! {
                    () = tokio::time::sleep(cfg.poll * 10) => {}
                    () = shutdown.cancelled() => {}
                }
            }
        }
    }
    tracing::debug!(worker = n, "worker stopped");
}

/// Run one claimed job to its outcome.
#[tracing::instrument(skip_all, fields(job = %job.id, kind = job.kind.as_str(), attempt = job.attempts))]
pub async fn execute(
    engine: &Services,
    cfg: &WorkerConfig,
    shutdown: &CancellationToken,
    job: Job,
) -> ExecutionOutcome {
    let store = engine.store().clone();
    let heartbeat = {
        let store = store.clone();
        let id = job.id.clone();
        let lease = cfg.lease;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                if let Err(e) = store.heartbeat_job(&id, at(lease)).await {
                    tracing::warn!(job = %id, error = %e, "heartbeat failed");
                }
            }
        })
    };
    let run = engine.run_job(&job);
    let grace = async {
        shutdown.cancelled().await;
        tokio::time::sleep(cfg.grace).await;
    };
    let result = tokio::select! {
        r = run => Some(r),
        () = grace => None,
    };
    heartbeat.abort();
    let outcome = match result {
        None => {
            tracing::warn!(job = %job.id, "shutdown: job abandoned; its lease will expire and it will run again");
            ExecutionOutcome::Abandoned
        }
        Some(Ok(())) => match store.complete_job(&job.id).await {
            Ok(()) => ExecutionOutcome::Done,
            Err(e) => {
                tracing::error!(job = %job.id, error = %e, "cannot mark job done");
                ExecutionOutcome::Abandoned
            }
        },
        Some(Err(e)) => {
            let retry = e.fault == FaultSource::Runtime && job.attempts < job.max_attempts;
            if retry {
                let exp = cfg.backoff.saturating_mul(1 << (job.attempts - 1).clamp(0, 10));
                let after = e.retry_after.map_or(exp, |r| r.max(exp));
                tracing::warn!(job = %job.id, error = %e.message, attempt = job.attempts, retry_in = ?after, "job failed; will retry");
                let _ = store.fail_job(&job.id, &e.message, Some(at(after))).await;
                ExecutionOutcome::Retrying { attempt: job.attempts, after }
            } else {
                tracing::error!(job = %job.id, error = %e.message, fault = ?e.fault, attempts = job.attempts, "job failed");
                let _ =
                    store.fail_job(&job.id, &format!("{:?}: {}", e.fault, e.message), None).await;
                ExecutionOutcome::Failed
            }
        }
    };
    engine.metrics().observe_job(job.kind.as_str(), &outcome);
    outcome
}
