//! How long work tells its caller how far it has come: [`Progress`], called every [`EVERY`] rows
//! or so (a counter and a comparison per row, no clock, no syscall), so that the command running
//! it can show a bar or a line now and then. The store draws nothing itself.
//!
//! A root file, below every folder: any folder may take a `&dyn Progress`.

/// Rows between two calls of [`Progress::done`] (besides the one at the end of each stage).
pub const EVERY: u64 = 4096;

/// Told how far a piece of long work has come. Shared across threads (a sweep plans on a
/// blocking thread), hence `&self` and `Send + Sync`: an implementation keeps its counts in
/// atomics or behind a lock.
pub trait Progress: Send + Sync {
    /// A stage of the work starts (`"chain"`, `"writing"`): its name and its rows when known.
    /// The count of [`Progress::done`] starts again from 0.
    fn stage(&self, name: &'static str, total: Option<u64>) {
        let _ = (name, total);
    }
    /// `rows` rows of the current stage are done.
    fn done(&self, rows: u64);
}

/// Progress nobody watches: what the functions without a `_with_progress` in their name pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {
    fn done(&self, _rows: u64) {}
}

/// Counts the rows of one stage and tells a [`Progress`] every [`EVERY`] of them.
pub struct RowCounter<'a> {
    progress: &'a dyn Progress,
    rows: u64,
    next: u64,
}

impl<'a> RowCounter<'a> {
    /// Starts stage `name` of `total` rows (when known) on `progress`.
    pub fn stage(progress: &'a dyn Progress, name: &'static str, total: Option<u64>) -> Self {
        progress.stage(name, total);
        RowCounter {
            progress,
            rows: 0,
            next: EVERY,
        }
    }

    /// `n` more rows done.
    #[inline]
    pub fn add(&mut self, n: u64) {
        self.rows += n;
        if self.rows >= self.next {
            self.progress.done(self.rows);
            self.next = self.rows + EVERY;
        }
    }

    /// The rows counted so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The end of the stage: tells the exact count.
    pub fn finish(self) -> u64 {
        self.progress.done(self.rows);
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);
    impl Progress for Log {
        fn stage(&self, name: &'static str, total: Option<u64>) {
            self.0.lock().unwrap().push(format!("{name} {total:?}"));
        }
        fn done(&self, rows: u64) {
            self.0.lock().unwrap().push(rows.to_string());
        }
    }

    #[test]
    fn a_counter_reports_every_so_many_rows_and_the_exact_count_at_the_end() {
        let log = Log::default();
        let mut c = RowCounter::stage(&log, "chain", Some(10_000));
        for _ in 0..10_000 {
            c.add(1);
        }
        assert_eq!(c.finish(), 10_000);
        assert_eq!(*log.0.lock().unwrap(), ["chain Some(10000)", "4096", "8192", "10000"]);
    }

    #[test]
    fn a_short_stage_reports_only_its_end() {
        let log = Log::default();
        let mut c = RowCounter::stage(&log, "writing", None);
        c.add(3000);
        c.add(1000);
        assert_eq!(c.rows(), 4000);
        c.finish();
        assert_eq!(*log.0.lock().unwrap(), ["writing None", "4000"]);
    }
}
