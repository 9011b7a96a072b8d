//! `week_rollup`: seed 000's drill table for every ISO week of the attempts (SPEC 4), built by one
//! pass over the sorted attempts ([`week_rollup`]) and kept by chunk of the attempt cache
//! ([`Kept`]): after a write only the chunks it changed are summed again. `weekly_metrics` is this
//! table with the weeks a retention sweep touched replaced by their `week_snapshot` rows.
//!
//! [`crate::derived::views::WEEK_ROLLUP_VIEW`] keeps the SQL it reproduces (over `job_attempt` joined to
//! `job_week`); `query/tests/sqlite_differential.rs` checks the rows against DataFusion running
//! that text. The SQL groups every attempt twice (by job, then by idem_key) and holds a distinct
//! set per group, which ran out of query memory at 10 M attempts. Here each job's attempts are
//! adjacent, so a job's figures are kept one job at a time; only the (week, idem_key) pairs with an
//! artifact are held, with their distinct artifacts.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimestampMicrosecondType};
use datafusion::common::HashMap;

use crate::derived::job_week::{iso_week_of, week_start_of};
use crate::error::Result;
use crate::tables::job_attempt::{self, timestamp_type};
use crate::tables::labels::Text;

/// The columns [`week_rollup`] reads: job_id, idem_key, attempt_no, lane, started_at, tokens_in,
/// tokens_out, artifact_id (indexes into [`crate::tables::job_attempt::schema`]).
pub const COLUMNS: [usize; 8] = [0, 1, 2, 3, 4, 7, 8, 9];

/// `week_rollup`'s schema (and `weekly_metrics`'), with the types and nullability DataFusion
/// gives the SQL: iso_week, week_start, jobs, free_attempts, paid_attempts, total_tokens (tokens),
/// unique_accepted_artifacts, duplicate_artifacts, cross_lane_jobs, artifacts, then the four
/// ratios as Float64 (NULL when the denominator is 0).
pub fn schema() -> SchemaRef {
    let int = |name: &str, nullable: bool| Field::new(name, DataType::Int64, nullable);
    let ratio = |name: &str| Field::new(name, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        Field::new("iso_week", DataType::Utf8, true),
        Field::new("week_start", timestamp_type(), true),
        int("jobs", false),
        int("free_attempts", true),
        int("paid_attempts", true),
        int("total_tokens", true),
        int("unique_accepted_artifacts", false),
        int("duplicate_artifacts", false),
        int("cross_lane_jobs", true),
        int("artifacts", true),
        ratio("tokens_per_accepted_artifact"),
        ratio("tokens_per_artifact"),
        ratio("duplicate_artifacts_per_100_jobs"),
        ratio("cross_lane_retries_per_job"),
    ]))
}

/// One idem_key's distinct artifacts within a week.
struct KeyArtifacts<'a> {
    first: &'a str,
    more: Vec<&'a str>,
}

/// A week's figures summed over jobs (or, with a sign, taken out again).
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
struct Sums {
    jobs: i64,
    free: i64,
    paid: i64,
    tokens: i64,
    /// Σ over jobs of each job's distinct artifacts.
    artifacts: i64,
    cross_lane: i64,
}

impl Sums {
    /// Adds `o` times `sign` (1 or -1).
    fn add(&mut self, o: &Sums, sign: i64) {
        self.jobs += sign * o.jobs;
        self.free += sign * o.free;
        self.paid += sign * o.paid;
        self.tokens += sign * o.tokens;
        self.artifacts += sign * o.artifacts;
        self.cross_lane += sign * o.cross_lane;
    }
}

/// One week's sums while the jobs are walked.
#[derive(Default)]
struct Week<'a> {
    sums: Sums,
    /// (idem_key → its distinct artifacts) for the attempts with an artifact.
    keys: HashMap<&'a str, KeyArtifacts<'a>>,
}

/// One job's figures while its attempts are walked.
#[derive(Default)]
struct Job<'a> {
    job_id: &'a str,
    first_start: i64,
    free: i64,
    paid: i64,
    tokens: i64,
}

impl Job<'_> {
    /// The job's distinct artifacts among `artifacts` ((idem_key, artifact_id) of each of its
    /// attempts with one).
    fn distinct(artifacts: &[(&str, &str)]) -> i64 {
        // A job has a few attempts: a look back is cheaper than a set.
        let firsts = artifacts.iter().enumerate();
        firsts
            .filter(|&(i, &(_, a))| !artifacts[..i].iter().any(|&(_, b)| b == a))
            .count() as i64
    }

    /// The job's figures as one job of its week.
    fn sums(&self, artifacts: &[(&str, &str)]) -> Sums {
        Sums {
            jobs: 1,
            free: self.free,
            paid: self.paid,
            tokens: self.tokens,
            artifacts: Self::distinct(artifacts),
            cross_lane: i64::from(self.free > 0 && self.paid > 0),
        }
    }
}

impl<'a> Job<'a> {
    /// Adds the job to its week; `artifacts` holds (idem_key, artifact_id) of each of its
    /// attempts with an artifact (a buffer the walk reuses from job to job).
    fn close(self, artifacts: &[(&'a str, &'a str)], weeks: &mut BTreeMap<i64, Week<'a>>) {
        let week = weeks.entry(week_start_of(self.first_start)).or_default();
        week.sums.add(&self.sums(artifacts), 1);
        for &(key, artifact) in artifacts {
            let k = week.keys.entry(key).or_insert(KeyArtifacts {
                first: artifact,
                more: Vec::new(),
            });
            if k.first != artifact && !k.more.contains(&artifact) {
                k.more.push(artifact);
            }
        }
    }
}

/// Walks `attempts` (`job_attempt` batches in (job_id, attempt_no) order with at least
/// [`COLUMNS`]) job by job: `close` gets each job with (idem_key, artifact_id) of its attempts
/// that have an artifact.
fn walk<'a>(attempts: &'a [RecordBatch], mut close: impl FnMut(Job<'a>, &[(&'a str, &'a str)])) -> Result<()> {
    let mut job: Option<Job<'a>> = None;
    let mut artifacts: Vec<(&str, &str)> = Vec::new();
    for batch in attempts {
        let column = |name: &str| job_attempt::column(batch, name);
        let job_id = column("job_id")?.as_string::<i32>();
        let idem_key = column("idem_key")?.as_string::<i32>();
        let lane = Text::of(column("lane")?)?;
        let started_at = column("started_at")?.as_primitive::<TimestampMicrosecondType>();
        let tokens_in = column("tokens_in")?.as_primitive::<Int64Type>();
        let tokens_out = column("tokens_out")?.as_primitive::<Int64Type>();
        let artifact_id = column("artifact_id")?.as_string::<i32>();
        for i in 0..batch.num_rows() {
            let (id, t) = (job_id.value(i), started_at.value(i));
            let j = match &mut job {
                Some(j) if j.job_id == id => j,
                _ => {
                    if let Some(done) = job.take() {
                        close(done, &artifacts);
                        artifacts.clear();
                    }
                    job.insert(Job {
                        job_id: id,
                        first_start: t,
                        ..Job::default()
                    })
                }
            };
            j.first_start = j.first_start.min(t);
            match lane.value(i) {
                "free" => j.free += 1,
                "paid" => j.paid += 1,
                _ => {}
            }
            j.tokens += tokens_in.value(i) + tokens_out.value(i);
            if artifact_id.is_valid(i) {
                artifacts.push((idem_key.value(i), artifact_id.value(i)));
            }
        }
    }
    if let Some(done) = job.take() {
        close(done, &artifacts);
    }
    Ok(())
}

/// `a / b` as SQL's `CAST(a AS DOUBLE) / NULLIF(b, 0)`.
fn ratio(a: f64, b: i64) -> Option<f64> {
    (b != 0).then(|| a / b as f64)
}

/// The `week_rollup` rows of `attempts` (`job_attempt` batches in (job_id, attempt_no) order with
/// at least [`COLUMNS`]), one per ISO week in week_start order, in one batch.
///
/// A job belongs to the week of its earliest `started_at`. `total_tokens` adds `tokens_in +
/// tokens_out` (tokens); `artifacts` sums each job's distinct artifact_ids (seed 000
/// `SUM(artifacts)`); `unique_accepted_artifacts` counts the week's idem_keys with an artifact and
/// `duplicate_artifacts` their distinct artifacts beyond the first.
///
/// Errors: a batch without those columns ([`crate::Error::Internal`]).
pub fn week_rollup(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let mut weeks: BTreeMap<i64, Week<'_>> = BTreeMap::new();
    walk(attempts, |job, artifacts| job.close(artifacts, &mut weeks))?;
    let rows = weeks.iter().map(|(start, w)| {
        let unique = w.keys.len() as i64;
        let duplicates: i64 = w.keys.values().map(|k| k.more.len() as i64).sum();
        (*start, w.sums, unique, duplicates)
    });
    to_batch(rows)
}

/// [`week_rollup`] as [`Kept`] counts it, built whole and nothing kept: each (week, idem_key) and
/// artifact by hash, sorted, then counted. For a session that builds the table at each read
/// ([`crate::derived::per_read::PerRead`]): at 10 M attempts each key was a probe at a random
/// place of a hash table of millions, where the sort reads its memory in order (BENCHMARKS.md,
/// "The week's tables built together"). Row for row equal to [`week_rollup`] but for a collision
/// of 128-bit hashes.
///
/// Errors: a batch without [`COLUMNS`] ([`crate::Error::Internal`]).
pub fn week_rollup_by_hash(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let state = State::default();
    // Runs of whole jobs walked side by side, their keys dealt into shares by hash; then each
    // share sorted and counted apart: a (week, key) is in one share only.
    let runs = runs_of_jobs(attempts, 4 * crate::engine::parallel::workers())?;
    let dealt = crate::engine::parallel::map(&runs, |run| state.deal(run, SHARES))?;
    let shares: Vec<usize> = (0..SHARES).collect();
    let counted = crate::engine::parallel::map(&shares, |&share| {
        let mut keys: Vec<KeyEntry> = dealt.iter().flat_map(|d| d.shares[share].iter().copied()).collect();
        // Sorted and without repeats: a (week, key)'s run holds its distinct artifacts.
        keys.sort_unstable();
        keys.dedup();
        let mut counts: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        for key in keys.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let c = counts.entry(key[0].0).or_default();
            c.0 += 1;
            c.1 += key.len() as i64 - 1;
        }
        Ok(counts)
    })?;
    let mut sums: BTreeMap<i64, Sums> = BTreeMap::new();
    for d in &dealt {
        for (week, s) in &d.sums {
            sums.entry(*week).or_default().add(s, 1);
        }
    }
    let mut counts: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for (week, (unique, duplicates)) in counted.into_iter().flatten() {
        let c = counts.entry(week).or_default();
        c.0 += unique;
        c.1 += duplicates;
    }
    let rows: Vec<(i64, Sums, i64, i64)> = sums
        .iter()
        .map(|(week, s)| {
            let (unique, duplicates) = counts.get(week).copied().unwrap_or_default();
            (*week, *s, unique, duplicates)
        })
        .collect();
    to_batch(rows.into_iter())
}

/// How many shares [`week_rollup_by_hash`] deals the (week, idem_key)s into: at 10 M attempts
/// about 29,000 keys a share, whose sort stays in a core's cache.
const SHARES: usize = 256;

/// `attempts` (whole jobs in job order) cut into about `n` runs of about equal rows, each job's
/// rows in one run: slices, nothing copied.
///
/// Errors: a batch without a job_id ([`crate::Error::Internal`]).
fn runs_of_jobs(attempts: &[RecordBatch], n: usize) -> Result<Vec<Vec<RecordBatch>>> {
    let total: usize = attempts.iter().map(RecordBatch::num_rows).sum();
    let target = total.div_ceil(n.max(1)).max(1);
    let mut runs = Vec::with_capacity(n);
    let (mut run, mut in_run): (Vec<RecordBatch>, usize) = (Vec::new(), 0);
    // The job of the last row of the batch before.
    let mut before: Option<&str> = None;
    for batch in attempts {
        let jobs = job_attempt::column(batch, "job_id")?.as_string::<i32>();
        let rows = batch.num_rows();
        // Whether row `i` goes on the job of the row before it.
        let goes_on = |i: usize| match i {
            0 => before == Some(jobs.value(0)),
            _ => jobs.value(i) == jobs.value(i - 1),
        };
        let mut from = 0;
        while from < rows {
            // Past the run's share of rows, at the next row that starts a job.
            let mut cut = (from + target.saturating_sub(in_run)).min(rows);
            while cut < rows && goes_on(cut) {
                cut += 1;
            }
            if cut > from {
                run.push(batch.slice(from, cut - from));
                in_run += cut - from;
            }
            if cut == rows {
                break;
            }
            runs.push(std::mem::take(&mut run));
            (in_run, from) = (0, cut);
        }
        if rows > 0 {
            before = Some(jobs.value(rows - 1));
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    Ok(runs)
}

/// The table's one batch of `rows`: (week_start, sums, unique accepted artifacts, duplicate
/// artifacts) in week_start order.
fn to_batch(rows: impl ExactSizeIterator<Item = (i64, Sums, i64, i64)>) -> Result<Vec<RecordBatch>> {
    let n = rows.len();
    let mut iso_week = StringBuilder::with_capacity(n, n * 8);
    let mut week_start = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut ints: Vec<Int64Builder> = (0..8).map(|_| Int64Builder::with_capacity(n)).collect();
    let mut ratios: Vec<Float64Builder> = (0..4).map(|_| Float64Builder::with_capacity(n)).collect();
    for (start, w, unique, duplicates) in rows {
        iso_week.append_value(iso_week_of(start));
        week_start.append_value(start);
        let figures = [
            w.jobs,
            w.free,
            w.paid,
            w.tokens,
            unique,
            duplicates,
            w.cross_lane,
            w.artifacts,
        ];
        for (b, v) in ints.iter_mut().zip(figures) {
            b.append_value(v);
        }
        let values = [
            ratio(w.tokens as f64, unique),
            ratio(w.tokens as f64, w.artifacts),
            ratio(100.0 * duplicates as f64, w.jobs),
            ratio(w.cross_lane as f64, w.jobs),
        ];
        for (b, v) in ratios.iter_mut().zip(values) {
            b.append_option(v);
        }
    }
    let mut cols: Vec<ArrayRef> = vec![Arc::new(iso_week.finish()), Arc::new(week_start.finish())];
    cols.extend(ints.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    cols.extend(ratios.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    Ok(vec![
        RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?,
    ])
}

/// What some whole jobs add to the table: their sums by week_start, and each distinct
/// (week, idem_key, artifact_id) among their attempts with an artifact, hashed: (week_start,
/// 128-bit hash of week_start and idem_key, 64-bit hash of artifact_id).
#[derive(Default)]
struct Part {
    sums: BTreeMap<i64, Sums>,
    keys: Vec<KeyEntry>,
}

/// A 128-bit hash of (week_start, idem_key), as two words (8-byte aligned: a `u128` would pad
/// every entry to 16 bytes).
type KeyHash = (u64, u64);

/// A (week_start, idem_key, artifact_id) as [`Part`] holds it: the week, the key's hash, the
/// artifact's hash within its key.
type KeyEntry = (i64, KeyHash, u64);

/// What some whole jobs add to the table, their keys dealt into shares ([`State::deal`]).
struct Dealt {
    sums: BTreeMap<i64, Sums>,
    shares: Vec<Vec<KeyEntry>>,
}

/// One (week, idem_key)'s distinct artifacts (hashes), each with how many parts hold it: the
/// first in place, as most keys have one; the others, when there are any, apart (a boxed slice,
/// 8 bytes in the entry: a second artifact under a key is rare, so its copy on a change is too).
struct Artifacts {
    first: (u64, u32),
    more: Option<Box<[(u64, u32)]>>,
}

impl Artifacts {
    fn len(&self) -> i64 {
        1 + self.more.as_ref().map_or(0, |m| m.len() as i64)
    }

    /// Counts `artifact` once more.
    fn add(&mut self, artifact: u64) {
        if self.first.0 == artifact {
            self.first.1 += 1;
            return;
        }
        if let Some(a) = self
            .more
            .iter_mut()
            .flat_map(|m| m.iter_mut())
            .find(|a| a.0 == artifact)
        {
            a.1 += 1;
            return;
        }
        let mut more = self.more.take().map(Vec::from).unwrap_or_default();
        more.push((artifact, 1));
        self.more = Some(more.into_boxed_slice());
    }

    /// Counts `artifact` once less (only a part added before is taken out, so it is held);
    /// `false` when no artifact is left.
    fn take_out(&mut self, artifact: u64) -> bool {
        let mut more = self.more.take().map(Vec::from).unwrap_or_default();
        if self.first.0 == artifact {
            self.first.1 -= 1;
            if self.first.1 == 0 {
                match more.pop() {
                    Some(next) => self.first = next,
                    None => return false,
                }
            }
        } else if let Some(at) = more.iter().position(|a| a.0 == artifact) {
            more[at].1 -= 1;
            if more[at].1 == 0 {
                more.swap_remove(at);
            }
        }
        self.more = (!more.is_empty()).then(|| more.into_boxed_slice());
        true
    }
}

/// `week_rollup` kept by chunk of the attempt cache: each chunk's inner jobs (all but its first
/// and last) are summed once, under the chunk's id; the jobs at the chunk boundaries are summed
/// again at each read. The table is the running total of every part: a chunk a write replaced is
/// taken out and its new version added, so a read after a write walks only the chunks it changed.
///
/// The distinct artifacts of each (week, idem_key) reach across jobs and chunks: they are kept as
/// hashes (128 bits for the week and key, 64 for an artifact within its key), each with how many
/// parts hold it: 40 bytes and the hash table's slack a key with one artifact, and 32 bytes a
/// chunk's part holds for each. Row for row equal to [`week_rollup`]
/// (`query/tests/materialized.rs`), but for a collision of 128-bit hashes.
#[derive(Default)]
pub struct Kept {
    state: std::sync::Mutex<State>,
    builds: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct State {
    /// Two independently keyed hashers: one 128-bit hash of (week_start, idem_key). foldhash's:
    /// SipHash (three hashes an attempt with an artifact) was about a third of a command's build
    /// of the table in `perf`.
    hashers: (foldhash::quality::RandomState, foldhash::quality::RandomState),
    /// The part of each chunk's inner jobs, by chunk id (the chunks of the last read only).
    parts: HashMap<u64, Part>,
    /// The part of the jobs at the chunk boundaries at the last read.
    boundary: Part,
    sums: BTreeMap<i64, Sums>,
    /// Each (week, idem_key)'s distinct artifacts, each with how many parts hold it.
    keys: HashMap<KeyHash, Artifacts>,
    /// Per week_start: (keys with an artifact, distinct artifacts beyond each key's first).
    counts: BTreeMap<i64, (i64, i64)>,
}

impl State {
    /// The part of `attempts` (whole jobs in job order).
    fn part(&self, attempts: &[RecordBatch]) -> Result<Part> {
        let Dealt { sums, mut shares } = self.deal(attempts, 1)?;
        let mut keys = shares.pop().expect("one share");
        keys.sort_unstable();
        keys.dedup();
        Ok(Part { sums, keys })
    }

    /// What the jobs of `attempts` (whole, in job order) add to the table: their sums by
    /// week_start, and each (week, idem_key, artifact_id) of their attempts with an artifact,
    /// hashed, dealt among `shares` shares by the key's hash (repeats included).
    fn deal(&self, attempts: &[RecordBatch], shares: usize) -> Result<Dealt> {
        use std::hash::BuildHasher;
        let mut sums: BTreeMap<i64, Sums> = BTreeMap::new();
        // Each attempt with an artifact gives one entry: room for a share's and a little more,
        // so that no vector is copied as it grows (at 10 M attempts they hold 240 MB).
        let mut with_artifact = 0;
        for batch in attempts {
            let a = job_attempt::column(batch, "artifact_id")?;
            with_artifact += a.len() - a.null_count();
        }
        let room = crate::engine::parallel::share_room(with_artifact, shares);
        let mut keys: Vec<Vec<KeyEntry>> = (0..shares).map(|_| Vec::with_capacity(room)).collect();
        walk(attempts, |job, artifacts| {
            let week = week_start_of(job.first_start);
            sums.entry(week).or_default().add(&job.sums(artifacts), 1);
            for &(key, artifact) in artifacts {
                let k = (
                    self.hashers.0.hash_one((week, key)),
                    self.hashers.1.hash_one((week, key)),
                );
                keys[(k.1 % shares as u64) as usize].push((week, k, self.hashers.0.hash_one(artifact)));
            }
        })?;
        Ok(Dealt { sums, shares: keys })
    }

    /// Adds `part` to the totals (`sign` 1), or takes it out (-1).
    fn apply(&mut self, part: &Part, sign: i64) {
        for (week, sums) in &part.sums {
            let total = self.sums.entry(*week).or_default();
            total.add(sums, sign);
            if *total == Sums::default() {
                self.sums.remove(week);
            }
        }
        for &(week, key, artifact) in &part.keys {
            use datafusion::common::hash_map::Entry;
            let (before, after) = match self.keys.entry(key) {
                Entry::Occupied(mut held) => {
                    let before = held.get().len();
                    if sign > 0 {
                        held.get_mut().add(artifact);
                        (before, held.get().len())
                    } else if held.get_mut().take_out(artifact) {
                        (before, held.get().len())
                    } else {
                        held.remove();
                        (before, 0)
                    }
                }
                Entry::Vacant(new) if sign > 0 => {
                    new.insert(Artifacts {
                        first: (artifact, 1),
                        more: None,
                    });
                    (0, 1)
                }
                // Only a part added before is taken out: never reached.
                Entry::Vacant(_) => (0, 0),
            };
            let counts = self.counts.entry(week).or_default();
            counts.0 += i64::from(after > 0) - i64::from(before > 0);
            counts.1 += (after - 1).max(0) - (before - 1).max(0);
            if *counts == (0, 0) {
                self.counts.remove(&week);
            }
        }
    }
}

impl Kept {
    /// How many chunks this table has summed since it was made (a chunk taken from the kept parts
    /// is not counted).
    pub fn chunk_builds(&self) -> u64 {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The table at the attempt cache's current columns.
    ///
    /// Errors: the cache's.
    pub fn rows(&self, attempts: &crate::tables::job_attempt::AttemptCache) -> Result<Vec<RecordBatch>> {
        let (chunks, ids) = attempts.chunks(&COLUMNS)?;
        let mut state = crate::engine::cache_lock::lock_or_reset(&self.state, State::default);
        let state = &mut *state;
        let mut old = std::mem::take(&mut state.parts);
        let mut boundary: Vec<RecordBatch> = Vec::with_capacity(2 * chunks.len());
        // (chunk id, its inner jobs' rows) of the chunks not kept.
        let mut to_build: Vec<(u64, RecordBatch)> = Vec::new();
        for (chunk, &id) in chunks.iter().zip(&ids) {
            let n = chunk.num_rows();
            if n == 0 {
                continue;
            }
            let jobs = job_attempt::column(chunk, "job_id")?.as_string::<i32>();
            let head = (0..n).take_while(|&i| jobs.value(i) == jobs.value(0)).count();
            // A job that fills the chunk may go on in the next one: its rows are boundary rows.
            boundary.push(chunk.slice(0, head));
            if head == n {
                continue;
            }
            let tail = (0..n)
                .take_while(|&i| jobs.value(n - 1 - i) == jobs.value(n - 1))
                .count();
            match old.remove(&id) {
                Some(part) => {
                    state.parts.insert(id, part);
                }
                None => to_build.push((id, chunk.slice(head, n - head - tail))),
            }
            boundary.push(chunk.slice(n - tail, tail));
        }
        // The chunks new to this table are summed side by side, then added in turn.
        self.builds
            .fetch_add(to_build.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let shared: &State = state;
        let built = crate::engine::parallel::map(&to_build, |(_, inner)| shared.part(std::slice::from_ref(inner)))?;
        for ((id, _), part) in to_build.iter().zip(built) {
            state.apply(&part, 1);
            state.parts.insert(*id, part);
        }
        for part in old.into_values() {
            state.apply(&part, -1);
        }
        // Adjacent slices of one job are walked as one job.
        let part = state.part(&boundary)?;
        let previous = std::mem::take(&mut state.boundary);
        state.apply(&previous, -1);
        state.apply(&part, 1);
        state.boundary = part;
        let rows: Vec<(i64, Sums, i64, i64)> = state
            .sums
            .iter()
            .filter(|(_, s)| s.jobs > 0)
            .map(|(week, s)| {
                let (unique, duplicates) = state.counts.get(week).copied().unwrap_or_default();
                (*week, *s, unique, duplicates)
            })
            .collect();
        to_batch(rows.into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::compute::concat_batches;
    use laneledger_store::Lane;

    /// However the attempts are cut into batches and runs (jobs across batch ends, an empty
    /// batch, a batch of one job's rows), the table by hash equals the table counted whole:
    /// idem_keys shared by jobs of one week and of two, artifacts repeated under a key and not.
    #[test]
    fn the_table_by_hash_in_runs_equals_the_table_counted_whole() {
        const DAY: i64 = 86_400_000_000;
        let mut rng = laneledger_store::drill::SplitMix64::new(7);
        let mut next = move |n: u64| rng.next_u64() % n;
        let mut rows = Vec::new();
        for job in 0..6_000 {
            let start = 1_796_083_200_000_000 + next(30) as i64 * DAY;
            let idem = match next(3) {
                0 => format!("k-busy-{}", next(200)),
                _ => format!("k-{job}"),
            };
            for attempt in 1..=1 + next(4) as u32 {
                let mut r = job_attempt::tests::stored(&format!("j-{job:05}"), attempt, next(100));
                r.attempt.idem_key = idem.clone();
                r.attempt.started_at = start + attempt as i64;
                r.attempt.lane = if next(2) == 0 { Lane::Free } else { Lane::Paid };
                r.attempt.tokens_out = Some(next(50));
                r.attempt.artifact_id = match next(4) {
                    0 => None,
                    1 => Some(format!("a-{}", next(5))),
                    _ => Some(format!("a-{job}")),
                };
                rows.push(r);
            }
        }
        let whole = job_attempt::to_batches(&rows).unwrap();
        let one = concat_batches(&whole[0].schema(), &whole).unwrap();
        let expected = week_rollup(std::slice::from_ref(&one)).unwrap();
        assert!(expected[0].num_rows() >= 5);
        let batches = job_attempt::tests::cut(&rows, &[3, 1, 0, 777, 2, 4_001]);
        assert_eq!(week_rollup_by_hash(&batches).unwrap(), expected);
        for n in [1, 2, 3, 7, 64, 100_000] {
            let runs = runs_of_jobs(&batches, n).unwrap();
            let cut: Vec<RecordBatch> = runs.iter().flatten().cloned().collect();
            assert_eq!(concat_batches(&one.schema(), &cut).unwrap(), one, "{n} runs");
            // No job in two runs.
            let last_and_first: Vec<(String, String)> = runs
                .windows(2)
                .map(|w| {
                    let job = |b: &RecordBatch, i: usize| {
                        job_attempt::column(b, "job_id")
                            .unwrap()
                            .as_string::<i32>()
                            .value(i)
                            .to_string()
                    };
                    let l = w[0].iter().rev().find(|b| b.num_rows() > 0).unwrap();
                    let f = w[1].iter().find(|b| b.num_rows() > 0).unwrap();
                    (job(l, l.num_rows() - 1), job(f, 0))
                })
                .collect();
            assert!(last_and_first.iter().all(|(l, f)| l != f), "{n} runs");
            assert!(runs.len() <= n.max(1) + 1, "{n} runs: {}", runs.len());
            if n <= 7 {
                assert_eq!(runs.len(), n, "{n} runs");
            }
        }
    }
}
