//! Progress of long command-line work (`import`, `export`, `reembed`) on stderr, with
//! `indicatif`: a bar when the total is known, a counter when not. Shown only when stderr
//! is a terminal and machine output (`--json`) was not asked for, so scripts, pipes and
//! log files see only the final summary (issue 10).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress display that may be hidden; every method is a no-op when it is.
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// `what` names the work ("importing"); `total` the number of items if known.
    pub fn new(what: &str, unit: &str, total: Option<u64>, machine_output: bool) -> Self {
        if machine_output || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(&format!(
                    "{what} {{bar:30}} {{pos}}/{{len}} {unit} ({{per_sec}}, {{eta}} left)"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template(&format!("{what} {{spinner}} {{msg}} ({{elapsed}})"))
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        // Drawn at once, not at the first tick: work shorter than a tick (a restore of a
        // few rows) still shows what it did.
        bar.tick();
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(Some(bar))
    }

    /// Items done so far.
    pub fn set(&self, done: u64) {
        if let Some(b) = &self.0 {
            b.set_position(done);
        }
    }

    /// A message in place of the count (the counter form).
    pub fn message(&self, msg: String) {
        if let Some(b) = &self.0 {
            b.set_message(msg);
        }
    }

    /// Remove the display (the caller prints its summary next).
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
