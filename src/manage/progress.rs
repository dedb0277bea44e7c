//! A progress bar on stderr for `client create --count`, drawn only when stderr is a
//! terminal: scripts and tests that read stderr (or stdout, where the secrets go) see
//! nothing of it.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The fewest clients worth a bar: below this, creating them on the database takes a few
/// milliseconds, and over the admin API a second or two.
const SHOWN_FROM: u32 = 1000;

/// How far a long creation has come; does nothing when no bar is drawn.
#[derive(Debug)]
pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar counting to `count` clients, if `count` is large enough and stderr is a
    /// terminal.
    pub(crate) fn clients(count: u32) -> Self {
        if count < SHOWN_FROM || !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let bar =
            ProgressBar::with_draw_target(Some(u64::from(count)), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:40} {human_pos}/{human_len} clients, about {eta} left",
            )
            .expect("a valid template"),
        );
        Self(Some(bar))
    }

    /// `n` more clients are created.
    pub(crate) fn advance(&self, n: usize) {
        if let Some(bar) = &self.0 {
            bar.inc(n as u64);
        }
    }

    /// Runs `print` with the bar out of the way, so that a line written to the same
    /// terminal on stdout does not mix with it.
    pub(crate) fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.0 {
            Some(bar) if std::io::stdout().is_terminal() => bar.suspend(print),
            _ => print(),
        }
    }

    /// Removes the bar: the work it measured is over.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
