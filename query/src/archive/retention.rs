//! The retention sweep (SPEC 6) end to end; its SQL tables are re-exported here.
//!
//! [`sweep`] plans a sweep at an injected clock (`now`, µs since the epoch, UTC), snapshots the
//! `weekly_metrics` rows of the ISO weeks it touches, archives the attempts it will remove as
//! Parquet partitioned by day (`DIR/sweep-000001/day=2026-09-14/…`, written by
//! [`crate::archive::export::write_attempts`]), then removes them in one redb transaction
//! ([`laneledger_store::Ledger::commit_sweep`]). Killed at any point, it converges when run again:
//! before the removal commits nothing in the ledger changed, the archive folder is written under a
//! `.partial` name and replaced whole, and the rerun finds the same plan; after it commits, the
//! rerun finds nothing left to remove and writes nothing.
//!
//! Tables: `retention_sweep` (one row per sweep), `week_snapshot` (the weekly figures kept for
//! weeks whose rows were swept; `weekly_metrics` shows them for those weeks) and `verify_run`
//! (each `laneledger verify`), read by [`crate::tables::retention_tables`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use laneledger_store::format_timestamp;
use laneledger_store::progress::{Progress, Silent};
use laneledger_store::storage::chain::VerifyRun;
use laneledger_store::storage::retention::{RetentionRule, SweepPlan, SweepRecord, WeekFigures};

pub use crate::error::SweepStep;
use crate::error::{Error, Result};
use crate::review::metrics::WeekMetrics;
use crate::session::Session;

/// How to run [`sweep`].
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Days kept and the reconcile window (lane.yaml `retention.days`,
    /// `reconcile.late_completion_window_s`).
    pub rule: RetentionRule,
    /// Plan only: write nothing, archive nothing.
    pub dry_run: bool,
    /// Archive what is removed under this folder first, as Parquet partitioned by day.
    pub archive: Option<PathBuf>,
    /// Stop with [`Error::Aborted`] after this step (fault injection for tests).
    pub abort_after: Option<SweepStep>,
}

impl SweepOptions {
    /// A real sweep under `rule`, without archive.
    pub fn new(rule: RetentionRule) -> Self {
        SweepOptions {
            rule,
            dry_run: false,
            archive: None,
            abort_after: None,
        }
    }
}

/// What [`sweep`] did.
#[derive(Debug, Clone)]
pub enum SweepOutcome {
    /// `--dry-run`: what a sweep would remove; nothing written.
    DryRun(SweepPlan),
    /// Nothing is older than the cutoff (or it was already swept): nothing written.
    NothingToRemove(SweepPlan),
    /// The sweep committed; its `retention_sweep` row.
    Swept {
        /// The plan it carried out.
        plan: SweepPlan,
        /// The row it left.
        record: SweepRecord,
    },
}

/// Runs a blocking ledger call off the async executor.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Execution(datafusion::error::DataFusionError::External(Box::new(e))))?
}

/// The folder a sweep's archive goes to: `DIR/sweep-000042`.
pub fn archive_dir(root: &Path, sweep_no: u64) -> PathBuf {
    root.join(format!("sweep-{sweep_no:06}"))
}

fn figures(m: &WeekMetrics) -> Result<WeekFigures> {
    Ok(WeekFigures {
        iso_week: m.iso_week.clone(),
        week_start: laneledger_store::parse_timestamp(&m.week_start).map_err(Error::Plan)?,
        jobs: m.jobs,
        free_attempts: m.free_attempts,
        paid_attempts: m.paid_attempts,
        total_tokens: m.total_tokens,
        unique_accepted_artifacts: m.unique_accepted_artifacts,
        duplicate_artifacts: m.duplicate_artifacts,
        cross_lane_jobs: m.cross_lane_jobs,
        artifacts: m.artifacts,
        tokens_per_accepted_artifact: m.tokens_per_accepted_artifact,
        tokens_per_artifact: m.tokens_per_artifact,
        duplicate_artifacts_per_100_jobs: m.duplicate_artifacts_per_100_jobs,
        cross_lane_retries_per_job: m.cross_lane_retries_per_job,
        snapshot_at: 0,
        sweep_no: 0,
    })
}

/// Writes `attempts` under `dir` as Parquet, one `day=YYYY-MM-DD/` folder a UTC day of
/// `started_at` ([`crate::archive::export::write_attempts`]).
fn write_archive(attempts: Vec<laneledger_store::StoredAttempt>, dir: &Path, progress: &dyn Progress) -> Result<()> {
    use crate::archive::export::{DEFAULT_FILE_STEM, ExportFormat, write_attempts_with_progress};
    write_attempts_with_progress(attempts, ExportFormat::Parquet, dir, DEFAULT_FILE_STEM, progress)
        .map(|_| ())
        .map_err(|e| Error::Archive(e.to_string()))
}

/// Runs one retention sweep at `now` (µs since the epoch, UTC) over `session`'s ledger (SPEC 6):
/// plan → snapshot the touched weeks' `weekly_metrics` rows → archive (when asked) → one atomic
/// removal transaction. Blocking ledger calls run on tokio's blocking pool.
///
/// Errors: [`Error::Aborted`] at `abort_after`; an archive write failure ([`Error::Archive`],
/// nothing removed); `laneledger_store::Error::SweepStale` when the ledger changed meanwhile
/// (nothing removed; run again); storage errors.
pub async fn sweep(session: &Session, now: i64, opts: &SweepOptions) -> Result<SweepOutcome> {
    sweep_with_progress(session, now, opts, Arc::new(Silent)).await
}

/// [`sweep`], telling `progress` how far it has come, stage by stage: the plan's walks of the
/// attempts ([`laneledger_store::Ledger::plan_sweep_with_progress`]), `writing` the archive, and
/// the plan checked again before the removal
/// ([`laneledger_store::Ledger::commit_sweep_with_progress`]).
///
/// Errors: as [`sweep`].
pub async fn sweep_with_progress(
    session: &Session,
    now: i64,
    opts: &SweepOptions,
    progress: Arc<dyn Progress>,
) -> Result<SweepOutcome> {
    let ledger = session.ledger().clone();
    let rule = opts.rule;
    let plan = {
        let ledger = ledger.clone();
        let progress = progress.clone();
        blocking(move || Ok(ledger.plan_sweep_with_progress(now, rule, progress.as_ref())?)).await?
    };
    if opts.dry_run {
        return Ok(SweepOutcome::DryRun(plan));
    }
    // Before the archive is written: a sweep of a file that cannot be written would leave an
    // archive of attempts it could not remove.
    if ledger.is_read_only() {
        return Err(laneledger_store::Error::ReadOnly(ledger.path().to_path_buf()).into());
    }
    if plan.is_empty() {
        return Ok(SweepOutcome::NothingToRemove(plan));
    }
    let snapshots: Vec<WeekFigures> = session
        .weeks()
        .await?
        .iter()
        .filter(|w| plan.weeks.contains(&w.iso_week))
        .map(figures)
        .collect::<Result<_>>()?;
    if opts.abort_after == Some(SweepStep::Planned) {
        return Err(Error::Aborted(SweepStep::Planned));
    }
    let archive = match &opts.archive {
        None => None,
        Some(root) => {
            let sweep_no = {
                let ledger = ledger.clone();
                blocking(move || Ok(ledger.sweeps()?.last().map_or(0, |s| s.sweep_no) + 1)).await?
            };
            let dir = archive_dir(root, sweep_no);
            let partial = dir.with_extension("partial");
            let attempts = plan.attempts.clone();
            let abort = opts.abort_after;
            let (d, p) = (dir.clone(), partial.clone());
            let progress = progress.clone();
            blocking(move || {
                let io = |e: std::io::Error| Error::Archive(format!("{}: {e}", p.display()));
                if p.exists() {
                    std::fs::remove_dir_all(&p).map_err(io)?;
                }
                std::fs::create_dir_all(&p).map_err(io)?;
                write_archive(attempts, &p, progress.as_ref())?;
                if abort == Some(SweepStep::ArchiveWritten) {
                    return Err(Error::Aborted(SweepStep::ArchiveWritten));
                }
                if d.exists() {
                    std::fs::remove_dir_all(&d).map_err(io)?;
                }
                std::fs::rename(&p, &d).map_err(io)?;
                Ok(())
            })
            .await?;
            Some(dir.display().to_string())
        }
    };
    if opts.abort_after == Some(SweepStep::Archived) {
        return Err(Error::Aborted(SweepStep::Archived));
    }
    let committed = {
        let plan = plan.clone();
        blocking(move || Ok(ledger.commit_sweep_with_progress(&plan, archive, &snapshots, progress.as_ref())?)).await?
    };
    Ok(match committed {
        Some(record) => SweepOutcome::Swept { plan, record },
        None => SweepOutcome::NothingToRemove(plan),
    })
}

/// The SQL behind the `/retention` page's oldest record: the earliest attempt start and the
/// attempts held.
pub const OLDEST_SQL: &str = "SELECT MIN(started_at) AS oldest_started_at, COUNT(*) AS attempts FROM job_attempt";
/// The SQL behind the rows per day (attempts by the UTC day they started).
pub const ROWS_PER_DAY_SQL: &str = "SELECT to_char(started_at, '%Y-%m-%d') AS day, COUNT(*) AS attempts
FROM job_attempt GROUP BY 1 ORDER BY 1";
/// The SQL behind the past sweeps.
pub const SWEEPS_SQL: &str = "SELECT * FROM retention_sweep ORDER BY sweep_no DESC";
/// The SQL behind the last verify result.
pub const LAST_VERIFY_SQL: &str = "SELECT * FROM verify_run ORDER BY run_no DESC LIMIT 1";

/// Attempts that started on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayRows {
    /// `2026-09-14`.
    pub day: String,
    /// Attempts that started that day.
    pub attempts: i64,
    /// Whether the whole day is before the cutoff (its finished jobs are due for the sweep).
    pub before_cutoff: bool,
}

/// What the `/retention` page shows, read at `now` (µs since the epoch, UTC).
#[derive(Debug, Clone)]
pub struct RetentionOverview {
    /// The clock the figures were read at.
    pub now: i64,
    /// `retention.days`.
    pub days: u32,
    /// `now − days`, µs.
    pub cutoff: i64,
    /// The earliest `started_at` held, µs; `None` when the ledger holds no attempt.
    pub oldest_started_at: Option<i64>,
    /// Attempts held.
    pub attempts: i64,
    /// Attempts per UTC day of `started_at`, oldest first.
    pub rows_per_day: Vec<DayRows>,
    /// What a sweep now would remove.
    pub due: SweepPlan,
    /// Every sweep, newest first.
    pub sweeps: Vec<SweepRecord>,
    /// The last `verify` run, when there was one.
    pub last_verify: Option<VerifyRun>,
}

/// The figures of the `/retention` page at `now` (µs since the epoch, UTC) under `rule`.
pub async fn overview(session: &Session, now: i64, rule: RetentionRule) -> Result<RetentionOverview> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Int64Type, TimestampMicrosecondType};
    let cutoff = rule.cutoff(now);
    let oldest = session.query(OLDEST_SQL).await?;
    let (mut oldest_started_at, mut attempts) = (None, 0);
    if let Some(b) = oldest.batches.iter().find(|b| b.num_rows() > 0) {
        let t = b.column(0).as_primitive::<TimestampMicrosecondType>();
        oldest_started_at = t.is_valid(0).then(|| t.value(0));
        attempts = b.column(1).as_primitive::<Int64Type>().value(0);
    }
    let mut rows_per_day = Vec::new();
    for b in &session.query(ROWS_PER_DAY_SQL).await?.batches {
        let day = b.column(0).as_string::<i32>();
        let n = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let d = day.value(i).to_string();
            let next_midnight = laneledger_store::parse_timestamp(&format!("{d}T00:00:00Z"))
                .map_or(i64::MAX, |t| t + laneledger_store::storage::retention::DAY_MICROS);
            rows_per_day.push(DayRows {
                before_cutoff: next_midnight <= cutoff,
                day: d,
                attempts: n.value(i),
            });
        }
    }
    let ledger = session.ledger().clone();
    let (due, mut sweeps, last_verify) = blocking(move || {
        Ok((
            ledger.plan_sweep(now, rule)?,
            ledger.sweeps()?,
            ledger.verify_runs()?.pop(),
        ))
    })
    .await?;
    sweeps.reverse();
    Ok(RetentionOverview {
        now,
        days: rule.days,
        cutoff,
        oldest_started_at,
        attempts,
        rows_per_day,
        due,
        sweeps,
        last_verify,
    })
}

/// `2026-09-14T00:00:00Z`, or `—` for none.
pub fn format_optional_timestamp(t: Option<i64>) -> String {
    t.map_or_else(|| "—".to_string(), format_timestamp)
}
