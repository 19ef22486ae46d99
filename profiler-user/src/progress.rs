//! The one-line progress display on a terminal while recording.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A spinner line on stderr; draws nothing when stderr is not a terminal.
pub struct Progress {
    bar: ProgressBar,
    planned: Option<Duration>,
}

impl Progress {
    /// Starts the line; `planned` is the `-d` duration, if any.
    pub fn start(planned: Option<Duration>) -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
        Self { bar, planned }
    }

    /// Whether the line is drawn (stderr is a terminal): what it shows need
    /// not be gathered otherwise.
    pub fn is_shown(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Shows how the recording is going.
    pub fn update(&self, elapsed: Duration, samples: u64, processes: usize, lost: u64) {
        let time = match self.planned {
            Some(planned) => format!(
                "{:.0}/{:.0} s",
                elapsed.as_secs_f64(),
                planned.as_secs_f64()
            ),
            None => format!("{:.0} s (Ctrl-C to stop)", elapsed.as_secs_f64()),
        };
        self.bar.set_message(format!(
            "recording {time} · {samples} samples · {processes} processes · {lost} lost"
        ));
        self.bar.tick();
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
