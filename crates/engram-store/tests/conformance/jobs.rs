//! The job queue: dedup, claim order, leases, lock keys, retries.

use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{Job, JobKind, JobStatus, TenantId};
use engram_core::store::prelude::*;
use time::{Duration, OffsetDateTime};

use crate::harness::{now, tenant, user};

/// A pending job of `t`, runnable at `run_after`.
pub fn job(
    t: &TenantId,
    dedup: Option<&str>,
    lock: Option<&str>,
    run_after: OffsetDateTime,
) -> Job {
    let mut j = Job::new(t.clone(), Some(user("u")), JobKind::Extract, serde_json::json!({"n": 1}));
    j.dedup_key = dedup.map(str::to_string);
    j.lock_key = lock.map(str::to_string);
    j.run_after = run_after;
    j.created_at = now();
    j.updated_at = j.created_at;
    j
}

async fn claim(s: &Arc<dyn Store>, at: OffsetDateTime) -> Option<Job> {
    s.claim_job(at, at + Duration::seconds(60), JobKind::ALL).await.unwrap()
}

async fn get(s: &Arc<dyn Store>, t: &TenantId, id: &str) -> Job {
    s.list_jobs(Some(t), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.id == id)
        .expect("job listed")
}

pub async fn enqueue_dedup_and_claim_order(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let base = now();
    let j1 = job(&t, Some("extract:c1"), None, base - Duration::seconds(1));
    assert!(s.enqueue_job(&j1).await.unwrap());
    assert!(
        !s.enqueue_job(&job(&t, Some("extract:c1"), None, base)).await.unwrap(),
        "pending duplicate"
    );
    assert!(!s.enqueue_job(&j1).await.unwrap(), "same id again");
    let j2 = job(&t2, Some("extract:c1"), None, base - Duration::seconds(3));
    assert!(s.enqueue_job(&j2).await.unwrap(), "dedup keys are per tenant");
    let j3 = job(&t, None, None, base - Duration::seconds(2));
    assert!(s.enqueue_job(&j3).await.unwrap());
    let j4 = job(&t, None, None, base - Duration::seconds(2));
    assert!(s.enqueue_job(&j4).await.unwrap());
    let later = job(&t, None, None, base + Duration::hours(1));
    assert!(s.enqueue_job(&later).await.unwrap());
    assert_eq!(s.list_jobs(Some(&t), Some(JobStatus::Pending), 100).await.unwrap().len(), 4);

    // Oldest run_after first, then id; any tenant; not before run_after.
    let (first_equal, second_equal) = if j3.id < j4.id { (&j3, &j4) } else { (&j4, &j3) };
    let lease = base + Duration::seconds(60);
    let order = [&j2, first_equal, second_equal, &j1];
    for want in order {
        let got = s.claim_job(base, lease, JobKind::ALL).await.unwrap().expect("a runnable job");
        assert_eq!(got.id, want.id);
        assert_eq!(
            (got.status, got.attempts, got.lease_until),
            (JobStatus::Running, 1, Some(lease))
        );
        assert_eq!(
            (got.tenant_id.clone(), got.payload.clone()),
            (want.tenant_id.clone(), want.payload.clone())
        );
    }
    assert!(claim(&s, base).await.is_none(), "the later job is not due");
    // A running job no longer holds its dedup key: a new turn may queue behind it.
    let next = job(&t, Some("extract:c1"), None, base);
    assert!(s.enqueue_job(&next).await.unwrap());
    for j in order {
        s.complete_job(&j.id).await.unwrap();
    }
    assert_eq!(claim(&s, base + Duration::hours(2)).await.map(|j| j.id), Some(next.id));
    assert_eq!(claim(&s, base + Duration::hours(2)).await.map(|j| j.id), Some(later.id));
    let st = s.stats(&t).await.unwrap();
    assert_eq!((st.jobs_pending, st.jobs_running, st.jobs_done), (0, 2, 3));
}

pub async fn lease_expiry_reclaims(s: Arc<dyn Store>) {
    let t = tenant("t");
    let base = now();
    let j = job(&t, None, None, base);
    s.enqueue_job(&j).await.unwrap();
    let got = s.claim_job(base, base + Duration::seconds(10), JobKind::ALL).await.unwrap().unwrap();
    assert_eq!((got.id.clone(), got.attempts), (j.id.clone(), 1));
    assert!(
        s.claim_job(base + Duration::seconds(5), base + Duration::seconds(15), JobKind::ALL)
            .await
            .unwrap()
            .is_none()
    );
    // The worker died: after the lease, another worker takes the job over.
    let again = s
        .claim_job(base + Duration::seconds(11), base + Duration::seconds(21), JobKind::ALL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.id.clone(), again.attempts, again.status),
        (j.id.clone(), 2, JobStatus::Running)
    );
    // A heartbeat extends the lease.
    s.heartbeat_job(&j.id, base + Duration::seconds(100)).await.unwrap();
    assert!(claim(&s, base + Duration::seconds(30)).await.is_none());
    s.complete_job(&j.id).await.unwrap();
    let done = get(&s, &t, &j.id).await;
    assert_eq!((done.status, done.lease_until, done.last_error), (JobStatus::Done, None, None));
    assert!(claim(&s, base + Duration::seconds(200)).await.is_none());
    s.heartbeat_job(&j.id, base + Duration::seconds(300)).await.unwrap();
    assert_eq!(
        get(&s, &t, &j.id).await.status,
        JobStatus::Done,
        "a heartbeat does not revive a job"
    );
    s.heartbeat_job("unknown", base).await.unwrap();
    s.complete_job("unknown").await.unwrap();
}

pub async fn lock_key_is_exclusive(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let base = now();
    let j1 = job(&t, Some("a"), Some("conv:c1"), base - Duration::seconds(4));
    let j2 = job(&t, Some("b"), Some("conv:c1"), base - Duration::seconds(3));
    let j3 = job(&t2, Some("a"), Some("conv:c1"), base - Duration::seconds(2));
    let j4 = job(&t, Some("c"), Some("conv:c2"), base - Duration::seconds(1));
    for j in [&j1, &j2, &j3, &j4] {
        assert!(s.enqueue_job(j).await.unwrap());
    }
    let lease = base + Duration::seconds(60);
    let mut got = Vec::new();
    while let Some(j) = s.claim_job(base, lease, JobKind::ALL).await.unwrap() {
        got.push(j.id);
        assert!(got.len() < 10);
    }
    assert_eq!(
        got,
        vec![j1.id.clone(), j3.id.clone(), j4.id.clone()],
        "j2 waits for j1 (same tenant and key)"
    );
    s.complete_job(&j1.id).await.unwrap();
    assert_eq!(claim(&s, base).await.map(|j| j.id), Some(j2.id.clone()));
    assert!(claim(&s, base).await.is_none());
    // A running job whose lease expired no longer holds its key.
    let j5 = job(&t, Some("d"), Some("conv:c2"), base);
    s.enqueue_job(&j5).await.unwrap();
    let after = lease + Duration::seconds(1);
    let mut ids = Vec::new();
    while let Some(j) =
        s.claim_job(after, after + Duration::seconds(60), JobKind::ALL).await.unwrap()
    {
        ids.push(j.id);
        assert!(ids.len() < 10);
    }
    // j3, j4 and j2 expired and are taken over (oldest first); j5 waits for j4 (same key).
    assert_eq!(ids, vec![j2.id.clone(), j3.id.clone(), j4.id.clone()]);
    s.fail_job(&j4.id, "boom", None).await.unwrap();
    assert_eq!(claim(&s, after).await.map(|j| j.id), Some(j5.id));
}

pub async fn retry_backoff_fail_list(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let base = now();
    let j = job(&t, Some("extract:c9"), None, base);
    s.enqueue_job(&j).await.unwrap();
    claim(&s, base).await.unwrap();
    // Back off: pending again at retry_at, with the error.
    s.fail_job(&j.id, "timeout", Some(base + Duration::seconds(60))).await.unwrap();
    let got = get(&s, &t, &j.id).await;
    assert_eq!(
        (got.status, got.run_after, got.lease_until, got.last_error.as_deref(), got.attempts),
        (JobStatus::Pending, base + Duration::seconds(60), None, Some("timeout"), 1)
    );
    assert!(claim(&s, base + Duration::seconds(30)).await.is_none());
    let again = claim(&s, base + Duration::seconds(61)).await.unwrap();
    assert_eq!((again.id.clone(), again.attempts), (j.id.clone(), 2));
    // Out of attempts: failed for good, visible, and can be re-run.
    s.fail_job(&j.id, "timeout again", None).await.unwrap();
    let failed = s.list_jobs(Some(&t), Some(JobStatus::Failed), 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (failed[0].id.clone(), failed[0].last_error.as_deref()),
        (j.id.clone(), Some("timeout again"))
    );
    assert!(claim(&s, base + Duration::hours(1)).await.is_none());
    let st = s.stats(&t).await.unwrap();
    assert_eq!((st.jobs_failed, st.extractions_failed), (1, 1));
    assert!(matches!(s.retry_job(Some(&t2), &j.id).await, Err(Error::NotFound { .. })));
    assert!(matches!(s.retry_job(Some(&t), "unknown").await, Err(Error::NotFound { .. })));
    s.retry_job(Some(&t), &j.id).await.unwrap();
    let got = get(&s, &t, &j.id).await;
    assert_eq!((got.status, got.attempts, got.last_error), (JobStatus::Pending, 0, None));
    // Only a failed job is retried; another says what it is.
    match s.retry_job(None, &j.id).await {
        Err(Error::Conflict(m)) => assert!(m.contains("is pending"), "{m}"),
        other => panic!("retry of a pending job: {other:?}"),
    }
    let real_now = OffsetDateTime::now_utc() + Duration::seconds(1);
    let retried = s
        .claim_job(real_now, real_now + Duration::seconds(60), JobKind::ALL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((retried.id.clone(), retried.attempts), (j.id.clone(), 1));
    s.complete_job(&j.id).await.unwrap();
    assert_eq!(s.stats(&t).await.unwrap().extractions_done, 1);

    // A retry that would duplicate a newer pending job closes the old one instead.
    let a = job(&t, Some("extract:c7"), None, base);
    s.enqueue_job(&a).await.unwrap();
    assert_eq!(claim(&s, base).await.map(|j| j.id), Some(a.id.clone()));
    let b = job(&t, Some("extract:c7"), None, base);
    assert!(s.enqueue_job(&b).await.unwrap());
    s.fail_job(&a.id, "transient", Some(base + Duration::seconds(5))).await.unwrap();
    let closed = get(&s, &t, &a.id).await;
    assert_eq!(closed.status, JobStatus::Done);
    assert!(closed.last_error.unwrap_or_default().contains("transient"));
    assert_eq!(get(&s, &t, &b.id).await.status, JobStatus::Pending);
    // Re-running a failed job whose key a pending job holds is refused the same way.
    assert_eq!(claim(&s, base).await.map(|j| j.id), Some(b.id.clone()));
    s.fail_job(&b.id, "fatal", None).await.unwrap();
    let c = job(&t, Some("extract:c7"), None, base);
    assert!(s.enqueue_job(&c).await.unwrap());
    assert!(matches!(s.retry_job(Some(&t), &b.id).await, Err(Error::Conflict(_))));
    assert_eq!(get(&s, &t, &b.id).await.status, JobStatus::Failed);

    // Listing: newest first, per tenant or all, limited.
    let listed = s.list_jobs(Some(&t), None, 100).await.unwrap();
    assert!(listed.windows(2).all(|w| (w[0].created_at, &w[0].id) >= (w[1].created_at, &w[1].id)));
    assert_eq!(listed.len(), 4);
    assert_eq!(s.list_jobs(Some(&t), None, 2).await.unwrap(), listed[..2].to_vec());
    s.enqueue_job(&job(&t2, None, None, base)).await.unwrap();
    assert_eq!(s.list_jobs(None, None, 100).await.unwrap().len(), 5);
    assert_eq!(s.list_jobs(Some(&t2), None, 100).await.unwrap().len(), 1);
    assert_eq!(s.list_jobs(None, Some(JobStatus::Running), 100).await.unwrap().len(), 0);
}

/// Issue 10: a worker without an LLM claims only the kinds it can run; an extraction job
/// waits for a worker that can run it instead of failing with "no LLM is configured".
pub async fn claim_only_the_kinds_asked_for(s: Arc<dyn Store>) {
    let t = tenant("t");
    let base = now();
    let extract = job(&t, None, None, base - Duration::seconds(2));
    let mut embed = job(&t, None, None, base - Duration::seconds(1));
    embed.kind = JobKind::EmbedMessages;
    assert!(s.enqueue_job(&extract).await.unwrap());
    assert!(s.enqueue_job(&embed).await.unwrap());
    let lease = base + Duration::seconds(60);
    let got = s.claim_job(base, lease, &[JobKind::EmbedMessages]).await.unwrap().unwrap();
    assert_eq!(got.id, embed.id, "the older extraction job is not for this worker");
    assert!(s.claim_job(base, lease, &[JobKind::EmbedMessages]).await.unwrap().is_none());
    assert_eq!(get(&s, &t, &extract.id).await.status, JobStatus::Pending);
    let got = s.claim_job(base, lease, JobKind::ALL).await.unwrap().unwrap();
    assert_eq!(got.id, extract.id);
}

/// The embedding lane marks its group done in one call: every job named, of any tenant, is
/// done; the others are untouched; an unknown id is no error.
pub async fn complete_jobs_marks_a_group_done(s: Arc<dyn Store>) {
    let (a, b) = (tenant("a"), tenant("b"));
    let base = now();
    let jobs = [
        job(&a, None, Some("c1"), base),
        job(&b, None, Some("c1"), base),
        job(&a, None, Some("c2"), base),
    ];
    for j in &jobs {
        s.enqueue_job(j).await.unwrap();
    }
    let mut claimed = Vec::new();
    while let Some(j) = claim(&s, base + Duration::seconds(1)).await {
        claimed.push(j.id);
    }
    assert_eq!(claimed.len(), 3);
    let group = vec![jobs[0].id.clone(), jobs[1].id.clone(), "unknown".to_string()];
    s.complete_jobs(&group).await.unwrap();
    assert_eq!(get(&s, &a, &jobs[0].id).await.status, JobStatus::Done);
    assert_eq!(get(&s, &b, &jobs[1].id).await.status, JobStatus::Done);
    assert_eq!(get(&s, &a, &jobs[2].id).await.status, JobStatus::Running);
    s.complete_jobs(&[]).await.unwrap();
}

pub async fn claim_jobs_takes_a_group_by_the_claim_rules(s: Arc<dyn Store>) {
    let (a, b) = (tenant("a"), tenant("b"));
    let base = now();
    let at = |ms: i64| base + Duration::milliseconds(ms);
    let lease = base + Duration::seconds(60);
    let first = job(&a, None, Some("c1"), at(-50));
    let other_tenant = job(&b, None, Some("c1"), at(-40));
    let same_key = job(&a, None, Some("c1"), at(-30));
    let held = job(&a, None, Some("c2"), at(-60));
    let blocked = job(&a, None, Some("c2"), at(-20));
    let plain = job(&a, None, None, at(-10));
    let later = job(&a, None, None, base + Duration::hours(1));
    let mut other_kind = job(&a, None, None, at(-70));
    other_kind.kind = JobKind::EmbedMessages;
    for j in [&first, &other_tenant, &same_key, &held, &blocked, &plain, &later, &other_kind] {
        s.enqueue_job(j).await.unwrap();
    }
    let running = s.claim_job(base, lease, &[JobKind::Extract]).await.unwrap().unwrap();
    assert_eq!(running.id, held.id, "the oldest extract job");

    assert!(s.claim_jobs(base, lease, &[JobKind::Extract], 0).await.unwrap().is_empty());
    let group = s.claim_jobs(base, lease, &[JobKind::Extract], 10).await.unwrap();
    let ids: Vec<&str> = group.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(
        ids,
        [first.id.as_str(), other_tenant.id.as_str(), plain.id.as_str()],
        "oldest first; one job per lock key and tenant; none of a key already running; \
         nothing not due and no other kind"
    );
    for j in &group {
        assert_eq!((j.status, j.attempts, j.lease_until), (JobStatus::Running, 1, Some(lease)));
        assert_eq!(get(&s, &j.tenant_id, &j.id).await.status, JobStatus::Running);
    }
    assert!(s.claim_jobs(base, lease, &[JobKind::Extract], 10).await.unwrap().is_empty());

    // The key frees up when its job ends; the limit caps the group.
    s.complete_jobs(&[first.id.clone(), running.id.clone()]).await.unwrap();
    let group = s.claim_jobs(base, lease, &[JobKind::Extract], 1).await.unwrap();
    assert_eq!(group.iter().map(|j| &j.id).collect::<Vec<_>>(), [&same_key.id]);
    let group = s.claim_jobs(base, lease, &[JobKind::Extract], 10).await.unwrap();
    assert_eq!(group.iter().map(|j| &j.id).collect::<Vec<_>>(), [&blocked.id]);

    // Expired leases are claimed again, with their attempts counted.
    let expired = base + Duration::seconds(61);
    let group =
        s.claim_jobs(expired, expired + Duration::seconds(60), JobKind::ALL, 10).await.unwrap();
    let mut again: Vec<(&str, i64)> = group.iter().map(|j| (j.id.as_str(), j.attempts)).collect();
    again.sort_unstable();
    let mut want = vec![
        (other_tenant.id.as_str(), 2),
        (plain.id.as_str(), 2),
        (blocked.id.as_str(), 2),
        (same_key.id.as_str(), 2),
        (other_kind.id.as_str(), 1),
    ];
    want.sort_unstable();
    assert_eq!(again, want);
}

/// The ids of a tenant's jobs, sorted.
async fn ids(s: &Arc<dyn Store>, t: &TenantId) -> Vec<String> {
    let mut out: Vec<String> =
        s.list_jobs(Some(t), None, 1000).await.unwrap().into_iter().map(|j| j.id).collect();
    out.sort();
    out
}

pub async fn finished_jobs_are_pruned_oldest_first(s: Arc<dyn Store>) {
    let (a, b) = (tenant("a"), tenant("b"));
    let base = now();
    // Two finished jobs (one per tenant), a failed one and a pending one, all before the
    // cutoff; a running one; a job that finishes after the cutoff.
    let old_a = job(&a, None, Some("c1"), base - Duration::hours(3));
    let old_b = job(&b, None, Some("c1"), base - Duration::hours(2));
    let failed = job(&a, None, Some("c2"), base - Duration::hours(1));
    let running = job(&a, None, Some("c3"), base - Duration::minutes(30));
    let recent = job(&a, None, Some("c4"), base - Duration::minutes(20));
    let mut embed = job(&a, None, Some("c5"), base - Duration::minutes(10));
    embed.kind = JobKind::EmbedMessages;
    let pending = job(&a, None, None, base + Duration::hours(1));
    for j in [&old_a, &old_b, &failed, &running, &recent, &embed, &pending] {
        assert!(s.enqueue_job(j).await.unwrap());
    }
    for want in [&old_a, &old_b, &failed, &running, &recent, &embed] {
        assert_eq!(claim(&s, base).await.map(|j| j.id), Some(want.id.clone()));
    }
    s.complete_job(&old_a.id).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    s.complete_job(&old_b.id).await.unwrap();
    s.fail_job(&failed.id, "the LLM refused", None).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let cutoff = OffsetDateTime::now_utc();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    s.complete_job(&recent.id).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    s.complete_job(&embed.id).await.unwrap();
    // The newest finished extraction, not the newest finished job.
    let extracted = get(&s, &a, &recent.id).await.updated_at;
    assert!(get(&s, &a, &embed.id).await.updated_at > extracted);
    assert_eq!(s.stats(&a).await.unwrap().last_extraction_at, Some(extracted));
    let b_extracted = get(&s, &b, &old_b.id).await.updated_at;
    assert_eq!(s.stats(&b).await.unwrap().last_extraction_at, Some(b_extracted));

    // Oldest first, `limit` at a time, across tenants.
    assert_eq!(s.prune_jobs(cutoff, 1).await.unwrap(), 1);
    assert!(!ids(&s, &a).await.contains(&old_a.id), "the oldest finished job goes first");
    assert_eq!(ids(&s, &b).await, vec![old_b.id.clone()]);
    assert_eq!(s.prune_jobs(cutoff, 100).await.unwrap(), 1);
    assert!(ids(&s, &b).await.is_empty(), "every tenant's finished jobs are pruned");
    assert_eq!(s.stats(&b).await.unwrap().last_extraction_at, None, "none on record");
    assert_eq!(s.prune_jobs(cutoff, 100).await.unwrap(), 0);

    // What is failed, pending, running or finished since the cutoff stays, as it was.
    let mut kept = vec![
        failed.id.clone(),
        running.id.clone(),
        recent.id.clone(),
        embed.id.clone(),
        pending.id,
    ];
    kept.sort();
    assert_eq!(ids(&s, &a).await, kept);
    assert_eq!(get(&s, &a, &failed.id).await.status, JobStatus::Failed);
    assert_eq!(get(&s, &a, &running.id).await.status, JobStatus::Running);
    let st = s.stats(&a).await.unwrap();
    assert_eq!((st.jobs_pending, st.jobs_running, st.jobs_failed, st.jobs_done), (1, 1, 1, 2));
    assert_eq!(st.last_extraction_at, Some(extracted));
    // A failed job retried and finished is pruned like any other once it is old enough.
    s.retry_job(Some(&a), &failed.id).await.unwrap();
    let soon = OffsetDateTime::now_utc() + Duration::seconds(1);
    assert_eq!(claim(&s, soon).await.map(|j| j.id), Some(failed.id.clone()));
    s.complete_job(&failed.id).await.unwrap();
    assert_eq!(
        s.prune_jobs(OffsetDateTime::now_utc() + Duration::seconds(1), 100).await.unwrap(),
        3
    );
    assert_eq!(ids(&s, &a).await.len(), 2, "the running and the pending job stay");
}
