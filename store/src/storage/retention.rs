//! The retention sweep (SPEC 6; seed 000 "Keep the ledger for 30 days"): plan, then one atomic
//! removal transaction.
//!
//! A sweep at `now` with `retention.days` = N has the cutoff `now − N days`. It removes whole jobs
//! whose every attempt ended before the cutoff, and never:
//! - a job with an open attempt (no `ended_at`) that started within [`ABANDON_GRACE_DAYS`] before
//!   the cutoff or later: its end may still come. An attempt still open that started earlier than
//!   that is **abandoned** (its router will never send the end); its job goes like a finished one,
//!   and the sweep's row counts it (`jobs_abandoned`), so an abandoned attempt pins nothing forever;
//! - a job with an attempt inside the reconcile window of a newer attempt of the same idem_key
//!   that stays: the newer attempt started after it, at most `reconcile.late_completion_window_s`
//!   after it ended (seed 000 rollback step 2, "Reconcile the last 900s of attempts by idem_key
//!   before deleting anything"). Keeping a job can keep older ones, so the rule is applied until
//!   nothing changes.
//!
//! [`Ledger::plan_sweep`] reads the plan from one snapshot; the caller may archive
//! [`SweepPlan::attempts`] and snapshot the weekly figures of [`SweepPlan::weeks`]; then
//! [`Ledger::commit_sweep`] re-plans inside its write transaction, refuses if the ledger changed
//! ([`Error::SweepStale`]), and removes the rows, their idem_key index entries and their chain
//! entries (leaving [`crate::storage::chain::Checkpoint`]s), stores the week snapshots and the
//! `retention_sweep` row, and chains them — all in one commit. A sweep killed before that commit
//! changed nothing; run again with the same clock it finds the same plan, and after the commit it
//! finds nothing left to remove. Gate decisions, conflicts and rejects are not swept.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::LaneConfig;
use crate::error::{Error, Result};
use crate::model::record::StoredAttempt;
use crate::progress::{Progress, RowCounter};
use crate::storage::attempt_store::{ATTEMPT_ROWS, AttemptRows, AttemptWriter, BLOCK_ROWS, Key, Piece, RunKey};
use crate::storage::chain::{CHAIN_ENTRIES, ChainWriter, CheckpointRecord, EntryKind, Hash, RecordKey, to_hex};
use crate::storage::idem_index::IdemIndex;
use crate::storage::ledger::{Ledger, decode, decode_attempt, encode};
use crate::storage::tables::{CHAIN_CHECKPOINT, COUNTER, RETENTION_SWEEP, WEEK_SNAPSHOT};

/// Microseconds in a day.
pub const DAY_MICROS: i64 = 86_400_000_000;

/// Days past the cutoff an open attempt is waited for before its job is swept as abandoned.
pub const ABANDON_GRACE_DAYS: u32 = 7;

/// What a sweep keeps: `retention.days` and `reconcile.late_completion_window_s` of lane.yaml.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRule {
    /// Days back from now within which finished jobs are kept (SPEC 6, default 30).
    pub days: u32,
    /// Seconds after an attempt ends during which a newer attempt of its idem_key keeps it (seed
    /// 000 `late_completion_window_s`, 900).
    pub reconcile_window_s: u32,
}

impl RetentionRule {
    /// lane.yaml's `retention.days` and `reconcile.late_completion_window_s`.
    pub fn from_config(config: &LaneConfig) -> Self {
        RetentionRule {
            days: config.retention.days,
            reconcile_window_s: config.reconcile.late_completion_window_s,
        }
    }

    /// The cutoff for a sweep at `now`: `now − days`, µs since the epoch, UTC.
    pub fn cutoff(&self, now: i64) -> i64 {
        now - i64::from(self.days) * DAY_MICROS
    }

    /// The abandon cutoff for a sweep at `now`: an attempt still open that started before it is
    /// abandoned (`now − days − ABANDON_GRACE_DAYS`), µs since the epoch, UTC.
    pub fn abandon_cutoff(&self, now: i64) -> i64 {
        self.cutoff(now) - i64::from(ABANDON_GRACE_DAYS) * DAY_MICROS
    }
}

/// What a sweep at `now` would remove.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPlan {
    /// The sweep's clock, µs since the epoch, UTC.
    pub now: i64,
    /// `now − days`, µs since the epoch, UTC.
    pub cutoff: i64,
    /// The rule applied.
    pub rule: RetentionRule,
    /// The jobs to remove, in job_id order.
    pub jobs: Vec<String>,
    /// Their attempts, in (job_id, attempt_no) order, as stored.
    pub attempts: Vec<StoredAttempt>,
    /// The ISO weeks (`2026-W40`) of the jobs to remove (a job's week is that of its first attempt).
    pub weeks: Vec<String>,
    /// SHA-256 over the stored bytes of the attempts to remove, in key order, each preceded by
    /// its length as 8 little-endian bytes.
    pub digest: Hash,
    /// Jobs that would go but for an open attempt (one that started after the abandon cutoff).
    pub kept_open: u64,
    /// Jobs among [`SweepPlan::jobs`] removed with an abandoned attempt: open, started before
    /// [`RetentionRule::abandon_cutoff`].
    pub abandoned: u64,
    /// Jobs that would go but for an attempt inside the reconcile window of a newer attempt.
    pub kept_reconcile: u64,
}

impl SweepPlan {
    /// True when the sweep would remove nothing.
    pub fn is_empty(&self) -> bool {
        self.attempts.is_empty()
    }

    /// The digest as 64 hex characters.
    pub fn digest_hex(&self) -> String {
        to_hex(&self.digest)
    }
}

/// One `retention_sweep` row: what a sweep removed (SPEC 6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// Sweep number from 1.
    pub sweep_no: u64,
    /// The sweep's clock, µs since the epoch, UTC.
    pub swept_at: i64,
    /// Jobs whose attempts all ended before this were candidates, µs since the epoch, UTC.
    pub cutoff: i64,
    /// `retention.days` applied.
    pub days: u32,
    /// `reconcile.late_completion_window_s` applied, seconds.
    pub reconcile_window_s: u32,
    /// Jobs removed.
    pub jobs_removed: u64,
    /// Of them, jobs removed with an abandoned attempt (open, started more than
    /// [`ABANDON_GRACE_DAYS`] before the cutoff).
    pub jobs_abandoned: u64,
    /// Attempt rows removed.
    pub rows_removed: u64,
    /// Where the removed rows were archived as Parquet, when they were.
    pub archive: Option<String>,
    /// [`SweepPlan::digest`] in hex.
    pub digest: String,
    /// Runs of chain entries removed, each left as a checkpoint.
    pub checkpoints: u64,
    /// ISO weeks whose figures this sweep snapshotted.
    pub weeks_snapshotted: Vec<String>,
}

/// A stored `retention_sweep` row. V1 rows (before abandoned jobs were swept) are read with
/// `jobs_abandoned` 0; new rows are V2.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum SweepRecordV {
    V1(SweepRecordV1),
    V2(SweepRecord),
}

/// [`SweepRecord`] as format V1 stored it: without `jobs_abandoned`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SweepRecordV1 {
    sweep_no: u64,
    swept_at: i64,
    cutoff: i64,
    days: u32,
    reconcile_window_s: u32,
    jobs_removed: u64,
    rows_removed: u64,
    archive: Option<String>,
    digest: String,
    checkpoints: u64,
    weeks_snapshotted: Vec<String>,
}

impl From<SweepRecordV1> for SweepRecord {
    fn from(r: SweepRecordV1) -> Self {
        SweepRecord {
            sweep_no: r.sweep_no,
            swept_at: r.swept_at,
            cutoff: r.cutoff,
            days: r.days,
            reconcile_window_s: r.reconcile_window_s,
            jobs_removed: r.jobs_removed,
            jobs_abandoned: 0,
            rows_removed: r.rows_removed,
            archive: r.archive,
            digest: r.digest,
            checkpoints: r.checkpoints,
            weeks_snapshotted: r.weeks_snapshotted,
        }
    }
}

/// One ISO week's `weekly_metrics` row (SPEC 4), kept by a sweep before it removed the week's
/// rows. Counts are whole numbers, tokens are tokens, a ratio without denominator is `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeekFigures {
    /// `2026-W47`.
    pub iso_week: String,
    /// Monday 00:00 UTC of the week, µs since the epoch.
    pub week_start: i64,
    /// Distinct jobs.
    pub jobs: i64,
    /// Free-lane attempts.
    pub free_attempts: i64,
    /// Paid-lane attempts.
    pub paid_attempts: i64,
    /// Σ (tokens_in + tokens_out).
    pub total_tokens: i64,
    /// Distinct idem_key with an artifact.
    pub unique_accepted_artifacts: i64,
    /// Σ over idem_key of (distinct artifacts − 1).
    pub duplicate_artifacts: i64,
    /// Jobs with a free and a paid attempt.
    pub cross_lane_jobs: i64,
    /// Σ over jobs of distinct artifacts.
    pub artifacts: i64,
    /// total tokens ÷ unique accepted artifacts.
    pub tokens_per_accepted_artifact: Option<f64>,
    /// total tokens ÷ artifacts.
    pub tokens_per_artifact: Option<f64>,
    /// 100 × duplicate artifacts ÷ jobs.
    pub duplicate_artifacts_per_100_jobs: Option<f64>,
    /// cross-lane jobs ÷ jobs.
    pub cross_lane_retries_per_job: Option<f64>,
    /// When the snapshot was taken (the sweep's clock), µs since the epoch, UTC.
    pub snapshot_at: i64,
    /// The sweep that took it.
    pub sweep_no: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum WeekFiguresV {
    V1(WeekFigures),
}

/// `2026-W47`: the ISO week of `micros` (µs since the epoch, UTC).
pub fn iso_week_of(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .map(|t| t.format("%G-W%V").to_string())
        .unwrap_or_default()
}

/// A job being considered: its attempts as stored.
struct Job {
    id: String,
    attempts: Vec<(StoredAttempt, Vec<u8>)>,
}

/// How a plan tells its progress: the stage names of its two walks of the attempt table (the
/// jobs, then the idempotency keys of the jobs due) and the attempts the table holds.
struct PlanProgress<'a> {
    progress: &'a dyn Progress,
    stages: [&'static str; 2],
    attempts: u64,
}

/// The plan over one snapshot of the attempt table.
fn plan_from<B: ReadableTable<Key, &'static [u8]>, R: ReadableTable<RunKey, &'static [u8]>>(
    rows: &AttemptRows<B, R>,
    now: i64,
    rule: RetentionRule,
    p: PlanProgress,
) -> Result<SweepPlan> {
    let cutoff = rule.cutoff(now);
    let abandon = rule.abandon_cutoff(now);
    let window = i64::from(rule.reconcile_window_s) * 1_000_000;
    let mut candidates: Vec<Job> = Vec::new();
    let mut kept_open = 0u64;
    let mut current: Option<Job> = None;
    let mut close = |job: Job, candidates: &mut Vec<Job>| {
        let ended_before = |a: &StoredAttempt| a.attempt.ended_at.is_some_and(|e| e < cutoff);
        let abandoned = |a: &StoredAttempt| a.attempt.ended_at.is_none() && a.attempt.started_at < abandon;
        if job.attempts.iter().all(|(a, _)| ended_before(a) || abandoned(a)) {
            candidates.push(job);
        } else if job
            .attempts
            .iter()
            .all(|(a, _)| ended_before(a) || (a.attempt.ended_at.is_none() && a.attempt.started_at < cutoff))
        {
            kept_open += 1;
        }
    };
    let mut scanned = RowCounter::stage(p.progress, p.stages[0], Some(p.attempts));
    rows.walk(false, |piece| -> Result<()> {
        let Piece::Row { value, .. } = piece else {
            return Ok(());
        };
        scanned.add(1);
        let a = decode_attempt(value)?;
        match current.as_mut() {
            Some(job) if job.id == a.attempt.job_id => job.attempts.push((a, value.to_vec())),
            _ => {
                if let Some(job) = current.take() {
                    close(job, &mut candidates);
                }
                current = Some(Job {
                    id: a.attempt.job_id.clone(),
                    attempts: vec![(a, value.to_vec())],
                });
            }
        }
        Ok(())
    })?;
    if let Some(job) = current.take() {
        close(job, &mut candidates);
    }
    scanned.finish();

    // Every attempt of the candidates' idem_keys: (job_id, started_at).
    let keys: HashSet<&str> = candidates
        .iter()
        .flat_map(|j| j.attempts.iter().map(|(a, _)| a.attempt.idem_key.as_str()))
        .collect();
    let mut by_key: HashMap<String, Vec<(String, i64)>> = HashMap::new();
    if !keys.is_empty() {
        let mut scanned = RowCounter::stage(p.progress, p.stages[1], Some(p.attempts));
        rows.walk(false, |piece| -> Result<()> {
            if let Piece::Row { value, .. } = piece {
                scanned.add(1);
                let a = decode_attempt(value)?.attempt;
                if keys.contains(a.idem_key.as_str()) {
                    by_key.entry(a.idem_key).or_default().push((a.job_id, a.started_at));
                }
            }
            Ok(())
        })?;
        scanned.finish();
    }
    let mut removed: HashSet<String> = candidates.iter().map(|j| j.id.clone()).collect();
    let mut kept_reconcile = 0u64;
    loop {
        let protected: Vec<String> = candidates
            .iter()
            .filter(|j| removed.contains(&j.id))
            .filter(|j| {
                j.attempts.iter().any(|(a, _)| {
                    let end = a.attempt.ended_at.unwrap_or(a.attempt.started_at);
                    by_key.get(&a.attempt.idem_key).is_some_and(|others| {
                        others.iter().any(|(job, started)| {
                            !removed.contains(job) && *started > a.attempt.started_at && *started - window <= end
                        })
                    })
                })
            })
            .map(|j| j.id.clone())
            .collect();
        if protected.is_empty() {
            break;
        }
        kept_reconcile += protected.len() as u64;
        for j in protected {
            removed.remove(&j);
        }
    }

    let mut digest = Sha256::new();
    let mut jobs = Vec::new();
    let mut attempts = Vec::new();
    let mut weeks = Vec::new();
    let mut abandoned = 0u64;
    for job in candidates.into_iter().filter(|j| removed.contains(&j.id)) {
        if job.attempts.iter().any(|(a, _)| a.attempt.ended_at.is_none()) {
            abandoned += 1;
        }
        let first = job
            .attempts
            .iter()
            .map(|(a, _)| a.attempt.started_at)
            .min()
            .unwrap_or(0);
        weeks.push(iso_week_of(first));
        for (a, bytes) in job.attempts {
            digest.update((bytes.len() as u64).to_le_bytes());
            digest.update(&bytes);
            attempts.push(a);
        }
        jobs.push(job.id);
    }
    weeks.sort();
    weeks.dedup();
    Ok(SweepPlan {
        now,
        cutoff,
        rule,
        jobs,
        attempts,
        weeks,
        digest: digest.finalize().into(),
        kept_open,
        abandoned,
        kept_reconcile,
    })
}

impl Ledger {
    /// What a sweep at `now` (µs since the epoch, UTC) under `rule` would remove, from one
    /// snapshot (SPEC 6). Writes nothing. Errors: storage errors, a record that cannot be decoded.
    pub fn plan_sweep(&self, now: i64, rule: RetentionRule) -> Result<SweepPlan> {
        self.plan_sweep_with_progress(now, rule, &crate::progress::Silent)
    }

    /// [`Ledger::plan_sweep`], telling `progress` the attempts read in two stages: `planning`
    /// (every attempt, to find the jobs due) and `idempotency keys` (every attempt again, for
    /// the keys of the jobs due; only when some are).
    pub fn plan_sweep_with_progress(
        &self,
        now: i64,
        rule: RetentionRule,
        progress: &dyn Progress,
    ) -> Result<SweepPlan> {
        let txn = self.database().begin_read()?;
        let attempts = txn.open_table(COUNTER)?.get(ATTEMPT_ROWS)?.map_or(0, |v| v.value());
        let p = PlanProgress {
            progress,
            stages: ["planning", "idempotency keys"],
            attempts,
        };
        plan_from(&crate::storage::attempt_store::read_rows(&txn)?, now, rule, p)
    }

    /// Removes what `plan` names in one write transaction and returns the `retention_sweep` row,
    /// or `None` when the plan is empty (nothing is written: a sweep that removes nothing leaves
    /// no row). `archive` is where the caller archived [`SweepPlan::attempts`]; `snapshots` are
    /// the weekly figures of [`SweepPlan::weeks`] before removal (a week already snapshotted by an
    /// earlier sweep keeps its first snapshot).
    ///
    /// Errors: [`Error::SweepStale`] when the ledger no longer gives the same plan (nothing is
    /// written), [`Error::ChainBroken`] when the chain entries to remove do not check, storage
    /// errors.
    pub fn commit_sweep(
        &self,
        plan: &SweepPlan,
        archive: Option<String>,
        snapshots: &[WeekFigures],
    ) -> Result<Option<SweepRecord>> {
        self.commit_sweep_with_progress(plan, archive, snapshots, &crate::progress::Silent)
    }

    /// [`Ledger::commit_sweep`], telling `progress` the attempts read while the plan is checked
    /// again inside the write transaction, in two stages as [`Ledger::plan_sweep_with_progress`]
    /// does (`checking the plan`, `checking idempotency keys`), then `removing`: one step, whose
    /// count (the attempts removed) comes when the transaction commits.
    pub fn commit_sweep_with_progress(
        &self,
        plan: &SweepPlan,
        archive: Option<String>,
        snapshots: &[WeekFigures],
        progress: &dyn Progress,
    ) -> Result<Option<SweepRecord>> {
        let txn = self.database().begin_write()?;
        let record;
        {
            let attempts = txn.open_table(COUNTER)?.get(ATTEMPT_ROWS)?.map_or(0, |v| v.value());
            let p = PlanProgress {
                progress,
                stages: ["checking the plan", "checking idempotency keys"],
                attempts,
            };
            let fresh = plan_from(
                &crate::storage::attempt_store::write_rows(&txn)?,
                plan.now,
                plan.rule,
                p,
            )?;
            if fresh.digest != plan.digest {
                return Err(Error::SweepStale {
                    planned: plan.digest_hex(),
                    found: fresh.digest_hex(),
                });
            }
            if fresh.is_empty() {
                return Ok(None);
            }
            // The removal below is one step: its count comes when the transaction commits.
            progress.stage("removing", Some(fresh.attempts.len() as u64));
            let mut gone: HashSet<RecordKey> = HashSet::with_capacity(fresh.attempts.len());
            let mut keys = std::collections::BTreeSet::new();
            for s in &fresh.attempts {
                let a = &s.attempt;
                keys.insert((a.job_id.clone(), a.attempt_no));
                gone.insert(RecordKey::Attempt {
                    job_id: a.job_id.clone(),
                    attempt_no: a.attempt_no,
                });
            }
            let mut counter = txn.open_table(COUNTER)?;
            let count = |name: &str| -> Result<u64> { Ok(counter.get(name)?.map_or(0, |v| v.value())) };
            let (block_rows, attempt_rows) = (count(BLOCK_ROWS)?, count(ATTEMPT_ROWS)?);
            let mut attempts = AttemptWriter::open(&txn, block_rows)?;
            attempts.remove(&keys)?;
            counter.insert(BLOCK_ROWS, attempts.finish()?)?;
            counter.insert(ATTEMPT_ROWS, attempt_rows.saturating_sub(keys.len() as u64))?;
            let rows: HashSet<(&str, u32)> = fresh
                .attempts
                .iter()
                .map(|s| (s.attempt.job_id.as_str(), s.attempt.attempt_no))
                .collect();
            IdemIndex::open(&txn)?.remove(|job_id, attempt_no| rows.contains(&(job_id, attempt_no)))?;
            let counted = counter.get(CHAIN_ENTRIES)?.map_or(0, |v| v.value());
            let mut chain = ChainWriter::open(&txn, counted)?;
            let mut sweeps = txn.open_table(RETENTION_SWEEP)?;
            let sweep_no = sweeps.last()?.map_or(0, |(k, _)| k.value()) + 1;
            let checkpoints = chain.remove_records(|k| gone.contains(k), sweep_no)?;
            let mut cp_table = txn.open_table(CHAIN_CHECKPOINT)?;
            for cp in &checkpoints {
                let value = encode(&CheckpointRecord::V1(cp.clone()));
                cp_table.insert(cp.first, value.as_slice())?;
                chain.append(EntryKind::Insert, RecordKey::Checkpoint(cp.first), &value)?;
            }
            let mut weeks = txn.open_table(WEEK_SNAPSHOT)?;
            let mut snapshotted = Vec::new();
            for w in snapshots.iter().filter(|w| fresh.weeks.contains(&w.iso_week)) {
                if weeks.get(w.iso_week.as_str())?.is_some() {
                    continue;
                }
                let value = encode(&WeekFiguresV::V1(WeekFigures {
                    snapshot_at: plan.now,
                    sweep_no,
                    ..w.clone()
                }));
                weeks.insert(w.iso_week.as_str(), value.as_slice())?;
                chain.append(EntryKind::Insert, RecordKey::WeekSnapshot(w.iso_week.clone()), &value)?;
                snapshotted.push(w.iso_week.clone());
            }
            record = SweepRecord {
                sweep_no,
                swept_at: plan.now,
                cutoff: plan.cutoff,
                days: plan.rule.days,
                reconcile_window_s: plan.rule.reconcile_window_s,
                jobs_removed: fresh.jobs.len() as u64,
                jobs_abandoned: fresh.abandoned,
                rows_removed: fresh.attempts.len() as u64,
                archive,
                digest: fresh.digest_hex(),
                checkpoints: checkpoints.len() as u64,
                weeks_snapshotted: snapshotted,
            };
            let value = encode(&SweepRecordV::V2(record.clone()));
            sweeps.insert(sweep_no, value.as_slice())?;
            chain.append(EntryKind::Insert, RecordKey::RetentionSweep(sweep_no), &value)?;
            counter.insert(CHAIN_ENTRIES, chain.finish()?)?;
        }
        txn.commit()?;
        progress.done(record.rows_removed);
        self.bump_generation();
        Ok(Some(record))
    }

    /// Every `retention_sweep` row, oldest first.
    pub fn sweeps(&self) -> Result<Vec<SweepRecord>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(RETENTION_SWEEP)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<SweepRecordV>("retention_sweep", k.value(), v.value())? {
                SweepRecordV::V1(r) => out.push(r.into()),
                SweepRecordV::V2(r) => out.push(r),
            }
        }
        Ok(out)
    }

    /// Every week snapshot, in ISO week order.
    pub fn week_snapshots(&self) -> Result<Vec<WeekFigures>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(WEEK_SNAPSHOT)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<WeekFiguresV>("week_snapshot", k.value(), v.value())? {
                WeekFiguresV::V1(w) => out.push(w),
            }
        }
        Ok(out)
    }
}
