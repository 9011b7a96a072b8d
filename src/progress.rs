//! Progress of long work (`ingest`, `export`, `retain`, `verify`) on stderr.
//!
//! On a terminal, an indicatif bar (rows done of the stage's total when it is known, rows/s,
//! elapsed), shown once the work has lasted a second and cleared when it ends, before the
//! command prints its result. Otherwise (stderr is a file or a pipe), one plain line every 10 s:
//! `ingest: 3,120,000 rows, 104,000 rows/s, 30 s elapsed`, and a last line ending in `, done`
//! with the exact count; nothing at all for work that ends within the first 10 s.
//!
//! The store calls [`Progress`] every few thousand rows; a thread of the reporter's own wakes up
//! to print, so a long step without rows (a commit, a compaction) still shows the clock moving.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use laneledger_query::words::format_count;
use laneledger_store::Progress;

/// Between two plain lines.
const EVERY: Duration = Duration::from_secs(10);
/// How long the work runs before the bar is shown.
const BAR_AFTER: Duration = Duration::from_secs(1);
/// Sets the interval between plain lines, in milliseconds, for tests (not documented: not for
/// users).
const EVERY_ENV: &str = "LANELEDGER_PROGRESS_EVERY_MS";

/// The interval between plain lines: [`EVERY`], or what [`EVERY_ENV`] says.
fn every() -> Duration {
    std::env::var(EVERY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(EVERY, Duration::from_millis)
}

/// The stage under way.
struct Stage {
    name: Option<&'static str>,
    total: Option<u64>,
    started: Instant,
}

/// What the store's calls and the printing thread share.
struct Shared {
    what: &'static str,
    started: Instant,
    rows: AtomicU64,
    stage: Mutex<Stage>,
    /// On a terminal: the bar, hidden until the work has lasted [`BAR_AFTER`].
    bar: Option<ProgressBar>,
    /// Whether a plain line was printed (then the end prints one too).
    printed: AtomicBool,
}

impl Shared {
    fn line(&self) -> String {
        let stage = self.stage.lock().expect("the stage lock is never poisoned");
        line(
            self.what,
            stage.name,
            self.rows.load(Ordering::Relaxed),
            stage.total,
            stage.started.elapsed(),
            self.started.elapsed(),
        )
    }
}

impl Progress for Shared {
    fn stage(&self, name: &'static str, total: Option<u64>) {
        *self.stage.lock().expect("the stage lock is never poisoned") = Stage {
            name: Some(name),
            total,
            started: Instant::now(),
        };
        self.rows.store(0, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            // Length and position first: a draw between two of these calls shows the new stage's
            // figures, not the last stage's count over the new total.
            bar.set_length(total.unwrap_or(0));
            bar.set_position(0);
            bar.set_prefix(format!("{}: {name}:", self.what));
            bar.set_style(bar_style(total.is_some()));
        }
    }

    fn done(&self, rows: u64) {
        self.rows.store(rows, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_position(rows);
        }
    }
}

fn bar_style(total_known: bool) -> ProgressStyle {
    let template = if total_known {
        "{prefix} [{wide_bar}] {human_pos}/{human_len} rows ({percent}%), {rate}, {elapsed} elapsed"
    } else {
        "{prefix} {spinner} {human_pos} rows, {rate}, {elapsed} elapsed"
    };
    ProgressStyle::with_template(template)
        .expect("a fixed template parses")
        .progress_chars("=> ")
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{} rows/s", format_count(s.per_sec().round() as i64));
        })
}

/// Progress of one command's long work on stderr; see the module docs. Dropped without
/// [`Reporter::finish`] (the work failed), it stops quietly.
pub struct Reporter {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    ticker: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Starts reporting the work of command `what` (`ingest`), a bar on a terminal.
    pub fn new(what: &'static str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            bar.set_style(bar_style(false));
            bar.set_prefix(format!("{what}:"));
            bar
        });
        Self::start(what, bar, every())
    }

    fn start(what: &'static str, bar: Option<ProgressBar>, every: Duration) -> Self {
        let now = Instant::now();
        let shared = Arc::new(Shared {
            what,
            started: now,
            rows: AtomicU64::new(0),
            stage: Mutex::new(Stage {
                name: None,
                total: None,
                started: now,
            }),
            bar,
            printed: AtomicBool::new(false),
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let s = shared.clone();
        let ticker = std::thread::spawn(move || match &s.bar {
            Some(bar) => {
                if stopped.recv_timeout(every.min(BAR_AFTER)) == Err(RecvTimeoutError::Timeout) {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                    // Redrawn now and then, so that the clock moves through a step without rows.
                    bar.enable_steady_tick(Duration::from_millis(200));
                    let _ = stopped.recv();
                }
            }
            None => {
                while stopped.recv_timeout(every) == Err(RecvTimeoutError::Timeout) {
                    eprintln!("{}", s.line());
                    s.printed.store(true, Ordering::Relaxed);
                }
            }
        });
        Reporter {
            shared,
            stop: Some(stop),
            ticker: Some(ticker),
        }
    }

    /// The reporter for work on other threads (a retention sweep runs on blocking threads).
    pub fn handle(&self) -> Arc<dyn Progress> {
        self.shared.clone()
    }

    /// Runs `f` (which prints to stderr) with the bar out of the way.
    pub fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.shared.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// The work is done: clears the bar, or prints the last line (with the exact count) when a
    /// line was printed before.
    pub fn finish(mut self) {
        self.stop();
        if self.shared.printed.load(Ordering::Relaxed) {
            eprintln!("{}, done", self.shared.line());
        }
    }

    fn stop(&mut self) {
        // Dropping the sender wakes the thread up.
        drop(self.stop.take());
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        if let Some(bar) = &self.shared.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Progress for Reporter {
    fn stage(&self, name: &'static str, total: Option<u64>) {
        self.shared.stage(name, total);
    }

    fn done(&self, rows: u64) {
        self.shared.done(rows);
    }
}

/// One plain progress line: `verify: chain: 3,120,000 of 10,000,000 rows (31%), 104,000
/// rows/s, 30 s elapsed`. The rate is over the stage's time, the elapsed time the whole work's.
pub fn line(
    what: &str,
    stage: Option<&str>,
    rows: u64,
    total: Option<u64>,
    stage_time: Duration,
    elapsed: Duration,
) -> String {
    let mut s = format!("{what}: ");
    if let Some(stage) = stage {
        s += &format!("{stage}: ");
    }
    s += &format_count(rows as i64);
    if let Some(total) = total {
        let percent = (rows * 100).checked_div(total).unwrap_or(100);
        s += &format!(" of {} rows ({percent}%)", format_count(total as i64));
    } else {
        s += " rows";
    }
    let secs = stage_time.as_secs_f64();
    let rate = if secs > 0.0 {
        (rows as f64 / secs).round() as i64
    } else {
        0
    };
    s += &format!(", {} rows/s, {} elapsed", format_count(rate), format_elapsed(elapsed));
    s
}

/// `42 s`, `12 min 05 s`, `2 h 03 min`.
pub fn format_elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_without_a_total_gives_rows_rate_and_elapsed() {
        let l = line(
            "ingest",
            None,
            3_120_000,
            None,
            Duration::from_secs(30),
            Duration::from_secs(30),
        );
        assert_eq!(l, "ingest: 3,120,000 rows, 104,000 rows/s, 30 s elapsed");
    }

    #[test]
    fn a_line_with_a_stage_and_a_total_gives_the_share_done() {
        let l = line(
            "verify",
            Some("chain"),
            3_120_000,
            Some(10_000_000),
            Duration::from_millis(12_500),
            Duration::from_secs(754),
        );
        assert_eq!(
            l,
            "verify: chain: 3,120,000 of 10,000,000 rows (31%), 249,600 rows/s, 12 min 34 s elapsed"
        );
    }

    #[test]
    fn an_empty_stage_is_all_done_and_a_stage_just_begun_has_no_rate() {
        let l = line(
            "export",
            Some("writing"),
            0,
            Some(0),
            Duration::ZERO,
            Duration::from_secs(7_384),
        );
        assert_eq!(l, "export: writing: 0 of 0 rows (100%), 0 rows/s, 2 h 03 min elapsed");
    }

    #[test]
    fn elapsed_time_reads_in_seconds_minutes_or_hours() {
        assert_eq!(format_elapsed(Duration::from_millis(59_999)), "59 s");
        assert_eq!(format_elapsed(Duration::from_secs(60)), "1 min 00 s");
        assert_eq!(format_elapsed(Duration::from_secs(3_599)), "59 min 59 s");
        assert_eq!(format_elapsed(Duration::from_secs(3_600)), "1 h 00 min");
    }

    #[test]
    fn quick_work_prints_nothing_and_slow_work_ends_on_the_exact_count() {
        // Plain lines: what the thread printed is not captured here, only whether it printed.
        let quick = Reporter::start("ingest", None, Duration::from_secs(3600));
        quick.done(5);
        assert!(!quick.shared.printed.load(Ordering::Relaxed));
        quick.finish();

        let slow = Reporter::start("ingest", None, Duration::from_millis(1));
        slow.stage("writing", Some(9));
        slow.done(9);
        std::thread::sleep(Duration::from_millis(50));
        assert!(slow.shared.printed.load(Ordering::Relaxed));
        assert!(slow.shared.line().starts_with("ingest: writing: 9 of 9 rows (100%), "));
        slow.finish();
    }
}
