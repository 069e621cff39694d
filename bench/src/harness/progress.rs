//! Progress of a long phase on stderr. When stderr is a terminal, an `indicatif` bar; when it
//! is not (a log file, CI), the periodic `herald-bench: ...` lines the logs have always had,
//! since indicatif hides its bars there. Reports on stdout are never touched.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How the bar looks: `[00:00:12] ######------ 61% 12,000 of 18,000 sessions open`.
const TEMPLATE: &str = "[{elapsed_precise}] {bar:30} {percent:>3}% {msg}";

/// A bar out of `len`, or nothing but log lines.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress towards `len` (sessions, publications, ...).
    pub(crate) fn new(len: u64) -> Self {
        let target = ProgressDrawTarget::stderr();
        if target.is_hidden() {
            return Self { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(len), target);
        if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(250));
        Self { bar: Some(bar) }
    }

    /// Moves the bar to `position` with `line` beside it; without a bar, prints `line` as a
    /// `herald-bench:` log line.
    pub(crate) fn update(&self, position: u64, line: impl FnOnce() -> String) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(position);
                bar.set_message(line());
            }
            None => eprintln!("herald-bench: {}", line()),
        }
    }
}

impl Drop for Progress {
    /// The bar goes away with the phase; the log lines that follow stand alone.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
