//! How a session keeps its derived tables between reads ([`Upkeep`]), and the table of a session
//! that keeps nothing between writes ([`PerRead`]).
//!
//! A table kept up to date by the writes (by job, by key, by chunk) holds every week's rows, and
//! what bringing them up to date takes, for as long as the session lives: what `serve` wants,
//! whose week page is read again after each write. A command that reads one week and exits
//! (`laneledger review --week`) would hold the same for nothing: at 10 M attempts the key rests,
//! the data quality findings and the weekly sums of every week took gigabytes beside the week it
//! printed (BENCHMARKS.md, "A command keeps nothing for later"). Such a session builds each table for the week its read names, and keeps only that
//! answer, for the next read of the same week (a review reads each audit three or four times).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::arrow::array::RecordBatch;
use laneledger_store::Ledger;

use crate::error::Result;
use crate::tables::job_attempt::{AttemptCache, Cursor};

/// How a session's derived tables are kept between reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Upkeep {
    /// Every week's rows are kept, and brought up to date from the rows each write changed: for a
    /// session that reads again after writes (`serve`).
    #[default]
    Incremental,
    /// Each table is built for the week a read names (every week when it names none) from the
    /// attempts, and only the last answer is kept, until a write: for a session that answers one
    /// command.
    PerRead,
}

/// What a [`PerRead`] table is built from: the ledger, `job_attempt`'s columns the table reads
/// (in (job_id, attempt_no) order), and where they stand, for builds that share a piece of
/// work between tables ([`Shared`]).
pub struct Source<'a> {
    /// The ledger (the conflicts and rejects it keeps beside the attempts).
    pub ledger: &'a Ledger,
    /// The columns.
    pub batches: &'a [RecordBatch],
    /// The ledger's write generation and the columns' cursor when they were read.
    pub version: Version,
}

/// The ledger's write generation and the attempt columns' cursor a build read.
pub type Version = (u64, Cursor);

/// Builds a table's rows from a [`Source`]: every week's, or (`Some(week)`) one ISO week's.
type BuildFn = dyn Fn(&Source<'_>, Option<&str>) -> Result<Vec<RecordBatch>> + Send + Sync;

/// A table built at each read for the read's week ([`Upkeep::PerRead`]), the last answer kept
/// while the ledger and the attempts stay as they were.
pub struct PerRead {
    name: &'static str,
    columns: &'static [usize],
    build: Box<BuildFn>,
    last: Mutex<Option<Last>>,
    /// How many times it was built: a read answered from `last` builds nothing.
    builds: AtomicU64,
}

/// The last answer and what it was built from.
struct Last {
    week: Option<String>,
    version: Version,
    rows: Vec<RecordBatch>,
}

impl PerRead {
    /// The table `name` that `build` makes from `job_attempt`'s `columns` (in (job_id,
    /// attempt_no) order): every week's rows, or (`Some(week)`) one ISO week's.
    pub fn new(
        name: &'static str,
        columns: &'static [usize],
        build: impl Fn(&Source<'_>, Option<&str>) -> Result<Vec<RecordBatch>> + Send + Sync + 'static,
    ) -> Self {
        PerRead {
            name,
            columns,
            build: Box::new(build),
            last: Mutex::new(None),
            builds: AtomicU64::new(0),
        }
    }

    /// The rows of `week` (every week when `None`) at the attempt cache's columns now. Readers
    /// at the same time wait for one build. Errors: the cache's and the build's.
    pub fn rows(&self, ledger: &Ledger, attempts: &AttemptCache, week: Option<&str>) -> Result<Vec<RecordBatch>> {
        let mut last = crate::engine::cache_lock::lock_or_reset(&self.last, || None);
        // Read before the columns: a write landing meanwhile makes the next read build again.
        let generation = ledger.generation();
        let (batches, cursor, _) = attempts.columns_since(self.columns, None)?;
        let version = (generation, cursor);
        if let Some(l) = last.as_ref()
            && l.week.as_deref() == week
            && l.version == version
        {
            return Ok(l.rows.clone());
        }
        // The answer before is let go before this one is built.
        *last = None;
        self.builds.fetch_add(1, Ordering::Relaxed);
        let source = Source {
            ledger,
            batches: &batches,
            version,
        };
        let rows = (self.build)(&source, week)?;
        *last = Some(Last {
            week: week.map(str::to_string),
            version,
            rows: rows.clone(),
        });
        Ok(rows)
    }
}

/// A piece of work that several [`PerRead`] tables build from the same [`Source`] (the audits'
/// snapshot of every attempt): built by the first table that asks, kept while the source stays
/// as it was.
pub struct Shared<T> {
    last: Mutex<Option<(Version, Arc<T>)>>,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared { last: Mutex::new(None) }
    }
}

impl<T> Shared<T> {
    /// The piece `build` makes of `source`, built again only when `source` moved on. Tables
    /// asking at the same time wait for one build.
    pub fn get(&self, source: &Source<'_>, build: impl FnOnce(&[RecordBatch]) -> Result<T>) -> Result<Arc<T>> {
        let mut last = crate::engine::cache_lock::lock_or_reset(&self.last, || None);
        if let Some((version, piece)) = last.as_ref()
            && *version == source.version
        {
            return Ok(piece.clone());
        }
        *last = None;
        let piece = Arc::new(build(source.batches)?);
        *last = Some((source.version, piece.clone()));
        Ok(piece)
    }
}

/// The tables [`PerReads::prepare`] starts first, slowest first: a `perf` timeline of the review
/// of a 10 M-attempt drill week (BENCHMARKS.md, "The week's tables built together") had the key
/// rests walk 6 s and the data quality findings 5 s, each alone on one core at the end. Only the
/// order of the builds depends on it, never an answer.
const SLOWEST_FIRST: [&str; 4] = [
    "key_rest_violation",
    "data_quality",
    "week_rollup",
    "duplicate_reconciliation",
];

/// The [`PerRead`] tables of a session, each with whether its reads name a week.
#[derive(Default)]
pub struct PerReads {
    tables: Mutex<Vec<(Arc<PerRead>, bool)>>,
}

impl PerReads {
    /// The tables, whatever a panic left them in (the list only grows while a session is made).
    fn tables(&self) -> Vec<(Arc<PerRead>, bool)> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Adds `table`: `by_week` when the review reads one week of it (the audits, `data_quality`),
    /// not when it reads every week (`week_rollup`).
    pub fn add(&self, table: Arc<PerRead>, by_week: bool) {
        self.tables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((table, by_week));
    }

    /// Builds every table for `week` ahead of the queries that read it, spread over the cores,
    /// the slowest first ([`SLOWEST_FIRST`]): the review's queries run two at a time, each
    /// waiting for its tables, so the slowest builds, started last, ran alone on one core.
    /// The builds read the columns at `floor` ([`crate::engine::read_floor`]). Errors: the first
    /// build's that failed.
    pub fn prepare(&self, ledger: &Ledger, attempts: &AttemptCache, week: &str, floor: Option<u64>) -> Result<()> {
        let mut tables = self.tables();
        tables.sort_by_key(|(t, _)| {
            SLOWEST_FIRST
                .iter()
                .position(|n| *n == t.name)
                .unwrap_or(SLOWEST_FIRST.len())
        });
        crate::engine::parallel::map(&tables, |(table, by_week)| {
            crate::engine::read_floor::with_floor(floor, || {
                table.rows(ledger, attempts, by_week.then_some(week)).map(drop)
            })
        })?;
        Ok(())
    }

    /// How many builds the tables have made in all: a read answered from a table's last answer
    /// makes none.
    pub fn builds(&self) -> u64 {
        self.tables()
            .iter()
            .map(|(t, _)| t.builds.load(Ordering::Relaxed))
            .sum()
    }
}
