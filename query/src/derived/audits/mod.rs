//! Policy audits (SPEC 5.1, 5.2): what a review meeting asks of the routers. Each audit is a
//! table computed from a fresh ledger snapshot at every query, so reviewers can slice it in SQL;
//! every row carries the `iso_week` of its job (the week of the job's first attempt, SPEC 4).
//!
//! | table | rule |
//! |---|---|
//! | `lane_policy_violation` | seed 000 `next_lane`, replayed over each job's attempts |
//! | `duplicate_reconciliation` | seed 000 `late_completion_window_s`: a later artifact's gap |
//! | `same_key_retry` | seed 002 `next_free`: the next attempt never goes to the key that just failed |
//! | `key_rest_violation` | seed 002 `cooldown_seconds`, `key_closes`: a key used inside its rest or break |
//! | `pool_overload_episode` | seed 002 `pool_overloaded`: ≥ N distinct keys of a pool answered 1305 in a window |
//! | `attempt_bound_exceeded` | seed 002 `MAX_ATTEMPTS_PER_TURN` |
//! | `outcome_mismatch` | the router's outcome against seed 002 `error_kind` |
//! | `refusal_by_kind`, `refusal_by_code`, `free_lane_bet` | SQL views, see [`views`] |
//! | `data_quality` | odd records: attempt number gaps, artifacts reported twice, cut streams, impossible times, conflicts, rejects, fallback keys ([`data_quality`]) |

pub mod by_group;
pub mod data_quality;
pub mod lane_policy;
pub mod reconcile;
pub mod refusals;
mod rows;
pub mod views;

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{Int64Type, SchemaRef, TimestampMicrosecondType};
use datafusion::execution::context::SessionContext;
use laneledger_store::{Lane, Ledger, Outcome};

pub use crate::derived::job_week::iso_week_of;
use crate::derived::per_read::{PerRead, PerReads, Shared, Upkeep};
use crate::error::Result;
use crate::tables::job_attempt::{self, AttemptCache};
use crate::tables::labels::Text;
use crate::tables::ledger_table::{LedgerTable, ReadFn, WeekReadFn};

/// The lane.yaml settings the audits use, with the seeds' values as defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditSettings {
    /// `lanes.free.max_attempts`: free attempts before a job is pinned (seed 000: 2).
    pub max_free_attempts: u32,
    /// `lanes.free.pin_on`: outcomes that pin a job to paid (seed 000: ambiguous, permanent).
    pub pin_on: Vec<String>,
    /// `reconcile.late_completion_window_s`: seconds (seed 000: 900).
    pub late_completion_window_s: f64,
    /// `keys.cooldown_base_s`: seconds (seed 002: 15).
    pub cooldown_base_s: u32,
    /// `keys.cooldown_cap_s`: seconds (seed 002: 240).
    pub cooldown_cap_s: u32,
    /// `keys.key_break_s`: seconds (seed 002: 1800).
    pub key_break_s: u32,
    /// `keys.pool_overload_keys`: distinct keys (seed 002: 3).
    pub pool_overload_keys: u32,
    /// `keys.overload_window_s`: seconds (seed 002: 60).
    pub overload_window_s: u32,
    /// `keys.max_attempts_per_turn`: attempts (seed 002: 8).
    pub max_attempts_per_turn: u32,
    /// `lanes.tiers`, when lane.yaml names its own tiers: the replay walks them in order instead
    /// of free (`max_free_attempts`, `pin_on`) then paid.
    pub tiers: Option<Vec<lane_policy::Tier>>,
    /// `lanes.audit`: false turns the lane policy replay off (no rows, no alert).
    pub lane_audit: bool,
}

impl Default for AuditSettings {
    fn default() -> Self {
        use laneledger_store::policy::{lane, refusal};
        AuditSettings {
            max_free_attempts: lane::MAX_FREE_ATTEMPTS,
            pin_on: lane::PIN_ON.iter().map(|s| s.to_string()).collect(),
            late_completion_window_s: 900.0,
            cooldown_base_s: refusal::COOL_BASE_SECONDS,
            cooldown_cap_s: refusal::COOL_CAP_SECONDS,
            key_break_s: refusal::KEY_BREAK_SECONDS,
            pool_overload_keys: refusal::POOL_OVERLOAD_KEYS,
            overload_window_s: refusal::OVERLOAD_WINDOW_SECONDS,
            max_attempts_per_turn: refusal::MAX_ATTEMPTS_PER_TURN,
            tiers: None,
            lane_audit: true,
        }
    }
}

impl From<&laneledger_store::LaneConfig> for AuditSettings {
    /// The audit settings of a lane.yaml.
    fn from(c: &laneledger_store::LaneConfig) -> Self {
        AuditSettings {
            max_free_attempts: c.lanes.free.max_attempts,
            pin_on: c.lanes.free.pin_on.iter().map(|o| o.as_str().to_string()).collect(),
            late_completion_window_s: f64::from(c.reconcile.late_completion_window_s),
            cooldown_base_s: c.keys.cooldown_base_s,
            cooldown_cap_s: c.keys.cooldown_cap_s,
            key_break_s: c.keys.key_break_s,
            pool_overload_keys: c.keys.pool_overload_keys,
            overload_window_s: c.keys.overload_window_s,
            max_attempts_per_turn: c.keys.max_attempts_per_turn,
            tiers: c.lanes.tiers.as_ref().map(|tiers| {
                tiers
                    .iter()
                    .map(|t| lane_policy::Tier {
                        name: t.name.clone(),
                        max_attempts: t.max_attempts,
                        pin_on: t.pin_on.iter().map(|o| o.as_str().to_string()).collect(),
                    })
                    .collect()
            }),
            lane_audit: c.lanes.audit,
        }
    }
}

/// The `job_attempt` columns the audits read: job_id, idem_key, attempt_no, lane, started_at,
/// ended_at, outcome, artifact_id, http_status, provider_code, key_id, pool_id, model.
pub const COLUMNS: [usize; 13] = [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14];

/// One attempt as the audits read it, borrowed from a [`Snapshot`]'s Arrow columns. Times are µs
/// since the epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditAttempt<'a> {
    /// Its row in the snapshot, (job_id, attempt_no) order: its identity.
    pub row: usize,
    /// `job_id`.
    pub job_id: &'a str,
    /// `idem_key`.
    pub idem_key: &'a str,
    /// `attempt_no` (from 1).
    pub attempt_no: u32,
    /// `lane`.
    pub lane: Lane,
    /// `started_at`, µs.
    pub started_at: i64,
    /// `ended_at`, µs.
    pub ended_at: Option<i64>,
    /// `outcome`.
    pub outcome: Option<Outcome>,
    /// `artifact_id`.
    pub artifact_id: Option<&'a str>,
    /// `http_status`.
    pub http_status: Option<u16>,
    /// `provider_code`.
    pub provider_code: Option<u32>,
    /// `key_id`.
    pub key_id: Option<&'a str>,
    /// `pool_id`.
    pub pool_id: Option<&'a str>,
    /// `model`.
    pub model: Option<&'a str>,
}

/// The text at `i`, or `None` where it is null.
fn text(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// One batch's audit columns, downcast once.
struct Columns {
    job_id: StringArray,
    idem_key: StringArray,
    attempt_no: Int64Array,
    lane: Text,
    started_at: TimestampMicrosecondArray,
    ended_at: TimestampMicrosecondArray,
    outcome: Text,
    artifact_id: StringArray,
    http_status: Int64Array,
    provider_code: Int64Array,
    key_id: Text,
    pool_id: Text,
    model: Text,
}

impl Columns {
    fn of(batch: &RecordBatch) -> Result<Self> {
        let c = |name: &str| job_attempt::column(batch, name);
        Ok(Columns {
            job_id: c("job_id")?.as_string::<i32>().clone(),
            idem_key: c("idem_key")?.as_string::<i32>().clone(),
            attempt_no: c("attempt_no")?.as_primitive::<Int64Type>().clone(),
            lane: Text::of(c("lane")?)?,
            started_at: c("started_at")?.as_primitive::<TimestampMicrosecondType>().clone(),
            ended_at: c("ended_at")?.as_primitive::<TimestampMicrosecondType>().clone(),
            outcome: Text::of(c("outcome")?)?,
            artifact_id: c("artifact_id")?.as_string::<i32>().clone(),
            http_status: c("http_status")?.as_primitive::<Int64Type>().clone(),
            provider_code: c("provider_code")?.as_primitive::<Int64Type>().clone(),
            key_id: Text::of(c("key_id")?)?,
            pool_id: Text::of(c("pool_id")?)?,
            model: Text::of(c("model")?)?,
        })
    }

    /// Rows in this batch.
    fn len(&self) -> usize {
        self.job_id.len()
    }

    /// When the answer of the attempt at `i` arrived: `ended_at`, else `started_at` (µs).
    fn end(&self, i: usize) -> i64 {
        if self.ended_at.is_valid(i) {
            self.ended_at.value(i)
        } else {
            self.started_at.value(i)
        }
    }

    /// `http_status` of the attempt at `i`.
    fn http_status(&self, i: usize) -> Option<u16> {
        self.http_status.is_valid(i).then(|| self.http_status.value(i) as u16)
    }

    /// `provider_code` of the attempt at `i`.
    fn provider_code(&self, i: usize) -> Option<u32> {
        self.provider_code
            .is_valid(i)
            .then(|| self.provider_code.value(i) as u32)
    }

    /// seed 002 `error_kind` of the attempt at `i` ([`job_attempt::error_kind_of`]).
    fn kind(&self, i: usize) -> Option<laneledger_store::policy::refusal::ErrorKind> {
        job_attempt::error_kind_of(self.http_status(i), self.provider_code(i))
    }

    fn get(&self, i: usize, row: usize) -> AuditAttempt<'_> {
        AuditAttempt {
            row,
            job_id: self.job_id.value(i),
            idem_key: self.idem_key.value(i),
            attempt_no: self.attempt_no.value(i) as u32,
            lane: laneledger_store::model::lanes::intern(self.lane.value(i)),
            started_at: self.started_at.value(i),
            ended_at: self.ended_at.is_valid(i).then(|| self.ended_at.value(i)),
            outcome: self.outcome.get(i).and_then(Outcome::parse),
            artifact_id: text(&self.artifact_id, i),
            http_status: self.http_status(i),
            provider_code: self.provider_code(i),
            key_id: self.key_id.get(i),
            pool_id: self.pool_id.get(i),
            model: self.model.get(i),
        }
    }
}

/// Every attempt of the ledger in (job_id, attempt_no) order, with each job's ISO week: the
/// [`COLUMNS`] of `job_attempt`'s cached Arrow batches (shared with the SQL tables, not copied),
/// read row by row as [`AuditAttempt`]s.
pub struct Snapshot {
    batches: Vec<Columns>,
    /// The first row of each batch, then the row count.
    starts: Vec<usize>,
    /// The first row of each job, then the row count.
    job_starts: Vec<usize>,
    /// Each row's job's week, an index into `weeks`.
    row_week: Vec<u32>,
    /// ISO week labels (`2026-W47`).
    weeks: Vec<String>,
}

impl Snapshot {
    /// The snapshot of `attempts`: `job_attempt` batches in (job_id, attempt_no) order with at
    /// least [`COLUMNS`]. Errors: a batch without them ([`crate::Error::Internal`]).
    pub fn new(attempts: &[RecordBatch]) -> Result<Self> {
        let batches = attempts.iter().map(Columns::of).collect::<Result<Vec<_>>>()?;
        let mut starts = Vec::with_capacity(batches.len() + 1);
        let mut rows = 0;
        for b in &batches {
            starts.push(rows);
            rows += b.job_id.len();
        }
        starts.push(rows);
        let jobs = crate::derived::job_week::first_starts(attempts)?;
        let mut job_starts = Vec::with_capacity(jobs.len() + 1);
        let mut row_week = Vec::with_capacity(rows);
        let (mut weeks, mut cache) = (Vec::<String>::new(), crate::derived::job_week::WeekCache::default());
        let mut row = 0;
        for job in &jobs {
            let label = &cache.week(job.first_start).label;
            let w = match weeks.iter().rposition(|l| l == label) {
                Some(w) => w,
                None => {
                    weeks.push(label.clone());
                    weeks.len() - 1
                }
            };
            job_starts.push(row);
            row_week.extend(std::iter::repeat_n(w as u32, job.attempts));
            row += job.attempts;
        }
        job_starts.push(row);
        Ok(Snapshot {
            batches,
            starts,
            job_starts,
            row_week,
            weeks,
        })
    }

    /// How many attempts the snapshot holds.
    pub fn rows(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    /// The attempt at `row` (a row of this snapshot).
    pub fn get(&self, row: usize) -> AuditAttempt<'_> {
        let (c, i) = self.at(row);
        c.get(i, row)
    }

    /// The columns of the batch holding `row`, and its index there: for reading a few fields
    /// without building a whole [`AuditAttempt`].
    fn at(&self, row: usize) -> (&Columns, usize) {
        let b = self.starts.partition_point(|&s| s <= row) - 1;
        (&self.batches[b], row - self.starts[b])
    }

    /// Each batch's columns with the snapshot row of its first attempt, in order: for the audits
    /// that read a few columns of every attempt, without building a whole [`AuditAttempt`] each.
    fn chunks(&self) -> impl Iterator<Item = (usize, &Columns)> {
        self.starts.iter().copied().zip(&self.batches)
    }

    /// Every attempt, in (job_id, attempt_no) order.
    pub fn iter(&self) -> impl Iterator<Item = AuditAttempt<'_>> {
        self.batches
            .iter()
            .zip(&self.starts)
            .flat_map(|(b, &start)| (0..b.job_id.len()).map(move |i| b.get(i, start + i)))
    }

    /// The ISO week (`2026-W47`) of the job of the attempt at `row`.
    pub fn week(&self, row: usize) -> &str {
        &self.weeks[self.row_week[row] as usize]
    }

    /// The rows an audit reports: every row when `week` is `None`, else the rows of the jobs
    /// whose ISO week (`2026-W47`, the week of the job's first attempt) is `week`.
    pub fn rows_in(&self, week: Option<&str>) -> WeekRows<'_> {
        WeekRows {
            row_week: &self.row_week,
            week: week.map(|w| self.weeks.iter().position(|l| l == w).map(|i| i as u32)),
        }
    }

    /// Calls `f` with each job's attempts, in attempt_no order (jobs in job_id order): every
    /// job when `week` is `None`, else only the jobs of that ISO week.
    pub fn for_each_job<'s>(&'s self, week: Option<&str>, mut f: impl FnMut(&[AuditAttempt<'s>])) {
        let mut job: Vec<AuditAttempt<'s>> = Vec::new();
        if week.is_some() {
            let rows = self.rows_in(week);
            for j in self.job_starts.windows(2) {
                if rows.keeps(j[0]) {
                    job.clear();
                    job.extend((j[0]..j[1]).map(|row| self.get(row)));
                    f(&job);
                }
            }
            return;
        }
        let mut ends = self.job_starts.iter().skip(1);
        let mut end = ends.next().copied().unwrap_or(0);
        for a in self.iter() {
            if a.row == end {
                f(&job);
                job.clear();
                end = ends.next().copied().unwrap_or(0);
            }
            job.push(a);
        }
        if !job.is_empty() {
            f(&job);
        }
    }
}

/// Which rows of a [`Snapshot`] an audit reports ([`Snapshot::rows_in`]).
#[derive(Debug, Clone, Copy)]
pub struct WeekRows<'s> {
    row_week: &'s [u32],
    /// `None`: every row; `Some(None)`: none (no job in the week); `Some(Some(w))`: week `w`'s.
    week: Option<Option<u32>>,
}

impl WeekRows<'_> {
    /// Whether the attempt at `row` is reported.
    pub fn keeps(&self, row: usize) -> bool {
        match self.week {
            None => true,
            Some(w) => w == Some(self.row_week[row]),
        }
    }
}

/// Builds one audit table from a snapshot: every week's rows, or (`Some(week)`) one ISO week's.
type AuditFn = fn(&Snapshot, &AuditSettings, Option<&str>) -> Result<RecordBatch>;

/// How an audit table is brought up to date after a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Each row comes from the attempts of one job alone: kept by job
    /// ([`crate::derived::kept`]), only the jobs near the written attempts are replayed again.
    ByJob,
    /// Its rule reaches across jobs but not across keys (a key's rests): kept key by key, only
    /// the keys a write touched are built again ([`by_group::ByGroup::key_rests`]).
    ByKey,
    /// Its rule reaches across jobs but not across pools (a pool's overload windows): kept pool
    /// by pool, only the pools a write touched are built again ([`by_group::ByGroup::pool_episodes`]).
    ByPool,
    /// Its rule reaches across jobs but its rows come only from the idem_keys with two
    /// artifacts or more: built again only after a write that gives a key a second artifact or
    /// touches one of its rows ([`reconcile::Kept`]).
    ByIdemKey,
}

/// One audit table: its name, schema, builder, and how it is kept.
pub struct Audit {
    /// The table's name.
    pub name: &'static str,
    /// Its schema; `iso_week` comes first.
    pub schema: SchemaRef,
    /// Builds its rows from a snapshot.
    pub build: AuditFn,
    /// How it is brought up to date after a write.
    pub kept: Kept,
    /// The columns its rows come sorted by, ascending, whole or for one week (empty: no order
    /// promised). A read in that order then merges its partitions instead of sorting every row:
    /// the download of a busy week's key rest violations (2.9 M rows) ran out of query memory
    /// sorting them.
    pub sorted_by: &'static [&'static str],
}

/// The audit tables, in the order the review shows them.
pub fn audit_tables() -> Vec<Audit> {
    let audit = |name, schema, build, kept| Audit {
        name,
        schema,
        build,
        kept,
        sorted_by: &[],
    };
    vec![
        audit(
            "lane_policy_violation",
            lane_policy::schema(),
            lane_policy::build,
            Kept::ByJob,
        ),
        audit(
            "duplicate_reconciliation",
            reconcile::schema(),
            reconcile::build,
            Kept::ByIdemKey,
        ),
        audit(
            "same_key_retry",
            refusals::same_key_retry_schema(),
            refusals::same_key_retry,
            Kept::ByJob,
        ),
        Audit {
            // Key by key, each key's uses by start, then in job order.
            sorted_by: &["key_id", "started_at", "job_id", "attempt_no"],
            ..audit(
                "key_rest_violation",
                refusals::key_rest_schema(),
                refusals::key_rest_violation,
                Kept::ByKey,
            )
        },
        audit(
            "pool_overload_episode",
            refusals::overload_schema(),
            refusals::pool_overload_episode,
            Kept::ByPool,
        ),
        audit(
            "attempt_bound_exceeded",
            refusals::bound_schema(),
            refusals::attempt_bound_exceeded,
            Kept::ByJob,
        ),
        audit(
            "outcome_mismatch",
            refusals::mismatch_schema(),
            refusals::outcome_mismatch,
            Kept::ByJob,
        ),
    ]
}

/// Creates the SQL audit views of [`views`]; call after the core views exist.
pub async fn create_views(ctx: &SessionContext) -> Result<()> {
    for (_, sql) in views::AUDIT_VIEWS {
        ctx.sql(sql).await?.collect().await?;
    }
    Ok(())
}

/// Registers every audit table in `ctx`, each built from `attempts` (the session's cached
/// `job_attempt` columns) and brought up to date after every write as its [`Kept`] says.
///
/// With [`Upkeep::Incremental`] each table keeps every week's rows and hands out the week a query
/// fixes `iso_week` to (as every review section does); with [`Upkeep::PerRead`] it builds only
/// that week's.
pub fn register(
    ctx: &SessionContext,
    ledger: &Ledger,
    attempts: &Arc<AttemptCache>,
    weeks: &Arc<crate::derived::week_attempt::WeekColumn>,
    settings: &AuditSettings,
    upkeep: Upkeep,
    per_reads: &PerReads,
) -> Result<()> {
    // With [`Upkeep::PerRead`] the audits share one snapshot of the attempts a write generation:
    // building it (each job's week) is a walk of every attempt.
    let snapshots: Arc<Shared<Snapshot>> = Arc::default();
    for Audit {
        name,
        schema,
        build,
        kept,
        sorted_by,
    } in audit_tables()
    {
        let kept = match upkeep {
            Upkeep::Incremental => Some(kept),
            Upkeep::PerRead => None,
        };
        let (read, week_read): (ReadFn, WeekReadFn) = match kept {
            None => {
                let (settings, rows_schema, snapshots) = (settings.clone(), schema.clone(), snapshots.clone());
                let table = PerRead::new(name, &COLUMNS, move |source, week| {
                    let snap = snapshots.get(source, Snapshot::new)?;
                    handed_out(vec![build(&snap, &settings, week)?], rows_schema.clone())
                });
                per_read_fns(table, attempts, per_reads)
            }
            Some(Kept::ByJob) => {
                let settings = settings.clone();
                let table = Arc::new(crate::derived::kept::ByJob::new(
                    schema.clone(),
                    &COLUMNS,
                    // job_id follows iso_week in every audit kept by job.
                    1,
                    Arc::new(move |batches: &[RecordBatch]| {
                        Ok(vec![build(&Snapshot::new(batches)?, &settings, None)?])
                    }),
                ));
                let (all, one, attempts, week_attempts) = (table.clone(), table, attempts.clone(), attempts.clone());
                (
                    Arc::new(move |_: &Ledger| all.rows(&attempts)),
                    // The week's rows of every week's kept rows: iso_week is column 0.
                    Arc::new(move |_: &Ledger, week: &str| {
                        crate::derived::kept::rows_where(&one.rows(&week_attempts)?, 0, week)
                    }),
                )
            }
            Some(Kept::ByKey) => {
                let table = Arc::new(by_group::ByGroup::key_rests(settings.clone(), weeks.clone()));
                let (all, one, attempts, week_attempts) = (table.clone(), table, attempts.clone(), attempts.clone());
                (
                    Arc::new(move |_: &Ledger| all.rows(&attempts, None)),
                    Arc::new(move |_: &Ledger, week: &str| one.rows(&week_attempts, Some(week))),
                )
            }
            Some(Kept::ByPool) => {
                let table = Arc::new(by_group::ByGroup::pool_episodes(settings.clone()));
                let (all, one, attempts, week_attempts) = (table.clone(), table, attempts.clone(), attempts.clone());
                (
                    Arc::new(move |_: &Ledger| all.rows(&attempts, None)),
                    Arc::new(move |_: &Ledger, week: &str| one.rows(&week_attempts, Some(week))),
                )
            }
            Some(Kept::ByIdemKey) => {
                let table = Arc::new(reconcile::Kept::new(settings.clone()));
                let (all, one, attempts, week_attempts) = (table.clone(), table, attempts.clone(), attempts.clone());
                (
                    Arc::new(move |_: &Ledger| all.rows(&attempts, None)),
                    Arc::new(move |_: &Ledger, week: &str| one.rows(&week_attempts, Some(week))),
                )
            }
        };
        let table = LedgerTable::new(schema, ledger.clone(), read)
            .with_week_read(week_read)
            .sorted_by(sorted_by);
        ctx.register_table(name, Arc::new(table))?;
    }
    // data_quality also reads the conflicts and rejects the ledger keeps.
    let (read, week_read) = match upkeep {
        Upkeep::Incremental => {
            let kept = Arc::new(data_quality::Kept::new(weeks.clone()));
            let (all, one, all_attempts, week_attempts) = (kept.clone(), kept, attempts.clone(), attempts.clone());
            let read: ReadFn = Arc::new(move |l: &Ledger| all.rows(l, &all_attempts, None));
            let week_read: WeekReadFn = Arc::new(move |l: &Ledger, week: &str| one.rows(l, &week_attempts, Some(week)));
            (read, week_read)
        }
        Upkeep::PerRead => per_read_fns(
            PerRead::new(data_quality::TABLE, &data_quality::COLUMNS, |source, week| {
                handed_out(
                    vec![data_quality::build(source.ledger, source.batches, week)?],
                    data_quality::schema(),
                )
            }),
            attempts,
            per_reads,
        ),
    };
    let table = LedgerTable::new(data_quality::schema(), ledger.clone(), read).with_week_read(week_read);
    ctx.register_table(data_quality::TABLE, Arc::new(table))?;
    Ok(())
}

/// A [`PerRead`] table's read of every week and of one week; the table joins `per_reads`, read by
/// week.
fn per_read_fns(table: PerRead, attempts: &Arc<AttemptCache>, per_reads: &PerReads) -> (ReadFn, WeekReadFn) {
    let table = Arc::new(table);
    per_reads.add(table.clone(), true);
    let (all, one, all_attempts, week_attempts) = (table.clone(), table, attempts.clone(), attempts.clone());
    (
        Arc::new(move |l: &Ledger| all.rows(l, &all_attempts, None)),
        Arc::new(move |l: &Ledger, week: &str| one.rows(l, &week_attempts, Some(week))),
    )
}

/// A kept table's `rows` as it hands them out: the non-empty batches cut by [`in_chunks`], or one
/// empty batch of `schema` when there are none.
fn handed_out(rows: Vec<RecordBatch>, schema: SchemaRef) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::with_capacity(rows.len());
    for b in rows.into_iter().filter(|b| b.num_rows() > 0) {
        batches.extend(in_chunks(b)?);
    }
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(schema));
    }
    Ok(batches)
}

/// `batch` as batches of at most [`job_attempt::BATCH_ROWS`] rows, each with buffers of its own.
///
/// A busy week can flag millions of key uses; handed to DataFusion as one batch, the operators
/// account its whole buffers for every slice they pass on and the query runs out of memory.
fn in_chunks(batch: RecordBatch) -> Result<Vec<RecordBatch>> {
    if batch.num_rows() <= job_attempt::BATCH_ROWS {
        return Ok(vec![batch]);
    }
    let schema = batch.schema();
    (0..batch.num_rows())
        .step_by(job_attempt::BATCH_ROWS)
        .map(|at| {
            let slice = batch.slice(at, job_attempt::BATCH_ROWS.min(batch.num_rows() - at));
            Ok(datafusion::arrow::compute::concat_batches(&schema, [&slice])
                .map_err(datafusion::error::DataFusionError::from)?)
        })
        .collect()
}
