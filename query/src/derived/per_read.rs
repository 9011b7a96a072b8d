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

use std::sync::Mutex;

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

/// Builds a table's rows from `job_attempt`'s columns: every week's, or (`Some(week)`) one ISO
/// week's.
type BuildFn = dyn Fn(&Ledger, &[RecordBatch], Option<&str>) -> Result<Vec<RecordBatch>> + Send + Sync;

/// A table built at each read for the read's week ([`Upkeep::PerRead`]), the last answer kept
/// while the ledger and the attempts stay as they were.
pub struct PerRead {
    columns: &'static [usize],
    build: Box<BuildFn>,
    last: Mutex<Option<Last>>,
}

/// The last answer and what it was built from.
struct Last {
    week: Option<String>,
    generation: u64,
    cursor: Cursor,
    rows: Vec<RecordBatch>,
}

impl PerRead {
    /// The table `build` makes from `job_attempt`'s `columns` (in (job_id, attempt_no) order):
    /// every week's rows, or (`Some(week)`) one ISO week's.
    pub fn new(
        columns: &'static [usize],
        build: impl Fn(&Ledger, &[RecordBatch], Option<&str>) -> Result<Vec<RecordBatch>> + Send + Sync + 'static,
    ) -> Self {
        PerRead {
            columns,
            build: Box::new(build),
            last: Mutex::new(None),
        }
    }

    /// The rows of `week` (every week when `None`) at the attempt cache's columns now. Readers
    /// at the same time wait for one build. Errors: the cache's and the build's.
    pub fn rows(&self, ledger: &Ledger, attempts: &AttemptCache, week: Option<&str>) -> Result<Vec<RecordBatch>> {
        let mut last = crate::engine::cache_lock::lock_or_reset(&self.last, || None);
        // Read before the columns: a write landing meanwhile makes the next read build again.
        let generation = ledger.generation();
        let (batches, cursor, _) = attempts.columns_since(self.columns, None)?;
        if let Some(l) = last.as_ref()
            && l.week.as_deref() == week
            && l.generation == generation
            && l.cursor == cursor
        {
            return Ok(l.rows.clone());
        }
        // The answer before is let go before this one is built.
        *last = None;
        let rows = (self.build)(ledger, &batches, week)?;
        *last = Some(Last {
            week: week.map(str::to_string),
            generation,
            cursor,
            rows: rows.clone(),
        });
        Ok(rows)
    }
}
