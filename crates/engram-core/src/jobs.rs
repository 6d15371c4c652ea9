//! Durable background jobs: the worker loop.
//!
//! Jobs are rows (`Store::enqueue_job`), claimed with an expiring lease (`claim_job`), kept
//! alive by a heartbeat while they run, and finished as done, retried with exponential
//! backoff (honouring an LLM's `Retry-After`), or failed for good — visible in `/v1/stats`
//! and `engram jobs list`, re-runnable with `engram jobs retry`. A worker that dies (kill -9)
//! leaves its job `running` with a lease that expires; any worker then claims it again.
//! At most one job per lock key (a conversation) runs at a time: single writer.
//!
//! Message embedding has a lane of its own ([`embedding_lane`]): it claims up to
//! [`LANE_JOBS`] `embed_messages` jobs at once (`Store::claim_jobs`, one transaction on
//! PostgreSQL), of any conversation, user or tenant, and
//! embeds their messages as one batch (the encoder sorts it by length and cuts it into
//! passes), so a backlog of short conversations does not cost one small batch each, and an
//! extraction waiting on the LLM never holds up the vectors that make messages searchable.
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
    /// Embedding lanes of this process (each claims and embeds its own group: while one
    /// embeds, the other reads or writes).
    pub embedding_lanes: usize,
    /// How often expired working memory and old finished jobs are deleted ([`sweeper`]).
    pub sweep_every: Duration,
    /// How long a finished (`done`) job is kept before the sweeper deletes it; `None` keeps
    /// them all. Failed jobs are kept whatever their age: they wait for an operator.
    pub job_retention: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 2,
            lease: Duration::from_secs(300),
            poll: Duration::from_millis(200),
            backoff: Duration::from_secs(2),
            grace: Duration::from_secs(10),
            embedding_lanes: 2,
            sweep_every: Duration::from_secs(60),
            job_retention: Some(DEFAULT_JOB_RETENTION),
        }
    }
}

fn at(d: Duration) -> OffsetDateTime {
    crate::model::now() + d
}

/// How long finished jobs are kept by default: a week of history in `engram jobs list`, the
/// UI and `/v1/stats`, after which they are deleted (every append leaves one job behind).
pub const DEFAULT_JOB_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Finished jobs a sweep deletes per statement, one short transaction each: 1,000 hold
/// SQLite's one writer ~0.15 s (p50 at a million jobs; benches/README, "Finished jobs
/// deleted"), and other writes are served between two statements.
pub const PRUNE_BATCH: usize = 1_000;

/// `embed_messages` jobs the embedding lane claims and embeds as one batch.
pub const LANE_JOBS: usize = 16;

/// Run workers until `shutdown` is cancelled and in-flight jobs are finished or abandoned:
/// `cfg.concurrency` workers for the LLM jobs (none without an LLM: those jobs wait for a
/// process that has one instead of failing with a configuration error) and the embedding
/// lane.
pub async fn run_workers(engine: Services, cfg: WorkerConfig, shutdown: CancellationToken) {
    let mut tasks = Vec::new();
    if engine.llm().is_some() {
        for n in 0..cfg.concurrency.max(1) {
            let engine = engine.clone();
            let cfg = cfg.clone();
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move { worker_loop(n, engine, cfg, shutdown).await }));
        }
    }
    for _ in 0..cfg.embedding_lanes.max(1) {
        let (engine, cfg, shutdown) = (engine.clone(), cfg.clone(), shutdown.clone());
        tasks.push(tokio::spawn(embedding_lane(engine, cfg, shutdown)));
    }
    tasks.push(tokio::spawn(sweeper(engine.clone(), cfg.clone(), shutdown.clone())));
    for t in tasks {
        let _ = t.await;
    }
}

/// Delete expired working memory (reads never return it anyway: this only frees the rows)
/// and the jobs that finished longer than `cfg.job_retention` ago, now and every
/// `cfg.sweep_every`.
pub async fn sweeper(engine: Services, cfg: WorkerConfig, shutdown: CancellationToken) {
    loop {
        match engine.store().sweep_state(crate::model::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(entries = n, "expired working memory swept"),
            Err(e) => tracing::warn!(error = %e, "cannot sweep expired working memory"),
        }
        if let Some(keep) = cfg.job_retention {
            prune_jobs(&engine, crate::model::now() - keep, &shutdown).await;
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(cfg.sweep_every) => {}
        }
    }
}

/// Delete the jobs that finished before `before`, [`PRUNE_BATCH`] per statement, until none
/// is left or shutdown is asked.
async fn prune_jobs(engine: &Services, before: OffsetDateTime, shutdown: &CancellationToken) {
    let mut total = 0;
    while !shutdown.is_cancelled() {
        match engine.store().prune_jobs(before, PRUNE_BATCH).await {
            Ok(n) => {
                total += n;
                if n < PRUNE_BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot delete old finished jobs");
                break;
            }
        }
    }
    if total > 0 {
        tracing::debug!(jobs = total, "old finished jobs deleted");
    }
}

/// The kinds of job the LLM workers run: all but message embedding (the lane's).
fn llm_kinds() -> Vec<JobKind> {
    JobKind::ALL.iter().copied().filter(|k| *k != JobKind::EmbedMessages).collect()
}

async fn worker_loop(n: usize, engine: Services, cfg: WorkerConfig, shutdown: CancellationToken) {
    tracing::debug!(worker = n, "worker started");
    let kinds = llm_kinds();
    while !shutdown.is_cancelled() {
        let claimed = engine.store().claim_job(crate::model::now(), at(cfg.lease), &kinds).await;
        match claimed {
            Ok(Some(job)) => {
                let _ = execute(&engine, &cfg, &shutdown, job).await;
            }
            Ok(None) => idle(&cfg, &shutdown, 1).await,
            Err(e) => {
                tracing::error!(worker = n, error = %e, "cannot claim jobs");
                idle(&cfg, &shutdown, 10).await;
            }
        }
    }
    tracing::debug!(worker = n, "worker stopped");
}

/// Sleep `polls` poll intervals, or until shutdown.
async fn idle(cfg: &WorkerConfig, shutdown: &CancellationToken, polls: u32) {
    tokio::select! {
        () = tokio::time::sleep(cfg.poll * polls) => {}
        () = shutdown.cancelled() => {}
    }
}

/// The embedding lane: claim up to [`LANE_JOBS`] `embed_messages` jobs, run them as one
/// batch ([`execute_embedding`]), repeat.
pub async fn embedding_lane(engine: Services, cfg: WorkerConfig, shutdown: CancellationToken) {
    tracing::debug!("embedding lane started");
    let kinds = [JobKind::EmbedMessages];
    while !shutdown.is_cancelled() {
        engine.requests().idle_within(crate::pipeline::messages::YIELD).await;
        let claimed =
            engine.store().claim_jobs(crate::model::now(), at(cfg.lease), &kinds, LANE_JOBS).await;
        let (group, failed) = match claimed {
            Ok(group) => (group, false),
            Err(e) => {
                tracing::error!(error = %e, "cannot claim embedding jobs");
                (Vec::new(), true)
            }
        };
        if !group.is_empty() {
            execute_embedding(&engine, &cfg, &shutdown, group).await;
        } else if failed {
            idle(&cfg, &shutdown, 10).await;
        } else {
            // Until the next poll, or at once when this process appends messages.
            tokio::select! {
                () = idle(&cfg, &shutdown, 1) => {}
                () = engine.embedding_wanted().notified() => {}
            }
        }
    }
    tracing::debug!("embedding lane stopped");
}

/// Keep the leases of running jobs alive until the returned task is aborted.
fn heartbeat(
    engine: &Services,
    cfg: &WorkerConfig,
    ids: Vec<String>,
) -> tokio::task::JoinHandle<()> {
    let store = engine.store().clone();
    let lease = cfg.lease;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(lease / 3);
        tick.tick().await;
        loop {
            tick.tick().await;
            for id in &ids {
                if let Err(e) = store.heartbeat_job(id, at(lease)).await {
                    tracing::warn!(job = %id, error = %e, "heartbeat failed");
                }
            }
        }
    })
}

/// `fut`, unless shutdown is asked and `cfg.grace` passes first (`None`).
async fn within_grace<T>(
    cfg: &WorkerConfig,
    shutdown: &CancellationToken,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    let grace = async {
        shutdown.cancelled().await;
        tokio::time::sleep(cfg.grace).await;
    };
    tokio::select! {
        r = fut => Some(r),
        () = grace => None,
    }
}

/// Run claimed `embed_messages` jobs as one batch, each to its own outcome.
#[tracing::instrument(skip_all, fields(jobs = jobs.len()))]
pub async fn execute_embedding(
    engine: &Services,
    cfg: &WorkerConfig,
    shutdown: &CancellationToken,
    jobs: Vec<Job>,
) -> Vec<ExecutionOutcome> {
    let beat = heartbeat(engine, cfg, jobs.iter().map(|j| j.id.clone()).collect());
    let results = within_grace(cfg, shutdown, engine.run_embed_messages(&jobs)).await;
    beat.abort();
    let mut outcomes = Vec::with_capacity(jobs.len());
    match results {
        None => {
            for job in &jobs {
                outcomes.push(settle(engine, cfg, job, None).await);
            }
        }
        Some(results) => {
            // The jobs that succeeded are marked done together, in one write.
            let ids: Vec<String> = jobs
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(j, _)| j.id.clone())
                .collect();
            let done = match engine.store().complete_jobs(&ids).await {
                Ok(()) => ExecutionOutcome::Done,
                Err(e) => {
                    tracing::error!(error = %e, jobs = ids.len(), "cannot mark jobs done");
                    ExecutionOutcome::Abandoned
                }
            };
            for (job, result) in jobs.iter().zip(results) {
                let outcome = match result {
                    Ok(()) => {
                        engine.metrics().observe_job(job.kind.as_str(), &done);
                        done.clone()
                    }
                    Err(e) => settle(engine, cfg, job, Some(Err(e))).await,
                };
                outcomes.push(outcome);
            }
        }
    }
    outcomes
}

/// Run one claimed job to its outcome.
#[tracing::instrument(skip_all, fields(job = %job.id, kind = job.kind.as_str(), attempt = job.attempts))]
pub async fn execute(
    engine: &Services,
    cfg: &WorkerConfig,
    shutdown: &CancellationToken,
    job: Job,
) -> ExecutionOutcome {
    let beat = heartbeat(engine, cfg, vec![job.id.clone()]);
    let result = within_grace(cfg, shutdown, engine.run_job(&job)).await;
    beat.abort();
    settle(engine, cfg, &job, result).await
}

/// Record a job's run: done, retried with backoff, failed for good, or (`None`: stopped by
/// shutdown) abandoned to its lease.
async fn settle(
    engine: &Services,
    cfg: &WorkerConfig,
    job: &Job,
    result: Option<Result<(), JobError>>,
) -> ExecutionOutcome {
    let store = engine.store();
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
