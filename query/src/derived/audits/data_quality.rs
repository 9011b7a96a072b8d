//! `data_quality` (issue 31): what in the ledger's own records makes a figure of the review less
//! trustworthy, one row per finding. Nothing here is dropped or corrected in the ledger: the
//! attempts stay as the router sent them, and this table says where they are odd.
//!
//! | kind | finding |
//! |---|---|
//! | `attempt_number_gap` | a job's attempt numbers skip (a router that retried inside its SDK): the gap is shown, no row is made up |
//! | `artifact_reported_twice` | an `artifact_id` an earlier `ok` attempt already reported, logged `ok` again: its tokens count twice |
//! | `ok_without_artifact` | outcome `ok` with no `artifact_id` (a stream cut short, logged as a success) |
//! | `ok_without_tokens_out` | outcome `ok` with `tokens_out` 0 or not sent (`job_attempt` holds both as 0) |
//! | `ended_before_started` | `ended_at` before `started_at`: its latency is left out of the percentiles |
//! | `started_after_ingest` | `started_at` after `ingested_at`, when the ledger took the attempt's first record |
//! | `conflict_received` | an attempt record that disagreed with the row in force, by the week it was received |
//! | `decision_conflict_received` | the same for a gate decision record |
//! | `reject_received` | a line that could not be read, by the week it was received |
//! | `fallback_idem_key` | a job keyed by a declared fallback (`fallback:` keys): duplicates across the client's own retries cannot be seen |
//!
//! The ledger keeps, per attempt, when its first record was accepted (`ingested_at`); it keeps no
//! arrival time for a later record that completed the row (the hash chain orders entries but
//! holds no time). So `started_at` is checked against `ingested_at`, and `ended_at` is not: a row
//! sent as a start and completed later legitimately ends after its first record arrived.
//!
//! Attempt findings carry the `iso_week` of their job, as every audit; conflicts and rejects the
//! week they were received in.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimestampMicrosecondType};
use datafusion::common::HashMap;
use laneledger_store::{Ledger, format_timestamp};

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use laneledger_store::StoredAttempt;

use super::rows::{int, text};
use crate::derived::job_week::{WeekCache, first_starts};
use crate::derived::kept::ByJob;
use crate::derived::week_attempt::{RowWeeks, WeekColumn};
use crate::error::Result;
use crate::tables::job_attempt::{self, AttemptCache, Cursor};
use crate::tables::labels::Text;

/// The table's name.
pub const TABLE: &str = "data_quality";

/// The finding kinds, in the order a week's rows are counted on the review.
pub const KINDS: [&str; 10] = [
    "attempt_number_gap",
    "artifact_reported_twice",
    "ok_without_artifact",
    "ok_without_tokens_out",
    "ended_before_started",
    "started_after_ingest",
    "conflict_received",
    "decision_conflict_received",
    "reject_received",
    "fallback_idem_key",
];

/// The `job_attempt` columns read: job_id, idem_key, attempt_no, started_at, ended_at, outcome,
/// tokens_in, tokens_out, artifact_id, ingested_at.
pub const COLUMNS: [usize; 10] = [0, 1, 2, 4, 5, 6, 7, 8, 9, 17];

/// The idempotency keys a declared fallback made (`ingest --idem-fallback`, `?idem_fallback=1`).
const FALLBACK_PREFIX: &str = "fallback:";

/// iso_week, kind, job_id (NULL for a reject that names no job), attempt_no (NULL where no
/// attempt is concerned), detail (a sentence with the numbers).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("iso_week", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("job_id", DataType::Utf8, true),
        Field::new("attempt_no", DataType::Int64, true),
        Field::new("detail", DataType::Utf8, false),
    ]))
}

/// One finding.
struct Finding {
    week: String,
    kind: &'static str,
    job_id: Option<String>,
    attempt_no: Option<i64>,
    detail: String,
}

/// One batch's columns, downcast once.
struct Cols<'b> {
    job_id: &'b StringArray,
    idem_key: &'b StringArray,
    attempt_no: &'b Int64Array,
    started_at: &'b TimestampMicrosecondArray,
    ended_at: &'b TimestampMicrosecondArray,
    outcome: Text,
    tokens_in: &'b Int64Array,
    tokens_out: &'b Int64Array,
    artifact_id: &'b StringArray,
    ingested_at: &'b TimestampMicrosecondArray,
}

impl<'b> Cols<'b> {
    fn of(b: &'b RecordBatch) -> Result<Self> {
        let c = |name: &str| job_attempt::column(b, name);
        Ok(Cols {
            job_id: c("job_id")?.as_string::<i32>(),
            idem_key: c("idem_key")?.as_string::<i32>(),
            attempt_no: c("attempt_no")?.as_primitive::<Int64Type>(),
            started_at: c("started_at")?.as_primitive::<TimestampMicrosecondType>(),
            ended_at: c("ended_at")?.as_primitive::<TimestampMicrosecondType>(),
            outcome: Text::of(c("outcome")?)?,
            tokens_in: c("tokens_in")?.as_primitive::<Int64Type>(),
            tokens_out: c("tokens_out")?.as_primitive::<Int64Type>(),
            artifact_id: c("artifact_id")?.as_string::<i32>(),
            ingested_at: c("ingested_at")?.as_primitive::<TimestampMicrosecondType>(),
        })
    }

    fn ended_at(&self, i: usize) -> Option<i64> {
        self.ended_at.is_valid(i).then(|| self.ended_at.value(i))
    }

    fn artifact(&self, i: usize) -> Option<&'b str> {
        self.artifact_id.is_valid(i).then(|| self.artifact_id.value(i))
    }

    fn int(a: &Int64Array, i: usize) -> Option<i64> {
        a.is_valid(i).then(|| a.value(i))
    }

    /// Whether the attempt's outcome is `ok`.
    fn is_ok(&self, i: usize) -> bool {
        self.outcome.is_valid(i) && self.outcome.value(i) == "ok"
    }

    /// When the attempt reported what it reported: `ended_at`, else `started_at` (µs).
    fn reported_at(&self, i: usize) -> i64 {
        self.ended_at(i).unwrap_or_else(|| self.started_at.value(i))
    }
}

/// A span of µs in seconds for people: `12.5 s`, `0.250 s`, `3,600.0 s`.
fn seconds(micros: i64) -> String {
    let s = micros as f64 / 1e6;
    if s.abs() < 1.0 {
        format!("{s:.3} s")
    } else {
        format!("{} s", crate::words::format_ratio(Some(s), 1))
    }
}

/// `attempt 3 was` or `attempts 3–5 were`.
fn attempts_were(from: i64, to: i64) -> String {
    if from == to {
        format!("attempt {from} was")
    } else {
        format!("attempts {from}–{to} were")
    }
}

/// Where the first attempt to report an artifact is: (reported_at, snapshot row, job_id,
/// attempt_no), the earliest by `reported_at`, then by row; and how many attempts reported it.
type FirstReport<'b> = ((i64, usize, &'b str, i64), u32);

/// The rows of `data_quality` from the attempts' [`COLUMNS`] (`attempts`, in (job_id,
/// attempt_no) order) and the conflicts and rejects `ledger` keeps: every week's, or (`week`)
/// one ISO week's. An artifact reported twice is measured against its first report in any week.
/// Built whole: [`Kept`] gives the same rows kept up to date by the writes.
pub fn build(ledger: &Ledger, attempts: &[RecordBatch], week: Option<&str>) -> Result<RecordBatch> {
    let mut out = job_findings(attempts, week)?;
    out.extend(artifact_findings(attempts, week)?);
    out.extend(received_findings(ledger, week)?);
    to_batch(&out)
}

/// Each job's ISO week, in job order, as an index into the labels returned beside them.
fn job_weeks<'a>(jobs: &[crate::derived::job_week::JobStart<'a>]) -> (Vec<u32>, Vec<String>) {
    let mut cache = WeekCache::default();
    let mut labels: Vec<String> = Vec::new();
    let weeks = jobs
        .iter()
        .map(|j| {
            let label = &cache.week(j.first_start).label;
            match labels.iter().rposition(|l| l == label) {
                Some(w) => w as u32,
                None => {
                    labels.push(label.clone());
                    (labels.len() - 1) as u32
                }
            }
        })
        .collect();
    (weeks, labels)
}

/// The findings each job's own attempts make (every kind but `artifact_reported_twice` and the
/// received ones), job by job in job order: every week's, or (`week`) one ISO week's.
fn job_findings(attempts: &[RecordBatch], week: Option<&str>) -> Result<Vec<Finding>> {
    let cols = attempts.iter().map(Cols::of).collect::<Result<Vec<_>>>()?;
    let jobs = first_starts(attempts)?;
    let (job_weeks, labels) = job_weeks(&jobs);
    let in_week = |w: &str| week.is_none_or(|x| x == w);

    let mut out: Vec<Finding> = Vec::new();
    let (mut job, mut left, mut prev_no) = (0usize, 0usize, 0i64);
    // The fallback keys of the current job: (key, first attempt_no, attempts).
    let mut fallback: Vec<(&str, i64, u32)> = Vec::new();
    let flush = |out: &mut Vec<Finding>, fallback: &mut Vec<(&str, i64, u32)>, job: usize| {
        for (key, first, n) in fallback.drain(..) {
            out.push(Finding {
                week: labels[job_weeks[job] as usize].clone(),
                kind: "fallback_idem_key",
                job_id: Some(jobs[job].job_id.to_string()),
                attempt_no: Some(first),
                detail: format!(
                    "the idempotency key {key} came from the request id (a declared fallback), on {}: retries the client sent as new requests cannot be seen as duplicates",
                    crate::words::counted(u64::from(n), "attempt", "attempts")
                ),
            });
        }
    };
    for c in &cols {
        for i in 0..c.job_id.len() {
            if left == 0 {
                // The job before this one ends here.
                if job > 0 {
                    flush(&mut out, &mut fallback, job - 1);
                }
                job += 1;
                left = jobs[job - 1].attempts;
                prev_no = 0;
            }
            left -= 1;
            let j = job - 1;
            let w = &labels[job_weeks[j] as usize];
            let no = c.attempt_no.value(i);
            if !in_week(w) {
                prev_no = no;
                continue;
            }
            let job_id = c.job_id.value(i);
            let mut find = |kind: &'static str, detail: String| {
                out.push(Finding {
                    week: w.clone(),
                    kind,
                    job_id: Some(job_id.to_string()),
                    attempt_no: Some(no),
                    detail,
                })
            };
            if no > prev_no + 1 {
                let missing = attempts_were(prev_no + 1, no - 1);
                find(
                    "attempt_number_gap",
                    if prev_no == 0 {
                        format!(
                            "the job's first logged attempt is attempt {no}: {missing} never logged, perhaps retried inside the router's SDK; no row is made up for them"
                        )
                    } else {
                        format!(
                            "attempt {no} follows attempt {prev_no}: {missing} never logged, perhaps retried inside the router's SDK; no row is made up for them"
                        )
                    },
                );
            }
            prev_no = no;
            if c.is_ok(i) {
                if c.artifact(i).is_none() {
                    find(
                        "ok_without_artifact",
                        "logged ok with no artifact_id: perhaps a stream cut short and logged as a success".to_string(),
                    );
                }
                // job_attempt holds a tokens_out the record left out as 0 (seed 000's column is
                // NOT NULL DEFAULT 0), so the two read alike.
                if Cols::int(c.tokens_out, i).unwrap_or(0) == 0 {
                    find(
                        "ok_without_tokens_out",
                        "logged ok with tokens_out 0 or none sent: perhaps a stream cut short and logged as a success"
                            .to_string(),
                    );
                }
            }
            let started = c.started_at.value(i);
            if let Some(ended) = c.ended_at(i)
                && ended < started
            {
                find(
                    "ended_before_started",
                    format!(
                        "ended_at {} is {} before started_at {}; its latency is left out of the latency percentiles",
                        format_timestamp(ended),
                        seconds(started - ended),
                        format_timestamp(started)
                    ),
                );
            }
            let ingested = c.ingested_at.value(i);
            if started > ingested {
                find(
                    "started_after_ingest",
                    format!(
                        "started_at {} is {} after the ledger took the attempt's first record ({})",
                        format_timestamp(started),
                        seconds(started - ingested),
                        format_timestamp(ingested)
                    ),
                );
            }
            let key = c.idem_key.value(i);
            if key.starts_with(FALLBACK_PREFIX) {
                match fallback.iter_mut().find(|f| f.0 == key) {
                    Some(f) => f.2 += 1,
                    None => fallback.push((key, no, 1)),
                }
            }
        }
    }
    if job > 0 {
        flush(&mut out, &mut fallback, job - 1);
    }
    Ok(out)
}

/// `artifact_reported_twice`: every `ok` attempt but the first to report an artifact_id other
/// `ok` attempts reported too, in job order: every week's, or (`week`) one ISO week's. The first
/// report of an artifact is looked for in every week.
fn artifact_findings(attempts: &[RecordBatch], week: Option<&str>) -> Result<Vec<Finding>> {
    let jobs = first_starts(attempts)?;
    let (job_weeks, labels) = job_weeks(&jobs);
    // Each row's job's week, in row order.
    let row_weeks: Vec<u32> = jobs
        .iter()
        .zip(&job_weeks)
        .flat_map(|(j, &w)| std::iter::repeat_n(w, j.attempts))
        .collect();
    drop(jobs);
    artifact_findings_by(attempts, week, |_, _, row| &labels[row_weeks[row] as usize])
}

/// [`artifact_findings`] of every week, the week of each row's job read from `weeks` (those of
/// `attempts`' chunks).
fn artifact_findings_of_weeks(attempts: &[RecordBatch], weeks: &RowWeeks) -> Result<Vec<Finding>> {
    if weeks.chunks() != attempts.len() {
        return Err(crate::Error::Internal("a week column for each chunk".into()));
    }
    artifact_findings_by(attempts, None, |k, i, _| {
        weeks.get(k, i).expect("a week column for each chunk, checked above")
    })
}

/// [`artifact_findings`], with `week_of(chunk, row in the chunk, row)` the ISO week of the
/// row's job.
fn artifact_findings_by<'w>(
    attempts: &[RecordBatch],
    week: Option<&str>,
    week_of: impl Fn(usize, usize, usize) -> &'w str,
) -> Result<Vec<Finding>> {
    let cols = attempts.iter().map(Cols::of).collect::<Result<Vec<_>>>()?;
    let in_week = |k: usize, i: usize, row: usize| week.is_none_or(|x| x == week_of(k, i, row));
    let mut out: Vec<Finding> = Vec::new();
    // The artifacts reported in the week asked for: the only ones whose first report is needed.
    let wanted: Option<datafusion::common::HashSet<&str>> = week.map(|_| {
        let mut wanted = datafusion::common::HashSet::default();
        let mut row = 0usize;
        for (k, c) in cols.iter().enumerate() {
            for i in 0..c.job_id.len() {
                if in_week(k, i, row)
                    && let Some(art) = c.artifact(i)
                {
                    wanted.insert(art);
                }
                row += 1;
            }
        }
        wanted
    });
    // Pass 2: each artifact's first `ok` report, over every week; pass 3: every later `ok`
    // report of one reported more than once, in the weeks kept. Only successes count: an
    // ambiguous attempt whose late completion carries the artifact its retry got back under the
    // same idempotency key is the reconcile at work (seed 000's pinned drill does it), not a
    // success logged twice.
    let wanted_art = |a: &str| wanted.as_ref().is_none_or(|w| w.contains(a));
    let mut first: HashMap<&str, FirstReport> = HashMap::default();
    let mut row = 0usize;
    for c in &cols {
        for i in 0..c.job_id.len() {
            if let Some(art) = c.artifact(i)
                && c.is_ok(i)
                && wanted_art(art)
            {
                let here = (c.reported_at(i), row, c.job_id.value(i), c.attempt_no.value(i));
                let e = first.entry(art).or_insert((here, 0));
                e.1 += 1;
                if (here.0, here.1) < (e.0.0, e.0.1) {
                    e.0 = here;
                }
            }
            row += 1;
        }
    }

    let mut row = 0usize;
    for (k, c) in cols.iter().enumerate() {
        for i in 0..c.job_id.len() {
            if in_week(k, i, row)
                && c.is_ok(i)
                && let Some(art) = c.artifact(i)
                && let Some(((_, first_row, first_job, first_no), n)) = first.get(art)
                && *n > 1
                && *first_row != row
            {
                let tokens = Cols::int(c.tokens_in, i).unwrap_or(0) + Cols::int(c.tokens_out, i).unwrap_or(0);
                out.push(Finding {
                    week: week_of(k, i, row).to_string(),
                    kind: "artifact_reported_twice",
                    job_id: Some(c.job_id.value(i).to_string()),
                    attempt_no: Some(c.attempt_no.value(i)),
                    detail: format!(
                        "artifact {art} was already reported by job {first_job} attempt {first_no}; this attempt's {} tokens are counted a second time",
                        crate::words::format_count(tokens)
                    ),
                });
            }
            row += 1;
        }
    }
    drop(first);
    Ok(out)
}

/// What was received: the conflicts and rejects `ledger` keeps, by the week they arrived in:
/// every week's, or (`week`) one ISO week's.
fn received_findings(ledger: &Ledger, week: Option<&str>) -> Result<Vec<Finding>> {
    let in_week = |w: &str| week.is_none_or(|x| x == w);
    let mut out: Vec<Finding> = Vec::new();
    // What was received: conflicts and rejects, by the week they arrived in.
    let received = |at: i64| crate::derived::job_week::iso_week_of(at);
    for (n, c) in ledger.conflicts()?.into_iter().enumerate() {
        let w = received(c.received_at);
        if !in_week(&w) {
            continue;
        }
        out.push(Finding {
            week: w,
            kind: "conflict_received",
            detail: format!(
                "line {} of {}, received {}, disagreed with the attempt in force on {}; kept as conflict {}, the attempt unchanged",
                c.line,
                c.source,
                format_timestamp(c.received_at),
                c.fields.join(", "),
                n + 1
            ),
            job_id: Some(c.job_id),
            attempt_no: Some(i64::from(c.attempt_no)),
        });
    }
    for (n, c) in ledger.decision_conflicts()?.into_iter().enumerate() {
        let w = received(c.received_at);
        if !in_week(&w) {
            continue;
        }
        out.push(Finding {
            week: w,
            kind: "decision_conflict_received",
            detail: format!(
                "line {} of {}, received {}, disagreed with the gate decision in force (decided {}) on {}; kept as decision conflict {}, the decision unchanged",
                c.line,
                c.source,
                format_timestamp(c.received_at),
                format_timestamp(c.decided_at),
                c.fields.join(", "),
                n + 1
            ),
            job_id: Some(c.job_id),
            attempt_no: None,
        });
    }
    for (n, r) in ledger.rejects()?.into_iter().enumerate() {
        let w = received(r.received_at);
        if !in_week(&w) {
            continue;
        }
        // A JSON line may still say which attempt it was meant to be.
        let claimed: Option<serde_json::Value> = serde_json::from_str(&r.raw).ok();
        let job_id = claimed
            .as_ref()
            .and_then(|v| v.get("job_id")?.as_str().map(str::to_string));
        let attempt_no = claimed.as_ref().and_then(|v| v.get("attempt_no")?.as_i64());
        let why = match &r.field {
            Some(f) => format!("{f}: {}", r.reason),
            None => r.reason.clone(),
        };
        out.push(Finding {
            week: w,
            kind: "reject_received",
            job_id,
            attempt_no,
            detail: format!(
                "line {} of {}, received {}, could not be read ({why}); kept as reject {}",
                r.line,
                r.source,
                format_timestamp(r.received_at),
                n + 1
            ),
        });
    }

    Ok(out)
}

/// `findings` as one batch of the table's rows.
fn to_batch(out: &[Finding]) -> Result<RecordBatch> {
    let columns = vec![
        text(out.iter().map(|f| Some(f.week.as_str()))),
        text(out.iter().map(|f| Some(f.kind))),
        text(out.iter().map(|f| f.job_id.as_deref())),
        int(out.iter().map(|f| f.attempt_no)),
        text(out.iter().map(|f| Some(f.detail.as_str()))),
    ];
    Ok(RecordBatch::try_new(schema(), columns).map_err(datafusion::error::DataFusionError::from)?)
}

/// `data_quality` kept up to date by the writes: row for row what [`build`] gives, in its order.
/// The findings of each job's own attempts are kept by job ([`ByJob`]); the artifacts reported
/// twice are built again only after a write that reports, `ok`, an artifact_id an `ok` attempt
/// had reported already, or that touches a job one of those rows names (most writes report new
/// artifacts: then nothing is built); the conflicts and rejects are read from the ledger at each
/// read.
pub struct Kept {
    jobs: ByJob,
    /// Each attempt's job's ISO week (kept by chunk, shared with `week_attempt`).
    weeks: Arc<WeekColumn>,
    twice: Mutex<Option<Twice>>,
    /// Builds of the artifacts reported twice from every attempt, so far.
    twice_builds: AtomicU64,
}

/// Every week's `artifact_reported_twice` rows, with what tells whether a write changes them.
struct Twice {
    /// The attempt cache's columns the rows were built from.
    cursor: Cursor,
    hasher: RandomState,
    /// The hash of every artifact_id an `ok` attempt reported. A hash a new report shares with an
    /// other artifact only makes the rows be built again.
    reported: HashSet<u64>,
    /// The hash of every job_id the rows name: a write to such a job may move its week.
    jobs: HashSet<u64>,
    rows: RecordBatch,
}

impl Twice {
    /// The rows of `attempts` (whole jobs, in job order), standing at `cursor`.
    fn build(attempts: &[RecordBatch], weeks: &RowWeeks, cursor: Cursor) -> Result<Twice> {
        let rows = artifact_findings_of_weeks(attempts, weeks)?;
        let hasher = RandomState::new();
        let jobs = rows
            .iter()
            .filter_map(|f| f.job_id.as_deref())
            .map(|j| hasher.hash_one(j))
            .collect();
        let mut reported = HashSet::default();
        for c in attempts.iter().map(Cols::of) {
            let c = c?;
            for i in 0..c.job_id.len() {
                if c.is_ok(i)
                    && let Some(art) = c.artifact(i)
                {
                    reported.insert(hasher.hash_one(art));
                }
            }
        }
        Ok(Twice {
            cursor,
            hasher,
            reported,
            jobs,
            rows: to_batch(&rows)?,
        })
    }

    /// Takes in the rows a write inserted or completed (in force, oldest first), when they leave
    /// the table as it is; `false` when it must be built again. Set fields never change (the
    /// write rules), so a row that was no `ok` report before either reports an artifact for the
    /// first time, or reports one already reported.
    fn fold(&mut self, changes: &[StoredAttempt]) -> bool {
        for r in changes {
            let a = &r.attempt;
            if self.jobs.contains(&self.hasher.hash_one(a.job_id.as_str())) {
                return false;
            }
            if a.outcome == Some(laneledger_store::Outcome::Ok)
                && let Some(art) = &a.artifact_id
                && !self.reported.insert(self.hasher.hash_one(art.as_str()))
            {
                // Reported before, by another attempt or by this one before the write (then its
                // report's time may have moved).
                return false;
            }
        }
        true
    }
}

impl Kept {
    /// The table, nothing built yet; each attempt's job's ISO week is read from `weeks`.
    pub fn new(weeks: Arc<WeekColumn>) -> Self {
        Kept {
            weeks,
            jobs: ByJob::new(
                schema(),
                &COLUMNS,
                // job_id
                2,
                Arc::new(|batches: &[RecordBatch]| Ok(vec![to_batch(&job_findings(batches, None)?)?])),
            ),
            twice: Mutex::default(),
            twice_builds: AtomicU64::new(0),
        }
    }

    /// How many times the artifacts reported twice were built from every attempt.
    pub fn twice_builds(&self) -> u64 {
        self.twice_builds.load(Ordering::Relaxed)
    }

    /// The table at the attempt cache's columns now (at the read's floor or newer): every week's
    /// rows, or (`week`) one ISO week's, in batches of at most [`job_attempt::BATCH_ROWS`] rows.
    /// Errors: the cache's and the ledger's read errors.
    pub fn rows(&self, ledger: &Ledger, attempts: &AttemptCache, week: Option<&str>) -> Result<Vec<RecordBatch>> {
        let mut twice = crate::engine::cache_lock::lock_or_reset(&self.twice, || None);
        let since = twice.as_ref().map(|t| t.cursor);
        // One read for both parts, so that they see the same attempts.
        let (chunks, ids, cursor, changes) = attempts.chunks_since(&COLUMNS, since)?;
        // What is kept, brought up to date by the rows written since; nothing when it cannot be.
        let held = match (twice.take(), changes) {
            (Some(mut t), Some(changes)) => t.fold(&changes).then(|| {
                t.cursor = cursor;
                t
            }),
            _ => None,
        };
        // The two parts side by side when both are built.
        let (jobs, built) = crate::engine::parallel::join(
            || self.jobs.rows_of(&chunks, &ids),
            || match held {
                Some(t) => Ok(t),
                None => {
                    self.twice_builds.fetch_add(1, Ordering::Relaxed);
                    Twice::build(&chunks, &self.weeks.labels(&chunks, &ids)?, cursor)
                }
            },
        );
        let built = built?;
        let mut out = jobs?;
        out.push(built.rows.clone());
        *twice = Some(built);
        drop(twice);
        if let Some(w) = week {
            out = crate::derived::kept::rows_where(&out, 0, w)?;
        }
        out.push(to_batch(&received_findings(ledger, week)?)?);
        super::handed_out(out, schema())
    }
}
