//! Counters and histograms of the pipeline, kept in memory and rendered by the binary at
//! `/metrics` (Prometheus text format).
//!
//! Names: `engram_stage_seconds{stage}` (extract, embed, consolidate, persist, summary),
//! `engram_stage_total{stage,outcome}`, `engram_llm_calls_total{stage,outcome}`,
//! `engram_llm_tokens_total{kind}` (prompt, completion), `engram_jobs_total{kind,outcome}`,
//! `engram_extracted_facts_total{decision}`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::llm::ChatResponse;

/// Histogram bucket bounds, seconds.
pub const BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Debug, Default, Clone)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }
}

/// All metrics of a process.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// A snapshot for rendering.
#[derive(Debug, Default, Clone)]
pub struct Inner {
    /// `(name, labels)` → value.
    pub counters: BTreeMap<(String, String), u64>,
    /// `(name, labels)` → histogram.
    pub histograms: BTreeMap<(String, String), Histogram>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn inc(&self, name: &str, labels: &str, by: u64) {
        self.with(|i| *i.counters.entry((name.to_string(), labels.to_string())).or_default() += by);
    }

    pub fn observe(&self, name: &str, labels: &str, d: Duration) {
        self.with(|i| {
            i.histograms
                .entry((name.to_string(), labels.to_string()))
                .or_default()
                .observe(d.as_secs_f64())
        });
    }

    pub fn observe_stage(&self, stage: &str, d: Duration, ok: bool) {
        self.observe("engram_stage_seconds", &format!("stage=\"{stage}\""), d);
        let outcome = if ok { "ok" } else { "error" };
        self.inc("engram_stage_total", &format!("stage=\"{stage}\",outcome=\"{outcome}\""), 1);
    }

    pub fn observe_llm(&self, stage: &str, d: Duration, ok: Option<&ChatResponse>) {
        let outcome = if ok.is_some() { "ok" } else { "error" };
        self.inc("engram_llm_calls_total", &format!("stage=\"{stage}\",outcome=\"{outcome}\""), 1);
        self.observe("engram_llm_seconds", &format!("stage=\"{stage}\""), d);
        if let Some(r) = ok {
            self.inc("engram_llm_tokens_total", "kind=\"prompt\"", r.prompt_tokens);
            self.inc("engram_llm_tokens_total", "kind=\"completion\"", r.completion_tokens);
        }
    }

    pub fn observe_extraction(&self, r: &ExtractionReport) {
        for (d, n) in
            [("ADD", r.added), ("UPDATE", r.updated), ("DELETE", r.deleted), ("NONE", r.confirmed)]
        {
            if n > 0 {
                self.inc("engram_extracted_facts_total", &format!("decision=\"{d}\""), n as u64);
            }
        }
        if r.rejected_pii > 0 {
            self.inc("engram_pii_rejected_total", "", r.rejected_pii as u64);
        }
    }

    pub fn observe_job(&self, kind: &str, outcome: &ExecutionOutcome) {
        let o = match outcome {
            ExecutionOutcome::Done => "done",
            ExecutionOutcome::Retrying { .. } => "retry",
            ExecutionOutcome::Failed => "failed",
            ExecutionOutcome::Abandoned => "abandoned",
        };
        self.inc("engram_jobs_total", &format!("kind=\"{kind}\",outcome=\"{o}\""), 1);
    }

    /// A copy of every value.
    pub fn snapshot(&self) -> Inner {
        self.with(|i| i.clone())
    }
}

/// What happened to one claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutionOutcome {
    Done,
    Retrying { attempt: i64, after: Duration },
    Failed,
    Abandoned,
}

/// What one extraction run did (for metrics and the benchmark).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractionReport {
    pub batches: usize,
    pub llm_calls: usize,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub added: usize,
    pub updated: usize,
    pub deleted: usize,
    pub confirmed: usize,
    pub rejected_pii: usize,
}
