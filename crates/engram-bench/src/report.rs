//! Latency statistics and Markdown / JSON output helpers.

use std::time::Duration;

use serde::Serialize;

/// Percentiles of a set of latencies, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub n: usize,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    /// Nearest-rank percentiles of `samples` (must not be empty).
    pub fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            let rank = ((p / 100.0) * ms.len() as f64).ceil() as usize;
            ms[rank.clamp(1, ms.len()) - 1]
        };
        Self {
            n: ms.len(),
            mean_ms: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
            p50_ms: pct(50.0),
            p95_ms: pct(95.0),
            p99_ms: pct(99.0),
            max_ms: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// A Markdown table: header cells and rows of cells.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n", header.join(" | "));
    s.push_str(&format!("|{}\n", " --- |".repeat(header.len())));
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

/// Print `value` as pretty JSON.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A one-line description of where the numbers come from (build profile, cores).
pub fn environment() -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    format!("{profile} build, {cores} cores available")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let l = Latency::of(&s);
        assert_eq!(l.p50_ms, 50.0);
        assert_eq!(l.p95_ms, 95.0);
        assert_eq!(l.p99_ms, 99.0);
        assert_eq!(l.max_ms, 100.0);
        assert!((l.mean_ms - 50.5).abs() < 1e-9);
        let one = Latency::of(&[Duration::from_millis(3)]);
        assert_eq!(one.p50_ms, 3.0);
        assert_eq!(one.p99_ms, 3.0);
    }
}
